"""Helpers the benchmark scripts (bench-kafka.py, bench-peers.py) share."""
import socket


def free_port():
    """A free TCP port on 127.0.0.1 (the benchmarks never listen elsewhere)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    """The p-quantile (0..1) of the samples xs; NaN when there are none."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")
