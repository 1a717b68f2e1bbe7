#!/usr/bin/env python3
"""Kafka's admin API through a Lakelog Kafka listener, with PyPI confluent-kafka's AdminClient:
create a topic (partitions, retention.ms), see it in Metadata, grow it, refuse what Kafka
refuses (an existing name whatever its configs, an unknown config, fewer partitions, a
lake.retention.ms below retention.ms), create a compacted topic (which refuses a record
without a key) and a lake topic, describe and alter configs (every Kafka topic config is
listed; max.message.bytes then holds for Produce), delete records below an offset, describe
the cluster, delete the topic.

Usage: python_admin.py BOOTSTRAP    Exits 1 with a line saying what differed.
"""
import sys

from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer, TopicCollection,
                             TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewPartitions, NewTopic, OffsetSpec, ResourceType)
import time

admin = AdminClient({"bootstrap.servers": sys.argv[1]})


def fail(msg):
    print(f"python_admin: {msg}", file=sys.stderr)
    sys.exit(1)


def result(futures):
    """The one future's outcome: None, or the Kafka error code."""
    (f,) = futures.values()
    try:
        f.result(timeout=30)
        return None
    except KafkaException as e:
        return e.args[0].code()


def partitions(name):
    t = admin.list_topics(name, timeout=10).topics[name]
    return None if t.error else len(t.partitions)


topic = NewTopic("admin-made", num_partitions=3, replication_factor=3, config={"retention.ms": "3600000"})
if (code := result(admin.create_topics([topic]))) is not None:
    fail(f"create: {code}")
if partitions("admin-made") != 3:
    fail(f"metadata shows {partitions('admin-made')} partitions, want 3")
# Every topic (librdkafka sends this Metadata with bytes after its body; Kafka answers it).
if "admin-made" not in admin.list_topics(timeout=10).topics:
    fail("listing every topic does not show admin-made")
# Kafka's internal topic of groups is listed, internal, 50 partitions each with a leader; it
# exists (TOPIC_ALREADY_EXISTS) and takes no records (INVALID_TOPIC_EXCEPTION).
offsets = admin.list_topics(timeout=10).topics.get("__consumer_offsets")
if offsets is None or len(offsets.partitions) != 50 or any(p.leader < 0 for p in offsets.partitions.values()):
    fail(f"__consumer_offsets in Metadata: {offsets and offsets.partitions}")
(f,) = admin.describe_topics(TopicCollection(["__consumer_offsets"])).values()
if not f.result(timeout=30).is_internal:
    fail("__consumer_offsets is not described as internal")
if (code := result(admin.create_topics([NewTopic("__consumer_offsets", num_partitions=1)]))) != KafkaError.TOPIC_ALREADY_EXISTS:
    fail(f"creating __consumer_offsets answered {code}")
answered = []
p0 = Producer({"bootstrap.servers": sys.argv[1], "linger.ms": 0, "message.timeout.ms": 10000})
p0.produce("__consumer_offsets", value=b"x", partition=0, on_delivery=lambda e, m: answered.append(e))
p0.flush(30)
if len(answered) != 1 or answered[0] is None or answered[0].code() != KafkaError.TOPIC_EXCEPTION:
    fail(f"a produce to __consumer_offsets was answered {answered}")
if (code := result(admin.create_topics([NewTopic("admin-made", num_partitions=1)]))) != KafkaError.TOPIC_ALREADY_EXISTS:
    fail(f"creating it again answered {code}")
# Kafka checks the name first: an existing topic is TOPIC_ALREADY_EXISTS whatever the configs.
again = NewTopic("admin-made", num_partitions=1, config={"cleanup.policy": "compacted"})
if (code := result(admin.create_topics([again]))) != KafkaError.TOPIC_ALREADY_EXISTS:
    fail(f"creating it again with a bad config answered {code}")
unknown = NewTopic("unknown-config", num_partitions=1, config={"no.such.config": "1"})
if (code := result(admin.create_topics([unknown]))) != KafkaError.INVALID_CONFIG:
    fail(f"an unknown config answered {code}")
compacted = NewTopic("compacted", num_partitions=1,
                     config={"cleanup.policy": "compact", "min.compaction.lag.ms": "1000",
                             "segment.bytes": "1048576"})
if (code := result(admin.create_topics([compacted]))) is not None:
    fail(f"a compacted topic answered {code}")
# A lake table keeps at least what its log keeps: a shorter lake.retention.ms is the configs'
# error, validated or not; a longer one is a lake topic.
short = {"lake.table": "true", "retention.ms": "60000", "lake.retention.ms": "1000"}
for validate in (True, False):
    code = result(admin.create_topics([NewTopic("lake-short", num_partitions=1, config=short)],
                                      validate_only=validate))
    if code != KafkaError.INVALID_CONFIG:
        fail(f"lake.retention.ms below retention.ms (validate_only={validate}) answered {code}")
lake = dict(short, **{"lake.retention.ms": "120000"})
if (code := result(admin.create_topics([NewTopic("lake-made", num_partitions=1, config=lake)]))):
    fail(f"a lake topic answered {code}")
entries = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "lake-made")])
(f,) = entries.values()
got = {k: v.value for k, v in f.result(timeout=30).items()}
if (got.get("lake.table"), got.get("lake.retention.ms")) != ("true", "120000"):
    fail(f"the lake topic's configs read {got}")
# Manual replica assignments naming live brokers are accepted (leaders stay the owner
# function's); one naming a broker that is not live is INVALID_REPLICA_ASSIGNMENT.
live = sorted(admin.list_topics(timeout=10).brokers)
assigned = NewTopic("assigned", num_partitions=2, replica_assignment=[[live[0]], [live[-1]]])
if (code := result(admin.create_topics([assigned]))) is not None or partitions("assigned") != 2:
    fail(f"a topic with a replica assignment answered {code}")
if (code := result(admin.create_partitions([NewPartitions("assigned", 3, replica_assignment=[[live[0]]])]))) is not None:
    fail(f"growing it with an assignment answered {code}")
ghost = NewTopic("ghost", num_partitions=1, replica_assignment=[[max(live) + 100]])
if (code := result(admin.create_topics([ghost]))) != KafkaError.INVALID_REPLICA_ASSIGNMENT:
    fail(f"an assignment naming no live broker answered {code}")
if (code := result(admin.create_partitions([NewPartitions("admin-made", 5)]))) is not None:
    fail(f"grow to 5: {code}")
if partitions("admin-made") != 5:
    fail(f"metadata shows {partitions('admin-made')} partitions after growing, want 5")
if (code := result(admin.create_partitions([NewPartitions("admin-made", 2)]))) != KafkaError.INVALID_PARTITIONS:
    fail(f"shrinking answered {code}")


def configs(name):
    (f,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)]).values()
    return f.result(timeout=30)


c = configs("admin-made")
if c["retention.ms"].value != "3600000" or c["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
    fail(f"retention.ms described as {c['retention.ms']}")
if c["cleanup.policy"].value != "delete" or c["max.message.bytes"].source != ConfigSource.DEFAULT_CONFIG.value:
    fail(f"defaults described as {c}")
alter = ConfigResource(ResourceType.TOPIC, "admin-made", incremental_configs=[
    ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
if (code := result(admin.incremental_alter_configs([alter]))) is not None:
    fail(f"incremental alter: {code}")
c = configs("admin-made")
if c["max.message.bytes"].value != "2000" or c["retention.ms"].value != "3600000":
    fail(f"after the incremental alter: {c['max.message.bytes']}, {c['retention.ms']}")
bad = ConfigResource(ResourceType.TOPIC, "admin-made", incremental_configs=[
    ConfigEntry("cleanup.policy", "compacted", incremental_operation=AlterConfigOpType.SET)])
if (code := result(admin.incremental_alter_configs([bad]))) != KafkaError.INVALID_CONFIG:
    fail(f"cleanup.policy=compacted by alter answered {code}")
c = configs("compacted")
want = {"cleanup.policy": "compact", "min.compaction.lag.ms": "1000", "segment.bytes": "1048576",
        "delete.retention.ms": "86400000", "min.insync.replicas": "1"}
if {k: c[k].value for k in want} != want or len(c) != 39:
    fail(f"the compacted topic's configs read {({k: c[k].value for k in want}, len(c))}")

# A compacted topic takes keyed records and refuses one without a key (INVALID_RECORD).
answered = []
p = Producer({"bootstrap.servers": sys.argv[1], "linger.ms": 0})
p.produce("compacted", key=b"k", value=b"v", on_delivery=lambda e, m: answered.append(e))
p.flush(30)
p.produce("compacted", value=b"no key", on_delivery=lambda e, m: answered.append(e))
p.flush(30)
if len(answered) != 2 or answered[0] is not None or answered[1] is None \
        or answered[1].code() != KafkaError.INVALID_RECORD:
    fail(f"a keyed and an unkeyed record to the compacted topic were answered {answered}")

# The topic's max.message.bytes holds for Produce; small records go through.
delivered = []
p = Producer({"bootstrap.servers": sys.argv[1], "linger.ms": 0})
p.produce("admin-made", value=b"x" * 5000, partition=0, on_delivery=lambda e, m: delivered.append(e))
p.flush(30)
if len(delivered) != 1 or delivered[0] is None or delivered[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
    fail(f"a 5000-byte record under max.message.bytes=2000 was answered {delivered}")
for i in range(10):
    p.produce("admin-made", value=f"r{i}".encode(), partition=0)
    p.flush(30)

# DeleteRecords: the partition starts at 5 after.
(f,) = admin.delete_records([TopicPartition("admin-made", 0, 5)]).values()
if (low := f.result(timeout=30).low_watermark) != 5:
    fail(f"delete_records answered low watermark {low}")
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "unused"})
lo, hi = consumer.get_watermark_offsets(TopicPartition("admin-made", 0), timeout=10)
consumer.close()
if (lo, hi) != (5, 10):
    fail(f"watermarks after delete_records: {(lo, hi)}, want (5, 10)")

# ListOffsets by the records' own timestamps (out of order across batches), the record with
# the largest timestamp (KIP-734), and a time after every record (no offset, as Kafka).
t0 = int(time.time() * 1000) - 60_000
for dt in [1000, 3000, 2000, 5000, 4000]:
    p.produce("times", value=f"at {dt}".encode(), partition=0, timestamp=t0 + dt)
    p.flush(30)


def offset_for(spec):
    (f,) = admin.list_offsets({TopicPartition("times", 0): spec}).values()
    r = f.result(timeout=30)
    return (r.offset, r.timestamp)


for spec, want in [
    (OffsetSpec.for_timestamp(t0 + 2500), (1, t0 + 3000)),
    (OffsetSpec.for_timestamp(t0), (0, t0 + 1000)),
    (OffsetSpec.max_timestamp(), (3, t0 + 5000)),
    (OffsetSpec.for_timestamp(t0 + 10_000), (-1, -1)),
    (OffsetSpec.earliest(), (0, -1)),
    (OffsetSpec.latest(), (5, -1)),
]:
    if (got := offset_for(spec)) != want:
        fail(f"list_offsets {spec}: {got}, want {want}")

# message.timestamp.type=LogAppendTime: the writer's time, as Kafka stamps it; and a CreateTime
# topic's bounds: a record a day old is refused under message.timestamp.before.max.ms=1h.
stamped = NewTopic("stamped", num_partitions=1, config={"message.timestamp.type": "LogAppendTime"})
bounded = NewTopic("bounded", num_partitions=1, config={"message.timestamp.before.max.ms": "3600000"})
if (code := result(admin.create_topics([stamped]))) is not None or \
        (code := result(admin.create_topics([bounded]))) is not None:
    fail(f"the timestamp topics answered {code}")
answered = []
p.produce("stamped", key=b"k", value=b"v", timestamp=t0, on_delivery=lambda e, m: answered.append((e, m.timestamp())))
p.produce("bounded", key=b"k", value=b"old", timestamp=t0 - 86_400_000,
          on_delivery=lambda e, m: answered.append((e, None)))
p.flush(30)
p.produce("bounded", key=b"k", value=b"new", on_delivery=lambda e, m: answered.append((e, None)))
p.flush(30)
now = int(time.time() * 1000)
if len(answered) != 3 or answered[0][0] is not None or answered[2][0] is not None:
    fail(f"the timestamp topics' produces were answered {answered}")
if answered[1][0] is None or answered[1][0].code() != KafkaError.INVALID_TIMESTAMP:
    fail(f"a record a day old under before.max.ms=1h was answered {answered[1]}")
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "stamped", "auto.offset.reset": "earliest"})
consumer.assign([TopicPartition("stamped", 0, 0)])
m = consumer.poll(10)
consumer.close()
if m is None or m.error():
    fail(f"reading the stamped topic: {m and m.error()}")
(kind, ts) = m.timestamp()
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
if kind != TIMESTAMP_LOG_APPEND_TIME or not now - 60_000 <= ts <= now:
    fail(f"the stamped record reads {(kind, ts)}, want the writer's time near {now} (sent {t0})")

# Large records: a topic taking 16 MiB batches, a 12 MiB record through and back (random
# bytes: no codec shrinks it); one past the writer's largest entry is refused as a config.
large = NewTopic("large", num_partitions=1, config={"max.message.bytes": str(16 << 20)})
if (code := result(admin.create_topics([large]))) is not None:
    fail(f"a topic of 16 MiB batches answered {code}")
too_large = NewTopic("too-large", num_partitions=1, config={"max.message.bytes": str((16 << 20) + 1)})
if (code := result(admin.create_topics([too_large]))) != KafkaError.INVALID_CONFIG:
    fail(f"max.message.bytes past the writer's largest entry answered {code}")
import os
big = os.urandom(12 << 20)
answered = []
pb = Producer({"bootstrap.servers": sys.argv[1], "linger.ms": 0, "message.max.bytes": 20 << 20})
pb.produce("large", key=b"big", value=big, on_delivery=lambda e, m: answered.append(e))
pb.flush(60)
if answered != [None]:
    fail(f"a 12 MiB record was answered {answered}")
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "large", "auto.offset.reset": "earliest"})
consumer.assign([TopicPartition("large", 0, 0)])
m = consumer.poll(30)
consumer.close()
if m is None or m.error() or m.value() != big:
    fail(f"the 12 MiB record read back as {m and (m.error(), len(m.value() or b''))}")

cluster = admin.describe_cluster().result(timeout=30)
if not cluster.nodes or cluster.controller is None or not cluster.cluster_id:
    fail(f"describe_cluster: {cluster}")



def topic_id(name):
    (f,) = admin.describe_topics(TopicCollection([name])).values()
    return str(f.result(timeout=30).topic_id)


old_id = topic_id("admin-made")
if (code := result(admin.delete_topics(["admin-made"]))) is not None:
    fail(f"delete: {code}")
# Made again under the same name: a new topic (a new stream identity) that sees none of the
# old records.
if (code := result(admin.create_topics([NewTopic("admin-made", num_partitions=1)]))) is not None:
    fail(f"re-create: {code}")
if topic_id("admin-made") == old_id:
    fail("the re-created topic has the old topic id")
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "unused"})
if (w := consumer.get_watermark_offsets(TopicPartition("admin-made", 0), timeout=10)) != (0, 0):
    fail(f"the re-created topic has watermarks {w}")
consumer.close()
if (code := result(admin.delete_topics(["admin-made"]))) is not None:
    fail(f"delete again: {code}")
if (code := result(admin.delete_topics(["admin-made"]))) != KafkaError.UNKNOWN_TOPIC_OR_PART:
    fail(f"deleting it again answered {code}")
print("python_admin: create, grow, refusals, configs, delete_records, describe_cluster and delete as Kafka answers them")
