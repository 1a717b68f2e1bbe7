#!/usr/bin/env python3
"""Turns bench-results.jsonl (scripts/bench-matrix.sh) into markdown tables and two SVG plots.

    scripts/bench-report.py bench-results.jsonl docs/img
    scripts/bench-report.py --peers PEERS.jsonl LATENCY.jsonl docs/img

Prints the tables (for docs/performance.md) and writes
  DIR/ack-vs-flush.svg     ack p50 and p99 against flush interval, per store (logs = 100)
  DIR/puts-per-gib.svg     PUTs per GiB against log count, per store (largest flush interval)
With --peers, from `scripts/bench-peers.sh --json` rows (a peers run, and latency-profile runs):
  DIR/ack-PROFILE.svg      ack p50 and p99 per partitions and writer setting, per latency profile
  DIR/one-partition-mbps.svg, -cpu.svg   one partition, saturating: MB/s, server CPU s/GB
Each figure is labelled with the machine the numbers came from. Standard library only.
"""
import json
import os
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def table(rows):
    head = ("store", "flush ms", "logs", "MB/s", "× raw PUT", "ack p50", "ack p99", "p99 / bound",
            "PUTs/GiB", "txns/flush", "flush KiB", "RSS MiB")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in sorted(rows, key=lambda r: (r["store"], r["flush_interval_ms"], r["logs"])):
        bound = r["flush_interval_ms"] + 2 * (r["baseline_put_ms"]["p99"] + r["baseline_txn_ms_p99"])
        flushes = r["flushes"] or 1
        print("| " + " | ".join([
            r["store"], f'{r["flush_interval_ms"]:.0f}', str(r["logs"]), f'{r["append_mb_per_s"]:.1f}',
            f'{r["append_mb_per_s"] / max(r["baseline_put_mb_per_s"], 1e-9):.2f}',
            f'{r["ack_ms"]["p50"]:.1f}', f'{r["ack_ms"]["p99"]:.1f}', f'{r["ack_ms"]["p99"] / bound:.2f}',
            f'{r["puts_per_gib"]:.0f}', f'{r["metadata_txns"] / flushes:.2f}',
            f'{r["put_bytes"] / flushes / 1024:.0f}', f'{r["rss_peak_mb"]:.0f}',
        ]) + " |")


COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def svg_frame(w, h, m, title, note, ylabel, top, sy, xlabel=None):
    """A chart's opening: the canvas, title and note, both axes, their labels and five y ticks
    up to `top` (placed by `sy`)."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<text x="{w/2}" y="38" text-anchor="middle" fill="#555">{note}</text>',
           f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="black"/>']
    if xlabel:
        out.append(f'<text x="{w/2}" y="{h-15}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text x="15" y="{h/2}" text-anchor="middle" transform="rotate(-90 15 {h/2})">{ylabel}</text>')
    for i in range(5):
        y = top * i / 4
        out.append(f'<text x="{m-6}" y="{sy(y)+4:.1f}" text-anchor="end">{y:.0f}</text>')
    return out


def svg_write(path, out):
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def svg_lines(path, title, xlabel, ylabel, series, machine, logx=False):
    """series: {name: [(x, y), ...]}; writes a small line chart."""
    import math
    w, h, m = 640, 400, 60
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    if not xs:
        return
    fx = (lambda x: math.log10(max(x, 1e-9))) if logx else (lambda x: x)
    x0, x1 = min(map(fx, xs)), max(map(fx, xs))
    y1 = max(ys) * 1.1 or 1
    sx = lambda x: m + (fx(x) - x0) / ((x1 - x0) or 1) * (w - 2 * m)
    sy = lambda y: h - m - y / y1 * (h - 2 * m)
    out = svg_frame(w, h, m, title, machine, ylabel, y1, sy, xlabel)
    for x in sorted(set(xs)):
        out.append(f'<text x="{sx(x):.1f}" y="{h-m+16}" text-anchor="middle">{x:g}</text>')
    for i, (name, pts) in enumerate(sorted(series.items())):
        c = COLORS[i % len(COLORS)]
        pts = sorted(pts)
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' %
                   (c, " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)))
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>')
        out.append(f'<text x="{w-m+5}" y="{m+16*i}" fill="{c}">{name}</text>')
    svg_write(path, out)


def svg_bars(path, title, ylabel, groups, note, marks=()):
    """groups: [(label, [(series, value, inner)])], `inner` (or None) drawn as a darker bar
    inside (a p50 inside its p99); `marks`: [(group index, value, text)] drawn as a dashed
    line over that group (a target)."""
    w, h, m = 720, 400, 60
    names = []
    for _, bars in groups:
        for name, _, _ in bars:
            if name not in names:
                names.append(name)
    top = max([v for _, bars in groups for _, v, _ in bars] + [v for _, v, _ in marks]) * 1.1 or 1
    gw = (w - 2 * m) / max(len(groups), 1)
    bw = gw * 0.8 / max(len(names), 1)
    sy = lambda y: h - m - y / top * (h - 2 * m)
    out = svg_frame(w, h, m, title, note, ylabel, top, sy)
    for g, (label, bars) in enumerate(groups):
        x0 = m + g * gw + gw * 0.1
        out.append(f'<text x="{m + (g + 0.5) * gw:.1f}" y="{h-m+16}" text-anchor="middle">{label}</text>')
        for name, value, inner in bars:
            k = names.index(name)
            x, c = x0 + k * bw, COLORS[k % len(COLORS)]
            out.append(f'<rect x="{x:.1f}" y="{sy(value):.1f}" width="{bw*0.9:.1f}" '
                       f'height="{sy(0)-sy(value):.1f}" fill="{c}" fill-opacity="0.45"/>')
            if inner is not None:
                out.append(f'<rect x="{x:.1f}" y="{sy(inner):.1f}" width="{bw*0.9:.1f}" '
                           f'height="{sy(0)-sy(inner):.1f}" fill="{c}"/>')
            out.append(f'<text x="{x + bw*0.45:.1f}" y="{sy(value)-3:.1f}" text-anchor="middle" '
                       f'font-size="10">{value:g}</text>')
    for g, value, text in marks:
        x0, x1 = m + g * gw + gw * 0.05, m + (g + 1) * gw - gw * 0.05
        out.append(f'<line x1="{x0:.1f}" y1="{sy(value):.1f}" x2="{x1:.1f}" y2="{sy(value):.1f}" '
                   f'stroke="black" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{x1:.1f}" y="{sy(value)-3:.1f}" text-anchor="end" font-size="10">{text}</text>')
    for k, name in enumerate(names):
        out.append(f'<text x="{m + 8}" y="{m + 16 * k}" fill="{COLORS[k % len(COLORS)]}">{name}</text>')
    svg_write(path, out)


def peers(peers_path, latency_path, outdir):
    """The plots of bench-peers runs: ack latency by profile, and one partition against Kafka."""
    os.makedirs(outdir, exist_ok=True)
    lat = load(latency_path)
    targets = {"s3-standard": 250, "s3-express": 75}
    for profile, target in targets.items():
        groups, marks = [], []
        for partitions in (1, 8):
            mine = [r for r in lat if r["profile"] == profile and r["partitions"] == partitions]
            if mine:
                marks.append((len(groups), target, f"target p99 {target}"))
                groups.append((f"{partitions} partition{'s' if partitions > 1 else ''}",
                               [(r["setting"], r["ack_p99_ms"], r["ack_p50_ms"]) for r in mine]))
        svg_bars(os.path.join(outdir, f"ack-{profile}.svg"),
                 f"Ack latency at 10 MiB/s, {profile} latencies (p99; p50 darker)",
                 "ack latency (ms)", groups,
                 "librdkafka, idempotent, linger 5 ms; lakelog standalone --latency-profile", marks)
    rows = load(peers_path)
    for metric, label, name in (("mb_per_s", "MB/s", "mbps"), ("cpu_s_per_gb", "server CPU s/GB", "cpu")):
        groups = []
        for client in ("librdkafka", "java"):
            mine = [r for r in rows if r["partitions"] == 1 and r["load"] == "saturating"
                    and r["client"] == client and metric in r]
            groups.append((client, [(r["server"], r[metric], None) for r in mine]))
        svg_bars(os.path.join(outdir, f"one-partition-{name}.svg"),
                 f"One partition, saturating: {label}", label, groups,
                 "scripts/bench-peers.sh, one run; kafka-fsync: flush per message")


def main():
    if sys.argv[1] == "--peers":
        peers(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "docs/img")
        return
    rows = load(sys.argv[1])
    outdir = sys.argv[2] if len(sys.argv) > 2 else "docs/img"
    os.makedirs(outdir, exist_ok=True)
    table(rows)
    machine = rows[0]["machine"] if rows else ""
    ack = {}
    for r in rows:
        if r["logs"] == 100:
            ack.setdefault(f'{r["store"]} p50', []).append((r["flush_interval_ms"], r["ack_ms"]["p50"]))
            ack.setdefault(f'{r["store"]} p99', []).append((r["flush_interval_ms"], r["ack_ms"]["p99"]))
    svg_lines(os.path.join(outdir, "ack-vs-flush.svg"), "Ack latency vs flush interval (100 logs)",
              "flush interval (ms)", "ack latency (ms)", ack, machine, logx=True)
    puts = {}
    for store in {r["store"] for r in rows}:
        mine = [r for r in rows if r["store"] == store]
        top = max(r["flush_interval_ms"] for r in mine)
        puts[store] = [(r["logs"], r["puts_per_gib"]) for r in mine if r["flush_interval_ms"] == top]
    svg_lines(os.path.join(outdir, "puts-per-gib.svg"), "PUTs per GiB vs log count (largest flush interval)",
              "logs", "PUTs per GiB", puts, machine, logx=True)


if __name__ == "__main__":
    main()
