//! A stream's configs: Kafka 4.4's topic configs (`LogConfig`, less its internal
//! `internal.segment.bytes`) and Lakelog's `lake.*`, and what the roles act on.

use super::Effect::{Honoured, Kept};
use super::Type::{self, Boolean, Double, Int, List, Long};
use super::Valid::*;
use super::{Configs, Def, Invalid, Table, def};

const SEGMENTS: &str = "no local segments: objects are written per flush and compacted";
const FLUSHES: &str = "every acknowledged record is durable in object storage already";
const REPLICAS: &str = "no replicas: object storage keeps the data durable";
const TIERING: &str = "every byte is in object storage already";
const COMPRESSION: &str = "batches are stored as the producer compressed them";
const SHARE_DLQ: &str = "share groups are not built yet";

/// `cleanup.policy`'s values.
pub const COMPACT: &str = "compact";
pub const DELETE: &str = "delete";

/// Every config, by name: Kafka 4.4's topic configs (`LogConfig`, less its internal
/// `internal.segment.bytes`) and Lakelog's `lake.*`.
pub const DEFS: &[Def] = &[
    def(
        "cleanup.policy",
        List,
        "delete",
        ListOf(&[COMPACT, DELETE]),
        Honoured,
        "delete: records go by retention.ms and retention.bytes; compact: each key's latest record is kept (at least); both: both",
    ),
    def(
        "compression.gzip.level",
        Int,
        "-1",
        BetweenOrMinusOne(1, 9),
        Kept(COMPRESSION),
        "The gzip level when compression.type is gzip",
    ),
    def(
        "compression.lz4.level",
        Int,
        "9",
        Between(1, 17),
        Kept(COMPRESSION),
        "The lz4 level when compression.type is lz4",
    ),
    def(
        "compression.type",
        Type::String,
        "producer",
        OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        Kept(COMPRESSION),
        "The codec batches are stored in; producer keeps the producer's",
    ),
    def(
        "compression.zstd.level",
        Int,
        "3",
        Between(-131_072, 22),
        Kept(COMPRESSION),
        "The zstd level when compression.type is zstd",
    ),
    def(
        "delete.retention.ms",
        Long,
        "86400000",
        AtLeast(0),
        Honoured,
        "How long a compacted topic keeps a tombstone (a record with a null value) once its key's older records are gone",
    ),
    def(
        "errors.deadletterqueue.group.enable",
        Boolean,
        "false",
        Any,
        Kept(SHARE_DLQ),
        "Whether share groups may write undeliverable records to this topic",
    ),
    def(
        "file.delete.delay.ms",
        Long,
        "60000",
        AtLeast(0),
        Kept(SEGMENTS),
        "How long a deleted segment file waits",
    ),
    def(
        "flush.messages",
        Long,
        "9223372036854775807",
        AtLeast(1),
        Kept(FLUSHES),
        "Records between forced flushes",
    ),
    def(
        "flush.ms",
        Long,
        "9223372036854775807",
        AtLeast(0),
        Kept(FLUSHES),
        "Time between forced flushes",
    ),
    def(
        "follower.replication.throttled.replicas",
        List,
        "",
        Replicas,
        Kept(REPLICAS),
        "Replicas whose follower replication is throttled",
    ),
    def(
        "index.interval.bytes",
        Int,
        "4096",
        AtLeast(0),
        Kept(SEGMENTS),
        "Bytes between offset index entries",
    ),
    def(
        "lake.retention.ms",
        Long,
        "-1",
        AtLeast(-1),
        Honoured,
        "How long the topic's Iceberg table keeps a day; -1 keeps all (at least retention.ms)",
    ),
    def(
        "lake.table",
        Boolean,
        "false",
        Any,
        Honoured,
        "The topic's compacted segments are the Parquet data files of its Iceberg table",
    ),
    def(
        "leader.replication.throttled.replicas",
        List,
        "",
        Replicas,
        Kept(REPLICAS),
        "Replicas whose leader replication is throttled",
    ),
    def(
        "local.retention.bytes",
        Long,
        "-2",
        AtLeast(-2),
        Kept(TIERING),
        "Bytes kept on local disk before tiering",
    ),
    def(
        "local.retention.ms",
        Long,
        "-2",
        AtLeast(-2),
        Kept(TIERING),
        "Time kept on local disk before tiering",
    ),
    def(
        "max.compaction.lag.ms",
        Long,
        "9223372036854775807",
        AtLeast(1),
        Honoured,
        "The longest a record of a compacted topic waits before it is eligible for compaction",
    ),
    def(
        "max.decompressed.message.bytes",
        Int,
        "2147483639",
        Between(1, 2_147_483_639),
        Kept(COMPRESSION),
        "The largest record once decompressed",
    ),
    def(
        "max.message.bytes",
        Int,
        "1048588",
        AtLeast(0),
        Honoured,
        "The largest record batch a produce may append (at most the writer's largest entry)",
    ),
    def(
        "message.timestamp.after.max.ms",
        Long,
        "3600000",
        AtLeast(0),
        Honoured,
        "How far past the writer's clock a CreateTime timestamp may be",
    ),
    def(
        "message.timestamp.before.max.ms",
        Long,
        "9223372036854775807",
        AtLeast(0),
        Honoured,
        "How far behind the writer's clock a CreateTime timestamp may be",
    ),
    def(
        "message.timestamp.type",
        Type::String,
        "CreateTime",
        OneOf(&["CreateTime", "LogAppendTime"]),
        Honoured,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the writer's time",
    ),
    def(
        "min.cleanable.dirty.ratio",
        Double,
        "0.5",
        Fraction,
        Honoured,
        "The share of a compacted topic's log not yet compacted that starts a compaction",
    ),
    def(
        "min.compaction.lag.ms",
        Long,
        "0",
        AtLeast(0),
        Honoured,
        "The least time a record of a compacted topic stays uncompacted",
    ),
    def(
        "min.insync.replicas",
        Int,
        "1",
        AtLeast(1),
        Kept(REPLICAS),
        "Replicas that must acknowledge a write with acks=all",
    ),
    def("preallocate", Boolean, "false", Any, Kept(SEGMENTS), "Preallocate segment files"),
    def(
        "remote.copy.lag.bytes",
        Long,
        "-1",
        AtLeast(-1),
        Kept(TIERING),
        "Bytes before a segment is copied to remote storage",
    ),
    def(
        "remote.copy.lag.ms",
        Long,
        "0",
        AtLeast(-1),
        Kept(TIERING),
        "Time before a segment is copied to remote storage",
    ),
    def(
        "remote.log.copy.disable",
        Boolean,
        "false",
        Any,
        Kept(TIERING),
        "Stop copying segments to remote storage",
    ),
    def(
        "remote.log.delete.on.disable",
        Boolean,
        "false",
        Any,
        Kept(TIERING),
        "Delete remote segments when tiering is disabled",
    ),
    def(
        "remote.storage.enable",
        Boolean,
        "false",
        Any,
        Kept(TIERING),
        "Tier segments to remote storage",
    ),
    def(
        "retention.bytes",
        Long,
        "-1",
        Any,
        Honoured,
        "The most payload bytes a partition keeps (delete policy); negative keeps all",
    ),
    def(
        "retention.ms",
        Long,
        "-1",
        AtLeast(-1),
        Honoured,
        "How long a record is kept (delete policy); -1 keeps all. Lakelog's default keeps all",
    ),
    def(
        "segment.bytes",
        Int,
        "1073741824",
        AtLeast(1_048_576),
        Kept(SEGMENTS),
        "Segment file size",
    ),
    def("segment.index.bytes", Int, "10485760", AtLeast(4), Kept(SEGMENTS), "Offset index size"),
    def("segment.jitter.ms", Long, "0", AtLeast(0), Kept(SEGMENTS), "Jitter of segment.ms"),
    def("segment.ms", Long, "604800000", AtLeast(1), Kept(SEGMENTS), "Time before a segment rolls"),
    def(
        "unclean.leader.election.enable",
        Boolean,
        "false",
        Any,
        Kept(REPLICAS),
        "Elect an out-of-sync replica as leader",
    ),
];

/// The config named `name`.
pub fn find(name: &str) -> Option<&'static Def> {
    super::find_in(DEFS, name)
}

/// The topic table: Kafka's topic configs and Lakelog's `lake.*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Topic;

/// A stream's configs: those set, by name, each in its canonical spelling. Every other config
/// has its [`Def::default`].
pub type StreamConfig = Configs<Topic>;

impl Table for Topic {
    const DEFS: &'static [Def] = DEFS;

    /// Checks the configs together: a table keeps at least what its log keeps.
    fn check(c: &StreamConfig) -> Result<(), Invalid> {
        let together = |m: &str| Err(Invalid::Together(m.to_owned()));
        if let Some(lake) = c.lake_retention_ms() {
            match c.retention_ms() {
                Some(log) if lake < log => {
                    return together("lake.retention.ms must be at least retention.ms");
                }
                None => {
                    return together(
                        "lake.retention.ms needs retention.ms set (the log keeps everything without it, and the table keeps at least what the log does)",
                    );
                }
                Some(_) => {}
            }
        }
        if c.lake_table() && c.cleanup().compact {
            return together("lake.table and cleanup.policy compact together are not built yet");
        }
        Ok(())
    }
}

/// What `cleanup.policy` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Records go by `retention.ms` and `retention.bytes`.
    pub delete: bool,
    /// Each key's latest record is kept, older ones go (key compaction).
    pub compact: bool,
}

impl Configs<Topic> {
    /// `retention.ms` when the delete policy applies and it is not -1.
    pub fn retention_ms(&self) -> Option<i64> {
        let ms = self.number("retention.ms");
        (self.cleanup().delete && ms >= 0).then_some(ms)
    }

    /// `retention.bytes` when the delete policy applies and it is not negative.
    pub fn retention_bytes(&self) -> Option<u64> {
        let bytes = self.number("retention.bytes");
        if self.cleanup().delete { u64::try_from(bytes).ok() } else { None }
    }

    /// `max.message.bytes` when set (unset, the writer's largest entry applies).
    pub fn max_message_bytes(&self) -> Option<u64> {
        self.get("max.message.bytes").and_then(|v| v.parse().ok())
    }

    /// `lake.table`.
    pub fn lake_table(&self) -> bool {
        self.get("lake.table") == Some("true")
    }

    /// `lake.retention.ms` when not -1.
    pub fn lake_retention_ms(&self) -> Option<i64> {
        let ms = self.number("lake.retention.ms");
        (ms >= 0 && self.get("lake.retention.ms").is_some()).then_some(ms)
    }

    /// `cleanup.policy`.
    pub fn cleanup(&self) -> Cleanup {
        let policy = self.value("cleanup.policy").map_or(DELETE, |(v, _)| v);
        let has = |p: &str| policy.split(',').any(|x| x == p);
        Cleanup { delete: has(DELETE), compact: has(COMPACT) }
    }

    /// `message.timestamp.type` is LogAppendTime: the writer stamps its time.
    pub fn log_append_time(&self) -> bool {
        self.get("message.timestamp.type") == Some("LogAppendTime")
    }

    /// `message.timestamp.before.max.ms` and `message.timestamp.after.max.ms`.
    pub fn timestamp_bounds_ms(&self) -> (i64, i64) {
        (
            self.number("message.timestamp.before.max.ms"),
            self.number("message.timestamp.after.max.ms"),
        )
    }

    /// `min.compaction.lag.ms`.
    pub fn min_compaction_lag_ms(&self) -> i64 {
        self.number("min.compaction.lag.ms")
    }

    /// `max.compaction.lag.ms`.
    pub fn max_compaction_lag_ms(&self) -> i64 {
        self.number("max.compaction.lag.ms")
    }

    /// `delete.retention.ms`.
    pub fn delete_retention_ms(&self) -> i64 {
        self.number("delete.retention.ms")
    }

    /// `min.cleanable.dirty.ratio`.
    pub fn min_cleanable_dirty_ratio(&self) -> f64 {
        self.value("min.cleanable.dirty.ratio").and_then(|(v, _)| v.parse().ok()).unwrap_or(0.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configs_are_kafkas_sorted_by_name_each_default_valid() {
        assert_eq!(
            DEFS.len(),
            39,
            "Kafka 4.4's 37 topic configs and lake.table, lake.retention.ms"
        );
        crate::tests::assert_defaults_valid(DEFS);
    }

    #[test]
    fn the_docs_table_lists_every_config_as_it_is() {
        crate::tests::assert_documented(DEFS, "topic-configs.md");
    }

    #[test]
    fn values_are_checked_as_kafka_checks_them_and_spelled_one_way() {
        let ok = |n: &str, v: &str| find(n).expect(n).check(v);
        assert_eq!(ok("cleanup.policy", " compact , delete").as_deref(), Ok("compact,delete"));
        assert_eq!(ok("preallocate", "TRUE").as_deref(), Ok("true"));
        assert_eq!(ok("retention.ms", "0").as_deref(), Ok("0"), "Kafka allows 0");
        assert_eq!(ok("retention.bytes", "-7").as_deref(), Ok("-7"));
        assert_eq!(ok("compression.gzip.level", "-1").as_deref(), Ok("-1"));
        assert_eq!(
            ok("leader.replication.throttled.replicas", "0:1, 1:2").as_deref(),
            Ok("0:1,1:2")
        );
        for (n, v) in [
            ("cleanup.policy", "compacted"),
            ("cleanup.policy", ""),
            ("retention.ms", "-2"),
            ("retention.ms", "x"),
            ("max.message.bytes", "2147483648"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("message.timestamp.type", "createtime"),
            ("compression.gzip.level", "0"),
            ("segment.bytes", "1024"),
            ("unclean.leader.election.enable", "yes"),
            ("follower.replication.throttled.replicas", "0-1"),
        ] {
            assert!(matches!(ok(n, v), Err(Invalid::Value { .. })), "{n}={v}");
        }
        let mut c = StreamConfig::default();
        assert_eq!(c.set("segment.bytez", "1"), Err(Invalid::Unknown("segment.bytez".into())));
    }

    #[test]
    fn retention_applies_only_under_the_delete_policy() {
        let c = StreamConfig::from_pairs([("retention.ms", "60000"), ("retention.bytes", "10")])
            .expect("valid");
        assert_eq!((c.retention_ms(), c.retention_bytes()), (Some(60_000), Some(10)));
        let compact =
            StreamConfig::from_pairs([("retention.ms", "60000"), ("cleanup.policy", "compact")])
                .expect("valid");
        assert_eq!((compact.retention_ms(), compact.cleanup().compact), (None, true));
        let both =
            StreamConfig::from_pairs([("retention.ms", "1"), ("cleanup.policy", "delete,compact")])
                .expect("valid");
        assert_eq!(
            (both.retention_ms(), both.cleanup()),
            (Some(1), Cleanup { delete: true, compact: true })
        );
        assert_eq!(StreamConfig::default().retention_ms(), None, "Lakelog keeps all by default");
    }

    #[test]
    fn configs_are_checked_together() {
        let lake = |pairs: &[(&str, &str)]| StreamConfig::from_pairs(pairs.iter().copied());
        assert!(lake(&[("lake.retention.ms", "10")]).is_err(), "needs retention.ms");
        assert!(lake(&[("lake.retention.ms", "10"), ("retention.ms", "20")]).is_err());
        assert!(lake(&[("lake.retention.ms", "20"), ("retention.ms", "20")]).is_ok());
        assert!(lake(&[("lake.table", "true"), ("cleanup.policy", "compact")]).is_err());
        let c = lake(&[("lake.table", "true"), ("max.message.bytes", "1000")]).expect("valid");
        assert_eq!((c.lake_table(), c.max_message_bytes()), (true, Some(1000)));
        let mut back = c.clone();
        back.reset("lake.table").expect("known");
        assert!(!back.lake_table());
        assert_eq!(back.value("lake.table"), Some(("false", false)));
        assert_eq!(c.value("lake.table"), Some(("true", true)));
    }
}
