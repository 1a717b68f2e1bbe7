//! Every config a stream has, one model for every way in: the SDK's and the CLI's stream
//! properties and a Kafka topic's configs are the same names, types, ranges and defaults
//! (Kafka 4.4's topic configs, `LogConfig`, and Lakelog's own `lake.*`), checked here once.
//!
//! A [`StreamConfig`] holds only the configs set, each in its canonical spelling; the typed
//! accessors answer what the roles act on. [`DEFS`] says of each config whether it is
//! [`Effect::Honoured`] here or [`Effect::Kept`]: stored and reported as set, with no effect in
//! a diskless log (segments, flushes, replicas). docs/kafka.md lists both.
//!
//! Depends on nothing but `thiserror`; the catalog stores a [`StreamConfig`] with each stream,
//! the Kafka front end answers DescribeConfigs and the config-altering APIs over [`DEFS`].

use std::collections::BTreeMap;

/// A config's type, as Kafka's DescribeConfigs names it (v3+'s `config_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    Boolean,
    String,
    Int,
    Long,
    Double,
    List,
}

impl Type {
    /// Kafka's code for the type in DescribeConfigs.
    pub fn kafka_code(self) -> i8 {
        match self {
            Type::Boolean => 1,
            Type::String => 2,
            Type::Int => 3,
            Type::Long => 5,
            Type::Double => 6,
            Type::List => 7,
        }
    }
}

/// What a config does here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Lakelog acts on it.
    Honoured,
    /// Stored and reported as set; it means nothing in a log with no local disk or replicas
    /// (the reason).
    Kept(&'static str),
}

/// Which values a config takes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Valid {
    /// Any value of the type.
    Any,
    /// A number at least this.
    AtLeast(i64),
    /// A number in `[low, high]`.
    Between(i64, i64),
    /// A number in `[low, high]` or exactly -1 (gzip's default level).
    BetweenOrMinusOne(i64, i64),
    /// A fraction in `[0, 1]`.
    Fraction,
    /// One of these (case as written).
    OneOf(&'static [&'static str]),
    /// A non-empty list of these.
    ListOf(&'static [&'static str]),
    /// `*`, or a list of `partition:broker` pairs (the replication throttles).
    Replicas,
}

/// One config: its name, type, default, the values it takes, what it does here, a line of
/// documentation (DescribeConfigs v3+ sends it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Def {
    pub name: &'static str,
    pub ty: Type,
    /// The value a stream has when it is not set, as DescribeConfigs shows it.
    pub default: &'static str,
    valid: Valid,
    pub effect: Effect,
    pub doc: &'static str,
}

const SEGMENTS: &str = "no local segments: objects are written per flush and compacted";
const FLUSHES: &str = "every acknowledged record is durable in object storage already";
const REPLICAS: &str = "no replicas: object storage keeps the data durable";
const TIERING: &str = "every byte is in object storage already";
const COMPRESSION: &str = "batches are stored as the producer compressed them";
const SHARE_DLQ: &str = "share groups are not built yet";

const fn def(
    name: &'static str,
    ty: Type,
    default: &'static str,
    valid: Valid,
    effect: Effect,
    doc: &'static str,
) -> Def {
    Def { name, ty, default, valid, effect, doc }
}

use Effect::{Honoured, Kept};
use Type::{Boolean, Double, Int, List, Long};
use Valid::*;

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
    DEFS.binary_search_by(|d| d.name.cmp(name)).ok().map(|i| &DEFS[i])
}

/// A config value refused, or a name no stream has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("unknown config name {0}")]
    Unknown(String),
    #[error("invalid value {value} for config {name}: {reason}")]
    Value { name: String, value: String, reason: String },
    #[error("{0}")]
    Together(String),
}

impl Def {
    /// `value` in its canonical spelling, or why it is refused.
    pub fn check(&self, value: &str) -> Result<String, Invalid> {
        let refuse = |reason: String| Invalid::Value {
            name: self.name.to_owned(),
            value: value.to_owned(),
            reason,
        };
        let v = value.trim();
        let canonical = match self.ty {
            Boolean => match v.to_ascii_lowercase().as_str() {
                b @ ("true" | "false") => b.to_owned(),
                _ => return Err(refuse("expected true or false".into())),
            },
            Int => {
                let n = v.parse::<i32>().map_err(|_| refuse("expected a 32-bit integer".into()))?;
                self.in_range(i64::from(n)).map_err(refuse)?;
                n.to_string()
            }
            Long => {
                let n = v.parse::<i64>().map_err(|_| refuse("expected a 64-bit integer".into()))?;
                self.in_range(n).map_err(refuse)?;
                n.to_string()
            }
            Double => {
                let x = v.parse::<f64>().map_err(|_| refuse("expected a number".into()))?;
                if !(0.0..=1.0).contains(&x) {
                    return Err(refuse("expected a value in [0, 1]".into()));
                }
                x.to_string()
            }
            Type::String => match self.valid {
                OneOf(values) if !values.contains(&v) => {
                    return Err(refuse(format!("expected one of {}", values.join(", "))));
                }
                _ => v.to_owned(),
            },
            List => {
                let items: Vec<&str> =
                    v.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
                self.check_list(&items).map_err(refuse)?;
                items.join(",")
            }
        };
        Ok(canonical)
    }

    fn in_range(&self, n: i64) -> Result<(), String> {
        match self.valid {
            AtLeast(low) if n < low => Err(format!("expected at least {low}")),
            Between(low, high) if n < low || n > high => {
                Err(format!("expected a value in [{low}, {high}]"))
            }
            BetweenOrMinusOne(low, high) if n != -1 && (n < low || n > high) => {
                Err(format!("expected -1 or a value in [{low}, {high}]"))
            }
            _ => Ok(()),
        }
    }

    fn check_list(&self, items: &[&str]) -> Result<(), String> {
        match self.valid {
            ListOf(values) => {
                if items.is_empty() {
                    return Err(format!("expected a list of {}", values.join(", ")));
                }
                match items.iter().find(|i| !values.contains(i)) {
                    Some(i) => Err(format!("{i} is not one of {}", values.join(", "))),
                    None => Ok(()),
                }
            }
            Replicas if items == ["*"] => Ok(()),
            Replicas => {
                let pair = |i: &&str| {
                    i.split_once(':').is_some_and(|(p, b)| {
                        p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
                    })
                };
                match items.iter().find(|i| !pair(i)) {
                    Some(i) => Err(format!("{i}: expected partition:broker or *")),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

/// A stream's configs: those set, by name, each in its canonical spelling. Every other config
/// has its [`Def::default`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamConfig {
    /// Shared: a route carries its stream's configs to every produce, so a clone is a count,
    /// not a copy of the map (changed copy-on-write).
    set: std::sync::Arc<BTreeMap<String, String>>,
}

/// What `cleanup.policy` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Records go by `retention.ms` and `retention.bytes`.
    pub delete: bool,
    /// Each key's latest record is kept, older ones go (key compaction).
    pub compact: bool,
}

impl StreamConfig {
    /// Configs `pairs` set over the defaults, each checked; then checked together.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, Invalid> {
        let mut c = StreamConfig::default();
        for (name, value) in pairs {
            c.set(name, value)?;
        }
        c.check()?;
        Ok(c)
    }

    /// Sets config `name` to `value` (checked alone; [`Self::check`] checks them together).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), Invalid> {
        let def = find(name).ok_or_else(|| Invalid::Unknown(name.to_owned()))?;
        let canonical = def.check(value)?;
        std::sync::Arc::make_mut(&mut self.set).insert(def.name.to_owned(), canonical);
        Ok(())
    }

    /// Puts config `name` back to its default.
    pub fn reset(&mut self, name: &str) -> Result<(), Invalid> {
        let def = find(name).ok_or_else(|| Invalid::Unknown(name.to_owned()))?;
        if self.set.contains_key(def.name) {
            std::sync::Arc::make_mut(&mut self.set).remove(def.name);
        }
        Ok(())
    }

    /// Config `name` as set, if it is.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.set.get(name).map(String::as_str)
    }

    /// The configs set, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.set.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Config `name`'s value and whether it is set; `None` for a name no stream has.
    pub fn value(&self, name: &str) -> Option<(&str, bool)> {
        let def = find(name)?;
        Some(match self.set.get(def.name) {
            Some(v) => (v.as_str(), true),
            None => (def.default, false),
        })
    }

    fn number(&self, name: &str) -> i64 {
        self.value(name).and_then(|(v, _)| v.parse().ok()).unwrap_or(i64::MAX)
    }

    /// Checks the configs together: a table keeps at least what its log keeps.
    pub fn check(&self) -> Result<(), Invalid> {
        let together = |m: &str| Err(Invalid::Together(m.to_owned()));
        if let Some(lake) = self.lake_retention_ms() {
            match self.retention_ms() {
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
        if self.lake_table() && self.cleanup().compact {
            return together("lake.table and cleanup.policy compact together are not built yet");
        }
        Ok(())
    }

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
        assert!(DEFS.windows(2).all(|w| w[0].name < w[1].name), "sorted: find searches them");
        for d in DEFS {
            if d.default.is_empty() {
                continue;
            }
            assert_eq!(d.check(d.default).as_deref(), Ok(d.default), "{}", d.name);
        }
    }

    #[test]
    fn the_docs_table_lists_every_config_as_it_is() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/topic-configs.md");
        let doc = std::fs::read_to_string(path).expect("docs/topic-configs.md");
        let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(rows.len(), DEFS.len(), "one row per config");
        for (row, d) in rows.iter().zip(DEFS) {
            let here = match d.effect {
                Honoured => "honoured".to_owned(),
                Kept(why) => format!("kept: {why}"),
            };
            let want = format!(
                "| `{}` | {} | `{}` | {here} | {} |",
                d.name,
                format!("{:?}", d.ty).to_lowercase(),
                d.default,
                d.doc
            );
            assert_eq!(*row, want, "docs/topic-configs.md");
        }
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
