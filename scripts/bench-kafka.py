#!/usr/bin/env python3
"""Kafka-port benchmark against the native gRPC path, in one run on one standalone:

  produce   1 KiB records through the Kafka listener with librdkafka (confluent-kafka),
            acks=all (every ack durable), for --seconds: MB/s and ack latency percentiles;
  consume   everything back through Kafka from the beginning: MB/s, and the standalone's CPU
            seconds per GB served;
  tail      a consumer waiting at the high watermark, one record produced at a time: how long
            after its ack it arrives (the long poll), percentiles;
  idle      a Fetch with max_wait_ms=500 at the end of a partition nothing is written to:
            how long until it is answered (it should be ~500 ms: not at once, not never);
  native    `lakelog bench append` against the same standalone, same record size: MB/s;

and prints the ratios. Usage: bench-kafka.py [--bin target/release/lakelog] [--seconds 10]
[--record-size 1024] [--flush-interval 50ms] [--min-flush-interval 5ms]. Starts its own standalone on free ports in a
temporary directory. Exit 1 on any delivery error.
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

import confluent_kafka

from benchlib import free_port, pct

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="target/release/lakelog")
ap.add_argument("--seconds", type=float, default=10)
ap.add_argument("--record-size", type=int, default=1024)
ap.add_argument("--flush-interval", default="50ms")
ap.add_argument("--min-flush-interval", default=None,
                help="writer.min_flush_interval (the eager policy); default: standalone's")
args = ap.parse_args()


def cpu_seconds(pid):
    """User + system CPU seconds so far of process `pid` (Linux /proc, 100 ticks a second)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


grpc, kafka = free_port(), free_port()
data = tempfile.mkdtemp(prefix="bench-kafka-")
cfg = os.path.join(data, "standalone.yaml")
with open(cfg, "w") as f:
    f.write(f"writer:\n  flush_interval: {args.flush_interval}\n")
    if args.min_flush_interval:
        f.write(f"  min_flush_interval: {args.min_flush_interval}\n")
standalone = subprocess.Popen(
    [args.bin, "standalone", "--data-dir", os.path.join(data, "d"), "--listen", f"127.0.0.1:{grpc}",
     "--kafka-listen", f"127.0.0.1:{kafka}", "--config", cfg],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "LAKELOG_LOG_LEVEL": "warn"})
try:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", kafka), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    endpoint = f"http://127.0.0.1:{grpc}"
    subprocess.run([args.bin, "--endpoint", endpoint, "stream", "create", "bench", "--partitions", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    bootstrap = f"127.0.0.1:{kafka}"
    value = b"x" * args.record_size

    # produce
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "enable.idempotence": False, "batch.size": 1 << 20,
                                  "queue.buffering.max.kbytes": 1 << 20})
    acks, errors, sent = [], [], 0

    def delivered(err, msg, t0):
        (errors if err else acks).append(err or (time.time() - t0) * 1e3)

    start = time.time()
    while time.time() - start < args.seconds:
        for _ in range(1000):
            t0 = time.time()
            try:
                p.produce("bench", value=value, on_delivery=lambda e, m, t0=t0: delivered(e, m, t0))
                sent += 1
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(60)
    produce_s = time.time() - start
    if errors:
        sys.exit(f"bench-kafka: {len(errors)} delivery errors, the first: {errors[0]}")
    produce_mb = len(acks) * args.record_size / produce_s / 1e6

    # consume
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                                  "enable.auto.commit": False, "fetch.max.bytes": 64 << 20})
    c.assign([confluent_kafka.TopicPartition("bench", 0, confluent_kafka.OFFSET_BEGINNING)])
    got, start, cpu0 = 0, time.time(), cpu_seconds(standalone.pid)
    while got < len(acks) and time.time() - start < 120:
        for m in c.consume(10000, timeout=0.1):
            if not m.error():
                got += 1
    consume_s = time.time() - start
    consume_cpu = cpu_seconds(standalone.pid) - cpu0
    consume_mb = got * args.record_size / consume_s / 1e6

    # tail: one record at a time while the consumer waits at the end
    tail = []
    for i in range(50):
        acked = {}
        p.produce("bench", value=b"tail", on_delivery=lambda e, m: acked.setdefault("t", time.time()))
        p.flush(10)
        deadline = time.time() + 10
        while time.time() < deadline:
            # poll answers with the first message (consume(n) would wait for n of them).
            m = c.poll(1.0)
            if m is not None and not m.error():
                tail.append((time.time() - acked.get("t", time.time())) * 1e3)
                break
    c.close()

    # idle: raw Fetch v4 requests (max_wait_ms=500, min_bytes=1) at offset 0 of an empty topic.
    subprocess.run([args.bin, "--endpoint", endpoint, "stream", "create", "idle", "--partitions", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    idle = []
    with socket.create_connection(("127.0.0.1", kafka), timeout=10) as sock:
        for corr in range(5):
            topic = b"idle"
            body = struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0) + struct.pack(">i", 1)
            body += struct.pack(">h", len(topic)) + topic + struct.pack(">i", 1)
            body += struct.pack(">iqi", 0, 0, 1 << 20)
            header = struct.pack(">hhih", 1, 4, corr, 5) + b"bench"
            req = header + body
            t0 = time.time()
            sock.sendall(struct.pack(">i", len(req)) + req)
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            sock.recv(size, socket.MSG_WAITALL)
            idle.append((time.time() - t0) * 1e3)

    # native gRPC, same record size, same standalone
    native = subprocess.run([args.bin, "bench", "append", "--endpoint", endpoint, "--record-size",
                             str(args.record_size), "--records-per-entry", "100", "--concurrency", "64",
                             "--duration", f"{int(args.seconds)}s", "--json"],
                            check=True, capture_output=True, text=True)
    native_mb = float(json.loads(native.stdout.strip().splitlines()[-1])["append_mb_per_s"])
finally:
    standalone.terminate()
    standalone.wait(30)

report = {
    "record_size": args.record_size,
    "flush_interval": args.flush_interval,
    "min_flush_interval": args.min_flush_interval or "standalone default",
    "kafka_produce_mb_per_s": round(produce_mb, 2),
    "kafka_produce_ack_ms": {"p50": round(pct(acks, 0.5), 1), "p99": round(pct(acks, 0.99), 1)},
    "kafka_consume_mb_per_s": round(consume_mb, 2),
    "kafka_consume_standalone_cpu_s_per_gb": round(consume_cpu / max(got * args.record_size / 1e9, 1e-9), 2),
    "kafka_tail_after_ack_ms": {"p50": round(pct(tail, 0.5), 1), "p99": round(pct(tail, 0.99), 1),
                                "samples": len(tail)},
    "kafka_idle_fetch_500ms_answered_ms": {"min": round(min(idle), 1), "max": round(max(idle), 1)},
    "native_append_mb_per_s": round(native_mb, 2),
    "kafka_over_native_produce": round(produce_mb / native_mb, 3) if native_mb else None,
}
print(json.dumps(report, indent=1))
