//! Security for every front end (docs/security.md): [`tls`] turns a `tls:` config section
//! into a listener's TLS (its certificate and CA reloaded from disk when they change) or a
//! client's.
//!
//! Depends on `config` only; the role runner, the Kafka front end and the SDK use it.

pub mod acl;
pub mod principal;
pub mod scram;
pub mod store;
pub mod tls;

pub use principal::Principal;
pub use tls::{ServerTls, TlsError};
