"""Prometheus in the sandbox scrapes synthetic exporters derived from the real pods.

Aspects covered (queried with prometheus-api-client, as the janitor will):
- dcgm-exporter series per GPU of a 2-GPU pod, with the values the test set, behind a
  ServiceMonitor (workload labels renamed to exported_*), on the node the scheduler chose;
- cAdvisor's CPU counter gives back the rate the test set, for the app container only;
- kube-state-metrics reports phase, GPU requests (sanitized resource name) and Unschedulable;
- a series made absent disappears from Prometheus (missing data is visible as missing);
- a 2-hour backfilled history answers range queries and joins the live samples in one series;
- a slow backfill (hundreds of pods) still joins the live samples without a gap longer than the
  backfill itself: the janitor counts such a gap as missing evidence.
"""

from __future__ import annotations

import datetime
import itertools
import time

import pytest
from kubernetes import client
from prometheus_api_client import PrometheusConnect

from devenv import history as history_module
from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind, Segment
from devenv.history import prometheus_with_history
from devenv.nodes import STARTED_AT
from devenv.procs import wait_until


def gpu_pod(
    core: client.CoreV1Api, namespace: str, name: str, gpus: int, cpu: str = "4", started_at: str | None = None
) -> client.V1Pod:
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, annotations={STARTED_AT: started_at} if started_at else None),
            spec=client.V1PodSpec(containers=[client.V1Container(
                name="trainer", image="registry.example/train:1",
                resources=client.V1ResourceRequirements(requests={"cpu": cpu}, limits={"nvidia.com/gpu": str(gpus)}),
            )]),
        ),
    )
    wait_until(lambda: core.read_namespaced_pod(name, namespace).status.phase == "Running", timeout=60,
               what=f"{name} Running")
    return core.read_namespaced_pod(name, namespace)


@pytest.fixture
def prom(sandbox) -> PrometheusConnect:
    return PrometheusConnect(url=sandbox.prometheus_url, disable_ssl=True)


def in_slot_order(by_gpu: dict[str, float]) -> list[float]:
    return [v for _, v in sorted(by_gpu.items(), key=lambda kv: int(kv[0]))]


def values_of(prom: PrometheusConnect, query: str) -> dict[str, float]:
    return {s["metric"].get("gpu", ""): float(s["value"][1]) for s in prom.custom_query(query)}


def test_dcgm_series_per_gpu_with_set_values(
    core: client.CoreV1Api, namespace: str, exporter_values: ValuesControl, prom: PrometheusConnect
) -> None:
    pod = gpu_pod(core, namespace, "trainer", gpus=2)
    exporter_values.set_gpu_util(namespace, "trainer", 93, gpu=0)
    exporter_values.set_gpu_util(namespace, "trainer", 0, gpu=1)
    query = f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}",exported_pod="trainer"}}'

    wait_until(lambda: sorted(values_of(prom, query).values()) == [0.0, 93.0], timeout=30,
               what="both GPUs of the pod with the set values")
    series = prom.custom_query(query)
    assert {s["metric"]["Hostname"] for s in series} == {pod.spec.node_name}
    assert {s["metric"]["exported_container"] for s in series} == {"trainer"}
    assert {s["metric"]["namespace"] for s in series} == {"gpu-operator"}  # the exporter's own
    assert len({s["metric"]["UUID"] for s in series}) == 2


def test_cadvisor_rate_matches_set_cpu(
    core: client.CoreV1Api, namespace: str, exporter_values: ValuesControl, prom: PrometheusConnect
) -> None:
    gpu_pod(core, namespace, "busy", gpus=1)
    exporter_values.set_cpu(namespace, "busy", "trainer", 1.5)
    query = (
        f'sum by (pod) (rate(container_cpu_usage_seconds_total{{namespace="{namespace}",pod="busy",'
        f'container!="",container!="POD"}}[10s]))'
    )

    def rate_close() -> bool:
        result = prom.custom_query(query)
        return len(result) == 1 and abs(float(result[0]["value"][1]) - 1.5) < 0.05

    wait_until(rate_close, timeout=40, what="CPU rate 1.5 cores")


def test_kube_state_metrics_follow_pods(
    core: client.CoreV1Api, namespace: str, prom: PrometheusConnect
) -> None:
    gpu_pod(core, namespace, "runner", gpus=2)
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="waiting"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="c", image="x", resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "64"}))]),
    ))
    ns = f'namespace="{namespace}"'

    def reported() -> bool:
        running = prom.custom_query(f'kube_pod_status_phase{{{ns},pod="runner",phase="Running"}} == 1')
        gpus = prom.custom_query(f'kube_pod_container_resource_requests{{{ns},pod="runner",resource="nvidia_com_gpu"}}')
        stuck = prom.custom_query(f'kube_pod_status_unschedulable{{{ns},pod="waiting"}}')
        return len(running) == 1 and [g["value"][1] for g in gpus] == ["2"] and len(stuck) == 1

    wait_until(reported, timeout=60, what="kube-state-metrics for runner and waiting")


def test_absent_series_disappears(
    core: client.CoreV1Api, namespace: str, exporter_values: ValuesControl, prom: PrometheusConnect
) -> None:
    gpu_pod(core, namespace, "quiet", gpus=1)
    query = f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}",exported_pod="quiet"}}'
    wait_until(lambda: len(prom.custom_query(query)) == 1, timeout=30, what="series present")
    exporter_values.set_absent(Kind.GPU_UTIL, namespace, "quiet")
    wait_until(lambda: prom.custom_query(query) == [], timeout=30, what="series gone (stale)")


def test_backfilled_two_hour_history_answers_range_queries(
    kube: client.ApiClient, sandbox, core: client.CoreV1Api, namespace: str, exporter_values: ValuesControl
) -> None:
    now = time.time()
    three_hours_ago = _dt(now - 3 * 3600).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = gpu_pod(core, namespace, "idle-for-hours", gpus=2, started_at=three_hours_ago)
    assert pod.status.start_time.timestamp() == pytest.approx(now - 3 * 3600, abs=2)
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, "idle-for-hours", 0), [Segment(now - 7200, now, 0)])
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, "idle-for-hours", 1), [Segment(now - 7200, now - 3600, 80)])
    exporter_values.set_gpu_util(namespace, "idle-for-hours", 0)

    server, report = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir)
    try:
        prom = PrometheusConnect(url=server.url, disable_ssl=True)
        selector = f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}",exported_pod="idle-for-hours"}}'
        # Only a full window counts: both GPUs have about 2h / 15s samples.
        counts = values_of(prom, f"count_over_time({selector}[2h])")
        assert len(counts) == 2
        assert all(470 <= c <= 482 for c in counts.values()), counts
        # Slot 0 of the pod is its lowest device index; which indices depends on its neighbours.
        peaks = values_of(prom, f"max_over_time({selector}[2h])")
        assert in_slot_order(peaks) == [0.0, 80.0]
        recent = values_of(prom, f"max_over_time({selector}[50m])")
        assert in_slot_order(recent) == [0.0, 0.0]

        matrix = prom.custom_query_range(
            f"max({selector})", start_time=_dt(now - 7200 + 60), end_time=_dt(now), step="600"
        )
        points = [float(v) for _, v in matrix[0]["values"]]
        assert len(points) == 12
        assert points[:5] == [80.0] * 5 and points[-5:] == [0.0] * 5

        # The live scrapes continue the backfilled series: new samples arrive after the join.
        wait_until(
            lambda: all(c > counts[g] for g, c in values_of(prom, f"count_over_time({selector}[2h15m])").items()),
            timeout=30, what="live samples appended to the backfilled series",
        )
        assert report.samples > 0
    finally:
        server.stop()
    assert not server.data_dir.exists() and server.log_path.exists()  # its blocks go, its log stays


def test_a_slow_backfill_still_joins_the_live_samples_without_a_gap(
    kube: client.ApiClient, sandbox, core: client.CoreV1Api, namespace: str, exporter_values: ValuesControl,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Backfilling 200 pods' two hours takes tens of seconds; if the history stopped where that
    backfill began, the janitor would see a gap that long before the first live scrape and call
    every pod unknown. Here the whole history is made slow on purpose (a fault, as a busy machine
    would), and a shorter range stays as quick as it is."""
    slow, step = 20.0, 2.0
    gpu_pod(core, namespace, "joined", gpus=1, started_at=_dt(time.time() - 3600).strftime("%Y-%m-%dT%H:%M:%SZ"))
    exporter_values.set_gpu_util(namespace, "joined", 0)
    real = history_module.backfill

    def slow_history(*args, **kwargs):
        report = real(*args, **kwargs)
        if args[4] - args[3] > 60:  # end - start: the long range, not a catch-up
            time.sleep(slow)
        return report

    monkeypatch.setattr(history_module, "backfill", slow_history)
    server, _ = prometheus_with_history(kube, sandbox.exporters_url, hours=0.1, step=step, work_dir=sandbox.run_dir)
    try:
        prom = PrometheusConnect(url=server.url, disable_ssl=True)
        selector = f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}",exported_pod="joined"}}'
        started = time.time()
        wait_until(lambda: len(samples(prom, selector, since=started)) >= 2, timeout=30, what="two live samples")
        stamps = samples(prom, selector, since=0)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert max(gaps) < slow, f"a {max(gaps):.1f} s gap between the history and the live samples"
    finally:
        server.stop()


def samples(prom: PrometheusConnect, selector: str, since: float) -> list[float]:
    """The sample times of the one series `selector` picks, over the last 10 minutes, from `since` on."""
    [series] = prom.custom_query(f"{selector}[10m]")
    return [float(t) for t, _ in series["values"] if float(t) >= since]


def _dt(ts: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc)
