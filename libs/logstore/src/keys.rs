//! The metadata key layout: the one place that names metadata keys. Every key lives under
//! `/<cluster>/`. Numbers are zero-padded to 20 digits so key order is numeric order.
//!
//! | key | value | written by | read by |
//! |---|---|---|---|
//! | `logs/next_id` | next unused LogId (decimal) | `create_log` (compare-and-set) | `create_log` |
//! | `logs/<id>/head` | [`LogHead`](crate::records::LogHead): state, epoch, owner slots, `fenced_by`, next offset, cumulative bytes, running max timestamp, last entry, `recent` (≤ 8 chunk locators) | writers (commits, slot takeover), `fence`/`activate`, `delete_log` | writers, readers |
//! | `logs/<id>/index/<offset>` | [`IndexPage`](crate::records::IndexPage): ≤ 8 chunk locators, the first at `<offset>`; immutable | writers (when `recent` spills) | readers (floor look-up) |
//! | `logs/<id>/start` | soft-trim start offset (decimal) | `soft_trim`, `hard_trim` | readers |
//! | `logs/<id>/wal_floor` | lower bound on the WAL sequence of every uncompacted chunk (decimal) | `create_log`; later the compaction swap | the cleaner |
//! | `logs/<id>/cleaned` | a compacted log's cleaned history, `end:time,…`: offsets below each `end` were first cleaned at that `time` (at most 32 pairs) | key compaction, after its swaps (compare-and-set) | key compaction (what is dirty; when a tombstone may go) |
//! | `logs/<id>/cursors/<name>/state` | [`CursorRecord`](crate::cursor): mark-delete position, properties | a cursor's `mark_delete`, `ack`, `seek` (compare-and-set) | cursors, stats |
//! | `logs/<id>/cursors/<name>/acks/<offset>` | individually acked ranges from `<offset>` to the next chunk's key (varint pairs; ≤ 64 KiB a chunk) | the cursor's `ack` (only chunks it changed) | cursors |
//! | `logs/<id>/producers/<slot>` | `<upto> <epoch> <object key>`: the slot's latest state checkpoint ([`slot_state`](crate::slot_state)), true of the log below `upto` | the slot's owner (compare-and-set, only forward) | the slot's next owner |
//! | `members/<role>/<id>` | [`MemberRecord`](crate::records::MemberRecord): gRPC and Kafka addresses, zone, node id (under its lease); create_revision = incarnation | each role at start | commits (compare), the catalog, Kafka Metadata |
//! | `kafka/node_ids/<member id>` | the member's Kafka node id (decimal); never changes | [`node_id`](crate::membership::node_id), create-only | the member at start |
//! | `kafka/next_node_id` | the next node id to hand out (decimal) | `node_id` (compare-and-set) | `node_id` |
//! | `kafka/groups/coordinators/<group>` | `<view> <incarnation> <writer id>`: the group's coordinator, the member-set revision it chose itself at and its incarnation; mod_revision = its tenure, compared by every write of the group | the coordinator taking the group (compare-and-set) | coordinators |
//! | `kafka/groups/states/<group>` | the group's membership as its coordinator last stored it (the `kafka` crate's `StoredGroup`) | the coordinator, under its tenure (a group that commits offsets has one) | the next coordinator; ListGroups (keys) |
//! | `kafka/groups/offsets/<group>/<log>` | `<partition> <topic>`: the group has a committed offset (the log's cursor `kafka.<group>`) | offset commits, under the tenure | OffsetFetch of all, DeleteGroups, expiry |
//! | `kafka/groups/shares/<group>/<log>` | `<partition> <topic>`: the share group has a share-partition on the log (its cursor `share.<group>`) | the partition's owner creating it; the coordinator altering it (AlterShareGroupOffsets), under its tenure | DescribeShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups |
//! | `kafka/next_producer_id` | the next Kafka producer id to hand out (decimal) | writers, a block at a time ([`producer_ids`](crate::membership::producer_ids)) | writers |
//! | `wal/next_seq` | next unallocated WAL sequence (decimal) | writers, a block at a time | `create_log`, the cleaner |
//! | `compaction/tasks/<log>` | the claiming compactor's id (under its lease); create_revision = the claim revision in its segment's key | a compactor (create-only) | compactors, the swap (compare) |
//! | `lake/<stream identity>/table` | a lake table's state (JSON, `lake::table::TableState`): its metadata JSON's location, snapshots, live manifests | the compaction swap that adds a segment (compare-and-set, in the same transaction) | compactors, the cleaner, the Iceberg catalog |
//! | `auth/tokens/<id>`, `auth/users/<name>`, `auth/acls/<digest>` | bearer tokens (SHA-256 of the secret), SASL users (salted SCRAM credentials), ACLs: the `security` crate's keys (`security::store`), listed here so this table is whole | the AuthService, Kafka's ACL APIs, bootstrap files | every role (a watched view) |
//! | `wal/low_water/<writer>` | lowest WAL sequence the writer may still commit (under its lease) | its writer: created with its first block, raised by commits | the cleaner |

use crate::LogId;

/// Builds keys under one cluster's prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    root: String,
}

impl Keys {
    pub fn new(cluster: &str) -> Self {
        Keys { root: format!("/{cluster}/") }
    }

    /// The cluster the keys are under.
    pub fn cluster(&self) -> &str {
        self.root.trim_matches('/')
    }

    fn key(&self, rest: std::fmt::Arguments<'_>) -> Vec<u8> {
        format!("{}{rest}", self.root).into_bytes()
    }

    pub fn next_log_id(&self) -> Vec<u8> {
        self.key(format_args!("logs/next_id"))
    }

    /// Every key of every log.
    pub fn logs_prefix(&self) -> Vec<u8> {
        self.key(format_args!("logs/"))
    }

    /// The log whose `wal_floor` key this is, if it is one.
    pub fn parse_wal_floor(&self, key: &[u8]) -> Option<LogId> {
        let rest = key.strip_prefix(self.logs_prefix().as_slice())?;
        let id = std::str::from_utf8(rest.strip_suffix(b"/wal_floor")?).ok()?;
        (id.len() == 20 && id.bytes().all(|b| b.is_ascii_digit()))
            .then(|| id.parse().ok().map(LogId))?
    }

    /// Every key of one log.
    pub fn log_prefix(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/", log.0))
    }

    pub fn head(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/head", log.0))
    }

    pub fn index_prefix(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/index/", log.0))
    }

    /// An aborted Kafka transaction paged out of the log's head, by its marker's offset.
    pub fn aborted(&self, log: LogId, last_offset: u64) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/aborted/{last_offset:020}", log.0))
    }

    pub fn index_page(&self, log: LogId, first_offset: u64) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/index/{first_offset:020}", log.0))
    }

    /// The first offset of an index page key, or `None` for another key.
    pub fn parse_index_page(&self, log: LogId, key: &[u8]) -> Option<u64> {
        let rest = key.strip_prefix(self.index_prefix(log).as_slice())?;
        let s = std::str::from_utf8(rest).ok()?;
        (s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    }

    pub fn start(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/start", log.0))
    }

    /// A compacted log's cleaned history (key compaction): `end:time,…`.
    pub fn cleaned(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/cleaned", log.0))
    }

    pub fn wal_floor(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/wal_floor", log.0))
    }

    /// Every per-slot state checkpoint pointer of one log: `logs/<id>/producers/`.
    pub fn producers_prefix(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/producers/", log.0))
    }

    /// The pointer to the latest state checkpoint of a log's slot (the Kafka front end's
    /// idempotent producers, ARCHITECTURE §11).
    pub fn producers(&self, log: LogId, slot: &str) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/producers/{slot}", log.0))
    }

    /// Every cursor of one log: `logs/<id>/cursors/`.
    pub fn cursors_prefix(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/cursors/", log.0))
    }

    /// A cursor's state: mark-delete position and properties.
    pub fn cursor_state(&self, log: LogId, name: &str) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/cursors/{name}/state", log.0))
    }

    /// A cursor's individually acknowledged ranges, in chunks keyed by their first offset.
    pub fn cursor_acks_prefix(&self, log: LogId, name: &str) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/cursors/{name}/acks/", log.0))
    }

    pub fn cursor_ack_chunk(&self, log: LogId, name: &str, first: u64) -> Vec<u8> {
        self.key(format_args!("logs/{:020}/cursors/{name}/acks/{first:020}", log.0))
    }

    pub fn member(&self, role: &str, id: &str) -> Vec<u8> {
        self.key(format_args!("members/{role}/{id}"))
    }

    /// A member's Kafka node id.
    pub fn node_id(&self, member: &str) -> Vec<u8> {
        self.key(format_args!("kafka/node_ids/{member}"))
    }

    /// Every Kafka group's coordinator record.
    pub fn group_coordinators(&self) -> Vec<u8> {
        self.key(format_args!("kafka/groups/coordinators/"))
    }

    /// A Kafka group's coordinator record; `group` is its encoded id (safe in a key).
    pub fn group_coordinator(&self, group: &str) -> Vec<u8> {
        self.key(format_args!("kafka/groups/coordinators/{group}"))
    }

    /// Every Kafka transactional id's state.
    pub fn txn_states(&self) -> Vec<u8> {
        self.key(format_args!("kafka/txns/states/"))
    }

    /// Every transaction marker waiting for its partition's owner.
    pub fn txn_markers(&self) -> Vec<u8> {
        self.key(format_args!("kafka/txns/markers/"))
    }

    /// A transaction marker waiting for the owner of `topic`'s `partition` (a Kafka topic's
    /// name is safe in a key).
    pub fn txn_marker(&self, topic: &str, partition: i32, producer_id: i64) -> Vec<u8> {
        self.key(format_args!("kafka/txns/markers/{topic}/{partition}/{producer_id}"))
    }

    /// A Kafka transactional id's state; `id` is its encoded id (safe in a key).
    pub fn txn_state(&self, id: &str) -> Vec<u8> {
        self.key(format_args!("kafka/txns/states/{id}"))
    }

    /// Every Kafka group's configs (one key per group that has any).
    pub fn group_configs(&self) -> Vec<u8> {
        self.key(format_args!("kafka/groups/configs/"))
    }

    /// A Kafka group's configs; `group` is its encoded id (safe in a key).
    pub fn group_config(&self, group: &str) -> Vec<u8> {
        self.key(format_args!("kafka/groups/configs/{group}"))
    }

    /// Every Kafka group's stored state (one key per group that exists: the group roster).
    pub fn group_states(&self) -> Vec<u8> {
        self.key(format_args!("kafka/groups/states/"))
    }

    /// A Kafka group's stored membership.
    pub fn group_state(&self, group: &str) -> Vec<u8> {
        self.key(format_args!("kafka/groups/states/{group}"))
    }

    /// The logs a Kafka group has committed offsets on.
    pub fn group_offsets(&self, group: &str) -> Vec<u8> {
        self.key(format_args!("kafka/groups/offsets/{group}/"))
    }

    /// That a Kafka group has a committed offset on `log`.
    pub fn group_offset(&self, group: &str, log: LogId) -> Vec<u8> {
        self.key(format_args!("kafka/groups/offsets/{group}/{:020}", log.0))
    }

    /// The logs a Kafka share group has a share-partition on.
    pub fn group_shares(&self, group: &str) -> Vec<u8> {
        self.key(format_args!("kafka/groups/shares/{group}/"))
    }

    /// That a Kafka share group has a share-partition on `log`.
    pub fn group_share(&self, group: &str, log: LogId) -> Vec<u8> {
        self.key(format_args!("kafka/groups/shares/{group}/{:020}", log.0))
    }

    /// Every offset of a Kafka group staged by a transaction not ended yet.
    pub fn group_pending(&self, group: &str) -> Vec<u8> {
        self.key(format_args!("kafka/groups/pending/{group}/"))
    }

    /// The offsets of a Kafka group staged by producer `producer_id`'s transaction.
    pub fn group_pending_of(&self, group: &str, producer_id: i64) -> Vec<u8> {
        self.key(format_args!("kafka/groups/pending/{group}/{producer_id}/"))
    }

    /// An offset on `log` of a Kafka group staged by producer `producer_id`'s transaction.
    pub fn group_pending_offset(&self, group: &str, producer_id: i64, log: LogId) -> Vec<u8> {
        self.key(format_args!("kafka/groups/pending/{group}/{producer_id}/{:020}", log.0))
    }

    /// The next Kafka producer id to hand out.
    pub fn next_producer_id(&self) -> Vec<u8> {
        self.key(format_args!("kafka/next_producer_id"))
    }

    /// The next Kafka node id to hand out.
    pub fn next_node_id(&self) -> Vec<u8> {
        self.key(format_args!("kafka/next_node_id"))
    }

    pub fn next_seq(&self) -> Vec<u8> {
        self.key(format_args!("wal/next_seq"))
    }

    /// A compactor's claim on one log (under the compactor's lease).
    pub fn compaction_task(&self, log: LogId) -> Vec<u8> {
        self.key(format_args!("compaction/tasks/{:020}", log.0))
    }

    /// Every compactor's claims.
    pub fn compaction_tasks_prefix(&self) -> Vec<u8> {
        self.key(format_args!("compaction/tasks/"))
    }

    /// The log whose claim key this is, if it is one.
    pub fn parse_compaction_task(&self, key: &[u8]) -> Option<LogId> {
        let rest = key.strip_prefix(self.compaction_tasks_prefix().as_slice())?;
        let id = std::str::from_utf8(rest).ok()?;
        (id.len() == 20 && id.bytes().all(|b| b.is_ascii_digit()))
            .then(|| id.parse().ok().map(LogId))?
    }

    /// The state of the lake table of the stream with this identity.
    pub fn lake_table(&self, stream_identity: &str) -> Vec<u8> {
        self.key(format_args!("lake/{stream_identity}/table"))
    }

    /// Every lake table's state.
    pub fn lake_tables_prefix(&self) -> Vec<u8> {
        self.key(format_args!("lake/"))
    }

    pub fn low_water_prefix(&self) -> Vec<u8> {
        self.key(format_args!("wal/low_water/"))
    }

    pub fn low_water(&self, writer: &str) -> Vec<u8> {
        self.key(format_args!("wal/low_water/{writer}"))
    }
}

/// Parses a decimal value written by this module.
pub fn parse_u64(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn index_page_keys_round_trip_and_sort_numerically(log in any::<u64>(), a in any::<u64>(), b in any::<u64>()) {
            let k = Keys::new("c");
            let (ka, kb) = (k.index_page(LogId(log), a), k.index_page(LogId(log), b));
            prop_assert_eq!(k.parse_index_page(LogId(log), &ka), Some(a));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert!(ka.starts_with(&k.log_prefix(LogId(log))));
            prop_assert_eq!(k.parse_index_page(LogId(log), &k.head(LogId(log))), None);
        }

        #[test]
        fn one_logs_keys_never_fall_under_anothers_prefix(a in any::<u64>(), b in any::<u64>()) {
            prop_assume!(a != b);
            let k = Keys::new("c");
            prop_assert!(!k.head(LogId(a)).starts_with(&k.log_prefix(LogId(b))));
            prop_assert!(!k.index_page(LogId(a), 0).starts_with(&k.index_prefix(LogId(b))));
        }
    }

    #[test]
    fn clusters_do_not_share_keys() {
        assert!(!Keys::new("a").head(LogId(1)).starts_with(b"/ab/"));
        assert_ne!(Keys::new("a").next_seq(), Keys::new("ab").next_seq());
    }
}
