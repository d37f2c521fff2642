"""`janitor.observe.evidence` without a Prometheus: the PromQL it writes and how answers fold.

Covered:
- query builders: exact PromQL for both dcgm label styles, the `hostname` override, extra
  matchers (`cluster="mn2"`), CPU app-container matchers, sidecar regex escaping and quoting,
  PromQL durations;
- folding answers: peak and count per GPU, MIG `gpu/GPU_I_ID` ids, NaN/Inf/DCGM sentinels ->
  peak None, a series missing its count (samples 0) or its peak (peak None), pods without a pod
  label and unknown `stat` values ignored, CPU per pod;
- failures: a PrometheusError or a partial answer (warnings) -> `failed`, no pods, one WARNING;
  exactly one query per call, at the given `at`.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta, timezone

import pytest

from janitor.decide.evidence import CpuUsage, EvidenceWindow, GpuSeries, PodKey
from janitor.observe.evidence import (
    cpu_evidence,
    cpu_query,
    duration,
    exact_names_regex,
    fold_cpu,
    fold_gpu,
    gpu_evidence,
    gpu_query,
)
from janitor.observe.prometheus import (
    HONOR_LABELS,
    SERVICE_MONITOR,
    ErrorKind,
    Matcher,
    PrometheusConfig,
    PrometheusError,
    PrometheusSource,
    QueryResult,
    Series,
)

AT = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
HOURS_2 = timedelta(hours=2)
STEP = timedelta(seconds=15)
GPU_WINDOW = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", HOURS_2, STEP, AT)
CPU_WINDOW = EvidenceWindow("container_cpu_usage_seconds_total", HOURS_2, STEP, AT)


def series(value: float, **labels: str) -> Series:
    return Series(labels=labels, samples=((AT.timestamp(), value),), non_finite=not math.isfinite(value))


def answer(*items: Series, warnings: tuple[str, ...] = ()) -> QueryResult:
    return QueryResult("q", "vector", items, warnings)


def sm_gpu(stat: str, value: float, pod: str = "train-0", gpu: str = "0", **more: str) -> Series:
    return series(value, exported_namespace="ml", exported_pod=pod, gpu=gpu, Hostname="gpu-node-1", stat=stat,
                  **more)


# ----------------------------------------------------------------------------- builders


def test_gpu_query_servicemonitor_style() -> None:
    assert gpu_query("DCGM_FI_DEV_GPU_UTIL", window=HOURS_2, labels=SERVICE_MONITOR) == (
        "max by (exported_namespace, exported_pod, gpu, GPU_I_ID, Hostname, stat) ("
        'label_replace(max_over_time(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}[2h]), "stat", "peak", "", "")'
        ' or label_replace(count_over_time(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}[2h]), "stat", "count", "", ""))'
    )


def test_gpu_query_honor_labels_with_cluster_and_lowercase_hostname() -> None:
    query = gpu_query("DCGM_FI_PROF_GR_ENGINE_ACTIVE", window=timedelta(minutes=90), labels=HONOR_LABELS,
                      extra=(Matcher("cluster", "mn2"),), hostname_label="hostname")
    sel = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!="",cluster="mn2"}[90m]'
    assert query == (
        "max by (namespace, pod, gpu, GPU_I_ID, hostname, stat) ("
        f'label_replace(max_over_time({sel}), "stat", "peak", "", "")'
        f' or label_replace(count_over_time({sel}), "stat", "count", "", ""))'
    )


def test_gpu_query_refuses_bad_names() -> None:
    with pytest.raises(ValueError):
        gpu_query("DCGM FI", window=HOURS_2, labels=HONOR_LABELS)
    with pytest.raises(ValueError):
        gpu_query("DCGM_FI_DEV_GPU_UTIL", window=timedelta(0), labels=HONOR_LABELS)


def test_cpu_query_app_containers_peak_and_count() -> None:
    cores = ('sum by (namespace, pod) (rate(container_cpu_usage_seconds_total'
             '{container!="",container!="POD",container!~"istio-proxy|vault\\\\.agent",cluster="mn2"}[5m]))')
    assert cpu_query(window=HOURS_2, step=STEP, labels=HONOR_LABELS, extra=(Matcher("cluster", "mn2"),),
                     ignore_containers=("istio-proxy", "vault.agent")) == (
        f'label_replace(max_over_time(({cores})[2h:15s]), "stat", "peak", "", "")'
        f' or label_replace(count_over_time(({cores})[2h:15s]), "stat", "count", "", "")'
    )


def test_cpu_query_without_sidecars_has_no_regex_and_follows_label_map() -> None:
    query = cpu_query(window=timedelta(hours=1), step=timedelta(minutes=1), labels=SERVICE_MONITOR,
                      rate_window=timedelta(minutes=2))
    assert "!~" not in query
    assert ('sum by (exported_namespace, exported_pod) (rate(container_cpu_usage_seconds_total'
            '{exported_container!="",exported_container!="POD"}[2m]))') in query
    assert "[1h:1m]" in query


def test_sidecar_regex_matches_names_exactly() -> None:
    assert (exact_names_regex(["istio-proxy", "a.b", "x|y", "q(1)", 'c"d', "", "a.b"])
            == r'istio-proxy|a\.b|x\|y|q\(1\)|c"d')
    # The PromQL string literal escapes the backslashes and the quote on top.
    query = cpu_query(window=HOURS_2, step=STEP, ignore_containers=('c"d', "a.b"))
    assert 'container!~"c\\"d|a\\\\.b"' in query
    assert exact_names_regex([]) == ""


@pytest.mark.parametrize(("span", "text"), [
    (timedelta(hours=2), "2h"), (timedelta(minutes=5), "5m"), (timedelta(seconds=90), "90s"),
    (timedelta(milliseconds=1500), "1500ms"),
])
def test_duration(span: timedelta, text: str) -> None:
    assert duration(span) == text


# ----------------------------------------------------------------------------- folding


def test_fold_gpu_peak_and_count_per_gpu() -> None:
    evidence = fold_gpu(answer(
        sm_gpu("peak", 0, gpu="1"), sm_gpu("count", 480, gpu="1"),
        sm_gpu("peak", 93, gpu="0"), sm_gpu("count", 479, gpu="0"),
        sm_gpu("peak", 0, pod="other", gpu="10"), sm_gpu("count", 12, pod="other", gpu="10"),
        sm_gpu("peak", 5, pod="other", gpu="2"), sm_gpu("count", 12, pod="other", gpu="2"),
    ), GPU_WINDOW, SERVICE_MONITOR)
    assert evidence.failed is None and evidence.window == GPU_WINDOW
    assert evidence.pods == {
        PodKey("ml", "train-0"): (GpuSeries("0", 93.0, 479, "gpu-node-1"), GpuSeries("1", 0.0, 480, "gpu-node-1")),
        PodKey("ml", "other"): (GpuSeries("2", 5.0, 12, "gpu-node-1"), GpuSeries("10", 0.0, 12, "gpu-node-1")),
    }


def test_fold_gpu_mig_instances_get_gpu_slash_instance_ids() -> None:
    evidence = fold_gpu(answer(
        sm_gpu("peak", 0.6, gpu="0", GPU_I_ID="2"), sm_gpu("count", 480, gpu="0", GPU_I_ID="2"),
        sm_gpu("peak", 0.0, gpu="0", GPU_I_ID="1"), sm_gpu("count", 480, gpu="0", GPU_I_ID="1"),
    ), GPU_WINDOW, SERVICE_MONITOR)
    assert [(s.gpu, s.peak) for s in evidence.pods[PodKey("ml", "train-0")]] == [("0/1", 0.0), ("0/2", 0.6)]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 9.223372036854775794e18, 9.2e18])
def test_fold_gpu_non_finite_or_sentinel_peak_is_none(bad: float) -> None:
    evidence = fold_gpu(answer(sm_gpu("peak", bad), sm_gpu("count", 480)), GPU_WINDOW, SERVICE_MONITOR)
    assert evidence.pods[PodKey("ml", "train-0")] == (GpuSeries("0", None, 480, "gpu-node-1"),)


def test_fold_gpu_missing_count_or_peak() -> None:
    evidence = fold_gpu(answer(sm_gpu("peak", 0, gpu="0"), sm_gpu("count", 480, gpu="1")), GPU_WINDOW, SERVICE_MONITOR)
    assert evidence.pods[PodKey("ml", "train-0")] == (
        GpuSeries("0", 0.0, 0, "gpu-node-1"), GpuSeries("1", None, 480, "gpu-node-1"),
    )


def test_fold_gpu_ignores_series_without_pod_or_stat_and_honors_label_map() -> None:
    evidence = fold_gpu(answer(
        series(0, exported_namespace="ml", gpu="3", stat="peak"),  # no pod label
        series(0, exported_namespace="ml", exported_pod="", gpu="3", stat="peak"),
        sm_gpu("median", 4),
        series(7, namespace="ml", pod="plain", gpu="0", hostname="n1", stat="peak"),
        series(480, namespace="ml", pod="plain", gpu="0", hostname="n1", stat="count"),
    ), GPU_WINDOW, SERVICE_MONITOR)
    assert evidence.pods == {}
    plain = fold_gpu(answer(
        series(7, namespace="ml", pod="plain", gpu="0", hostname="n1", stat="peak"),
        series(480, namespace="ml", pod="plain", gpu="0", hostname="n1", stat="count"),
    ), GPU_WINDOW, HONOR_LABELS, hostname_label="hostname")
    assert plain.pods == {PodKey("ml", "plain"): (GpuSeries("0", 7.0, 480, "n1"),)}


def test_fold_cpu_per_pod() -> None:
    evidence = fold_cpu(answer(
        series(0.31, namespace="ml", pod="a", stat="peak"), series(481, namespace="ml", pod="a", stat="count"),
        series(math.nan, namespace="ml", pod="b", stat="peak"), series(10, namespace="ml", pod="b", stat="count"),
        series(1.5, namespace="ml", pod="c", stat="peak"),
        series(20, namespace="ml", pod="d", stat="count"),
    ), CPU_WINDOW)
    assert evidence.failed is None
    assert evidence.pods == {
        PodKey("ml", "a"): CpuUsage(0.31, 481), PodKey("ml", "b"): CpuUsage(None, 10),
        PodKey("ml", "c"): CpuUsage(1.5, 0), PodKey("ml", "d"): CpuUsage(None, 20),
    }


def test_partial_answers_fail_instead_of_folding() -> None:
    partial = answer(sm_gpu("peak", 0), sm_gpu("count", 480), warnings=("store eu-1 unavailable",))
    gpu = fold_gpu(partial, GPU_WINDOW, SERVICE_MONITOR)
    assert gpu.failed and "store eu-1 unavailable" in gpu.failed and dict(gpu.pods) == {}
    cpu = fold_cpu(answer(series(1, namespace="ml", pod="a", stat="peak"), warnings=("w",)), CPU_WINDOW)
    assert cpu.failed and dict(cpu.pods) == {}


# ----------------------------------------------------------------------------- one query per call


class FakeSource(PrometheusSource):
    """Answers `instant` from a script and records the queries; never opens a connection."""

    def __init__(self, outcome: QueryResult | PrometheusError, **config: object) -> None:
        super().__init__(PrometheusConfig(url="http://127.0.0.1:9", **config))  # type: ignore[arg-type]
        self.outcome = outcome
        self.calls: list[tuple[str, datetime]] = []

    def instant(self, query: str, at: datetime) -> QueryResult:
        self.calls.append((query, at))
        if isinstance(self.outcome, PrometheusError):
            raise self.outcome
        return self.outcome


def test_gpu_evidence_sends_one_query_with_the_site_matchers() -> None:
    source = FakeSource(answer(sm_gpu("peak", 3), sm_gpu("count", 480)), extra_matchers=(Matcher("cluster", "mn2"),))
    evidence = gpu_evidence(source, signal="DCGM_FI_DEV_GPU_UTIL", window=HOURS_2, step=STEP, at=AT,
                            labels=SERVICE_MONITOR)
    assert source.calls == [(gpu_query("DCGM_FI_DEV_GPU_UTIL", window=HOURS_2, labels=SERVICE_MONITOR,
                                       extra=(Matcher("cluster", "mn2"),)), AT)]
    assert 'cluster="mn2"' in source.calls[0][0]
    assert evidence.window == GPU_WINDOW and evidence.failed is None
    assert evidence.pods == {PodKey("ml", "train-0"): (GpuSeries("0", 3.0, 480, "gpu-node-1"),)}


def test_cpu_evidence_sends_one_query() -> None:
    source = FakeSource(answer(series(0.5, namespace="ml", pod="a", stat="peak")))
    evidence = cpu_evidence(source, window=HOURS_2, step=STEP, at=AT, ignore_containers=("istio-proxy",))
    assert [q for q, _ in source.calls] == [cpu_query(window=HOURS_2, step=STEP, ignore_containers=("istio-proxy",))]
    assert evidence.window == CPU_WINDOW and evidence.pods == {PodKey("ml", "a"): CpuUsage(0.5, 0)}


def test_errors_and_partial_answers_fail_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    error = PrometheusError(ErrorKind.TIMEOUT, "query timed out in expression evaluation", status=503)
    with caplog.at_level(logging.WARNING, logger="janitor.observe.evidence"):
        gpu = gpu_evidence(FakeSource(error), signal="DCGM_FI_DEV_GPU_UTIL", window=HOURS_2, step=STEP, at=AT,
                           labels=HONOR_LABELS)
        cpu = cpu_evidence(FakeSource(answer(series(1, namespace="ml", pod="a", stat="peak"), warnings=("w",))),
                           window=HOURS_2, step=STEP, at=AT)
    assert gpu.failed and "timeout" in gpu.failed and dict(gpu.pods) == {}
    assert cpu.failed and "partial" in cpu.failed and dict(cpu.pods) == {}
    warnings = [r for r in caplog.records if r.name == "janitor.observe.evidence"]
    assert [r.levelno for r in warnings] == [logging.WARNING, logging.WARNING]
