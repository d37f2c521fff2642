"""A pod deleted and made again under its name is never judged on its predecessor's GPU samples,
with dcgm-exporter labelling series with pod UIDs, against a Prometheus holding two hours of history.

`nb-0` (idle all along) and `nb-1` (busy for a while an hour ago) run on gpu-node-2 with the
sandbox's exporter switched to `pod_uid` for the whole window; their history is backfilled, and
then both are deleted and made again. The new pods say they started three hours ago (the sandbox
backdates them), so the rule that a pod is judged only once it ran for the whole window does not
keep the old samples out here: only the UIDs do.

Covered:
- the evidence holds, under each name, the old pod's series (two hours, by the old UID) and the
  new pod's (minutes, by its UID), on the same GPU;
- the new `nb-0` is not idle on its predecessor's two idle hours: another UID's samples inside a
  window it ran for the whole of leave it unknown, and the new `nb-1` is not busy on its
  predecessor's peak (its own peak is 0);
- read by name alone (no UID labels in the query) the same samples make one series per GPU: the
  new `nb-0` would be idle and `nb-1` busy, which is what the UID labels prevent.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from kubernetes import client
from kubernetes.client.rest import ApiException

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind, Segment
from devenv.history import prometheus_with_history
from devenv.nodes import STARTED_AT
from devenv.procs import wait_until
from janitor.decide import model as m
from janitor.decide.evidence import GpuEvidence, PodKey
from janitor.decide.reasons import Code
from janitor.decide.triggers.idle import judge_gpu
from janitor.observe.evidence import gpu_evidence
from janitor.observe.prometheus import SERVICE_MONITOR, PrometheusConfig, PrometheusSource
from janitor.policy.model import IdleGpu

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
WINDOW = timedelta(hours=2)
STEP = timedelta(seconds=15)
NODE = "gpu-node-2"
NAMES = ("nb-0", "nb-1")
TRIGGER = IdleGpu(threshold=5.0, window=WINDOW, min_pod_age=WINDOW)


def _create(core: client.CoreV1Api, namespace: str, name: str, started: str) -> client.V1Pod:
    return core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={STARTED_AT: started}),
        spec=client.V1PodSpec(node_name=NODE, termination_grace_period_seconds=0, containers=[client.V1Container(
            name="notebook", image="registry.example/notebook:1",
            resources=client.V1ResourceRequirements(requests={"cpu": "1"}, limits={"nvidia.com/gpu": "1"}))]),
    ))


def _running(core: client.CoreV1Api, namespace: str) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"}


def _gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except ApiException as e:
        return e.status == 404
    return False


def _view(pod: client.V1Pod) -> m.PodView:
    return m.PodView(m.ObjectRef("Pod", "v1", pod.metadata.namespace, pod.metadata.name, pod.metadata.uid), "1", {},
                     None, NODE, "Running", pod.status.start_time, 1, (m.ContainerView("notebook", 1.0),))


def test_a_recreated_pod_is_never_judged_on_its_predecessors_samples(
        sandbox, kube: client.ApiClient, core: client.CoreV1Api, namespace: str,
        exporter_values: ValuesControl) -> None:
    values = exporter_values
    server = None
    try:
        now = time.time()
        started = datetime.fromtimestamp(now - 3 * 3600, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for name in NAMES:
            _create(core, namespace, name, started)
        wait_until(lambda: set(_running(core, namespace)) == set(NAMES), timeout=60, what="both pods Running")
        old = {name: pod.metadata.uid for name, pod in _running(core, namespace).items()}

        values.add_history(Kind.POD_UID, (NODE,), [Segment(now - 4 * 3600, now + 3600, 1)])
        values.add_history(Kind.GPU_UTIL, (namespace, "nb-0", None), [Segment(now - 3 * 3600, now + 3600, 0)])
        values.add_history(Kind.GPU_UTIL, (namespace, "nb-1", None), [Segment(now - 5400, now - 3600, 80)])
        server, report = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir)
        assert report.samples > 0

        for name in NAMES:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        wait_until(lambda: all(_gone(core, namespace, name) for name in NAMES), timeout=60, what="old pods gone")
        for name in NAMES:
            _create(core, namespace, name, started)
        wait_until(lambda: set(_running(core, namespace)) == set(NAMES), timeout=60, what="new pods Running")
        new = _running(core, namespace)
        assert all(new[name].metadata.uid != old[name] for name in NAMES)

        with PrometheusSource(PrometheusConfig(url=server.url, connect_timeout=2, read_timeout=20)) as source:
            def scraped_new() -> bool:
                found = source.instant(f'{GPU_UTIL}{{exported_namespace="{namespace}",pod_uid=~"'
                                       f'{new["nb-0"].metadata.uid}|{new["nb-1"].metadata.uid}"}}',
                                       datetime.now(timezone.utc))
                return len(found.series) == 2

            wait_until(scraped_new, timeout=90, what="the new pods' series scraped", interval=2)
            at = datetime.now(timezone.utc)

            def read(labels=SERVICE_MONITOR) -> GpuEvidence:
                found = gpu_evidence(source, signal=GPU_UTIL, window=WINDOW, step=STEP, at=at, labels=labels,
                                     fallback=STEP)  # scraped every 15 s, as the backfill wrote
                assert found.failed is None
                return found

            by_uid, by_name = read(), read(replace(SERVICE_MONITOR, pod_uid=()))

        for name in NAMES:
            key = PodKey(namespace, name)
            series = {s.uid: s for s in by_uid.pods[key]}
            assert set(series) == {old[name], new[name].metadata.uid}, by_uid.pods[key]
            before, mine = series[old[name]], series[new[name].metadata.uid]
            assert before.gpu == mine.gpu and before.node == mine.node == NODE  # the same GPU, two pods
            assert before.samples >= 440 and 1 <= mine.samples <= 40, (before, mine)
            (merged,) = by_name.pods[key]  # by name alone: one series, the two pods' samples in it
            assert merged.uid == "" and merged.samples >= before.samples

        pod0, pod1 = _view(new["nb-0"]), _view(new["nb-1"])
        assert (at - pod0.started) > WINDOW  # old enough by its start time: only the UIDs tell the samples apart
        judged = judge_gpu(pod0, by_uid, TRIGGER, at)
        # The old pod's two idle hours fall inside a window the new pod (backdated) ran for the whole
        # of: samples of another UID there are no predecessor's to leave out, so nothing is idle.
        assert judged.state is m.State.UNKNOWN and judged.why.code is Code.UID_BESIDE, judged.why
        assert judge_gpu(pod0, by_name, TRIGGER, at).state is m.State.FIRES
        busy_before = judge_gpu(pod1, by_uid, TRIGGER, at)
        gpu = by_uid.pods[PodKey(namespace, "nb-1")][0].gpu  # old and new pod alike
        assert busy_before.state is m.State.UNKNOWN and busy_before.why.code is Code.UID_BESIDE
        assert busy_before.peaks == {gpu: 0.0}  # its own peak; the old pod's 80 is not its
        assert judge_gpu(pod1, by_name, TRIGGER, at).state is m.State.CLEAR
    finally:
        if server is not None:
            server.stop()

