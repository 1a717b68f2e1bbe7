#!/usr/bin/env python3
"""Hostile load on a Kafka listener, for `make bench-memory`'s hostile rows (standard library
only). Each mode runs for SECONDS on CONNS connections, reconnecting whatever the listener
closes, while a probe connects every 100 ms and asks ApiVersions: a listener that serves
other clients throughout answers every probe.

Modes:
  padded  each connection pipelines 16 frames of SIZE bytes: an ApiVersions request, then
          padding (refused once read: a frame holds one request)
  produce each connection pipelines 16 Produce frames of SIZE bytes made of 1 MB record
          batches to partition 0 of topic `hostile` (auto-created), acks=1, and reads answers
  half    each connection sends a frame's size and half of its SIZE bytes, then nothing
  idle    each connection sends nothing
  probe   only the probe (run by the others as a process of its own)

The hostile connections come from 127.0.0.2, the probe from 127.0.0.1 (the listener's caps
are per address).

Usage: kafka-hostile.py HOST:PORT MODE CONNS SIZE SECONDS
Prints one JSON line: bytes offered, frames sent, connections made, probes answered, failed,
and their latency (p50, max, ms).
"""
import json
import socket
import struct
import sys
import threading
import time

host, port = sys.argv[1].rsplit(":", 1)
addr = (host, int(port))
mode, conns, size, seconds = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
deadline = time.monotonic() + seconds
lock = threading.Lock()
stats = {"mode": mode, "connections": 0, "frames": 0, "bytes": 0}


def add(**kw):
    with lock:
        for k, v in kw.items():
            stats[k] = stats.get(k, 0) + v


def header(api, version, correlation):
    client = b"hostile"
    return struct.pack(">hhih", api, version, correlation, len(client)) + client


def frame(body):
    return struct.pack(">i", len(body)) + body


def varint(n):
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def crc32c(data):
    table = crc32c.table
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


crc32c.table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    crc32c.table.append(c)


def record_batch(value):
    record = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(record)) + record
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, 0, now, now, -1, -1, -1, 1) + record
    crc = crc32c(after_crc)
    rest = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(rest)) + rest


def produce_frame(batch, count):
    topic = b"hostile"
    parts = b"".join(struct.pack(">ii", 0, len(batch)) + batch for _ in range(count))
    body = struct.pack(">hhi", -1, 1, 30000)  # no transactional id, acks=1, timeout
    body += struct.pack(">ih", 1, len(topic)) + topic + struct.pack(">i", count) + parts
    return frame(header(0, 3, 1) + body)


def read_frame(s):
    size = s.recv(4, socket.MSG_WAITALL)
    if len(size) < 4:
        return None
    n = struct.unpack(">i", size)[0]
    body = bytearray()
    while len(body) < n:
        chunk = s.recv(min(n - len(body), 1 << 20))
        if not chunk:
            return None
        body += chunk
    return bytes(body)


def create_topic():
    # Metadata v4 naming the topic, auto-creation allowed.
    topic = b"hostile"
    body = struct.pack(">ih", 1, len(topic)) + topic + b"\x01"
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(frame(header(3, 4, 1) + body))
        read_frame(s)
    time.sleep(1)


def worker():
    if mode == "padded":
        pad = frame(header(18, 0, 1) + b"\x00" * (size - len(header(18, 0, 1))))
    elif mode == "produce":
        batch = record_batch(b"h" * 1_000_000)
        one = produce_frame(batch, max(1, size // len(batch)))
    while time.monotonic() < deadline:
        try:
            # From an address of their own: the probe's is another (caps are per address).
            s = socket.create_connection(addr, timeout=5, source_address=("127.0.0.2", 0))
        except OSError:
            add(refused=1)
            time.sleep(0.05)
            continue
        add(connections=1)
        try:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            if mode == "padded":
                for _ in range(16):
                    s.sendall(pad)
                    add(frames=1, bytes=len(pad))
                s.recv(1)  # until the listener closes it
            elif mode == "produce":
                for _ in range(16):
                    s.sendall(one)
                    add(frames=1, bytes=len(one))
                for _ in range(16):
                    if read_frame(s) is None:
                        break
                    add(answered=1)
            elif mode == "half":
                s.sendall(struct.pack(">i", size) + b"\x00" * (size // 2))
                add(frames=1, bytes=size // 2)
                s.recv(1)
            else:
                s.recv(1)
        except OSError:
            pass
        finally:
            s.close()
        if mode in ("half", "idle"):
            time.sleep(1.0)


def probe(latencies, failed):
    body = header(18, 0, 7)
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            with socket.create_connection(addr, timeout=10) as s:
                s.sendall(frame(body))
                if read_frame(s) is None:
                    raise OSError("closed")
            latencies.append((time.monotonic() - started) * 1000)
        except OSError:
            failed.append(1)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))


if mode == "probe":
    # The probe alone, in a process of its own (the hostile threads share one interpreter).
    latencies, failed = [], []
    probe(latencies, failed)
    latencies.sort()
    print(json.dumps({
        "probes": len(latencies),
        "probes_failed": len(failed),
        "probe_ms": {
            "p50": round(latencies[len(latencies) // 2], 1) if latencies else None,
            "max": round(latencies[-1], 1) if latencies else None,
        },
    }))
    sys.exit(0)

import subprocess

if mode == "produce":
    create_topic()
threads = [threading.Thread(target=worker, daemon=True) for _ in range(conns)]
for t in threads:
    t.start()
prober = subprocess.run(
    [sys.executable, __file__, sys.argv[1], "probe", "0", "0", str(seconds)],
    capture_output=True, text=True, check=True,
)
stats.update(json.loads(prober.stdout))
print(json.dumps(stats))
