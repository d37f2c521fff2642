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
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from janitor.decide.evidence import (
    CpuEvidence,
    CpuUsage,
    EvidenceWindow,
    GhostGpu,
    GpuEvidence,
    GpuSeries,
    PodKey,
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

logger = logging.getLogger(__name__)

CPU_METRIC = "container_cpu_usage_seconds_total"
DCGM_SENTINEL = 9.2e18
"""DCGM's blank/not-supported int64 sentinels start at 0x7ffffffffffffff0 (~9.22e18): no data."""
STAT = "stat"  # the label that tells the peak series from the count series in one answer
_GPU_INSTANCE = "GPU_I_ID"


_UNITS = (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def duration(span: timedelta) -> str:
    """A PromQL duration for `span` in the largest unit that divides it (`2h`, `15s`, `1500ms`)."""
    ms = round(span.total_seconds() * 1000)
    if ms <= 0:
        raise ValueError(f"a PromQL duration must be positive, got {span}")
    unit, size = next((u, n) for u, n in _UNITS if ms % n == 0)
    return f"{ms // size}{unit}"


def _peak_or_count(peak: str, count: str) -> str:
    return (f'label_replace({peak}, "{STAT}", "peak", "", "")'
            f' or label_replace({count}, "{STAT}", "count", "", "")')


def gpu_query(
    signal: str, *, window: timedelta, labels: LabelMap, extra: Iterable[Matcher] = (),
    hostname_label: str | None = None,
) -> str:
    """Peak and sample count per GPU series of workload pods over `window`, as one query.

    `<pod label>!=""` keeps only GPUs mapped to a workload pod: behind a ServiceMonitor an
    unassigned GPU would otherwise carry the exporter's own `pod` label (reference §1.2). The
    `max by` keeps exactly the labels that identify a GPU of a pod, so exporter restarts, HA
    replicas or `instance` labels neither split nor duplicate a series. For the count, `max`
    errs towards fewer samples (a series split by an exporter restart counts its larger part),
    i.e. towards *unknown*, never towards idle.
    """
    host = hostname_label or labels.hostname
    sel = selector(signal, (Matcher(labels.pod, "", "!="),), extra)
    rng = f"[{duration(window)}]"
    by = ", ".join((labels.namespace, labels.pod, "gpu", _GPU_INSTANCE, host, STAT))
    inner = _peak_or_count(f"max_over_time({sel}{rng})", f"count_over_time({sel}{rng})")
    return f"max by ({by}) ({inner})"


def exact_names_regex(names: Iterable[str]) -> str:
    """An RE2 alternation matching exactly these container names (Prometheus anchors it).

    Names are escaped, so `a.b` never matches `axb`; empty names are dropped (they would match
    the pod-cgroup series, which are excluded anyway).
    """
    return "|".join(_RE2_SPECIAL.sub(r"\\\1", n) for n in dict.fromkeys(names) if n)


def cpu_query(
    *, window: timedelta, step: timedelta, labels: LabelMap = HONOR_LABELS, extra: Iterable[Matcher] = (),
    ignore_containers: Sequence[str] = (), rate_window: timedelta = timedelta(minutes=5),
) -> str:
    """Peak cores of each pod's app containers over `window`, and the subquery points behind it.

    `container!=""` drops the pod cgroup and the containerd pause sandbox, `container!="POD"`
    the dockershim pause container (reference §2.1: summing those double-counts). Ignored sidecars
    are excluded by an exact, escaped alternation. The subquery at `step` turns the rate into a
    series, so the peak is the busiest `rate_window` and the count shows gaps like a scrape count.
    """
    matchers = [Matcher(labels.container, "", "!="), Matcher(labels.container, "POD", "!=")]
    sidecars = exact_names_regex(ignore_containers)
    if sidecars:
        matchers.append(Matcher(labels.container, sidecars, "!~"))
    sel = selector(CPU_METRIC, matchers, extra)
    cores = f"sum by ({labels.namespace}, {labels.pod}) (rate({sel}[{duration(rate_window)}]))"
    rng = f"[{duration(window)}:{duration(step)}]"
    return _peak_or_count(f"max_over_time(({cores}){rng})", f"count_over_time(({cores}){rng})")


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
    return (series.node, *[(0, int(p), "") if p.isdigit() else (1, 0, p) for p in series.gpu.split("/")])


def fold_gpu(
    result: QueryResult, window: EvidenceWindow, labels: LabelMap, hostname_label: str | None = None
) -> GpuEvidence:
    """Turn the answer of `gpu_query` into `GpuEvidence` (pure; unit-tested without Prometheus).

    A series with only a count has `peak=None`; one with only a peak has `samples=0`.
    """
    failure = _failure(result)
    if failure:
        return GpuEvidence(window, failed=failure)
    host = hostname_label or labels.hostname
    found: dict[tuple[PodKey, str, str], dict[str, float]] = {}
    for s in result.series:
        pod = s.labels.get(labels.pod, "")
        stat = s.labels.get(STAT, "")
        if not pod or stat not in ("peak", "count") or not s.samples:
            continue
        key = PodKey(s.labels.get(labels.namespace, ""), pod)
        gpu = _gpu_id(s.labels.get("gpu", ""), s.labels.get(_GPU_INSTANCE, ""))
        found.setdefault((key, gpu, s.labels.get(host, "")), {})[stat] = s.value
    pods: dict[PodKey, list[GpuSeries]] = {}
    for (key, gpu, node), stats in found.items():
        peak = _number(stats["peak"]) if "peak" in stats else None
        pods.setdefault(key, []).append(GpuSeries(gpu, peak, _count(stats.get("count")), node))
    return GpuEvidence(window, {k: tuple(sorted(v, key=_order)) for k, v in pods.items()})


def fold_cpu(result: QueryResult, window: EvidenceWindow, labels: LabelMap = HONOR_LABELS) -> CpuEvidence:
    """Turn the answer of `cpu_query` into `CpuEvidence` (pure)."""
    failure = _failure(result)
    if failure:
        return CpuEvidence(window, failed=failure)
    found: dict[PodKey, dict[str, float]] = {}
    for s in result.series:
        pod = s.labels.get(labels.pod, "")
        stat = s.labels.get(STAT, "")
        if not pod or stat not in ("peak", "count") or not s.samples:
            continue
        found.setdefault(PodKey(s.labels.get(labels.namespace, ""), pod), {})[stat] = s.value
    return CpuEvidence(window, {
        key: CpuUsage(_number(stats["peak"]) if "peak" in stats else None, _count(stats.get("count")))
        for key, stats in found.items()
    })


# ----------------------------------------------------------------------------- one query each


def scope(labels: LabelMap, pods: Sequence[PodKey] | None) -> tuple[Matcher, ...]:
    """Matchers that keep a query to these pods (all in one namespace, as a re-check reads them);
    None means every pod."""
    if pods is None:
        return ()
    namespaces = sorted({p.namespace for p in pods})
    names = exact_names_regex(sorted(p.pod for p in pods)) or "$^"  # no pods: match nothing
    return (Matcher(labels.namespace, exact_names_regex(namespaces) or "$^", "=~"), Matcher(labels.pod, names, "=~"))


def gpu_evidence(
    source: PrometheusSource, *, signal: str, window: timedelta, step: timedelta, at: datetime,
    labels: LabelMap, hostname_label: str | None = None, pods: Sequence[PodKey] | None = None,
) -> GpuEvidence:
    """Per-GPU peak and sample count of `signal` for every workload pod, from one instant query.

    `step` is the scrape interval coverage is measured against; `hostname_label` overrides
    `labels.hostname` (dcgm-exporter renamed `Hostname` to `hostname`). Never raises for
    Prometheus trouble: the evidence says `failed` instead.
    """
    span = EvidenceWindow(signal, window, step, at)
    query = gpu_query(signal, window=window, labels=labels,
                      extra=(*source.config.extra_matchers, *scope(labels, pods)), hostname_label=hostname_label)
    try:
        evidence = fold_gpu(source.instant(query, at), span, labels, hostname_label)
    except PrometheusError as error:
        evidence = GpuEvidence(span, failed=str(error))
    if evidence.failed:
        logger.warning("GPU evidence for %s unavailable, nothing is judged on it: %s", signal, evidence.failed)
    return evidence


def cpu_evidence(
    source: PrometheusSource, *, window: timedelta, step: timedelta, at: datetime,
    labels: LabelMap = HONOR_LABELS, ignore_containers: Sequence[str] = (),
    rate_window: timedelta = timedelta(minutes=5), pods: Sequence[PodKey] | None = None,
) -> CpuEvidence:
    """Peak cores of each pod's app containers (sidecars ignored) and coverage, from one query.

    cAdvisor is scraped with `honor_labels`, so `labels` is the plain map unless a site differs.
    """
    span = EvidenceWindow(CPU_METRIC, window, step, at)
    query = cpu_query(window=window, step=step, labels=labels,
                      extra=(*source.config.extra_matchers, *scope(labels, pods)),
                      ignore_containers=ignore_containers, rate_window=rate_window)
    try:
        evidence = fold_cpu(source.instant(query, at), span, labels)
    except PrometheusError as error:
        evidence = CpuEvidence(span, failed=str(error))
    if evidence.failed:
        logger.warning("CPU evidence unavailable, nothing is judged on it: %s", evidence.failed)
    return evidence


def ghost_gpus(source: PrometheusSource, *, at: datetime, labels: LabelMap,
               hostname_label: str | None = None) -> tuple[GhostGpu, ...] | None:
    """GPUs with framebuffer memory in use and no pod mapped: (node, gpu, MiB), or None if unknown.

    A process of a deleted pod that still holds a GPU shows exactly so; the admin report puts
    them beside the node agent's leftovers on the same node. One instant query."""
    host = hostname_label or labels.hostname
    sel = selector("DCGM_FI_DEV_FB_USED", (Matcher(labels.pod, "", "="),), source.config.extra_matchers)
    query = f"max by ({host}, gpu) ({sel}) > 0"
    try:
        result = source.instant(query, at)
    except PrometheusError as error:
        logger.warning("ghost GPU query failed: %s", error)
        return None
    found = sorted((s.labels.get(host, ""), s.labels.get("gpu", ""), s.value) for s in result.series)
    return tuple(GhostGpu(node, gpu, mib) for node, gpu, mib in found)
