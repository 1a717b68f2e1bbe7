"""Leaves a Kafka transaction open: a transactional producer (id `hanging-app`, a 10-minute
transaction timeout) writes 3 records to partition 1 of the topic, flushes, and exits without
committing or aborting, as a producer that crashed would.

Usage: hanging_transaction.py <bootstrap> <topic>"""

import os
import sys

from confluent_kafka import Producer

p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "hanging-app",
              "transaction.timeout.ms": 600000})
p.init_transactions(30)
p.begin_transaction()
for i in range(3):
    p.produce(sys.argv[2], value=b"v%d" % i, partition=1)
p.flush(30)
os._exit(0)
