"""`janitor.observe.evidence` without a Prometheus: the PromQL it writes and how answers fold.

Covered:
- query builders: exact PromQL for both dcgm label styles, the `hostname` override, extra
  matchers (`cluster="mn2"`), CPU app-container matchers, sidecar regex escaping and quoting,
  PromQL durations;
- folding answers: peak and count per GPU, MIG `gpu/GPU_I_ID` ids (flagged as MIG), the longest
  gap, a NaN sample and the jobs' scrape interval per series, NaN/Inf/DCGM sentinels ->
  peak None, a series missing its count (samples 0) or its peak (peak None), pods without a pod
  label and unknown `stat` values ignored, CPU per pod;
- failures: a PrometheusError or a partial answer (warnings) -> `failed`, no pods, one WARNING;
  exactly one query per call, at the given `at`.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from janitor.decide.evidence import CpuUsage, EvidenceWindow, GpuSeries, PodKey, Quality
from janitor.observe.evidence import (
    cpu_evidence,
    cpu_groups,
    cpu_query,
    duration,
    exact_names_regex,
    fold_cpu,
    fold_gpu,
    gpu_evidence,
    gpu_groups,
    gpu_query,
)
from janitor.observe.prometheus import (
    HONOR_LABELS,
    SERVICE_MONITOR,
    ErrorKind,
    LabelMap,
    Matcher,
    PrometheusConfig,
    PrometheusError,
    PrometheusSource,
    QueryResult,
    RowSink,
    Series,
    parse_answer,
)

AT = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
HOURS_2 = timedelta(hours=2)
STEP = timedelta(seconds=15)
GPU_WINDOW = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", HOURS_2, STEP, AT)
CPU_WINDOW = EvidenceWindow("container_cpu_usage_seconds_total", HOURS_2, STEP, AT)
BARE = Quality(gap=HOURS_2)  # an answer without the quality statistics: nothing is known


def series(value: float, **labels: str) -> Series:
    return Series(labels=labels, samples=((AT.timestamp(), value),), non_finite=not math.isfinite(value))


def answer(*items: Series, warnings: tuple[str, ...] = ()) -> QueryResult:
    return QueryResult("q", "vector", items, warnings)


def sm_gpu(stat: str, value: float, pod: str = "train-0", gpu: str = "0", **more: str) -> Series:
    return series(value, exported_namespace="ml", exported_pod=pod, gpu=gpu, Hostname="gpu-node-1", stat=stat,
                  **more)


# ----------------------------------------------------------------------------- builders


def test_gpu_query_servicemonitor_style() -> None:
    sel = 'DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}'
    by = "exported_namespace, exported_pod, exported_pod_uid, pod_uid, gpu, GPU_I_ID, Hostname"
    stamp = f"max by ({by}) (timestamp({sel}))"
    assert gpu_query("DCGM_FI_DEV_GPU_UTIL", window=HOURS_2, step=STEP, labels=SERVICE_MONITOR) == (
        f"max by ({by}, stat) ("
        f'label_replace(max_over_time({sel}[2h]), "stat", "peak", "", "")'
        f' or label_replace(count_over_time({sel}[2h]), "stat", "count", "", "")'
        f' or label_replace(count by ({by}) (sum_over_time({sel}[2h]) unless sum_over_time({sel}[2h]) * 0 == 0),'
        ' "stat", "nonfinite", "", "")'
        f' or label_replace(max_over_time((time() - {stamp})[2h:15s]), "stat", "stale", "", "")'
        f' or label_replace(count_over_time(({stamp})[2h:15s]), "stat", "points", "", ""))'
        f' or max by ({by}, job, stat) (label_replace(count_over_time({sel}[2h]), "stat", "job", "", ""))'
    )


def test_gpu_query_honor_labels_with_cluster_and_lowercase_hostname() -> None:
    query = gpu_query("DCGM_FI_PROF_GR_ENGINE_ACTIVE", window=timedelta(minutes=90), step=STEP, labels=HONOR_LABELS,
                      extra=(Matcher("cluster", "mn2"),), hostname_label="hostname")
    sel = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!="",cluster="mn2"}'
    assert query.startswith("max by (namespace, pod, pod_uid, gpu, GPU_I_ID, hostname, stat) (")
    assert f'label_replace(max_over_time({sel}[90m]), "stat", "peak", "", "")' in query
    assert f"max by (namespace, pod, pod_uid, gpu, GPU_I_ID, hostname) (timestamp({sel}))" in query
    assert "[90m:15s]" in query


def test_gpu_query_refuses_bad_names() -> None:
    with pytest.raises(ValueError):
        gpu_query("DCGM FI", window=HOURS_2, step=STEP, labels=HONOR_LABELS)
    with pytest.raises(ValueError):
        gpu_query("DCGM_FI_DEV_GPU_UTIL", window=timedelta(0), step=STEP, labels=HONOR_LABELS)


def test_cpu_query_app_containers_peak_and_count() -> None:
    sel = ('container_cpu_usage_seconds_total'
           '{container!="",container!="POD",container!~"istio-proxy|vault\\\\.agent",cluster="mn2"}')
    cores = f"sum by (namespace, pod) (rate({sel}[5m]))"
    query = cpu_query(window=HOURS_2, step=STEP, labels=HONOR_LABELS, extra=(Matcher("cluster", "mn2"),),
                      ignore_containers=("istio-proxy", "vault.agent"))
    assert query.startswith(
        f'label_replace(max_over_time(({cores})[2h:15s]), "stat", "peak", "", "")'
        f' or label_replace(count_over_time(({cores})[2h:15s]), "stat", "count", "", "")'
    )
    # Gaps on the raw counters: the pod is covered only while every app container is.
    assert f"max_over_time((time() - min by (namespace, pod) (timestamp({sel})))[2h:15s])" in query
    assert query.endswith(f'max by (namespace, pod, job, stat) (label_replace(count_over_time({sel}[2h]), '
                          '"stat", "job", "", ""))')


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
        PodKey("ml", "train-0"): (GpuSeries("0", 93.0, 479, "gpu-node-1", BARE),
                                  GpuSeries("1", 0.0, 480, "gpu-node-1", BARE)),
        PodKey("ml", "other"): (GpuSeries("2", 5.0, 12, "gpu-node-1", BARE),
                                GpuSeries("10", 0.0, 12, "gpu-node-1", BARE)),
    }


def test_fold_gpu_quality_from_gaps_nan_and_the_jobs_interval() -> None:
    """The longest gap is the stalest latest sample plus a step per step that saw none; a NaN
    anywhere marks the series; the interval is the shortest of the jobs that exported it."""
    evidence = fold_gpu(answer(
        sm_gpu("peak", 0, gpu="0"), sm_gpu("count", 400, gpu="0"), sm_gpu("stale", 300, gpu="0"),
        sm_gpu("points", 420, gpu="0"), sm_gpu("job", 400, gpu="0", job="dcgm"),
        sm_gpu("peak", 0, gpu="1"), sm_gpu("count", 480, gpu="1"), sm_gpu("stale", 14.9, gpu="1"),
        sm_gpu("points", 480, gpu="1"), sm_gpu("nonfinite", 1, gpu="1"),
        sm_gpu("job", 300, gpu="1", job="dcgm"), sm_gpu("job", 180, gpu="1", job="dcgm-slow"),
        sm_gpu("peak", 0, gpu="2"), sm_gpu("count", 480, gpu="2"), sm_gpu("job", 480, gpu="2", job="elsewhere"),
    ), GPU_WINDOW, SERVICE_MONITOR, intervals={"dcgm": timedelta(seconds=15), "dcgm-slow": timedelta(seconds=60)})
    hole, nan, unlisted = evidence.pods[PodKey("ml", "train-0")]
    assert hole.quality == Quality(timedelta(seconds=15), timedelta(seconds=300 + 60 * 15), False)
    assert nan.quality == Quality(timedelta(seconds=15), timedelta(seconds=14.9), True)
    assert unlisted.quality.interval is None and unlisted.quality.gap == HOURS_2
    again = fold_gpu(answer(sm_gpu("peak", 0), sm_gpu("job", 1, job="elsewhere")), GPU_WINDOW, SERVICE_MONITOR,
                     intervals={}, fallback=timedelta(seconds=30))
    assert again.pods[PodKey("ml", "train-0")][0].quality.interval == timedelta(seconds=30)


def test_fold_gpu_mig_instances_get_gpu_slash_instance_ids() -> None:
    evidence = fold_gpu(answer(
        sm_gpu("peak", 0.6, gpu="0", GPU_I_ID="2"), sm_gpu("count", 480, gpu="0", GPU_I_ID="2"),
        sm_gpu("peak", 0.0, gpu="0", GPU_I_ID="1"), sm_gpu("count", 480, gpu="0", GPU_I_ID="1"),
    ), GPU_WINDOW, SERVICE_MONITOR)
    assert [(s.gpu, s.peak, s.mig) for s in evidence.pods[PodKey("ml", "train-0")]] == [
        ("0/1", 0.0, True), ("0/2", 0.6, True)]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 9.223372036854775794e18, 9.2e18])
def test_fold_gpu_non_finite_or_sentinel_peak_is_none(bad: float) -> None:
    evidence = fold_gpu(answer(sm_gpu("peak", bad), sm_gpu("count", 480)), GPU_WINDOW, SERVICE_MONITOR)
    assert evidence.pods[PodKey("ml", "train-0")] == (GpuSeries("0", None, 480, "gpu-node-1", BARE),)


def test_fold_gpu_missing_count_or_peak() -> None:
    evidence = fold_gpu(answer(sm_gpu("peak", 0, gpu="0"), sm_gpu("count", 480, gpu="1")), GPU_WINDOW, SERVICE_MONITOR)
    assert evidence.pods[PodKey("ml", "train-0")] == (
        GpuSeries("0", 0.0, 0, "gpu-node-1", BARE), GpuSeries("1", None, 480, "gpu-node-1", BARE),
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
    assert plain.pods == {PodKey("ml", "plain"): (GpuSeries("0", 7.0, 480, "n1", BARE),)}


def test_fold_cpu_per_pod() -> None:
    evidence = fold_cpu(answer(
        series(0.31, namespace="ml", pod="a", stat="peak"), series(481, namespace="ml", pod="a", stat="count"),
        series(math.nan, namespace="ml", pod="b", stat="peak"), series(10, namespace="ml", pod="b", stat="count"),
        series(1.5, namespace="ml", pod="c", stat="peak"),
        series(20, namespace="ml", pod="d", stat="count"),
    ), CPU_WINDOW)
    assert evidence.failed is None
    assert evidence.pods == {
        PodKey("ml", "a"): CpuUsage(0.31, 481, BARE), PodKey("ml", "b"): CpuUsage(None, 10, BARE),
        PodKey("ml", "c"): CpuUsage(1.5, 0, BARE), PodKey("ml", "d"): CpuUsage(None, 20, BARE),
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

    def instant(self, query: str, at: datetime, sink: RowSink | None = None) -> QueryResult:
        """The scripted answer as Prometheus would send it, decoded as the janitor decodes it."""
        self.calls.append((query, at))
        if isinstance(self.outcome, PrometheusError):
            raise self.outcome
        return parse_answer(200, body_of(self.outcome), query, sink)


def body_of(result: QueryResult) -> bytes:
    """A vector answer in Prometheus' JSON (values as strings, NaN and ±Inf as Prometheus spells them)."""
    def text(v: float) -> str:
        return "NaN" if math.isnan(v) else ("+Inf" if v == math.inf else "-Inf" if v == -math.inf else repr(v))
    rows = [{"metric": dict(s.labels), "value": [t, text(v)]} for s in result.series for t, v in s.samples[-1:]]
    envelope: dict[str, object] = {"status": "success", "data": {"resultType": result.result_type, "result": rows}}
    if result.warnings:
        envelope["warnings"] = list(result.warnings)
    return json.dumps(envelope).encode()


def test_gpu_evidence_sends_one_query_with_the_site_matchers() -> None:
    source = FakeSource(answer(sm_gpu("peak", 3), sm_gpu("count", 480)), extra_matchers=(Matcher("cluster", "mn2"),))
    evidence = gpu_evidence(source, signal="DCGM_FI_DEV_GPU_UTIL", window=HOURS_2, step=STEP, at=AT,
                            labels=SERVICE_MONITOR)
    assert source.calls == [(gpu_query("DCGM_FI_DEV_GPU_UTIL", window=HOURS_2, step=STEP, labels=SERVICE_MONITOR,
                                       extra=(Matcher("cluster", "mn2"),)), AT)]
    assert 'cluster="mn2"' in source.calls[0][0]
    assert evidence.window == GPU_WINDOW and evidence.failed is None
    assert evidence.pods == {PodKey("ml", "train-0"): (GpuSeries("0", 3.0, 480, "gpu-node-1", BARE),)}


def test_cpu_evidence_sends_one_query() -> None:
    source = FakeSource(answer(series(0.5, namespace="ml", pod="a", stat="peak")))
    evidence = cpu_evidence(source, window=HOURS_2, step=STEP, at=AT, ignore_containers=("istio-proxy",))
    assert [q for q, _ in source.calls] == [cpu_query(window=HOURS_2, step=STEP, ignore_containers=("istio-proxy",))]
    assert evidence.window == CPU_WINDOW and evidence.pods == {PodKey("ml", "a"): CpuUsage(0.5, 0, BARE)}


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


# ----------------------------------------------------------------------------- decoded row by row

LABEL_VALUES = st.sampled_from(("ml", "web", "train-0", "train-1", "0", "1", "gpu-node-1", "", "3"))
STATS = st.sampled_from(("peak", "count", "nonfinite", "stale", "points", "job", "other"))
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 10_000).map(float))


@st.composite
def rows(draw: st.DrawFn) -> Series:
    labels = {"exported_namespace": draw(LABEL_VALUES), "exported_pod": draw(LABEL_VALUES),
              "namespace": draw(LABEL_VALUES), "pod": draw(LABEL_VALUES), "gpu": draw(LABEL_VALUES),
              "Hostname": draw(LABEL_VALUES), "stat": draw(STATS), "job": draw(st.sampled_from(("dcgm", "kubelet")))}
    if draw(st.booleans()):
        labels["GPU_I_ID"] = draw(LABEL_VALUES)
    if draw(st.integers(0, 5)) == 0:  # label names a decoder could take for a row's own keys
        labels = {"metric": draw(LABEL_VALUES), "value": draw(LABEL_VALUES)} if draw(st.booleans()) else \
            labels | {"metric": "x", "values": "y"}
    kept = {k: v for k, v in labels.items() if draw(st.integers(0, 7))}
    value = draw(NUMBERS)
    return Series(kept, ((AT.timestamp(), value),), not math.isfinite(value))


@settings(max_examples=300, deadline=None)
@given(items=st.lists(rows(), max_size=40), warned=st.booleans(),
       labels=st.sampled_from((SERVICE_MONITOR, HONOR_LABELS)))
def test_an_answer_folded_row_by_row_as_it_is_decoded_is_the_answer_folded_whole(
        items: list[Series], warned: bool, labels: LabelMap) -> None:
    """The usage answers are folded while they are decoded, never held whole (`RowSink`): the
    evidence must be exactly what folding the whole decoded answer gives, whatever the rows say."""
    body = body_of(answer(*items, warnings=("w",) if warned else ()))
    whole = parse_answer(200, body, "q")
    gpus, cpus = gpu_groups(labels), cpu_groups(labels)
    streamed_gpu, streamed_cpu = parse_answer(200, body, "q", gpus), parse_answer(200, body, "q", cpus)
    assert streamed_gpu.series == () and streamed_gpu.warnings == whole.warnings
    fallback = timedelta(seconds=15)
    assert fold_gpu(streamed_gpu, GPU_WINDOW, labels, fallback=fallback, groups=gpus) == \
        fold_gpu(whole, GPU_WINDOW, labels, fallback=fallback)
    assert fold_cpu(streamed_cpu, CPU_WINDOW, labels, fallback=fallback, groups=cpus) == \
        fold_cpu(whole, CPU_WINDOW, labels, fallback=fallback)


@pytest.mark.parametrize("row", [
    {"metric": {"pod": "a"}, "value": [1.0, "not a number"]},
    {"metric": {"pod": "a"}, "value": [1.0]},
    {"metric": {"pod": "a"}, "value": ["1", "2", "3"]},
])
def test_a_row_that_is_not_a_sample_is_a_malformed_answer_either_way(row: dict[str, object]) -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [row]}}).encode()
    for sink in (None, gpu_groups(HONOR_LABELS)):
        with pytest.raises(PrometheusError) as raised:
            parse_answer(200, body, "q", sink)
        assert raised.value.kind is ErrorKind.MALFORMED


@pytest.mark.parametrize("stale", [8.64e13, 1e300])
def test_a_gap_longer_than_any_date_is_the_whole_window_not_a_crash(stale: float) -> None:
    """A `stale` statistic past what a timedelta holds (a series stamped near the epoch, a broken
    proxy) used to raise OverflowError out of the fold, failing the cycle's evidence read."""
    evidence = fold_gpu(answer(sm_gpu("peak", 1), sm_gpu("count", 480), sm_gpu("stale", stale)), GPU_WINDOW,
                        SERVICE_MONITOR, fallback=STEP)
    [gpu] = evidence.pods[PodKey("ml", "train-0")]
    assert gpu.quality.gap == HOURS_2
