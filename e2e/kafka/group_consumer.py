#!/usr/bin/env python3
"""One member of a Kafka consumer group (confluent-kafka, auto-commit), for the group tests:
subscribes to TOPIC in GROUP with PROTOCOL (`classic`, the default, or `consumer`: KIP-848) and
writes each record it gets to OUT as `partition offset value`, and the partitions it owns after
each change as `# assigned p,p,...` (the consumer protocol assigns and revokes incrementally),
flushing every line, so
what it consumed is on disk before any commit of it (auto-commit stores an offset once poll
returned its record). Runs until killed, or until a file OUT.stop appears: then it closes
(committing what it consumed, leaving the group).

Usage: group_consumer.py BOOTSTRAP TOPIC GROUP OUT [PROTOCOL]
"""
import os
import sys

import confluent_kafka

bootstrap, topic, group, out = sys.argv[1:5]
protocol = sys.argv[5] if len(sys.argv) > 5 else "classic"
f = open(out, "a", buffering=1)
owned = set()


def show():
    f.write("# assigned " + ",".join(str(p) for p in sorted(owned)) + "\n")


def assigned(consumer, partitions):
    owned.update(p.partition for p in partitions)
    show()


def revoked(consumer, partitions):
    owned.difference_update(p.partition for p in partitions)
    show()


settings = {
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "group.protocol": protocol,
    "auto.offset.reset": "earliest",
    "auto.commit.interval.ms": 500,
}
if protocol == "classic":
    # With the consumer protocol the coordinator sets these (writer.kafka.consumer_*).
    settings.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
c = confluent_kafka.Consumer(settings)
c.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
while not os.path.exists(out + ".stop"):
    m = c.poll(0.2)
    if m is None:
        continue
    if m.error() is not None:
        f.write(f"# error {m.error()}\n")
        continue
    f.write(f"{m.partition()} {m.offset()} {m.value().decode()}\n")
c.close()
f.write("# closed\n")
