"""Benchmark: what one janitor cycle costs on a sandbox of N and 4N GPU nodes, first and steady.

Run on purpose, never from the tests:

    .venv/bin/python bench/cluster_scale.py --nodes 500 --factor 4
    .venv/bin/python bench/cluster_scale.py --nodes 100 --factor 4 --window 4h --history 4

It starts its own sandbox (run dir `.devenv-bench`, a 15 s scrape), fills it with
`python -m devenv populate` to N nodes, measures, grows it to N x factor, measures again, prints
both and the ratios, and stops the sandbox. Each measurement runs the janitor as the daemon runs
it (watch cache, `bench/policies.yaml`: every trigger over the `team-*` namespaces, shadow mode,
dry run) in a child process, so CPU and peak RSS are the janitor's alone, behind a pass-through
proxy that counts every request and the bytes each answer took on the wire. As the daemon with
`--watch-cache`, it carries busy verdicts between cycles (`janitor.observe.carry`): a steady cycle
reads the whole window only for the pods not carried (`steady_carried`, `steady_read_whole`: per
query, so a pod counts once for each usage query that covers it). Between steady cycles the same
churn happens at both sizes (`--churn` ConfigMaps created, as many deleted, as many pods
annotated), so the steady figures show what a cycle costs per change, not per object. Cycles
start `--interval` apart at least (60 s, the daemon's default): a steady cycle asks which pods were
busy since the last read, and the CPU query's points are a minute apart, aligned to the clock, so
cycles a few seconds apart would find no point there and carry no CPU verdict.

The janitor's process runs the cyclic garbage collector as the daemon does (`janitor.heap`: off
during a cycle, then one collection and what lives on frozen, the settling's CPU counted in the
cycle); `--heap before` runs it as before that (on, paused only while planning), and `--heap both`
measures each regime in turn at each size, on the same cluster, for the ratio.

After each populate, `--busy-share` of the pods are made busy (2 cores a container, and 80 % on
each GPU), the same ones at both sizes; the others keep the exporters' idle defaults. The janitor
logs as the daemon does (JSON lines at INFO, into `bench-janitor.log` in the run dir), since a
line per verdict per cycle costs CPU too.

Windows and history: every idle trigger's window is `--window` (4h unless told; written over
bench/policies.yaml's into `bench-policies.yaml` in the run dir). A sandbox's Prometheus holds only
what it scraped since `up`, so a 4 h window reads mostly nothing there; `--history HOURS` makes
each measurement read a second Prometheus instead, backfilled with that many hours of every
series of the pods there are then (`devenv.history.prometheus_with_history`, promtool blocks of
the exporters rendered at past times, 15 s apart), then scraping the same exporters live. Its
cost is printed and in the table (`history_*`: seconds, samples, MB of blocks); it is made anew
at each size, for the pods populate added.

Figures per cycle: apiserver requests and bytes by resource (the nodes' lists apart, and the
watch events': what others changed meanwhile, such as the controllers still writing the status
of what populate made while a first cycle at 2,500 nodes runs), Prometheus requests and bytes,
CPU seconds, time in observe / decide / act as the cycle itself measures them
(`janitor_cycle_phase_seconds`), the cyclic garbage collector's CPU seconds and full collections
in the janitor's process while the cycle ran (`gc_seconds`, `gc_full`), log lines, and the
child's peak RSS (`--profile PATH` also writes a cProfile of the last steady cycle). Prometheus' own cost of
the cycle's queries, each asked with `stats=all` (`PrometheusSource.query_stats`, which the
daemon never sets): samples read
(`totalQueryableSamples`, summed: `prom_samples`), the largest `peakSamples` of one query
(`prom_peak`, and under the table which query it was, e.g. `DCGM_FI_DEV_GPU_UTIL [4h:15s]`, and
as a share of the server's `--query.max-samples`, read from /api/v1/status/flags) and its
evaluation time summed (`prom_eval`, seconds). Steady figures are the mean over the steady cycles,
but the steady peak is the largest of them. Ratios: steady / first and 4N / N, from this one run.
Last, the usage queries are asked twice in a row, whole and with busy peaks sent alone (what the
janitor asks), for the bytes, CPU and Prometheus samples each costs.

Run it alone on the machine: only one sandbox may run at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import logging
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POLICIES = ROOT / "bench" / "policies.yaml"
QUIET_PER_NODE = 0.06  # seconds of settling added per node to --quiet


def resource_of(path: str) -> str:
    """The resource a request path names: /api/v1/namespaces/x/pods/y -> pods."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return parts[0] if parts else "/"
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        return rest[2]
    return rest[0] if rest else "discovery"


def _rss_mb(field: str = "VmRSS") -> float:
    """The child's resident memory now (VmRSS) or at its peak (VmHWM). Not `getrusage`'s maxrss,
    which a process keeps across exec: a child forked from a big parent would show the parent's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


class _Tracing:
    """Where the janitor's memory goes (`--trace-memory`): what Python holds live against what the
    process keeps resident. A wide gap is memory freed but kept by the allocators, not data."""

    def __init__(self, frames: int) -> None:
        import tracemalloc

        self.tracemalloc = tracemalloc
        tracemalloc.start(frames)
        self.snapshot: Any = None
        self.traced_before_plan = 0.0

    def before_plan(self) -> None:
        self.traced_before_plan = self.tracemalloc.get_traced_memory()[0] / 2**20
        self.snapshot = self.tracemalloc.take_snapshot()

    def cycle_done(self) -> dict[str, float]:
        current, peak = self.tracemalloc.get_traced_memory()
        self.tracemalloc.reset_peak()
        return {"traced_before_plan_mb": self.traced_before_plan, "traced_mb": current / 2**20,
                "traced_peak_mb": peak / 2**20, "traces_mb": self.tracemalloc.get_tracemalloc_memory() / 2**20}

    def trimmed(self) -> dict[str, float]:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return {"rss_trimmed_mb": _rss_mb()}

    def report(self, top: int = 30) -> None:
        if self.snapshot is None:
            return
        for group in ("filename", "lineno"):
            print(f"-- live before the last plan, by {group} --", file=sys.stderr)
            for stat in self.snapshot.statistics(group)[:top]:
                print(f"{stat.size / 2**20:8.1f} MB {stat.count:9d}  {stat.traceback}", file=sys.stderr)
        print("-- by traceback --", file=sys.stderr)
        for stat in self.snapshot.statistics("traceback")[:12]:
            print(f"{stat.size / 2**20:8.1f} MB {stat.count:9d}", file=sys.stderr)
            for line in stat.traceback.format()[-12:]:
                print("    " + line, file=sys.stderr)
        sys.stderr.flush()


# -- the child: the janitor, measured --------------------------------------------------------------------


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    import datetime

    from kubernetes import client

    from devenv.fault_rules import FaultControl
    from janitor import cycle, heap, kubeapi
    from janitor.decide.rails import Rails
    from janitor.observe.cache import ClusterCache
    from janitor.observe.carry import BusyCarry
    from janitor.settings import ClusterSettings, PrometheusSettings, Settings
    from janitor.telemetry import configure_logging

    configure_logging("INFO")  # as the daemon logs (its lines cost CPU too), into a file beside the sandbox
    log = open(Path(args.kubeconfig).parent / "bench-janitor.log", "a")  # noqa: SIM115 (open for the run)
    handler = logging.getLogger().handlers[0]
    handler.setStream(log)  # type: ignore[attr-defined]
    logged = Counter[str]()

    def count(record: logging.LogRecord) -> bool:
        logged["lines"] += 1
        return True

    handler.addFilter(count)
    heap.fewer_arenas()  # as `janitor run` does before its watch threads start (MALLOC_ARENA_MAX overrides)
    heap.fixed_mmap_threshold()  # as `janitor run` does (MALLOC_MMAP_THRESHOLD_ overrides)
    proxy = FaultControl(args.control)
    api = kubeapi.connect(args.kubeconfig, (5.0, 120.0))
    direct = client.CoreV1Api(kubeapi.connect(args.direct_kubeconfig, (5.0, 60.0)))
    settings = Settings(cluster=ClusterSettings(state_namespace="kube-idle-janitor"),
                        rails=Rails(dry_run=True),
                        # The sandbox's one Prometheus on this machine takes close to a minute per usage
                        # query at 2,000 nodes and more: a longer timeout than the default 30 s, so the
                        # answers are there to be measured.
                        prometheus=PrometheusSettings(url=args.prometheus, timeout=datetime.timedelta(seconds=150),
                                                      query_samples=args.query_samples),
                        policy_paths=(args.policies,), cycle_budget=datetime.timedelta(minutes=30))
    # As the daemon runs with --watch-cache (janitor.cli): the cache, and busy verdicts carried between
    # cycles, so a steady cycle reads the whole window only for the pods not carried.
    ports = cycle.Ports(api, cache=ClusterCache(api, settings),
                        busy=BusyCarry(max_pause=2 * settings.interval + settings.cycle_budget))
    memory = cycle.Memory()
    cycles: list[dict[str, Any]] = []
    around_plan: dict[str, float] = {}
    planner = cycle.plan

    tracing = _Tracing(args.trace_memory) if args.trace_memory else None

    def plan_measured(*a: Any, **k: Any) -> Any:  # RSS before and after deciding, beside the cycle's peak
        around_plan["before"] = _rss_mb()
        if tracing is not None:
            tracing.before_plan()
        try:
            return planner(*a, **k)
        finally:
            around_plan["after"] = _rss_mb()

    cycle.plan = plan_measured  # type: ignore[assignment]
    collector = {"seconds": 0.0, "full": 0, "began": 0.0}

    def collecting(phase: str, info: dict[str, int]) -> None:  # CPU of the collector's runs, and full ones
        if phase == "start":
            collector["began"] = time.process_time()
        else:
            collector["seconds"] += time.process_time() - collector["began"]
            collector["full"] += info["generation"] == 2

    gc.callbacks.append(collecting)
    kept_heap = heap.Heap() if args.heap == "frozen" else None
    _ask_query_stats()
    import settled as controllers

    # The controllers finish with what populate made (at least --quiet, then until they stop writing):
    # steady means steady.
    quiet = controllers.wait(kubeapi.connect(args.direct_kubeconfig, (5.0, 60.0)), least=args.quiet,
                             say=lambda line: print(line, file=sys.stderr, flush=True))
    pods = [p.metadata for p in direct.list_pod_for_all_namespaces(label_selector="devenv.janitor.dev/populated=true",
                                                                    limit=args.churn * (args.steady + 1)).items]
    last = 0.0
    for number in range(args.steady + 1):
        if number:  # cycles as far apart as the daemon's (its --interval, start to start)
            time.sleep(max(0.0, last + args.interval - time.monotonic()))
        last = time.monotonic()
        churn_cpu = 0.0
        began_cpu, began = time.process_time(), time.monotonic()
        before = [s.bytes for s in proxy.requests()]  # the journal keeps arrival order
        if number > 0:  # the same changes between cycles at every size
            t = time.thread_time()
            for i in range(args.churn):
                direct.create_namespaced_config_map("team-01", client.V1ConfigMap(metadata=client.V1ObjectMeta(
                    name=f"bench-churn-{number}-{i}", annotations={"janitor/ttl": "52w"})))
                if number > 1:
                    direct.delete_namespaced_config_map(f"bench-churn-{number - 1}-{i}", "team-01")
                meta = pods[(number * args.churn + i) % len(pods)]
                direct.patch_namespaced_pod(meta.name, meta.namespace,
                                            {"metadata": {"annotations": {"bench/round": str(number)}}})
            churn_cpu = time.thread_time() - t
            time.sleep(args.settle)
        marks: dict[str, float] = {}
        lines_before = logged["lines"]
        collected = collector.copy()
        profiler = cProfile.Profile() if args.profile and number == args.steady else None
        if profiler is not None:
            profiler.enable()
        # As the daemon's job: the collector off while the cycle runs and until its result is dropped.
        paused = contextlib.ExitStack()
        paused.enter_context(kept_heap.cycle() if kept_heap is not None else contextlib.nullcontext())
        memory, reloaded = cycle.load_policies(settings, memory)
        with cycle.prometheus(settings, memory.policies or ()) as source:
            planned = cycle.observe_and_plan(ports, settings, memory, source=source, reloaded=reloaded)
            result = cycle.apply(ports, settings, planned, source=source)
            phases = result.phases  # as the daemon's janitor_cycle_phase_seconds has them
            marks.update(observe=phases.observe, decide=phases.decide, act=phases.act,
                         decide_cpu=phases.decide_cpu)
            queries = list(source.stats) if source is not None else []
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        memory = result.memory
        seen = proxy.requests()
        by_resource: Counter[str] = Counter()
        requests: Counter[str] = Counter()
        watched = 0  # of the bytes, those of watch events: what others changed, not what was asked
        for i, s in enumerate(seen):
            grown = s.bytes - (before[i] if i < len(before) else 0)
            if grown:
                by_resource[resource_of(s.path)] += grown
                watched += grown if "watch=true" in s.query else 0
            if i >= len(before):
                requests[f"{s.method} {resource_of(s.path)}{' watch' if 'watch=true' in s.query else ''}"] += 1
        cycles.append({
            "cycle": "first" if number == 0 else "steady",
            "seconds": time.monotonic() - began - (args.settle if number else 0),
            "cpu": time.process_time() - began_cpu - churn_cpu,
            **marks,
            "objects": len(planned.observation.objects), "pods": len(planned.observation.pods),
            "findings": len(planned.plan.findings),
            "requests": sum(requests.values()), "requests_by": dict(requests),
            "bytes": sum(by_resource.values()), "bytes_by": dict(by_resource), "node_bytes": by_resource["nodes"],
            "watch_bytes": watched,
            "queries": len(queries), "query_bytes": sum(q.bytes for q in queries),
            "query_seconds": sum(q.seconds for q in queries),
            **_prometheus_cost(queries),
            "carried": ports.busy.stats.carried if ports.busy else 0,
            "read_whole": ports.busy.stats.read_whole if ports.busy else 0,
            "whole_why": str(ports.busy.stats.full or "") if ports.busy else "",
            # the cyclic collector, in any thread of the janitor's (watches included) during the cycle
            "gc_seconds": collector["seconds"] - collected["seconds"], "gc_full": collector["full"] - collected["full"],
            "log_lines": logged["lines"] - lines_before, "rss_mb": _rss_mb(),
            "rss_before_plan_mb": around_plan.get("before", 0.0), "rss_after_plan_mb": around_plan.get("after", 0.0),
            "peak_rss_so_far_mb": _rss_mb("VmHWM"),
            **(tracing.cycle_done() if tracing is not None else {}),
        })
        if args.keep_observation and number == args.steady:  # pickled after the peak is read, below
            kept = (planned.observation, planned.policies, planned.plan.now)
        # The daemon keeps nothing of a cycle but its Memory (janitor.daemon: the result is a local of
        # the cycle's job): neither may the benchmark, or the next cycle's peak holds two plans.
        del planned, result, seen
        paused.close()
        if kept_heap is not None:  # as the daemon's job ends: the heap settles, and the cycle pays for it
            collected, began_cpu = collector.copy(), time.process_time()
            kept_heap.settle()
            settled = time.process_time() - began_cpu
            cycles[-1].update(cpu=cycles[-1]["cpu"] + settled, settle_cpu=settled,
                              gc_seconds=cycles[-1]["gc_seconds"] + collector["seconds"] - collected["seconds"],
                              gc_full=cycles[-1]["gc_full"] + collector["full"] - collected["full"])
        if tracing is not None:
            cycles[-1].update(tracing.trimmed())
        print(json.dumps(cycles[-1]), file=sys.stderr, flush=True)
    if tracing is not None:
        tracing.report()
    peak = _rss_mb("VmHWM")  # the cycles' peak, before the comparison below reads whole answers
    if args.keep_observation:
        import pickle

        Path(args.keep_observation).write_bytes(pickle.dumps(kept))
        del kept
    evidence = _evidence_both_ways(settings, memory)
    ports.cache.stop() if ports.cache else None
    for number in range(max(1, args.steady - 1), args.steady + 1):
        for i in range(args.churn):
            try:
                direct.delete_namespaced_config_map(f"bench-churn-{number}-{i}", "team-01")
            except client.ApiException:
                pass
    return {"cycles": cycles, "peak_rss_mb": peak, "evidence": evidence, "quiet_seconds": quiet}


def _evidence_both_ways(settings: Any, memory: Any) -> dict[str, float]:
    """The cycle's usage queries once whole and once with busy peaks sent alone (what the janitor
    asks), one after the other: Prometheus bytes and the janitor's CPU to read each."""
    import dataclasses
    import datetime

    from janitor import cycle
    from janitor.observe import observation

    need = observation.needs(memory.policies)
    found: dict[str, float] = {}
    for name, asked in (("whole", dataclasses.replace(need, gpu_busy_above={}, cpu_busy_above={},
                                                                   cpu_busy_fraction={})), ("lean", need)):
        with cycle.prometheus(settings, memory.policies) as source:
            began = time.process_time()
            observation.read_evidence(source, settings, asked, datetime.datetime.now(datetime.timezone.utc))
            found[f"{name}_cpu"] = time.process_time() - began
            found[f"{name}_bytes"] = sum(q.bytes for q in source.stats) if source is not None else 0
            cost = _prometheus_cost(source.stats if source is not None else [])
            found[f"{name}_samples"], found[f"{name}_peak"] = cost["prom_samples"], cost["prom_peak"]
    return found


def _ask_query_stats() -> None:
    """Every Prometheus source the cycles open asks each query with `stats=all`
    (`PrometheusSource.query_stats`): the daemon never does, the benchmark wants the cost."""
    from janitor.observe import observation

    made = observation.prometheus_source

    def with_stats(*a: Any, **k: Any) -> Any:
        source = made(*a, **k)
        source.query_stats = True
        return source

    observation.prometheus_source = with_stats  # type: ignore[assignment]


_RANGE = re.compile(r"\[(\d+[smhdwy][0-9smhdwy]*)(?::(\d+[smhdwy][0-9smhdwy]*))?\]")
_METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")


def query_kind(query: str) -> str:
    """A short name for an evidence query: its first metric and its longest subquery (else range),
    e.g. `DCGM_FI_DEV_GPU_UTIL [4h:15s]` (a whole window) or `... [3m:15s]` (since the last read)."""
    metric = _METRIC.search(query)
    ranges = {m.group(0): (m.group(2) is not None, _seconds(m.group(1))) for m in _RANGE.finditer(query)}
    longest = max(ranges, key=lambda r: (*ranges[r], r), default="")
    return f"{metric.group(1) if metric else query[:40]} {longest}".strip()


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhdwy])", duration))


def _prometheus_cost(queries: list[Any]) -> dict[str, Any]:
    """What Prometheus says the cycle's queries cost it (`stats=all`): samples read, the largest
    peak of any one query (what `--query.max-samples` limits) and which, its evaluation time."""
    asked = [q for q in queries if q.api in ("query", "query_range")]
    peak = max(asked, key=lambda q: q.peak_samples or 0, default=None)
    return {"prom_samples": sum(q.samples or 0 for q in asked),
            "prom_peak": (peak.peak_samples or 0) if peak else 0,
            "prom_peak_kind": query_kind(peak.query) if peak else "",
            "prom_eval": sum(q.eval_seconds or 0.0 for q in asked),
            "prom_unstated": sum(1 for q in asked if q.samples is None)}


# -- the parent: the sandbox, populated, and the table -----------------------------------------------------


def _env(run_dir: Path) -> dict[str, str]:
    from devenv.sandbox import read_env_file

    return read_env_file(run_dir / "sandbox.env")


def _child(env: dict[str, str], proxy: Any, proxied: Path, args: argparse.Namespace, nodes: int,
           prometheus_url: str, policies: Path, heap: str) -> dict[str, Any]:
    # The controllers take longer to settle what populate made on a bigger cluster (seen at 2,500
    # nodes: Deployments' and ReplicaSets' status still written minutes after), so the least wait
    # grows; the child then waits until they stop writing (bench/settled.py).
    quiet = args.quiet + QUIET_PER_NODE * nodes
    argv = [sys.executable, __file__, "measure", "--control", proxy.control_url, "--kubeconfig", str(proxied),
            "--direct-kubeconfig", env["KUBECONFIG"], "--prometheus", prometheus_url, "--policies", str(policies),
            "--steady", str(args.steady), "--churn", str(args.churn), "--settle", str(args.settle),
            "--quiet", str(quiet), "--interval", str(args.interval), "--query-samples", str(args.query_samples)]
    if args.keep_observation:
        argv += ["--keep-observation", f"{args.keep_observation}.{nodes}"]
    if args.profile:
        argv += ["--profile", f"{args.profile}.{nodes}.{heap}"]
    if args.trace_memory:
        argv += ["--trace-memory", str(args.trace_memory)]
    argv += ["--heap", heap]
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


_PER_CYCLE = ("cpu", "seconds", "observe", "decide", "decide_cpu", "act", "requests", "bytes", "node_bytes",
              "watch_bytes", "queries", "query_bytes", "log_lines", "prom_samples", "prom_peak", "prom_eval",
              "gc_seconds", "gc_full")


def mean_of(cycles: list[dict[str, Any]], key: str) -> float:
    return sum(c[key] for c in cycles) / len(cycles)


def _summary(found: dict[str, Any], max_samples: int, history: dict[str, float]) -> dict[str, Any]:
    first, steady = found["cycles"][0], found["cycles"][1:]
    mean = {k: sum(c[k] for c in steady) / len(steady) for k in _PER_CYCLE}
    # The largest steady peak, not the mean: what comes near --query.max-samples is the worst query.
    worst = max(steady, key=lambda c: c["prom_peak"])
    mean["prom_peak"] = worst["prom_peak"]
    return {"pods": first["pods"], "objects": first["objects"], "findings": first["findings"],
            "steady_carried": mean_of(steady, "carried"), "steady_read_whole": mean_of(steady, "read_whole"),
            "steady_whole_why": ",".join(sorted({c["whole_why"] for c in steady if c["whole_why"]})),
            **{f"first_{k}": first[k] for k in _PER_CYCLE},
            **{f"steady_{k}": v for k, v in mean.items()}, "peak_rss_mb": found["peak_rss_mb"],
            "first_peak_share": first["prom_peak"] / max_samples if max_samples else 0.0,
            "steady_peak_share": worst["prom_peak"] / max_samples if max_samples else 0.0,
            "first_peak_kind": first["prom_peak_kind"], "steady_peak_kind": worst["prom_peak_kind"],
            "unstated": sum(c["prom_unstated"] for c in found["cycles"]),
            "quiet_seconds": found.get("quiet_seconds", 0.0),
            **{f"evidence_{k}": v for k, v in found["evidence"].items()},
            **{f"history_{k}": v for k, v in history.items()}}


def _table(sizes: list[tuple[str, dict[str, Any]]], max_samples: int) -> str:
    shown = ("requests", "bytes", "node_bytes", "watch_bytes", "cpu", "observe", "decide", "decide_cpu", "act",
             "queries", "query_bytes", "prom_samples", "prom_peak", "prom_eval", "log_lines", "gc_seconds", "gc_full")
    rows = ["pods", "objects", "findings", *(f"{c}_{k}" for c in ("first", "steady") for k in shown),
            "first_peak_share", "steady_peak_share", "steady_carried", "steady_read_whole", "peak_rss_mb",
            "quiet_seconds",
            *(f"evidence_{w}_{k}" for w in ("whole", "lean") for k in ("bytes", "cpu", "samples", "peak"))]
    if "history_seconds" in sizes[0][1]:
        rows += ["history_hours", "history_samples", "history_seconds", "history_disk_mb"]
    if all("kube_janitor_bytes" in s for _, s in sizes):  # its one cycle: every cycle of it lists everything
        rows += ["kube_janitor_requests", "kube_janitor_bytes", "kube_janitor_cpu", "kube_janitor_peak_rss_mb"]
    head = f"{'':22}" + "".join(f"{n:>20}" for n, _ in sizes)
    lines = [head]
    for row in rows:
        lines.append(f"{row:22}" + "".join(f"{s[row]:>20,.3f}" if isinstance(s[row], float) and s[row] < 100
                                            else f"{s[row]:>20,.0f}" for _, s in sizes))
    (n, small), (m, big) = sizes[0], sizes[-1]
    lines.append("")
    def x(row: str, a: dict[str, Any], b: dict[str, Any]) -> str:
        return f"{a[row] / b[row]:.3f}" if b[row] else "n/a"

    for size, s in sizes:
        others = (s["steady_bytes"] - s["steady_node_bytes"]) / s["first_bytes"] if s["first_bytes"] else 0.0
        lines.append(f"{size}, steady/first: bytes {x('steady_bytes', s, s | {'steady_bytes': s['first_bytes']})}"
                     f" ({others:.3f} without the node watch's status updates;"
                     f" {s['steady_requests']:.1f} requests against {s['first_requests']:.0f}), CPU "
                     f"{x('steady_cpu', s, s | {'steady_cpu': s['first_cpu']})}, Prometheus samples read "
                     f"{x('steady_prom_samples', s, s | {'steady_prom_samples': s['first_prom_samples']})}")
    if len(sizes) > 1:
        lines.append(f"{m} / {n}: pods {x('pods', big, small)}; first cycle: bytes "
                     f"{x('first_bytes', big, small)}, CPU {x('first_cpu', big, small)}, Prometheus samples "
                     f"{x('first_prom_samples', big, small)}; steady cycle: CPU "
                     f"{x('steady_cpu', big, small)}, bytes {x('steady_bytes', big, small)}, decide "
                     f"{x('steady_decide', big, small)}, Prometheus samples {x('steady_prom_samples', big, small)}; "
                     f"peak RSS {x('peak_rss_mb', big, small)}")
    for size, s in sizes:
        whole, lean = s["evidence_whole_bytes"], s["evidence_lean_bytes"]
        cpu = (s["evidence_lean_cpu"] / s["evidence_whole_cpu"]) if s["evidence_whole_cpu"] else 0.0
        lines.append(f"{size}, usage evidence with busy peaks alone / whole: bytes "
                     f"{lean / whole if whole else 0.0:.3f}, CPU {cpu:.3f}")
    for size, s in sizes:
        unstated = f"; {s['unstated']} queries without statistics" if s["unstated"] else ""
        whole_why = (f"; steady cycles that read everything whole: {s['steady_whole_why']}"
                     if s["steady_whole_why"] else "")
        lines.append(f"{size}, largest peak of one query (--query.max-samples {max_samples:,}): first "
                     f"{s['first_prom_peak']:,} ({s['first_peak_kind']}; {s['first_peak_share']:.2%}), steady "
                     f"{s['steady_prom_peak']:,} ({s['steady_peak_kind']}; {s['steady_peak_share']:.2%})"
                     f"{unstated}{whole_why}")
    return "\n".join(lines)


def _max_samples(prometheus_url: str) -> int:
    """Prometheus' `--query.max-samples`, from /api/v1/status/flags (0: it does not say)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{prometheus_url.rstrip('/')}/api/v1/status/flags", timeout=10) as answer:
            return int(json.loads(answer.read())["data"]["query.max-samples"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _policies(window: str, run_dir: Path) -> Path:
    """bench/policies.yaml with every idle trigger's window set to `window`, written beside the sandbox."""
    import yaml

    doc = yaml.safe_load(POLICIES.read_text())
    for policy in doc["policies"]:
        for trigger in ("idleGpu", "idleCpu"):
            if trigger in (policy.get("triggers") or {}):
                policy["triggers"][trigger]["window"] = window
    written = run_dir / "bench-policies.yaml"
    written.write_text(yaml.safe_dump(doc, sort_keys=False))
    return written


def _with_history(env: dict[str, str], hours: float, run_dir: Path) -> tuple[Any, dict[str, float]]:
    """A second Prometheus over the same exporters, backfilled with `hours` of every series of the
    pods there are now, then scraping live (`devenv.history`); its cost: time, samples, disk."""
    from devenv.history import prometheus_with_history
    from janitor import kubeapi

    began = time.monotonic()
    server, report = prometheus_with_history(kubeapi.connect(env["KUBECONFIG"], (5.0, 120.0)),
                                             env["SANDBOX_EXPORTERS_URL"], hours=hours, step=15.0,
                                             dcgm_style="servicemonitor", aggregate=True, work_dir=run_dir)
    took = time.monotonic() - began
    disk = sum(f.stat().st_size for f in server.data_dir.rglob("*") if f.is_file())
    cost = {"hours": hours, "samples": report.samples, "seconds": took, "disk_mb": disk / 2**20}
    print(f"history: {hours:g} h backfilled, {report.samples:,} samples in {took:.0f} s, {disk / 2**20:.0f} MB",
          file=sys.stderr, flush=True)
    return server, cost


def _busy_mix(env: dict[str, str], share: float) -> int:
    """Make `share` of the populated pods busy (GPU pods at 80 % on every GPU, every pod at 2 cores
    per container), the same ones at every size (chosen by a hash of the name), as in a lab where
    most of what runs works; the others keep the exporters' idle defaults. Returns how many."""
    import hashlib

    from kubernetes import client

    from devenv.exporters.server import ValuesControl
    from devenv.exporters.values import Kind, Setting
    from janitor import kubeapi

    core = client.CoreV1Api(kubeapi.connect(env["KUBECONFIG"], (5.0, 120.0)))
    busy: list[tuple[Kind, tuple[str, str, None], Setting]] = []
    listed = core.list_pod_for_all_namespaces(label_selector="devenv.janitor.dev/populated=true",
                                              _preload_content=False)  # JSON, not 50,000 client models
    for pod in json.loads(listed.data)["items"]:
        meta = pod["metadata"]
        if int(hashlib.sha256(meta["name"].encode()).hexdigest()[:8], 16) / 2**32 >= share:
            continue
        key = (meta["namespace"], meta["name"], None)
        busy.append((Kind.CPU, key, 2.0))
        limits = [(c.get("resources") or {}).get("limits") or {} for c in pod["spec"]["containers"]]
        if any(lim.get("nvidia.com/gpu") for lim in limits):
            busy.append((Kind.GPU_UTIL, key, 80))
    ValuesControl(env["SANDBOX_EXPORTERS_URL"]).set_many(busy)
    return sum(1 for kind, _, _ in busy if kind is Kind.CPU)


def _run(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    import counting_proxy

    from devenv.faults import repoint_kubeconfig

    run_dir = ROOT / args.run_dir
    python = [sys.executable, "-m", "devenv", "--run-dir", str(run_dir)]
    if not args.keep_sandbox or not (run_dir / "sandbox.env").exists():
        subprocess.run([*python, "up", "--detach", "--scale"], check=True, cwd=ROOT)
    history_server = None
    try:
        env = _env(run_dir)
        policies = _policies(args.window, run_dir)

        sizes: list[tuple[str, dict[str, Any]]] = []
        made = 0
        for nodes in dict.fromkeys((args.nodes, args.nodes * args.factor)):  # --factor 1: one size
            began = time.monotonic()
            subprocess.run([*python, "populate", "--nodes", str(nodes - made), "--first", str(made + 1)],
                           check=True, cwd=ROOT)
            busy = _busy_mix(env, args.busy_share)
            print(f"populated {nodes} nodes ({time.monotonic() - began:.0f} s), {busy} pods busy",
                  file=sys.stderr, flush=True)
            made = nodes
            prometheus_url, history = env["PROMETHEUS_URL"], {}
            if args.history:
                if history_server is not None:
                    history_server.stop()
                history_server, history = _with_history(env, args.history, run_dir)
                prometheus_url = history_server.url
            max_samples = _max_samples(prometheus_url)
            with counting_proxy.in_front_of(Path(env["KUBECONFIG"])) as proxy:
                proxied = repoint_kubeconfig(Path(env["KUBECONFIG"]), run_dir / "bench.kubeconfig", proxy.url)
                regimes = ("before", "frozen") if args.heap == "both" else (args.heap,)
                for regime in regimes:  # with both, one after the other on the same cluster
                    found = _child(env, proxy, proxied, args, nodes, prometheus_url, policies, regime)
                    summary = _summary(found, max_samples, history)
                    if args.kube_janitor and regime == regimes[-1]:
                        import beside_kube_janitor

                        try:
                            beside = beside_kube_janitor.one_cycle(Path(args.kube_janitor), proxied, proxy,
                                                                   run_dir / "kube-janitor.log")
                        except SystemExit as e:  # the janitor's figures stand without it
                            print(f"kube-janitor beside: {e}", file=sys.stderr, flush=True)
                        else:
                            summary |= {f"kube_janitor_{k}": v for k, v in beside.items()}
                    sizes.append((f"{nodes} nodes" + (f", {regime}" if len(regimes) > 1 else ""), summary))
            print(_table(sizes, max_samples), flush=True)
    finally:
        if history_server is not None:
            history_server.stop()
        if not args.keep_sandbox:
            subprocess.run([*python, "down"], cwd=ROOT)
    return 0


def main() -> int:
    from janitor.settings import PrometheusSettings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    measure = sub.add_parser("measure", help="(internal) run and measure the janitor's cycles, print JSON")
    for flag in ("--control", "--kubeconfig", "--direct-kubeconfig", "--prometheus", "--policies"):
        measure.add_argument(flag, required=True)
    measure.add_argument("--heap", choices=("frozen", "before"), default="frozen")
    for p in (parser, measure):
        p.add_argument("--steady", type=int, default=3, help="steady cycles after the first (%(default)s)")
        p.add_argument("--churn", type=int, default=20, help="ConfigMaps created, deleted and pods annotated "
                       "between steady cycles (%(default)s)")
        p.add_argument("--quiet", type=float, default=120.0, help="seconds at least to let the controllers finish "
                       "with what populate made before the first cycle, then until a 20 s watch of Deployments "
                       "and of ReplicaSets brings fewer than 10 events (%(default)s)")
        p.add_argument("--interval", type=float, default=60.0, help="seconds from a cycle's start to the next's "
                       "at least, as the daemon's --interval: a steady cycle asks what was busy since the last "
                       "read, at the CPU query's 1-minute steps (%(default)s)")
        p.add_argument("--settle", type=float, default=3.0, help="seconds for the watches to bring the churn "
                       "before a steady cycle (%(default)s)")
        p.add_argument("--profile", metavar="PATH", help="cProfile the last steady cycle (its own thread: "
                       "observe, plan, act; not the watches) into PATH.<nodes>, for `python -m pstats`")
        p.add_argument("--trace-memory", type=int, default=0, metavar="FRAMES", help="trace the janitor's "
                       "allocations (tracemalloc, this many frames; slower, and its RSS grows by the traces): "
                       "per cycle the traced memory before deciding and at its peak, the RSS once glibc has "
                       "handed freed memory back (malloc_trim), and the largest live allocation sites before "
                       "the last cycle's plan")
        p.add_argument("--query-samples", type=int, default=PrometheusSettings().query_samples, metavar="N",
                       help="the janitor's --prometheus-query-samples: a whole read estimated above it is asked "
                       "in parts (%(default)s)")
        p.add_argument("--keep-observation", metavar="PATH", help="pickle the last cycle's observation, policies "
                       "and time (PATH.<nodes>) for `bench/plan_scale.py --observation`")
    parser.add_argument("--heap", choices=("frozen", "before", "both"), default="frozen",
                        help="the cyclic collector's regime: frozen as the daemon's (janitor.heap: off during a "
                        "cycle, what lives on frozen after it), before (on, paused only while planning), or "
                        "both, one after the other at each size (%(default)s)")
    parser.add_argument("--nodes", type=int, default=500, help="N (%(default)s)")
    parser.add_argument("--factor", type=int, default=4, help="the second size is N x this (%(default)s)")
    parser.add_argument("--window", default="4h", help="every idle trigger's window, written over those of "
                        "bench/policies.yaml for the run (%(default)s)")
    parser.add_argument("--history", type=float, default=0.0, metavar="HOURS", help="backfill this many hours of "
                        "every series before each measurement, into a second Prometheus the janitor then reads "
                        "(0: none, the sandbox's own Prometheus, only as old as the sandbox; %(default)s)")
    parser.add_argument("--busy-share", type=float, default=0.75, help="share of the pods kept busy (%(default)s)")
    parser.add_argument("--run-dir", default=".devenv-bench", help="the sandbox's run dir (%(default)s)")
    parser.add_argument("--keep-sandbox", action="store_true", help="use a running sandbox there, leave it running")
    parser.add_argument("--kube-janitor", metavar="PATH", help="a checkout of kube-janitor 20.10.0's source: one "
                        "--once --dry-run cycle of it after the janitor's at each size, through the same counting "
                        "proxy (bench/beside_kube_janitor.py)")
    args = parser.parse_args()
    if args.command == "measure":
        print(json.dumps(_measure(args)))
        return 0
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
