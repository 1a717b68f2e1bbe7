# The one entry point. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# weed (SeaweedFS) lives in the project's venv; etcd and protoc come from Debian packages.
export PATH := $(CURDIR)/.tools/venv/bin:$(PATH)
export CARGO_TERM_COLOR ?= never

.PHONY: help deps build test lint run bench bench-memory bench-kafka bench-catchup bench-scale cluster cluster-stop helm-check compose-check fuzz dst soak

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

deps: ## Install what building and testing needs (protoc, etcd, SeaweedFS), if missing
	@./scripts/install-deps.sh

build: deps ## Build every crate
	cargo build --workspace --all-targets

test: deps ## Run every test: unit, conformance (etcd, embedded, local dir, SeaweedFS), crash, e2e, then the simulation's mutation test (its own build: the deliberate bugs exist only there)
	cargo build --bin lakelog
	LAKELOG_BIN=$(CURDIR)/target/debug/lakelog cargo test --workspace --all-targets --no-fail-fast
	cargo test --workspace --doc
	cargo test -p sim --features mutants --test mutants

lint: deps ## rustfmt check, clippy -D warnings (and the mutation test's build), dependency-direction rules, no function over 150 lines, the Helm chart and the compose file
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p sim --features mutants --all-targets -- -D warnings
	./scripts/check-deps.py
	python3 scripts/fn-lengths.py --max 150
	$(MAKE) helm-check
	$(MAKE) compose-check

helm-check: ## Render, lint and schema-check the Helm chart offline (default and ci/ values)
	@./scripts/install-deps.sh deploy
	cargo build --bin lakelog
	.tools/venv/bin/python scripts/helm-check.py

compose-check: ## Check deploy/compose.yaml and the Dockerfile offline (Docker Compose and Dockerfile parsers; every role config valid there)
	@./scripts/install-deps.sh deploy
	cargo build --bin lakelog
	.tools/venv/bin/python scripts/compose-check.py

run: ## Build and start `lakelog standalone` on 127.0.0.1:7540 (data in ./lakelog-data)
	@./scripts/install-deps.sh build
	cargo build --bin lakelog
	./target/debug/lakelog standalone --data-dir ./lakelog-data --listen 127.0.0.1:7540

cluster: deps ## Start etcd, SeaweedFS and every role as local processes (2 writers, 2 readers); print the endpoints
	cargo build --bin lakelog
	./scripts/cluster.sh

cluster-stop: ## Stop what `make cluster` started
	./scripts/cluster.sh stop

bench: ## A short benchmark (about 4 minutes once built): 10 MiB/s to one log with standalone's eager flushes (first, before other rows' writes can stall its fsyncs), saturating append, read, one partition through the SDK producer (5 and 1 batches in flight) on a standalone, and 10,000 small flushes compacted, merged and read back; local directory, release build
	@./scripts/install-deps.sh build
	cargo build --release --bin lakelog
	@set -e; d=$$(mktemp -d); pid=; trap 's=$$?; if [ -n "$$pid" ]; then kill $$pid; wait $$pid || true; fi 2>/dev/null; rm -rf "$$d"; exit $$s' EXIT; \
	./target/release/lakelog bench append --data-dir "$$d/light" --logs 1 --concurrency 256 \
		--record-size 1000 --records-per-entry 10 --min-flush-interval 5ms --rate 10MiB --duration 10s; \
	./target/release/lakelog bench append --data-dir "$$d/append" --logs 100 --concurrency 8192 \
		--record-size 1000 --records-per-entry 10 --flush-interval 50ms --duration 15s --baseline; \
	./target/release/lakelog bench read --data-dir "$$d/read" --flush-interval 50ms --duration 10s --backlog 64MiB; \
	rm -rf "$$d/append" "$$d/read"; \
	port=$$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
	LAKELOG_LOG_LEVEL=warn ./target/release/lakelog standalone --data-dir "$$d/sdk" --listen 127.0.0.1:$$port \
		--kafka-listen off >"$$d/standalone.log" 2>&1 & pid=$$!; \
	for _ in $$(seq 100); do ./target/release/lakelog --endpoint http://127.0.0.1:$$port stream list >/dev/null 2>&1 && break; sleep 0.1; done; \
	./target/release/lakelog --endpoint http://127.0.0.1:$$port bench produce --stream one --duration 10s; \
	./target/release/lakelog --endpoint http://127.0.0.1:$$port bench produce --stream one-at-a-time --in-flight 1 --duration 10s; \
	./target/release/lakelog bench compact --data-dir "$$d/compact"

bench-memory: deps ## A writer's peak RSS saturated and at 5x overload, as a role (load from another process) and in process (etcd + SeaweedFS, local directory), 64 MiB buffer, against buffer_size + 64 MiB; then under hostile Kafka clients (padded, produce, half-sent, idle) against buffer_size + request budget + 64 MiB (BENCH_ROWS=hostile: those alone); release build, about 3 minutes once built
	cargo build --release --bin lakelog
	./scripts/bench-memory.sh

bench-kafka: deps ## Produce and consume 1 KiB records through the Kafka port (librdkafka) against the native gRPC path, release build
	cargo build --release --bin lakelog
	.tools/venv/bin/python scripts/bench-kafka.py --bin target/release/lakelog --seconds 10

bench-catchup: deps ## Ingest with and without a catch-up consumer group reading through the readers, on a `make cluster` of release builds
	cargo build --release --bin lakelog
	LAKELOG_BIN=$(CURDIR)/target/release/lakelog ./scripts/cluster.sh
	target/release/lakelog --endpoint http://127.0.0.1:7541 bench catchup --kafka 127.0.0.1:9092,127.0.0.1:9093 --duration 10s; s=$$?; ./scripts/cluster.sh stop; exit $$s

bench-scale: deps ## Writers joining, leaving and restarting under 2,000 partitions, 20 groups (classic and KIP-848) and steady produce: owners moved, p99, rebalances, failed commits, lost/duplicated, etcd requests/s per step; BASELINE=<older lakelog> runs it first; release build, about 6 minutes a binary
	cargo build --release --bin lakelog
	.tools/venv/bin/python scripts/bench-scale.py --bin target/release/lakelog $(if $(BASELINE),--baseline $(BASELINE))

SEEDS ?= 10000
dst: ## The deterministic simulation over SEEDS seeds (10000) of every group in parallel processes; `make dst SEED=n [GROUP=kafka]` replays one seed
	@./scripts/install-deps.sh build
	@if [ -n "$(SEED)" ]; then \
		SIM_SEED=$(SEED) SIM_GROUP=$(GROUP) cargo test --release -p sim --test writers replay -- --nocapture; \
	else \
		cargo test --release -p sim --no-run -q && \
		n=$$(nproc); per=$$(( ($(SEEDS) + n - 1) / n )); d=$$(mktemp -d); \
		for i in $$(seq 0 $$((n - 1))); do \
			SIM_FROM=$$((i * per)) SIM_SEEDS=$$per cargo test --release -q -p sim --test writers lose_nothing -- --nocapture > "$$d/$$i.log" 2>&1 & \
		done; wait; s=0; \
		for f in "$$d"/*.log; do grep -q "test result: ok" "$$f" || { cat "$$f"; s=1; }; done; \
		grep -ho "sim [a-z-]*: .*" "$$d"/*.log; rm -rf "$$d"; exit $$s; \
	fi

SOAK_SECONDS ?= 600
NEMESIS_SEED ?= 1
soak: deps ## The seeded nemesis over real processes (writers, reader, compactor, cleaner, etcd, SeaweedFS) for SOAK_SECONDS (600), NEMESIS_SEED (1), history checked
	cargo build --bin lakelog
	NEMESIS_SECONDS=$(SOAK_SECONDS) NEMESIS_SEED=$(NEMESIS_SEED) LAKELOG_BIN=$(CURDIR)/target/debug/lakelog \
		cargo test -p e2e a_seeded_nemesis -- --nocapture

FUZZ_SECONDS ?= 600
fuzz: ## Fuzz the Kafka request decoder for FUZZ_SECONDS (600), then the Kafka listener's frame reader within its request budget, the record-batch decoder, the WAL decoders (stored runs, objects), the lake manifest reader and what reaches authentication (gRPC field 1, certificate subjects, SASL) for a tenth of that each (nightly; installs cargo-fuzz)
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
	cd fuzz && cargo +nightly fuzz run kafka_request -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -malloc_limit_mb=512
	cd fuzz && cargo +nightly fuzz run kafka_listener -- -max_total_time=$$(( $(FUZZ_SECONDS) / 10 )) -rss_limit_mb=2048 -malloc_limit_mb=512
	cd fuzz && cargo +nightly fuzz run record_batch -- -max_total_time=$$(( $(FUZZ_SECONDS) / 10 )) -rss_limit_mb=2048 -malloc_limit_mb=512
	cd fuzz && cargo +nightly fuzz run wal -- -max_total_time=$$(( $(FUZZ_SECONDS) / 10 )) -rss_limit_mb=2048 -malloc_limit_mb=512
	cd fuzz && cargo +nightly fuzz run lake_manifest -- -max_total_time=$$(( $(FUZZ_SECONDS) / 10 )) -rss_limit_mb=2048 -malloc_limit_mb=512
	cd fuzz && cargo +nightly fuzz run auth_input -- -max_total_time=$$(( $(FUZZ_SECONDS) / 10 )) -rss_limit_mb=2048 -malloc_limit_mb=512
