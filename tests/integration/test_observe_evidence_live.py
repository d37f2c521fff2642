"""`gpu_evidence` / `cpu_evidence` against a Prometheus holding two hours of backfilled history.

One history Prometheus serves every test here (backfilling takes a while): pods are created
backdated 3 h, their past is described on the sandbox exporters, and evidence is asked at the
moment the backfill ends, so a 2 h window at a 15 s step holds about 480 samples. Every test that
reads that history runs on Prometheus 2.x and 3.x (ids `prom2`, `prom3`; 3.x ranges are
left-open), with one history Prometheus per major.

Covered:
- a pod idle for 2 h: both GPUs peak 0 with ~480 samples, on the node the scheduler chose;
- a pod with one GPU busy for 30 min: that GPU's peak shows, the other stays 0;
- a 40-minute gap in a pod's series: fewer samples (coverage < 0.8) and a 40-minute longest gap,
  so the planner sees unknown; an unbroken series has a gap of about one step;
- a MIG pod on mig-node-1: `gpu/GPU_I_ID` ids under DCGM_FI_PROF_GR_ENGINE_ACTIVE, and GPU_UTIL 0
  flagged as a MIG slice (so never judged idle on it);
- no series is attributed to the dcgm-exporter's own pod (the `exported_pod!=""` filter);
- CPU: the app container's peak only when the busy `istio-proxy` sidecar is ignored, the sum
  when it is not;
- asked to send only the peak of what is busy above the policies' highest threshold, the answer is
  smaller, busy GPUs and pods carry their peak alone, the rest is unchanged, and every verdict is
  the one the whole answer gives;
- an unreachable Prometheus gives failed evidence (logged once), not empty success;
- a pod computing on SM activity for 30 min while GPU_UTIL reads 0 throughout (a PROF-only load,
  or GPU_UTIL's sampling missing short kernels): idle on GPU_UTIL alone, in use on a policy that
  reads GPU_UTIL and SM activity; the nodes that export SM activity, read across the cluster,
  name its node as its series do, and a pod without its series there is unknown, not idle.
"""

from __future__ import annotations

import logging
import re
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import ABSENT, Kind, Segment
from devenv.history import prometheus_with_history
from devenv.nodes import STARTED_AT
from devenv.procs import wait_until
from devenv.prometheus_release import Release
from janitor.decide import model as m
from janitor.decide.evidence import PodKey
from janitor.decide.triggers.idle import judge_cpu, judge_gpu
from janitor.decide.triggers.signals import SignalsJudge
from janitor.observe.evidence import cpu_evidence, exporting_nodes, gpu_evidence
from janitor.observe.prometheus import HONOR_LABELS, SERVICE_MONITOR, PrometheusConfig, PrometheusSource
from janitor.policy.model import GpuSignal, IdleCpu, IdleGpu

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
WINDOW = timedelta(hours=2)
STEP = timedelta(seconds=15)


@dataclass(frozen=True)
class History:
    source: PrometheusSource
    namespace: str
    at: datetime  # just before the backfill's end: the window holds only backfilled samples

    def key(self, pod: str) -> PodKey:
        return PodKey(self.namespace, pod)


def _pod(core: client.CoreV1Api, namespace: str, name: str, started_at: str,
         containers: list[client.V1Container]) -> None:
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={STARTED_AT: started_at}),
        spec=client.V1PodSpec(containers=containers),
    ))


def _gpu_container(resource: str = "nvidia.com/gpu", count: int = 1) -> client.V1Container:
    return client.V1Container(name="trainer", image="registry.example/train:1", resources=client.V1ResourceRequirements(
        requests={"cpu": "1"}, limits={resource: str(count)}))


@pytest.fixture(scope="module")
def history(sandbox, kube: client.ApiClient, core: client.CoreV1Api, prometheus_release: Release) -> Iterator[History]:
    namespace = f"evidence-live-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    values = ValuesControl(sandbox.exporters_url)
    server = None
    try:
        wait_until(lambda: any(sa.metadata.name == "default"
                               for sa in core.list_namespaced_service_account(namespace).items),
                   timeout=30, what="default ServiceAccount")
        now = time.time()
        started = datetime.fromtimestamp(now - 3 * 3600, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        _pod(core, namespace, "idle", started, [_gpu_container(count=2)])
        _pod(core, namespace, "busy-one", started, [_gpu_container(count=2)])
        _pod(core, namespace, "gappy", started, [_gpu_container(count=1)])
        _pod(core, namespace, "mig", started, [_gpu_container("nvidia.com/mig-3g.40gb", 1)])
        _pod(core, namespace, "cpu", started, [
            client.V1Container(name="app", image="registry.example/app:1",
                               resources=client.V1ResourceRequirements(requests={"cpu": "1"})),
            client.V1Container(name="istio-proxy", image="registry.example/proxy:1",
                               resources=client.V1ResourceRequirements(requests={"cpu": "100m"})),
        ])
        _pod(core, namespace, "sm-busy", started, [_gpu_container(count=1)])
        names = {"idle", "busy-one", "gappy", "mig", "cpu", "sm-busy"}
        wait_until(lambda: {p.metadata.name for p in core.list_namespaced_pod(namespace).items
                            if p.status.phase == "Running"} == names, timeout=60, what="all pods Running")

        values.add_history(Kind.GPU_UTIL, (namespace, "idle", None), [Segment(now - 3 * 3600, now + 3600, 0)])
        values.add_history(Kind.GPU_UTIL, (namespace, "busy-one", 1), [Segment(now - 5400, now - 3600, 80)])
        values.add_history(Kind.GPU_UTIL, (namespace, "gappy", None), [Segment(now - 3600, now - 1200, ABSENT)])
        values.add_history(Kind.GR_ENGINE_ACTIVE, (namespace, "mig", None), [Segment(now - 5400, now - 3600, 0.6)])
        values.add_history(Kind.GPU_UTIL, (namespace, "sm-busy", None), [Segment(now - 3 * 3600, now + 3600, 0)])
        values.add_history(Kind.SM_ACTIVE, (namespace, "sm-busy", None), [Segment(now - 5400, now - 3600, 0.6)])
        values.add_history(Kind.CPU, (namespace, "cpu", "istio-proxy"), [Segment(now - 3 * 3600, now + 3600, 2.0)])
        values.add_history(Kind.CPU, (namespace, "cpu", "app"), [Segment(now - 5400, now - 3600, 0.3)])

        at = datetime.now(timezone.utc)
        server, report = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir,
                                                 release=prometheus_release)
        assert report.samples > 0
        with PrometheusSource(PrometheusConfig(url=server.url, connect_timeout=2, read_timeout=20)) as source:
            yield History(source, namespace, at)
    finally:
        if server is not None:
            server.stop()
        values.reset()
        core.delete_namespace(namespace)


def _gpu(history: History, signal: str = GPU_UTIL):
    evidence = gpu_evidence(history.source, signal=signal, window=WINDOW, step=STEP, at=history.at,
                            labels=SERVICE_MONITOR)
    assert evidence.failed is None
    return evidence


def test_idle_pod_has_both_gpus_at_zero_with_full_coverage(history: History, core: client.CoreV1Api) -> None:
    evidence = _gpu(history)
    series = evidence.pods[history.key("idle")]
    node = core.read_namespaced_pod("idle", history.namespace).spec.node_name
    assert len(series) == 2 and len({s.gpu for s in series}) == 2
    assert [s.peak for s in series] == [0.0, 0.0]
    assert all(470 <= s.samples <= 482 for s in series), series
    assert all(s.samples / evidence.window.expected_samples >= 0.97 for s in series)
    assert {s.node for s in series} == {node}
    # Unassigned GPUs and the exporter's own `pod` label never show up as a workload pod.
    assert not [k for k in evidence.pods if k.namespace == "gpu-operator" or k.pod.startswith("dcgm-exporter")]


def test_one_busy_gpu_shows_its_peak(history: History) -> None:
    series = _gpu(history).pods[history.key("busy-one")]
    assert sorted(s.peak for s in series) == [0.0, 80.0]
    assert all(470 <= s.samples <= 482 for s in series), series


def test_gap_in_history_lowers_coverage(history: History) -> None:
    evidence = _gpu(history)
    (series,) = evidence.pods[history.key("gappy")]
    coverage = series.samples / evidence.window.expected_samples
    assert series.peak == 0.0
    assert 0.6 <= coverage < 0.8, (series.samples, coverage)  # 80 of 120 minutes
    # No staleness markers in a backfill: 5 min of lookback, then 35 min of steps without a sample.
    assert series.quality.gap is not None and 39 * 60 <= series.quality.gap.total_seconds() <= 41 * 60
    idle = evidence.pods[history.key("idle")][0]
    assert idle.quality.gap is not None and idle.quality.gap.total_seconds() <= 30 and not idle.quality.non_finite


def test_mig_instance_has_gpu_and_instance_id(history: History) -> None:
    evidence = _gpu(history, GR_ENGINE)
    (series,) = evidence.pods[history.key("mig")]
    assert re.fullmatch(r"\d+/\d+", series.gpu), series.gpu
    assert series.node == "mig-node-1"
    assert series.peak == pytest.approx(0.6)
    assert 470 <= series.samples <= 482 and series.mig
    # dcgm-exporter exports GPU_UTIL 0 for a MIG instance whatever it does: flagged, so never judged on it.
    (util,) = _gpu(history).pods[history.key("mig")]
    assert util.peak == 0.0 and util.mig


def test_cpu_ignores_the_busy_sidecar(history: History) -> None:
    def usage(ignore: tuple[str, ...]):
        evidence = cpu_evidence(history.source, window=WINDOW, step=STEP, at=history.at, labels=HONOR_LABELS,
                                ignore_containers=ignore)
        assert evidence.failed is None
        return evidence.pods[history.key("cpu")]

    app_only = usage(("istio-proxy",))
    assert app_only.peak_cores == pytest.approx(0.3, abs=0.02)
    assert 460 <= app_only.samples <= 482, app_only
    everything = usage(())
    assert everything.peak_cores == pytest.approx(2.3, abs=0.05)


def test_unreachable_prometheus_fails_the_evidence(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    at = datetime.now(timezone.utc)
    with PrometheusSource(PrometheusConfig(url=f"http://127.0.0.1:{port}", connect_timeout=2)) as dead:
        with caplog.at_level(logging.WARNING, logger="janitor.observe.evidence"):
            gpu = gpu_evidence(dead, signal=GPU_UTIL, window=WINDOW, step=STEP, at=at, labels=SERVICE_MONITOR)
            cpu = cpu_evidence(dead, window=WINDOW, step=STEP, at=at)
    assert gpu.failed and "transport" in gpu.failed and dict(gpu.pods) == {}
    assert cpu.failed and "transport" in cpu.failed and dict(cpu.pods) == {}
    assert len([r for r in caplog.records if r.name == "janitor.observe.evidence"]) == 2


def _pod_view(history: History, name: str, gpus: int, cpu_request: float = 1.0) -> m.PodView:
    started = history.at - timedelta(hours=3)
    return m.PodView(m.ObjectRef("Pod", "v1", history.namespace, name, f"uid-{name}"), "1", {}, None, "node",
                     "Running", started, gpus, (m.ContainerView("app", cpu_request),), created=started)


def test_busy_groups_carry_only_their_peak_and_every_verdict_stays(history: History) -> None:
    asked = len(history.source.stats)
    full = _gpu(history)
    lean = gpu_evidence(history.source, signal=GPU_UTIL, window=WINDOW, step=STEP, at=history.at,
                        labels=SERVICE_MONITOR, busy_above=5.0)
    full_bytes, lean_bytes = (q.bytes for q in history.source.stats[asked:])
    assert lean.failed is None and lean.pods.keys() == full.pods.keys()
    busy = 0
    for key, series in full.pods.items():
        if key.namespace != history.namespace:
            continue  # pods of a module before this one whose namespace is still going
        for whole, slim in zip(series, lean.pods[key], strict=True):
            if whole.peak is not None and whole.peak > 5.0:
                busy += 1
                assert (slim.gpu, slim.peak, slim.node, slim.samples) == (whole.gpu, whole.peak, whole.node, 0)
            else:
                assert slim == whole
    assert busy == 1 and lean_bytes < full_bytes
    trigger = IdleGpu(threshold=5.0, window=WINDOW, min_pod_age=WINDOW)
    for name, gpus in (("idle", 2), ("busy-one", 2), ("gappy", 1), ("mig", 1)):
        pod = _pod_view(history, name, gpus)
        assert judge_gpu(pod, lean, trigger, history.at).state == judge_gpu(pod, full, trigger, history.at).state
    assert judge_gpu(_pod_view(history, "busy-one", 2), lean, trigger, history.at).state is m.State.CLEAR

    def cpu(above: float | None = None, fraction: float | None = None):
        found = cpu_evidence(history.source, window=WINDOW, step=STEP, at=history.at, labels=HONOR_LABELS,
                             ignore_containers=("istio-proxy",), busy_above=above, busy_fraction=fraction)
        assert found.failed is None
        return found

    whole = cpu()
    key = history.key("cpu")
    # The app container peaked at 0.3 cores of its 1-core request: busy above 0.1 cores or 10 % of
    # it (kube-state-metrics' requests), so its peak comes alone; at 0.5 it is idle, and whole.
    for slim in (cpu(above=0.1), cpu(fraction=0.1)):
        assert slim.pods[key].peak_cores == whole.pods[key].peak_cores and slim.pods[key].samples == 0
        assert whole.pods.keys() == slim.pods.keys()
    assert cpu(above=0.5).pods[key] == whole.pods[key] == cpu(fraction=0.5).pods[key]
    pod = _pod_view(history, "cpu", 0)
    for level in (0.1, 0.5):
        for trigger, slim in ((IdleCpu(cores=level, window=WINDOW, min_pod_age=WINDOW), cpu(above=level)),
                              (IdleCpu(fraction_of_request=level, window=WINDOW, min_pod_age=WINDOW),
                               cpu(fraction=level))):
            assert judge_cpu(pod, slim, trigger, history.at).state == judge_cpu(pod, whole, trigger, history.at).state


def test_busy_on_sm_activity_at_zero_gpu_util_is_not_idle(history: History) -> None:
    def read(signal: str):  # with the history's scrape interval: judged, not unknown for want of it
        found = gpu_evidence(history.source, signal=signal, window=WINDOW, step=STEP, at=history.at,
                             labels=SERVICE_MONITOR, fallback=STEP)
        assert found.failed is None
        return found

    util, sm = read(GPU_UTIL), read(SM_ACTIVE)
    key = history.key("sm-busy")
    assert [s.peak for s in util.pods[key]] == [0.0]
    assert [s.peak for s in sm.pods[key]] == [pytest.approx(0.6)]
    pod = _pod_view(history, "sm-busy", 1)
    alone = IdleGpu(threshold=5.0, window=WINDOW, min_pod_age=WINDOW)
    assert judge_gpu(pod, util, alone, history.at).state is m.State.FIRES  # what one signal would conclude
    both = IdleGpu(threshold=5.0, window=WINDOW, min_pod_age=WINDOW, also=((GpuSignal.SM_ACTIVE, 0.05),))
    verdict = SignalsJudge({(GPU_UTIL, WINDOW): util, (SM_ACTIVE, WINDOW): sm}, both, history.at)(pod)
    assert verdict.state is m.State.CLEAR, verdict.why
    # The idle pod stays idle on both: no SM activity series make it busy by themselves.
    assert SignalsJudge({(GPU_UTIL, WINDOW): util, (SM_ACTIVE, WINDOW): sm}, both,
                        history.at)(_pod_view(history, "idle", 2)).state is m.State.FIRES
    # Which nodes export SM activity, read across the cluster: the pod's node, named as the
    # evidence names it. Without its own series there, the pod would be unknown, not idle.
    exporting = exporting_nodes(history.source, signal=SM_ACTIVE, at=history.at, labels=SERVICE_MONITOR)
    node = sm.pods[key][0].node
    assert isinstance(exporting, frozenset) and node in exporting and node == util.pods[key][0].node
    pod = replace(pod, node=node)
    lost = {(GPU_UTIL, WINDOW): util, (SM_ACTIVE, WINDOW): replace(sm, pods={}, exporting=exporting)}
    assert SignalsJudge(lost, both, history.at)(pod).state is m.State.UNKNOWN
    lost[(SM_ACTIVE, WINDOW)] = replace(sm, pods={})  # what the pods read alone would say: not exported there
    assert SignalsJudge(lost, both, history.at)(pod).state is m.State.FIRES
