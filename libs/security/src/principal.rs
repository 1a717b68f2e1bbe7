//! Who a request comes from. A principal is named as Kafka names one, `User:<name>`: the
//! common name of a verified client certificate, the owner of a bearer token, or a SASL user.
//! A connection that proved nothing is `User:ANONYMOUS`.

use std::fmt;
use std::sync::Arc;

/// An authenticated (or anonymous) identity.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Principal(Arc<str>);

impl Principal {
    /// The principal of a connection that authenticated no one.
    pub const ANONYMOUS: &'static str = "ANONYMOUS";

    /// `User:<name>` for `name` (given with or without the `User:` prefix).
    pub fn user(name: &str) -> Principal {
        Principal(name.strip_prefix("User:").unwrap_or(name).into())
    }

    pub fn anonymous() -> Principal {
        Principal::user(Self::ANONYMOUS)
    }

    /// The name without `User:`.
    pub fn name(&self) -> &str {
        &self.0
    }

    pub fn is_anonymous(&self) -> bool {
        &*self.0 == Self::ANONYMOUS
    }

    /// The principal of a verified client certificate: its subject's common name.
    pub fn of_certificate(der: &[u8]) -> Option<Principal> {
        common_name(der).filter(|n| !n.is_empty()).map(|n| Principal::user(&n))
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User:{}", self.0)
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User:{}", self.0)
    }
}

/// One DER element: its tag and its contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81..=0x84 => {
            let n = usize::from(first & 0x7f);
            if rest.len() < n {
                return None;
            }
            let len = rest[..n].iter().fold(0usize, |l, b| (l << 8) | usize::from(*b));
            (len, &rest[n..])
        }
        _ => return None,
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// id-at-commonName, 2.5.4.3.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The subject common name of an X.509 certificate (the last, if several); `None` when the
/// bytes are not a certificate or the subject has none. Reads only what it needs, bounded by
/// the input (a verified certificate, but parsed defensively all the same).
pub fn common_name(der: &[u8]) -> Option<String> {
    let (SEQUENCE, cert, _) = element(der)? else { return None };
    let (SEQUENCE, tbs, _) = element(cert)? else { return None };
    let mut rest = tbs;
    // [0] version (optional), serial, signature algorithm, issuer, validity, then subject.
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (SEQUENCE, mut subject, _) = element(rest)? else { return None };
    let mut found = None;
    while !subject.is_empty() {
        let (SET, mut set, next) = element(subject)? else { return None };
        subject = next;
        while !set.is_empty() {
            let (SEQUENCE, pair, next) = element(set)? else { return None };
            set = next;
            let (OID, oid, value) = element(pair)? else { return None };
            if oid == COMMON_NAME {
                let (_, text, _) = element(value)?;
                found = Some(String::from_utf8_lossy(text).into_owned());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificates_common_name_is_its_principal() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let pki = testkit::certs::Pki::new(dir.path(), "p")?;
        for name in ["alice", "writer-0.lakelog.svc", "ünïcode"] {
            let issued = pki.issue("c", name)?;
            let der = crate::tls::read_certs(&issued.cert)?;
            let p = Principal::of_certificate(&der[0]).ok_or_else(|| anyhow::anyhow!("none"))?;
            assert_eq!(p.to_string(), format!("User:{name}"));
        }
        // The CA's own certificate (a longer subject) and every truncation of a leaf.
        let ca = crate::tls::read_certs(&pki.ca())?;
        assert_eq!(common_name(&ca[0]).as_deref(), Some("p test CA"));
        let leaf = crate::tls::read_certs(&pki.issue("c", "bob")?.cert)?;
        for cut in 0..leaf[0].len() {
            let _ = common_name(&leaf[0][..cut]);
        }
        assert_eq!(common_name(b"not a certificate"), None);
        assert_eq!(Principal::user("User:x"), Principal::user("x"));
        assert!(Principal::anonymous().is_anonymous());
        Ok(())
    }
}
