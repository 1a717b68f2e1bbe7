#!/usr/bin/env python3
"""A cooperative-sticky classic group through many subscription changes (the playbook of
librdkafka's own test of them, 0113 u_multiple_subscription_changes): 8 confluent-kafka
consumers of one group, two topics of 16 partitions; consumers switch between subscribing to
the first topic and VARIATION's other subscription (0: both topics, 1: the second, 2: none).
Then, within 60 s, every partition of a subscribed topic must be assigned to exactly one
consumer, one that subscribes to its topic. Prints one line; exits 1 if the group never settles.

Usage: cooperative_playbook.py BOOTSTRAP VARIATION
"""
import sys, time, uuid, confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, variation = sys.argv[1], int(sys.argv[2])
N, P = 8, 16
tag = uuid.uuid4().hex[:6]
t1, t2, group = f"u1-{tag}", f"u2-{tag}", f"g-{tag}"
admin = AdminClient({"bootstrap.servers": bootstrap})
for f in admin.create_topics([NewTopic(t1, P, 1), NewTopic(t2, P, 1)]).values(): f.result(10)
p = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
for t in (t1, t2):
    for part in range(P):
        for i in range(50): p.produce(t, value=b"x", partition=part)
p.flush(30)
S1 = [t1]
S2 = [[t1, t2], [t2], []][variation]
owned = [set() for _ in range(N)]
cs = [confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"C_{i}",
    "partition.assignment.strategy": "cooperative-sticky", "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000, "max.poll.interval.ms": 120000}) for i in range(N)]
subs = [[] for _ in range(N)]
book = [(0,0,S1),(4000,1,S1),(4000,1,S1),(4000,1,S1),(4000,2,S1),(6000,3,S1),(6000,4,S1),(6000,5,S1),(6000,6,S1),(6000,7,S2),
        (6000,1,S1),(6000,1,S2),(6000,1,S1),(6000,2,S2),(7000,2,S1),(7000,1,S2),(8000,0,S2),(8000,1,S1),(8000,0,S1),(13000,2,S1),
        (13000,1,S2),(13000,5,S2),(14000,6,S2),(15000,7,S1),(15000,1,S1),(15000,5,S1),(15000,6,S1)]
start = time.time()
def poll_until(t):
    while time.time() < t:
        for c in cs: c.poll(0.01)
for ts, i, topics in book:
    poll_until(start + ts / 1000)
    subs[i] = list(topics)
    if topics:
        cs[i].subscribe(topics)
    else:
        cs[i].unsubscribe()
def settled():
    for i in range(N):
        owned[i] = {(x.topic, x.partition) for x in cs[i].assignment()}
    want = {(t, q) for t in set(x for s in subs for x in s) for q in range(P)}
    allo = [x for o in owned for x in o]
    return sorted(allo) == sorted(want) and all(t in subs[i] for i in range(N) for t, _ in owned[i])
deadline = time.time() + 60
while not settled() and time.time() < deadline:
    for c in cs: c.poll(0.01)
ok = settled()
print(f"variation {variation}: {'settled' if ok else 'NOT SETTLED'} {time.time()-start:.1f}s after the start; owned per consumer: {[len(o) for o in owned]}; subs: {[len(s) for s in subs]}", flush=True)
for c in cs: c.close()
sys.exit(0 if ok else 1)
