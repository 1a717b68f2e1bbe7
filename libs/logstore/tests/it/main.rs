//! Log storage against real parts: the embedded store with a local directory, and a real etcd
//! with a real S3 server (SeaweedFS). Each case runs against both. Invariant numbers refer to
//! ARCHITECTURE §7.

#[macro_use]
mod env;

mod cases;
mod cursors;
mod failures;
mod faulty_meta;
mod flush_policy;
