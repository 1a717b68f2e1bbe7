"""Kafka transactions with confluent-kafka (librdkafka): committed and aborted transactions,
read_committed and read_uncommitted consumers, a zombie producer fenced by a new instance
with the same transactional id, and a consume-transform-produce loop that commits its
consumer's offsets in its transactions (one aborted, then resumed by a new consumer) and
writes each record once.

Usage: transactions.py <bootstrap> <topic> <output topic>. Exits non-zero, saying why, on any
mismatch."""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer

bootstrap, topic, output = sys.argv[1], sys.argv[2], sys.argv[3]


def fail(msg):
    print(f"transactions: {msg}", file=sys.stderr)
    sys.exit(1)


def producer(tid):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                  "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    return p


def txn(p, values, commit):
    p.begin_transaction()
    for v in values:
        p.produce(topic, key=v.encode(), value=v.encode(), partition=int(v[-1]) % 2)
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def read(isolation, expect, source=None):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tx-{isolation}-{time.time()}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.subscribe([source or topic])
    got, deadline = [], time.time() + 60
    while len(got) < expect and time.time() < deadline:
        m = c.poll(1)
        if m is None or m.error():
            continue
        got.append(m.value().decode())
    # A little longer: nothing more may come.
    end = time.time() + 2
    while time.time() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value().decode())
    c.close()
    return got


p = producer("tx-app")
txn(p, [f"c1-{i}" for i in range(10)], True)
txn(p, [f"a1-{i}" for i in range(5)], False)
txn(p, [f"c2-{i}" for i in range(3)], True)

committed = read("read_committed", 13)
if sorted(committed) != sorted([f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(3)]):
    fail(f"read_committed read {sorted(committed)}")
everything = read("read_uncommitted", 18)
if len(everything) != 18:
    fail(f"read_uncommitted read {len(everything)} records: {sorted(everything)}")

# A new instance of the producer fences the old one: its next transaction fails.
zombie = p
p2 = producer("tx-app")
try:
    txn(zombie, ["z-0"], True)
    fail("the zombie committed")
except KafkaException as e:
    if "fenced" not in str(e).lower():
        fail(f"the zombie failed otherwise: {e}")
txn(p2, ["n-0"], True)
committed = read("read_committed", 14)
if "z-0" in committed or "n-0" not in committed or len(committed) != 14:
    fail(f"after the fence read_committed read {sorted(committed)}")


def transform(consumer, p, batches, commit):
    """Up to `batches` transactions of what `consumer` polls, each record written to the output
    topic and the consumer's position committed with it; aborted unless `commit`."""
    done, idle = 0, time.time() + 20
    while done < batches and time.time() < idle:
        msgs = [m for m in consumer.consume(4, 1) if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(output, key=m.key(), value=m.value())
        p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                      consumer.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        done += 1
        idle = time.time() + 20
    return done


def member():
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe([topic])
    return c


# Consume-transform-produce: two transactions committed, one aborted; the consumer dropped
# and a new one resumes from the offsets committed in the transactions, until the input is
# all read. The output then holds each committed input record once.
c, ctp = member(), producer("ctp-app")
if transform(c, ctp, 2, True) != 2:
    fail("the first two transactions of the loop did not happen")
if transform(c, ctp, 1, False) != 1:
    fail("the aborted transaction of the loop did not happen")
c.close()
c = member()
transform(c, ctp, 100, True)
c.close()
out = read("read_committed", 14, output)
if sorted(out) != sorted(committed):
    fail(f"consume-transform-produce wrote {sorted(out)} for input {sorted(committed)}")
print("transactions: 2 commits, 1 abort and a fenced zombie, read as Kafka reads them; "
      "a consume-transform-produce loop wrote each record once")
