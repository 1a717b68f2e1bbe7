//! SASL for the Kafka listener: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) and
//! PLAIN (RFC 4616), verified against salted credentials ([`Credential`]); no password is
//! stored. A SCRAM exchange checks that the final message repeats the nonce the server sent
//! (a mismatch fails it), and compares keys in constant time.

use std::num::NonZeroU32;

use aws_lc_rs::{constant_time, digest, hmac, pbkdf2};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

/// The iterations a new credential gets (Kafka's minimum and default is 4096).
pub const DEFAULT_ITERATIONS: u32 = 8192;

/// The fewest iterations a credential may have.
pub const MIN_ITERATIONS: u32 = 4096;
/// The most (Kafka's bound: a login costs the server this many hashes).
pub const MAX_ITERATIONS: u32 = 16384;

/// A SCRAM hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::ScramSha256, Mechanism::ScramSha512];

    /// The SASL name: `SCRAM-SHA-256`, `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The salted password's length: the hash's output.
    pub fn salted_len(self) -> usize {
        self.len()
    }

    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    fn prf(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::ScramSha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::ScramSha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Mechanism::ScramSha256 => hmac::HMAC_SHA256,
            Mechanism::ScramSha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::ScramSha256 => &digest::SHA256,
            Mechanism::ScramSha512 => &digest::SHA512,
        }
    }

    fn len(self) -> usize {
        match self {
            Mechanism::ScramSha256 => 32,
            Mechanism::ScramSha512 => 64,
        }
    }
}

/// What is stored of a password for one mechanism: salt, iterations, StoredKey, ServerKey.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub mechanism: Mechanism,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

fn mac(m: Mechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(m.hmac(), key), data).as_ref().to_vec()
}

/// `Hi(password, salt, iterations)`: what a client salts a password into (and Kafka's
/// AlterUserScramCredentials carries).
pub fn salted(m: Mechanism, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut out = vec![0u8; m.len()];
    let n = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(m.prf(), n, salt, password.as_bytes(), &mut out);
    out
}

/// `n` random bytes from the system's generator.
pub fn random_bytes(n: usize) -> Result<Vec<u8>, String> {
    use aws_lc_rs::rand::SecureRandom;
    let mut b = vec![0u8; n];
    aws_lc_rs::rand::SystemRandom::new().fill(&mut b).map_err(|_| "no randomness".to_owned())?;
    Ok(b)
}

impl Credential {
    /// A new credential for `password`: a random 32-byte salt and `iterations`.
    pub fn new(m: Mechanism, password: &str, iterations: u32) -> Result<Credential, String> {
        if iterations < MIN_ITERATIONS {
            return Err(format!("iterations must be at least {MIN_ITERATIONS}"));
        }
        Ok(Credential::with_salt(m, password, random_bytes(32)?, iterations))
    }

    fn with_salt(m: Mechanism, password: &str, salt: Vec<u8>, iterations: u32) -> Credential {
        let salted = salted(m, password, &salt, iterations);
        Credential::from_salted(m, &salted, salt, iterations)
    }

    /// The credential of a password a client salted itself (Kafka's AlterUserScramCredentials
    /// sends `Hi(password, salt, iterations)`, never the password).
    pub fn from_salted(m: Mechanism, salted: &[u8], salt: Vec<u8>, iterations: u32) -> Credential {
        let client_key = mac(m, salted, b"Client Key");
        Credential {
            mechanism: m,
            stored_key: digest::digest(m.digest(), &client_key).as_ref().to_vec(),
            server_key: mac(m, salted, b"Server Key"),
            salt,
            iterations,
        }
    }

    /// Whether `password` is the one this credential was made from (PLAIN), in constant time.
    pub fn verify_password(&self, password: &str) -> bool {
        let again =
            Credential::with_salt(self.mechanism, password, self.salt.clone(), self.iterations);
        constant_time::verify_slices_are_equal(&again.stored_key, &self.stored_key).is_ok()
    }
}

/// Why authentication failed: one generic reason for the client (Kafka's wording), the detail
/// for the log.
#[derive(Debug, thiserror::Error)]
#[error("Authentication failed: {detail}")]
pub struct AuthFailed {
    pub detail: String,
}

fn failed(detail: impl Into<String>) -> AuthFailed {
    AuthFailed { detail: detail.into() }
}

/// A PLAIN message, `[authzid] NUL authcid NUL password`: the user and password. An authzid
/// other than the user is refused (no impersonation).
pub fn parse_plain(msg: &[u8]) -> Result<(String, String), AuthFailed> {
    let text = std::str::from_utf8(msg).map_err(|_| failed("PLAIN message is not UTF-8"))?;
    let mut parts = text.split('\0');
    let (Some(authz), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(failed("malformed PLAIN message"));
    };
    if user.is_empty() {
        return Err(failed("PLAIN message without a user"));
    }
    if !authz.is_empty() && authz != user {
        return Err(failed("authorization id differs from the user"));
    }
    Ok((user.to_owned(), password.to_owned()))
}

/// A SCRAM server exchange in progress (one per connection).
#[derive(Debug)]
pub struct ScramServer {
    mechanism: Mechanism,
    state: State,
    /// The server's part of the nonce; random unless a test fixes it.
    server_nonce: Option<String>,
}

#[derive(Debug)]
enum State {
    First,
    Final {
        user: String,
        credential: Credential,
        gs2: String,
        client_nonce: String,
        nonce: String,
        auth_prefix: String,
    },
    Done,
}

/// SCRAM's `saslname`: `=2C` is `,`, `=3D` is `=`; any other `=` is malformed.
fn unescape(name: &str) -> Result<String, AuthFailed> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(failed("malformed user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

impl ScramServer {
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Whether the next message is the client's first.
    pub fn awaiting_first(&self) -> bool {
        matches!(self.state, State::First)
    }

    pub fn new(mechanism: Mechanism) -> ScramServer {
        ScramServer { mechanism, state: State::First, server_nonce: None }
    }

    /// Answers the client's first message (`n,,n=<user>,r=<nonce>`): the user's credential
    /// comes from `lookup` (none: failed, without saying whether the user exists).
    pub fn first(
        &mut self,
        msg: &[u8],
        lookup: impl FnOnce(&str) -> Option<Credential>,
    ) -> Result<Vec<u8>, AuthFailed> {
        if !matches!(self.state, State::First) {
            return Err(failed("SCRAM message out of order"));
        }
        self.state = State::Done;
        let text = std::str::from_utf8(msg).map_err(|_| failed("SCRAM message is not UTF-8"))?;
        // gs2-header: a channel-binding flag (only `n`, or `y`: none is offered), an optional
        // authzid, then the bare message.
        let (flag, rest) = text.split_once(',').ok_or_else(|| failed("malformed SCRAM message"))?;
        if flag != "n" && flag != "y" {
            return Err(failed("channel binding is not supported"));
        }
        let (authz, bare) =
            rest.split_once(',').ok_or_else(|| failed("malformed SCRAM message"))?;
        let gs2 = format!("{flag},{authz},");
        let mut attrs = bare.split(',');
        let user = match attrs.next() {
            Some(n) if n.starts_with("n=") => unescape(&n[2..])?,
            _ => return Err(failed("SCRAM message without a user")),
        };
        let client_nonce = match attrs.next() {
            Some(r) if r.starts_with("r=") && r.len() > 2 => &r[2..],
            _ => return Err(failed("SCRAM message without a nonce")),
        };
        if !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
            return Err(failed("malformed nonce"));
        }
        if !authz.is_empty()
            && authz.strip_prefix("a=").map(unescape).transpose()?.as_deref() != Some(&*user)
        {
            return Err(failed("authorization id differs from the user"));
        }
        let credential = lookup(&user)
            .filter(|c| c.mechanism == self.mechanism)
            .ok_or_else(|| failed("invalid user credentials"))?;
        let server_nonce = match self.server_nonce.take() {
            Some(n) => n,
            None => base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(random_bytes(24).map_err(failed)?),
        };
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first =
            format!("r={nonce},s={},i={}", B64.encode(&credential.salt), credential.iterations);
        let auth_prefix = format!("{bare},{server_first}");
        let client_nonce = client_nonce.to_owned();
        self.state = State::Final { user, credential, gs2, client_nonce, nonce, auth_prefix };
        Ok(server_first.into_bytes())
    }

    /// Checks the client's final message (`c=…,r=…,p=…`): the user authenticated, and the
    /// server's final message (`v=…`) to send.
    pub fn last(&mut self, msg: &[u8]) -> Result<(String, Vec<u8>), AuthFailed> {
        let State::Final { user, credential, gs2, client_nonce, nonce, auth_prefix } =
            std::mem::replace(&mut self.state, State::Done)
        else {
            return Err(failed("SCRAM message out of order"));
        };
        let m = self.mechanism;
        let text = std::str::from_utf8(msg).map_err(|_| failed("SCRAM message is not UTF-8"))?;
        let (without_proof, proof) =
            text.rsplit_once(",p=").ok_or_else(|| failed("SCRAM final message without a proof"))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs.next().and_then(|c| c.strip_prefix("c=")).unwrap_or_default();
        if B64.decode(binding).ok().as_deref() != Some(gs2.as_bytes()) {
            return Err(failed("channel binding does not match"));
        }
        // The nonce must be exactly the one sent (CVE-2024-56128: a server that did not check
        // it let a recorded exchange be replayed).
        // librdkafka before 2.6.1 (kcat's 2.0.2 among them) sends the client's nonce, then
        // the whole nonce again: accepted as well, as it still holds this exchange's fresh
        // server nonce whole, and nothing else.
        let sent = attrs.next().and_then(|r| r.strip_prefix("r="));
        let doubled = sent.and_then(|r| r.strip_prefix(client_nonce.as_str()));
        if sent != Some(nonce.as_str()) && doubled != Some(nonce.as_str()) {
            return Err(failed("nonce mismatch"));
        }
        let proof = B64.decode(proof).map_err(|_| failed("malformed proof"))?;
        if proof.len() != m.len() {
            return Err(failed("malformed proof"));
        }
        let auth_message = format!("{auth_prefix},{without_proof}");
        let signature = mac(m, &credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let stored = digest::digest(m.digest(), &client_key);
        if constant_time::verify_slices_are_equal(stored.as_ref(), &credential.stored_key).is_err()
        {
            return Err(failed("invalid user credentials"));
        }
        let server_signature = mac(m, &credential.server_key, auth_message.as_bytes());
        Ok((user, format!("v={}", B64.encode(server_signature)).into_bytes()))
    }
}

/// A SCRAM client (RFC 5802 §3): Lakelog's own Kafka tools and tests authenticate with it.
#[derive(Debug)]
pub struct ScramClient {
    mechanism: Mechanism,
    password: String,
    first_bare: String,
    nonce: String,
    server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    /// The client of `user` with `password`; its first message.
    pub fn new(m: Mechanism, user: &str, password: &str) -> Result<(ScramClient, Vec<u8>), String> {
        let nonce = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes(18)?);
        let name = user.replace('=', "=3D").replace(',', "=2C");
        let first_bare = format!("n={name},r={nonce}");
        let msg = format!("n,,{first_bare}").into_bytes();
        let c = ScramClient {
            mechanism: m,
            password: password.to_owned(),
            first_bare,
            nonce,
            server_signature: None,
        };
        Ok((c, msg))
    }

    /// The final message answering the server's first.
    pub fn last(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let m = self.mechanism;
        let text = std::str::from_utf8(server_first).map_err(|e| e.to_string())?;
        let mut nonce = None;
        let (mut salt, mut iterations) = (None, None);
        for a in text.split(',') {
            match a.split_at_checked(2) {
                Some(("r=", v)) => nonce = Some(v),
                Some(("s=", v)) => salt = B64.decode(v).ok(),
                Some(("i=", v)) => iterations = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("malformed server message `{text}`"));
        };
        if !nonce.starts_with(&self.nonce) || iterations < MIN_ITERATIONS {
            return Err("server nonce or iterations refused".to_owned());
        }
        let salted = salted(m, &self.password, &salt, iterations);
        let client_key = mac(m, &salted, b"Client Key");
        let stored = digest::digest(m.digest(), &client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode("n,,"));
        let auth = format!("{},{text},{without_proof}", self.first_bare);
        let signature = mac(m, stored.as_ref(), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        self.server_signature = Some(mac(m, &mac(m, &salted, b"Server Key"), auth.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Whether the server's final message proves it knew the credential.
    pub fn verify(&self, server_final: &[u8]) -> bool {
        let Some(want) = &self.server_signature else { return false };
        let got = server_final.strip_prefix(b"v=").and_then(|v| B64.decode(v).ok());
        got.is_some_and(|g| constant_time::verify_slices_are_equal(&g, want).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_and_the_server_agree_and_the_client_checks_the_server() -> Result<(), String> {
        for m in Mechanism::ALL {
            let cred = Credential::new(m, "pw,=x", MIN_ITERATIONS)?;
            let (mut c, first) = ScramClient::new(m, "a,b=c", "pw,=x")?;
            let mut s = ScramServer::new(m);
            let sf = s
                .first(&first, |u| (u == "a,b=c").then(|| cred.clone()))
                .map_err(|e| e.to_string())?;
            let fin = c.last(&sf)?;
            let (user, v) = s.last(&fin).map_err(|e| e.to_string())?;
            assert_eq!(user, "a,b=c");
            assert!(c.verify(&v));
            assert!(!c.verify(b"v=AAAA"));
        }
        Ok(())
    }

    /// A SCRAM client, as RFC 5802 §3 computes it.
    fn client_final(
        m: Mechanism,
        password: &str,
        first_bare: &str,
        server_first: &str,
    ) -> (String, Vec<u8>) {
        client_final_with(m, password, first_bare, server_first, "")
    }

    /// [`client_final`], with `before` sent ahead of the nonce (librdkafka < 2.6.1 repeats
    /// its own nonce there).
    fn client_final_with(
        m: Mechanism,
        password: &str,
        first_bare: &str,
        server_first: &str,
        before: &str,
    ) -> (String, Vec<u8>) {
        let attrs: Vec<&str> = server_first.split(',').collect();
        let nonce = &attrs[0][2..];
        let salt = B64.decode(&attrs[1][2..]).unwrap_or_default();
        let iterations: u32 = attrs[2][2..].parse().unwrap_or(0);
        let salted = salted(m, password, &salt, iterations);
        let client_key = mac(m, &salted, b"Client Key");
        let stored = digest::digest(m.digest(), &client_key);
        let without_proof = format!("c={},r={before}{nonce}", B64.encode("n,,"));
        let auth = format!("{first_bare},{server_first},{without_proof}");
        let sig = mac(m, stored.as_ref(), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let server_sig = mac(m, &mac(m, &salted, b"Server Key"), auth.as_bytes());
        (format!("{without_proof},p={}", B64.encode(proof)), server_sig)
    }

    #[test]
    fn rfc_7677_test_vector_sha256_verifies() -> Result<(), AuthFailed> {
        // RFC 7677 §3, every message as printed there.
        let m = Mechanism::ScramSha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap_or_default();
        let cred = Credential::with_salt(m, "pencil", salt, 4096);
        let mut s = ScramServer::new(m);
        s.server_nonce = Some("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".to_owned());
        let first = s.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", |_| Some(cred.clone()))?;
        assert_eq!(
            first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let (user, v) = s.last(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
              p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        )?;
        assert_eq!(user, "user");
        assert_eq!(v, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        Ok(())
    }

    #[test]
    fn wrong_passwords_replayed_nonces_and_malformed_messages_fail() -> Result<(), String> {
        for m in Mechanism::ALL {
            let cred = Credential::new(m, "s3cret", MIN_ITERATIONS)?;
            let lookup = |u: &str| (u == "alice").then(|| cred.clone());
            let run = |password: &str, tamper: &dyn Fn(String) -> String| {
                let mut s = ScramServer::new(m);
                let first = s.first(b"n,,n=alice,r=abc123", lookup).map_err(|e| e.to_string())?;
                let server_first = String::from_utf8(first).map_err(|e| e.to_string())?;
                let (fin, _) = client_final(m, password, "n=alice,r=abc123", &server_first);
                s.last(tamper(fin).as_bytes()).map(|(u, _)| u).map_err(|e| e.to_string())
            };
            assert_eq!(run("s3cret", &|f| f)?, "alice");
            assert!(run("wrong", &|f| f).is_err());
            // The client-chosen nonce alone (a replay of another exchange), or another.
            let replay = |f: String| {
                let (head, rest) = f.split_once(",r=").unwrap_or_default();
                let (_, tail) = rest.split_once(",p=").unwrap_or_default();
                format!("{head},r=abc123,p={tail}")
            };
            assert!(run("s3cret", &replay).unwrap_err().contains("nonce"));
            // The client nonce repeated ahead of the whole nonce (librdkafka < 2.6.1): taken;
            // anything else ahead of it: refused.
            for (before, ok) in [("abc123", true), ("abc12", false), ("xabc123", false)] {
                let mut s = ScramServer::new(m);
                let first = s.first(b"n,,n=alice,r=abc123", lookup).map_err(|e| e.to_string())?;
                let server_first = String::from_utf8(first).map_err(|e| e.to_string())?;
                let (fin, _) =
                    client_final_with(m, "s3cret", "n=alice,r=abc123", &server_first, before);
                assert_eq!(s.last(fin.as_bytes()).is_ok(), ok, "{before}");
            }
            assert!(run("s3cret", &|f| f.replace("c=biws", "c=eSws")).is_err());
            let mut s = ScramServer::new(m);
            assert!(s.first(b"n,,n=bob,r=x", lookup).is_err(), "unknown user");
            for bad in [
                &b""[..],
                b"p=tls-unique,,n=alice,r=x",
                b"n,,r=x",
                b"n,,n=alice",
                b"n,a=bob,n=alice,r=x",
                b"n,,n=al=ice,r=x",
                b"\xff",
            ] {
                assert!(ScramServer::new(m).first(bad, lookup).is_err(), "{bad:?}");
            }
            // Out of order: a final message first.
            assert!(ScramServer::new(m).last(b"c=biws,r=x,p=AAAA").is_err());
            assert!(cred.verify_password("s3cret") && !cred.verify_password("s3cret "));
        }
        assert!(Credential::new(Mechanism::ScramSha256, "x", 1000).is_err());
        Ok(())
    }

    #[test]
    fn plain_messages_parse_and_impersonation_is_refused() {
        assert_eq!(parse_plain(b"\0alice\0pw").ok(), Some(("alice".into(), "pw".into())));
        assert_eq!(parse_plain(b"alice\0alice\0pw").ok(), Some(("alice".into(), "pw".into())));
        for bad in [&b"bob\0alice\0pw"[..], b"\0\0pw", b"alice\0pw", b"\0a\0b\0c", b"\xff\0a\0b"] {
            assert!(parse_plain(bad).is_err(), "{bad:?}");
        }
    }
}
