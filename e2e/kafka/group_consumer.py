#!/usr/bin/env python3
"""One member of a Kafka consumer group (confluent-kafka, classic protocol, auto-commit), for
the group tests: subscribes to TOPIC in GROUP and writes each record it gets to OUT as
`partition offset value`, and each assignment as `# assigned p,p,...`, flushing every line, so
what it consumed is on disk before any commit of it (auto-commit stores an offset once poll
returned its record). Runs until killed, or until a file OUT.stop appears: then it closes
(committing what it consumed, leaving the group).

Usage: group_consumer.py BOOTSTRAP TOPIC GROUP OUT
"""
import os
import sys

import confluent_kafka

bootstrap, topic, group, out = sys.argv[1:5]
f = open(out, "a", buffering=1)


def assigned(consumer, partitions):
    f.write("# assigned " + ",".join(str(p.partition) for p in partitions) + "\n")


c = confluent_kafka.Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "auto.commit.interval.ms": 500,
})
c.subscribe([topic], on_assign=assigned)
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
