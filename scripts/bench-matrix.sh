#!/usr/bin/env bash
# Runs `lakelog bench append` over flush interval × log count on one store and appends one JSON
# line per run to OUT (default bench-results.jsonl), tagged with the store and this machine.
#   scripts/bench-matrix.sh local              # in-process, local directory
#   scripts/bench-matrix.sh s3 CONFIG.yaml     # in-process, the stores of a config file
# Env: FLUSHES="5ms 50ms 250ms" LOGS="1 100 10000" DURATION=8s CONCURRENCY=512 OUT=…
set -euo pipefail
store="${1:?usage: bench-matrix.sh local|s3 [CONFIG]}"
config="${2:-}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/target/release/lakelog"
out="${OUT:-$root/bench-results.jsonl}"
machine="$(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(uname -m)"
for flush in ${FLUSHES:-5ms 50ms 250ms}; do
  for logs in ${LOGS:-1 100 10000}; do
    if [ "$store" = local ]; then
      dir="$(mktemp -d)"
      target=(--data-dir "$dir")
    else
      target=(--config "$config")
    fi
    echo "bench: $store flush=$flush logs=$logs" >&2
    line="$("$bin" bench append "${target[@]}" --logs "$logs" --flush-interval "$flush" \
      --concurrency "${CONCURRENCY:-512}" --record-size 1000 --records-per-entry 10 \
      --duration "${DURATION:-8s}" --baseline --json 2>/dev/null | tail -n 1)"
    [ "$store" = local ] && rm -rf "$dir"
    echo "{\"store\":\"$store\",\"machine\":\"$machine\",${line#\{}" >> "$out"
  done
done
