//! The one `tls:` shape every section uses: a listener's (`writer.tls`, `reader.tls`,
//! `catalog.tls`, `maintenance.tls`, `writer.kafka.tls`, `reader.kafka.tls`) and a client's
//! (`metadata.etcd.tls`, `object_store.s3.tls`). The section present turns TLS on.

use std::path::PathBuf;

use serde::Deserialize;

use crate::Invalid;

/// Certificate, key and CA bundle, as PEM files. The files are read when the role starts and
/// again whenever they change on disk (a listener's new connections use the new certificate;
/// connections made before keep theirs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, leaf first. A listener's own certificate (required); a client's
    /// certificate for mutual TLS (optional).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The private key of `cert` (PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// CA certificates. A listener: clients present a certificate one of them signed (mutual
    /// TLS; see `client_auth`). A client: the roots it trusts, beside the system's.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// A listener with `ca`: whether a client must present a certificate (`required`, the
    /// default) or may connect without one to authenticate otherwise (`optional`: a bearer
    /// token, SASL).
    #[serde(default)]
    pub client_auth: ClientAuth,
}

/// Whether a listener with a CA bundle requires client certificates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    #[default]
    Required,
    Optional,
}

/// Authentication and authorization (docs/security.md), the same for every role.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Every client authenticates (a client certificate, a bearer token, SASL on Kafka) and
    /// every request is checked against the ACLs. Off by default: then anyone who reaches a
    /// port may do anything, and each role says so in its log when it starts.
    #[serde(default)]
    pub enabled: bool,
    /// Principals allowed everything, ACLs or not (`admin` or `User:admin`): the operators
    /// who manage ACLs and credentials, and the roles' own service principals.
    #[serde(default)]
    pub super_users: Vec<String>,
    /// SASL users to create or update at start, one `name:password` per line (a mounted
    /// Secret). Read by the roles that serve the AuthService (catalog, standalone).
    #[serde(default)]
    pub users_file: Option<std::path::PathBuf>,
    /// Bearer tokens to create or update at start, one `principal:llt_<id>_<secret>` per line.
    #[serde(default)]
    pub tokens_file: Option<std::path::PathBuf>,
}

impl AuthSection {
    pub fn check(&self) -> Result<(), Invalid> {
        for u in &self.super_users {
            let name = u.strip_prefix("User:").unwrap_or(u);
            if name.is_empty() || name == "*" || name.contains('/') {
                return Err(Invalid::new(
                    "auth.super_users",
                    format!("`{u}` must name one principal (not `*`)"),
                ));
            }
        }
        Ok(())
    }
}

/// The URL a listener on `listen` is reached at: `https://` with TLS, `http://` without.
pub fn url_of(listen: std::net::SocketAddr, tls: &Option<TlsConfig>) -> String {
    match tls {
        Some(_) => format!("https://{listen}"),
        None => format!("http://{listen}"),
    }
}

impl TlsConfig {
    /// A listener's TLS: its certificate and key are required.
    pub fn check_listener(&self, key: &str) -> Result<(), Invalid> {
        if self.cert.is_none() || self.key.is_none() {
            return Err(Invalid::new(key, "a listener's TLS needs `cert` and `key`"));
        }
        self.check_paths(key)
    }

    /// A client's TLS: a certificate goes with its key.
    pub fn check_client(&self, key: &str) -> Result<(), Invalid> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(Invalid::new(key, "`cert` and `key` go together"));
        }
        if self.client_auth != ClientAuth::default() {
            return Err(Invalid::new(key, "`client_auth` is a listener's setting"));
        }
        self.check_paths(key)
    }

    fn check_paths(&self, key: &str) -> Result<(), Invalid> {
        for (name, p) in [("cert", &self.cert), ("key", &self.key), ("ca", &self.ca)] {
            if p.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(Invalid::new(format!("{key}.{name}"), "must not be empty"));
            }
        }
        Ok(())
    }
}
