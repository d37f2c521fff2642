"""The janitor's promises, as properties of generated clusters (hypothesis; strategies in generated.py).

Every example is a whole cluster: workloads with their owner chains (Deployment -> ReplicaSet -> Pod,
StatefulSet, Job, CronJob -> Job, Notebook -> StatefulSet, bare pods, DaemonSet pods, owners missing
or being deleted), pods in several phases on a few nodes, GPU and CPU evidence with gaps, failed
queries and non-finite peaks, overlapping policies in shadow and enforce mode, user annotations,
protected and opted-out namespaces, and marks in every state (none, warned, unwarned, in flight,
partial, copied from another object, malformed). The expectations are computed here from the
cluster, not by the janitor's own code.

Aspects covered:
- busy beats idle: a workload in use on any signal a governing policy reads (any mode) is never
  marked, warned, extended or reclaimed, loses its own mark, and the re-check before acting never
  confirms a reclaim of it;
- no action without its warning, over many cycles with failing and late sends, lost delivery
  records, users editing annotations, changed policy actions and re-applied objects: every reclaim
  follows a delivered warning naming that action, at least the policy's grace earlier, and never
  comes before the deadline the last warning named; except where the owner pressed "Release now"
  on a delivered warning naming that action, and then only for the mark that warning was about
  (a release from an earlier mark's message is never acted on);
- an owner's janitor/keep-until never gives an earlier janitor/expires or an earlier reclaim;
- a mark belongs to the object it was written on: a copy is never acted on and is dropped (left
  while its controller still carries its own mark); no subset of a mark's keys is a user expiry;
- a mark is removed only on positive evidence: never as "no longer covered" while its policy is
  loaded and pods of its namespace could not be traced to their workload (they may be its own);
- protected namespaces and honoured opt-outs (object or namespace; the rails for the plain path,
  the policy for the lifecycle) are never acted on, and never written to except to remove the
  janitor's own mark (docs/policies.md, "Unmark"); the plain expiry path never acts on a mark;
- the precedence table of docs/policies.md: which policy evaluates a workload, what the plain
  TTL/expiry path deletes, what the lifecycle may do (user expiry, keep-until, shadow mode, dry-run);
- plan() is a pure function: the same inputs give the same plan, and the inputs are left as they were;
- the smallest wrongful actions the properties found, as explicit cases: a warning sent again after
  a failed send, acted on by the first attempt's deadline or action instead of the one it named; a
  stuck pod annotated janitor/opt-out force-deleted; an opted-out controller reported about the
  janitor/ttl in its pod template;
- in use is a fact about the workload: busy on a signal only an enforcing policy's in-use check
  reads (no policy reads it there: none exists, or its selector misses) vetoes too;
- consent and owners: a release counts only for the action, warning and owner it answered, and
  for an hour; a workload handed to another owner is acted on only after a warning reached them;
- CronJobs govern their Jobs: a CronJob's opt-out leaves its Jobs alone on every path;
- pods waiting for a node: where an autoscaler may add one (a GPU pool at zero), a pod is stuck
  before `after` only on the autoscalers' settled word that no node they add could run it;
- force deletes only on positive proof, never on the word of a node agent that cannot see pods;
- GPU series by pod UID: a pod is judged idle or in use only on its own series, never on those of a
  pod of the same name before it (another UID), never where labelled and unlabelled series mix;
- the generators reach each of these situations (REACHED, checked with the budget: a property
  whose generator never reaches a case proves nothing about it);
- the default run decides at least 10,000 cycles (each plan() and still_due() call is one).

JANITOR_PROPERTY_PROFILE=long runs about 20 times as many examples.
"""

from __future__ import annotations

import copy
import datetime
import functools
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import pytest
from factories import NOW
from generated import (
    BUSY_WATTS,
    DAY,
    IDLE_WATTS,
    Between,
    Case,
    Cluster,
    H,
    M,
    Pod,
    Simulator,
    Thing,
    Use,
    cases,
    lifecycle_actions,
    scripts,
    stamp,
)
from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis import strategies as st

from janitor import annotations as ann
from janitor.annotations import Delivery
from janitor.decide import volumes
from janitor.decide.autoscaling import Said
from janitor.decide.deadlines import keep_cap, kept_until
from janitor.decide.evidence import CpuEvidence, Evidence, GpuEvidence, GpuSeries, PodKey, Quality
from janitor.decide.lifecycle import Step, delivered, resend
from janitor.decide.model import (
    Action,
    ActionType,
    ContainerView,
    Finding,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    ObjectView,
    Observation,
    PodJudgement,
    PodState,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.notices import Notice
from janitor.decide.plan import CyclePlan, PlanSettings, plan
from janitor.decide.reasons import Code
from janitor.decide.recheck import still_due
from janitor.decide.selection import RESTORER_MANAGERS, RESTORERS, CronJobMode, managed_by
from janitor.node_report import PodTaskState
from janitor.observe.evidence import DCGM_SENTINEL
from janitor.observe.observation import needs
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import (
    CrashLoop,
    GpuSignal,
    Hung,
    IdleCpu,
    IdleGpu,
    Lifecycle,
    Manager,
    Mode,
    Pending,
    Policy,
    ReservedQuota,
    Terminating,
)

# -- the run's budget ---------------------------------------------------------------------------------

# The default run draws the same clusters every time (derandomize): CI must not pass or fail by
# luck, and what the generators reach (REACHED) is checked against one known draw. The long
# profile draws afresh every run: that is where new cases are found (then kept as explicit tests).
settings.register_profile(
    "janitor-promises", max_examples=80, deadline=None, database=None, print_blob=True, derandomize=True,
    phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink),  # no explain: it traces every line
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile("janitor-promises-long", settings.get_profile("janitor-promises"), max_examples=1600,
                          derandomize=False)
LONG = os.environ.get("JANITOR_PROPERTY_PROFILE") == "long"
PROFILE = settings.get_profile("janitor-promises-long" if LONG else "janitor-promises")
# The long profile runs for many minutes per test: past the suite's per-test timeout.
pytestmark = [pytest.mark.timeout(0)] if LONG else []
CYCLES_PER_RUN = 10_000  # what the default profile must reach when the whole module runs
CYCLES = 0  # plan() and still_due() calls so far
# How often the generated clusters reached the situations the promises are about: a property whose
# generator never reaches a case proves nothing about it (checked last, with the budget).
REACHED: Counter[str] = Counter()
SITUATIONS = {
    "busy on a signal only an in-use check reads": 1,
    "a workload judged never used since it started": 1,
    "a never-used workload marked with the shorter notice": 1,
    "a workload kept by an activity rule: a rule names a pod": 1,
    "a workload kept by an activity rule: a rule that says nothing reliable": 1,
    "a workload kept by an activity rule: a pod under the floor": 1,
    "a workload a rule shows in use, under a hung policy too": 1,
    "in use on a signal beside GPU_UTIL": 1,
    "a GPU held through a claim in use beside GPUs requested": 1,
    "a MIG slice held through a claim in use on a signal that measures it": 1,
    "a GPU held through a claim in use, the GPUs requested beside it idle": 1,
    "idle beside a signal its node does not export": 1,
    "a signal missing for a pod whose node exports it for pods not read": 1,
    "a signal missing for a pod whose exporter names no node": 1,
    "a GPU held through a claim of unknown use": 1,
    "... beside GPUs requested found idle by an enforcing policy": 1,
    "a pod whose claims hold no GPU, judged without one": 1,
    "released by the owner, acted on": 1,
    "a release that answers nothing in force, not acted on": 1,
    "a new owner warned after the old one was": 1,
    "an action changed after a warning": 1,
    "a Job opted out by its CronJob": 1,
    "a release someone else wrote, not acted on": 1,
    "a release with a keep-until after it, not acted on": 1,
    "a pod waiting for a node an autoscaler may add, not stuck yet": 1,
    "a pod no node will ever run, on the autoscaler's settled word": 1,
    "force deleted on the node agent's proof": 1,
    "a pod reported gone by an agent that cannot see, not force deleted": 1,
    "an action that would delete volumes, not marked": 1,
    "a mark whose action would now delete volumes, removed": 1,
    "volumes deleted where a policy allows it": 1,
    "a cycle without sight of pods or namespaces, marks left as they are": 1,
    "a managed workload reported, not reclaimed": 1,
    "a workload a manager restores, reclaimed where its policy says so": 1,
    "a reclaim that held, announced": 1,
    "a reclaim undone, said": 1,
    "not marked again after an undo": 1,
    "kube-janitor deleted an object beside the janitor": 1,
    "a copy's stale janitor/expires removed": 1,
    "an opted-out workload's older mark moved out of kube-janitor's reach": 1,
    "an object re-created by a sync, not deleted again": 1,
    "another UID's series beside a pod's own, never idle": 1,
    "a stuck job called hung": 1,
    "a stuck job marked although GPU_UTIL or its CPU reads busy": 1,
    "quota held with no pods, called so": 1,
    "quota held while a pod runs or waits, kept": 1,
    "quota held with no pods, its Workload deactivated after the warning": 1,
}
PROPERTIES: set[str] = set()  # the property tests of this module
HELD: set[str] = set()  # ... that ran all their examples and held


def examples(share: float) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A property test running `share` of the profile's examples (the default profile's shares are
    sized for about a minute), counted for the budget when it holds."""
    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        run = settings(PROFILE, max_examples=max(1, round(PROFILE.max_examples * share)))(test)
        PROPERTIES.add(test.__name__)

        @functools.wraps(run)
        def counted(*args: object, **kwargs: object) -> None:
            run(*args, **kwargs)
            HELD.add(test.__name__)
        return counted
    return decorate


def run_plan(observation: Observation, policies: Sequence[Policy], ledger: SafetyLedger, now: datetime.datetime,
             plan_settings: PlanSettings) -> CyclePlan:
    global CYCLES
    CYCLES += 1
    return plan(observation, policies, ledger, now, settings=plan_settings)


def run_recheck(action: Action, fresh: Observation, policies: Sequence[Policy], now: datetime.datetime,
                plan_settings: PlanSettings) -> Action | None:
    global CYCLES
    CYCLES += 1
    return still_due(action, fresh, policies, now, plan_settings).action


OFFSETS = (0 * H, 2 * H, 7 * H, 30 * H, 9 * DAY)  # each generated cluster is judged at these times after NOW
WRITING = (Step.MARK, Step.NOTIFY, Step.EXTEND, Step.ACT, Step.RECOVER, Step.HELD)  # toward an action


# -- what the tests read of a cluster, computed here ------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """A workload as the tests see it: the top of its pods' controller chain."""

    uid: str
    view: ObjectView | None  # None when the chain cannot be read
    kind: str
    namespace: str
    pods: tuple[PodView, ...]
    known: bool
    candidate: bool
    opted_out: bool


def opted_out(notes: Mapping[str, str], namespace: NamespaceView | None) -> bool:
    def true(value: str | None) -> bool:
        return value is not None and value.strip().lower() == "true"
    return true(notes.get(ann.OPT_OUT)) or (namespace is not None and true(namespace.annotations.get(ann.OPT_OUT)))


def pod_object(pod: PodView) -> ObjectView:
    return ObjectView(pod.ref, pod.resource_version, pod.created or NOW, pod.annotations, pod.labels, pod.deleting,
                      pod.controller, foreign_marks=pod.foreign_marks)


def units(observation: Observation, plan_settings: PlanSettings) -> list[Unit]:
    """Every pod outside the protected namespaces, grouped under the top of its chain."""
    by_uid = {o.ref.uid: o for o in observation.objects}
    grouped: dict[str, list[PodView]] = {}
    tops: dict[str, tuple[ObjectView | None, str, bool, bool]] = {}
    for pod in observation.pods:
        namespace = pod.ref.namespace or ""
        if namespace in plan_settings.rails.protected_namespaces:
            continue
        view, known, candidate = pod_object(pod), True, True
        parent: ObjectView | None = None  # the CronJob governing a Job that is the workload
        while view.controller is not None:
            controller = view.controller
            candidate = candidate and controller.kind != "DaemonSet"
            owner = by_uid.get(controller.uid)
            if owner is None or owner.deleting:
                known = False
                break
            if (controller.kind == "CronJob" and view.ref.kind == "Job"
                    and (plan_settings.cronjob_mode is CronJobMode.JOB or owner.suspended)):
                parent = owner
                break
            view = owner
        if known and view.ref.kind == "Pod" and pod.deleting:
            known = False
        key = view.ref.uid if known else f"unknown:{pod.ref.uid}"
        kind = view.ref.kind if known else (pod.controller.kind if pod.controller else "Pod")
        grouped.setdefault(key, []).append(pod)
        tops.setdefault(key, (view if known else None, kind, known, candidate, parent))
    found = []
    for key, members in grouped.items():
        view, kind, known, candidate, parent = tops[key]
        namespace = members[0].ref.namespace or ""
        notes = view.annotations if view is not None else members[0].annotations
        out = opted_out(notes, observation.namespace(namespace)) or (parent is not None and
                                                                      opted_out(parent.annotations, None))
        found.append(Unit(view.ref.uid if view is not None else members[0].ref.uid, view, kind, namespace,
                          tuple(members), known, candidate, out))
    return found


def running(unit: Unit) -> tuple[PodView, ...]:
    return tuple(p for p in unit.pods if p.phase == "Running" and not p.deleting)


JUDGED = {
    TriggerKind.IDLE_GPU: lambda u: tuple(p for p in running(u) if p.gpus > 0),
    TriggerKind.IDLE_CPU: running,
    TriggerKind.PENDING: lambda u: (lambda js: js if any(p.phase == "Pending" for p in js) else ())(
        tuple(p for p in u.pods if p.phase in ("Pending", "Running") and not p.deleting)),
    TriggerKind.CRASH_LOOP: lambda u: tuple(p for p in u.pods if p.gpus > 0 and not p.deleting
                                            and p.phase in ("Running", "Pending")),
    TriggerKind.TERMINATING: lambda u: tuple(p for p in u.pods if p.state.deleting_since is not None),
    TriggerKind.HUNG: lambda u: tuple(p for p in running(u) if p.gpus > 0),
}
TRIGGER_TYPES = {TriggerKind.IDLE_GPU: IdleGpu, TriggerKind.IDLE_CPU: IdleCpu, TriggerKind.PENDING: Pending,
                 TriggerKind.CRASH_LOOP: CrashLoop, TriggerKind.TERMINATING: Terminating, TriggerKind.HUNG: Hung}


def governing(policies: Sequence[Policy], trigger: TriggerKind, unit: Unit, observation: Observation) -> Policy | None:
    """docs/policies.md, "First match wins, per trigger"; an honoured opt-out leaves it to nobody."""
    judged = JUDGED[trigger](unit)
    if not judged:
        return None
    namespace = observation.namespace(unit.namespace)
    for policy in policies:
        if policy.trigger(TRIGGER_TYPES[trigger]) is None:
            continue
        if all(policy.match.matches(namespace=namespace.name, namespace_labels=namespace.labels, kind=unit.kind,
                                    pod_labels=pod.labels) for pod in judged):
            return None if policy.lifecycle.honour_opt_out and unit.opted_out else policy
    return None


def own_series(pod: PodView, read: GpuEvidence) -> tuple[GpuSeries, ...] | None:
    """docs/admin-guide.md, "Pod UIDs": the pod's series, by UID where the exporter labels them (another
    UID is another pod of the same name), by name where none is labelled; None where the name's
    series mix labelled and unlabelled (whose they are is unknown)."""
    named = read.pods.get(PodKey(pod.ref.namespace or "", pod.ref.name), ())
    labelled = [s for s in named if s.uid]
    if not labelled:
        return named
    return None if len(labelled) != len(named) else tuple(s for s in labelled if s.uid == pod.ref.uid)


def gpu_in_use(pod: PodView, evidence: Mapping[tuple[str, datetime.timedelta], GpuEvidence], trigger: IdleGpu,
               now: datetime.datetime) -> tuple[str, ...]:
    """docs/policies.md, "Several signals": full, finite evidence of some signal the policy reads
    with at least one GPU above that signal's threshold (power: over the model's idle power), read
    for every GPU of the pod (CLEAR or PARTIAL) on its own series, whatever the other signals say or
    lack. Every such signal (none: not in use)."""
    found: list[str] = []
    if pod.started is None or now - pod.started < max(trigger.window, trigger.min_pod_age):
        return ()
    for signal, threshold in trigger.limits:
        read = evidence.get((str(signal), trigger.window))
        if read is None or read.failed:
            continue
        series = own_series(pod, read)
        if series is None or not series or len(series) != (pod.gpus or len(series)) \
                or any(s.mig and not signal.covers_mig for s in series):
            continue
        for s in series:
            idle = trigger.idle_watts(s.model) if signal.relative else 1.0
            # A finite sample above the threshold is use, gaps, NaN or low coverage elsewhere or not.
            if s.peak is not None and idle is not None and s.peak / idle > threshold:
                found.append(str(signal))
                break
    return tuple(found)


def doubtful(quality: Quality, trigger: IdleGpu | IdleCpu) -> bool:
    """docs/policies.md, "Unknown": no interval, a NaN, or a gap over maxGap (default: 4 scrape
    intervals, at least a minute)."""
    if quality.interval is None or quality.non_finite or quality.gap is None:
        return True
    allowed = trigger.max_gap if trigger.max_gap is not None else max(4 * quality.interval, M)
    return quality.gap > allowed


def cpu_in_use(pod: PodView, evidence: CpuEvidence | None, trigger: IdleCpu, now: datetime.datetime) -> bool:
    if evidence is None or evidence.failed or pod.started is None:
        return False
    if now - pod.started < max(trigger.window, trigger.min_pod_age):
        return False
    usage = evidence.pods.get(PodKey(pod.ref.namespace or "", pod.ref.name))
    if usage is None or usage.peak_cores is None:
        return False
    if trigger.cores is not None:
        return usage.peak_cores > trigger.cores
    request = sum(c.cpu_request_cores for c in pod.containers if c.name not in trigger.ignore_containers)
    return request > 0 and usage.peak_cores > (trigger.fraction_of_request or 0.0) * request


USAGE = (TriggerKind.IDLE_GPU, TriggerKind.IDLE_CPU)


def in_use_check(policy: Policy) -> Policy | None:
    """docs/policies.md, "Busy on any signal beats idle on another": what an enforcing idle policy
    reads besides its own signal, on the workloads it governs: the GPU on DCGM_FI_DEV_GPU_UTIL at
    5 %, the CPU above half a core, over its own window and minimum pod age."""
    own = policy.trigger(IdleGpu) or policy.trigger(IdleCpu)
    if policy.mode is not Mode.ENFORCE or own is None:
        return None
    return Policy(f"{policy.name}/in-use", (IdleGpu(window=own.window, min_pod_age=own.min_pod_age),
                                            IdleCpu(cores=0.5, window=own.window, min_pod_age=own.min_pod_age)),
                  mode=Mode.SHADOW)


def reads_work(policy: Policy, unit: Unit, observation: Observation) -> bool:
    """docs/policies.md, "Several signals": an enforcing idle-GPU policy stands in for the in-use
    check's GPU_UTIL only where it read a signal showing any kernel at work (GPU_UTIL or a PROF
    field) on every GPU pod: not with memory copy or power alone, nor where its node exports none of
    its work signals, nor on a MIG slice none of them measures. A pod too young for the window is
    judged by neither."""
    trigger = policy.trigger(IdleGpu)
    if trigger is None:
        return True
    work = [s for s, _ in trigger.limits if s.measures_work]
    if not trigger.also:  # one signal: a pod it cannot read is unknown on it, which holds anyway
        return bool(work)

    def read_on(pod: PodView, signal: GpuSignal) -> bool:
        evidence = observation.evidence.gpu.get((str(signal), trigger.window))
        if evidence is None or evidence.failed:
            return True  # not read this cycle: unknown, not left out
        series = evidence.pods.get(PodKey(pod.ref.namespace or "", pod.ref.name), ())
        if any(s.mig for s in series) and not signal.covers_mig:
            return False
        return bool(series) or pod.node in (evidence.exporting or ()) or \
            any(s.node == pod.node for ss in evidence.pods.values() for s in ss)

    def young(pod: PodView) -> bool:  # the in-use check judges it no sooner, over the same window
        return pod.started is None or observation.at is None or \
            observation.at - pod.started < max(trigger.window, trigger.min_pod_age)

    return bool(work) and all(young(p) or any(read_on(p, s) for s in work) for p in JUDGED[TriggerKind.IDLE_GPU](unit))


def usage_readers(policies: Sequence[Policy], unit: Unit, observation: Observation) -> list[tuple[TriggerKind, Policy]]:
    """The policies whose triggers read a usage signal on this workload: the governing policy per
    signal (any mode), and the in-use check of the first enforcing idle policy that governs it, for
    every signal no enforcing policy reads there (a shadow policy's reading replaces no veto)."""
    readers = {t: p for t in USAGE if (p := governing(policies, t, unit, observation)) is not None}
    found = list(readers.items())
    enforcing = sorted((p for p in readers.values() if p.mode is Mode.ENFORCE), key=policies.index)
    check = in_use_check(enforcing[0]) if enforcing and unit.known else None
    if check is not None:
        found += [(t, check) for t in USAGE if (t not in readers or readers[t].mode is not Mode.ENFORCE
                                                or t is TriggerKind.IDLE_GPU
                                                and not reads_work(readers[t], unit, observation))
                  and (JUDGED[t](unit) or t is TriggerKind.IDLE_GPU and claimed(unit, observation, check))]
        if (TriggerKind.IDLE_GPU, check) not in found:  # the GPUs the policy's own read did not judge: on
            own, theirs = check.trigger(IdleGpu), readers[TriggerKind.IDLE_GPU].trigger(IdleGpu)  # GPU_UTIL (5 %
            assert own is not None and theirs is not None  # or the policy's, if lower), its work signals beside
            beside = tuple((s, t) for s, t in theirs.limits if s is not own.signal and s.measures_work)
            limit = min([own.threshold] + [t for s, t in theirs.limits if s is own.signal])
            on_its_signals = replace(check, triggers=(replace(theirs, signal=own.signal, threshold=limit,
                                                              also=beside),))
            if claimed(unit, observation, on_its_signals):
                found.append((TriggerKind.IDLE_GPU, on_its_signals))
    return found


def claimed(unit: Unit, observation: Observation, check: Policy) -> tuple[PodView, ...]:
    """docs/policies.md, "in-use check": the running pods that request no GPU but have series of one
    (a DRA claim), which the in-use check reads even where an idle-GPU policy reads the pods that
    request one."""
    trigger = check.trigger(IdleGpu)
    assert trigger is not None
    read = observation.evidence.gpu.get((str(trigger.signal), trigger.window))
    if read is None or read.failed:
        return ()
    return tuple(p for p in running(unit)
                 if not p.gpus and read.pods.get(PodKey(p.ref.namespace or "", p.ref.name)))


def judged_by(trigger: TriggerKind, policy: Policy, unit: Unit, observation: Observation) -> tuple[PodView, ...]:
    """The pods a reader judges on the workload: an in-use check's GPU read takes the claimed ones too."""
    pods = JUDGED[trigger](unit)
    if trigger is TriggerKind.IDLE_GPU and policy.name.endswith("/in-use"):
        pods += claimed(unit, observation, policy)
    return pods


# docs/policies.md, "hung": what a stuck job's own spinning makes read busy, on the GPU pods it judged.
BLIND = frozenset({str(GpuSignal.GPU_UTIL), str(GpuSignal.GR_ENGINE_ACTIVE), "cpu"})


def in_use(observation: Observation, policies: Sequence[Policy], plan_settings: PlanSettings,
           now: datetime.datetime, on: dict[str, set[tuple[str, str]]] | None = None) -> dict[str, str]:
    """Known workloads in use on a usage signal a policy reads on them (any mode; an enforcing idle
    policy reads every signal), and why; `on` gets, per workload, each (pod uid, signal) the use was
    shown on ("starting" for a pod starting)."""
    busy: dict[str, str] = {}
    shown = on if on is not None else {}
    evidence = observation.evidence
    for unit in units(observation, plan_settings):
        if not unit.known or not unit.candidate:
            continue
        starting = next((p for p in unit.pods if p.phase == "Pending" and not p.deleting), None)
        for trigger, policy in usage_readers(policies, unit, observation):
            if starting is not None:
                busy[unit.uid] = f"pod {starting.ref.name} is starting ({trigger} of {policy.name})"
                shown.setdefault(unit.uid, set()).add((starting.ref.uid, "starting"))
                continue
            for pod in judged_by(trigger, policy, unit, observation):
                if trigger is TriggerKind.IDLE_GPU:
                    g = policy.trigger(IdleGpu)
                    assert g is not None
                    signals = gpu_in_use(pod, evidence.gpu, g, now)
                    REACHED["in use on a signal beside GPU_UTIL"] += bool(set(signals) - {str(GpuSignal.GPU_UTIL)})
                    REACHED["a GPU held through a claim in use beside GPUs requested"] += bool(
                        signals and not pod.gpus and JUDGED[trigger](unit))
                    key = PodKey(pod.ref.namespace or "", pod.ref.name)
                    REACHED["a MIG slice held through a claim in use on a signal that measures it"] += bool(
                        signals and not pod.gpus and any(s.mig for r in evidence.gpu.values()
                                                         for s in r.pods.get(key, ())))
                else:
                    c = policy.trigger(IdleCpu)
                    assert c is not None
                    signals = ("cpu",) if cpu_in_use(
                        pod, evidence.cpu.get((c.window, tuple(sorted(c.ignore_containers)))), c, now) else ()
                if signals:
                    busy[unit.uid] = f"pod {pod.ref.name} is in use on {trigger} (policy {policy.name})"
                    shown.setdefault(unit.uid, set()).update((pod.ref.uid, signal) for signal in signals)
            active = activity_use(policy, unit, evidence, now)
            if active and any(p.trigger(Hung) for p in policies) and JUDGED[TriggerKind.HUNG](unit):
                REACHED["a workload a rule shows in use, under a hung policy too"] += 1
            if active:
                busy[unit.uid] = f"{active} (policy {policy.name})"
                shown.setdefault(unit.uid, set()).add(("", "activity"))
                REACHED[f"a workload kept by an activity rule: {active.split(':')[0]}"] += 1
    return busy


def activity_use(policy: Policy, unit: Unit, evidence: Evidence, now: datetime.datetime) -> str:
    """docs/policies.md, "activity rules": why the policy's rules call the workload in use, or "". A
    sample naming one of its pods (by name, or with that pod's own UID), any rule that failed, was not
    asked or named no pod, and a pod running for less than minRunningSeconds."""
    if policy.activity is None:
        return ""
    live = [p for p in unit.pods if not p.deleting]
    for rule in policy.activity.rules:
        answer = evidence.activity.get(rule.expr)
        if answer is None or answer.failed or answer.anonymous:
            return "a rule that says nothing reliable"
        for pod in live:
            uids = answer.pods.get(PodKey(pod.ref.namespace or "", pod.ref.name), frozenset())
            if "" in uids or pod.ref.uid in uids:
                return "a rule names a pod"
    floor = policy.activity.min_running
    if any(p.phase == "Running" and p.started is not None and now - p.started < floor for p in live):
        return "a pod under the floor"
    return ""


def expected_findings(observation: Observation, policies: Sequence[Policy], plan_settings: PlanSettings,
                      now: datetime.datetime) -> set[tuple[str, str, str, bool]]:
    """(trigger, policy, subject uid, known) of every finding the pod triggers must make."""
    out: set[tuple[str, str, str, bool]] = set()
    for unit in units(observation, plan_settings):
        if unit.candidate:
            out |= {(str(t), p.name, unit.uid, unit.known) for t, p in usage_readers(policies, unit, observation)}
        for trigger in JUDGED:
            if not unit.candidate and trigger is not TriggerKind.TERMINATING:
                continue
            policy = governing(policies, trigger, unit, observation)
            if policy is None or trigger in USAGE:
                continue
            elif trigger is TriggerKind.PENDING and unit.known:
                out.add((str(trigger), policy.name, unit.uid, True))
            elif trigger is TriggerKind.HUNG:  # a verdict on every workload with running GPU pods, known or not
                out.add((str(trigger), policy.name, unit.uid, unit.known))
            elif trigger is TriggerKind.CRASH_LOOP and unit.known:
                loop = policy.trigger(CrashLoop)
                assert loop is not None
                # A finding (firing or saying why not) wherever a container restarted within the window.
                if any(c.restarts > 0 and c.last_exit_at is not None and now - c.last_exit_at <= loop.window
                       for p in JUDGED[trigger](unit) for c in p.state.containers):
                    out.add((str(trigger), policy.name, unit.uid, True))
            elif trigger is TriggerKind.TERMINATING:
                stuck = policy.trigger(Terminating)
                assert stuck is not None
                for pod in JUDGED[trigger](unit):
                    assert pod.state.deleting_since is not None
                    if policy.lifecycle.honour_opt_out and ann.is_true(pod.annotations.get(ann.OPT_OUT)):
                        continue  # the pod's own opt-out, honoured like its workload's
                    overdue = now - pod.state.deleting_since - datetime.timedelta(seconds=pod.state.grace_seconds)
                    if overdue >= stuck.after:
                        out.add((str(trigger), policy.name, pod.ref.uid, True))
    return out | expected_quota_findings(observation, policies, plan_settings)


def expected_quota_findings(observation: Observation, policies: Sequence[Policy],
                            plan_settings: PlanSettings) -> set[tuple[str, str, str, bool]]:
    """docs/policies.md, "reservedQuota": a finding on every object whose Kueue Workload was read,
    outside protected namespaces and not being deleted, under the first reservedQuota policy whose
    namespaces, namespace selector and kinds select it and whose pod selector is empty or matches
    every one of its pods (with none, a selector with terms leaves it to no policy); known where its
    pods' workload is it, or, with no pods of its own, where its chain is readable and it is the top
    (a CronJob's Job under --cronjob-target job)."""
    by_unit = {u.uid: u for u in units(observation, plan_settings) if u.known}
    by_uid = {o.ref.uid: o for o in observation.objects}
    out: set[tuple[str, str, str, bool]] = set()
    for obj in observation.objects:
        queued = obj.queued
        namespace = obj.ref.namespace or ""
        if queued is None or not queued.found or obj.deleting or namespace in plan_settings.rails.protected_namespaces:
            continue
        unit = by_unit.get(obj.ref.uid)
        pods = unit.pods if unit is not None else ()
        known, parent = True, None
        if unit is None:
            controller = obj.controller
            if controller is not None:
                owner = by_uid.get(controller.uid)
                if owner is None or owner.deleting:
                    known = False
                elif controller.kind == "CronJob" and obj.ref.kind == "Job" and (
                        plan_settings.cronjob_mode is CronJobMode.JOB or owner.suspended):
                    parent = owner
                else:
                    known = False  # something above it is the workload
        out_ = unit.opted_out if unit is not None else (
            opted_out(obj.annotations, observation.namespace(namespace))
            or (parent is not None and opted_out(parent.annotations, None)))
        view = observation.namespace(namespace)
        for policy in policies:
            if policy.trigger(ReservedQuota) is None:
                continue
            match = policy.match
            selector = match.pod_selector
            if not (match.namespaces.matches(namespace) and match.namespace_selector.matches(view.labels)
                    and (not match.kinds or obj.ref.kind in match.kinds)):
                continue
            if (selector.match_labels or selector.match_expressions) and not pods:
                break  # whether it would select the pods to come is not known: nobody governs it
            if (selector.match_labels or selector.match_expressions) and not all(
                    selector.matches(p.labels) for p in pods):
                continue
            if not (policy.lifecycle.honour_opt_out and out_):
                out.add((str(TriggerKind.RESERVED_QUOTA), policy.name, obj.ref.uid, known))
            break
    return out


def namespace_of(ref: ObjectRef) -> str | None:
    return ref.name if ref.kind == "Namespace" else ref.namespace


def expected_expiry_deletions(observation: Observation, plan_settings: PlanSettings,
                              now: datetime.datetime) -> dict[str, str]:
    """Object uid -> the rule ("ttl" or "expires") the plain path deletes it by (the earliest passed)."""
    rails = plan_settings.rails
    by_uid = {o.ref.uid: o for o in observation.objects}
    out: dict[str, str] = {}
    for obj in observation.objects:
        namespace = namespace_of(obj.ref)
        if obj.deleting or namespace in rails.protected_namespaces:
            continue
        cron = by_uid.get(obj.controller.uid) if obj.controller is not None and obj.ref.kind == "Job" else None
        if obj.ref.kind == "Job" and obj.controller is not None and obj.controller.kind == "CronJob" and cron is None:
            continue  # its CronJob's opt-out governs it, and the CronJob was not read
        cron_out = cron is not None and cron.ref.kind == "CronJob" and opted_out(cron.annotations, None)
        if rails.honour_opt_out and (cron_out or opted_out(obj.annotations,
                                                           observation.namespaces.get(namespace or ""))):
            continue
        if obj.controller is not None and (obj.ref.kind, obj.controller.kind) == ("ReplicaSet", "Deployment"):
            continue  # the Deployment's annotations, copied
        if obj.labels.keys() & {"argocd.argoproj.io/instance", "kustomize.toolkit.fluxcd.io/name",
                                "helm.toolkit.fluxcd.io/name"} or "argocd.argoproj.io/tracking-id" in obj.annotations:
            continue  # GitOps keeps it and would create it again: reported, not deleted
        passed: list[tuple[datetime.datetime, str]] = []
        for key, rule in ((ann.TTL, "ttl"), (ann.EXPIRES, "expires")):
            value = obj.annotations.get(key)
            if not value or (key == ann.EXPIRES and any(k in obj.annotations for k in ann.JANITOR_ONLY_KEYS)):
                continue
            if obj.ref.kind == "Pod" and obj.controller is not None:
                owner = by_uid.get(obj.controller.uid)
                if owner is None or owner.template_annotations.get(key) == value:
                    continue  # not visible, or inherited from the template: reported, never deleted
            try:
                if key == ann.TTL:
                    ttl = ann.parse_ttl(value)
                    if ttl is None or ttl <= datetime.timedelta(0):
                        continue
                    deadline = obj.created + ttl
                    if now - obj.created > ttl:
                        passed.append((deadline, rule))
                else:
                    deadline = ann.parse_expires(value)
                    if now > deadline:
                        passed.append((deadline, rule))
            except (ValueError, OverflowError):
                continue
        if passed:
            out[obj.ref.uid] = min(passed)[1]
    return out


def view_of(observation: Observation, uid: str) -> ObjectView | None:
    found = next((o for o in observation.objects if o.ref.uid == uid), None)
    if found is None:
        pod = next((p for p in observation.pods if p.ref.uid == uid), None)
        found = pod_object(pod) if pod is not None else None
    return found


def decided(planned: CyclePlan) -> tuple[Action, ...]:
    """Every action the plan decided on, whether the rails let it through this cycle or not."""
    return planned.actions + tuple(h.action for h in planned.held)


def changes_on(planned: CyclePlan, uid: str) -> list:
    return [c for c in planned.changes if c.workload.uid == uid]


def own_mark(notes: Mapping[str, str], uid: str, foreign: frozenset[str] = frozenset()) -> ann.Mark | None:
    mark = ann.read_mark(notes, foreign)
    return mark if mark is not None and mark.uid == uid and not mark.problems else None


def cycles(case: Case) -> Iterable[tuple[Observation, CyclePlan, datetime.datetime]]:
    """One cycle's observation and plan at each of OFFSETS."""
    for offset in OFFSETS:
        now = NOW + offset
        observation = case.cluster.observe(case.policies, now)
        yield observation, run_plan(observation, case.policies, SafetyLedger(), now, case.settings), now


# -- 1. busy beats idle -----------------------------------------------------------------------------------


def blind_to_use(on: Mapping[str, set[tuple[str, str]]], observation: Observation,
                 policies: Sequence[Policy]) -> dict[str, frozenset[str]]:
    """Per workload in use, the hung policies that may still mark it (docs/policies.md, "What vetoes
    it"): its use was shown only on signals a stuck job makes read busy, on its running GPU pods."""
    hung = frozenset(p.name for p in policies if p.trigger(Hung) is not None)
    gpu_pods = {p.ref.uid for p in observation.pods if p.gpus > 0 and p.phase == "Running" and not p.deleting}
    return {uid: hung for uid, shown in on.items()
            if shown and all(signal in BLIND and pod in gpu_pods for pod, signal in shown)}


def assert_untouched_while_busy(busy: Mapping[str, str], planned: CyclePlan, observation: Observation,
                                hung: Mapping[str, frozenset[str]] | None = None) -> None:
    for uid, reason in busy.items():
        if "/in-use" in reason:
            REACHED["busy on a signal only an in-use check reads"] += 1
        allowed = (hung or {}).get(uid, frozenset())
        if any(c.step is Step.MARK and c.policy in allowed for c in changes_on(planned, uid)):
            REACHED["a stuck job marked although GPU_UTIL or its CPU reads busy"] += 1
        for change in changes_on(planned, uid):
            if change.policy in allowed:
                continue
            assert change.step not in WRITING, f"{change.step} on a workload in use ({reason}): {change.why}"
            written = {k: v for k, v in change.annotations.items() if v is not None and k in ann.MARK_KEYS}
            assert not written, f"mark keys written on a workload in use ({reason}): {written}"
        acted = [a for a in lifecycle_actions(decided(planned)) if a.target.uid == uid and a.policy not in allowed]
        assert not acted, f"reclaimed while in use ({reason}): {acted[0].why}"
        view = view_of(observation, uid)
        assert view is not None
        mark = ann.read_mark(view.annotations)
        if mark is not None and mark.uid in (None, uid) and not blind(observation) and mark.policy not in allowed:
            steps = [c.step for c in changes_on(planned, uid)]
            assert steps == [Step.UNMARK], f"its own mark is kept while in use ({reason}): {steps}"


BUSY_AGAIN = st.sampled_from(("starting-pod", "busy-gpu", "busy-cpu"))


def make_busy(cluster: Cluster, unit: Unit, how: str, now: datetime.datetime) -> None:
    """What a fresh read may find: a pod starting, or a pod's GPU or CPU in use (with full evidence)."""
    cluster.failing.clear()
    cluster.unread.clear()
    members = [cluster.pods[p.ref.uid] for p in unit.pods if p.ref.uid in cluster.pods]
    live = [p for p in members if p.phase == "Running" and not p.deleting]
    if how == "starting-pod" and members and members[0].controller is not None:
        sibling = members[0]
        uid = cluster.new_uid("pod")
        cluster.pods[uid] = Pod(sibling.namespace, f"{sibling.name}-s", uid, sibling.controller, sibling.node,
                                "Pending", None, sibling.gpus, now, dict(sibling.labels))
    elif how == "busy-gpu" and any(p.gpus for p in live):
        pod = next(p for p in live if p.gpus)
        pod.use = replace(pod.use, gpu=(0.97,) + tuple(0.0 for _ in range(pod.gpus - 1)), gpu_coverage=1.0,
                          gpu_gap=False, absent=False, doubt="", uids="own" if pod.use.uids else "")
    elif how == "busy-cpu" and live:
        live[0].use = replace(live[0].use, cpu=40.0, cpu_coverage=1.0, absent=False, doubt="")


@examples(3.0)
@given(case=cases(), data=st.data())
def test_busy_beats_idle(case: Case, data: st.DataObject) -> None:
    """A workload in use on any signal a governing policy reads, in any mode, is never marked,
    warned, extended or reclaimed, loses its own mark; and the re-check right before acting never
    confirms a reclaim of a workload a fresh read finds in use."""
    check_busy_beats_idle(case, data)


@examples(1.0)
@given(case=cases("signals"), data=st.data())
def test_busy_on_any_signal_beats_idle(case: Case, data: st.DataObject) -> None:
    """The same where the policy reads GPU_UTIL, SM activity and power, and pods are in use on SM
    activity or power alone while GPU_UTIL reads 0 (docs/policies.md, "Several signals")."""
    check_busy_beats_idle(case, data)


@examples(1.0)
@given(case=cases("signals"), data=st.data())
def test_a_pod_without_a_series_its_node_exports_is_never_idle(case: Case, data: st.DataObject) -> None:
    """Usage queries read only the namespaces the policies cover, so the pods read may be the only
    ones on their node: which nodes export a signal is read across the cluster, and a pod without
    a series of a signal its node exports is unknown on it (missing evidence), never idle with
    that signal left out as one its node does not export (docs/policies.md, "Several signals").
    One running GPU pod loses its SM activity series and has its node to itself (the node's GPUs
    without a pod still export the field), its exporter labelling its series with its node's name
    or, now and then, with another (its own pod's host name: `--hostname-label` set wrong); the
    rest of the cluster as drawn."""
    running = sorted((p for p in case.cluster.pods.values() if p.phase == "Running" and p.gpus and not p.use.absent),
                     key=lambda p: p.uid)
    if running:
        lone = data.draw(st.sampled_from(running))
        host = f"dcgm-exporter-{lone.node}" if data.draw(st.integers(0, 3)) == 0 else ""
        lone.use = replace(lone.use, missing=(str(GpuSignal.SM_ACTIVE),), unexported=(), host=host)
        for p in running:
            if p is not lone and p.node == lone.node:
                p.node = "gpu-2" if lone.node == "gpu-1" else "gpu-1"
    hosts = {p.uid: p.use.host for p in case.cluster.pods.values() if p.use.host}
    for observation, planned, _ in cycles(case):
        placed = {p.ref.uid: hosts.get(p.ref.uid) or p.node for p in observation.pods if p.node}
        policies = {p.name: p for p in case.policies}
        for finding in planned.findings:
            trigger = policies[finding.policy].trigger(IdleGpu) if finding.policy in policies else None
            if finding.trigger is not TriggerKind.IDLE_GPU or trigger is None:
                continue
            for j, read in lone_without_a_series(finding, trigger, observation, placed):
                assert j.state is not State.FIRES, f"{j.pod} idle without {read.window.signal}, which its node " \
                    f"{placed[j.pod.uid]} exports (for pods not read, or none): {j.why}"
                REACHED["a signal missing for a pod whose node exports it for pods not read"] += \
                    j.why.code is Code.SERIES_COUNT and j.why.fact("signal") == read.window.signal
                REACHED["a signal missing for a pod whose exporter names no node"] += j.pod.uid in hosts


def lone_without_a_series(finding: Finding, trigger: IdleGpu, observation: Observation, placed: Mapping[str, str]
                          ) -> Iterator[tuple[PodJudgement, GpuEvidence]]:
    """The finding's pods with no series of a signal its policy reads that their node exports (read
    across the cluster), where no pod read is on that node: only that read tells the field is there."""
    for j in finding.pods:
        node = placed.get(j.pod.uid)
        for signal, _ in trigger.limits:
            read = observation.evidence.gpu.get((str(signal), trigger.window))
            if node and read is not None and read.exporting and node in read.exporting and \
                    not read.pods.get(PodKey(j.pod.namespace or "", j.pod.name)) and \
                    not any(s.node == node for ss in read.pods.values() for s in ss):
                yield j, read


def check_busy_beats_idle(case: Case, data: st.DataObject) -> None:
    for observation, planned, now in cycles(case):
        on: dict[str, set[tuple[str, str]]] = {}
        busy = in_use(observation, case.policies, case.settings, now, on)
        claimed_pods = {p.ref.uid for p in observation.pods if p.resource_claims}
        REACHED["a GPU held through a claim in use, the GPUs requested beside it idle"] += sum(
            any(pod in claimed_pods for pod, _ in on.get(f.subject.uid, ())) for f in planned.findings
            if f.trigger is TriggerKind.IDLE_GPU and f.mode is Mode.ENFORCE and f.state is State.FIRES)
        assert_untouched_while_busy(busy, planned, observation, blind_to_use(on, observation, case.policies))

        for action in lifecycle_actions(decided(planned)):
            unit = next(u for u in units(observation, case.settings) if u.uid == action.target.uid)
            fresh = case.cluster.copy()
            make_busy(fresh, unit, data.draw(BUSY_AGAIN), now)
            again = fresh.observe(case.policies, now)
            on_again: dict[str, set[tuple[str, str]]] = {}
            busy = in_use(again, case.policies, case.settings, now, on_again)
            confirmed = run_recheck(action, again, case.policies, now, case.settings)
            if action.target.uid in busy and action.policy not in blind_to_use(
                    on_again, again, case.policies).get(action.target.uid, frozenset()):
                assert confirmed is None, f"the re-check confirms {action.type} of {action.target} in use: " \
                                          f"{busy[action.target.uid]}"


@examples(1.0)
@given(case=cases(), data=st.data())
def test_a_gpu_held_through_a_claim_of_unknown_use_is_never_reclaimed(case: Case, data: st.DataObject) -> None:
    """docs/policies.md, "in-use check": a running pod that requests no GPU, names a DRA claim and
    has no GPU series (its node's exporter down) holds a GPU of unknown use, unless the claims were
    read and none of its holds a GPU driver's device: no idle policy marks or reclaims its workload
    then, in the cycle or in the re-check before acting. The claims as drawn: read (a GPU's or a
    NIC's), not read, or their list failed; one claim pod drawn loses its GPU series (its CPU read),
    the GPUs requested beside it idle, its namespace and workload not opted out (and, half the time,
    not marked yet)."""
    claimed = sorted((p for p in case.cluster.pods.values() if p.claimed), key=lambda p: p.uid)
    if claimed:
        lone = data.draw(st.sampled_from(claimed))
        lone.use = replace(lone.use, absent=False, gpu_absent=True)
        case.cluster.namespaces[lone.namespace][1].pop(ann.OPT_OUT, None)
        fresh = data.draw(st.booleans())
        for thing in case.cluster.objects.values():
            if thing.namespace == lone.namespace:
                thing.annotations.pop(ann.OPT_OUT, None)
                for key in ann.MARK_READ_KEYS if fresh else ():
                    thing.annotations.pop(key, None)
        for other in case.cluster.pods.values():
            if other.controller == lone.controller and other.gpus:
                other.use = Use((0.0,) * other.gpus, cpu=0.0, model=other.use.model)
        case.cluster.claims = data.draw(st.sampled_from(("gpu", "nic", "unread", "failed")))
    idle = {p.name for p in case.policies if p.triggers and all(isinstance(t, IdleGpu | IdleCpu) for t in p.triggers)}
    for observation, planned, now in cycles(case):
        read = observation.claims
        holding = {(c.ref.namespace, c.ref.name): any("gpu" in d.driver for d in c.devices)
                   for c in (read.claims if read is not None and not read.problem else ())}
        answered = [r for r in observation.evidence.gpu.values() if r.failed is None]
        for unit in units(observation, case.settings):
            silent = [p for p in running(unit) if p.resource_claims and not p.gpus and not any(
                r.pods.get(PodKey(p.ref.namespace or "", p.ref.name)) for r in answered)]
            if not silent:
                continue
            if holding and not any(holding.get((p.ref.namespace or "", c), True)
                                   for p in silent for c in p.resource_claims):
                REACHED["a pod whose claims hold no GPU, judged without one"] += 1
                continue
            REACHED["a GPU held through a claim of unknown use"] += 1
            REACHED["... beside GPUs requested found idle by an enforcing policy"] += any(
                f.subject.uid == unit.uid and f.state is State.FIRES and f.mode is Mode.ENFORCE
                and f.trigger is TriggerKind.IDLE_GPU for f in planned.findings)
            for change in changes_on(planned, unit.uid):
                assert change.policy not in idle or change.step not in (Step.MARK, Step.ACT), \
                    f"{change.step} {unit.uid} by {change.policy}: {change.why}; {silent[0].ref.name}'s GPU is unknown"
            for action in lifecycle_actions(decided(planned)):
                if action.target.uid == unit.uid and action.policy in idle:
                    assert run_recheck(action, observation, case.policies, now, case.settings) is None


@examples(2.0)
@given(case=cases())
def test_doubtful_evidence_is_never_idle(case: Case) -> None:
    """An idle finding (in any mode) rests only on samples without a long gap, without NaN, with a
    known scrape interval and, for MIG slices, on a signal that measures them; and only on the pod's
    own: never on a predecessor's of the same name (another UID), never beside another UID's series
    (a pod judged ran for the whole window, so those are no predecessor's), never where the name's
    series mix those with a UID and those without."""
    for observation, planned, _ in cycles(case):
        policies = {p.name: p for p in case.policies} | {c.name: c for p in case.policies
                                                          if (c := in_use_check(p)) is not None}
        for finding in planned.findings:
            if finding.trigger is TriggerKind.IDLE_GPU and finding.state is not State.FIRES:
                REACHED["another UID's series beside a pod's own, never idle"] += sum(
                    any(s.uid == j.pod.uid for s in ss) and any(s.uid not in ("", j.pod.uid) for s in ss)
                    for j in finding.pods for read in observation.evidence.gpu.values()
                    for ss in [read.pods.get(PodKey(j.pod.namespace or "", j.pod.name), ())])
            if finding.state is not State.FIRES or finding.trigger not in (TriggerKind.IDLE_GPU, TriggerKind.IDLE_CPU):
                continue
            policy = policies[finding.policy]
            for judged in finding.pods:
                key = PodKey(judged.pod.namespace or "", judged.pod.name)
                if finding.trigger is TriggerKind.IDLE_GPU:
                    g = policy.trigger(IdleGpu)
                    assert g is not None
                    pod = next(p for p in observation.pods if p.ref == judged.pod)
                    judged_on = []
                    for signal, _ in g.limits:
                        read = observation.evidence.gpu[(str(signal), g.window)]
                        named = read.pods.get(key, ())
                        if not signal.covers_mig and any(s.mig for s in named):
                            continue  # a slice is judged on what measures it
                        own = own_series(pod, read)
                        assert own is not None, f"{finding.subject} idle on series partly without a UID: {finding.why}"
                        # A pod judged ran for the whole window: no predecessor's samples fall in it,
                        # so another UID beside its own is a label that is not its own.
                        assert not own or len(own) == len(named), \
                            f"{finding.subject} idle beside another UID's series of its name: {finding.why}"
                        judged_on += [(signal, s) for s in own]
                    assert judged_on, f"{finding.subject} idle on no signal: {finding.why}"
                    for signal, _ in g.limits:  # a signal not read: its node exports it for no pod
                        found = observation.evidence.gpu[(str(signal), g.window)]
                        read = found.pods
                        if read.get(key) or judged.state is not State.FIRES:
                            continue
                        exported = [k for k, ss in read.items() if any(s.node == pod.node for s in ss)]
                        assert not exported, f"{finding.subject} idle without {signal}, which its node " \
                                             f"{pod.node} exports for {exported}: {finding.why}"
                        assert pod.node not in (found.exporting or ()), \
                            f"{finding.subject} idle without {signal}, which its node {pod.node} exports " \
                            f"(for pods not read, or none): {finding.why}"
                        REACHED["idle beside a signal its node does not export"] += 1
                    for _, s in judged_on:
                        assert not doubtful(over_life(s.quality, judged, observation, g.window), g), \
                            f"{finding.subject} idle on {s}: {finding.why}"
                else:
                    c = policy.trigger(IdleCpu)
                    assert c is not None
                    usage = observation.evidence.cpu[(c.window, tuple(sorted(c.ignore_containers)))].pods[key]
                    assert not doubtful(over_life(usage.quality, judged, observation, c.window), c), \
                        f"{finding.subject} idle on {usage}: {finding.why}"


def over_life(quality: Quality, judged: PodJudgement, observation: Observation,
              window: datetime.timedelta) -> Quality:
    """docs/policies.md, "Never used": a pod judged over its life, the window's time before it started
    is no gap in its samples."""
    pod = next((p for p in observation.pods if p.ref == judged.pod), None)
    if not judged.never_used or pod is None or pod.started is None or observation.at is None or quality.gap is None:
        return quality
    return replace(quality, gap=max(quality.gap - (window - (observation.at - pod.started)), datetime.timedelta(0)))


def truly_never_used(pod: Pod, cluster: Cluster, trigger: IdleGpu, now: datetime.datetime) -> bool:
    """docs/policies.md, "Never used", on what the pod really does: at least `after` old and younger
    than the window, every GPU at or below every threshold the policy reads since it started (a signal
    its node exports for no pod left out), on its own UID's series alone, with the coverage asked."""
    use, never = pod.use, trigger.never_used
    if never is None or pod.started is None or trigger.min_pod_age > trigger.window:
        return False
    if not never.after <= now - pod.started < trigger.window:
        return False
    if use.absent or use.doubt or use.gpu_gap or use.missing or use.uids != "own" or use.predecessor is not None \
            or use.gpu_coverage < trigger.min_coverage:
        return False
    off = {s for p in cluster.pods.values() if p.node == pod.node and p.phase == "Running" and not p.use.absent
           for s in p.use.unexported}
    levels = dict(use.signals)
    for signal, threshold in trigger.limits:
        if str(signal) in off:
            continue
        fractions = (levels[str(signal)],) * pod.gpus if str(signal) in levels else use.gpu[:pod.gpus]
        if len(fractions) < pod.gpus or any(f is None for f in fractions):
            return False
        for f in fractions:
            assert f is not None
            reading = (IDLE_WATTS + f * (BUSY_WATTS - IDLE_WATTS)) / IDLE_WATTS if signal.relative \
                else f * signal.maximum
            if reading > threshold:
                return False
    return True


@examples(4.0)
@given(case=cases("idle", "idle", "idle", "any"))
def test_never_used_only_on_a_whole_idle_life(case: Case) -> None:
    """A never-used verdict (any mode) only on pods truly idle since they started, on their own
    series (docs/policies.md, "Never used"); a workload marked with the never-used notice has every
    running pod's CPU idle since it started too (the in-use check reads it), and its deadline is that
    notice from now."""
    policies = {p.name: p for p in case.policies} | {c.name: c for p in case.policies
                                                      if (c := in_use_check_of(p)) is not None}
    for observation, planned, now in cycles(case):
        for finding in planned.findings:
            if not finding.never_used or finding.trigger is not TriggerKind.IDLE_GPU:
                continue  # the in-use check's CPU since a pod started carries no UID: its own property below
            REACHED["a workload judged never used since it started"] += 1
            trigger = policies[finding.policy].trigger(IdleGpu)
            assert trigger is not None, finding
            for judged in finding.pods:
                pod = case.cluster.pods[judged.pod.uid]
                assert truly_never_used(pod, case.cluster, trigger, now), \
                    f"{finding.subject} never used on {pod.name} ({pod.use}, started {pod.started}): {finding.why}"
        for change in planned.changes:
            if change.step is not Step.MARK or not change.never_used:
                continue
            REACHED["a never-used workload marked with the shorter notice"] += 1
            trigger = policies[change.policy].trigger(IdleGpu)
            assert trigger is not None and trigger.never_used is not None
            assert change.deadline is not None and change.deadline >= now + trigger.never_used.warn_before
            unit = next(u for u in units(observation, case.settings) if u.uid == change.workload.uid)
            for view in running(unit):
                pod = case.cluster.pods[view.ref.uid]
                assert pod.use.cpu is not None and pod.use.cpu + pod.use.sidecar <= 0.5, \
                    f"{change.workload} marked never used while {pod.name} used {pod.use.cpu} cores"


def in_use_check_of(policy: Policy) -> Policy | None:
    """The in-use check as the janitor builds it (decide.usage), never-used window included."""
    from janitor.decide.usage import companion
    return companion(policy)


def truly_hung(pod: Pod, cluster: Cluster, trigger: Hung, now: datetime.datetime) -> bool:
    """docs/policies.md, "hung", on what the pod really does: GPU_UTIL at or above the level all the
    window long, each quiet signal above 0 and at or below its limit on every GPU, every signal there
    for it with the whole window's evidence, its own series alone, old enough."""
    use = pod.use
    if use.absent or use.doubt or use.gpu_gap or use.gpu_coverage < trigger.min_coverage or use.uids == "mixed" \
            or (use.uids and use.predecessor is not None) or pod.started is None \
            or now - pod.started < max(trigger.window, trigger.min_pod_age):
        return False
    off = {s for p in cluster.pods.values() if p.node == pod.node and p.phase == "Running" and not p.use.absent
           for s in p.use.unexported}
    levels = dict(use.signals)
    if any(str(s) in use.missing or str(s) in off for s in (GpuSignal.GPU_UTIL, *(q for q, _ in trigger.quiet))):
        return False
    util = levels.get(str(GpuSignal.GPU_UTIL))  # a GPU that worked in bursts rested between them
    if util is None or util * 100 < trigger.utilization:
        return False
    for signal, limit in trigger.quiet:
        fractions = (levels[str(signal)],) * pod.gpus if str(signal) in levels else use.gpu[:pod.gpus]
        if len(fractions) < pod.gpus or any(f is None for f in fractions):
            return False
        if signal.relative:
            idle = trigger.idle_watts(use.model)
            if idle is None or any((IDLE_WATTS + f * (BUSY_WATTS - IDLE_WATTS)) / idle > limit
                                   for f in fractions if f is not None):
                return False
        elif any(f is not None and (f == 0 or f * signal.maximum > limit) for f in fractions):
            return False  # exactly 0 under load: the PROF fields' known fault
    return True


@examples(3.0)
@given(case=cases("signals", "signals", "any"))
def test_a_hang_is_called_only_on_the_whole_signature(case: Case) -> None:
    """A hung verdict (in any mode) only where every running GPU pod of the workload really reads
    busy on GPU_UTIL all the window long while SM activity and power stay idle, on the whole
    window's evidence of every signal (docs/policies.md, "hung"); never on a pod starting beside.
    And a stuck workload is marked only where use was shown on what its spinning makes read busy
    alone (GPU_UTIL, the GR engine, CPU, on its GPU pods), as "busy beats idle" says."""
    policies = {p.name: p for p in case.policies}
    for observation, planned, now in cycles(case):
        on: dict[str, set[tuple[str, str]]] = {}
        busy = in_use(observation, case.policies, case.settings, now, on)
        claimed_pods = {p.ref.uid for p in observation.pods if p.resource_claims}
        REACHED["a GPU held through a claim in use, the GPUs requested beside it idle"] += sum(
            any(pod in claimed_pods for pod, _ in on.get(f.subject.uid, ())) for f in planned.findings
            if f.trigger is TriggerKind.IDLE_GPU and f.mode is Mode.ENFORCE and f.state is State.FIRES)
        assert_untouched_while_busy(busy, planned, observation, blind_to_use(on, observation, case.policies))
        for finding in planned.findings:
            if finding.trigger is not TriggerKind.HUNG or finding.state is not State.FIRES:
                continue
            REACHED["a stuck job called hung"] += 1
            trigger = policies[finding.policy].trigger(Hung)
            assert trigger is not None and finding.pods
            unit = next(u for u in units(observation, case.settings) if u.uid == finding.subject.uid)
            assert not any(p.phase == "Pending" and not p.deleting for p in unit.pods), finding.why
            for judged in JUDGED[TriggerKind.HUNG](unit):
                pod = case.cluster.pods[judged.ref.uid]
                assert truly_hung(pod, case.cluster, trigger, now), f"{finding.subject} hung on {pod.name} " \
                    f"({pod.use}): {finding.why}"


def blind(observation: Observation) -> bool:
    """Pods or namespaces could not be read this cycle."""
    return any(s.kind in ("Pod", "Namespace") for s in observation.skipped_kinds)


def assert_blind_changes_nothing(observation: Observation, planned: CyclePlan) -> None:
    """A cycle that could not read pods or namespaces acts on nothing and writes and sends nothing."""
    if not blind(observation):
        return
    assert not decided(planned), f"acted on {[str(a.target) for a in decided(planned)]} without sight"
    for change in planned.changes:
        assert change.step is Step.WAIT and not change.annotations and change.notice is None, \
            f"{change.step} {dict(change.annotations)} on {change.workload} without sight"
    REACHED["a cycle without sight of pods or namespaces, marks left as they are"] += bool(planned.changes)


@examples(0.5)
@given(case=cases("any", "due"))
def test_what_cannot_be_seen_is_not_changed(case: Case) -> None:
    """With pods or namespaces unreadable (an RBAC edit, a watch's 403), nothing is marked, unmarked,
    warned, cancelled or acted on: "no pods" is not "no longer covered"."""
    case.cluster.forbidden = case.cluster.forbidden or "Pod"
    for observation, planned, _ in cycles(case):
        assert_blind_changes_nothing(observation, planned)


def assert_volumes_kept(observation: Observation, planned: CyclePlan, policies: Mapping[str, Policy]) -> None:
    """No policy's action deletes a StatefulSet's volumes unless the policy allows it."""
    for action in lifecycle_actions(decided(planned)):
        view = view_of(observation, action.target.uid)
        assert view is not None
        allowed = policies[action.policy].lifecycle.delete_volumes
        # its own claims, or those of the StatefulSet it owns (a Notebook's), which its action reaches
        below = next((o.claims for o in observation.objects if o.claims is not None and o.controller is not None
                      and o.controller.uid == view.ref.uid), None)
        rule = volumes.lost_under(PolicyAction(str(action.type)), view.claims or below)
        assert rule is None or allowed, f"{action.type} of {action.target} deletes its volumes ({rule})"
        REACHED["volumes deleted where a policy allows it"] += rule is not None
    for change in planned.changes:
        if change.why.code is Code.VOLUMES_WOULD_GO:
            REACHED["an action that would delete volumes, not marked"] += 1
        if change.why.code is Code.VOLUMES_NOW_AT_RISK:
            REACHED["a mark whose action would now delete volumes, removed"] += 1


def marks_at_risk(views: Iterable[ObjectView], policies: Mapping[str, Policy], planned: CyclePlan) -> int:
    """How many of `views` are marked, and found idle, by a policy whose action would delete their
    volumes unallowed: what only the volumes rule keeps from acting."""
    fires = {(f.subject.uid, f.policy) for f in planned.findings if f.state is State.FIRES}
    at_risk = 0
    for view in views:
        mark = ann.read_mark(view.annotations, view.foreign_marks)
        policy = policies.get(mark.policy or "") if mark is not None else None
        at_risk += policy is not None and not policy.lifecycle.delete_volumes and (view.ref.uid, policy.name) in fires \
            and volumes.lost_under(policy.lifecycle.action, view.claims) is not None
    return at_risk


@examples(1.0)
@given(case=cases("volumes"), script=st.integers(4, 8).flatmap(lambda n: scripts(n, answers="volumes")))
def test_volumes_go_only_where_a_policy_allows_while_charts_change(case: Case, script: tuple) -> None:
    """The same over cycles where StatefulSets' retention policies change under their marks (a chart
    upgraded between the warning and the deadline): a mark whose action would now lose volumes is
    removed, never acted on."""
    run_script(case, script)


@examples(1.0)
@given(case=cases("volumes", "volumes-allowed"))
def test_volumes_go_only_where_a_policy_allows(case: Case) -> None:
    """A StatefulSet's claims outlive the janitor's scale-to-zero or delete unless its policy says
    `deleteVolumes: true` (its retention policy would delete them otherwise)."""
    policies = {p.name: p for p in case.policies}
    acted = at_risk = 0
    for observation, planned, _ in cycles(case):
        assert_volumes_kept(observation, planned, policies)
        acted += sum(volumes.lost_under(PolicyAction(str(a.type)), view.claims) is not None
                     for a in lifecycle_actions(decided(planned)) if (view := view_of(observation, a.target.uid)))
        at_risk += marks_at_risk(observation.objects, policies, planned)
    # Steer towards both: reclaims that delete volumes (allowed), and marks the volumes rule must stop.
    target(float(acted), label="reclaims that delete volumes")
    target(float(at_risk), label="marks whose action would delete volumes")


# -- 2. no action without its warning -------------------------------------------------------------------


def assert_reclaims_hold(sim: Simulator, planned: CyclePlan, observation: Observation) -> None:
    """A workload Argo CD, Flux or KEDA restores is reclaimed only by a policy that names that manager
    (`lifecycle.reclaimManaged`); a policy never reclaims again what a controller restored after its
    reclaim, or what was undone twice; "done" is said only for a reclaim the next cycle saw hold."""
    policies = sim.by_name()
    for action in lifecycle_actions(decided(planned)):
        view = view_of(observation, action.target.uid)
        assert view is not None
        tool = managed_by(view)
        if tool in RESTORERS:
            allowed = Manager(RESTORERS[tool]) in policies[action.policy].lifecycle.reclaim_managed
            assert allowed, f"{action.type} of {action.target}, which {tool} restores, by {action.policy}"
            REACHED["a workload a manager restores, reclaimed where its policy says so"] += 1
        undone = ann.Undone.parse(view.annotations.get(ann.UNDONE, ""))
        if undone is not None and undone.policy == action.policy:
            assert undone.times < 2 and undone.by not in RESTORER_MANAGERS, \
                f"{action.type} of {action.target} again by {action.policy} after {undone}"
            REACHED["reclaimed again after an owner's one undo"] += 1
    for change in planned.changes:
        REACHED["a managed workload reported, not reclaimed"] += change.why.code is Code.MANAGED_REPORT_ONLY
        REACHED["a reclaim that held, announced"] += change.step is Step.CHECK
        REACHED["not marked again after an undo"] += change.why.code is Code.NOT_AGAIN_UNDONE
        if change.step is Step.CHECK:
            view = view_of(observation, change.workload.uid)
            assert view is not None and not (view.replicas or 0) and (
                view.suspended or view.replicas == 0 or ann.NOTEBOOK_STOPPED in view.annotations), \
                f"'done' for {change.workload}, whose reclaim did not hold"


def assert_warned_first(sim: Simulator, planned: CyclePlan, observation: Observation) -> None:
    policies = sim.by_name()
    assert_reclaims_hold(sim, planned, observation)
    assert_volumes_kept(observation, planned, policies)
    assert_blind_changes_nothing(observation, planned)
    seen = {o.ref.uid: o.annotations for o in (*observation.objects, *observation.pods)}  # bare pods are workloads
    for action in lifecycle_actions(decided(planned)):
        assert PolicyAction(str(action.type)).applies_to(action.target.kind), \
            f"{action.type} of {action.target} at {stamp(sim.now)}: means nothing for a {action.target.kind}"
        told = sim.delivered.get(action.target.uid, [])
        assert told, f"{action.type} of {action.target} at {stamp(sim.now)}: no warning ever reached anyone"
        notes = seen.get(action.target.uid, {})
        target = sim.cluster.find(action.target.uid)
        assert target is not None
        owner = sim.owner_of(target).key  # who owns it now
        last = max(told, key=lambda w: w.at)
        assert last.owner in ("", owner), (
            f"{action.type} of {action.target} at {stamp(sim.now)}: the last warning went to {last.owner}, "
            f"its owner now is {owner}")
        if action.reason == "IdleReleased":
            view = view_of(observation, action.target.uid)
            assert view is not None and ann.RELEASE not in view.foreign_marks, (
                f"{action.type} of {action.target} at {stamp(sim.now)}: released by a janitor/release someone "
                "other than the janitor wrote")
            # The owner pressed "Release now" on a delivered warning naming this action: no more
            # grace or deadline is owed; but only for the mark and the warning it answered, and
            # only for a short while.
            release = ann.Release.parse(notes.get(ann.RELEASE, ""))
            assert release is not None and stamp(release.marked_at) == notes.get(ann.MARKED_AT), (
                f"{action.type} of {action.target} at {stamp(sim.now)}: released for another mark: {notes}")
            assert last.action == str(action.type) == release.action, (
                f"{action.type} of {action.target} at {stamp(sim.now)}: released ({release.action}), but the last "
                f"warning named {last.action}; delivered: {told}")
            assert stamp(release.warned_at) == stamp(last.at) and release.owner == owner, (
                f"{action.type} of {action.target} at {stamp(sim.now)}: the release answered the warning of "
                f"{stamp(release.warned_at)} to {release.owner}; the last one reached {last.owner} at {stamp(last.at)}")
            assert sim.now - release.at <= H, (
                f"{action.type} of {action.target} at {stamp(sim.now)}: released at {stamp(release.at)}, long ago")
            policy = policies[action.policy]
            mark = ann.read_mark(notes, view.foreign_marks)
            until = kept_until(notes.get(ann.KEEP_UNTIL), keep_cap(
                mark.marked_at, policy.lifecycle.max_extension, trusted=mark.cap_trusted)) if mark is not None else None
            assert until is None or sim.now >= until, (
                f"{action.type} of {action.target} at {stamp(sim.now)}: released, but kept until {stamp(until)} "
                "(a keep wins over a release)")
            continue
        policy = policies[action.policy]
        grace = policy.lifecycle.grace
        counted = [w for w in told if w.action == str(action.type) and sim.now - w.at >= grace
                   and (not w.to_admins or policy.lifecycle.admin_fallback_counts) and w.owner in ("", owner)]
        assert counted, (f"{action.type} of {action.target} at {stamp(sim.now)}: no warning naming {action.type} "
                         f"delivered to {owner} {grace} before (policy {policy.name}); delivered: {told}")
        assert last.action == str(action.type), (
            f"{action.type} of {action.target} at {stamp(sim.now)}: the last warning delivered named {last.action}")
        assert sim.now >= last.deadline, (
            f"{action.type} of {action.target} at {stamp(sim.now)}: before {stamp(last.deadline)}, "
            f"the deadline the last warning named")
        view = view_of(observation, action.target.uid)
        assert view is not None
        assert last.volumes or volumes.lost_under(PolicyAction(str(action.type)), view.claims) is None, (
            f"{action.type} of {action.target} at {stamp(sim.now)}: deletes its volumes, which the last warning "
            "did not say")


@examples(4.0)
@given(case=cases("idle", "idle", "any", "due"), script=st.integers(12, 30).flatmap(scripts))
def test_no_action_without_its_warning(case: Case, script: tuple) -> None:
    """Every reclaim follows a warning that reached its owner (or the admins, where the policy
    counts that), named that action, arrived at least the policy's grace earlier, and is never
    earlier than the deadline the last delivered warning named; whatever Slack, users and admins
    do between the cycles."""
    run_script(case, script)


@examples(2.0)
@given(case=cases("due", "due", "idle"), script=st.integers(8, 16).flatmap(lambda n: scripts(n, answers="answers")))
def test_no_action_without_its_warning_when_owners_answer(case: Case, script: tuple) -> None:
    """The same promise where owners mostly answer warnings: releases (on the warning in hand, an
    earlier one, an earlier mark's), workloads handed to another owner, actions changed and changed
    back; a release counts only for the action, warning and owner it answered, and briefly."""
    run_script(case, script)


@examples(1.5)
@given(case=cases("releases"), script=st.integers(6, 12).flatmap(lambda n: scripts(n, answers="releases")))
def test_a_release_acts_only_for_what_it_answered(case: Case, script: tuple) -> None:
    """The same promise where owners mostly press "Release now": on the warning in hand it acts at
    once; on an older warning or mark, forged, after a keep, or once the action changed, it does not."""
    run_script(case, script)


@examples(1.0)
@given(case=cases("reclaims", "reclaims", "due"),
       script=st.integers(8, 14).flatmap(lambda n: scripts(n, answers="heals")))
def test_a_reclaim_that_does_not_hold_is_said_once_and_not_repeated(case: Case, script: tuple) -> None:
    """The same promise where GitOps, KEDA or owners put back what was reclaimed: a workload they
    keep is reported unless its policy reclaims from them; "done" only for what held; an undo is
    said once, and its policy does not reclaim it again where a controller undid it (or twice)."""
    run_script(case, script)


def run_script(case: Case, script: Sequence[Between]) -> None:
    sim = Simulator(case.cluster.copy(), list(case.policies), case.settings, run_plan, run_recheck)
    reached: Counter[str] = Counter()
    at_risk = 0

    def check(sim: Simulator, planned: CyclePlan, observation: Observation) -> None:
        nonlocal at_risk
        assert_warned_first(sim, planned, observation)
        at_risk += marks_at_risk(observation.objects, sim.by_name(), planned)

    for step in script:
        planned = sim.cycle(step, check)
        reached.update(note_reached(sim, planned))
    assert_no_order_for_kube_janitor(sim)
    assert_no_delete_loop(sim)
    REACHED.update(reached)
    target(float(at_risk), label="marks whose action would delete volumes")
    # Steer towards the rarer answers (hypothesis' target phase): each must be reached every run.
    for what in ("an action changed after a warning", "a new owner warned after the old one was",
                 "released by the owner, acted on", "a reclaim undone, said", "not marked again after an undo",
                 "a managed workload reported, not reclaimed"):
        target(float(reached[what]), label=what)


def assert_no_order_for_kube_janitor(sim: Simulator) -> None:
    """kube-janitor, running beside the janitor, deletes whatever janitor/expires has passed: the
    janitor never writes one (its marks' deadline is janitor/deadline), so what kube-janitor deleted
    carried a janitor/expires someone else wrote, or an older mark's that was not moved yet."""
    wrote = sorted(sim.cluster.expires_by_janitor)
    assert not wrote, f"the janitor wrote janitor/expires on {wrote}"
    REACHED["kube-janitor deleted an object beside the janitor"] += bool(sim.cluster.swept)


def assert_no_delete_loop(sim: Simulator) -> None:
    """An object a sync creates again under the same name with the same janitor/expires is deleted on
    that expiry once (within the ledger's day), never on every sync: the caps are not spent on it."""
    seen: dict[tuple[str, str, str], datetime.datetime] = {}
    for name, rule, value, at in sim.expired:
        before = seen.get((name, rule, value))
        assert rule != "expires" or before is None or at - before > DAY, \
            f"{name} deleted again on janitor/expires {value} at {stamp(at)} (first at {stamp(before)})"
        seen[(name, rule, value)] = at
    REACHED["an object re-created by a sync, not deleted again"] += sum(
        1 for t in sim.cluster.objects.values() if any(
            t.kind == g.kind and t.namespace == g.namespace and t.name == g.name for g in sim.gone))


def note_reached(sim: Simulator, planned: CyclePlan) -> Counter[str]:
    """The situations of "no action without its warning" this cycle reached."""
    reached: Counter[str] = Counter()
    acted = lifecycle_actions(planned.actions)
    reached["released by the owner, acted on"] += sum(a.reason == "IdleReleased" for a in acted)
    reached["a reclaim undone, said"] += sum(c.step is Step.UNDONE for c in planned.changes)
    reached["not marked again after an undo"] += sum(c.why.code is Code.NOT_AGAIN_UNDONE for c in planned.changes)
    reached["a managed workload reported, not reclaimed"] += sum(c.why.code is Code.MANAGED_REPORT_ONLY
                                                                 for c in planned.changes)
    reached["quota held with no pods, its Workload deactivated after the warning"] += sum(
        a.trigger is TriggerKind.RESERVED_QUOTA and a.via is not None for a in acted)
    released = {a.target.uid for a in acted if a.reason == "IdleReleased"}
    for change in planned.changes:
        if change.why.code is Code.WARN_NEW_OWNER:
            reached["a new owner warned after the old one was"] += 1
        if change.why.code is Code.WARN_AGAIN_ACTION:
            reached["an action changed after a warning"] += 1
        notes = sim.cluster.notes(change.workload.uid) or {}
        if ann.RELEASE in notes and change.workload.uid not in released and change.step is not Step.UNMARK:
            reached["a release that answers nothing in force, not acted on"] += 1
            target = sim.cluster.find(change.workload.uid)
            if target is not None and ann.RELEASE in target.foreign:
                reached["a release someone else wrote, not acted on"] += 1
            try:
                kept = ann.parse_expires(notes.get(ann.KEEP_UNTIL, "")) > sim.now
            except ValueError:
                kept = False
            if kept:
                reached["a release with a keep-until after it, not acted on"] += 1
    return reached


# The smallest cases the property above found, as they happen (they fail while the janitor has the bug).


def idle_job(action: PolicyAction = PolicyAction.DELETE) -> tuple[Cluster, Policy]:
    """A Job whose one GPU pod has idled for days, and an enforcing idle-GPU policy warning 1 h ahead."""
    job = Thing("Job", "team-a", "train", "job-1", NOW - 5 * DAY, {ann.OWNER: "alice@lab.example"})
    pod = Pod("team-a", "train-x", "pod-1", job.owner_ref(), "gpu-1", "Running", NOW - 3 * DAY, 1, NOW - 3 * DAY,
              containers=(ContainerView("main", 4.0),), use=Use((0.0,), cpu=0.01))
    policy = Policy("idle-gpu", (IdleGpu(),), mode=Mode.ENFORCE,
                    lifecycle=Lifecycle(warn_before=H, remind_every=datetime.timedelta(0), action=action))
    return Cluster({job.uid: job}, {pod.uid: pod}, {"team-a": ({}, {})}), policy


def plan_on(cluster: Cluster, policies: Sequence[Policy], now: datetime.datetime) -> CyclePlan:
    return run_plan(cluster.observe(policies, now), policies, SafetyLedger(), now, PlanSettings())


def warned_after_a_failed_send(cluster: Cluster, first: Policy, then: Policy,
                               meanwhile: Mapping[str, str]) -> Notice:
    """Marked at NOW with its warning in flight; that send fails. Then `meanwhile` is written on the
    Job and the policy becomes `then`. 30 min later Slack has no such message, so the warning is
    sent again, and arrives. What the owner read."""
    [mark] = plan_on(cluster, [first], NOW).changes
    assert mark.step is Step.MARK
    cluster.write("job-1", mark.annotations)
    cluster.write("job-1", meanwhile)
    later = NOW + 30 * M
    [recover] = plan_on(cluster, [then], later).changes
    assert recover.step is Step.RECOVER
    again = resend(recover, later)
    cluster.write("job-1", again.annotations)
    cluster.write("job-1", delivered(again, Delivery("D0ALICE", f"{later.timestamp():.6f}"), then))
    assert again.notice is not None
    return again.notice


def test_a_warning_sent_again_is_never_acted_on_before_the_deadline_it_named() -> None:
    """The owner moves janitor/expires a day on while the first warning cannot be sent; the warning
    sent again names the new deadline; the Job must not be deleted before it."""
    cluster, policy = idle_job()
    told = warned_after_a_failed_send(cluster, policy, policy, {ann.DEADLINE: stamp(NOW + 30 * H)})
    at = NOW + 3 * H
    acted = lifecycle_actions(plan_on(cluster, [policy], at).actions)
    assert told.deadline is not None
    assert not (acted and at < told.deadline), \
        f"{acted[0].type} at {stamp(at)}; the only warning delivered said {told.action} at {stamp(told.deadline)}"


def test_a_warning_sent_again_is_acted_on_only_with_the_action_it_named() -> None:
    """An admin switches the policy from delete to suspend while the first warning cannot be sent,
    and back once the warning sent again arrived: the owner must not lose the Job to an action no
    message named."""
    cluster, deleting = idle_job(PolicyAction.DELETE)
    suspending = replace(deleting, lifecycle=replace(deleting.lifecycle, action=PolicyAction.SUSPEND))
    told = warned_after_a_failed_send(cluster, deleting, suspending, {})
    at = NOW + 3 * H
    acted = [a for a in lifecycle_actions(plan_on(cluster, [deleting], at).actions) if str(a.type) != told.action]
    assert not acted, f"{acted[0].type} at {stamp(at)}; the only warning delivered said {told.action}"


# -- 3. an extension never moves a deadline earlier --------------------------------------------------------

KEEPS = (-5 * H, 2 * H, 20 * H, 3 * DAY, 30 * DAY, None)  # None: unparseable


def keep_value(delta: datetime.timedelta | None, now: datetime.datetime) -> str:
    return "next friday" if delta is None else stamp(now + delta)


def expires_after(planned: CyclePlan, uid: str, notes: Mapping[str, str]) -> datetime.datetime | None:
    written = next((c.annotations[ann.DEADLINE] for c in changes_on(planned, uid) if ann.DEADLINE in c.annotations),
                   notes.get(ann.DEADLINE))
    try:
        return ann.parse_expires(written) if written else None
    except ValueError:
        return None


def warned_marks(cluster: Cluster) -> list[str]:
    everything: list[Thing | Pod] = [*cluster.objects.values(), *cluster.pods.values()]
    return [t.uid for t in everything if (mark := own_mark(t.annotations, t.uid)) is not None and mark.warned]


def reclaims(planned: CyclePlan) -> set[str]:
    return {a.target.uid for a in lifecycle_actions(decided(planned))}


@examples(1.5)
@given(case=cases("due", "due", "idle"), keeps=st.lists(st.sampled_from(KEEPS), min_size=6, max_size=6),
       changed=st.lists(st.sampled_from(KEEPS), min_size=6, max_size=6), change_at=st.integers(0, 8),
       offset=st.sampled_from(OFFSETS), script=scripts(8, quiet=True))
def test_an_owners_extension_never_moves_a_deadline_earlier(
        case: Case, keeps: list, changed: list, change_at: int, offset: datetime.timedelta, script: tuple) -> None:
    """For marked, warned workloads: with janitor/keep-until added (or changed later), janitor/expires
    is never earlier and the reclaim never comes sooner than without it, cycle after cycle."""
    focus = warned_marks(case.cluster)
    without, with_keep = case.cluster.copy(), case.cluster.copy()
    for i, uid in enumerate(focus):
        without.notes(uid).pop(ann.KEEP_UNTIL, None)  # type: ignore[union-attr]
        with_keep.notes(uid)[ann.KEEP_UNTIL] = keep_value(keeps[i % 6], NOW)  # type: ignore[index]

    # One cycle, at any time.
    now = NOW + offset
    plain = run_plan(without.observe(case.policies, now), case.policies, SafetyLedger(), now, case.settings)
    kept = run_plan(with_keep.observe(case.policies, now), case.policies, SafetyLedger(), now, case.settings)
    for uid in focus:
        before = expires_after(plain, uid, without.notes(uid) or {})
        after = expires_after(kept, uid, with_keep.notes(uid) or {})
        if before is not None and after is not None:
            assert after >= before, f"keep-until moved janitor/expires of {uid} from {stamp(before)} to {stamp(after)}"
        d0 = next((c.deadline for c in changes_on(plain, uid) if c.deadline is not None), None)
        d1 = next((c.deadline for c in changes_on(kept, uid) if c.deadline is not None), None)
        if d0 is not None and d1 is not None:
            assert d1 >= d0, f"keep-until moved the deadline in force of {uid} from {stamp(d0)} to {stamp(d1)}"
        assert uid not in reclaims(kept) or uid in reclaims(plain), f"keep-until got {uid} reclaimed sooner"

    # Cycle after cycle, with every warning delivered, and the owner changing keep-until on the way.
    runs = [Simulator(c, list(case.policies), case.settings, run_plan, run_recheck) for c in (without, with_keep)]
    first_reclaim: list[dict[str, datetime.datetime]] = [{}, {}]
    for n, step in enumerate(script):
        if n == change_at:
            for i, uid in enumerate(focus):
                runs[1].cluster.write(uid, {ann.KEEP_UNTIL: keep_value(changed[i % 6], runs[1].now)})
        planned = [sim.cycle(step, lambda *_: None) for sim in runs]
        for i in (0, 1):
            for uid in reclaims(planned[i]):
                first_reclaim[i].setdefault(uid, runs[i].now - step.advance)
        for uid in focus:
            if uid in first_reclaim[1]:
                assert uid in first_reclaim[0] and first_reclaim[0][uid] <= first_reclaim[1][uid], \
                    f"keep-until got {uid} reclaimed at {stamp(first_reclaim[1][uid])}, sooner than without it"
            notes = runs[0].cluster.notes(uid), runs[1].cluster.notes(uid)
            if notes[0] is not None and notes[1] is not None and own_mark(notes[0], uid) and own_mark(notes[1], uid):
                base, extended = (ann.parse_expires(n[ann.DEADLINE]) for n in notes)
                assert extended >= base, (f"janitor/expires of {uid} is {stamp(extended)} with keep-until, "
                                          f"{stamp(base)} without it")


# -- 4. a mark belongs to the object it was written on -------------------------------------------------------


def everything(observation: Observation) -> list[ObjectView]:
    listed = {o.ref.uid for o in observation.objects}
    return list(observation.objects) + [pod_object(p) for p in observation.pods if p.ref.uid not in listed]


@examples(2.0)
@given(case=cases("any", "any", "due"))
def test_a_mark_belongs_to_the_object_it_was_written_on(case: Case) -> None:
    """A copy of a mark (janitor/marked-uid names another object) is never acted on and is removed,
    silently, unless the object's controller is the one it names and still carries its own mark;
    and no subset of a mark's keys is ever taken for a user's janitor/expires."""
    for observation, planned, _ in cycles(case):
        assert_marks_belong(case, observation, planned)


def assert_marks_belong(case: Case, observation: Observation, planned: CyclePlan) -> None:
    views = {o.ref.uid: o for o in observation.objects}
    protected = case.settings.rails.protected_namespaces
    lifecycle_sees = {u.uid for u in units(observation, case.settings) if u.known}
    for obj in everything(observation):
        uid, notes = obj.ref.uid, obj.annotations
        mark = ann.read_mark(notes)
        if ann.EXPIRES in notes and ann.carries_mark(notes):
            expired = [a for a in decided(planned) if a.target.uid == uid and a.rule == "expires"]
            beside = sorted(set(notes) & set(ann.JANITOR_ONLY_KEYS))
            assert not expired, f"{obj.ref}: janitor/expires beside {beside} taken for a user's expiry"
        if mark is None or mark.uid is None or mark.uid == uid:
            continue
        acted = [a for a in decided(planned) if a.target.uid == uid and a.rule in ("lifecycle", "expires")]
        assert not acted, f"{obj.ref} acted on for a mark written on {mark.uid}: {acted[0].why}"
        if blind(observation):
            assert all(c.step is Step.WAIT for c in changes_on(planned, uid))
            continue
        if obj.deleting or namespace_of(obj.ref) in protected or (uid not in views and uid not in lifecycle_sees):
            assert not changes_on(planned, uid)
            continue
        source = views.get(obj.controller.uid) if obj.controller is not None else None
        own = ann.read_mark(source.annotations) if source is not None and source.ref.uid == mark.uid else None
        kept = source is not None and own is not None and own.uid == source.ref.uid
        steps = [c.step for c in changes_on(planned, uid)]
        # A kept copy loses only a janitor/expires its source no longer has (an older mark's deadline,
        # copied before it moved): the controller never removes it, and kube-janitor would delete on it.
        stale = kept and ann.EXPIRES in notes and source is not None and ann.EXPIRES not in source.annotations
        assert steps == ([Step.WAIT] if kept and not stale else [Step.DROP_COPY]), \
            f"{obj.ref} (a copy of {mark.uid}'s mark): {steps}"
        if stale:
            REACHED["a copy's stale janitor/expires removed"] += 1
            assert dict(changes_on(planned, uid)[0].annotations) == {ann.EXPIRES: None}
        elif not kept:
            [drop] = changes_on(planned, uid)
            # An older mark's janitor/expires is its deadline, removed with it whoever wrote it last.
            older = ann.DEADLINE not in notes and ann.EXPIRES in notes
            removed = {k: None for k in (*ann.MARK_KEYS, *((ann.EXPIRES,) if older else ())) if k in notes}
            assert dict(drop.annotations) == removed and drop.notice is None


@examples(1.5)
@given(case=cases("any", "any", "due"))
def test_a_mark_is_removed_only_on_positive_evidence(case: Case) -> None:
    loaded = {p.name for p in case.policies}
    for observation, planned, _ in cycles(case):
        untraced = {u.namespace for u in units(observation, case.settings) if not u.known}
        for change in planned.changes:
            if change.step is not Step.UNMARK or change.why.code is not Code.NO_LONGER_COVERED:
                continue
            assert not (change.policy in loaded and change.workload.namespace in untraced), (
                f"{change.workload}: mark of loaded policy {change.policy} removed as no longer covered while "
                f"pods of {change.workload.namespace} could not be traced")


# -- 5. protected namespaces and honoured opt-outs -----------------------------------------------------------


@examples(2.5)
@given(case=cases("any", "any", "due"))
def test_protected_namespaces_and_honoured_opt_outs_are_left_alone(case: Case) -> None:
    """Nothing in a protected namespace is acted on or written to. An opted-out object (its own
    janitor/opt-out or its namespace's) is never acted on by the plain path while the rails honour
    opt-outs, nor by a policy that honours them, and such a policy writes nothing on it but the
    removal of the janitor's own mark. The plain path never acts on a mark's janitor/expires."""
    for observation, planned, _ in cycles(case):
        assert_left_alone(case, observation, planned)


def assert_left_alone(case: Case, observation: Observation, planned: CyclePlan) -> None:
    rails = case.settings.rails
    policies = {p.name: p for p in case.policies}
    for action in decided(planned):
        assert namespace_of(action.target) not in rails.protected_namespaces, f"{action.type} of {action.target}"
    for change in planned.changes:
        assert change.workload.namespace not in rails.protected_namespaces, f"{change.step} on {change.workload}"

    by_uid = {o.ref.uid: o for o in observation.objects}

    def out(uid: str) -> bool:
        """Opted out itself, by its namespace, or (a Job that is the workload) by its CronJob."""
        view = view_of(observation, uid)
        assert view is not None
        return cron_opted_out(view) or opted_out(view.annotations,
                                                 observation.namespaces.get(namespace_of(view.ref) or ""))

    def cron_opted_out(view: ObjectView) -> bool:
        cron = by_uid.get(view.controller.uid) if view.controller is not None else None
        return cron is not None and cron.ref.kind == "CronJob" and view.ref.kind == "Job" and (
            case.settings.cronjob_mode is CronJobMode.JOB or cron.suspended) and opted_out(cron.annotations, None)

    REACHED["a Job opted out by its CronJob"] += sum(cron_opted_out(o) for o in observation.objects)

    for action in decided(planned):
        if action.trigger is TriggerKind.EXPIRY:
            assert not (rails.honour_opt_out and out(action.target.uid)), \
                f"{action.type} ({action.rule}) of opted-out {action.target}"
            view = view_of(observation, action.target.uid)
            assert view is not None
            assert not (action.rule == "expires" and ann.carries_mark(view.annotations)), \
                f"the plain path deleted {action.target} on the janitor's own mark"
        else:
            policy = policies[action.policy]
            assert not (policy.lifecycle.honour_opt_out and out(action.target.uid)), \
                f"{action.type} of opted-out {action.target} by {policy.name}, which honours opt-outs"
    for change in planned.changes:
        policy = policies.get(change.policy)
        if policy is None or not policy.lifecycle.honour_opt_out or not out(change.workload.uid):
            continue
        removes_only = all(v is None and k in ann.MARK_READ_KEYS for k, v in change.annotations.items())
        if change.step is Step.MOVE:  # an older mark's deadline out of kube-janitor's reach: the same time
            notes = view_of(observation, change.workload.uid)
            assert notes is not None and change.annotations.get(ann.DEADLINE) in (
                None, notes.annotations.get(ann.EXPIRES), *(
                    ann.format_deadline(w.deadline) for w in [ann.WarnedOf.parse(notes.annotations.get(
                        ann.WARNED_OF, ""))] if w is not None)), f"{change} on opted-out {change.workload}"
            REACHED["an opted-out workload's older mark moved out of kube-janitor's reach"] += 1
            continue
        assert change.step in (Step.WAIT, Step.UNMARK, Step.DROP_COPY) and removes_only, \
            f"{change.step} {dict(change.annotations)} on opted-out {change.workload} by {policy.name}"
        assert change.notice is None or change.notice.kind is ann.NoticeKind.CANCELLED


# The smallest cases the property above found (they fail while the janitor has the bug).


def test_a_stuck_pod_that_opted_out_is_never_force_deleted() -> None:
    """A Deployment's pod annotated janitor/opt-out: "true" is stuck Terminating on a node an admin
    marked out of service; the terminating policy force-deletes, and honours opt-outs."""
    deploy = Thing("Deployment", "team-b", "web", "deploy-1", NOW - DAY, replicas=1)
    rs = Thing("ReplicaSet", "team-b", "web-7d9f", "rs-1", NOW - DAY, controller=deploy.owner_ref(), replicas=1)
    pod = Pod("team-b", "web-7d9f-x", "pod-1", rs.owner_ref(), "gpu-2", "Running", NOW - 2 * H, 1, NOW - 2 * H,
              annotations={ann.OPT_OUT: "true"}, deleting=True, state=PodState(deleting_since=NOW - H))
    node = NodeInfo("gpu-2", taints=(("node.kubernetes.io/out-of-service", "", "NoExecute"),))
    cluster = Cluster({deploy.uid: deploy, rs.uid: rs}, {pod.uid: pod}, {"team-b": ({}, {})}, (node,))
    policy = Policy("stuck", (Terminating(after=10 * M, force_delete=True),), mode=Mode.ENFORCE)
    assert policy.lifecycle.honour_opt_out
    acted = [a for a in plan_on(cluster, [policy], NOW).actions if a.target.uid == "pod-1"]
    assert not acted, f"{acted[0].type} of a pod annotated janitor/opt-out: {acted[0].why}"


def test_an_opted_out_controller_gets_no_report_about_its_pod_template() -> None:
    """A StatefulSet annotated janitor/opt-out: "true" carries janitor/ttl in its pod template, so its
    (listed) pods inherit it; the rails honour opt-outs, so nothing may be posted or written on it."""
    sts = Thing("StatefulSet", "team-b", "db", "sts-1", NOW - DAY, {ann.OPT_OUT: "true"},
                template={ann.TTL: "1h"}, replicas=1)
    pod = Pod("team-b", "db-0", "pod-1", sts.owner_ref(), "cpu-1", "Running", NOW - 2 * H, 0, NOW - 2 * H,
              annotations={ann.TTL: "1h"})
    cluster = Cluster({sts.uid: sts}, {pod.uid: pod}, {"team-b": ({}, {})}, pods_listed=True)
    acted = [a for a in plan_on(cluster, [], NOW).actions if a.target.uid == "sts-1"]
    assert not acted, f"{acted[0].type} ({acted[0].reason}) on an opted-out StatefulSet: {acted[0].why}"


# -- 6. the precedence table -----------------------------------------------------------------------------------


@examples(2.5)
@given(case=cases())
def test_the_precedence_table_holds(case: Case) -> None:
    """docs/policies.md, "Precedence", column by column: which policy evaluates a workload (rows
    1-3: protected, opted out for a policy that honours it or not; others: the first match per
    trigger), what the plain TTL/expiry path deletes (never in a protected namespace, an honoured
    opt-out, `forever`, a mark or a controller's copy; a passed user TTL or expiry otherwise), and
    what the lifecycle may do (never marks over a user's janitor/expires, waits for keep-until within
    maxExtension, nothing in shadow mode); the rails on top (dry-run, caps)."""
    for observation, planned, now in cycles(case):
        assert_precedence(case, observation, planned, now)


def assert_precedence(case: Case, observation: Observation, planned: CyclePlan, now: datetime.datetime) -> None:
    policies = {p.name: p for p in case.policies}
    rails = case.settings.rails
    if blind(observation):  # row 0: no sight, no verdict
        assert planned.findings == () and not decided(planned)
        return

    # Which policy evaluates what (rows 1-3, 8): the first match per trigger, opt-outs honoured.
    found = {(str(f.trigger), f.policy, f.subject.uid, f.known) for f in planned.findings
             if f.trigger is not TriggerKind.EXPIRY}
    assert found == expected_findings(observation, case.policies, case.settings, now)

    # The plain TTL/expiry path (rows 1-8).
    deleted = {a.target.uid: a.rule for a in decided(planned)
               if a.trigger is TriggerKind.EXPIRY and a.type is ActionType.DELETE}
    assert deleted == expected_expiry_deletions(observation, case.settings, now)

    # The lifecycle (rows 5, 7) and shadow mode.
    reclaimed = {a.target.uid for a in lifecycle_actions(decided(planned))}
    for unit in units(observation, case.settings):
        if not unit.known or unit.view is None:
            continue
        notes = unit.view.annotations
        steps = [c.step for c in changes_on(planned, unit.uid)]
        if ann.EXPIRES in notes and not ann.carries_mark(notes):
            assert Step.MARK not in steps and unit.uid not in reclaimed, \
                f"marked over a user's janitor/expires: {steps}"
        mark = own_mark(notes, unit.uid, unit.view.foreign_marks)
        policy = policies.get(mark.policy or "") if mark is not None else None
        if mark is None or policy is None:
            continue
        # No cap (none allowed, or counted from keys someone else wrote): no keep-until is honoured.
        until = kept_until(notes.get(ann.KEEP_UNTIL),
                           keep_cap(mark.marked_at, policy.lifecycle.max_extension, trusted=mark.cap_trusted))
        if until is None:
            continue
        assert not (unit.uid in reclaimed and now < until), f"reclaimed before keep-until {stamp(until)}"
        for change in changes_on(planned, unit.uid):
            if change.step is Step.EXTEND:
                assert ann.parse_expires(str(change.annotations[ann.DEADLINE])) >= until
    for change in planned.changes:
        shadow = change.policy in policies and policies[change.policy].mode is Mode.SHADOW
        assert not (shadow and change.step in WRITING), \
            f"shadow policy {change.policy}: {change.step} {change.workload}"
    for action in decided(planned):
        assert action.policy not in policies or policies[action.policy].mode is Mode.ENFORCE, \
            f"shadow policy {action.policy}: {action.type} {action.target}"

    # The rails on top of every row.
    destructive = [a for a in planned.actions if a.type is not ActionType.REPORT]
    if rails.dry_run:
        assert destructive == []
    assert len(destructive) <= rails.caps.per_hour
    per_namespace: dict[str | None, int] = {}
    for action in destructive:
        per_namespace[action.target.namespace] = per_namespace.get(action.target.namespace, 0) + 1
    assert all(n <= rails.caps.per_namespace_per_hour for n in per_namespace.values())


# -- plan() is a pure function ----------------------------------------------------------------------------------


@examples(1.0)
@given(case=cases())
def test_quota_is_called_held_only_with_no_pod_working(case: Case) -> None:
    """docs/policies.md, "reservedQuota": quota is called held with no pods only on a Workload whose
    conditions were read, active, holding quota for `after`, while no pod of its workload runs, waits
    or is Terminating, and no pod of its namespace whose owners cannot be read does."""
    policies = {p.name: p for p in case.policies}
    for observation, planned, now in cycles(case):
        by_uid = {o.ref.uid: o for o in observation.objects}
        working = {u.uid: [p for p in u.pods if p.phase not in ("Succeeded", "Failed")]
                   for u in units(observation, case.settings)}
        for f in planned.findings:
            if f.trigger is not TriggerKind.RESERVED_QUOTA:
                continue
            if f.state is State.CLEAR and f.reason.code is Code.QUOTA_PODS:
                REACHED["quota held while a pod runs or waits, kept"] += 1
            if f.state is not State.FIRES:
                continue
            REACHED["quota held with no pods, called so"] += 1
            trigger = policies[f.policy].trigger(ReservedQuota)
            queued = by_uid[f.subject.uid].queued
            assert trigger is not None and queued is not None and f.known
            assert queued.found and queued.active and not queued.status_problem, f"{f.subject}: {f.reason}"
            assert not queued.finished and not queued.elsewhere, f"{f.subject}: {f.reason}"
            assert queued.evicted or by_uid[f.subject.uid].suspended, f"{f.subject} runs: {f.reason}"
            quiet = max([queued.reserved_since, *([queued.stopped_at] if queued.stopped_at else [])])
            assert queued.reserved_since is not None and now - quiet >= trigger.after
            assert queued.reserved_since is not None and now - queued.reserved_since >= trigger.after
            assert not working.get(f.subject.uid), f"{f.subject} called held beside {working[f.subject.uid]}"
            strays = [uid for uid, pods in working.items() if uid not in by_uid and pods
                      and pods[0].ref.namespace == f.subject.namespace]
            assert not strays, f"{f.subject} called held beside pods whose owners cannot be read: {strays}"


@examples(0.5)
@given(case=cases(), offset=st.sampled_from(OFFSETS))
def test_plan_is_a_pure_function(case: Case, offset: datetime.timedelta) -> None:
    """The same observation, policies, ledger, time and settings give the same plan, and plan()
    changes none of them."""
    now = NOW + offset
    observation = case.cluster.observe(case.policies, now)
    kept = copy.deepcopy((observation, case.policies, case.settings))
    first = run_plan(observation, case.policies, SafetyLedger(), now, case.settings)
    second = run_plan(case.cluster.observe(case.policies, now), case.policies, SafetyLedger(), now, case.settings)
    assert first == second
    assert (observation, case.policies, case.settings) == kept


# -- busy peaks sent alone --------------------------------------------------------------------------------


def _busy(peak: float | None, level: float) -> bool:
    return peak is not None and level < peak < DCGM_SENTINEL


def busy_peaks_alone(observation: Observation, policies: Sequence[Policy]) -> Observation:
    """The observation as the janitor reads it when Prometheus sends a busy GPU's or pod's peak
    alone (`observe.evidence._busy_first`): no samples, no scrape interval, the whole window a gap
    (what the fold makes of a lone peak). kube-state-metrics' CPU requests are the pods' own."""
    need = needs(policies)
    requests = {PodKey(p.ref.namespace or "", p.ref.name): p.containers for p in observation.pods}
    gpu = dict(observation.evidence.gpu)
    for key, read in gpu.items():
        level = need.gpu_busy_above.get(key)
        if level is not None and not read.failed:
            alone = Quality(None, read.window.window, False)
            gpu[key] = replace(read, pods={k: tuple(replace(s, samples=0, quality=alone) if _busy(s.peak, level) else s
                                                    for s in series) for k, series in read.pods.items()})
    cpu = dict(observation.evidence.cpu)
    for key, found in cpu.items():
        (_, ignored), above, fraction = key, need.cpu_busy_above.get(key), need.cpu_busy_fraction.get(key)
        if found.failed or (above is None and fraction is None):
            continue
        alone = Quality(None, found.window.window, False)
        lean = {}
        for pod, usage in found.pods.items():
            request = sum(c.cpu_request_cores for c in requests.get(pod, ()) if c.name not in ignored)
            level = above if above is not None else (fraction or 0.0) * request
            lean[pod] = replace(usage, samples=0, quality=alone) if _busy(usage.peak_cores, level) else usage
        cpu[key] = replace(found, pods=lean)
    return replace(observation, evidence=replace(observation.evidence, gpu=gpu, cpu=cpu))


def verdicts(planned: CyclePlan) -> tuple[object, ...]:
    return (sorted((f.policy, str(f.trigger), f.subject.uid, str(f.state)) for f in planned.findings),
            sorted((str(c.step), c.workload.uid) for c in planned.changes),
            sorted((str(a.type), a.target.uid) for a in planned.actions))


@examples(1.0)
@given(case=cases())
def test_busy_peaks_sent_alone_change_no_verdict(case: Case) -> None:
    """Leaving out the quality rows of whatever is busy above every threshold that reads it (the
    usage queries' lean answers) changes no finding, lifecycle step or action: busy beats unknown."""
    for observation, planned, now in cycles(case):
        lean = run_plan(busy_peaks_alone(observation, case.policies), case.policies, SafetyLedger(), now,
                        case.settings)
        assert verdicts(lean) == verdicts(planned)


# -- pods that wait for a node, and pods stuck Terminating ------------------------------------------------------


SETTLE, RECENT = 4 * M, 15 * M  # docs/policies.md, "Never fits": said again after 4 min, last within 15 min


def autoscaler_proves_never(observation: Observation, pod: PodView, now: datetime.datetime) -> bool:
    """Every autoscaler that spoke of the pod, and every one running, last said never, settled and recent."""
    notes = observation.autoscaler.get(pod.ref.uid, ())
    sources = {n.source for n in notes} | set(observation.autoscaling.sources)
    newest = {src: max((n for n in notes if n.source == src), key=lambda n: n.last or NOW - 400 * DAY, default=None)
              for src in sources}
    return bool(newest) and all(
        n is not None and n.said is Said.NEVER and n.first is not None and n.last is not None
        and n.last - n.first >= SETTLE and abs(now - n.last) <= RECENT for n in newest.values())


@examples(5.0)
@given(case=cases("pending", "pending", "any"))
def test_a_pod_waiting_for_a_node_is_stuck_only_after_its_time(case: Case) -> None:
    """A Pending pod is stuck (fires) before `after` only when no node could ever run it: where
    nodes can be added (an autoscaler is present, or spoke of the pod), only on the autoscaler's
    own, settled and recent word that none it adds could; a GPU pool scaled to zero is waiting."""
    settled = 0
    for observation, planned, now in cycles(case):
        pods = {p.ref.uid: p for p in observation.pods}
        policies = {p.name: p for p in case.policies}
        for finding in planned.findings:
            if finding.trigger is not TriggerKind.PENDING:
                continue
            after = policies[finding.policy].trigger(Pending).after  # type: ignore[union-attr]
            for judged in finding.pods:
                pod = pods[judged.pod.uid]
                since = pod.state.scheduled_changed
                early = since is None or now - since < after
                autoscaled = observation.autoscaling.present or pod.ref.uid in observation.autoscaler
                codes = judged.why.codes()
                if autoscaled and early and judged.state is not State.FIRES and not any(
                        p.gpus and n.allocatable.get("nvidia.com/gpu", 0) for p in [pod] for n in observation.nodes):
                    REACHED["a pod waiting for a node an autoscaler may add, not stuck yet"] += 1
                if judged.state is State.FIRES and Code.AUTOSCALER_NEVER in codes:
                    REACHED["a pod no node will ever run, on the autoscaler's settled word"] += 1
                    settled += 1
                if judged.state is not State.FIRES or not early:
                    continue
                assert Code.NEVER_FITS in codes, f"{pod.ref.name} stuck before {after}: {judged.why}"
                if autoscaled:
                    assert Code.AUTOSCALER_NEVER in codes and autoscaler_proves_never(observation, pod, now), (
                        f"{pod.ref.name} never fits while nodes can be added, without the autoscalers' settled "
                        f"word: {judged.why}; they said {observation.autoscaler.get(pod.ref.uid)}")
    target(float(settled), label="never, on the autoscalers' settled word")  # steer towards the rare case


def agent_proves_gone(pod: PodView, node: NodeInfo, now: datetime.datetime) -> bool:
    """docs/policies.md, force delete: a Ready node whose agent says False, sees other pods'
    processes, started before the deletion, scanned enough and since it, recently, and saw the pod gone."""
    agent, since = node.agent, pod.state.deleting_since
    if agent is None or since is None or node.ready is not True or agent.status is not False:
        return False
    run, sight = agent.message.agent, agent.message.sight
    return (run is not None and sight is not None and sight.visible >= 1 and run.started < since
            and run.scans >= run.sustain and run.scanned > since and abs(now - run.scanned) <= 2 * M
            and agent.message.state(pod.ref.uid) is PodTaskState.GONE)


@examples(8.0)
@given(case=cases("stuck", "stuck", "any"))
def test_a_pod_is_force_deleted_only_on_positive_proof(case: Case) -> None:
    """A force delete needs positive evidence that nothing of the pod is alive: its node deleted,
    tainted out of service by an admin, or a node agent that proves it (and can see pods at all);
    never with finalizers, never a StatefulSet's pod."""
    proved_count = 0
    for observation, planned, now in cycles(case):
        pods = {p.ref.uid: p for p in observation.pods}
        nodes = {n.name: n for n in observation.nodes}
        forced = {a.target.uid for a in decided(planned) if a.type is ActionType.FORCE_DELETE}
        for uid in forced:
            pod = pods[uid]
            node = nodes.get(pod.node or "")
            assert not pod.state.finalizers and not (pod.controller and pod.controller.kind == "StatefulSet")
            deleted = node is None and observation.nodes_known and bool(pod.node)
            fenced = node is not None and any(k == "node.kubernetes.io/out-of-service" for k, _, _ in node.taints)
            proved = node is not None and agent_proves_gone(pod, node, now)
            assert deleted or fenced or proved, f"{pod.ref.name} force deleted without proof (node {node})"
            if proved and not fenced:
                REACHED["force deleted on the node agent's proof"] += 1
                proved_count += 1
        for pod in observation.pods:
            node = nodes.get(pod.node or "")
            agent = node.agent if node is not None else None
            if agent is not None and agent.message.state(pod.ref.uid) is PodTaskState.GONE and (
                    agent.message.sight is None or not agent.message.sight.proven) and pod.ref.uid not in forced:
                REACHED["a pod reported gone by an agent that cannot see, not force deleted"] += 1
    target(float(proved_count), label="force deletes on an agent's proof")  # steer towards the rare case


# -- the budget (last in this module) ---------------------------------------------------------------------------


def test_the_default_run_reaches_its_cycle_budget(request: pytest.FixtureRequest) -> None:
    """Each plan() and still_due() call is one cycle; the properties together decide at least
    CYCLES_PER_RUN of them (checked when the whole module ran and every property held)."""
    module = sys.modules[__name__]
    selected = {item.originalname for item in request.session.items if getattr(item, "module", None) is module}
    everyone = {name for name in vars(module) if name.startswith("test_")}
    if selected != everyone:
        pytest.skip("only some of this module's tests were selected")
    if HELD != PROPERTIES:
        pytest.skip(f"not every property held ({', '.join(sorted(PROPERTIES - HELD))}): their examples stopped early")
    assert CYCLES >= CYCLES_PER_RUN, f"{CYCLES} cycles decided, fewer than {CYCLES_PER_RUN}"
    missed = {what: REACHED[what] for what, least in SITUATIONS.items() if REACHED[what] < least}
    assert not missed, f"the generators reached these situations too seldom: {missed} (all: {dict(REACHED)})"
