"""GPU and CPU usage evidence per pod: one aggregated PromQL query per signal per cycle.

Why one query: a cluster holds thousands of GPU pods, and a query per pod would hammer Prometheus
(or Thanos/Mimir) every cycle. Each query returns, per GPU series (or per pod for CPU), both the
peak over the window and how many samples stand behind it, so the planner can tell "idle" from
"not enough data" (DESIGN.md: absence is never idle; reference §4.1).

Why peak and count in one answer: two separate queries could see different data (a store answering
one and not the other). The two are told apart by a `stat` label added with `label_replace`
(after `*_over_time` drops `__name__`, an unlabelled `or` would keep only its left side).

The query strings come from small pure builders (`gpu_query`, `cpu_query`) so `janitor explain`
can show exactly what was asked. Failures and partial answers (warnings) yield evidence with
`failed` set and no pods, never an empty-but-successful result.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from janitor.decide.evidence import (
    CpuEvidence,
    CpuUsage,
    EvidenceWindow,
    GhostGpu,
    GpuEvidence,
    GpuSeries,
    PodKey,
    Quality,
)
from janitor.observe.prometheus import (
    HONOR_LABELS,
    LabelMap,
    Matcher,
    PrometheusError,
    PrometheusSource,
    QueryResult,
    selector,
)
from janitor.policy.model import GpuSignal

logger = logging.getLogger(__name__)

CPU_METRIC = "container_cpu_usage_seconds_total"
REQUESTS_METRIC = "kube_pod_container_resource_requests"  # kube-state-metrics; resource="cpu" is in cores
DCGM_SENTINEL = 9.2e18
"""DCGM's blank/not-supported int64 sentinels start at 0x7ffffffffffffff0 (~9.22e18): no data."""
STAT = "stat"  # the label that tells the peak series from the count series in one answer
_GPU_INSTANCE = "GPU_I_ID"
MODEL = "modelName"  # dcgm-exporter's label for the GPU's model, e.g. "NVIDIA A100-SXM4-80GB"
POWER_SIGNAL = str(GpuSignal.POWER)  # judged against the model's idle power: read with MODEL
_K = TypeVar("_K")


_UNITS = (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def duration(span: timedelta) -> str:
    """A PromQL duration for `span` in the largest unit that divides it (`2h`, `15s`, `1500ms`)."""
    ms = round(span.total_seconds() * 1000)
    if ms <= 0:
        raise ValueError(f"a PromQL duration must be positive, got {span}")
    unit, size = next((u, n) for u, n in _UNITS if ms % n == 0)
    return f"{ms // size}{unit}"


def _stats(**exprs: str) -> str:
    """Several per-series statistics in one answer, told apart by the `stat` label."""
    return " or ".join(f'label_replace({e}, "{STAT}", "{name}", "", "")' for name, e in exprs.items())


def _quality_stats(sel: str, by: str, rng: str, sub: str, latest: str) -> dict[str, str]:
    """The statistics behind `Quality`, for the raw samples of `sel` grouped `by`.

    - `nonfinite`: present when a NaN or ±Inf sample fell in the window (their sum is not finite;
      `max_over_time` would skip a NaN, and `count_over_time` counts it as a sample);
    - `stale`: the oldest the latest sample ever was at a `sub` step (the longest gap up to
      Prometheus' lookback, 5 min by default, beyond which a step sees no sample at all);
    - `points`: the steps that saw a sample, so the fold adds the steps that saw none.
    `latest` (`max` or `min`) merges the group's series at each step: `max` for one GPU whose series
    an exporter restart split (the GPU is covered while either part is), `min` for a pod's
    containers (the pod is covered only while every container is)."""
    total = f"sum_over_time({sel}{rng})"
    stamp = f"{latest} by ({by}) (timestamp({sel}))"
    return {
        "nonfinite": f"count by ({by}) ({total} unless {total} * 0 == 0)",
        "stale": f"max_over_time((time() - {stamp}){sub})",
        "points": f"count_over_time(({stamp}){sub})",
    }


def _jobs(sel: str, by: str, rng: str) -> str:
    """One row per group and scrape job that exported it, for the job's scrape interval."""
    return f'max by ({by}, job, {STAT}) ({_stats(job=f"count_over_time({sel}{rng})")})'


def _busy_first(query: str, peak: str, by: str, level: str | None) -> str:
    """`query` without the rows a group needs only to be shown idle, for the groups whose peak is
    above `level` (a number, or an expression matched on `by`): the level above which every
    policy reading this answer calls a peak busy. For those groups only the peak is sent. Busy
    beats unknown, so no verdict reads the rest, and most GPUs and pods of a working cluster are
    busy: their quality rows were four fifths of the answer and of its parsing. Only finite peaks
    below the DCGM sentinels count, as the fold reads nothing else as a peak."""
    if level is None:
        return query
    busy = f"(({peak}) > {level}) < {DCGM_SENTINEL!r}"
    return f'(({query}) unless on ({by}) {busy}) or label_replace({busy}, "{STAT}", "peak", "", "")'


def gpu_query(
    signal: str, *, window: timedelta, step: timedelta, labels: LabelMap, extra: Iterable[Matcher] = (),
    hostname_label: str | None = None, busy_above: float | None = None, model: bool = False, low: bool = False,
) -> str:
    """Peak, sample count and evidence quality per GPU series of workload pods over `window`, as one query.

    `<pod label>!=""` keeps only GPUs mapped to a workload pod: behind a ServiceMonitor an
    unassigned GPU would otherwise carry the exporter's own `pod` label (reference §1.2). The
    `max by` keeps exactly the labels that identify a GPU of a pod, so exporter restarts, HA
    replicas or `instance` labels neither split nor duplicate a series. For the count, `max`
    errs towards fewer samples (a series split by an exporter restart counts its larger part),
    i.e. towards *unknown*, never towards idle. The peak is over every raw sample, so a spike
    between two steps of `step` still counts; gaps are measured at `step`. With `busy_above`, a
    GPU whose peak is above it comes with its peak alone (`_busy_first`). With `model`, each GPU
    keeps its `modelName` (power is judged against the model's idle power). With `low`, the lowest
    sample too (`min by`: a GPU split in two series keeps the lower, away from "busy at every
    sample"); a reader of the low never asks for `busy_above` (its GPUs are busy on the peak).

    The pod UID labels are kept too: where the exporter sets them, a re-created pod of the same
    name is another series, not the old one's continued (`janitor.decide.attribution`); where it
    does not, grouping by a label no series has changes nothing.
    """
    sel, by = _gpu_selection(signal, labels, extra, hostname_label, model)
    rng, sub = f"[{duration(window)}]", f"[{duration(window)}:{duration(step)}]"
    inner = _stats(peak=f"max_over_time({sel}{rng})", count=f"count_over_time({sel}{rng})",
                   **_quality_stats(sel, by, rng, sub, "max"))
    query = f"max by ({by}, {STAT}) ({inner}) or {_jobs(sel, by, rng)}"
    if low:
        query += f" or min by ({by}, {STAT}) ({_stats(low=f'min_over_time({sel}{rng})')})"
    level = None if busy_above is None else repr(busy_above)
    return _busy_first(query, f"max by ({by}) (max_over_time({sel}{rng}))", by, level)


def _gpu_selection(signal: str, labels: LabelMap, extra: Iterable[Matcher], hostname_label: str | None,
                   model: bool) -> tuple[str, str]:
    """The selector of a GPU query and the labels that identify a GPU of a pod (`gpu_query`)."""
    host = hostname_label or labels.hostname
    sel = selector(signal, (Matcher(labels.pod, "", "!="),), extra)
    by = ", ".join((labels.namespace, labels.pod, *labels.pod_uid, "gpu", _GPU_INSTANCE, host,
                    *([MODEL] if model else [])))
    return sel, by


def gpu_busy_query(signal: str, *, since: timedelta, labels: LabelMap, busy_above: float,
                   extra: Iterable[Matcher] = (), hostname_label: str | None = None, model: bool = False) -> str:
    """The GPUs with a sample above `busy_above` in the last `since`, each with its peak alone, as
    `gpu_query` answers for a busy GPU: what a steady cycle asks (`janitor.observe.carry`)."""
    sel, by = _gpu_selection(signal, labels, extra, hostname_label, model)
    busy = f"((max by ({by}) (max_over_time({sel}[{duration(since)}]))) > {busy_above!r}) < {DCGM_SENTINEL!r}"
    return f'label_replace({busy}, "{STAT}", "peak", "", "")'


def exact_names_regex(names: Iterable[str]) -> str:
    """An RE2 alternation matching exactly these container names (Prometheus anchors it).

    Names are escaped, so `a.b` never matches `axb`; empty names are dropped (they would match
    the pod-cgroup series, which are excluded anyway).
    """
    return "|".join(_RE2_SPECIAL.sub(r"\\\1", n) for n in dict.fromkeys(names) if n)


def cpu_query(
    *, window: timedelta, step: timedelta, labels: LabelMap = HONOR_LABELS, extra: Iterable[Matcher] = (),
    ignore_containers: Sequence[str] = (), rate_window: timedelta = timedelta(minutes=5),
    busy_above: float | None = None, busy_fraction: float | None = None,
) -> str:
    """Peak cores of each pod's app containers over `window`, the subquery points behind it, and
    the quality of the containers' raw samples.

    `container!=""` drops the pod cgroup and the containerd pause sandbox, `container!="POD"`
    the dockershim pause container (reference §2.1: summing those double-counts). Ignored sidecars
    are excluded by an exact, escaped alternation. The subquery at `step` turns the rate into a
    series, so the peak is the busiest `rate_window` and the count shows gaps like a scrape count.
    A rate bridges gaps shorter than `rate_window`, so gaps are measured on the raw counters.

    A pod whose peak is above `busy_above` cores, or above `busy_fraction` of its app containers'
    CPU requests (as kube-state-metrics has them), comes with its peak alone (`_busy_first`).
    Where kube-state-metrics lacks a pod, or has other labels, nothing matches and its rows come
    whole; where its requests differ from the pod's, the janitor may lack the rows it needs and
    says unknown, never idle.
    """
    sel, by, cores, level = _cpu_selection(labels, extra, ignore_containers, rate_window, busy_above, busy_fraction)
    rng, sub = f"[{duration(window)}]", f"[{duration(window)}:{duration(step)}]"
    peak = f"max_over_time(({cores}){sub})"
    inner = _stats(peak=peak, count=f"count_over_time(({cores}){sub})", **_quality_stats(sel, by, rng, sub, "min"))
    return _busy_first(f"{inner} or {_jobs(sel, by, rng)}", peak, by, level)


def _cpu_selection(labels: LabelMap, extra: Iterable[Matcher], ignore_containers: Sequence[str],
                   rate_window: timedelta, busy_above: float | None, busy_fraction: float | None
                   ) -> tuple[str, str, str, str | None]:
    """The selector of a CPU query, its pod labels, its cores expression and its busy level (`cpu_query`)."""
    matchers = [Matcher(labels.container, "", "!="), Matcher(labels.container, "POD", "!=")]
    sidecars = exact_names_regex(ignore_containers)
    if sidecars:
        matchers.append(Matcher(labels.container, sidecars, "!~"))
    sel = selector(CPU_METRIC, matchers, extra)
    by = f"{labels.namespace}, {labels.pod}"
    cores = f"sum by ({by}) (rate({sel}[{duration(rate_window)}]))"
    level = None if busy_above is None else repr(busy_above)
    if level is None and busy_fraction is not None:
        wanted = [Matcher("resource", "cpu"), *([Matcher(labels.container, sidecars, "!~")] if sidecars else [])]
        level = f"on ({by}) ({busy_fraction!r} * sum by ({by}) ({selector(REQUESTS_METRIC, wanted, extra)}))"
    return sel, by, cores, level


def cpu_busy_query(*, since: timedelta, step: timedelta, labels: LabelMap = HONOR_LABELS,
                   extra: Iterable[Matcher] = (), ignore_containers: Sequence[str] = (),
                   rate_window: timedelta = timedelta(minutes=5), busy_above: float | None = None,
                   busy_fraction: float | None = None) -> str:
    """The pods whose cores were above the busy level at a point of the last `since`, each with its
    peak alone, as `cpu_query` answers for a busy pod: what a steady cycle asks. The points are
    `cpu_query`'s own (Prometheus aligns a subquery's steps to the clock), so a point seen busy here
    is one the whole window's read holds for as long as it lies in the window."""
    _, by, cores, level = _cpu_selection(labels, extra, ignore_containers, rate_window, busy_above, busy_fraction)
    if level is None:
        raise ValueError("a CPU busy query needs a level")
    busy = f"((max_over_time(({cores})[{duration(since)}:{duration(step)}])) > {level}) < {DCGM_SENTINEL!r}"
    return f'label_replace({busy}, "{STAT}", "peak", "", "")'


# ----------------------------------------------------------------------------- answers into evidence


def _failure(result: QueryResult) -> str | None:
    if result.partial:
        return f"partial answer from Prometheus: {'; '.join(result.warnings)}"[:300]
    if result.result_type != "vector":
        return f"unexpected {result.result_type} answer"
    return None


def _number(value: float) -> float | None:
    """A usable measurement, or None for NaN, ±Inf and DCGM sentinels."""
    return value if math.isfinite(value) and abs(value) < DCGM_SENTINEL else None


def _count(value: float | None) -> int:
    return int(value) if value is not None and math.isfinite(value) and value > 0 else 0


def _gpu_id(gpu: str, instance: str) -> str:
    return f"{gpu}/{instance}" if instance else gpu


def _order(series: GpuSeries) -> tuple[object, ...]:
    return (series.node, *[(0, int(p), "") if p.isdigit() else (1, 0, p) for p in series.gpu.split("/")],
            (2, 0, series.uid))


Intervals = Mapping[str, timedelta]  # scrape job -> its interval (janitor.observe.targets)
_Stats = dict[str, float]


class Groups(Generic[_K]):
    """An answer's statistics and scrape jobs per group, gathered row by row: as Prometheus'
    answer is decoded (a `RowSink`), so the whole answer is never held at once."""

    def __init__(self, key: Callable[[Mapping[str, str]], _K | None]) -> None:
        self.key = key
        self.stats: dict[_K, _Stats] = {}
        self.jobs: dict[_K, set[str]] = {}

    def __call__(self, labels: Mapping[str, str], value: float) -> None:
        k = self.key(labels)
        if k is None:
            return
        stat = labels.get(STAT, "")
        if stat == "job":
            self.jobs.setdefault(k, set()).add(labels.get("job", ""))
        elif stat in _STATS:
            stats = self.stats.setdefault(k, {})
            # Two groups of the answer under one key (a label the key leaves out told them apart: an
            # exporter restarted behind a relabelling that adds its own pod UID) merge towards use
            # and doubt, never towards idle: the higher usable peak (one that is no number hides no
            # use, and leaves the other's idleness in doubt), staleness, the fewer samples.
            if stat not in stats:
                stats[stat] = value
            elif stat in ("peak", "low"):  # the lower low: away from "busy at every sample"
                usable = [v for v in (_number(stats[stat]), _number(value)) if v is not None]
                if len(usable) < 2:
                    stats["nonfinite"] = 1.0
                stats[stat] = (max if stat == "peak" else min)(usable) if usable else value
            else:
                stats[stat] = _MERGE[stat](stats[stat], value)

    def of(self, result: QueryResult) -> Groups[_K]:
        """These groups with the rows of a result already decoded into series added."""
        for s in result.series:
            if s.samples:
                self(s.labels, s.value)
        return self


_STATS = ("peak", "low", "count", "nonfinite", "stale", "points")
_MERGE: dict[str, Callable[[float, float], float]] = {"count": min, "nonfinite": max, "stale": max, "points": min}


def _interval(jobs: set[str], intervals: Intervals | None, fallback: timedelta | None) -> timedelta | None:
    """The shortest interval of the jobs that exported the group; unknown if any job's is."""
    found = [(intervals or {}).get(job, fallback) for job in jobs] or [fallback]
    return None if any(i is None for i in found) else min(i for i in found if i is not None)


def _quality(stats: _Stats, jobs: set[str], window: EvidenceWindow, intervals: Intervals | None,
             fallback: timedelta | None) -> Quality:
    """The longest gap is the stalest a step saw its latest sample plus the steps that saw none
    (each worth a step): exact for one gap, an overestimate for several (towards *unknown*)."""
    stale = stats.get("stale")
    missing = max(0, window.expected_samples - _count(stats.get("points")))
    longest = window.window.total_seconds()  # a longer gap is the whole window (and past a timedelta's range)
    gap = window.window if stale is None or not math.isfinite(stale) else \
        timedelta(seconds=min(max(0.0, stale), longest)) + missing * window.step
    return Quality(_interval(jobs, intervals, fallback), min(gap, window.window), "nonfinite" in stats)


_GpuKey = tuple[PodKey, str, str, bool, str, str]


def gpu_groups(labels: LabelMap, hostname_label: str | None = None) -> Groups[_GpuKey]:
    """The groups of `gpu_query`'s answer: a GPU (or MIG instance) of a pod (by name and, where
    the exporter labels it, UID: the first UID label set), on its node."""
    host = hostname_label or labels.hostname
    uids = labels.pod_uid

    def gpu_of(lab: Mapping[str, str]) -> _GpuKey | None:
        pod, instance = lab.get(labels.pod, ""), lab.get(_GPU_INSTANCE, "")
        if not pod:
            return None
        uid = next((u for u in (lab.get(name, "") for name in uids) if u), "")
        # Namespaces, nodes and models held once, not once a row: the evidence lives through the cycle.
        return (PodKey(sys.intern(lab.get(labels.namespace, "")), pod), _gpu_id(lab.get("gpu", ""), instance),
                sys.intern(lab.get(host, "")), bool(instance), sys.intern(lab.get(MODEL, "")), uid)

    return Groups(gpu_of)


def cpu_groups(labels: LabelMap = HONOR_LABELS) -> Groups[PodKey]:
    """The groups of `cpu_query`'s answer: a pod."""
    def pod_of(lab: Mapping[str, str]) -> PodKey | None:
        return PodKey(sys.intern(lab.get(labels.namespace, "")), lab[labels.pod]) if lab.get(labels.pod) else None

    return Groups(pod_of)


def fold_gpu(
    result: QueryResult, window: EvidenceWindow, labels: LabelMap, hostname_label: str | None = None,
    intervals: Intervals | None = None, fallback: timedelta | None = None, groups: Groups[_GpuKey] | None = None,
) -> GpuEvidence:
    """Turn the answer of `gpu_query` into `GpuEvidence` (pure; unit-tested without Prometheus).

    A series with only a count has `peak=None`; one with only a peak has `samples=0`.
    `intervals` are the jobs' scrape intervals, `fallback` the one for a job not among them.
    `groups` holds the rows already gathered while the answer was decoded (`gpu_groups` as the
    query's sink), besides any series the result holds.
    """
    failure = _failure(result)
    if failure:
        return GpuEvidence(window, failed=failure)
    gathered = (groups or gpu_groups(labels, hostname_label)).of(result)
    found, jobs = gathered.stats, gathered.jobs
    pods: dict[PodKey, list[GpuSeries]] = {}
    for group, stats in found.items():
        key, gpu, node, mig, model, uid = group
        peak = _number(stats["peak"]) if "peak" in stats else None
        quality = _quality(stats, jobs.get(group, set()), window, intervals, fallback)
        pods.setdefault(key, []).append(GpuSeries(gpu, peak, _count(stats.get("count")), node, quality, mig, model,
                                                  uid, _number(stats["low"]) if "low" in stats else None))
    return GpuEvidence(window, {k: tuple(sorted(v, key=_order)) for k, v in pods.items()})


def fold_cpu(result: QueryResult, window: EvidenceWindow, labels: LabelMap = HONOR_LABELS,
             intervals: Intervals | None = None, fallback: timedelta | None = None,
             groups: Groups[PodKey] | None = None) -> CpuEvidence:
    """Turn the answer of `cpu_query` into `CpuEvidence` (pure); `groups` as for `fold_gpu`."""
    failure = _failure(result)
    if failure:
        return CpuEvidence(window, failed=failure)
    gathered = (groups or cpu_groups(labels)).of(result)
    found, jobs = gathered.stats, gathered.jobs
    return CpuEvidence(window, {
        key: CpuUsage(_number(stats["peak"]) if "peak" in stats else None, _count(stats.get("count")),
                      _quality(stats, jobs.get(key, set()), window, intervals, fallback))
        for key, stats in found.items() if "peak" in stats or "count" in stats
    })


# ----------------------------------------------------------------------------- one query each


def scope(labels: LabelMap, pods: Sequence[PodKey] | None, namespaces: Sequence[str] | None = None,
          outside: Sequence[str] = ()) -> tuple[Matcher, ...]:
    """Matchers that keep a query to these pods (all in one namespace, as a re-check reads them),
    else to these namespaces (those the policies cover); None means every pod, every namespace
    (but those `outside` names: the last part of a read in parts, `janitor.observe.parts`)."""
    if pods is None:
        if namespaces is None:
            others = exact_names_regex(sorted(outside))
            return (Matcher(labels.namespace, others, "!~"),) if others else ()
        return (Matcher(labels.namespace, exact_names_regex(sorted(namespaces)) or "$^", "=~"),)
    namespaces = sorted({p.namespace for p in pods})
    names = exact_names_regex(sorted(p.pod for p in pods)) or "$^"  # no pods: match nothing
    return (Matcher(labels.namespace, exact_names_regex(namespaces) or "$^", "=~"), Matcher(labels.pod, names, "=~"))


def gpu_evidence(
    source: PrometheusSource, *, signal: str, window: timedelta, step: timedelta, at: datetime,
    labels: LabelMap, hostname_label: str | None = None, pods: Sequence[PodKey] | None = None,
    intervals: Intervals | None = None, fallback: timedelta | None = None, namespaces: Sequence[str] | None = None,
    busy_above: float | None = None, low: bool = False, outside: Sequence[str] = (),
) -> GpuEvidence:
    """Per-GPU peak, sample count and quality of `signal` for every workload pod, from one instant query.

    `step` is the resolution gaps are measured at; coverage is measured against each series' job's
    scrape interval from `intervals` (or `fallback`); `hostname_label` overrides `labels.hostname`
    (dcgm-exporter renamed `Hostname` to `hostname`). Never raises for Prometheus trouble: the
    evidence says `failed` instead.
    """
    span = EvidenceWindow(signal, window, step, at)
    query = gpu_query(signal, window=window, step=step, labels=labels,
                      extra=(*source.config.extra_matchers, *scope(labels, pods, namespaces, outside)),
                      hostname_label=hostname_label, busy_above=busy_above, model=signal == POWER_SIGNAL, low=low)
    groups = gpu_groups(labels, hostname_label)
    try:
        evidence = fold_gpu(source.instant(query, at, groups), span, labels, hostname_label, intervals, fallback,
                            groups)
    except PrometheusError as error:
        evidence = GpuEvidence(span, failed=str(error))
    if evidence.failed:
        logger.warning("GPU evidence for %s unavailable, nothing is judged on it: %s", signal, evidence.failed)
    return evidence


def cpu_evidence(
    source: PrometheusSource, *, window: timedelta, step: timedelta, at: datetime,
    labels: LabelMap = HONOR_LABELS, ignore_containers: Sequence[str] = (),
    rate_window: timedelta = timedelta(minutes=5), pods: Sequence[PodKey] | None = None,
    intervals: Intervals | None = None, fallback: timedelta | None = None, namespaces: Sequence[str] | None = None,
    busy_above: float | None = None, busy_fraction: float | None = None, outside: Sequence[str] = (),
) -> CpuEvidence:
    """Peak cores of each pod's app containers (sidecars ignored), coverage and quality, from one query.

    cAdvisor is scraped with `honor_labels`, so `labels` is the plain map unless a site differs.
    """
    span = EvidenceWindow(CPU_METRIC, window, step, at)
    query = cpu_query(window=window, step=step, labels=labels,
                      extra=(*source.config.extra_matchers, *scope(labels, pods, namespaces, outside)),
                      ignore_containers=ignore_containers, rate_window=rate_window, busy_above=busy_above,
                      busy_fraction=busy_fraction)
    groups = cpu_groups(labels)
    try:
        evidence = fold_cpu(source.instant(query, at, groups), span, labels, intervals, fallback, groups)
    except PrometheusError as error:
        evidence = CpuEvidence(span, failed=str(error))
    if evidence.failed:
        logger.warning("CPU evidence unavailable, nothing is judged on it: %s", evidence.failed)
    return evidence


def gpu_busy(source: PrometheusSource, *, signal: str, since: timedelta, step: timedelta, at: datetime,
             labels: LabelMap, busy_above: float, hostname_label: str | None = None,
             namespaces: Sequence[str] | None = None) -> GpuEvidence:
    """The GPUs of `namespaces` busy over the last `since` (`gpu_busy_query`), each with its peak alone."""
    span = EvidenceWindow(signal, since, step, at)
    query = gpu_busy_query(signal, since=since, labels=labels, busy_above=busy_above,
                           extra=(*source.config.extra_matchers, *scope(labels, None, namespaces)),
                           hostname_label=hostname_label, model=signal == POWER_SIGNAL)
    groups = gpu_groups(labels, hostname_label)
    try:
        return fold_gpu(source.instant(query, at, groups), span, labels, hostname_label, groups=groups)
    except PrometheusError as error:
        return GpuEvidence(span, failed=str(error))


def cpu_busy(source: PrometheusSource, *, since: timedelta, step: timedelta, at: datetime,
             labels: LabelMap = HONOR_LABELS, ignore_containers: Sequence[str] = (),
             namespaces: Sequence[str] | None = None, busy_above: float | None = None,
             busy_fraction: float | None = None) -> CpuEvidence:
    """The pods of `namespaces` whose CPU was busy over the last `since` (`cpu_busy_query`)."""
    span = EvidenceWindow(CPU_METRIC, since, step, at)
    query = cpu_busy_query(since=since, step=step, labels=labels,
                           extra=(*source.config.extra_matchers, *scope(labels, None, namespaces)),
                           ignore_containers=ignore_containers, busy_above=busy_above, busy_fraction=busy_fraction)
    groups = cpu_groups(labels)
    try:
        return fold_cpu(source.instant(query, at, groups), span, labels, groups=groups)
    except PrometheusError as error:
        return CpuEvidence(span, failed=str(error))


def exporting_query(signal: str, *, labels: LabelMap, extra: Iterable[Matcher] = (),
                    hostname_label: str | None = None) -> str:
    """The nodes with a series of `signal` now, a pod's or none's, in every namespace: one row a node."""
    return f"count by ({hostname_label or labels.hostname}) ({selector(signal, (), extra)})"


def exporting_nodes(source: PrometheusSource, *, signal: str, at: datetime, labels: LabelMap,
                    hostname_label: str | None = None) -> frozenset[str] | str:
    """Which nodes export `signal` (`exporting_query`), as `GpuEvidence.exporting` keeps them, or
    why that is unknown: an answer that is not whole is not used, since a node left out of it would
    be taken for one without the field."""
    host = hostname_label or labels.hostname
    try:
        result = source.instant(exporting_query(signal, labels=labels, extra=source.config.extra_matchers,
                                                hostname_label=hostname_label), at)
    except PrometheusError as error:
        return str(error)
    return _failure(result) or frozenset(sys.intern(s.labels.get(host, "")) for s in result.series)


def ghost_gpus(source: PrometheusSource, *, at: datetime, labels: LabelMap,
               hostname_label: str | None = None) -> tuple[GhostGpu, ...] | None:
    """GPUs with framebuffer memory in use and no pod mapped: (node, gpu, MiB), or None if unknown.

    A process of a deleted pod that still holds a GPU shows exactly so; the admin report puts
    them beside the node agent's leftovers on the same node. One instant query."""
    host = hostname_label or labels.hostname
    sel = selector("DCGM_FI_DEV_FB_USED", (Matcher(labels.pod, "", "="),), source.config.extra_matchers)
    query = f"max by ({host}, gpu, pci_bus_id, UUID, uuid) ({sel}) > 0"  # UUID, or uuid (--use-old-namespace)
    try:
        result = source.instant(query, at)
    except PrometheusError as error:
        logger.warning("ghost GPU query failed: %s", error)
        return None
    found = sorted((s.labels.get(host, ""), s.labels.get("gpu", ""), s.value, s.labels.get("pci_bus_id", ""),
                    s.labels.get("UUID") or s.labels.get("uuid", "")) for s in result.series)
    return tuple(GhostGpu(*ghost) for ghost in found)
