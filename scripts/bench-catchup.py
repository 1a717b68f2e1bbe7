#!/usr/bin/env python3
"""Catch-up reads against ingest, in one run on `make cluster` (2 writers, 2 readers with
Kafka listeners, etcd + SeaweedFS): seed 001's promise that batch and catch-up reads do not
load the ingest path, measured.

  backlog   RECORDS records of --record-size bytes written to topic `catchup` first;
  alone     librdkafka (acks=all) produces to topic `ingest` for --seconds: MB/s;
  catch-up  the same, while a consumer group of --members processes (client.rack = the
            readers' zone) reads `catchup` from the beginning; the writers send them to the
            readers (KIP-392): MB/s, and the group's MB/s;

and prints the ingest ratio (with / alone, seed 001 wants >= 0.9) and the Kafka fetch bytes
each role served (from /metrics). Usage: bench-catchup.py [--bootstrap 127.0.0.1:9092]
[--rack '*'] [--seconds 10] [--records 200000] [--record-size 1024] [--members 2].
Exit 1 on any delivery or consume error.
"""
import argparse
import json
import subprocess
import sys
import time
import urllib.request

import confluent_kafka
import confluent_kafka.admin

ap = argparse.ArgumentParser()
ap.add_argument("--bootstrap", default="127.0.0.1:9092,127.0.0.1:9093")
ap.add_argument("--rack", default="*")
ap.add_argument("--seconds", type=float, default=10)
ap.add_argument("--records", type=int, default=200_000)
ap.add_argument("--record-size", type=int, default=1024)
ap.add_argument("--members", type=int, default=2)
ap.add_argument("--metrics", default="9540,9550,9542,9552", help="writers' then readers' /metrics ports")
args = ap.parse_args()


def fetch_bytes():
    out = {}
    for port in args.metrics.split(","):
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        n = sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
                if "kafka_fetch_bytes" in l and not l.startswith("#"))
        out[port] = int(n)
    return out


admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": args.bootstrap})
for t in admin.create_topics([confluent_kafka.admin.NewTopic(t, num_partitions=4) for t in ["catchup", "ingest"]]).values():
    try:
        t.result(30)
    except confluent_kafka.KafkaException as e:
        if e.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise

value = b"x" * args.record_size


def produce(topic, seconds=None, count=None):
    p = confluent_kafka.Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 5,
                                  "enable.idempotence": False, "batch.size": 1 << 20,
                                  "queue.buffering.max.kbytes": 1 << 20})
    acked, errors = [0], []

    def done(err, msg):
        if err:
            errors.append(err)
        else:
            acked[0] += 1

    start, sent = time.time(), 0
    while (seconds is not None and time.time() - start < seconds) or (count is not None and sent < count):
        for _ in range(1000):
            try:
                p.produce(topic, value=value, on_delivery=done)
                sent += 1
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    took = time.time() - start
    if errors:
        sys.exit(f"bench-catchup: {len(errors)} delivery errors, the first: {errors[0]}")
    return acked[0] * args.record_size / took / 1e6


produce("catchup", count=args.records)
alone = produce("ingest", seconds=args.seconds)

consumer = f"""
import sys, time, confluent_kafka as k
c = k.Consumer({{'bootstrap.servers': '{args.bootstrap}', 'group.id': 'catchup-bench', 'client.rack': '{args.rack}',
                 'auto.offset.reset': 'earliest', 'fetch.max.bytes': 64 << 20}})
c.subscribe(['catchup'])
n, b, start = 0, 0, time.time()
while time.time() - start < {args.seconds + 5}:
    for m in c.consume(10000, timeout=0.5):
        if m.error():
            sys.exit(f'consume: {{m.error()}}')
        n += 1
        b += len(m.value())
c.close()
print(n, b)
"""
before = fetch_bytes()
members = [subprocess.Popen([sys.executable, "-c", consumer], stdout=subprocess.PIPE, text=True)
           for _ in range(args.members)]
time.sleep(4)  # the group forms (3 s initial delay) and starts reading
during = produce("ingest", seconds=args.seconds)
read_records, read_bytes = 0, 0
for m in members:
    out, _ = m.communicate(timeout=120)
    if m.returncode != 0:
        sys.exit(f"bench-catchup: a group member failed: {out}")
    n, b = out.split()
    read_records += int(n)
    read_bytes += int(b)
after = fetch_bytes()
served = {port: after[port] - before.get(port, 0) for port in after}
ports = args.metrics.split(",")
report = {
    "record_size": args.record_size,
    "backlog_records": args.records,
    "ingest_alone_mb_per_s": round(alone, 2),
    "ingest_with_catch_up_mb_per_s": round(during, 2),
    "ingest_ratio": round(during / alone, 3) if alone else None,
    "catch_up_records_read": read_records,
    "catch_up_mb_per_s": round(read_bytes / (args.seconds + 5) / 1e6, 2),
    "kafka_fetch_bytes_writers": sum(served[p] for p in ports[:2]),
    "kafka_fetch_bytes_readers": sum(served[p] for p in ports[2:]),
}
print(json.dumps(report, indent=1))
