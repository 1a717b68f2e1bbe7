#!/usr/bin/env python3
"""`make helm-check`: the Helm chart, checked offline (no Kubernetes cluster runs here).

For the default values and each helm/lakelog/ci/*.yaml: validate the values against
values.schema.json, lint the chart (strict), render it, validate every manifest against the
Kubernetes schemas (kubernetes-validate, strict; the ServiceMonitor CRD is checked by shape),
and parse every role's rendered config with `lakelog check-config` (the roles' own parser).
Every Deployment's health probes ask the port its role's config serves health on (gRPC; under
TLS, /healthz on the metrics port). With TLS on, every listener of every role config serves
TLS and advertises https://; with NetworkPolicies on, every role has one, reaching etcd and
object storage only, and etcd takes connections from the roles only.
Then: raising one role's replica count changes that role's Deployment and nothing else.
Needs the PyPI packages helm-python-sdk and kubernetes-validate (`install-deps.sh deploy`).
"""
import copy
import glob
import os
import subprocess
import sys
import tempfile

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = os.path.join(ROOT, "helm", "lakelog")
BIN = os.path.join(ROOT, "target", "debug", "lakelog")
KUBE = "1.33.0"
ROLES = ["catalog", "writer", "reader", "compactor", "cleaner"]


def fail(msg):
    print(f"helm-check: {msg}", file=sys.stderr)
    sys.exit(1)


def render(values):
    chart = helm.Chart.load(CHART)
    try:
        chart.validate_schema(chart.merge_values(values) if hasattr(chart, "merge_values") else values)
    except helm.HelmError as e:
        fail(f"values rejected by values.schema.json: {e}")
    out = chart.render(values, name="ll", namespace="lakelog", is_install=True)
    docs = []
    for path, text in sorted(out.items()):
        for d in yaml.safe_load_all(text):
            if d:
                docs.append((path, d))
    return docs


def check(name, values):
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE}")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    if problems:
        fail(f"{name}: lint: {problems}")
    docs = render(values)
    kinds = {}
    with tempfile.TemporaryDirectory() as tmp:
        configs = []
        for path, d in docs:
            kind = d.get("kind")
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == "ServiceMonitor":
                ok = d.get("apiVersion") == "monitoring.coreos.com/v1" and d["spec"]["endpoints"]
                if not ok:
                    fail(f"{name}: malformed ServiceMonitor {d['metadata']['name']}")
                continue
            if kind == "Certificate":
                spec = d.get("spec", {})
                ok = (d.get("apiVersion") == "cert-manager.io/v1" and spec.get("secretName")
                      and spec.get("dnsNames") and spec.get("issuerRef", {}).get("name"))
                if not ok:
                    fail(f"{name}: malformed Certificate {d['metadata']['name']}")
                continue
            try:
                kubernetes_validate.validate(d, KUBE, strict=True)
            except Exception as e:  # ValidationError, SchemaNotFoundError, ...
                fail(f"{name}: {path}: {kind} {d['metadata'].get('name')}: {e}")
            if kind == "ConfigMap":
                f = os.path.join(tmp, d["metadata"]["name"] + ".yaml")
                with open(f, "w") as fh:
                    fh.write(d["data"]["config.yaml"])
                configs.append(f)
        probes_follow_configs(name, docs)
        credentials_follow_source(name, values, docs)
        security_follows_values(name, values, docs)
        if len(configs) != len(ROLES):
            fail(f"{name}: {len(configs)} role configs rendered, want {len(ROLES)}")
        r = subprocess.run([BIN, "check-config", *configs], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{name}: a rendered role config is invalid: {r.stderr.strip()}")
    print(f"helm-check: {name}: lint ok, {len(docs)} manifests valid for Kubernetes {KUBE} "
          f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}), 5 role configs parse")
    return docs


def probes_follow_configs(name, docs):
    """Each Deployment probes gRPC health on the port its role's config serves it on."""
    by_name = {(d["kind"], d["metadata"]["name"]): d for _, d in docs}
    for (kind, dname), d in by_name.items():
        if kind != "Deployment":
            continue
        c = d["spec"]["template"]["spec"]["containers"][0]
        role = c["name"]
        config = yaml.safe_load(by_name[("ConfigMap", dname)]["data"]["config.yaml"])
        section = config.get(role) if role in config else config.get("maintenance", {})
        serves = section.get("listen") or ""
        port = int(str(serves).rsplit(":", 1)[-1]) if serves else None
        metrics = str(config.get("telemetry", {}).get("metrics_listen", "")).rsplit(":", 1)[-1]
        named = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe"):
            p = c.get(probe) or {}
            if "httpGet" in p:
                # Under TLS: /healthz on the metrics port the config serves.
                h = p["httpGet"]
                got = named.get(h.get("port"), h.get("port"))
                if h.get("path") != "/healthz" or str(got) != metrics:
                    fail(f"{name}: {dname}: {probe} asks {h}; metrics serve on {metrics}")
                continue
            got = p.get("grpc", {}).get("port")
            if got is None or got != port:
                fail(f"{name}: {dname}: {probe} asks gRPC health on {got}; its config serves on {serves!r}")


def credentials_follow_source(name, values, docs):
    """Every role config names the credentials source; only `keys` makes or mounts a Secret."""
    source = (values.get("credentials") or {}).get("source", "keys")
    for _, d in docs:
        if d.get("kind") == "ConfigMap":
            s3 = yaml.safe_load(d["data"]["config.yaml"])["object_store"]["s3"]
            if s3.get("credentials") != source:
                fail(f"{name}: {d['metadata']['name']}: credentials {s3.get('credentials')!r}, want {source!r}")
        if d.get("kind") == "Deployment":
            env = {e["name"] for e in d["spec"]["template"]["spec"]["containers"][0].get("env", [])}
            mounted = "LAKELOG_S3_SECRET_ACCESS_KEY" in env
            if mounted != (source == "keys"):
                fail(f"{name}: {d['metadata']['name']}: S3 keys from a Secret: {mounted}, source {source}")
    secrets = [d for _, d in docs if d.get("kind") == "Secret"]
    if source != "keys" and secrets:
        fail(f"{name}: a Secret rendered for credentials source {source}")


def security_follows_values(name, values, docs):
    """TLS on: every listener serves it and pods advertise https (and probe /healthz); auth on
    in every config; NetworkPolicies on: one per role, and etcd's."""
    tls = (values.get("tls") or {}).get("enabled", True)
    auth = (values.get("auth") or {}).get("enabled", True)
    netpol = (values.get("networkPolicy") or {}).get("enabled", True)
    for _, d in docs:
        if d.get("kind") == "ConfigMap":
            c = yaml.safe_load(d["data"]["config.yaml"])
            n = d["metadata"]["name"]
            if c.get("auth", {}).get("enabled") != auth:
                fail(f"{name}: {n}: auth.enabled is not {auth}")
            for section in ("catalog", "writer", "reader", "maintenance"):
                if section not in c:
                    continue
                listeners = [c[section]] + ([c[section]["kafka"]] if "kafka" in c[section] else [])
                for l in listeners:
                    if bool(l.get("tls")) != tls:
                        fail(f"{name}: {n}: {section} listener TLS {bool(l.get('tls'))}, want {tls}")
        if d.get("kind") == "Deployment":
            env = {e["name"]: e.get("value", "") for e in d["spec"]["template"]["spec"]["containers"][0].get("env", [])}
            for k, v in env.items():
                if k.endswith("_ADVERTISE") and "KAFKA" not in k and v.startswith("https://") != tls:
                    fail(f"{name}: {d['metadata']['name']}: {k}={v} with TLS {tls}")
    policies = [d for _, d in docs if d.get("kind") == "NetworkPolicy"]
    if not netpol:
        if policies:
            fail(f"{name}: NetworkPolicies rendered while disabled")
        return
    if len(policies) != len(ROLES) + 1:
        fail(f"{name}: {len(policies)} NetworkPolicies, want one per role and etcd's")
    for p in policies:
        spec = p["spec"]
        if "Egress" in spec.get("policyTypes", []):
            # A role: egress to etcd (pods), object storage (CIDRs) and DNS, nothing else.
            kinds = [sorted(k for t in rule.get("to", []) for k in t) for rule in spec["egress"]]
            if kinds != [["podSelector"], ["ipBlock"] * len(kinds[1]), []]:
                fail(f"{name}: {p['metadata']['name']}: egress {spec['egress']}")
        else:
            # etcd's: only Lakelog's pods and etcd's peers.
            sources = [t["podSelector"]["matchLabels"] for rule in spec["ingress"] for t in rule["from"]]
            if not any(s.get("app.kubernetes.io/name") == "lakelog" for s in sources) or len(sources) != 2:
                fail(f"{name}: {p['metadata']['name']}: etcd ingress {spec['ingress']}")


def workloads(docs):
    return {(d["kind"], d["metadata"]["name"]): d for _, d in docs}


def main():
    if not os.path.exists(BIN):
        fail(f"{BIN} missing: run `cargo build --bin lakelog` first")
    defaults = {}
    base = check("default values", defaults)
    for f in sorted(glob.glob(os.path.join(CHART, "ci", "*.yaml"))):
        with open(f) as fh:
            check(os.path.relpath(f, ROOT), yaml.safe_load(fh) or {})
    # One role's replica count changes only that role's Deployment.
    before = workloads(base)
    for role in ROLES:
        values = {"roles": {role: {"replicas": 7}}}
        after = workloads(render(values))
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if changed != [("Deployment", f"ll-{role}")]:
            fail(f"roles.{role}.replicas=7 changed {changed}")
    print("helm-check: changing one role's replicas changes only that role's Deployment")


if __name__ == "__main__":
    main()
