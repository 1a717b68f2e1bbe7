#!/usr/bin/env python3
"""Large records under a small fetch.max.bytes (KIP-74) with confluent-kafka (librdkafka):
12 records of about 900 KiB over the topic's partitions, then a consumer whose fetch.max.bytes
(1.2 MB) holds about one of them reads every one back, each once. A broker that answers past
the budget, or never gives the one batch past it to the first partition with records, makes
the consumer stall or time out.

Usage: fetch_max_bytes.py BOOTSTRAP TOPIC   (the topic must exist and be empty)
Exits 1 with a line saying what differed; prints the seconds the consumer took.
"""
import sys
import time

import confluent_kafka

bootstrap, topic = sys.argv[1], sys.argv[2]
RECORDS, SIZE = 12, 900 << 10


def fail(msg):
    print(f"fetch_max_bytes: {msg}", file=sys.stderr)
    sys.exit(1)


errors = []
p = confluent_kafka.Producer({
    "bootstrap.servers": bootstrap,
    "message.max.bytes": 1_000_000,
    "linger.ms": 0,
})
for i in range(RECORDS):
    value = f"{i:04}".encode() + bytes([i]) * (SIZE - 4)
    p.produce(topic, value=value, on_delivery=lambda err, _: err and errors.append(err))
    p.poll(0)
if p.flush(60) != 0 or errors:
    fail(f"produce: {errors or 'records left unflushed'}")

c = confluent_kafka.Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": f"fetch-max-bytes-{time.time_ns()}",
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "fetch.max.bytes": 1_200_000,
    "max.partition.fetch.bytes": 1_048_576,
    "receive.message.max.bytes": 2_000_000,
})
c.subscribe([topic])
seen = {}
started = time.monotonic()
while len(seen) < RECORDS and time.monotonic() - started < 60:
    m = c.poll(1.0)
    if m is None:
        continue
    if m.error():
        fail(f"consume: {m.error()}")
    v = m.value()
    i = int(v[:4])
    if len(v) != SIZE or v[4:] != bytes([i]) * (SIZE - 4):
        fail(f"record {i} came back changed ({len(v)} bytes)")
    if i in seen:
        fail(f"record {i} read twice")
    seen[i] = (m.partition(), m.offset())
c.close()
if len(seen) != RECORDS:
    fail(f"{len(seen)} of {RECORDS} records read in 60 s: {sorted(seen)}")
print(f"{time.monotonic() - started:.2f}")
