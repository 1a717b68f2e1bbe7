//! Compaction, cleaning and lake tables against real parts: the embedded store with a local
//! directory, and a real etcd with a real S3 server (SeaweedFS). Each case runs against both.
//! Invariant numbers refer to ARCHITECTURE §7. The environments (and the metadata store that
//! fails on cue) are Level 1's own test harness, shared with `libs/logstore`'s tests.

#[macro_use]
#[path = "../../../logstore/tests/it/env.rs"]
mod env;
#[path = "../../../logstore/tests/it/faulty_meta.rs"]
mod faulty_meta;

mod cleaning;
mod compaction;
mod cutoff;
mod keys;
mod lake;
