"""What the idle policies find, workload by workload: the shadow-mode report.

For every running pod, the first policy (in load order) that defines a trigger and matches the
pod's workload decides that trigger; pods are judged on the evidence, and a workload is idle only
when every one of its pods is. Nothing here marks or acts: these findings are what `janitor plan`
shows and what enforcing would act on, with the GPU-hours it would reclaim.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from janitor import annotations
from janitor.decide.evidence import CpuEvidence, GpuEvidence, PodKey
from janitor.decide.idle import Idleness, Judgement, PodFacts, judge_cpu, judge_gpu, judge_workload
from janitor.decide.model import NamespaceView, ObjectRef, ObjectView, PodView
from janitor.decide.owners import DEFAULT_OWNER_KEYS, Owner, OwnerKind, find_owner
from janitor.decide.workloads import CronJobMode, Unknown, Workload, pod_as_object, resolve
from janitor.policy.model import IdleCpu, IdleGpu, Mode, Policy

GpuKey = tuple[str, datetime.timedelta]  # (signal, window)
CpuKey = tuple[datetime.timedelta, tuple[str, ...]]  # (window, ignored containers)


@dataclass(frozen=True, slots=True)
class IdleFinding:
    policy: str
    source: str  # file:line of the policy
    mode: Mode
    trigger: str  # "idleGpu" | "idleCpu"
    workload: ObjectRef | None  # None when the owner chain could not be read
    idleness: Idleness
    why: str
    pods: tuple[Judgement, ...]
    gpus_held: int
    reclaim_gpu_hours: float  # idle GPUs x the window they were proven idle for
    managed_by: str | None = None
    owner: Owner = Owner(OwnerKind.UNKNOWN)
    condition: str = "idle"  # what the owner is told is wrong: "idle", "stuck Pending"


def gpu_evidence_needed(policies: Iterable[Policy]) -> set[GpuKey]:
    return {(str(t.signal), t.window) for p in policies if (t := p.trigger(IdleGpu))}


def cpu_evidence_needed(policies: Iterable[Policy]) -> set[CpuKey]:
    return {(t.window, tuple(sorted(t.ignore_containers))) for p in policies if (t := p.trigger(IdleCpu))}


def _opted_out(workload: Workload | Unknown, index: Mapping[str, ObjectView]) -> bool:
    if not isinstance(workload, Workload):
        return False
    view = index.get(workload.ref.uid)
    return view is not None and view.annotations.get(annotations.OPT_OUT, "").strip().lower() == "true"


def _facts(pod: PodView, ignore: Sequence[str] = ()) -> PodFacts:
    cpu = sum(c.cpu_request_cores for c in pod.containers if c.name not in ignore)
    return PodFacts(PodKey(pod.ref.namespace or "", pod.ref.name), pod.ref.uid, pod.started, pod.gpus, cpu)


def idle_findings(
    pods: Sequence[PodView],
    namespaces: Mapping[str, NamespaceView],
    objects_by_uid: Mapping[str, ObjectView],
    policies: Sequence[Policy],
    gpu: Mapping[GpuKey, GpuEvidence],
    cpu: Mapping[CpuKey, CpuEvidence],
    now: datetime.datetime,
    *,
    cronjob_mode: CronJobMode = CronJobMode.JOB,
    protected_namespaces: Sequence[str] = (),
    owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS,
) -> list[IdleFinding]:
    """Pods are grouped by workload first; for each trigger, the first policy whose match holds
    for every pod of the workload decides, and judges all of them: a workload is never judged on a
    subset of its pods. Precedence (docs/policies.md): a protected namespace is not evaluated at
    all, and an opted-out workload is not evaluated by a policy that honours the opt-out."""
    index = {**objects_by_uid, **{p.ref.uid: pod_as_object(p) for p in pods}}
    workloads: dict[str, tuple[Workload | Unknown, list[PodView]]] = {}
    for pod in pods:
        if pod.phase != "Running" or pod.deleting or (pod.ref.namespace or "") in protected_namespaces:
            continue
        owner = resolve(pod_as_object(pod), index, cronjob_mode=cronjob_mode)
        if not isinstance(owner, (Workload, Unknown)):
            continue  # DaemonSet pods are never candidates
        key = owner.ref.uid if isinstance(owner, Workload) else f"unknown:{pod.ref.uid}"
        workloads.setdefault(key, (owner, []))[1].append(pod)
    found = []
    for owner, members in workloads.values():
        namespace = members[0].ref.namespace or ""
        ns_view = namespaces.get(namespace, NamespaceView(namespace))
        kind = owner.ref.kind if isinstance(owner, Workload) else "Pod"
        for trigger_kind in (IdleGpu, IdleCpu):
            judged = [p for p in members if trigger_kind is not IdleGpu or p.gpus > 0]
            if not judged:
                continue
            policy = next((pol for pol in policies if pol.trigger(trigger_kind) is not None and all(
                pol.match.matches(namespace=namespace, namespace_labels=ns_view.labels, kind=kind,
                                  pod_labels=p.labels) for p in members)), None)
            if policy is None or (policy.lifecycle.honour_opt_out and _opted_out(owner, index)):
                continue
            pairs = [(p, _judge(p, policy, trigger_kind, gpu, cpu, now)) for p in judged]
            finding = _finding(trigger_kind.key, (policy, owner), pairs)
            workload = index.get(finding.workload.uid) if finding.workload else None
            found.append(replace(finding, owner=find_owner(workload, ns_view, owner_keys)))
    return found


def _judge(pod: PodView, policy: Policy, kind: type, gpu: Mapping[GpuKey, GpuEvidence],
           cpu: Mapping[CpuKey, CpuEvidence], now: datetime.datetime) -> Judgement:
    if kind is IdleGpu:
        t = policy.trigger(IdleGpu)
        assert t is not None
        evidence = gpu.get((str(t.signal), t.window))
        if evidence is None:
            return Judgement(_facts(pod).key, Idleness.UNKNOWN, f"no {t.signal} evidence was read this cycle")
        return judge_gpu(_facts(pod), evidence, t, now)
    c = policy.trigger(IdleCpu)
    assert c is not None
    cpu_evidence = cpu.get((c.window, tuple(sorted(c.ignore_containers))))
    if cpu_evidence is None:
        return Judgement(_facts(pod).key, Idleness.UNKNOWN, "no CPU evidence was read this cycle")
    return judge_cpu(_facts(pod, c.ignore_containers), cpu_evidence, c, now)


def _finding(trigger_key: str, owner: tuple[Policy, Workload | Unknown],
             members: list[tuple[PodView, Judgement]]) -> IdleFinding:
    policy, workload = owner
    judgements = tuple(j for _, j in members)
    gpus_held = sum(p.gpus for p, _ in members)
    if isinstance(workload, Unknown):
        return IdleFinding(policy.name, policy.source, policy.mode, trigger_key, None, Idleness.UNKNOWN,
                           f"workload unknown: {workload.why}", judgements, gpus_held, 0.0)
    verdict, why = judge_workload(judgements)
    trigger = policy.trigger(IdleGpu if trigger_key == IdleGpu.key else IdleCpu)
    window = trigger.window if trigger is not None else datetime.timedelta(0)
    idle_gpus = gpus_held if verdict is Idleness.IDLE and trigger_key == IdleGpu.key else 0
    return IdleFinding(policy.name, policy.source, policy.mode, trigger_key, workload.ref, verdict, why, judgements,
                       gpus_held, idle_gpus * window.total_seconds() / 3600, workload.managed_by)


def reclaim_by(findings: Iterable[IdleFinding]) -> dict[tuple[str, str], float]:
    """GPU-hours enforcing would reclaim, per (policy, namespace)."""
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for f in findings:
        if f.workload is not None and f.reclaim_gpu_hours:
            totals[(f.policy, f.workload.namespace or "")] += f.reclaim_gpu_hours
    return dict(totals)
