"""Benchmark: the node agent's /proc scan (every process's cgroup read, as the agent does) on fake trees of
1,000 and 5,000 processes.

Run on purpose (`.venv/bin/python bench/node_scan.py`), never from the tests. It prints the CPU
time of one scan at each size (median of 5, after a warm-up scan) and the ratio between them,
so the claim "one scan of 5,000 processes in well under a second of CPU" rests on a measurement
made in one run on this machine. It also prints the memory one scan allocates at its peak
(tracemalloc, scan plus the leftover tracker) and the whole agent process's peak RSS after
importing everything it runs with (the Kubernetes client dominates that).
"""

from __future__ import annotations

import runpy
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import datetime  # noqa: E402
import resource  # noqa: E402
import tracemalloc  # noqa: E402

from janitor.node_agent import agent  # noqa: E402,F401  (imported for the RSS figure)
from janitor.node_agent.procfs import scan  # noqa: E402
from janitor.node_agent.tracker import DStateTracker  # noqa: E402

make_fake_proc = runpy.run_path(str(ROOT / "tests/fixtures/node/fake_proc.py"))["make_fake_proc"]


def cpu_seconds(root: Path, runs: int = 5) -> tuple[float, int]:
    scan(root, every_cgroup=True)  # warm the page cache: the agent scans every few seconds, not cold
    times = []
    for _ in range(runs):
        began = time.process_time()
        result = scan(root, every_cgroup=True)
        times.append(time.process_time() - began)
    return statistics.median(times), result.tasks


def main() -> None:
    figures = {}
    for processes in (1000, 5000):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "proc"
            make_fake_proc(root, processes)
            figures[processes] = cpu_seconds(root)
        seconds, tasks = figures[processes]
        print(f"{processes:>5} processes ({tasks} tasks): {seconds * 1000:.1f} ms CPU per scan, "
              f"{seconds / tasks * 1e6:.1f} us per task")
    ratio = figures[5000][0] / figures[1000][0]
    print(f"ratio 5000/1000: {ratio:.2f} (5.00 would be exactly linear)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proc"
        make_fake_proc(root, 5000)
        tracker = DStateTracker()
        tracemalloc.start()
        result = scan(root, every_cgroup=True)
        tracker.update(result.found, {}, datetime.datetime.now(datetime.timezone.utc))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print(f"peak allocation of one scan of 5000 processes ({len(result.found)} in D): {peak / 1024:.0f} KiB")
    print(f"agent process peak RSS (interpreter, kubernetes client, prometheus_client): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
