"""Idle findings per workload, as one cycle's plan shows them.

Aspects covered:
- an idle Deployment pod is attributed to the Deployment, with the GPU-hours enforcing would
  reclaim (GPUs held x the window); in shadow mode nothing is marked, warned or acted on;
- one busy worker keeps a 4-pod Job; a pod with fewer GPU series than GPUs makes its workload unknown;
- a starting pod (Pending, not being deleted) makes its workload in use, on GPU and CPU: never
  marked, and an existing mark is removed;
- the first matching policy decides (load order), a policy that matches nothing finds nothing, and
  a workload is never judged on a subset of its pods;
- DaemonSet pods are never candidates; an unreadable owner makes the workload unknown (matched by
  its pod's controller kind, never marked, no reclaim);
- CPU idleness ignores a sidecar's request and usage: only evidence read without it counts;
- a finding's reason is data (`reason.code`, nested pod reasons) and `why` its sentence, the
  words written into `janitor/reason` when it is marked;
- reclaim totals per policy and namespace, idle known GPU workloads only.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest
from factories import NOW, SCRAPED, obj, scraped_every

from janitor import annotations as ann
from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    ContainerView,
    Finding,
    NamespaceView,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.plan import CyclePlan, plan
from janitor.decide.reasons import Code
from janitor.decide.triggers import registry
from janitor.decide.triggers.idle import reclaim_by
from janitor.policy.model import IdleCpu, IdleGpu, LabelSelector, Match, Mode, Namespaces, Policy

H = datetime.timedelta(hours=1)
SIGNAL = "DCGM_FI_DEV_GPU_UTIL"
STEP = datetime.timedelta(seconds=15)  # 480 samples in 2 h
IDLE_TRIGGERS = (TriggerKind.IDLE_GPU, TriggerKind.IDLE_CPU)


def pod(name: str, owner: ObjectView | None = None, *, gpus: int = 1, ns: str = "ml", phase: str = "Running",
        containers=(("main", 4.0),), labels: Mapping[str, str] | None = None, deleting: bool = False) -> PodView:
    return PodView(
        ref=ObjectRef("Pod", "v1", ns, name, str(uuid.uuid4())), resource_version="1", labels=dict(labels or {}),
        controller=OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid) if owner else None,
        node="gpu-node-1" if phase == "Running" else None, phase=phase,
        started=NOW - 5 * H if phase == "Running" else None, gpus=gpus,
        containers=tuple(ContainerView(n, c) for n, c in containers), deleting=deleting,
    )


def gpu_policy(name: str = "idle-gpu", include=("*",), *, window: datetime.timedelta = 2 * H,
               mode: Mode = Mode.SHADOW, kinds: tuple[str, ...] = (), **match) -> Policy:
    return Policy(name, (IdleGpu(window=window),),
                  match=Match(namespaces=Namespaces(include=include), kinds=kinds, **match), mode=mode)


def cpu_policy(name: str = "idle-cpu", *, mode: Mode = Mode.SHADOW, **trigger) -> Policy:
    if "cores" not in trigger:
        trigger.setdefault("fraction_of_request", 0.05)
    return Policy(name, (IdleCpu(**trigger),), mode=mode)


def idle(n: int = 1) -> tuple[GpuSeries, ...]:
    return tuple(GpuSeries(str(i), 0.0, 480) for i in range(n))


def busy(n: int = 1) -> tuple[GpuSeries, ...]:
    return tuple(GpuSeries(str(i), 88.0, 480) for i in range(n))


def gpu(series: Mapping[str, tuple[GpuSeries, ...]], *, window: datetime.timedelta = 2 * H,
        ns: str = "ml") -> dict:
    """GPU evidence for one (signal, window): series by pod name, or by "namespace/pod"."""
    scraped = scraped_every(window / 480)  # 480 samples fill the window
    keyed = {PodKey(*k.split("/")) if "/" in k else PodKey(ns, k): tuple(replace(s, quality=scraped) for s in v)
             for k, v in series.items()}
    return {(SIGNAL, window): GpuEvidence(EvidenceWindow(SIGNAL, window, window / 480, NOW), keyed)}


def cpu(usage: Mapping[str, CpuUsage], *, ignored: tuple[str, ...] = ()) -> dict:
    window = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)  # 120 points
    return {(2 * H, ignored): CpuEvidence(window, {PodKey("ml", k): replace(v, quality=SCRAPED)
                                                    for k, v in usage.items()})}


def cycle(pods: Sequence[PodView], objects: Sequence[ObjectView] = (), policies: Sequence[Policy] | None = None,
          gpu_ev: Mapping | None = None, cpu_ev: Mapping | None = None,
          namespaces: Sequence[str] = ("ml",)) -> CyclePlan:
    observation = Observation(NOW, tuple(objects), tuple(pods), {n: NamespaceView(n) for n in namespaces},
                              evidence=Evidence(dict(gpu_ev or {}), dict(cpu_ev or {})))
    return plan(observation, policies if policies is not None else [gpu_policy()], SafetyLedger(), NOW)


def idle_findings(decided: CyclePlan) -> list[Finding]:
    return [f for f in decided.findings if f.trigger in IDLE_TRIGGERS]


def marked(uid: str, policy: str) -> dict[str, str]:
    """A whole, unwarned mark of `policy` on the object with this uid."""
    return {ann.POLICY: policy, ann.MARKED_UID: uid, ann.MARKED_AT: ann.format_deadline(NOW - 3 * H),
            ann.DEADLINE: ann.format_deadline(NOW + 21 * H), ann.REASON: "idle"}


# -- attribution and reclaim ------------------------------------------------------------------------


def test_idle_deployment_pod_attributed_to_the_deployment_with_reclaim() -> None:
    deploy = obj("nb", kind="Deployment", namespace="ml")
    rs = obj("nb-1", kind="ReplicaSet", namespace="ml", owner=deploy)
    p = pod("nb-1-x", rs, gpus=2)
    decided = cycle([p], [deploy, rs], gpu_ev=gpu({"nb-1-x": idle(2)}))
    [finding] = decided.findings
    assert finding.trigger is TriggerKind.IDLE_GPU and finding.policy == "idle-gpu"
    assert finding.workload == deploy.ref and finding.subject == deploy.ref and finding.known
    assert finding.state is State.FIRES and registry.word(finding) == "idle" and not registry.in_use(finding)
    assert [j.pod for j in finding.pods] == [p.ref] and finding.pods[0].idle_gpus == ("0", "1")
    assert finding.gpus == 2 and finding.reclaim_gpu_hours == 4.0
    assert reclaim_by([finding]) == {("idle-gpu", "ml"): 4.0}
    assert finding.mode is Mode.SHADOW
    assert decided.actions == () and decided.changes == ()  # shadow: found and shown, nothing done


def test_one_busy_worker_keeps_the_job() -> None:
    job = obj("train", kind="Job", namespace="ml")
    workers = [pod(f"w{i}", job) for i in range(4)]
    series = {f"w{i}": idle() for i in range(4)} | {"w2": (GpuSeries("0", 88.0, 480),)}
    [finding] = idle_findings(cycle(workers, [job], gpu_ev=gpu(series)))
    assert finding.subject == job.ref and len(finding.pods) == 4
    assert finding.state is State.CLEAR and registry.word(finding) == "busy" and registry.in_use(finding)
    assert finding.reason.code is Code.PODS_IN_USE and "1 of 4 pods in use (w2" in finding.why
    assert finding.gpus == 4 and finding.reclaim_gpu_hours == 0


def test_fewer_gpu_series_than_gpus_makes_the_workload_unknown() -> None:
    short = pod("two", gpus=2)
    [unknown] = idle_findings(cycle([short], gpu_ev=gpu({"two": idle(1)})))
    assert unknown.state is State.UNKNOWN and registry.word(unknown) == "unknown"
    assert unknown.reason.code is Code.PODS_UNSURE and Code.SERIES_COUNT in unknown.reason.codes()
    assert "1 DCGM_FI_DEV_GPU_UTIL series for 2" in unknown.why
    assert unknown.reclaim_gpu_hours == 0


# -- a starting pod ---------------------------------------------------------------------------------

# signal -> (trigger, policy, idle evidence (GPU, CPU) for these pods)
TRIGGERS = {
    "gpu": (TriggerKind.IDLE_GPU, gpu_policy, lambda names: (gpu({n: idle() for n in names}), None)),
    "cpu": (TriggerKind.IDLE_CPU, cpu_policy, lambda names: (None, cpu({n: CpuUsage(0.01, 120) for n in names}))),
}


def rolling(starting: PodView | None = None) -> tuple[ObjectView, ObjectView, list[PodView]]:
    """A Deployment with one idle running pod (and a new one starting, if given)."""
    deploy = obj("nb", kind="Deployment", namespace="ml")
    rs = obj("nb-1", kind="ReplicaSet", namespace="ml", owner=deploy)
    pods = [pod("nb-1-a", rs)]
    if starting is not None:
        pods.append(replace(starting, controller=OwnerRef("ReplicaSet", "apps/v1", rs.ref.name, rs.ref.uid)))
    return deploy, rs, pods


@pytest.mark.parametrize("signal", TRIGGERS, ids=list(TRIGGERS))
def test_a_starting_pod_makes_the_workload_in_use(signal: str) -> None:
    trigger, policy, evidence = TRIGGERS[signal]
    deploy, rs, pods = rolling(pod("nb-1-b", phase="Pending"))
    [finding] = idle_findings(cycle(pods, [deploy, rs], [policy()], *evidence(["nb-1-a"])))
    assert finding.trigger is trigger and finding.subject == deploy.ref
    assert finding.state is State.CLEAR and registry.word(finding) == "busy" and registry.in_use(finding)
    assert finding.reason.code is Code.POD_STARTING and finding.reason.fact("pod") == "nb-1-b"
    assert finding.why == "pod nb-1-b is starting (Pending): in use again, or about to be"
    assert finding.reclaim_gpu_hours == 0


@pytest.mark.parametrize("signal", TRIGGERS, ids=list(TRIGGERS))
def test_a_pending_pod_being_deleted_is_not_starting(signal: str) -> None:
    _, policy, evidence = TRIGGERS[signal]
    deploy, rs, pods = rolling(pod("nb-1-b", phase="Pending", deleting=True))
    [finding] = idle_findings(cycle(pods, [deploy, rs], [policy()], *evidence(["nb-1-a"])))
    assert finding.state is State.FIRES and finding.reason.code is Code.ALL_IDLE


def test_a_starting_pod_keeps_an_enforcing_policy_from_marking_and_removes_its_mark() -> None:
    policy = gpu_policy(mode=Mode.ENFORCE)
    deploy, rs, pods = rolling()
    [mark] = [c for c in cycle(pods, [deploy, rs], [policy], gpu_ev=gpu({"nb-1-a": idle()}),
                               cpu_ev=cpu({"nb-1-a": CpuUsage(0.01, 120)})).changes
              if c.workload == deploy.ref]
    assert mark.step is Step.MARK  # idle without a starting pod: the same cluster is marked

    deploy, rs, pods = rolling(pod("nb-1-b", phase="Pending"))
    decided = cycle(pods, [deploy, rs], [policy], gpu_ev=gpu({"nb-1-a": idle()}))
    assert decided.changes == () and decided.actions == ()

    deploy = replace(deploy, annotations=marked(deploy.ref.uid, policy.name))
    decided = cycle(pods, [deploy, rs], [policy], gpu_ev=gpu({"nb-1-a": idle()}))
    [unmark] = decided.changes
    assert unmark.step is Step.UNMARK and unmark.workload == deploy.ref
    assert unmark.why.code is Code.IN_USE and Code.POD_STARTING in unmark.why.codes()
    assert decided.actions == ()


# -- which policy decides ---------------------------------------------------------------------------


def test_first_matching_policy_decides_and_inert_policies_find_nothing() -> None:
    p = pod("bare")
    policies = [gpu_policy("inert", include=()), gpu_policy("first"), gpu_policy("second")]
    [finding] = cycle([p], policies=policies, gpu_ev=gpu({"bare": idle()})).findings
    assert finding.policy == "first" and finding.workload == p.ref  # a bare pod is its own workload
    assert finding.state is State.FIRES
    assert cycle([p], policies=[gpu_policy("inert", include=())], gpu_ev=gpu({"bare": idle()})).findings == ()


def test_a_workload_is_never_judged_on_a_subset_of_its_pods() -> None:
    """The pod selector must hold for every pod: a policy selecting only some pods of a Job
    does not judge the Job on those pods alone; the next policy that selects them all does."""
    job = obj("train", kind="Job", namespace="ml")
    idle_worker = pod("w0", job, labels={"role": "worker"})
    busy_launcher = pod("w1", job, labels={"role": "launcher"})
    workers_only = gpu_policy("workers-only", pod_selector=LabelSelector(match_labels=(("role", "worker"),)))
    series = {"w0": idle(), "w1": busy()}
    [finding] = idle_findings(cycle([idle_worker, busy_launcher], [job], [workers_only, gpu_policy("all")],
                                    gpu_ev=gpu(series)))
    assert finding.policy == "all" and finding.state is State.CLEAR
    assert {j.pod.name for j in finding.pods} == {"w0", "w1"}


# -- what is never a candidate, and what cannot be known --------------------------------------------


def test_daemonset_pods_are_never_candidates() -> None:
    ds = obj("dcgm", kind="DaemonSet", namespace="ml")
    assert cycle([pod("dcgm-x", ds)], [ds], gpu_ev=gpu({"dcgm-x": idle()})).findings == ()


def test_an_unreadable_owner_makes_the_workload_unknown() -> None:
    ghost = obj("gone", kind="ReplicaSet", namespace="ml")  # owner not in the observation
    orphan = pod("orphan", ghost)
    policy = gpu_policy(mode=Mode.ENFORCE)
    decided = cycle([orphan], policies=[policy], gpu_ev=gpu({"orphan": idle()}))
    [finding] = decided.findings
    assert finding.workload is None and not finding.known and finding.subject == orphan.ref
    assert finding.state is State.UNKNOWN and finding.reclaim_gpu_hours == 0
    assert finding.reason.code is Code.WORKLOAD_UNKNOWN and Code.OWNER_UNREADABLE in finding.reason.codes()
    assert f"ReplicaSet/gone (uid {ghost.ref.uid}) cannot be read" in finding.why
    assert reclaim_by([finding]) == {}
    assert decided.changes == () and decided.actions == ()  # never marked, never acted on


@pytest.mark.parametrize(("kinds", "found"), [(("ReplicaSet",), True), (("Deployment",), False)],
                         ids=["its-controller-kind", "another-kind"])
def test_an_unknown_workload_is_matched_by_its_pods_controller_kind(kinds: tuple[str, ...], found: bool) -> None:
    ghost = obj("gone", kind="ReplicaSet", namespace="ml")
    decided = cycle([pod("orphan", ghost)], policies=[gpu_policy(kinds=kinds)], gpu_ev=gpu({"orphan": idle()}))
    assert [f.state for f in decided.findings] == ([State.UNKNOWN] if found else [])


# -- CPU and sidecars -------------------------------------------------------------------------------

SIDECAR = ("istio-proxy",)


@pytest.mark.parametrize(
    ("peak", "state"),
    [(0.04, State.FIRES), (0.06, State.CLEAR)],
    ids=["under-5pct-of-the-app", "over-5pct-of-the-app-under-5pct-with-the-sidecar"],
)
def test_cpu_fraction_ignores_the_sidecar(peak: float, state: State) -> None:
    policy = cpu_policy(fraction_of_request=0.05, ignore_containers=SIDECAR)
    web = pod("web", gpus=0, containers=(("app", 1.0), ("istio-proxy", 8.0)))
    [finding] = cycle([web], policies=[policy], cpu_ev=cpu({"web": CpuUsage(peak, 120)}, ignored=SIDECAR)).findings
    assert finding.trigger is TriggerKind.IDLE_CPU and finding.state is state
    assert "0.05 of its 1-core request" in finding.why
    assert finding.reclaim_gpu_hours == 0


def test_cpu_usage_read_with_the_sidecar_is_not_judged() -> None:
    policy = cpu_policy(fraction_of_request=0.05, ignore_containers=SIDECAR)
    web = pod("web", gpus=0, containers=(("app", 1.0), ("istio-proxy", 8.0)))
    [finding] = cycle([web], policies=[policy], cpu_ev=cpu({"web": CpuUsage(0.01, 120)})).findings
    assert finding.state is State.UNKNOWN and Code.NO_EVIDENCE_READ in finding.reason.codes()


# -- reasons as data --------------------------------------------------------------------------------


def test_a_findings_reason_is_data_and_its_why_the_sentence() -> None:
    deploy = obj("nb", kind="Deployment", namespace="ml")
    p = pod("nb-x", deploy, gpus=2)
    [finding] = cycle([p], [deploy], gpu_ev=gpu({"nb-x": idle(2)})).findings
    assert finding.reason.code is Code.ALL_IDLE and finding.reason.fact("total") == 1
    assert finding.reason.codes() == {Code.ALL_IDLE, Code.POD, Code.GPU_IDLE}
    assert finding.pods[0].why.code is Code.GPU_IDLE
    assert isinstance(finding.why, str) and finding.why == str(finding.reason)
    assert finding.why == ("all 1 pods idle (nb-x: idle: GPU 0 peak 0, GPU 1 peak 0 "
                           "(DCGM_FI_DEV_GPU_UTIL <= 5 over 2 h))")


def test_the_sentence_is_what_a_mark_records() -> None:
    deploy = obj("nb", kind="Deployment", namespace="ml")
    decided = cycle([pod("nb-x", deploy)], [deploy], [gpu_policy(mode=Mode.ENFORCE)], gpu_ev=gpu({"nb-x": idle()}),
                    cpu_ev=cpu({"nb-x": CpuUsage(0.01, 120)}))
    [finding] = [f for f in decided.findings if f.trigger is TriggerKind.IDLE_GPU]
    [mark] = decided.changes
    assert mark.step is Step.MARK and mark.annotations[ann.REASON] == finding.why


# -- reclaim totals ---------------------------------------------------------------------------------


def test_reclaim_totals_per_policy_and_namespace() -> None:
    """GPUs x window of every idle known GPU workload; busy, unknown and CPU-only ones add nothing."""
    ml_a, ml_b = obj("a", kind="Job", namespace="ml"), obj("b", kind="Job", namespace="ml")
    ml_busy, vision = obj("c", kind="Job", namespace="ml"), obj("v", kind="Job", namespace="vision")
    ghost = obj("gone", kind="ReplicaSet", namespace="ml")
    pods = [pod("a-0", ml_a, gpus=2), pod("b-0", ml_b), pod("c-0", ml_busy, gpus=4),
            pod("v-0", vision, gpus=3, ns="vision"), pod("orphan", ghost, gpus=8), pod("web", gpus=0)]
    policies = [gpu_policy("long", include=("vision",), window=4 * H), gpu_policy("short", include=("ml",)),
                cpu_policy(cores=0.05)]
    gpu_ev = gpu({"a-0": idle(2), "b-0": idle(), "c-0": busy(4), "orphan": idle(8)}) | gpu(
        {"vision/v-0": idle(3)}, window=4 * H)
    decided = cycle(pods, [ml_a, ml_b, ml_busy, vision], policies, gpu_ev=gpu_ev,
                    cpu_ev=cpu({"web": CpuUsage(0.01, 120)}), namespaces=("ml", "vision"))
    states = {(f.trigger, f.subject.name): f.state for f in decided.findings}
    assert states[(TriggerKind.IDLE_CPU, "web")] is State.FIRES
    assert states[(TriggerKind.IDLE_GPU, "orphan")] is State.UNKNOWN
    assert reclaim_by(decided.findings) == {("short", "ml"): 2 * 2.0 + 1 * 2.0, ("long", "vision"): 3 * 4.0}
