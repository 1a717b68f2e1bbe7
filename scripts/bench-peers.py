#!/usr/bin/env python3
"""Lakelog's Kafka port side by side with Apache Kafka, in one run on this machine.

Servers, one at a time, each on fresh data and free loopback ports:
  kafka-fsync   Apache Kafka (KRaft, one node, broker + controller) with
                log.flush.interval.messages=1: every append fsynced before the ack, the
                durability Lakelog gives;
  kafka         the same with Kafka's defaults: acknowledged from the page cache (a crash of
                the machine can lose acknowledged records; one replica here);
  lakelog       `lakelog standalone` with its defaults (local directory, every WAL object
                fsynced and committed before the ack; eager 5 ms flushes), its compaction
                held off during the run.

Workloads against each, 1 KiB records, acks=all: Kafka's own ProducerPerformance (Java client
defaults otherwise) and librdkafka (confluent-kafka, linger 5 ms), to 1 and to 8 partitions,
saturating and at a fixed 10 MiB/s (librdkafka's latency counts from when each record was due,
so a stall is not hidden; ProducerPerformance reports its own, JVM warm-up included); then every
record of the saturating librdkafka runs (1 and 8 partitions) consumed back from the beginning by
librdkafka and by Kafka's ConsumerPerformance (the Java consumer in a group: fetch sessions;
its fetch-time MB/s, the group join left out), with the server's CPU per GB read; and the fixed
10 MiB/s librdkafka runs once more with a librdkafka consumer tailing (end-to-end p50/p99, the
server's CPU per GB produced and consumed). Per run: MB/s, ack p50/p99, the server's CPU seconds
per GB produced (utime + stime from /proc) and the bytes its data directory grew by per GB.
Before each producing row the page cache is written back and dropped (as root; --keep-page-cache
not to): on a virtual machine that hands free memory back to its host, a server whose page cache
keeps growing into memory freed long ago slows severalfold (Apache Kafka's later rows here fell
from 324 to 67-86 MB/s, 79% of its CPU copying into fresh page-cache pages), so without it a row
measured what the rows before it had written. Consume rows keep the page cache their producing
row left. --transactions and --shares settle it before each of their rows too. Without root it
is not dropped, and a warning says so.

With --latency-profile NAME, instead: Lakelog alone, every object-store and metadata request
delayed as NAME would (`lakelog standalone --latency-profile`: s3-standard, s3-express), once at
the cluster roles' flush defaults (eager, four PUTs out, hedged at the p90) and once with one PUT
at a time, unhedged (or the --setting rows): librdkafka at
--rate-mib to 1 and 8 partitions with a consumer tailing; ack and end-to-end p50/p99, PUTs, GETs
and metadata requests per GiB, and the requests' price per GiB at S3's list prices.

With --transactions, instead: the Java client's transactional producer committing every
100 ms (scripts/peers/TxnBench.java) to 8 partitions for --seconds, saturating and at
--rate-mib, then its records read back read_committed; per server and load: MB/s, commits,
commitTransaction p50/p99 (its flush included).

Usage: bench-peers.py --bin target/release/lakelog --kafka-jars .tools/kafka [--seconds 10]
[--only kafka,lakelog] [--json FILE] [--data-root DIR] [--transactions] [--shares]
[--latency-profile s3-standard|s3-express]. Prints a Markdown table; exit 1 on any
delivery error.
"""
import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import confluent_kafka

from benchlib import free_port, pct, stop, wait_port
from confluent_kafka.admin import AdminClient, NewTopic

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="target/release/lakelog")
ap.add_argument("--kafka-jars", default=".tools/kafka")
ap.add_argument("--seconds", type=float, default=10)
ap.add_argument("--record-size", type=int, default=1024)
ap.add_argument("--rate-mib", type=float, default=10)
ap.add_argument("--only", default="kafka-fsync,kafka,lakelog")
ap.add_argument("--keep-page-cache", action="store_true",
                help="do not drop the page cache before each producing row")
ap.add_argument("--json", default=None, help="also write every row as JSON lines here")
ap.add_argument("--data-root", default="target/bench-peers",
                help="where each server's data directory is made (not /tmp: on a machine whose "
                     "/tmp sees many files made and deleted, making a file there cost 0.6 ms of "
                     "CPU here, which Lakelog pays per WAL object and Kafka per segment)")
ap.add_argument("--transactions", action="store_true",
                help="the transactional producer committing every 100 ms instead")
ap.add_argument("--shares", action="store_true",
                help="share groups instead: `lakelog bench share` (records/s acknowledged by 1, 4 "
                     "and 16 members on 1 and 8 partitions) against each server")
ap.add_argument("--share-records", type=int, default=100_000)
ap.add_argument("--latency-profile", default=None,
                help="instead: Lakelog alone with every object-store and metadata request delayed "
                     "as NAME would (s3-standard, s3-express), at the cluster roles' flush "
                     "defaults and with one PUT at a time, unhedged: ack and end-to-end latency "
                     "at --rate-mib, requests per GiB and their price")
ap.add_argument("--setting", action="append", default=None,
                help="with --latency-profile, instead of the two default rows: LABEL=KEY: VALUE; "
                     "KEY: VALUE (writer settings; repeat for more rows, e.g. "
                     "'spaced=min_flush_interval: 20ms; eager_puts: 4')")
args = ap.parse_args()

RECORD = args.record_size
CLK_TCK = os.sysconf("SC_CLK_TCK")
JAVA_CP = os.path.join(os.path.abspath(args.kafka_jars), "*")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


class Server:
    def __init__(self, name, proc, bootstrap, data, durability):
        self.name, self.proc, self.bootstrap, self.data = name, proc, bootstrap, data
        self.durability = durability

    def stop(self):
        stop(self.proc)


def start_kafka(name, tmp, fsync):
    port, cport = free_port(), free_port()
    data = os.path.join(tmp, "kafka-data")
    props = os.path.join(tmp, "server.properties")
    with open(props, "w") as f:
        f.write(f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
""")
        if fsync:
            f.write("log.flush.interval.messages=1\n")
    java = ["java", "-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-cp", JAVA_CP]
    subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()).replace("-", "")[:22],
                           "-c", props], check=True, stdout=subprocess.DEVNULL)
    log = open(os.path.join(tmp, "kafka.log"), "w")
    proc = subprocess.Popen(java + ["kafka.Kafka", props], stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc, name)
    durability = ("fsync before ack (log.flush.interval.messages=1), one replica" if fsync
                  else "page cache at ack (Kafka's default flush), one replica")
    return Server(name, proc, f"127.0.0.1:{port}", data, durability)


def start_lakelog(tmp, profile=None, writer="", metrics_port=None):
    grpc, kafka = free_port(), free_port()
    data = os.path.join(tmp, "lakelog-data")
    # Compaction once an hour, not every minute: it would rewrite earlier runs' data during
    # later ones and count against them. What it costs is not in this table.
    cfg = os.path.join(tmp, "standalone.yaml")
    with open(cfg, "w") as f:
        f.write("maintenance:\n  interval: 1h\n")
        if writer:
            f.write(f"writer:\n{writer}")
        if metrics_port:
            f.write(f"telemetry:\n  metrics_listen: 127.0.0.1:{metrics_port}\n")
    extra = ["--latency-profile", profile] if profile else []
    proc = subprocess.Popen(
        [args.bin, "standalone", "--data-dir", data, "--listen", f"127.0.0.1:{grpc}",
         "--kafka-listen", f"127.0.0.1:{kafka}", "--config", cfg] + extra,
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "lakelog.log"), "w"),
        env={**os.environ, "LAKELOG_LOG_LEVEL": "warn"})
    wait_port(kafka, proc, "lakelog standalone")
    return Server("lakelog", proc, f"127.0.0.1:{kafka}", data,
                  "WAL object fsynced and committed before ack (local directory)")


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for f in fs.values():
        f.result(30)
    # Metadata can lag the create by a moment on either server.
    deadline = time.time() + 30
    while time.time() < deadline:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        time.sleep(0.2)
    sys.exit(f"bench-peers: topic {topic} not ready")


def librdkafka_produce(bootstrap, topic, partitions, rate):
    """Produces for --seconds (as fast as acks allow, or `rate` bytes/s); (records, s, acks ms)."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20,
                                  "enable.idempotence": True})
    value = b"x" * RECORD
    # Warm up (metadata, connections, the producer id): one record per partition, not counted.
    for part in range(partitions):
        p.produce(topic, value=value, partition=part)
    if p.flush(30) != 0:
        sys.exit(f"bench-peers: warm-up records to {topic} not delivered")
    acks, errors = [], []

    def delivered(err, _msg, t0):
        if err:
            errors.append(err)
        else:
            acks.append((time.time() - t0) * 1e3)

    start = time.time()
    sent = 0
    while time.time() - start < args.seconds:
        if rate:
            due = start + sent * RECORD / rate
            now = time.time()
            if due > now:
                p.poll(min(due - now, 0.005))
                continue
        for _ in range(1 if rate else 1000):
            t0 = time.time() if not rate else start + sent * RECORD / rate
            try:
                p.produce(topic, value=value, partition=sent % partitions,
                          on_delivery=lambda e, m, t0=t0: delivered(e, m, t0))
                sent += 1
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    elapsed = time.time() - start
    if errors:
        sys.exit(f"bench-peers: {len(errors)} delivery errors, the first: {errors[0]}")
    return len(acks), elapsed, acks


PERF = re.compile(r"(\d+) records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                  r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")


def perf_run(bootstrap, topic, n, per_s):
    """One ProducerPerformance run of n records: (records, MB/s, ack p50 ms, ack p99 ms)."""
    out = subprocess.run(["java", "-Xmx1g", "-cp", JAVA_CP, "org.apache.kafka.tools.ProducerPerformance",
                          "--topic", topic, "--num-records", str(n), "--record-size", str(RECORD),
                          "--throughput", str(per_s), "--producer-props", f"bootstrap.servers={bootstrap}",
                          "acks=all"], capture_output=True, text=True, timeout=900)
    lines = [m for m in PERF.finditer(out.stdout)]
    if out.returncode != 0 or not lines:
        sys.exit(f"bench-peers: ProducerPerformance failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    m = lines[-1]
    return int(m.group(1)), float(m.group(2)) * 1024 * 1024 / 1e6, float(m.group(5)), float(m.group(7))


def java_produce(bootstrap, topic, rate):
    """Kafka's ProducerPerformance, sized to about --seconds: it stops at a record count, so a
    saturating run is sized by a short probe run's rate first (the probe is not reported)."""
    if rate:
        per_s = int(rate / RECORD)
        records, mb_s, p50, p99 = perf_run(bootstrap, topic, int(per_s * args.seconds), per_s)
        return records, mb_s, p50, p99, records
    probe, probe_mb_s, _, _ = perf_run(bootstrap, topic, 20_000, -1)
    n = max(20_000, int(probe_mb_s * 1e6 * args.seconds / RECORD))
    records, mb_s, p50, p99 = perf_run(bootstrap, topic, n, -1)
    # The server's CPU and bytes count the probe's records too.
    return records, mb_s, p50, p99, records + probe


def consume_all(bootstrap, topic, partitions, expected, isolation="read_uncommitted"):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                                  "auto.offset.reset": "earliest", "isolation.level": isolation})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
              for p in range(partitions)])
    got, start = 0, time.time()
    while got < expected and time.time() - start < 300:
        for m in c.consume(10000, timeout=0.2):
            if not m.error():
                got += 1
    elapsed = time.time() - start
    c.close()
    return got, elapsed


def java_consume(bootstrap, topic, expected):
    """Kafka's ConsumerPerformance (the Java consumer in a group, its defaults) reading `topic`
    from the beginning: (records, MB/s while fetching, rebalance excluded)."""
    out = subprocess.run(["java", "-Xmx1g", "-cp", JAVA_CP, "org.apache.kafka.tools.ConsumerPerformance",
                          "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(expected),
                          "--timeout", "60000", "--group", f"perf-{uuid.uuid4()}"],
                         capture_output=True, text=True, timeout=900)
    lines = [l for l in out.stdout.splitlines() if l.count(",") >= 9 and not l.startswith("start.time")]
    if out.returncode != 0 or not lines:
        sys.exit(f"bench-peers: ConsumerPerformance failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    f = [x.strip() for x in lines[-1].split(",")]
    # start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s, fetch records/s
    return int(f[4]), float(f[8]) * 1024 * 1024 / 1e6


def consume_rows(name, server, topic, partitions, records):
    """Reads `topic` back from the beginning with each consumer: a row each, with the server's
    CPU per GB read."""
    gc.collect()
    for client in ("librdkafka", "java"):
        cpu0, t0 = cpu_seconds(server.proc.pid), time.time()
        if client == "java":
            got, mb_s = java_consume(server.bootstrap, topic, records)
        else:
            got, secs = consume_all(server.bootstrap, topic, partitions, records)
            mb_s = got * RECORD / secs / 1e6
        if got < records:
            sys.exit(f"bench-peers: {name}: {client} consumed {got} of {records} records")
        yield {"server": name, "client": client, "partitions": partitions,
               "load": "consume from the beginning", "records": got, "mb_per_s": round(mb_s, 1),
               "cpu_s_per_gb": round((cpu_seconds(server.proc.pid) - cpu0) / (got * RECORD / 1e9), 2),
               "durability": server.durability}


def each_server(rows_of):
    """Each server of --only in turn, on fresh data and free ports: the rows rows_of(name,
    server) yields for it (each printed to stderr as it comes), then the server stopped and its
    data removed. Every row, also appended to --json."""
    rows = []
    os.makedirs(args.data_root, exist_ok=True)
    tmp_root = tempfile.mkdtemp(prefix="bench-peers-", dir=args.data_root)
    try:
        for name in args.only.split(","):
            tmp = os.path.join(tmp_root, name)
            os.makedirs(tmp)
            if name == "lakelog":
                server = start_lakelog(tmp)
            elif name in ("kafka", "kafka-fsync"):
                server = start_kafka(name, tmp, fsync=name == "kafka-fsync")
            else:
                sys.exit(f"bench-peers: unknown server {name}")
            try:
                for row in rows_of(name, server):
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    rows.append(row)
            finally:
                server.stop()
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return rows


def txn_run(server, rate_mib):
    """The transactional producer's run against `server` at `rate_mib` MiB/s (0: saturating):
    its row."""
    topic = f"txn-8-{rate_mib:g}"
    create_topic(server.bootstrap, topic, 8)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "TxnBench.java")
    out = subprocess.run(["java", "-Xmx1g", "-cp", JAVA_CP, src, server.bootstrap, topic,
                          str(args.seconds), str(RECORD), "100", str(rate_mib)],
                         capture_output=True, text=True, timeout=600)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        sys.exit(f"bench-peers: TxnBench failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    r = json.loads(lines[-1])
    got, _ = consume_all(server.bootstrap, topic, 8, r["records"], "read_committed")
    if got != r["records"]:
        sys.exit(f"bench-peers: {server.name}: read {got} of {r['records']} committed records")
    return {"server": server.name, "load": f"{rate_mib:g} MiB/s" if rate_mib else "saturating",
            "records": r["records"],
            "mb_per_s": round(r["records"] * RECORD / r["seconds"] / 1e6, 1),
            "commits": r["commits"], "commit_p50_ms": r["commit_p50_ms"],
            "commit_p99_ms": r["commit_p99_ms"], "durability": server.durability}


_SETTLE_WARNED = []


def settle_page_cache():
    """The page cache written back and dropped before a producing row (module doc); nothing
    with --keep-page-cache, and a warning once without the right to (not root)."""
    if args.keep_page_cache:
        return
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError as e:
        if not _SETTLE_WARNED:
            _SETTLE_WARNED.append(e)
            print(f"bench-peers: cannot drop the page cache ({e}): a page-cache server's rows may "
                  "depend on what the rows before them wrote (run as root, or --keep-page-cache to "
                  "say so)", file=sys.stderr)


def run_transactions():
    def txn_rows(_name, server):
        for rate_mib in (0, args.rate_mib):
            settle_page_cache()
            yield txn_run(server, rate_mib)

    rows = each_server(txn_rows)
    print("| server | load | MB/s | commits | commit p50 ms | commit p99 ms | records read committed | "
          "durability at ack |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['load']} | {r['mb_per_s']} | {r['commits']} | {r['commit_p50_ms']} | "
              f"{r['commit_p99_ms']} | {r['records']} | {r['durability']} |")


def run_shares():
    def share_rows(name, server):
        settle_page_cache()
        out = subprocess.run([args.bin, "bench", "share", "--kafka", server.bootstrap, "--records",
                              str(args.share_records), "--record-size", str(RECORD), "--json"],
                             capture_output=True, text=True, timeout=3600)
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        if out.returncode != 0 or not lines:
            sys.exit(f"bench-peers: bench share against {name} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        for l in lines:
            r = json.loads(l)
            r["server"] = name
            r["durability"] = server.durability
            yield r

    rows = each_server(share_rows)
    print("| server | partitions | members | records | records/s acknowledged | redelivered | "
          "durability at ack |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['partitions']} | {r['members']} | {r['records']} | "
              f"{r['records_per_s']} | {r['redelivered']} | {r['durability']} |")


# S3's request list prices (us-east-1), dollars per request: Standard PUT $0.005 and GET
# $0.0004 per 1,000; Express One Zone PUT $0.00113 and GET $0.00003 per 1,000 (its per-GB
# upload and retrieval charges are not counted).
PRICES = {"s3-standard": (0.005e-3, 0.0004e-3), "s3-express": (0.00113e-3, 0.00003e-3)}
# The other row: the cluster defaults but one PUT out at a time, unhedged (fewer PUTs; what
# eager_puts 4 and hedging buy).
TUNED = "  eager_puts: 1\n  hedge_quantile: 0\n"


def scrape(port):
    """The counters of a /metrics page, by name."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def tail(bootstrap, topic, partitions, done, lags):
    """Consumes `topic` from its end until `done` is set: each record's end-to-end latency
    (received here minus its producer timestamp), in ms, into `lags`."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"tail-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 500})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_END)
              for p in range(partitions)])
    # One record at a time: a batch call would wait to fill its batch and count that wait.
    while not done.is_set():
        m = c.poll(0.1)
        if m is not None and not m.error():
            lags.append(time.time() * 1e3 - m.timestamp()[1])
    c.close()


def produce_tailed(bootstrap, topic, partitions, rate, started=lambda: None):
    """librdkafka at `rate` to a new `topic` while a consumer tails it from its end; `started`
    is called once the consumer is there, just before the first record. (records, elapsed,
    acks, end-to-end lags in ms); exits if the consumer missed records."""
    import threading
    create_topic(bootstrap, topic, partitions)
    done, lags = threading.Event(), []
    t = threading.Thread(target=tail, args=(bootstrap, topic, partitions, done, lags))
    t.start()
    time.sleep(2)  # the consumer at the end before the first record
    started()
    records, elapsed, acks = librdkafka_produce(bootstrap, topic, partitions, rate)
    time.sleep(2)  # the last records' commits and deliveries
    done.set()
    t.join()
    if len(lags) < records:
        sys.exit(f"bench-peers: the tailing consumer got {len(lags)} of {records} records")
    return records, elapsed, acks, lags


def run_latency(profile):
    put_price, get_price = PRICES[profile]

    def rows(setting, writer):
        tmp = tempfile.mkdtemp(prefix="bench-latency-", dir=args.data_root)
        metrics_port = free_port()
        server = start_lakelog(tmp, profile, writer, metrics_port)
        try:
            for partitions in (1, 8):
                scraped = []
                records, elapsed, acks, lags = produce_tailed(
                    server.bootstrap, f"latency-{partitions}", partitions, args.rate_mib * 1024 * 1024,
                    lambda: scraped.append(scrape(metrics_port)))
                before, after = scraped[0], scrape(metrics_port)
                gib = (records + partitions) * RECORD / 2**30
                per_gib = lambda name: (after.get(name, 0) - before.get(name, 0)) / gib
                puts, gets = per_gib("lakelog_object_store_puts_total"), per_gib("lakelog_object_store_gets_total")
                yield {"profile": profile, "setting": setting, "partitions": partitions,
                       "mb_per_s": round(records * RECORD / elapsed / 1e6, 1),
                       "ack_p50_ms": round(pct(acks, 0.5), 1), "ack_p99_ms": round(pct(acks, 0.99), 1),
                       "e2e_p50_ms": round(pct(lags, 0.5), 1), "e2e_p99_ms": round(pct(lags, 0.99), 1),
                       "puts_per_gib": round(puts), "gets_per_gib": round(gets),
                       "hedges_per_gib": round(per_gib("lakelog_writer_put_hedges_total")),
                       "meta_writes_per_gib": round(per_gib("lakelog_metadata_write_txns_total")),
                       "meta_reads_per_gib": round(per_gib("lakelog_metadata_reads_total")),
                       "usd_per_gib": round(puts * put_price + gets * get_price, 4)}
        finally:
            server.stop()
            shutil.rmtree(tmp, ignore_errors=True)

    os.makedirs(args.data_root, exist_ok=True)
    out = []
    settings = [("cluster defaults", ""), ("one PUT at a time, unhedged", TUNED)]
    if args.setting:
        settings = []
        for s in args.setting:
            label, _, lines = s.partition("=")
            settings.append((label, "".join(f"  {kv.strip()}\n" for kv in lines.split(";") if kv.strip())))
    for setting, writer in settings:
        for row in rows(setting, writer):
            print(json.dumps(row), file=sys.stderr, flush=True)
            out.append(row)
    if args.json:
        with open(args.json, "a") as f:
            for r in out:
                f.write(json.dumps(r) + "\n")
    print("| profile | writer | partitions | MB/s | ack p50 ms | ack p99 ms | end-to-end p50 ms | "
          "end-to-end p99 ms | PUTs/GiB (hedges) | GETs/GiB | metadata writes/GiB | metadata reads/GiB | "
          "request $/GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['profile']} | {r['setting']} | {r['partitions']} | {r['mb_per_s']} | {r['ack_p50_ms']} | "
              f"{r['ack_p99_ms']} | {r['e2e_p50_ms']} | {r['e2e_p99_ms']} | {r['puts_per_gib']} "
              f"({r['hedges_per_gib']}) | "
              f"{r['gets_per_gib']} | {r['meta_writes_per_gib']} | {r['meta_reads_per_gib']} | "
              f"{r['usd_per_gib']} |")


if args.latency_profile:
    run_latency(args.latency_profile)
    sys.exit(0)
if args.transactions:
    run_transactions()
    sys.exit(0)
if args.shares:
    run_shares()
    sys.exit(0)

def peer_rows(name, server):
    """The producer workloads against `server` (`name`): a row each."""
    for client in ("java", "librdkafka"):
        for partitions in (1, 8):
            for rate in (None, args.rate_mib * 1024 * 1024):
                topic = f"{client}-{partitions}-{'sat' if rate is None else 'fixed'}"
                create_topic(server.bootstrap, topic, partitions)
                settle_page_cache()
                cpu0, disk0 = cpu_seconds(server.proc.pid), du(server.data)
                if client == "java":
                    records, mb_s, p50, p99, stored = java_produce(server.bootstrap, topic, rate)
                else:
                    records, elapsed, acks = librdkafka_produce(server.bootstrap, topic, partitions, rate)
                    mb_s, p50, p99 = records * RECORD / elapsed / 1e6, pct(acks, 0.5), pct(acks, 0.99)
                    stored = records + partitions  # and the warm-up records
                    # Millions of ack times held while the consumer below runs slowed its Python
                    # loop by a quarter and more (the collector walks them): let them go.
                    del acks
                # What the server still does for these records (flushes, commits) counts too.
                time.sleep(1)
                gb = stored * RECORD / 1e9
                row = {"server": name, "client": client, "partitions": partitions,
                       "load": "saturating" if rate is None else f"{args.rate_mib:g} MiB/s",
                       "records": records, "mb_per_s": round(mb_s, 1), "ack_p50_ms": round(p50, 1),
                       "ack_p99_ms": round(p99, 1),
                       "cpu_s_per_gb": round((cpu_seconds(server.proc.pid) - cpu0) / gb, 2),
                       "disk_bytes_per_gb": round((du(server.data) - disk0) / gb / 1e9, 3),
                       "durability": server.durability}
                yield row
                if client == "librdkafka" and rate is None:
                    yield from consume_rows(name, server, topic, partitions, records)
                if client == "librdkafka" and rate is not None:
                    yield tailing_row(name, server, partitions, rate)


def tailing_row(name, server, partitions, rate):
    """librdkafka at `rate` to `partitions` with a librdkafka consumer tailing: ack and
    end-to-end p50/p99 (consumed minus the record's producer timestamp) and the server's CPU per
    GB produced and consumed."""
    cpu0 = []
    settle_page_cache()
    records, elapsed, acks, lags = produce_tailed(
        server.bootstrap, f"tail-{partitions}", partitions, rate,
        lambda: cpu0.append(cpu_seconds(server.proc.pid)))
    return {"server": name, "client": "librdkafka", "partitions": partitions,
            "load": f"{args.rate_mib:g} MiB/s, a consumer tailing", "records": records,
            "mb_per_s": round(records * RECORD / elapsed / 1e6, 1),
            "ack_p50_ms": round(pct(acks, 0.5), 1), "ack_p99_ms": round(pct(acks, 0.99), 1),
            "e2e_p50_ms": round(pct(lags, 0.5), 1), "e2e_p99_ms": round(pct(lags, 0.99), 1),
            "cpu_s_per_gb": round((cpu_seconds(server.proc.pid) - cpu0[0]) / (records * RECORD / 1e9), 2),
            "durability": server.durability}


rows = each_server(peer_rows)
print("| server | client | partitions | load | MB/s | ack p50 ms | ack p99 ms | end-to-end p50 / p99 ms | "
      "server CPU s/GB | disk GB/GB | durability at ack |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['server']} | {r['client']} | {r['partitions']} | {r['load']} | {r['mb_per_s']} | "
          f"{r.get('ack_p50_ms', '')} | {r.get('ack_p99_ms', '')} | "
          f"{'%s / %s' % (r['e2e_p50_ms'], r['e2e_p99_ms']) if 'e2e_p50_ms' in r else ''} | {r['cpu_s_per_gb']} | "
          f"{r.get('disk_bytes_per_gb', '')} | {r['durability']} |")
