#!/usr/bin/env python3
"""`make bench-scale`: the cluster at scale, with real Kafka clients, in one run per binary.

Starts etcd and SeaweedFS, then 3 writers (release processes, free ports, each with its Kafka
listener); creates --topics topics of --partitions partitions; starts --groups consumer groups
(even ones classic with cooperative-sticky, odd ones KIP-848), each of --members confluent-kafka
members consuming its own topic and committing synchronously; and one idempotent producer
writing ids at --rate. Then, step by step:

  idle      no produce: the metadata store's requests/s with every partition long-polled
  steady    produce (after --warmup s of it): the same, busy
  join      a 4th writer starts
  leave     the 4th writer stops (SIGTERM)
  restart   each of the 3 writers in turn: SIGTERM, started again

and prints for each: partitions whose owner changed (leaders in Metadata before and after,
by listener address), produce p99 and errors, groups that rebalanced (any assignment callback
after the groups formed), commits that failed, and etcd KV requests/s (from etcd's /metrics).
At the end, once the producer is flushed and every group has read its topic to the end: records
acknowledged but never consumed (lost) and consumed twice by a group (duplicated).

With --baseline BIN the same run is made with BIN first (an older build), and both are printed.
Usage: bench-scale.py --bin target/release/lakelog [--baseline old/lakelog] [--json out.json]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from benchlib import free_port, pct, stop, wait_port

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="target/release/lakelog")
ap.add_argument("--baseline", default=None, help="an older lakelog binary to run first")
ap.add_argument("--topics", type=int, default=20)
ap.add_argument("--partitions", type=int, default=100, help="partitions per topic")
ap.add_argument("--groups", type=int, default=20, help="one per topic, at most --topics")
ap.add_argument("--members", type=int, default=2)
ap.add_argument("--rate", type=int, default=400, help="records produced per second")
ap.add_argument("--window", type=float, default=20, help="seconds each step is measured")
ap.add_argument("--warmup", type=float, default=45,
                help="seconds produced before the steady step (each partition's first idempotent "
                     "batch loads its producer state)")
ap.add_argument("--json", default=None, help="write the results here")
args = ap.parse_args()
args.groups = min(args.groups, args.topics)
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
weed = os.path.join(root, ".tools/venv/bin/weed")
KEY, SECRET = "lakelog", "lakelog-secret"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Stores:
    """etcd and SeaweedFS on free ports in a temporary directory."""

    def __init__(self, d):
        self.d, self.procs = d, []
        self.etcd_port, peer = free_port(), free_port()
        os.makedirs(f"{d}/etcd")
        self.spawn("etcd", ["etcd", "--data-dir", f"{d}/etcd", "--name", "bench",
                            "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                            "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                            "--initial-cluster", f"bench=http://127.0.0.1:{peer}"])
        os.makedirs(f"{d}/s3")
        ports = {f: free_port() for f in [
            "s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port",
            "volume.port.grpc", "filer.port", "filer.port.grpc", "admin.port", "admin.port.grpc",
            "s3.port.iceberg", "s3.port.lance"]}
        self.s3_port = ports["s3.port"]
        self.spawn("seaweedfs", [weed, "mini", f"-dir={d}/s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                                 "-bucket=lakelog", "-webdav=false", "-admin.ui=false"]
                   + [f"-{f}={p}" for f, p in ports.items()],
                   env={"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}, cwd=f"{d}/s3")
        wait_port(self.etcd_port, self.procs[0], "etcd")
        wait_port(self.s3_port, self.procs[1], "SeaweedFS", 90)
        # The filer takes writes (SeaweedFS on a nearly full disk answers reads only).
        filer = f"http://127.0.0.1:{ports['filer.port']}/bench/ready"
        for _ in range(60):
            try:
                req = urllib.request.Request(filer, data=b"ready", method="PUT")
                if urllib.request.urlopen(req, timeout=2).status == 201:
                    break
            except Exception:
                pass
            time.sleep(1)
        else:
            raise SystemExit("bench-scale: SeaweedFS takes no writes (is the disk nearly full?)")

    def spawn(self, name, cmd, env=None, cwd=None):
        out = open(f"{self.d}/{name}.log", "w")
        self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=out, cwd=cwd,
                                           env={**os.environ, **(env or {})}))

    def kv_requests(self):
        """etcd's KV requests so far (Range, Txn, Put, DeleteRange started)."""
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/metrics", timeout=5).read()
        n = 0
        for line in body.decode().splitlines():
            if line.startswith("grpc_server_started_total{") and 'grpc_service="etcdserverpb.KV"' in line:
                n += float(line.rsplit(" ", 1)[1])
        return n

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


class Writer:
    def __init__(self, binary, d, stores, n):
        self.binary, self.d, self.n = binary, d, n
        self.id = f"writer-{n}"
        self.grpc, self.metrics, self.kafka = free_port(), free_port(), free_port()
        self.cfg = f"{d}/{self.id}.yaml"
        with open(self.cfg, "w") as f:
            f.write(f"""cluster: bench
metadata:
  etcd:
    endpoints: [http://127.0.0.1:{stores.etcd_port}]
object_store:
  s3:
    endpoint: http://127.0.0.1:{stores.s3_port}
    bucket: lakelog
    region: us-east-1
    allow_http: true
    path_style: true
telemetry:
  log_level: warn
  metrics_listen: 127.0.0.1:{self.metrics}
writer:
  listen: 127.0.0.1:{self.grpc}
  id: {self.id}
  zone: "*"
  kafka:
    listen: 127.0.0.1:{self.kafka}
""")
        self.proc = None

    def start(self):
        out = open(f"{self.d}/{self.id}.log", "a")
        self.proc = subprocess.Popen(
            [self.binary, "writer", "--config", self.cfg], stdout=out, stderr=out,
            env={**os.environ, "LAKELOG_S3_ACCESS_KEY_ID": KEY, "LAKELOG_S3_SECRET_ACCESS_KEY": SECRET})
        wait_port(self.kafka, self.proc, self.id)

    def stop(self):
        if self.proc and self.proc.poll() not in (None, 0):
            log(f"{self.id} had exited with {self.proc.returncode} (see its log)")
        if self.proc and self.proc.poll() is None:
            stop(self.proc)


class Load:
    """The producer and the groups, and what they saw, stamped with the time."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.lock = threading.Lock()
        self.acked = [set() for _ in range(args.topics)]
        self.seen = [set() for _ in range(args.groups)]
        self.dups = [0] * args.groups
        self.latencies = []    # (at, seconds)
        self.errors = []       # (at, text)
        self.rebalances = []   # (at, group)
        self.commit_failures = []  # (at, group, text)
        self.assigned = [dict() for _ in range(args.groups)]  # member -> partitions
        self.producing = threading.Event()
        self.stopping = threading.Event()
        self.formed_at = None
        self.threads = []

    def topic(self, t):
        return f"scale-{t}"

    def start(self):
        for g in range(args.groups):
            for m in range(args.members):
                th = threading.Thread(target=self.member, args=(g, m), daemon=True)
                th.start()
                self.threads.append(th)
        th = threading.Thread(target=self.produce, daemon=True)
        th.start()
        self.threads.append(th)

    def formed(self):
        with self.lock:
            return all(sum(len(p) for p in a.values()) == args.partitions for a in self.assigned)

    def member(self, g, m):
        conf = {
            "bootstrap.servers": self.bootstrap,
            "group.id": f"scale-group-{g}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "client.id": f"g{g}-m{m}",
        }
        if g % 2 == 0:
            conf.update({"group.protocol": "classic", "session.timeout.ms": 30000,
                         "heartbeat.interval.ms": 3000,
                         "partition.assignment.strategy": "cooperative-sticky"})
        else:
            conf["group.protocol"] = "consumer"
        c = confluent_kafka.Consumer(conf)
        me = f"m{m}"

        def changed(kind):
            def cb(consumer, partitions):
                with self.lock:
                    mine = self.assigned[g].setdefault(me, set())
                    ps = {p.partition for p in partitions}
                    if kind == "assign":
                        mine |= ps
                    else:
                        mine -= ps
                    if self.formed_at is not None:
                        self.rebalances.append((time.time(), g))
                if kind == "assign":
                    consumer.incremental_assign(partitions)
                else:
                    consumer.incremental_unassign(partitions)
            return cb

        c.subscribe([self.topic(g)], on_assign=changed("assign"), on_revoke=changed("revoke"),
                    on_lost=changed("lost"))
        last_commit, dirty = time.time(), False
        while not self.stopping.is_set():
            for msg in c.consume(500, timeout=0.2):
                if msg.error():
                    continue
                seq = int(msg.value())
                with self.lock:
                    if seq in self.seen[g]:
                        self.dups[g] += 1
                    self.seen[g].add(seq)
                dirty = True
            if dirty and time.time() - last_commit >= 0.5:
                try:
                    for tp in c.commit(asynchronous=False) or []:
                        if tp.error:
                            with self.lock:
                                self.commit_failures.append((time.time(), g, str(tp.error)))
                except confluent_kafka.KafkaException as e:
                    if e.args[0].code() != confluent_kafka.KafkaError._NO_OFFSET:
                        with self.lock:
                            self.commit_failures.append((time.time(), g, str(e)))
                last_commit, dirty = time.time(), False
        c.close()

    def produce(self):
        p = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 5})
        seq, seq0, started = 0, 0, time.time()

        def delivered(t, s, sent):
            def cb(err, _msg):
                now = time.time()
                with self.lock:
                    if err:
                        self.errors.append((now, str(err)))
                    else:
                        self.acked[t].add(s)
                        self.latencies.append((now, now - sent))
            return cb

        while not self.stopping.is_set():
            if not self.producing.is_set():
                p.poll(0.1)
                started, seq0 = time.time(), seq
                continue
            due = int((time.time() - started) * args.rate)
            while seq - seq0 < due:
                t = seq % args.topics
                try:
                    p.produce(self.topic(t), value=str(seq).encode(), key=str(seq).encode(),
                              on_delivery=delivered(t, seq, time.time()))
                    seq += 1
                except BufferError:
                    p.poll(0.05)
                    break
            p.poll(0.01)
        p.flush(60)


def owners(admin):
    """(topic, partition) -> the leader's listener address, topic by topic (a build before
    77729b3 closes librdkafka's all-topics Metadata request)."""
    out = {}
    for t in range(args.topics):
        name = f"scale-{t}"
        for _ in range(10):
            try:
                md = admin.list_topics(name, timeout=20)
                break
            except confluent_kafka.KafkaException as e:
                # A broker restarting drops the connection the request was on: asked again.
                log(f"Metadata: {e}; asked again")
                time.sleep(1)
        else:
            raise SystemExit("bench-scale: no Metadata answer")
        addr = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
        out.update({(name, p.id): addr.get(p.leader) for p in md.topics[name].partitions.values()})
    return out


def moved(before, after):
    return sum(1 for k, v in before.items() if after.get(k) != v)


def run(binary):
    d = tempfile.mkdtemp(prefix="bench-scale-")
    stores = Stores(d)
    writers = [Writer(binary, d, stores, n) for n in range(1, 5)]
    steps = []
    load = None
    ok = False
    try:
        for w in writers[:3]:
            w.start()
        bootstrap = ",".join(f"127.0.0.1:{w.kafka}" for w in writers[:3])
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic(f"scale-{t}", args.partitions, 1) for t in range(args.topics)]
        for t, f in admin.create_topics(topics).items():
            f.result(60)
        log(f"{binary}: {args.topics} topics of {args.partitions} partitions on 3 writers")
        load = Load(bootstrap)
        load.start()
        deadline = time.time() + 180
        while not load.formed() and time.time() < deadline:
            time.sleep(1)
        if not load.formed():
            raise SystemExit("bench-scale: the groups did not form in 180 s")
        time.sleep(5)
        load.formed_at = time.time()
        log("groups formed")

        def measure(name, action=None, settle=0.0):
            before = owners(admin)
            t0, kv0 = time.time(), stores.kv_requests()
            moves = 0
            if action:
                moves = action(before)
            time.sleep(max(0.0, args.window - (time.time() - t0)) + settle)
            t1, kv1 = time.time(), stores.kv_requests()
            after = owners(admin)
            if not action:
                moves = moved(before, after)
            with load.lock:
                lat = [s for at, s in load.latencies if t0 <= at < t1]
                step = {
                    "step": name,
                    "moved": moves,
                    "produced": len(lat),
                    "p99_ms": round(pct(lat, 0.99) * 1000, 1) if lat else None,
                    "errors": sum(1 for at, _ in load.errors if t0 <= at < t1),
                    "rebalanced": len({g for at, g in load.rebalances if t0 <= at < t1}),
                    "failed_commits": sum(1 for at, *_ in load.commit_failures if t0 <= at < t1),
                    "kv_per_s": round((kv1 - kv0) / (t1 - t0), 1),
                }
            steps.append(step)
            log(json.dumps(step))

        def membership(change):
            def act(before):
                change()
                time.sleep(10)
                return moved(before, owners(admin))
            return act

        measure("idle")
        load.producing.set()
        time.sleep(args.warmup)
        measure("steady")
        measure("join", membership(writers[3].start))
        measure("leave", membership(writers[3].stop))

        def rolling(before):
            moves, prev = 0, before
            for w in writers[:3]:
                w.stop()
                time.sleep(5)
                mid = owners(admin)
                w.start()
                time.sleep(10)
                now = owners(admin)
                moves += moved(prev, mid) + moved(mid, now)
                prev = now
            return moves

        measure("restart", rolling)
        load.producing.clear()
        time.sleep(3)
        # Every group reads its topic to the end.
        deadline = time.time() + 120
        while time.time() < deadline:
            with load.lock:
                behind = sum(len(load.acked[g] - load.seen[g]) for g in range(args.groups))
            if behind == 0:
                break
            time.sleep(1)
        with load.lock:
            lost = sum(len(load.acked[g] - load.seen[g]) for g in range(args.groups))
            dups = sum(load.dups)
            acked = sum(len(load.acked[g]) for g in range(args.groups))
        ok = True
        return {"binary": binary, "steps": steps, "acked": acked, "lost": lost, "duplicated": dups}
    finally:
        if load:
            load.stopping.set()
            for th in load.threads:
                th.join(30)
        for w in writers:
            w.stop()
        stores.stop()
        if ok:
            shutil.rmtree(d, ignore_errors=True)
        else:
            log(f"logs kept in {d}")


def table(r):
    print(f"\n{r['binary']}: {r['acked']} records acknowledged, {r['lost']} lost, "
          f"{r['duplicated']} duplicated")
    print(f"{'step':<8} {'moved':>6} {'produced':>9} {'p99 ms':>8} {'errors':>7} "
          f"{'rebalanced':>10} {'failed commits':>14} {'etcd KV/s':>10}")
    for s in r["steps"]:
        print(f"{s['step']:<8} {s['moved']:>6} {s['produced']:>9} {str(s['p99_ms']):>8} "
              f"{s['errors']:>7} {s['rebalanced']:>10} {s['failed_commits']:>14} {s['kv_per_s']:>10}")


results = []
if args.baseline:
    results.append(run(args.baseline))
results.append(run(args.bin))
total = args.topics * args.partitions
print(f"\nbench-scale: {args.topics} topics x {args.partitions} partitions ({total}), {args.groups} groups "
      f"x {args.members} members (even classic cooperative-sticky, odd KIP-848), {args.rate} records/s, "
      f"{args.window:.0f} s a step after {args.warmup:.0f} s of warm-up; etcd KV requests/s from its /metrics")
for r in results:
    table(r)
if args.json:
    with open(args.json, "w") as f:
        json.dump({"args": vars(args), "results": results}, f, indent=1)
last = results[-1]
fail = last["lost"] or last["duplicated"]
sys.exit(1 if fail else 0)
