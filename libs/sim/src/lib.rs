//! Deterministic simulation of Lakelog's protocol (issue 17; ARCHITECTURE §3–5, §7): the real
//! roles' code (`LogStorage`: writers, their flusher and committer, fencing, handoffs) runs as
//! tasks on ONE current-thread tokio runtime with a paused clock, over the in-memory metadata
//! store with etcd's semantics ([`metadata::MemoryStore`]) behind a seeded fault wrapper
//! ([`meta_faults`]) and an in-memory object store behind the objstore fault wrapper. Clients
//! record an operation history; [`history::check`] reports what the invariants forbid.
//!
//! Determinism: every random choice comes from the run's [`rng::Rng`] (SplitMix64 of the
//! seed), drawn in the order the single thread runs the tasks; the clock is tokio's paused one
//! (it moves only when every task waits, to the next timer); the metadata model keeps ordered
//! maps only; nothing in `logstore` draws randomness of its own (writer ids are given, object
//! names come from WAL sequences); the `tokio::select!`s on these paths are `biased` (tokio
//! picks among ready branches at random otherwise: that made one seed in 500 run two ways);
//! maps whose iteration order reaches the stores are ordered (std's `HashMap` iterates in a
//! per-process random order). A run's trace hash ([`scenario::Report::trace`]) is checked
//! equal across two runs of each of 20 seeds per group in `cargo test` (`SIM_DET_SEEDS` more).

mod compacted;
mod groups;
pub mod history;
pub mod kafka;
pub mod meta_faults;
pub mod rng;
pub mod scenario;
pub mod shares;
mod txns;
