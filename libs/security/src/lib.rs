//! Security for every front end (docs/security.md): [`tls`] turns a `tls:` config section
//! into a listener's TLS (its certificate and CA reloaded from disk when they change) or a
//! client's; [`principal`] names who a request comes from; [`scram`] checks SASL passwords;
//! [`acl`] and [`authz`] decide what a principal may do; [`store`] keeps tokens, users and
//! ACLs in the metadata store, watched by every role; [`audit`] says what was refused, at a
//! bounded rate.
//!
//! Depends on `config` and `metadata`; the role runner (gRPC) and the Kafka front end
//! enforce what it decides, each in one place.

pub mod acl;
pub mod audit;
pub mod authz;
pub mod fields;
pub mod principal;
pub mod scram;
pub mod store;
pub mod tls;

pub use authz::Authorizer;
pub use principal::Principal;
pub use tls::{ServerTls, TlsError};
