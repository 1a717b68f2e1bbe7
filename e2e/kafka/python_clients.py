#!/usr/bin/env python3
"""Produces keyed records through a Lakelog Kafka listener with PyPI confluent-kafka
(librdkafka 2.16) and kafka-python, and reads every one back through each client, at its
acked offset, in the partition Kafka's default partitioner picks for its key.

Usage: python_clients.py BOOTSTRAP TOPIC COUNT   (the topic must exist, any partition count)
Exits 1 with a line saying what differed. Both producers are idempotent (kafka-python's
default; set for confluent-kafka), acks=all.
"""
import sys
import time

import confluent_kafka
import confluent_kafka.admin
import kafka
from kafka.partitioner.default import murmur2

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])


def fail(msg):
    print(f"python_clients: {msg}", file=sys.stderr)
    sys.exit(1)


def partitions_of(admin_bootstrap):
    md = confluent_kafka.admin.AdminClient({"bootstrap.servers": admin_bootstrap}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        fail(f"metadata for {topic}: {t and t.error}")
    return len(t.partitions)


n_parts = partitions_of(bootstrap)
acked = {}  # value -> (partition, offset)

# confluent-kafka: Java's partitioner (murmur2) so both clients agree on a key's partition.
p = confluent_kafka.Producer({
    "bootstrap.servers": bootstrap,
    "enable.idempotence": True,
    "acks": "all",
    "partitioner": "murmur2_random",
    "linger.ms": 5,
})


def on_delivery(err, msg):
    if err is not None:
        fail(f"confluent-kafka delivery: {err}")
    acked[msg.value().decode()] = (msg.partition(), msg.offset())


half = count // 2
for i in range(half):
    p.produce(topic, key=f"key-{i % 97}", value=f"ck-{i}", on_delivery=on_delivery)
    if i % 1000 == 0:
        p.poll(0)
if p.flush(60) != 0:
    fail("confluent-kafka: records left unflushed")

# kafka-python: its default partitioner is murmur2 too.
kp = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5)
futures = []
for i in range(half, count):
    futures.append((f"kp-{i}", kp.send(topic, key=f"key-{i % 97}".encode(), value=f"kp-{i}".encode())))
kp.flush(60)
for value, f in futures:
    md = f.get(timeout=30)
    acked[value] = (md.partition, md.offset)
kp.close()

if len(acked) != count:
    fail(f"{len(acked)} of {count} records acked")
for value, (part, _) in acked.items():
    i = int(value.split("-")[1])
    want = (murmur2(f"key-{i % 97}".encode()) & 0x7FFFFFFF) % n_parts
    if part != want:
        fail(f"{value} went to partition {part}, its key's is {want}")

# Read everything back with each client: every acked record once, at its offset.
def check(name, seen):
    got = {}
    for value, part, offset in seen:
        if value in got:
            fail(f"{name}: {value} read twice")
        got[value] = (part, offset)
    if got != acked:
        missing = [v for v in acked if v not in got][:5]
        moved = [v for v in got if v in acked and got[v] != acked[v]][:5]
        fail(f"{name}: read {len(got)} of {len(acked)}; missing {missing}, moved {moved}")


c = confluent_kafka.Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": "unused",  # partitions are assigned by hand: no group protocol needed
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
})
c.assign([confluent_kafka.TopicPartition(topic, i, confluent_kafka.OFFSET_BEGINNING) for i in range(n_parts)])
seen, deadline = [], time.time() + 60
while len(seen) < count and time.time() < deadline:
    for m in c.consume(1000, timeout=1):
        if m.error():
            if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                continue
            fail(f"confluent-kafka consume: {m.error()}")
        seen.append((m.value().decode(), m.partition(), m.offset()))
# Any offset is committed, past the partition's end included, with its metadata (Kafka holds
# none against the log): a tool resetting offsets, or a consumer's own bookkeeping, relies on it.
far = [confluent_kafka.TopicPartition(topic, 0, 1 << 40, metadata="far"),
       confluent_kafka.TopicPartition(topic, 1, 0, metadata="")]
for tp in c.commit(offsets=far, asynchronous=False):
    if tp.error:
        fail(f"commit {tp}: {tp.error}")
back = {tp.partition: (tp.offset, tp.metadata)
        for tp in c.committed([confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], timeout=10)}
if back != {0: (1 << 40, "far"), 1: (0, "")}:
    fail(f"committed offsets read back as {back}")
c.close()
check("confluent-kafka", seen)

kc = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                         auto_offset_reset="earliest", consumer_timeout_ms=5000)
kc.assign([kafka.TopicPartition(topic, i) for i in range(n_parts)])
kc.seek_to_beginning()
seen, deadline = [], time.time() + 60
while len(seen) < count and time.time() < deadline:
    for batch in kc.poll(timeout_ms=1000).values():
        seen.extend((r.value.decode(), r.partition, r.offset) for r in batch)
kc.close()
check("kafka-python", seen)
print(f"python_clients: {count} records produced by confluent-kafka and kafka-python, read back by both")
