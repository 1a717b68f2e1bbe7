#!/usr/bin/env python3
"""Kafka Connect 4.3.1's distributed worker, unmodified, against a Lakelog Kafka listener: the
worker creates its config, offset and status topics itself (compacted, as it checks), a file
source connector moves a file's lines to a topic and a file sink connector writes them to
another file; the worker is stopped (SIGTERM) and started again, more lines are appended, and
the sink file must then hold every line once, in order.

Usage: connect_distributed.py BOOTSTRAP ROOT WORKDIR    Exits 1 with a line saying what differed.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

bootstrap, root, work = sys.argv[1], sys.argv[2], sys.argv[3]
source, sink = os.path.join(work, "in.txt"), os.path.join(work, "out.txt")
group = "lakelog-connect"


workers = []


def fail(msg):
    print(f"connect_distributed: {msg}", file=sys.stderr)
    for w in workers:
        w.kill()
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


port = free_port()
props = os.path.join(work, "worker.properties")
with open(props, "w") as f:
    f.write(f"""bootstrap.servers={bootstrap}
group.id={group}
config.storage.topic={group}-configs
offset.storage.topic={group}-offsets
status.storage.topic={group}-status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.flush.interval.ms=500
listeners=http://127.0.0.1:{port}
rest.advertised.host.name=127.0.0.1
plugin.discovery=only_scan
""")


def rest(method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
            return json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        fail(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}; worker: {tail()}")


def start():
    log = open(os.path.join(work, "worker.log"), "a")
    w = subprocess.Popen(["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                          "-cp", f"{root}/.tools/connect/*",
                          "org.apache.kafka.connect.cli.ConnectDistributed", props],
                         stdout=log, stderr=subprocess.STDOUT)
    workers.append(w)
    deadline = time.time() + 120
    while time.time() < deadline:
        if w.poll() is not None:
            fail(f"the worker exited with {w.returncode}: {tail()}")
        try:
            # Jetty answers 404 until the worker has joined its group and added its resources.
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/connectors", timeout=5):
                return w
        except OSError:
            time.sleep(0.5)
    fail(f"the worker's REST API did not answer in 120 s: {tail()}")


def tail():
    with open(os.path.join(work, "worker.log"), errors="replace") as f:
        return " | ".join(f.read().splitlines()[-15:])


def wait_lines(n, what):
    deadline = time.time() + 120
    got = []
    while time.time() < deadline:
        if os.path.exists(sink):
            with open(sink) as f:
                got = f.read().splitlines()
            if len(got) >= n:
                return got
        time.sleep(0.5)
    status = {c: rest("GET", f"/connectors/{c}/status") for c in rest("GET", "/connectors")}
    fail(f"{what}: {len(got)} lines in the sink, want {n}; status {status}; worker: {tail()}")


def connector(name, config):
    # PUT .../config creates or updates, and a worker that already has it answers the same.
    rest("PUT", f"/connectors/{name}/config", config)


lines = [f"line {i} of the file source" for i in range(200)]
with open(source, "w") as f:
    f.write("\n".join(lines[:100]) + "\n")
worker = start()
connector("lines-in", {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                       "tasks.max": "1", "file": source, "topic": "connect-lines"})
connector("lines-out", {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                        "tasks.max": "1", "file": sink, "topics": "connect-lines"})
got = wait_lines(100, "before the restart")
if got != lines[:100]:
    fail(f"before the restart the sink holds {got[:3]}…, not the source's lines in order")
# The offsets the source and sink committed survive a restart of the worker: it reads them
# back from its compacted topics, and carries on where it stopped.
time.sleep(2)
worker.send_signal(signal.SIGTERM)
if worker.wait(timeout=60) not in (0, 143):
    fail(f"the worker exited with {worker.returncode} on SIGTERM: {tail()}")
with open(source, "a") as f:
    f.write("\n".join(lines[100:]) + "\n")
worker = start()
got = wait_lines(200, "after the restart")
time.sleep(2)
with open(sink) as f:
    got = f.read().splitlines()
worker.send_signal(signal.SIGTERM)
worker.wait(timeout=60)
if got != lines:
    dup = len(got) - len(set(got))
    fail(f"after the restart the sink holds {len(got)} lines ({dup} twice), want the 200 in order")
print(f"200 lines through a source and a sink connector across a worker restart")
