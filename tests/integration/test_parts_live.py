"""A whole read in parts (janitor.observe.parts) against a real Prometheus that refuses big queries.

Three namespaces of GPU pods (and one CPU pod with a sidecar) are created backdated 3 h, their
past backfilled for 2 h, and the history Prometheus started with `--query.max-samples` set to
the janitor's own budget (`--prometheus-query-samples`): the largest of the namespaces' estimates.
Every test runs on Prometheus 2.x and 3.x (`prom2`, `prom3`).

Covered:
- asked as one query (budget 0), the whole read loads more than Prometheus allows: it refuses,
  and the evidence says it failed (nothing can be judged idle on it);
- asked in parts (the budget), a GPU query per namespace and one CPU query: Prometheus answers each,
  its own `peakSamples` of each is within the part's estimate (so within the budget), and each
  pod's evidence is what its history says (the busy peak; idle zeros over the whole window; the
  CPU pod's app peak without its sidecar).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind, Segment
from devenv.history import prometheus_with_history
from devenv.nodes import STARTED_AT
from devenv.procs import wait_until
from devenv.prometheus_release import Release
from janitor.decide import model as m
from janitor.decide.evidence import Evidence, PodKey
from janitor.observe import observation
from janitor.observe.observation import CPU_STEP
from janitor.observe.parts import Cost, cpu_load, gpu_load
from janitor.observe.prometheus import SERVICE_MONITOR, PrometheusConfig, PrometheusSource
from janitor.policy.model import IdleCpu, IdleGpu, Match, Policy
from janitor.settings import PrometheusSettings, Settings

WINDOW = timedelta(hours=2)
STEP = timedelta(seconds=15)
GPU_KEY = ("DCGM_FI_DEV_GPU_UTIL", WINDOW)
CPU_KEY = (WINDOW, ("istio-proxy",))
POLICY = Policy("idle", (IdleGpu(threshold=5.0, window=WINDOW), IdleCpu(cores=0.5, window=WINDOW,
                                                                           ignore_containers=("istio-proxy",))),
                match=Match())
# namespace suffix -> pods: (name, GPUs, containers)
LAYOUT = {"a": [("busy", 1, ("trainer",)), ("idle", 1, ("trainer",))],
          "b": [("two", 2, ("trainer",))],
          "c": [("one", 1, ("trainer",)), ("cpu", 0, ("app", "istio-proxy"))]}


@dataclass(frozen=True)
class Setup:
    url: str
    namespaces: list[str]
    covered: list[m.PodView]
    budget: int
    at: datetime


GPU_COST, CPU_COST = Cost.of(WINDOW, STEP, STEP), Cost.of(WINDOW, CPU_STEP, STEP)  # 15 s scrapes


def _estimate(pods: list[m.PodView], namespaces: list[str], kind: str) -> int:
    """A query's estimate, as the janitor counts it."""
    mine = [p for p in pods if p.ref.namespace in namespaces]
    if kind == "gpu":
        return GPU_COST.of_series(sum(gpu_load(p) for p in mine))
    return CPU_COST.of_series(sum(cpu_load(p) for p in mine))


@pytest.fixture(scope="module")
def setup(sandbox, kube: client.ApiClient, core: client.CoreV1Api, prometheus_release: Release) -> Iterator[Setup]:
    run = uuid.uuid4().hex[:6]
    namespaces = {suffix: f"parts-{suffix}-{run}" for suffix in LAYOUT}
    values = ValuesControl(sandbox.exporters_url)
    server = None
    now = time.time()
    started = datetime.fromtimestamp(now - 3 * 3600, tz=timezone.utc)
    covered: list[m.PodView] = []
    try:
        for suffix, pods in LAYOUT.items():
            ns = namespaces[suffix]
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
            wait_until(lambda ns=ns: any(sa.metadata.name == "default"
                                         for sa in core.list_namespaced_service_account(ns).items),
                       timeout=30, what="default ServiceAccount")
            for name, gpus, containers in pods:
                core.create_namespaced_pod(ns, client.V1Pod(
                    metadata=client.V1ObjectMeta(name=name, annotations={
                        STARTED_AT: started.strftime("%Y-%m-%dT%H:%M:%SZ")}),
                    spec=client.V1PodSpec(containers=[client.V1Container(
                        name=c, image="registry.example/train:1", resources=client.V1ResourceRequirements(
                            requests={"cpu": "1"}, limits={"nvidia.com/gpu": str(gpus)} if gpus and i == 0 else None))
                        for i, c in enumerate(containers)])))
                covered.append(m.PodView(m.ObjectRef("Pod", "v1", ns, name, f"uid-{name}"), "1", {}, None, "node",
                                         "Running", started, gpus,
                                         tuple(m.ContainerView(c, 1.0) for c in containers), created=started))
        for suffix, pods in LAYOUT.items():
            ns = namespaces[suffix]
            wait_until(lambda ns=ns, pods=pods: {p.metadata.name for p in core.list_namespaced_pod(ns).items
                                                 if p.status.phase == "Running"} == {n for n, *_ in pods},
                       timeout=60, what=f"the pods of {ns} Running")
            for name, gpus, _ in pods:
                if gpus:
                    values.add_history(Kind.GPU_UTIL, (ns, name, None), [Segment(now - 3 * 3600, now + 3600, 0)])
        values.add_history(Kind.GPU_UTIL, (namespaces["a"], "busy", None), [Segment(now - 5400, now - 3600, 80)])
        values.add_history(Kind.CPU, (namespaces["c"], "cpu", "app"), [Segment(now - 5400, now - 3600, 0.3)])
        values.add_history(Kind.CPU, (namespaces["c"], "cpu", "istio-proxy"), [Segment(now - 3 * 3600, now + 3600,
                                                                                       2.0)])
        budget = max(_estimate(covered, [ns], kind) for ns in namespaces.values() for kind in ("gpu", "cpu"))
        at = datetime.now(timezone.utc)
        server, report = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir,
                                                 release=prometheus_release,
                                                 flags=[f"--query.max-samples={budget}"])
        assert report.samples > 0
        yield Setup(server.url, sorted(namespaces.values()), covered, budget, at)
    finally:
        if server is not None:
            server.stop()
        values.reset()
        for ns in namespaces.values():
            try:
                core.delete_namespace(ns)
            except client.ApiException:
                pass


def _read(setup: Setup, budget: int) -> tuple[Evidence, PrometheusSource]:
    settings = Settings(prometheus=PrometheusSettings(url=setup.url, query_samples=budget))
    source = PrometheusSource(PrometheusConfig(url=setup.url, label_map=SERVICE_MONITOR, connect_timeout=2,
                                               read_timeout=30), query_stats=True)
    found = observation.read_evidence(source, settings, observation.needs([POLICY]), setup.at,
                                      namespaces=setup.namespaces, covered=setup.covered)
    return found, source


def test_one_query_for_the_whole_read_is_refused(setup: Setup) -> None:
    found, source = _read(setup, 0)
    gpu = found.gpu[GPU_KEY]
    assert gpu.failed is not None and "too many samples" in gpu.failed, gpu.failed
    assert dict(gpu.pods) == {}
    assert len([s for s in source.stats if s.api == "query"]) == 2  # one GPU query, one CPU query


def test_in_parts_every_query_stays_within_the_budget_and_each_pod_reads_its_history(setup: Setup) -> None:
    found, source = _read(setup, setup.budget)
    gpu, cpu = found.gpu[GPU_KEY], found.cpu[CPU_KEY]
    assert gpu.failed is None and cpu.failed is None, (gpu.failed, cpu.failed)
    a, b, c = setup.namespaces
    # The budget is a GPU query of 2 GPUs (a's, b's): each namespace's GPUs alone; the 5 pods' CPU together.
    parts = [("gpu", [a]), ("gpu", [b]), ("gpu", [c]), ("cpu", [a, b, c])]
    queries = [s for s in source.stats if s.api == "query"]
    assert len(queries) == len(parts)
    for stat, (kind, names) in zip(queries, parts, strict=True):
        estimate = _estimate(setup.covered, names, kind)
        assert stat.ok and stat.peak_samples is not None
        assert stat.peak_samples <= estimate <= setup.budget, (kind, names, stat.peak_samples, estimate)
    # A GPU busy above the policy's threshold comes with its peak alone (`_busy_first`).
    assert [s.peak for s in gpu.pods[PodKey(a, "busy")]] == [80.0]
    idle = gpu.pods[PodKey(a, "idle")]
    assert [s.peak for s in idle] == [0.0] and 470 <= idle[0].samples <= 482
    assert sorted(s.peak for s in gpu.pods[PodKey(b, "two")]) == [0.0, 0.0]
    assert [s.peak for s in gpu.pods[PodKey(c, "one")]] == [0.0]
    app = cpu.pods[PodKey(c, "cpu")]
    assert app.peak_cores == pytest.approx(0.3, abs=0.02)
    assert {k.namespace for k in gpu.pods} == {a, b, c}
