#!/usr/bin/env bash
# Lakelog's Kafka port side by side with Apache Kafka (KRaft, one node, from Maven Central's
# org.apache.kafka:kafka_2.13, once with log.flush.interval.messages=1 and once with its
# defaults), in one run: Kafka's ProducerPerformance and librdkafka, 1 KiB records, acks=all,
# 1 and 8 partitions, saturating and 10 MiB/s, consumed back. Prints a Markdown table (the one
# in docs/performance.md). Installs what it needs (`install-deps.sh peers`: Java 17+ and Maven
# required), builds the release binary. As root it drops the page cache before each producing row
# (--keep-page-cache not to; why: scripts/bench-peers.py). Arguments go to scripts/bench-peers.py.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh peers
cargo build --release --bin lakelog
exec .tools/venv/bin/python scripts/bench-peers.py --bin target/release/lakelog --kafka-jars .tools/kafka "$@"
