//! Integration tests of the metadata crate: one binary (link time), modules per subject.

mod conformance;
mod embedded_crash;
mod etcd_faults;
mod etcd_tls;
