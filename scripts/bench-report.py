#!/usr/bin/env python3
"""Turns bench-results.jsonl (scripts/bench-matrix.sh) into markdown tables and two SVG plots.

    scripts/bench-report.py bench-results.jsonl docs/img

Prints the tables (for docs/performance.md) and writes
  DIR/ack-vs-flush.svg     ack p50 and p99 against flush interval, per store (logs = 100)
  DIR/puts-per-gib.svg     PUTs per GiB against log count, per store (largest flush interval)
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
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<text x="{w/2}" y="38" text-anchor="middle" fill="#555">{machine}</text>',
           f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="black"/>',
           f'<text x="{w/2}" y="{h-15}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{h/2}" text-anchor="middle" transform="rotate(-90 15 {h/2})">{ylabel}</text>']
    for x in sorted(set(xs)):
        out.append(f'<text x="{sx(x):.1f}" y="{h-m+16}" text-anchor="middle">{x:g}</text>')
    for i in range(5):
        y = y1 * i / 4
        out.append(f'<text x="{m-6}" y="{sy(y)+4:.1f}" text-anchor="end">{y:.0f}</text>')
    for i, (name, pts) in enumerate(sorted(series.items())):
        c = colors[i % len(colors)]
        pts = sorted(pts)
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' %
                   (c, " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)))
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>')
        out.append(f'<text x="{w-m+5}" y="{m+16*i}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
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
