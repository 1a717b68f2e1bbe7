//! A Kafka group's configs: Kafka 4.4's `GroupConfig` (IncrementalAlterConfigs and
//! DescribeConfigs on a GROUP resource), each bounded as a Kafka broker with its default
//! `group.*` bounds checks it (a consumer group's session timeout in [45 s, 60 s], say).

use std::time::Duration;

use super::Effect::{Honoured, Kept};
use super::Type::{self, Boolean, Int, List, Long};
use super::Valid::*;
use super::{Configs, Def, Invalid, Table, def};

const DLQ: &str =
    "share groups write no dead-letter topic: a record past the delivery limit is archived";
const SHARE_ASSIGNOR: &str =
    "a share group's assignment is computed at the heartbeat that changes its membership";
const STREAMS: &str =
    "the streams group protocol (KIP-1071) is not served: Kafka Streams runs on the classic one";
const ASSIGNOR: &str =
    "a consumer group's assignment is computed at the heartbeat that changes its membership";

/// The group table: Kafka 4.4's group configs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Group;

/// A group's configs: those set, by name. Every other config has its [`Def::default`] (the
/// consumer group's session timeout and heartbeat interval: the writer's, when not set).
pub type GroupConfig = Configs<Group>;

/// Every group config, by name: Kafka 4.4's `GroupConfig`.
pub const GROUP_DEFS: &[Def] = &[
    def(
        "consumer.assignment.interval.ms",
        Int,
        "1000",
        Between(0, 15_000),
        Kept(ASSIGNOR),
        "The interval between assignment updates for a consumer group",
    ),
    def(
        "consumer.assignor.offload.enable",
        Boolean,
        "true",
        Any,
        Kept(ASSIGNOR),
        "Whether a consumer group's assignment is computed on a background thread",
    ),
    def(
        "consumer.heartbeat.interval.ms",
        Int,
        "5000",
        Between(5_000, 15_000),
        Honoured,
        "The heartbeat interval given to the members of a consumer group",
    ),
    def(
        "consumer.session.timeout.ms",
        Int,
        "45000",
        Between(45_000, 60_000),
        Honoured,
        "How long a consumer group's member may be silent before it is removed",
    ),
    def(
        "errors.deadletterqueue.copy.record.enable",
        Boolean,
        "false",
        Any,
        Kept(DLQ),
        "Whether a share group's dead-letter record copies the original record",
    ),
    def(
        "errors.deadletterqueue.topic.name",
        Type::String,
        "",
        TopicName,
        Kept(DLQ),
        "The topic a share group writes undeliverable records to; none when empty",
    ),
    def(
        "share.assignment.interval.ms",
        Int,
        "1000",
        Between(0, 15_000),
        Kept(SHARE_ASSIGNOR),
        "The interval between assignment updates for a share group",
    ),
    def(
        "share.assignor.offload.enable",
        Boolean,
        "true",
        Any,
        Kept(SHARE_ASSIGNOR),
        "Whether a share group's assignment is computed on a background thread",
    ),
    def(
        "share.auto.offset.reset",
        Type::String,
        "latest",
        OffsetReset,
        Honoured,
        "Where a share group starts on a partition: earliest, latest or by_duration:<ISO-8601>",
    ),
    def(
        "share.delivery.count.limit",
        Int,
        "5",
        Between(2, 10),
        Honoured,
        "Delivery attempts of a record to a share group",
    ),
    def(
        "share.heartbeat.interval.ms",
        Int,
        "5000",
        Between(5_000, 15_000),
        Honoured,
        "The heartbeat interval given to the members of a share group",
    ),
    def(
        "share.isolation.level",
        Type::String,
        "read_uncommitted",
        OneOf(&["read_committed", "read_uncommitted"]),
        Honoured,
        "Whether a share group reads only committed transactional records",
    ),
    def(
        "share.partition.max.record.locks",
        Int,
        "2000",
        Between(100, 4_000),
        Honoured,
        "Records a share group holds locked per partition",
    ),
    def(
        "share.record.lock.duration.ms",
        Int,
        "30000",
        Between(15_000, 60_000),
        Honoured,
        "How long a share group's member holds a record it was given",
    ),
    def(
        "share.renew.acknowledge.enable",
        Boolean,
        "true",
        Any,
        Honoured,
        "Whether a share group's members may renew a record's lock",
    ),
    def(
        "share.session.timeout.ms",
        Int,
        "45000",
        Between(45_000, 60_000),
        Honoured,
        "How long a share group's member may be silent before it is removed",
    ),
    def(
        "streams.acceptable.recovery.lag",
        Long,
        "10000",
        AtLeast(0),
        Kept(STREAMS),
        "The lag a streams client may have and still take an active task",
    ),
    def(
        "streams.assignment.interval.ms",
        Int,
        "1000",
        Between(0, 15_000),
        Kept(STREAMS),
        "The interval between assignment updates for a streams group",
    ),
    def(
        "streams.assignor.name",
        Type::String,
        "",
        OneOf(&["sticky"]),
        Kept(STREAMS),
        "The task assignor of a streams group",
    ),
    def(
        "streams.assignor.offload.enable",
        Boolean,
        "true",
        Any,
        Kept(STREAMS),
        "Whether a streams group's assignment is computed on a background thread",
    ),
    def(
        "streams.heartbeat.interval.ms",
        Int,
        "5000",
        Between(5_000, 15_000),
        Kept(STREAMS),
        "The heartbeat interval given to the members of a streams group",
    ),
    def(
        "streams.initial.rebalance.delay.ms",
        Int,
        "3000",
        AtLeast(0),
        Kept(STREAMS),
        "How long a new streams group waits for more members before its first assignment",
    ),
    def(
        "streams.num.standby.replicas",
        Int,
        "0",
        Between(0, 2),
        Kept(STREAMS),
        "Standby replicas of each task",
    ),
    def(
        "streams.num.warmup.replicas",
        Int,
        "2",
        Between(0, 20),
        Kept(STREAMS),
        "Warmup replicas of tasks at most",
    ),
    def(
        "streams.rack.aware.assignment.tags",
        List,
        "",
        Items(64),
        Kept(STREAMS),
        "Client tags standby replicas are spread over",
    ),
    def(
        "streams.session.timeout.ms",
        Int,
        "45000",
        Between(45_000, 60_000),
        Kept(STREAMS),
        "How long a streams group's member may be silent before it is removed",
    ),
    def(
        "streams.task.offset.interval.ms",
        Int,
        "60000",
        AtLeast(15_000),
        Kept(STREAMS),
        "How often warmup tasks' changelog offsets are reported",
    ),
];

impl Table for Group {
    const DEFS: &'static [Def] = GROUP_DEFS;

    /// Kafka 4.4 checks group configs one by one (each range lies inside the broker's).
    fn check(_: &GroupConfig) -> Result<(), Invalid> {
        Ok(())
    }
}

impl Configs<Group> {
    fn millis(&self, name: &str) -> Option<Duration> {
        self.get(name).and_then(|v| v.parse().ok()).map(Duration::from_millis)
    }

    /// `consumer.session.timeout.ms`, when set.
    pub fn consumer_session_timeout(&self) -> Option<Duration> {
        self.millis("consumer.session.timeout.ms")
    }

    /// `consumer.heartbeat.interval.ms`, when set.
    pub fn consumer_heartbeat_interval(&self) -> Option<Duration> {
        self.millis("consumer.heartbeat.interval.ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configs_are_kafkas_sorted_by_name_each_default_valid() {
        assert_eq!(GROUP_DEFS.len(), 27, "Kafka 4.4's 27 group configs");
        crate::tests::assert_defaults_valid(GROUP_DEFS);
    }

    #[test]
    fn the_docs_table_lists_every_config_as_it_is() {
        crate::tests::assert_documented(GROUP_DEFS, "group-configs.md");
    }

    #[test]
    fn values_are_checked_as_a_kafka_broker_checks_them() {
        let one = |n: &str, v: &str| GroupConfig::from_pairs([(n, v)]);
        for (n, v) in [
            ("consumer.session.timeout.ms", "50000"),
            ("consumer.heartbeat.interval.ms", "15000"),
            ("share.auto.offset.reset", "by_duration:PT1H"),
            ("share.auto.offset.reset", "by_duration:p1dt2h3m4.5s"),
            ("share.auto.offset.reset", "earliest"),
            ("errors.deadletterqueue.topic.name", "dlq"),
            ("streams.rack.aware.assignment.tags", "zone,rack"),
            ("streams.assignor.name", "sticky"),
            ("streams.initial.rebalance.delay.ms", "999999"),
        ] {
            assert!(one(n, v).is_ok(), "{n}={v}");
        }
        let long_tags = vec!["t"; 65].join(",");
        for (n, v) in [
            ("consumer.session.timeout.ms", "44999"),
            ("consumer.session.timeout.ms", "60001"),
            ("consumer.heartbeat.interval.ms", "1000"),
            ("consumer.assignment.interval.ms", "20000"),
            ("share.delivery.count.limit", "1"),
            ("share.record.lock.duration.ms", "5000"),
            ("share.partition.max.record.locks", "20000"),
            ("streams.num.standby.replicas", "3"),
            ("streams.task.offset.interval.ms", "1000"),
            ("streams.assignor.name", "x"),
            ("streams.acceptable.recovery.lag", "-1"),
            ("share.auto.offset.reset", "EARLIEST"),
            ("share.auto.offset.reset", "by_duration:-PT1H"),
            ("share.auto.offset.reset", "by_duration:PT"),
            ("share.auto.offset.reset", "by_duration:PT1M1H"),
            ("share.isolation.level", "READ_COMMITTED"),
            ("errors.deadletterqueue.topic.name", "__internal"),
            ("consumer.assignor.offload.enable", "yes"),
            ("streams.rack.aware.assignment.tags", long_tags.as_str()),
        ] {
            assert!(matches!(one(n, v), Err(Invalid::Value { .. })), "{n}={v}");
        }
        assert_eq!(one("no.such", "1"), Err(Invalid::Unknown("no.such".into())));
        assert_eq!(
            one("consumer.session.timeout.ms", "50000").map(|c| c.consumer_session_timeout()),
            Ok(Some(Duration::from_secs(50)))
        );
        assert_eq!(GroupConfig::default().consumer_heartbeat_interval(), None, "not set");
    }

    #[test]
    fn iso8601_durations_read_as_java_reads_them() {
        let ms = crate::iso8601_ms;
        assert_eq!(ms("PT1H"), Some(3_600_000));
        assert_eq!(ms("P1D"), Some(86_400_000));
        assert_eq!(ms("PT0.25S"), Some(250));
        assert_eq!(ms("P1DT1H1M1.001S"), Some(90_061_001));
        for bad in ["", "P", "PT", "1H", "PT1X", "PT-1S", "P1W", "PT1.0000000001S"] {
            assert_eq!(ms(bad), None, "{bad}");
        }
        assert_eq!(ms("PT99999999999999999999S"), None, "overflows");
    }
}
