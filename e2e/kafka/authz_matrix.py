#!/usr/bin/env python3
"""Tries each operation on each topic as one SASL_SSL (SCRAM-SHA-512) user, with PyPI
confluent-kafka, and prints what the broker allowed, one JSON object:
{"<topic>": {"<op>": "allowed" | "denied" | "error: ..."}}.

Usage: authz_matrix.py BOOTSTRAP CA_FILE USER PASSWORD TOPIC[,TOPIC...]
       authz_matrix.py --until-denied BOOTSTRAP CA_FILE USER PASSWORD TOPIC
The second form produces to TOPIC every 20 ms until a produce is refused
(TOPIC_AUTHORIZATION_FAILED), then prints how many were acknowledged before; exits 1 if none
was refused within 30 s.

Operations: describe (Metadata), produce (Produce), consume (Fetch from the beginning),
create (CreateTopics `<topic>-k`), alter (CreatePartitions +1), delete (DeleteRecords to 0).
On a topic the user may not describe, the client stops at Metadata for consume and delete:
that is reported as denied (any success still as allowed).
"""
import json
import sys
import time

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

DENIED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}


def conf(bootstrap, ca, user, password):
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": ca,
    }


def verdict(err):
    if err is None:
        return "allowed"
    code = err.code() if isinstance(err, KafkaError) else None
    if isinstance(err, KafkaException):
        code = err.args[0].code()
    if code in DENIED:
        return "denied"
    return f"error: {err}"


def from_future(f):
    try:
        f.result(timeout=15)
        return "allowed"
    except KafkaException as e:
        return verdict(e)


def describe(admin, topic):
    md = admin.list_topics(topic, timeout=15)
    t = md.topics.get(topic)
    return verdict(t.error if t is not None else None)


def produce(c, topic):
    p = confluent_kafka.Producer({**c, "acks": "all", "message.timeout.ms": 10000})
    out = []
    p.produce(topic, b"matrix", partition=0, on_delivery=lambda err, msg: out.append(err))
    p.flush(15)
    return verdict(out[0]) if out else "error: no delivery report"


def consume(c, topic, wait=15):
    cons = confluent_kafka.Consumer({
        **c,
        "group.id": "matrix-" + topic,
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    try:
        cons.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        deadline = time.time() + wait
        while time.time() < deadline:
            m = cons.poll(0.5)
            if m is None:
                continue
            if m.error() is None or m.error().code() == KafkaError._PARTITION_EOF:
                return "allowed"
            return verdict(m.error())
        return "error: no answer to the fetch"
    finally:
        cons.close()


def create(admin, topic):
    return from_future(admin.create_topics([NewTopic(topic + "-k", 1)])[topic + "-k"])


def alter(admin, topic):
    md = admin.list_topics(topic, timeout=15).topics.get(topic)
    n = len(md.partitions) if md is not None and md.error is None else 1
    return from_future(admin.create_partitions([NewPartitions(topic, n + 1)])[topic])


def delete(admin, topic):
    futures = admin.delete_records([TopicPartition(topic, 0, 0)])
    return from_future(next(iter(futures.values())))


def until_denied(c, topic):
    p = confluent_kafka.Producer({**c, "acks": "all", "message.timeout.ms": 10000})
    acked, start = 0, time.time()
    while time.time() - start < 30:
        out = []
        p.produce(topic, b"x", partition=0, on_delivery=lambda err, msg: out.append(err))
        p.flush(15)
        if out and out[0] is None:
            acked += 1
        elif out and verdict(out[0]) == "denied":
            print(json.dumps({"acked": acked}))
            return 0
        elif out:
            print(f"authz_matrix: produce failed otherwise: {out[0]}", file=sys.stderr)
            return 1
        time.sleep(0.02)
    print("authz_matrix: never refused", file=sys.stderr)
    return 1


def main(args):
    if args[0] == "--until-denied":
        bootstrap, ca, user, password, topic = args[1:6]
        return until_denied(conf(bootstrap, ca, user, password), topic)
    bootstrap, ca, user, password, topics = args[:5]
    c = conf(bootstrap, ca, user, password)
    admin = AdminClient(c)
    ops = {
        "describe": lambda t: describe(admin, t),
        "produce": lambda t: produce(c, t),
        # Without describe, the client never fetches (see below): a short wait shows it.
        "consume": lambda t: consume(c, t, wait=3 if result[t]["describe"] == "denied" else 15),
        "create": lambda t: create(admin, t),
        "alter": lambda t: alter(admin, t),
        "delete": lambda t: delete(admin, t),
    }
    result = {}
    for t in topics.split(","):
        result[t] = {}
        for name, op in ops.items():
            try:
                result[t][name] = op(t)
            except Exception as e:  # a client failure is an answer to look at, not a crash
                result[t][name] = f"error: {e!r}"
        # A topic the user may not describe is refused in Metadata (TOPIC_AUTHORIZATION_FAILED),
        # so librdkafka never sends the Fetch or DeleteRecords: it waits, or finds no leader.
        # Nothing within a short wait is the refusal; any success is reported as allowed.
        if result[t]["describe"] == "denied":
            if result[t]["consume"] == "error: no answer to the fetch":
                result[t]["consume"] = "denied"
            if "No leaders found" in result[t]["delete"]:
                result[t]["delete"] = "denied"
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
