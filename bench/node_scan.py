"""Benchmark: the node agent's /proc scan (every process's cgroup read, as the agent does) on fake trees of
1,000 and 5,000 processes, and the GPU-holder detection on top of it.

Run on purpose (`.venv/bin/python bench/node_scan.py`), never from the tests. It prints the CPU
time of one scan at each size (median of 5, after a warm-up scan) and the ratio between them,
so the claim "one scan of 5,000 processes in well under a second of CPU" rests on a measurement
made in one run on this machine. It also prints the memory one scan allocates at its peak
(tracemalloc, scan plus the leftover tracker) and the whole agent process's peak RSS after
importing everything it runs with (the Kubernetes client dominates that).

GPU holders (`janitor.node_agent.holders`): every process of the 5,000 gets 24 open files and
300 mapped files (one in ten holds a GPU), and the scan is followed by what the agent does each
scan: pick the suspects (processes of pods that should be gone) and read their open files and
mappings. Two cases: every pod listed and alive (the usual node: no suspect, nothing read), and
no pod listed (right after every pod of the node was deleted: every process in a pod's cgroup,
half of them here, is a suspect and read whole): the worst a scan can cost.
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

from janitor.node_agent import agent, devices, holders  # noqa: E402,F401  (agent: imported for the RSS figure)
from janitor.node_agent.cgroups import pod_of  # noqa: E402
from janitor.node_agent.procfs import scan  # noqa: E402
from janitor.node_agent.tracker import DStateTracker, PodOnNode  # noqa: E402

_fake = runpy.run_path(str(ROOT / "tests/fixtures/node/fake_proc.py"))
make_fake_proc, add_open_files, CGROUP_SHAPES = _fake["make_fake_proc"], _fake["add_open_files"], _fake["CGROUP_SHAPES"]


def cpu_seconds(root: Path, runs: int = 5) -> tuple[float, int]:
    scan(root, every_cgroup=True)  # warm the page cache: the agent scans every few seconds, not cold
    times = []
    for _ in range(runs):
        began = time.process_time()
        result = scan(root, every_cgroup=True)
        times.append(time.process_time() - began)
    return statistics.median(times), result.tasks


def with_holders(root: Path, dev: Path, pods: dict[str, PodOnNode], runs: int = 5) -> tuple[float, int, int]:
    """CPU of a scan plus the agent's GPU-holder work (median), the suspects read, the holders found."""
    now = datetime.datetime.now(datetime.timezone.utc)
    times, found, held = [], [], []
    for _ in range(runs + 1):
        began = time.process_time()
        result = scan(root, every_cgroup=True)
        found = holders.suspects(result.owners, pods, frozenset(), now)
        held = devices.holdings((s.pid for s in found), root, dev)[0]
        devices.read_gpus(root) if held else {}
        times.append(time.process_time() - began)
    return statistics.median(times[1:]), len(found), len(held)


def gpu_holders(processes: int = 5000) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root, dev = Path(tmp) / "proc", Path(tmp) / "dev"
        make_fake_proc(root, processes)
        add_open_files(root, dev)
        plain, _ = cpu_seconds(root)
        uids = {ref.uid for shape in CGROUP_SHAPES if (ref := pod_of(shape.format(cid="c" * 64))) is not None}
        alive = {uid: PodOnNode(uid, "ml", f"pod-{n}") for n, uid in enumerate(sorted(uids))}
        usual, none_read, _ = with_holders(root, dev, alive)
        worst, suspects, found = with_holders(root, dev, {})
    print(f"{processes} processes with open files and mappings: scan {plain * 1000:.1f} ms; with GPU-holder "
          f"detection, every pod alive: {usual * 1000:.1f} ms ({none_read} suspects read, "
          f"{(usual - plain) / plain:+.1%}); every pod deleted: {worst * 1000:.1f} ms ({suspects} suspects read, "
          f"{found} holding a GPU, {worst / plain:.2f}x the scan)")


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
    gpu_holders()
    print(f"agent process peak RSS (interpreter, kubernetes client, prometheus_client): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
