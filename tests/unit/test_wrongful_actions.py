"""Actions the janitor must never take, each found by trying it as a careful admin would.

Each test builds one small cluster, runs one cycle's decision on it and checks what a user would
see: which objects are marked, warned, deleted or reclaimed, and under which policy.

Aspects covered:
- busy on one policy's signal beats idle on another's (an idle-CPU policy never reclaims a busy GPU);
- an owner's keep-until never moves a deadline earlier than the one they were warned of;
- a Deployment's janitor/ttl or janitor/expires copied onto its ReplicaSet is never acted on;
- a restored or re-applied object's predecessor mark and warning are never acted on;
- removing only janitor/policy never turns the janitor's deadline into a user expiry;
- a policy whose action changed since the warning needs a new warning before acting;
- the audit line names the policy that decided the action.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pytest
from factories import NOW, SCRAPED, ago

from janitor import annotations as a
from janitor.decide.model import ContainerView, NamespaceView, ObjectRef, ObjectView, OwnerRef, PodView
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import IdleCpu, IdleGpu, Lifecycle, Mode, Policy

H = datetime.timedelta(hours=1)
NS = "ml"


def t(when: datetime.datetime) -> str:
    return a.format_expires(when)


def view(name: str, kind: str, *, notes: Mapping[str, str] | None = None, owner: ObjectView | None = None,
         created: datetime.datetime | None = None, uid: str | None = None) -> ObjectView:
    api_version = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1",
                   "Job": "batch/v1"}.get(kind, "v1")
    return ObjectView(
        ObjectRef(kind, api_version, NS, name, uid or str(uuid.uuid4())), "7", created or ago(hours=5),
        annotations=dict(notes or {}),
        controller=OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid) if owner else None,
        replicas=1 if kind in ("Deployment", "StatefulSet") else None,
    )


def gpu_pod(name: str, owner: ObjectView, *, gpus: int = 1, cpu_request: float = 32.0) -> PodView:
    return PodView(
        ObjectRef("Pod", "v1", NS, name, str(uuid.uuid4())), "1", {},
        OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid),
        node="gpu-node-1", phase="Running", started=NOW - 5 * H, gpus=gpus,
        containers=(ContainerView("main", cpu_request),),
    )


def gpu_policy(name: str = "idle-gpu", **lifecycle: object) -> Policy:
    return Policy(name, (IdleGpu(window=2 * H),), mode=Mode.ENFORCE, lifecycle=Lifecycle(**lifecycle))


def cpu_policy(name: str = "idle-cpu", **lifecycle: object) -> Policy:
    return Policy(name, (IdleCpu(fraction_of_request=0.1, window=2 * H),), mode=Mode.ENFORCE,
                  lifecycle=Lifecycle(**lifecycle))


@dataclass(frozen=True)
class Usage:
    gpu_peak: float | None = None  # percent, per GPU of each pod
    cpu_peak_cores: float | None = None
    gpu_uid: str = ""  # the pod UID label on the GPU series ("": none; "own": each pod's own)
    gpu_split: bool = False  # GPU 0 also has a second, idle series (another host label: an exporter restart)
    gpu_failed: bool = False  # every GPU query failed (a timeout)
    gpu_peaks: tuple[tuple[str, float | None], ...] = ()  # (pod name, peak): that pod's own; None: no series


@dataclass(frozen=True)
class Decided:
    """What one cycle decided, as a user sees it: writes and actions by object name."""

    marked: frozenset[str]
    warned: frozenset[str]  # a warning (not a reminder) goes out
    unmarked: frozenset[str]  # mark records removed
    acted: Mapping[str, tuple[str, str]]  # name -> (action type, policy)
    deleted: frozenset[str]  # by the plain TTL/expiry path
    deadlines: Mapping[str, str]  # name -> janitor/expires as written this cycle
    actions: tuple[object, ...] = ()  # the planned actions themselves


def decide(objects: Sequence[ObjectView], pods: Sequence[PodView], policies: Sequence[Policy],
           usage: Usage = Usage(), now: datetime.datetime = NOW, claims: object = None) -> Decided:
    """One cycle's decision on this cluster, through the janitor's public deciding API."""
    from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
    from janitor.decide.lifecycle import Step
    from janitor.decide.model import ActionType, Observation, SafetyLedger
    from janitor.decide.plan import PlanSettings, plan
    from janitor.decide.rails import Caps, Rails

    step = datetime.timedelta(seconds=15)
    gpu, cpu = {}, {}
    # What Prometheus answers for any query over an idle policy's window: every GPU signal and the CPU.
    own = dict(usage.gpu_peaks)
    windows = {t.window for p in policies for t in (p.trigger(IdleGpu), p.trigger(IdleCpu)) if t is not None}
    for window in windows:
        for signal in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
            scale = 1 if signal.endswith("UTIL") else 100  # a PROF field is a ratio
            peaks = {pod.ref.name: None if (at := own.get(pod.ref.name, usage.gpu_peak)) is None else at / scale
                     for pod in pods}
            series = {PodKey(NS, pod.ref.name): tuple(GpuSeries(str(i), peaks[pod.ref.name], 480, quality=SCRAPED, uid=(
                pod.ref.uid if usage.gpu_uid == "own" else usage.gpu_uid)) for i in range(max(pod.gpus, 1))) + (
                (GpuSeries("0", 0.0, 480, "gpu-node-1b", quality=SCRAPED),) if usage.gpu_split else ())
                      for pod in pods if peaks[pod.ref.name] is not None}  # dcgm-exporter maps a GPU to its pod
            gpu[(signal, window)] = GpuEvidence(EvidenceWindow(signal, window, step, now), series,
                                                failed="query timed out" if usage.gpu_failed else None)
        usages = {PodKey(NS, pod.ref.name): CpuUsage(usage.cpu_peak_cores, 120, quality=SCRAPED)
                  for pod in pods} if usage.cpu_peak_cores is not None else {}
        for ignored in {tuple(sorted(c.ignore_containers)) for p in policies if (c := p.trigger(IdleCpu))} | {()}:
            cpu[(window, ignored)] = CpuEvidence(EvidenceWindow("cpu", window, datetime.timedelta(minutes=1), now),
                                                 usages)
    observation = Observation(now, tuple(objects), tuple(pods), {NS: NamespaceView(NS)},
                              evidence=Evidence(gpu, cpu), claims=claims)  # type: ignore[arg-type]
    decided = plan(observation, policies, SafetyLedger(), now,
                   settings=PlanSettings(rails=Rails(caps=Caps(1000, 1000, 1000, 1000))))
    names = {o.ref.uid: o.ref.name for o in objects}
    changes = decided.changes
    return Decided(
        marked=frozenset(c.workload.name for c in changes if c.step is Step.MARK),
        warned=frozenset(c.workload.name for c in changes
                         if c.notice is not None and str(c.notice.kind) == "warning" and c.step is not Step.RECOVER),
        unmarked=frozenset(c.workload.name for c in changes
                           if c.annotations and a.POLICY in c.annotations and c.annotations[a.POLICY] is None),
        acted={names[x.target.uid]: (str(x.type), x.policy) for x in decided.actions if x.rule == "lifecycle"},
        deleted=frozenset(names[x.target.uid] for x in decided.actions
                          if x.type is ActionType.DELETE and x.rule != "lifecycle"),
        deadlines={c.workload.name: str(c.annotations[a.DEADLINE]) for c in changes
                   if c.annotations.get(a.DEADLINE) is not None},
        actions=tuple(decided.actions),
    )


def mark(target: ObjectView | str, *, policy: str, marked_at: datetime.datetime, deadline: datetime.datetime,
         warned_at: datetime.datetime | None, action: str = "delete",
         warned_deadline: datetime.datetime | None = None) -> dict[str, str]:
    """The annotations the janitor writes when it marks `target` and its warning is delivered."""
    uid = target if isinstance(target, str) else target.ref.uid
    notes = {a.POLICY: policy, a.DEADLINE: t(deadline), a.MARKED_AT: t(marked_at), a.REASON: "idle",
             a.MARKED_UID: uid}
    if warned_at is not None:
        notes |= {a.WARNED_AT: t(warned_at), a.WARNED_VIA: f"owner D0ALICE/{warned_at.timestamp():.6f}",
                  a.WARNED_OF: f"{action} {t(warned_deadline or deadline)}"}
    return notes


def with_notes(target: ObjectView, notes: Mapping[str, str]) -> ObjectView:
    return ObjectView(target.ref, target.resource_version, target.created, dict(notes), target.labels,
                      target.deleting, target.controller, target.template_annotations, target.replicas)


# -- busy beats idle ---------------------------------------------------------------------------------

def test_a_busy_gpu_is_never_reclaimed_by_an_idle_cpu_policy() -> None:
    """97 % GPU, 1.2 of 32 cores: the CPU policy would find it idle; the GPU finding vetoes."""
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts)]
    decided = decide([sts], pods, [gpu_policy(), cpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=1.2))
    assert decided.marked == frozenset() and decided.acted == {}

    # The order of the policies does not matter.
    decided = decide([sts], pods, [cpu_policy(), gpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=1.2))
    assert decided.marked == frozenset() and decided.acted == {}


def test_a_busy_gpu_cancels_the_idle_cpu_policys_due_mark() -> None:
    sts = view("trainer", "StatefulSet")
    sts = with_notes(sts, mark(sts, policy="idle-cpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    decided = decide([sts], [gpu_pod("trainer-0", sts)], [gpu_policy(), cpu_policy()],
                     Usage(gpu_peak=97.0, cpu_peak_cores=1.2))
    assert decided.acted == {}
    assert decided.unmarked == {"trainer"}


# In use is a fact about the workload, whichever policies match it: the GPU is read for a GPU pod
# under an idle-CPU policy even when no idle-GPU policy governs it.

def test_a_busy_gpu_is_never_reclaimed_by_an_idle_cpu_policy_when_no_gpu_policy_exists() -> None:
    sts = view("trainer", "StatefulSet")
    decided = decide([sts], [gpu_pod("trainer-0", sts)], [cpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=1.2))
    assert decided.marked == frozenset() and decided.acted == {}


@pytest.mark.parametrize("miss", ["podSelector", "namespaces", "kinds"])
def test_a_busy_gpu_is_never_reclaimed_by_an_idle_cpu_policy_when_the_gpu_policy_misses(miss: str) -> None:
    """The idle-GPU policy exists but does not govern this workload: its selector misses."""
    from janitor.policy.model import LabelSelector, Match, Namespaces

    missing = {
        "podSelector": Match(pod_selector=LabelSelector((("app", "jupyter"),))),
        "namespaces": Match(namespaces=Namespaces(("team-*",))),
        "kinds": Match(kinds=("Notebook",)),
    }[miss]
    gpu = Policy("idle-gpu", (IdleGpu(window=2 * H),), mode=Mode.ENFORCE, match=missing)
    sts = view("trainer", "StatefulSet")
    decided = decide([sts], [gpu_pod("trainer-0", sts)], [gpu, cpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=1.2))
    assert decided.marked == frozenset() and decided.acted == {}


def test_a_busy_gpu_cancels_a_due_idle_cpu_mark_when_no_gpu_policy_exists() -> None:
    sts = view("trainer", "StatefulSet")
    sts = with_notes(sts, mark(sts, policy="idle-cpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    decided = decide([sts], [gpu_pod("trainer-0", sts)], [cpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=1.2))
    assert decided.acted == {}
    assert decided.unmarked == {"trainer"}


def test_a_gpu_pod_without_gpu_evidence_is_not_reclaimed_by_an_idle_cpu_policy() -> None:
    """No GPU series at all (dcgm-exporter down on its node): unknown, never idle."""
    sts = view("trainer", "StatefulSet")
    decided = decide([sts], [gpu_pod("trainer-0", sts)], [cpu_policy()], Usage(gpu_peak=None, cpu_peak_cores=1.2))
    assert decided.marked == frozenset() and decided.acted == {}
    sts = with_notes(sts, mark(sts, policy="idle-cpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    decided = decide([sts], [gpu_pod("trainer-0", sts)], [cpu_policy()], Usage(gpu_peak=None, cpu_peak_cores=1.2))
    assert decided.acted == {} and decided.unmarked == frozenset()


def test_a_pod_holding_a_gpu_through_a_claim_is_not_reclaimed_by_an_idle_cpu_policy_when_the_gpu_read_fails(
) -> None:
    """A pod that requests no nvidia.com/gpu but names a DRA ResourceClaim holds the GPUs dcgm-exporter
    maps to it, seen only on the GPU read: where that read failed, its GPU is unknown, never idle
    (its CPU idle would reclaim a GPU at 97 %)."""
    sts = view("trainer", "StatefulSet")
    pod = replace(gpu_pod("trainer-0", sts, gpus=0), resource_claims=("trainer-0-gpu",))
    assert decide([sts], [pod], [cpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=0.01)).marked == frozenset()
    failed = Usage(gpu_peak=97.0, cpu_peak_cores=0.01, gpu_failed=True)
    assert decide([sts], [pod], [cpu_policy()], failed).marked == frozenset()
    due = with_notes(sts, mark(sts, policy="idle-cpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    decided = decide([due], [pod], [cpu_policy()], failed)
    assert decided.acted == {} and decided.unmarked == frozenset()
    # A pod naming no claim and holding no GPU is judged on its CPU as before.
    plain = gpu_pod("trainer-0", sts, gpus=0)
    assert decide([sts], [plain], [cpu_policy()], failed).marked == frozenset({"trainer"})


def test_a_pod_holding_a_gpu_through_a_claim_without_gpu_series_is_not_reclaimed_by_an_idle_cpu_policy() -> None:
    """The read answered, without a series under its name (its node's exporter down), and its claim
    holds a device of a GPU driver: its GPU is unknown, as a requested GPU's would be. A claim of
    another driver (a NIC's) holds no GPU: judged on its CPU. Where the claims are not known (not
    read, or their read failed), the claim may hold a GPU: unknown too."""
    from janitor.decide.claims import Claim, ClaimRef, ClaimsRead, Device

    def claimed(driver: str) -> ClaimsRead:
        return ClaimsRead((Claim(ClaimRef(NS, "trainer-0-dev", "uid-c"), "1", "resource.k8s.io/v1", NOW - 5 * H, True,
                                 devices=(Device("dev", driver, "pool", "d0"),)),), "v1")

    sts = view("trainer", "StatefulSet")
    pod = replace(gpu_pod("trainer-0", sts, gpus=0), resource_claims=("trainer-0-dev",))
    silent = Usage(gpu_peak=None, cpu_peak_cores=0.01)
    gpu = claimed("gpu.nvidia.com")
    assert decide([sts], [pod], [cpu_policy()], silent, claims=gpu).marked == frozenset()
    due = with_notes(sts, mark(sts, policy="idle-cpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    assert decide([due], [pod], [cpu_policy()], silent, claims=gpu).acted == {}
    assert decide([sts], [pod], [cpu_policy()], silent, claims=claimed("dra.net")).marked == frozenset({"trainer"})
    assert decide([sts], [pod], [cpu_policy()], silent).marked == frozenset()
    unreadable = ClaimsRead(problem="ResourceClaims could not be listed (403 Forbidden)")
    assert decide([sts], [pod], [cpu_policy()], silent, claims=unreadable).marked == frozenset()
    assert decide([due], [pod], [cpu_policy()], silent, claims=unreadable).acted == {}
    # Where the read failed, a claim not read may hold a GPU; one read of a NIC's does not.
    failed = Usage(gpu_peak=97.0, cpu_peak_cores=0.01, gpu_failed=True)
    assert decide([sts], [pod], [cpu_policy()], failed, claims=claimed("dra.net")).marked == frozenset({"trainer"})


def test_a_busy_gpu_held_through_a_claim_vetoes_an_idle_gpu_reclaim_of_its_workload() -> None:
    """One workload, two pods: one requests nvidia.com/gpu and is idle, the other holds a GPU through a
    DRA claim at 97 % (or one whose read has no series). The idle-GPU policy judges only the pod that
    requests a GPU; the other's GPU is read by the in-use check, and vetoes (or, unknown, holds)."""
    from janitor.decide.claims import Claim, ClaimRef, ClaimsRead, Device

    sts = view("trainer", "StatefulSet")
    idle = gpu_pod("trainer-0", sts)
    claim = replace(gpu_pod("trainer-1", sts, gpus=0), resource_claims=("trainer-1-gpu",))
    busy = Usage(gpu_peak=0.0, cpu_peak_cores=0.01, gpu_peaks=(("trainer-1", 97.0),))
    assert decide([sts], [idle, claim], [gpu_policy()], busy).marked == frozenset()
    due = with_notes(sts, mark(sts, policy="idle-gpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    decided = decide([due], [idle, claim], [gpu_policy()], busy)
    assert decided.acted == {} and decided.unmarked == {"trainer"}

    gpu = ClaimsRead((Claim(ClaimRef(NS, "trainer-1-gpu", "uid-c"), "1", "resource.k8s.io/v1", NOW - 5 * H, True,
                            devices=(Device("gpu", "gpu.nvidia.com", "pool", "d0"),)),), "v1")
    silent = Usage(gpu_peak=0.0, cpu_peak_cores=0.01, gpu_peaks=(("trainer-1", None),))
    assert decide([sts], [idle, claim], [gpu_policy()], silent, claims=gpu).marked == frozenset()
    decided = decide([due], [idle, claim], [gpu_policy()], silent, claims=gpu)
    assert decided.acted == {} and decided.unmarked == frozenset()

    # Idle on its GPU too, the workload is reclaimed as before.
    assert decide([sts], [idle, claim], [gpu_policy()], Usage(gpu_peak=0.0, cpu_peak_cores=0.01)).marked == {"trainer"}


def test_busy_cpu_vetoes_an_idle_gpu_reclaim_when_no_cpu_policy_exists() -> None:
    """A notebook running CPU code on 6 cores while its GPU rests is in use."""
    sts = view("notebook", "StatefulSet")
    decided = decide([sts], [gpu_pod("notebook-0", sts)], [gpu_policy()], Usage(gpu_peak=0.0, cpu_peak_cores=6.0))
    assert decided.marked == frozenset() and decided.acted == {}


def test_an_idle_gpu_and_an_idle_cpu_are_still_reclaimed() -> None:
    """The in-use checks hold back nothing that is idle on every signal."""
    sts = view("notebook", "StatefulSet")
    decided = decide([sts], [gpu_pod("notebook-0", sts)], [gpu_policy()], Usage(gpu_peak=0.0, cpu_peak_cores=0.05))
    assert decided.marked == {"notebook"}
    decided = decide([sts], [gpu_pod("notebook-0", sts)], [cpu_policy()], Usage(gpu_peak=0.0, cpu_peak_cores=0.05))
    assert decided.marked == {"notebook"}


# -- extensions ---------------------------------------------------------------------------------------

def test_keep_until_never_moves_the_deadline_earlier_than_the_warning_said() -> None:
    """Marked two days ago, warned late (23 h ago, 24 h grace): due in an hour. The owner asks for
    three more days; the policy's cap (first mark + 1 day) lies in the past. Asking for time must
    not get the workload reclaimed now."""
    job = view("train", "Job")
    notes = mark(job, policy="idle-gpu", marked_at=ago(hours=48), deadline=NOW + H, warned_at=ago(hours=23))
    job = with_notes(job, notes | {a.KEEP_UNTIL: t(NOW + 72 * H)})
    decided = decide([job], [gpu_pod("train-x", job)], [gpu_policy(max_extension=24 * H)], Usage(gpu_peak=0.0))
    assert decided.acted == {}
    assert a.parse_expires(decided.deadlines.get("train", t(NOW + H))) >= NOW + H


# -- copies of annotations on other objects -------------------------------------------------------------

@pytest.mark.parametrize("key,value", [(a.TTL, "1h"), (a.EXPIRES, t(ago(hours=1)))], ids=["ttl", "expires"])
def test_a_deployments_annotation_copied_onto_its_replicaset_is_never_acted_on(key: str, value: str) -> None:
    """The user removed it from their Deployment; the Deployment controller never removes the copy."""
    deploy = view("web", "Deployment")
    rs = view("web-7d9f", "ReplicaSet", notes={key: value}, owner=deploy, created=ago(hours=3))
    decided = decide([deploy, rs], [], [])
    assert "web-7d9f" not in decided.deleted


def test_a_restored_objects_predecessor_mark_is_never_acted_on() -> None:
    """Saved YAML of a marked and warned Job, applied again after the Job was deleted: a new object
    (a new UID) carrying the old one's mark and warning records."""
    predecessor = str(uuid.uuid4())
    job = view("train", "Job")
    job = with_notes(job, mark(predecessor, policy="idle-gpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    decided = decide([job], [gpu_pod("train-x", job)], [gpu_policy()], Usage(gpu_peak=0.0))
    assert decided.acted == {}


def test_removing_only_janitor_policy_never_makes_the_mark_a_user_expiry() -> None:
    job = view("train", "Job")
    notes = mark(job, policy="idle-gpu", marked_at=ago(hours=30), deadline=ago(hours=6), warned_at=ago(hours=30))
    del notes[a.POLICY]
    decided = decide([with_notes(job, notes)], [], [])
    assert decided.deleted == frozenset()


# -- a changed action needs a new warning ---------------------------------------------------------------

def test_a_policy_whose_action_changed_since_the_warning_warns_again_before_acting() -> None:
    """Warned: suspend at the deadline. The admin changed the policy to delete since."""
    job = view("train", "Job")
    job = with_notes(job, mark(job, policy="idle-gpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30), action="suspend"))
    decided = decide([job], [gpu_pod("train-x", job)], [gpu_policy(action=PolicyAction.DELETE)],
                     Usage(gpu_peak=0.0))
    assert decided.acted == {}
    assert decided.warned == {"train"}


def test_a_policy_whose_new_action_does_not_apply_to_the_marked_kind_unmarks_it() -> None:
    """Warned: delete at the deadline. The admin changed the policy to suspend since, which means
    nothing for a Deployment: neither a new warning of it nor a suspend, and the owner hears the
    mark is gone."""
    deploy = view("notebook", "Deployment")
    deploy = with_notes(deploy, mark(deploy, policy="idle-gpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                                     warned_at=ago(hours=30), action="delete"))
    decided = decide([deploy], [gpu_pod("notebook-x", deploy)], [gpu_policy(action=PolicyAction.SUSPEND)],
                     Usage(gpu_peak=0.0))
    assert decided.acted == {}
    assert decided.warned == frozenset()
    assert decided.unmarked == {"notebook"}


# -- the audit line -----------------------------------------------------------------------------------

def test_the_audit_line_names_the_policy_that_decided(caplog: pytest.LogCaptureFixture) -> None:
    from janitor.telemetry import audit

    job = view("train", "Job")
    job = with_notes(job, mark(job, policy="idle-gpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    decided = decide([job], [gpu_pod("train-x", job)], [gpu_policy()], Usage(gpu_peak=0.0, cpu_peak_cores=0.01))
    assert decided.acted == {"train": ("delete", "idle-gpu")}
    [action] = decided.actions
    with caplog.at_level(logging.INFO, logger="janitor.audit"):
        audit(action, outcome="done", dry_run=False)  # type: ignore[arg-type]
    [record] = [r for r in caplog.records if r.name == "janitor.audit"]
    assert record.policy == "idle-gpu"  # type: ignore[attr-defined]


# -- found by the adversarial read of the change ------------------------------------------------------

def test_a_shadow_policy_never_turns_the_in_use_check_off() -> None:
    """A shadow "GPUs under 40 %" waste report reads the GPU too: its idle verdict must not stand in
    for the in-use check's veto of a trainer at 35 % that the enforcing idle-CPU policy would reclaim."""
    waste = Policy("gpu-underused-report", (IdleGpu(threshold=40, window=2 * H),), mode=Mode.SHADOW)
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts)]
    use = Usage(gpu_peak=35.0, cpu_peak_cores=1.2)
    assert decide([sts], pods, [waste, cpu_policy()], use).marked == frozenset()
    due = with_notes(sts, mark(sts, policy="idle-cpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    assert decide([due], pods, [waste, cpu_policy()], use).acted == {}


def test_a_gpu_pod_that_requests_no_nvidia_gpu_is_still_read() -> None:
    """A pod reaching its GPU another way (a DRA claim, a shared-GPU resource) with a DCGM series at
    97 %: an idle-CPU policy must not reclaim it."""
    sts = view("trainer", "StatefulSet")
    decided = decide([sts], [gpu_pod("trainer-0", sts, gpus=0)], [cpu_policy()], Usage(gpu_peak=97.0,
                                                                                      cpu_peak_cores=0.01))
    assert decided.marked == frozenset() and decided.acted == {}


@pytest.mark.parametrize("uid", ["", "own", "exporter-pod-uid", "OWN-UPPER"])
def test_a_gpu_pod_that_requests_no_nvidia_gpu_is_still_read_whatever_uid_its_series_carry(uid: str) -> None:
    """The same where the series carry a pod UID label: its own, or one that is not its own (a
    ServiceMonitor relabelling that adds the exporter pod's UID, a UID in another case). A GPU at
    97 % under the pod's name is use, or at least doubt, never a pod without a GPU."""
    sts = view("trainer", "StatefulSet")
    pod = gpu_pod("trainer-0", sts, gpus=0)
    label = pod.ref.uid.upper() if uid == "OWN-UPPER" else uid
    decided = decide([sts], [pod], [cpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=0.01, gpu_uid=label))
    assert decided.marked == frozenset() and decided.acted == {}
    due = with_notes(sts, mark(sts, policy="idle-cpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    assert decide([due], [pod], [cpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=0.01, gpu_uid=label)).acted == {}


def test_a_gpu_pod_that_requests_no_nvidia_gpu_is_busy_on_a_gpu_split_in_two_series() -> None:
    """Its one GPU in two series (the exporter's host label changed within the window): the busy
    half still counts, and a due idle-CPU mark is cancelled, not held for a later reclaim."""
    sts = view("trainer", "StatefulSet")
    pod = gpu_pod("trainer-0", sts, gpus=0)
    due = with_notes(sts, mark(sts, policy="idle-cpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    decided = decide([due], [pod], [cpu_policy()], Usage(gpu_peak=97.0, cpu_peak_cores=0.01, gpu_split=True))
    assert decided.acted == {} and decided.unmarked == frozenset({"trainer"})
