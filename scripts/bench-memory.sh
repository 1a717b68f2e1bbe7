#!/usr/bin/env bash
# `make bench-memory`: a writer role's memory under overload, then under hostile Kafka
# clients (scripts/kafka-hostile.py: pipelined padded frames, pipelined 8 MB produces, frames
# left half sent, 2,000 idle sockets, each from 127.0.0.2 while a probe from 127.0.0.1 asks
# ApiVersions every 100 ms) against buffer_size + the Kafka request budget + 64 MiB.
# BENCH_ROWS=hostile runs only those. Starts etcd, SeaweedFS and one
# `lakelog writer` (release build, deploy/config/writer.yaml: 64 MiB buffer), measures what it
# absorbs when saturated, then offers it 5x that from another process (`bench append
# --endpoint`, 100 logs) in 10 kB appends (20,000 in flight: per-request state at its most)
# and in 100 kB appends (2,000 in flight), and reports the writer's peak RSS (VmHWM) for each
# against buffer_size + 64 MiB. Then the same in process (`bench append --config` on the same
# etcd and SeaweedFS, and `--data-dir` on a local directory with the embedded metadata store):
# saturated, then 5x what that absorbed in 10 kB appends from $BENCH_IN_PROCESS (8,192) in
# flight; the peak RSS there is the whole process's, the load generator's tasks included. Ports are make cluster's (etcd 2379, S3 8333, writer 7540): stop a
# running cluster first. State and logs: $LAKELOG_BENCH_DIR (default ./.bench-memory).
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${LAKELOG_BENCH_DIR:-$root/.bench-memory}"
bin="${LAKELOG_BIN:-$root/target/release/lakelog}"
config="${WRITER_CONFIG:-$root/deploy/config/writer.yaml}"
weed="$root/.tools/venv/bin/weed"
seconds="${BENCH_SECONDS:-15}"
in_flight="${BENCH_IN_FLIGHT:-20000}"
in_process="${BENCH_IN_PROCESS:-8192}"
export LAKELOG_S3_ACCESS_KEY_ID=lakelog LAKELOG_S3_SECRET_ACCESS_KEY=lakelog-secret

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

for p in 2379 8333 7540; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "bench-memory: 127.0.0.1:$p is taken (a running make cluster? make cluster-stop)" >&2
    exit 1
  fi
done
wait_port() {
  for _ in $(seq 1 $(( ${2:-30} * 10 ))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "bench-memory: nothing listens on 127.0.0.1:$1; logs in $dir" >&2
  exit 1
}
kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }

rm -rf "$dir" && mkdir -p "$dir/etcd" "$dir/s3"
etcd --data-dir "$dir/etcd" --name bench \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster bench=http://127.0.0.1:2380 >"$dir/etcd.log" 2>&1 &
pids+=($!)
(cd "$dir/s3" && AWS_ACCESS_KEY_ID=$LAKELOG_S3_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$LAKELOG_S3_SECRET_ACCESS_KEY \
  exec "$weed" mini -dir=. -ip=127.0.0.1 -ip.bind=127.0.0.1 -bucket=lakelog -s3.port=8333 \
  -webdav=false -admin.ui=false) >"$dir/s3.log" 2>&1 &
pids+=($!)
wait_port 2379
wait_port 8333 60

# The writer, once per row: a fresh process, so its peak RSS is that row's.
start_writer() {
  "$bin" writer --config "$config" >"$dir/writer-$1.log" 2>&1 &
  writer=$!
  pids+=("$writer")
  wait_port 7540
  sleep 1
}
stop_writer() {
  kill "$writer" 2>/dev/null || true
  wait "$writer" 2>/dev/null || true
}
bench() {
  "$bin" --endpoint http://127.0.0.1:7540 bench append --logs 100 --record-size 1000 \
    --duration "${seconds}s" --json "$@" | tail -1
}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }

# Hostile Kafka clients: the writer's peak RSS, and what a probe from another address saw.
hostile_rows() {
  local mode conns size json
  for row in "padded 32 8388608" "produce 32 8000000" "half 64 8388608" "idle 2000 0"; do
    read -r mode conns size <<<"$row"
    start_writer "hostile-$mode"
    json=$(python3 "$root/scripts/kafka-hostile.py" 127.0.0.1:9092 "$mode" "$conns" "$size" "$seconds")
    echo "| $mode | $conns | $(python3 -c "print(f'{$size / 1048576:.0f}')") |" \
      "$(python3 -c "print(f'{$(field "$json" '["bytes"]') / 1048576:.0f}')") |" \
      "$(field "$json" '["connections"]') | $(field "$json" '["probes"]') |" \
      "$(field "$json" '["probes_failed"]') | $(field "$json" '["probe_ms"]["p50"]') |" \
      "$(field "$json" '["probe_ms"]["max"]') | $(mib "$(kib "$writer" VmHWM)") |"
    stop_writer
  done
}
mib() { python3 -c "print(f'{$1 / 1024:.1f}')"; }
if [ "${BENCH_ROWS:-all}" = hostile ]; then
  rows=$(hostile_rows)
  cat <<OUT
bench-memory: hostile Kafka clients on a writer role (64 MiB buffer, 100 MiB request budget), ${seconds} s a row
| mode | connections | frame MiB | offered MiB | connections made | probes answered | probes failed | probe p50 ms | probe max ms | RSS peak MiB |
|---|---|---|---|---|---|---|---|---|---|
$rows
target: buffer_size + request budget + 64 MiB = 228 MiB
OUT
  exit 0
fi

start_writer saturated
idle=$(kib "$writer" VmRSS)
sat=$(bench --records-per-entry 10 --concurrency 2000)
sat_mb=$(field "$sat" '["append_mb_per_s"]')
sat_hwm=$(kib "$writer" VmHWM)
stop_writer

offer=$(python3 -c "print(int(float('$sat_mb') * 5 * 1e6))")
start_writer overload
over=$(bench --records-per-entry 10 --concurrency "$in_flight" --rate "$offer")
over_hwm=$(kib "$writer" VmHWM)
stop_writer

start_writer large
large=$(bench --records-per-entry 100 --concurrency 2000 --rate "$offer")
large_hwm=$(kib "$writer" VmHWM)
stop_writer

# In process: the writer inside the bench, its flush interval the writer role's.
in_proc() {
  "$bin" bench append --logs 100 --record-size 1000 --records-per-entry 10 \
    --flush-interval 250ms --duration "${seconds}s" --json "$@" | tail -1
}
in_proc_rows() {
  local stores=$1 sat over offered
  shift
  sat=$(in_proc "$@" --concurrency 2000)
  offered=$(python3 -c "print(int(float('$(field "$sat" '["append_mb_per_s"]')') * 5 * 1e6))")
  over=$(in_proc "$@" --concurrency "$in_process" --rate "$offered")
  for row in "saturated (10 kB, 2,000 in flight)|as acked|$sat" \
    "5x overload (10 kB, $in_process in flight)|$(python3 -c "print(f'{$offered / 1e6:.1f}')")|$over"; do
    IFS='|' read -r name offer json <<<"$row"
    echo "| in process, $stores: $name | $offer | $(field "$json" '["append_mb_per_s"]') |" \
      "$(field "$json" '["refused"]') | $(field "$json" '["ack_ms"]["p50"]') |" \
      "$(field "$json" '["rss_peak_mb"]') |"
  done
}
remote_stores=$(in_proc_rows "etcd + SeaweedFS" --config "$config")
local_dir=$(in_proc_rows "local directory" --data-dir "$dir/local")
hostile=$(hostile_rows)

cat <<OUT
bench-memory: writer role alone on etcd + SeaweedFS, then in process; 64 MiB buffer, 100 logs, ${seconds} s a row
| row | offered MB/s | absorbed MB/s | refused | ack p50 ms | RSS peak MiB (writer role; in process: the bench's) |
|---|---|---|---|---|---|
| idle | — | — | — | — | $(mib "$idle") |
| saturated (10 kB, 2,000 in flight) | as acked | $sat_mb | $(field "$sat" '["refused"]') | $(field "$sat" '["ack_ms"]["p50"]') | $(mib "$sat_hwm") |
| 5x overload (10 kB, $in_flight in flight) | $(python3 -c "print(f'{$offer / 1e6:.1f}')") | $(field "$over" '["append_mb_per_s"]') | $(field "$over" '["refused"]') | $(field "$over" '["ack_ms"]["p50"]') | $(mib "$over_hwm") |
| 5x overload (100 kB, 2,000 in flight) | $(python3 -c "print(f'{$offer / 1e6:.1f}')") | $(field "$large" '["append_mb_per_s"]') | $(field "$large" '["refused"]') | $(field "$large" '["ack_ms"]["p50"]') | $(mib "$large_hwm") |
$remote_stores
$local_dir
target: buffer_size + 64 MiB = 128 MiB

Hostile Kafka clients (from 127.0.0.2; a probe from 127.0.0.1 asks ApiVersions every 100 ms)
| mode | connections | frame MiB | offered MiB | connections made | probes answered | probes failed | probe p50 ms | probe max ms | RSS peak MiB |
|---|---|---|---|---|---|---|---|---|---|
$hostile
target: buffer_size + request budget + 64 MiB = 228 MiB
OUT
