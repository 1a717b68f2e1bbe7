//! The writer's Kafka broker over the in-memory metadata and object stores: what no other
//! crate's tests pin on their own, the idempotent producer's state carried from one owner of
//! a partition to the next (ARCHITECTURE §11: checkpoints and a replay of the log).

mod checksums;
mod groups;
mod metadata_cost;
mod tenure;
mod transactions;
