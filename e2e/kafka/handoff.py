#!/usr/bin/env python3
"""Streams keyed records with an idempotent confluent-kafka producer (librdkafka 2.16,
acks=all) for a while, as writers are killed, paused and added under it; then reads every
partition back with confluent-kafka and checks each acknowledged record is there exactly once,
at its acked offset, and that no record is in the log twice (retries of batches whose outcome
was unknown deduplicated by sequence).

Usage: handoff.py BOOTSTRAP TOPIC SECONDS
Prints `started` once the first record is acknowledged, then a summary line; exits 1 with a
line saying what went wrong (a fatal producer error is one).
"""
import sys
import time

import confluent_kafka

bootstrap, topic, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])


def fail(msg):
    print(f"handoff: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


fatal = []


def on_error(err):
    # Transport errors while a broker is down are expected; a fatal one ends the producer.
    if err.fatal():
        fatal.append(str(err))


p = confluent_kafka.Producer({
    "bootstrap.servers": bootstrap,
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 120000,
    "error_cb": on_error,
})

acked = {}  # value -> (partition, offset)
failed = []


def on_delivery(err, msg):
    if err is not None:
        failed.append(f"{msg.value().decode()}: {err}")
    else:
        acked[msg.value().decode()] = (msg.partition(), msg.offset())


sent = 0
started = False
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(20):
        try:
            p.produce(topic, key=f"key-{sent % 101}", value=f"v{sent}", on_delivery=on_delivery)
            sent += 1
        except BufferError:
            p.poll(0.05)
    p.poll(0.01)
    if fatal:
        fail(f"fatal producer error: {fatal[0]}")
    if not started and acked:
        print("started", flush=True)
        started = True
left = p.flush(150)
if fatal:
    fail(f"fatal producer error: {fatal[0]}")
if left:
    fail(f"{left} records never answered")
if failed:
    fail(f"{len(failed)} deliveries failed, first: {failed[0]}")

# Read every partition from its start to its end.
c = confluent_kafka.Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": "unused",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
})
md = c.list_topics(topic, timeout=10)
parts = sorted(md.topics[topic].partitions)
ends = {}
for part in parts:
    _, hi = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, part), timeout=10)
    ends[part] = hi
c.assign([confluent_kafka.TopicPartition(topic, part, confluent_kafka.OFFSET_BEGINNING) for part in parts])
seen = {}  # value -> [(partition, offset)]
positions = {part: 0 for part in parts}
deadline = time.monotonic() + 120
while any(positions[q] < ends[q] for q in parts):
    if time.monotonic() > deadline:
        fail(f"reading back stalled at {positions} of {ends}")
    m = c.poll(1.0)
    if m is None:
        continue
    if m.error() is not None:
        fail(f"consume: {m.error()}")
    seen.setdefault(m.value().decode(), []).append((m.partition(), m.offset()))
    positions[m.partition()] = m.offset() + 1
c.close()

twice = {v: at for v, at in seen.items() if len(at) > 1}
if twice:
    v = next(iter(twice))
    fail(f"{len(twice)} records in the log more than once, e.g. {v} at {twice[v]}")
for v, at in acked.items():
    if seen.get(v) != [at]:
        fail(f"{v} acked at {at}, in the log at {seen.get(v)}")
print(f"sent {sent} acked {len(acked)} in the log {len(seen)}", flush=True)
