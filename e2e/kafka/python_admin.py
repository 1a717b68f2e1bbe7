#!/usr/bin/env python3
"""Kafka's admin API through a Lakelog Kafka listener, with PyPI confluent-kafka's AdminClient:
create a topic (partitions, retention.ms), see it in Metadata, grow it, refuse what Kafka
refuses (an existing name, compaction, fewer partitions), delete it.

Usage: python_admin.py BOOTSTRAP    Exits 1 with a line saying what differed.
"""
import sys

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

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
if (code := result(admin.create_topics([NewTopic("admin-made", num_partitions=1)]))) != KafkaError.TOPIC_ALREADY_EXISTS:
    fail(f"creating it again answered {code}")
compacted = NewTopic("compacted", num_partitions=1, config={"cleanup.policy": "compact"})
if (code := result(admin.create_topics([compacted]))) != KafkaError.INVALID_CONFIG:
    fail(f"a compacted topic answered {code}")
if (code := result(admin.create_partitions([NewPartitions("admin-made", 5)]))) is not None:
    fail(f"grow to 5: {code}")
if partitions("admin-made") != 5:
    fail(f"metadata shows {partitions('admin-made')} partitions after growing, want 5")
if (code := result(admin.create_partitions([NewPartitions("admin-made", 2)]))) != KafkaError.INVALID_PARTITIONS:
    fail(f"shrinking answered {code}")
if (code := result(admin.delete_topics(["admin-made"]))) is not None:
    fail(f"delete: {code}")
if (code := result(admin.delete_topics(["admin-made"]))) != KafkaError.UNKNOWN_TOPIC_OR_PART:
    fail(f"deleting it again answered {code}")
print("python_admin: create, grow, refusals and delete as Kafka answers them")
