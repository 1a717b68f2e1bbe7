"""Helpers the benchmark scripts (bench-kafka.py, bench-peers.py, bench-scale.py) share."""
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    """A free TCP port on 127.0.0.1 (the benchmarks never listen elsewhere)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    """The p-quantile (0..1) of the samples xs; NaN when there are none."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def wait_port(port, proc, what, seconds=60):
    """Until something listens on 127.0.0.1:port; the script exits if `proc` (the process
    that should) exits first, or after `seconds`."""
    me = os.path.basename(sys.argv[0]).removesuffix(".py")
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{me}: {what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{me}: {what} did not listen on {port} within {seconds} s")


def stop(proc, seconds=30):
    """SIGTERM, then SIGKILL if `proc` has not exited within `seconds`."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
