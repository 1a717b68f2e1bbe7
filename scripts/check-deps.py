#!/usr/bin/env python3
"""Checks the workspace's dependency-direction rules (README, "Architecture rules").

1. libs/* never depend on services/*.
2. services/* never depend on each other (they talk gRPC) — except `lakelog`, the command
   that composes every role into one process (`standalone`).
3. Only the `metadata` crate imports etcd-client.
4. Only the `config` crate parses YAML (serde_norway / serde_yaml / serde_yml).
5. `testkit` is only ever a dev-dependency.
6. `e2e` is black-box: it runs the `lakelog` binary and never depends on a service crate.
7. The crate docs' "never"s (NEVER below), on each crate's own dependencies: the Kafka front end
   knows no log store; Level 1 no catalog, Kafka, gRPC or maintenance; the client SDK links no
   server crate; formats know no store; maintenance no catalog, Kafka or gRPC; metadata is the
   floor.
8. What a crate must not reach at all, through any chain of normal dependencies (what
   `cargo tree -e normal -p <crate>` shows): Level 1 reaches neither lake tables nor what
   maintains it.
Exits 1 with one line per broken rule.
"""
import json
import os
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"], cwd=root))

YAML = {"serde_norway", "serde_yaml", "serde_yml"}
members = {}
for p in meta["packages"]:
    rel = os.path.relpath(os.path.dirname(p["manifest_path"]), root)
    members[p["name"]] = (rel.split(os.sep)[0], p)

errors = []
for name, (area, pkg) in members.items():
    for dep in pkg["dependencies"]:
        d, kind = dep["name"], dep.get("kind") or "normal"
        if d in members:
            dep_area = members[d][0]
            if area == "libs" and dep_area == "services":
                errors.append(f"{name}: libs must not depend on services ({d})")
            if area == "services" and dep_area == "services" and d != name and name != "lakelog":
                errors.append(f"{name}: services must not depend on each other ({d})")
            if area == "e2e" and dep_area == "services":
                errors.append(f"{name}: the e2e tests are black-box: no service crate ({d})")
            if d == "testkit" and kind != "dev":
                errors.append(f"{name}: testkit may only be a dev-dependency")
        if d == "etcd-client" and name != "metadata":
            errors.append(f"{name}: only the metadata crate may import etcd-client")
        if d in YAML and name != "config" and kind != "dev":
            errors.append(f"{name}: only the config crate may parse YAML ({d})")

# 7. Direct normal dependencies a crate's doc says it never takes.
SERVERS = {"logstore", "metadata", "objstore", "kafka", "brokers", "catalog", "role",
           "logservice", "maintenance", "security"}
NEVER = {
    "kafka": {"logstore", "metadata", "objstore", "brokers", "catalog", "maintenance"},
    "logstore": {"catalog", "kafka", "brokers", "proto", "logservice", "role", "lake",
                 "maintenance", "security", "config"},
    "client": SERVERS,
    "wal": {"metadata", "objstore", "logstore"},
    "recordbatch": {"metadata", "objstore", "logstore"},
    "columnar": {"metadata", "objstore", "logstore", "lake"},
    "lake": {"metadata", "objstore", "logstore", "maintenance"},
    "maintenance": {"catalog", "kafka", "brokers", "proto", "logservice", "role"},
    "metadata": set(members) - {"metadata", "config"},
    "streamconfig": set(members) - {"streamconfig"},
}
normal = {
    name: {d["name"] for d in pkg["dependencies"]
           if d["name"] in members and (d.get("kind") or "normal") == "normal"}
    for name, (_, pkg) in members.items()
}
for name, never in NEVER.items():
    for d in sorted(normal.get(name, set()) & never):
        errors.append(f"{name}: must never depend on {d} (its crate doc)")

# 8. Never reached through any chain of normal dependencies.
NEVER_REACHED = {"logstore": {"lake", "maintenance", "kafka", "catalog", "proto"}}
for name, never in NEVER_REACHED.items():
    seen, todo = set(), [name]
    while todo:
        for d in normal.get(todo.pop(), set()) - seen:
            seen.add(d)
            todo.append(d)
    for d in sorted(seen & never):
        errors.append(f"{name}: reaches {d} through its dependencies (cargo tree -e normal -p {name})")

for e in errors:
    print(f"check-deps: {e}")
if errors:
    sys.exit(1)
print(f"check-deps: {len(members)} crates follow the dependency rules")
