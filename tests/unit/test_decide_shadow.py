"""Idle findings per workload in shadow mode.

Aspects covered:
- an idle Deployment pod is attributed to the Deployment, with the GPU-hours enforcing would
  reclaim (GPUs held x the window);
- one busy worker keeps a 4-pod Job; a pod with fewer GPU series than GPUs makes its workload unknown;
- the first matching policy decides (load order), a policy that matches nothing finds nothing;
- DaemonSet pods are never candidates; an unreadable owner makes the workload unknown;
- CPU idleness ignores a busy sidecar's request when comparing against a fraction of the request;
- reclaim totals per policy and namespace.
"""

from __future__ import annotations

import datetime
import uuid

from factories import NOW, obj

from janitor.decide.evidence import CpuEvidence, CpuUsage, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.idle import Idleness
from janitor.decide.model import ContainerView, NamespaceView, ObjectRef, OwnerRef, PodView
from janitor.decide.shadow import idle_findings, reclaim_by
from janitor.policy.model import IdleCpu, IdleGpu, Match, Namespaces, Policy

H = datetime.timedelta(hours=1)
GPU_WINDOW = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, datetime.timedelta(seconds=15), NOW)
CPU_WINDOW = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)


def pod(name: str, owner=None, gpus: int = 1, ns: str = "ml", containers=(("main", 4.0),)) -> PodView:
    return PodView(
        ref=ObjectRef("Pod", "v1", ns, name, str(uuid.uuid4())), resource_version="1", labels={},
        controller=OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid) if owner else None,
        node="gpu-node-1", phase="Running", started=NOW - 3 * H, gpus=gpus,
        containers=tuple(ContainerView(n, c) for n, c in containers),
    )


def gpu_policy(name: str = "idle-gpu", include=("*",)) -> Policy:
    return Policy(name, (IdleGpu(),), match=Match(namespaces=Namespaces(include=include)))


def gpu(**pods_series) -> dict:
    return {("DCGM_FI_DEV_GPU_UTIL", 2 * H): GpuEvidence(GPU_WINDOW, {PodKey("ml", k): v for k, v in pods_series.items()})}


def idle(n: int = 1):
    return tuple(GpuSeries(str(i), 0.0, 480) for i in range(n))


def run(pods, objects=(), policies=None, gpu_ev=None, cpu_ev=None):
    return idle_findings(pods, {"ml": NamespaceView("ml")}, {o.ref.uid: o for o in objects},
                         policies or [gpu_policy()], gpu_ev or {}, cpu_ev or {}, NOW)


def test_idle_deployment_pod_attributed_to_the_deployment_with_reclaim() -> None:
    deploy = obj("nb", kind="Deployment", namespace="ml")
    rs = obj("nb-1", kind="ReplicaSet", namespace="ml", owner=deploy)
    p = pod("nb-1-x", rs, gpus=2)
    [finding] = run([p], [deploy, rs], gpu_ev=gpu(**{"nb-1-x": idle(2)}))
    assert finding.workload == deploy.ref and finding.idleness is Idleness.IDLE
    assert finding.gpus_held == 2 and finding.reclaim_gpu_hours == 4.0
    assert reclaim_by([finding]) == {("idle-gpu", "ml"): 4.0}


def test_one_busy_worker_keeps_the_job_and_missing_series_is_unknown() -> None:
    job = obj("train", kind="Job", namespace="ml")
    workers = [pod(f"w{i}", job) for i in range(4)]
    series = {f"w{i}": idle() for i in range(4)}
    series["w2"] = (GpuSeries("0", 88.0, 480),)
    [finding] = run(workers, [job], gpu_ev=gpu(**series))
    assert finding.idleness is Idleness.BUSY and "1 of 4 pods in use (w2" in finding.why
    assert finding.reclaim_gpu_hours == 0

    short = pod("two", gpus=2)
    [unknown] = run([short], gpu_ev=gpu(two=idle(1)))
    assert unknown.idleness is Idleness.UNKNOWN and "1 DCGM_FI_DEV_GPU_UTIL series for 2" in unknown.why


def test_first_matching_policy_decides_and_inert_policies_find_nothing() -> None:
    p = pod("bare")
    policies = [gpu_policy("inert", include=()), gpu_policy("first"), gpu_policy("second")]
    [finding] = run([p], policies=policies, gpu_ev=gpu(bare=idle()))
    assert finding.policy == "first" and finding.workload == p.ref  # a bare pod is its own workload
    assert run([p], policies=[gpu_policy("inert", include=())], gpu_ev=gpu(bare=idle())) == []


def test_daemonset_pods_skipped_and_unreadable_owner_unknown() -> None:
    ds = obj("dcgm", kind="DaemonSet", namespace="ml")
    assert run([pod("dcgm-x", ds)], [ds], gpu_ev=gpu(**{"dcgm-x": idle()})) == []
    ghost = obj("gone", kind="ReplicaSet", namespace="ml")
    [finding] = run([pod("orphan", ghost)], gpu_ev=gpu(orphan=idle()))  # owner not in the snapshot
    assert finding.workload is None and finding.idleness is Idleness.UNKNOWN and finding.reclaim_gpu_hours == 0


def test_cpu_fraction_ignores_the_sidecar() -> None:
    policy = Policy("idle-cpu", (IdleCpu(fraction_of_request=0.05, ignore_containers=("istio-proxy",)),))
    p = pod("web", gpus=0, containers=(("app", 1.0), ("istio-proxy", 8.0)))
    cpu_ev = {(2 * H, ("istio-proxy",)): CpuEvidence(CPU_WINDOW, {PodKey("ml", "web"): CpuUsage(0.04, 120)})}
    [finding] = run([p], policies=[policy], cpu_ev=cpu_ev)
    assert finding.trigger == "idleCpu" and finding.idleness is Idleness.IDLE  # 0.04 <= 0.05 x 1 core


def test_a_workload_is_never_judged_on_a_subset_of_its_pods() -> None:
    """The pod selector must hold for every pod: a policy selecting only some pods of a Job
    does not judge the Job on those pods alone; the next policy that selects them all does."""
    from dataclasses import replace as copy

    from janitor.policy.model import LabelSelector

    job = obj("train", kind="Job", namespace="ml")
    idle_worker = copy(pod("w0", job), labels={"role": "worker"})
    busy_launcher = copy(pod("w1", job), labels={"role": "launcher"})
    workers_only = Policy("workers-only", (IdleGpu(),),
                          match=Match(pod_selector=LabelSelector(match_labels=(("role", "worker"),))))
    series = {"w0": idle(), "w1": (GpuSeries("0", 70.0, 480),)}
    [finding] = run([idle_worker, busy_launcher], [job], policies=[workers_only, gpu_policy("all")], gpu_ev=gpu(**series))
    assert finding.policy == "all" and finding.idleness is Idleness.BUSY
