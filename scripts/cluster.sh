#!/usr/bin/env bash
# `make cluster`: the deployed topology as plain local processes, no Docker needed — etcd,
# SeaweedFS (S3), a catalog, 2 writers, 2 readers, a compactor and a cleaner, each role from
# its deploy/config/<role>.yaml (ports and ids adjusted for the second writer and reader).
# Prints the endpoints and leaves everything running; `make cluster-stop` stops it.
# State and logs: $LAKELOG_CLUSTER_DIR (default ./.cluster).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${LAKELOG_CLUSTER_DIR:-$root/.cluster}"
bin="${LAKELOG_BIN:-$root/target/debug/lakelog}"
weed="$root/.tools/venv/bin/weed"
export LAKELOG_S3_ACCESS_KEY_ID=lakelog LAKELOG_S3_SECRET_ACCESS_KEY=lakelog-secret

stop() {
  if [ -f "$dir/pids" ]; then
    while read -r pid; do kill "$pid" 2>/dev/null || true; done < "$dir/pids"
    sleep 1
    while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$dir/pids"
    rm -f "$dir/pids"
  fi
}
if [ "${1:-}" = "stop" ]; then stop; echo "cluster: stopped"; exit 0; fi

# Waits until 127.0.0.1:$1 accepts connections (or $2 seconds pass).
wait_port() {
  for _ in $(seq 1 $(( ${2:-30} * 10 ))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "cluster: nothing listens on 127.0.0.1:$1; logs in $dir" >&2
  exit 1
}

# SeaweedFS answers reads but takes no writes when its disk is nearly full (every PUT waits):
# a write through its filer (port 8888) must land within 30 s.
wait_weed_writes() {
  for _ in $(seq 1 30); do
    timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/8888 &&
      printf "PUT /cluster/ready HTTP/1.0\r\nContent-Length: 5\r\n\r\nready" >&3 &&
      head -c 12 <&3 | grep -q " 201"' 2>/dev/null && return 0
    sleep 1
  done
  echo "cluster: SeaweedFS takes no writes ($(df -h --output=avail "$dir" | tail -1 | tr -d ' ') free at $dir;" \
    "it needs room for its volumes); logs in $dir/s3.log" >&2
  exit 1
}

# Starts a background process: name, log, command...
start() {
  local name=$1 log=$2; shift 2
  nohup "$@" >"$log" 2>&1 < /dev/null &
  echo $! >> "$dir/pids"
  echo "cluster: started $name (pid $!)"
}

stop
rm -rf "$dir" && mkdir -p "$dir/etcd" "$dir/s3"
start etcd "$dir/etcd.log" etcd --data-dir "$dir/etcd" --name lakelog \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster lakelog=http://127.0.0.1:2380
(cd "$dir/s3" && AWS_ACCESS_KEY_ID=$LAKELOG_S3_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$LAKELOG_S3_SECRET_ACCESS_KEY \
  start seaweedfs "$dir/s3.log" "$weed" mini -dir=. -ip=127.0.0.1 -ip.bind=127.0.0.1 \
  -bucket=lakelog -s3.port=8333 -webdav=false -admin.ui=false)
wait_port 2379
wait_port 8333 60
wait_weed_writes

# role id listen-port metrics-port [kafka-port]
role_config() {
  sed -e "s/127.0.0.1:75[0-9][0-9]/127.0.0.1:$3/" -e "s/127.0.0.1:95[0-9][0-9]/127.0.0.1:$4/" \
      -e "s/127.0.0.1:909[0-9]/127.0.0.1:${5:-9092}/" \
      -e "s/# id: [a-z]*-1\b/id: $2/" "$root/deploy/config/$1.yaml" > "$dir/$2.yaml"
}
role_config catalog catalog-1 7541 9541
role_config writer writer-1 7540 9540 9092
role_config writer writer-2 7550 9550 9093
role_config reader reader-1 7542 9542
role_config reader reader-2 7552 9552
# Readers serve Kafka too (read-only; the reader section ends its file).
printf '  kafka:\n    listen: 127.0.0.1:9094\n' >> "$dir/reader-1.yaml"
printf '  kafka:\n    listen: 127.0.0.1:9095\n' >> "$dir/reader-2.yaml"
role_config compactor compactor-1 7543 9543
role_config cleaner cleaner-1 7544 9544
start catalog "$dir/catalog-1.log" "$bin" catalog --config "$dir/catalog-1.yaml"
for w in writer-1 writer-2; do start "$w" "$dir/$w.log" "$bin" writer --config "$dir/$w.yaml"; done
for r in reader-1 reader-2; do start "$r" "$dir/$r.log" "$bin" reader --config "$dir/$r.yaml"; done
start compactor "$dir/compactor-1.log" "$bin" compactor run --config "$dir/compactor-1.yaml"
start cleaner "$dir/cleaner-1.log" "$bin" cleaner run --config "$dir/cleaner-1.yaml"
for p in 7541 7540 7550 9092 9093 7542 7552 9094 9095 7543 7544 9543 9544; do wait_port "$p"; done

cat <<OUT

Lakelog cluster up (state and logs in $dir):
  etcd        http://127.0.0.1:2379
  S3          http://127.0.0.1:8333  bucket lakelog (key lakelog / lakelog-secret)
  catalog     http://127.0.0.1:7541   metrics http://127.0.0.1:9541/metrics
  writers     http://127.0.0.1:7540, http://127.0.0.1:7550   metrics :9540, :9550
              Kafka 127.0.0.1:9092, 127.0.0.1:9093
  readers     http://127.0.0.1:7542, http://127.0.0.1:7552   metrics :9542, :9552
              Kafka (read-only) 127.0.0.1:9094, 127.0.0.1:9095
  compactor   http://127.0.0.1:7543   metrics http://127.0.0.1:9543/metrics
  cleaner     http://127.0.0.1:7544   metrics http://127.0.0.1:9544/metrics
Try:
  lakelog --endpoint http://127.0.0.1:7541 stream create orders --partitions 4
  seq 1 100 | lakelog --endpoint http://127.0.0.1:7541 produce orders
  lakelog --endpoint http://127.0.0.1:7541 consume orders --partition 0 --from-beginning --max 10
  kcat -b 127.0.0.1:9092 -L                                   # the writers as Kafka brokers
  lakelog --endpoint http://127.0.0.1:7544 cleaner status     # the cutoff and what holds it
  lakelog --endpoint http://127.0.0.1:7543 admin compact       # a compaction cycle now
Stop: make cluster-stop
OUT
