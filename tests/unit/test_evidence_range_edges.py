"""The janitor's evidence queries where Prometheus 2.x and 3.x differ: samples on a range's edges.

Prometheus 3 made ranges and subqueries left-open: a sample exactly `window` old, a subquery step
exactly on the window's start, or a last sample exactly `lookback_delta` (5 min) old is no longer
seen. Live scrapes land on such an edge only by chance, so here a real Prometheus of each major
(ids `prom2`, `prom3`) reads a history written with promtool on the 15 s grid itself, asked at a
grid time, so every edge holds a sample. Covered, for GPU and CPU evidence:
- a series sampled through the whole window: 2.x counts the edge sample (481 raw samples, 481
  subquery points), 3.x does not (480, 480); either way coverage is full and no gap is seen;
- the last sample exactly 5 min before the evidence time: the gap is 5 min on both (2.x sees it
  at the last step, 300 s stale; 3.x misses that step and counts it missing, 285 s + 15 s); the
  CPU rate, which needs two samples in its 5 min range, has one point fewer at the end on 3.x;
- a window equal to its step (a subquery `[15s:15s]`): one point expected, never a missing one;
- the verdict the idle triggers give is the same on both.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from devenv.exporters.exposition import Sample, openmetrics_lines
from devenv.prometheus import PrometheusServer
from devenv.prometheus_release import Release
from janitor.decide import model as m
from janitor.decide.evidence import PodKey
from janitor.decide.triggers.idle import judge_cpu, judge_gpu
from janitor.observe.evidence import cpu_evidence, gpu_evidence
from janitor.observe.prometheus import HONOR_LABELS, PrometheusConfig, PrometheusSource
from janitor.policy.model import IdleCpu, IdleGpu

pytestmark = pytest.mark.sandbox

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
CPU = "container_cpu_usage_seconds_total"
STEP = 15
WINDOW = timedelta(hours=2)
CORES = 0.25
NS = "edges"
INTERVALS = {"dcgm-exporter": timedelta(seconds=STEP), "kubelet": timedelta(seconds=STEP)}


def _history(at: int) -> list[Sample]:
    """3 h up to `at` on the 15 s grid: `whole` sampled throughout, `stopped` until 5 min before
    `at`; each has an idle GPU and an app container using `CORES`."""
    samples = []
    for pod, last in (("whole", at), ("stopped", at - 300)):
        for t in range(at - 3 * 3600, last + 1, STEP):
            gpu = (("Hostname", "node-1"), ("gpu", "0"), ("namespace", NS), ("pod", pod), ("job", "dcgm-exporter"))
            cpu = (("container", "app"), ("namespace", NS), ("pod", pod), ("job", "kubelet"))
            samples.append(Sample(GPU_UTIL, gpu, "0", t * 1000))
            samples.append(Sample(CPU, cpu, repr(CORES * (t - at + 3 * 3600)), t * 1000))
    return sorted(samples, key=lambda s: (s.name, s.labels, s.timestamp_ms or 0))


@pytest.fixture(scope="module")
def history(prometheus_release: Release, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, datetime]]:
    """A Prometheus of this release holding `_history`, and the evidence time: a grid time an hour ago."""
    at = int(time.time()) // 3600 * 3600 - 3600
    work = tmp_path_factory.mktemp(prometheus_release.name)
    om = work / "history.om"
    om.write_text("\n".join([*openmetrics_lines(_history(at)), "# EOF"]) + "\n")
    data = work / "data"
    subprocess.run([prometheus_release.promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                   check=True, capture_output=True)
    server = PrometheusServer(data, {"global": {"scrape_interval": f"{STEP}s"}, "scrape_configs": []},
                              release=prometheus_release)
    server.start()
    try:
        server.wait_ready(timeout=60)
        yield server.url, datetime.fromtimestamp(at, tz=timezone.utc)
    finally:
        server.stop()


def _source(url: str) -> PrometheusSource:
    return PrometheusSource(PrometheusConfig(url=url, connect_timeout=2, read_timeout=20))


def _pod(name: str, at: datetime) -> m.PodView:
    started = at - timedelta(hours=3)
    return m.PodView(m.ObjectRef("Pod", "v1", NS, name, f"uid-{name}"), "1", {}, None, "node-1", "Running", started,
                     1, (m.ContainerView("app", 1.0),), created=started)


def test_samples_on_the_left_edge_change_counts_never_coverage_or_gaps(
        history: tuple[str, datetime], prometheus_release: Release) -> None:
    url, at = history
    step = timedelta(seconds=STEP)
    with _source(url) as source:
        gpu = gpu_evidence(source, signal=GPU_UTIL, window=WINDOW, step=step, at=at, labels=HONOR_LABELS,
                           intervals=INTERVALS)
        cpu = cpu_evidence(source, window=WINDOW, step=step, at=at, intervals=INTERVALS)
    assert gpu.failed is None and cpu.failed is None
    edge = 1 if prometheus_release.major < 3 else 0  # 2.x includes the sample exactly WINDOW old
    (whole,) = gpu.pods[PodKey(NS, "whole")]
    assert (whole.peak, whole.samples) == (0.0, 480 + edge)
    assert whole.quality.gap == timedelta(0) and whole.quality.interval == step
    (stopped,) = gpu.pods[PodKey(NS, "stopped")]
    assert stopped.samples == 460 + edge
    assert stopped.quality.gap == timedelta(minutes=5), stopped.quality
    # CPU counts the rate's subquery points: one on the window's start in 2.x. A rate needs two
    # samples in its 5 min range: at the series' end 2.x loses the step at `at` ([at-5m, at] holds
    # the last sample only), 3.x the steps at `at` and 15 s before (their ranges are left-open).
    points = {"whole": 480 + edge, "stopped": 480 if edge else 478}
    for name, expected in points.items():
        usage = cpu.pods[PodKey(NS, name)]
        assert usage.peak_cores == pytest.approx(CORES)
        assert usage.samples == expected
        assert usage.samples / cpu.window.expected_samples >= 0.99
    assert cpu.pods[PodKey(NS, "whole")].quality.gap == timedelta(0)
    assert cpu.pods[PodKey(NS, "stopped")].quality.gap == timedelta(minutes=5)

    gpu_idle = IdleGpu(threshold=5.0, window=WINDOW, min_pod_age=WINDOW)
    cpu_idle = IdleCpu(cores=0.5, window=WINDOW, min_pod_age=WINDOW)
    assert judge_gpu(_pod("whole", at), gpu, gpu_idle, at).state is m.State.FIRES
    assert judge_cpu(_pod("whole", at), cpu, cpu_idle, at).state is m.State.FIRES


def test_a_window_equal_to_its_step_expects_one_point(history: tuple[str, datetime],
                                                      prometheus_release: Release) -> None:
    url, at = history
    step = timedelta(seconds=STEP)
    with _source(url) as source:
        gpu = gpu_evidence(source, signal=GPU_UTIL, window=step, step=step, at=at, labels=HONOR_LABELS,
                           intervals=INTERVALS)
    (whole,) = gpu.pods[PodKey(NS, "whole")]
    edge = 1 if prometheus_release.major < 3 else 0
    assert gpu.window.expected_samples == 1
    assert (whole.peak, whole.samples, whole.quality.gap) == (0.0, 1 + edge, timedelta(0))
