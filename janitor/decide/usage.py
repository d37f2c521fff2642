"""In use is a fact about the workload, not about a policy: the in-use checks.

An idle policy reads its own signal: an idle-CPU policy reads CPU, an idle-GPU policy the GPU.
Busy on any signal must veto every idle reclaim, but a veto that only works when some policy
happens to read the other signal for this very workload is no veto: a policy set with an
enforcing idle-CPU policy and no idle-GPU policy (or one whose namespaces, kinds or pod selector
miss the workload) would reclaim a GPU at 97 % because it uses 1 of 32 cores.

So wherever an enforcing idle policy governs a workload, every usage signal the janitor knows
that no policy reads for that workload is read anyway, by the policy's *in-use check*
(`companion`): the GPU for pods that hold GPUs, on `DCGM_FI_DEV_GPU_UTIL` at idle-GPU's default
threshold (5 %), and the CPU of every running pod, busy above `IN_USE_CPU_CORES` at its peak,
both over the policy's own window and minimum pod age. Its findings are shadow findings under
the name `<policy>/in-use`: they never mark or act, but busy on them vetoes (`Finding.in_use`),
and unknown or too young on them holds a mark or a reclaim like any other usage finding
(missing GPU evidence for a GPU pod under an idle-CPU policy is unknown, never idle). A MIG slice
is unknown on `GPU_UTIL` (it reads 0 there whatever runs): an admin who wants MIG pods reclaimed
by an idle-CPU policy gives them an idle-GPU policy on `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (in shadow
mode is enough).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from janitor.decide.claims import Claim
from janitor.decide.evidence import PodKey
from janitor.decide.model import Finding, Observation, PodView, TriggerKind
from janitor.decide.selection import Workload
from janitor.decide.triggers import registry, signals
from janitor.policy.model import GpuSignal, IdleCpu, IdleGpu, LabelSelector, Mode, Policy

IN_USE_CPU_CORES = 0.5
"""The in-use check calls a pod's CPU busy above half a core at its peak (the busiest minute of the
window): an idle Jupyter server or a sleeping trainer uses a few hundredths of a core; a notebook
running pandas, a data loader or a compile uses a whole one."""
SUFFIX = "/in-use"
SOURCE = "in-use check (docs/policies.md, busy on any signal beats idle on another)"


def companion(policy: Policy) -> Policy | None:
    """The in-use check of an enforcing idle policy: a shadow policy reading both usage signals over
    its window, on every workload of the namespaces and kinds it covers (its pod selector left out:
    a pod it does not select is still in use); None for a policy that is no enforcing idle policy."""
    if policy.mode is not Mode.ENFORCE:
        return None
    own: IdleGpu | IdleCpu | None = policy.trigger(IdleGpu) or policy.trigger(IdleCpu)
    if own is None:
        return None
    never = own.never_used if isinstance(own, IdleGpu) else None  # a young pod is then judged on its life
    return Policy(policy.name + SUFFIX,
                  (IdleGpu(window=own.window, min_pod_age=own.min_pod_age, never_used=never),
                   IdleCpu(cores=IN_USE_CPU_CORES, window=own.window, min_pod_age=own.min_pod_age,
                           life_after=never.after if never is not None else None)),
                  description=f"what {policy.name} does not read itself, read to veto its reclaims when busy",
                  match=replace(policy.match, pod_selector=LabelSelector()), mode=Mode.SHADOW, source=SOURCE)


def read_beside(policies: Iterable[Policy]) -> frozenset[tuple[str, datetime.timedelta]]:
    """The GPU queries the in-use check reads as several signals (`_reading_as`: GPU_UTIL and an
    enforcing idle-GPU policy's PROF fields, over its window): which nodes export each is read
    across the cluster for them, as for a policy reading several signals, so that a signal missing
    for a pod whose node exports it for pods not read (another namespace's, or none) is unknown."""
    keys: set[tuple[str, datetime.timedelta]] = set()
    for policy in policies:
        check = companion(policy)
        trigger, own = policy.trigger(IdleGpu), check.trigger(IdleGpu) if check is not None else None
        if trigger is not None and own is not None and (work := _work_beside(trigger, own)):
            keys |= {(str(s), trigger.window) for s, _ in ((own.signal, own.threshold), *work)}
    return frozenset(keys)


def _work_beside(trigger: IdleGpu, own: IdleGpu) -> tuple[tuple[GpuSignal, float], ...]:
    """The signals of `trigger` that show work, other than the check's own (`own`), with their
    thresholds: what the in-use check reads beside its own signal (`_reading_as`)."""
    return tuple((s, t) for s, t in trigger.limits if s is not own.signal and s.measures_work)


def companions(policies: Iterable[Policy]) -> tuple[Policy, ...]:
    """The in-use checks of these policies, in their order: what `observe` reads besides the
    policies' own signals."""
    return tuple(c for p in policies if (c := companion(p)) is not None)


def is_check(name: str) -> bool:
    """Whether a finding's policy is an in-use check rather than an admin's policy."""
    return name.endswith(SUFFIX)


def findings(workloads: Sequence[Workload], found: Sequence[Finding], observation: Observation,
             policies: Sequence[Policy], now: datetime.datetime) -> list[Finding]:
    """The in-use check's findings: per workload an enforcing idle policy governs, each usage signal
    no finding on it reads, judged by the check of the first such policy (in load order); and where
    an enforcing idle-GPU policy read the GPUs of the pods that request one, those its other pods
    hold without a request (`_only_mapped`, judged as `_reading_as` says)."""
    checks = {p.name: c for p in policies if (c := companion(p)) is not None}
    if not checks:
        return []
    order = {p.name: i for i, p in enumerate(policies)}
    work = {p.name: _work_signals(p) for p in policies}
    read: dict[str, set[TriggerKind]] = {}
    governed: dict[str, str] = {}
    gpu_reader: dict[str, str] = {}  # the first enforcing policy that read a workload's GPUs, by its uid
    reading = frozenset(t.kind for t in registry.USAGE)  # the triggers whose usage is Usage.READS
    for f in found:
        if f.trigger not in reading:
            continue
        signals_read = read.setdefault(f.subject.uid, set())
        if f.mode is Mode.ENFORCE and _reads_work(f, work):  # an enforcing policy's numbers are the admin's;
            signals_read.add(f.trigger)  # a shadow one's, or memory copy and power alone, replace no veto
            if f.trigger is TriggerKind.IDLE_GPU:
                first = gpu_reader.get(f.subject.uid)
                if first is None or order[f.policy] < order[first]:
                    gpu_reader[f.subject.uid] = f.policy
        if f.policy in checks and f.known:
            best = governed.get(f.subject.uid)
            if best is None or order[f.policy] < order[best]:
                governed[f.subject.uid] = f.policy
    by_check: dict[tuple[str, TriggerKind], list[Workload]] = {}
    # GPUs read by an enforcing policy on the pods that request one only: by check and that policy
    unjudged: dict[tuple[str, str], list[Workload]] = {}
    for workload in workloads:
        name = governed.get(workload.ref.uid)
        if name is None:
            continue
        for trigger in registry.USAGE:
            if trigger.kind not in read[workload.ref.uid]:
                by_check.setdefault((name, trigger.kind), []).append(workload)
            elif trigger.kind is TriggerKind.IDLE_GPU and _requests_no_gpu(workload):
                unjudged.setdefault((name, gpu_reader[workload.ref.uid]), []).append(workload)
    out: list[Finding] = []
    claims = _claims_by_name(observation)
    by_name = {p.name: p for p in policies}
    gpu_trigger = registry.spec(TriggerKind.IDLE_GPU)
    for (name, reader), members in unjudged.items():
        # Judged as the policy that read the others would judge them, under the check's name.
        check = _reading_as(checks[name], by_name[reader])
        mapped = [w for m in members if (w := _only_mapped(m, observation, check, claims)) is not None]
        out.extend(_reclaiming_nothing(f) for f in gpu_trigger.findings(mapped, observation, check, now))
    for (name, kind), members in by_check.items():
        check, trigger = checks[name], registry.spec(kind)
        assert trigger.pods is not None
        if kind is TriggerKind.IDLE_GPU:
            members = [_with_mapped_gpus(w, observation, check, claims) for w in members]
        judged = [w for w in members if trigger.pods(w)]
        out.extend(_reclaiming_nothing(f) for f in trigger.findings(judged, observation, check, now))
    return out


def _reclaiming_nothing(finding: Finding) -> Finding:
    """A check's finding reclaims no GPU-hours: it never marks or acts. Most say so already (every CPU
    verdict, every GPU verdict but idle) and are kept as they are, not copied."""
    hours = finding.reclaim_gpu_hours
    if type(hours) is float and hours == 0.0 and math.copysign(1.0, hours) > 0:  # 0.0 itself, not -0.0 or 0
        return finding
    return replace(finding, reclaim_gpu_hours=0.0)


def _work_signals(policy: Policy) -> frozenset[str]:
    """The signals of a policy's idle-GPU trigger that show any work on a GPU (GPU_UTIL or a PROF
    field), worked out once per policy and cycle."""
    trigger = policy.trigger(IdleGpu)
    return frozenset(str(s) for s, _ in trigger.limits if s.measures_work) if trigger is not None else frozenset()


def _reads_work(finding: Finding, work: Mapping[str, frozenset[str]]) -> bool:
    """Whether the finding read a signal that shows any work on a GPU (GPU_UTIL or a PROF field):
    memory copy and power alone miss a kernel that computes without moving memory or drawing much,
    so the in-use check's GPU_UTIL is read beside them. `work`: `_work_signals` by policy name."""
    if finding.trigger is not TriggerKind.IDLE_GPU:
        return True
    signals_of = work.get(finding.policy, frozenset())
    if not signals_of:
        return False
    # ... on every pod: one whose node lacks the policy's work signal was judged without it.
    for j in finding.pods:
        left = signals.left_of(j)
        if left and not signals_of - {signal for signal, *_ in left}:
            return False
    return True


GPU_DRIVER_MARK = "gpu"
"""A DRA driver whose name holds this is taken for a GPU's (gpu.nvidia.com, gpu.amd.com,
gpu.intel.com); a claim's devices of other drivers (a NIC's) hold no GPU."""


def _claims_by_name(observation: Observation) -> Mapping[tuple[str, str], Claim] | None:
    """The claims read, by namespace and name (looked up for each pod that names one); None where
    they were not read, or not whole."""
    read = observation.claims
    if read is None or read.problem:
        return None
    return {(c.ref.namespace, c.ref.name): c for c in read.claims}


def _may_hold_a_gpu(pod: PodView, claims: Mapping[tuple[str, str], Claim] | None, *, unread: bool) -> bool:
    """Whether a pod's DRA claims may hold a GPU: one of them holds a device of a GPU driver
    (`GPU_DRIVER_MARK`), or has no devices or an odd shape, or the claims are not known (`claims`
    None: not read, or their read failed); `unread` where a claim it names is not in a whole read."""
    if not pod.resource_claims:
        return False
    if claims is None:
        return True
    for name in pod.resource_claims:
        claim = claims.get((pod.ref.namespace or "", name))
        if claim is None:
            if unread:
                return True
        elif claim.problem or not claim.devices or any(GPU_DRIVER_MARK in d.driver for d in claim.devices):
            return True
    return False


def _with_mapped_gpus(workload: Workload, observation: Observation, check: Policy,
                      claims: Mapping[tuple[str, str], Claim] | None) -> Workload:
    """The workload with each running pod that requests no nvidia.com/gpu but has GPU series (a DRA
    claim, a shared-GPU resource, NVIDIA_VISIBLE_DEVICES) holding the GPUs dcgm-exporter maps to it:
    its GPU is read like any other, so one at 97 % vetoes. Every series under its name counts, a
    UID that is not its own too: the judge then finds them doubtful, never a pod without a GPU.
    A pod without series that names a DRA claim holds one GPU of unknown use, as only that read
    would have shown it in use: where the read failed, unless its claims are read and hold no GPU
    (`_may_hold_a_gpu`); where the read answered without it (its node's exporter down), unless its
    claims are read and none holds a GPU (a NIC's). The cycle and the re-check before acting read
    the claims wherever a pod names one, so a claim of no GPU holds nothing; claims whose read
    failed hold."""
    trigger = check.trigger(IdleGpu)
    evidence = observation.evidence.gpu.get((str(trigger.signal), trigger.window)) if trigger else None
    failed = evidence is None or evidence.failed is not None
    read = {} if evidence is None or failed else evidence.pods

    def gpus(p: PodView) -> int:
        series = read.get(PodKey(p.ref.namespace or "", p.ref.name), ())
        return len(series) if series else 1 if _may_hold_a_gpu(p, claims, unread=failed) else 0

    pods = tuple(replace(p, gpus=found) if p.gpus == 0 and (found := gpus(p)) else p for p in workload.pods)
    return workload if pods == workload.pods else replace(workload, pods=pods)


def _reading_as(check: Policy, reader: Policy) -> Policy:
    """The check reading GPUs on GPU_UTIL and, beside it, on `reader`'s other signals that show work
    (PROF fields), over its window and minimum age: busy on any vetoes. GPU_UTIL, which every
    dcgm-exporter exports, finds the pods (a pod holding a GPU is mapped by its series) and reads
    them where the node exports no PROF field; a PROF field the reader reads judges a MIG slice,
    which GPU_UTIL reads as nothing. Busy on GPU_UTIL above the lower of the check's threshold and
    the reader's own. Power and memory copy are left out: on them alone (every work signal missing
    on a node) a GPU is unknown, never idle."""
    trigger, own = reader.trigger(IdleGpu), check.trigger(IdleGpu)
    assert trigger is not None and own is not None
    limit = min([own.threshold] + [t for s, t in trigger.limits if s is own.signal])
    also = _work_beside(trigger, own)
    return replace(check, triggers=(replace(trigger, signal=own.signal, threshold=limit, also=also),))


def _requests_no_gpu(workload: Workload) -> bool:
    """Whether a running pod of the workload requests no GPU: an idle-GPU policy judges only those that
    do, and such a pod may hold one another way (a DRA claim, a shared GPU)."""
    for p in workload.running:
        if p.gpus == 0:
            return True
    return False


def _only_mapped(workload: Workload, observation: Observation, check: Policy,
                 claims: Mapping[tuple[str, str], Claim] | None) -> Workload | None:
    """The workload with only its running pods that request no GPU but hold one as read
    (`_with_mapped_gpus`), or None when none does: where an idle-GPU policy judged the pods that
    request one, the in-use check reads these, so that one at 97 % vetoes the reclaim of a workload
    whose requesting pods are idle."""
    running = tuple(p for p in workload.running if p.gpus == 0)
    mapped = _with_mapped_gpus(replace(workload, pods=running), observation, check, claims)
    held = tuple(p for p in mapped.pods if p.gpus > 0)
    return replace(mapped, pods=held) if held else None
