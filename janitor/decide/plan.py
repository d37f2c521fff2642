"""One cycle's decision: `plan(observation, policies, ledger, now) -> CyclePlan`, pure.

It reads top-down, as kube-janitor's cycle does:

1. selection: which objects the plain path may judge, and the workloads the pods belong to;
2. every trigger, each with its one signature, on what the policy governing it selects (the pods'
   workloads; for reservedQuota, what Kueue admits, pods or none; for orphanedClaim, DRA claims);
3. the lifecycle on every workload's findings (busy on any signal beats idle on another);
4. the rails on everything that deletes or reclaims: caps, tripwire, dry-run, clock skew;
5. the admins' report.

`decide` is steps 1-3 alone: the re-check right before acting (decide/recheck.py) runs exactly
it on a fresh, scoped observation, so the rules that decided an action are the rules that
confirm it. No clock is read: `now` is the caller's, and deadlines are compared with the
apiserver's time from the observation when it is known.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from janitor.decide import held, lifecycle, neighbours, selection, sight, usage
from janitor.decide.admin_report import AdminReport, admin_report
from janitor.decide.attribution import any_candidate
from janitor.decide.claims import lingering
from janitor.decide.evidence import PodKey
from janitor.decide.governance import Governance
from janitor.decide.holder_notices import HolderNotice, believed, holder_notices
from janitor.decide.lifecycle import Change, LifecycleSettings, Step
from janitor.decide.model import (
    EXPIRY_POLICY,
    Action,
    ActionType,
    Deletion,
    Finding,
    ObjectRef,
    ObjectView,
    Observation,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.owners import DEFAULT_OWNER_KEYS, Owner, find_owner
from janitor.decide.rails import Held, HoldReason, Rails, apply_rails, clock_skew, is_tripped
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import CronJobMode, Workload
from janitor.decide.triggers import expiry, registry
from janitor.decide.triggers.spec import Cycle
from janitor.node_report import HeldGpu
from janitor.policy.model import IdleCpu, IdleGpu, Mode, Policy

EXPIRY = Policy(EXPIRY_POLICY, (), description="janitor/ttl and janitor/expires (kube-janitor's annotations)",
                mode=Mode.ENFORCE, source="annotations")
_ENDLESS = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class PlanSettings:
    """What deciding needs besides the policies (built from the daemon's settings once)."""

    rails: Rails = field(default_factory=Rails)
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    cronjob_mode: CronJobMode = CronJobMode.JOB
    owner_keys: tuple[tuple[str, str], ...] = DEFAULT_OWNER_KEYS
    state: tuple[str, str] = ("kube-idle-janitor", "janitor-state")  # the ledger's ConfigMap, for admins' commands
    claims_after: datetime.timedelta = datetime.timedelta(minutes=10)  # DRA claims with no consumer: reported after


@dataclass(frozen=True)
class Decision:
    """Steps 1-3: what was found, what the lifecycle writes and sends, and what is due."""

    now: datetime.datetime  # the time deadlines were compared with
    findings: tuple[Finding, ...]
    changes: tuple[Change, ...]
    due: tuple[Action, ...]  # deletions, reclaims and force deletes, most overdue first
    reports: tuple[Action, ...]  # Warning Events for malformed or misplaced annotations

    def still_due(self, key: tuple[str, ActionType, str]) -> Action | None:
        return next((a for a in self.due if a.key == key), None)


@dataclass(frozen=True)
class CyclePlan:
    """One cycle's plan: what `act` applies, and everything the CLI, metrics and logs show."""

    now: datetime.datetime
    actions: tuple[Action, ...]  # what act applies, in order: reports, then what the rails let through
    held: tuple[Held, ...]
    changes: tuple[Change, ...]  # the lifecycle's writes and messages (ACT ones go with their action)
    findings: tuple[Finding, ...]
    ledger: SafetyLedger  # the ledger to store after this cycle (deletions not yet added)
    notices: tuple[str, ...] = ()  # what admins must hear about (tripwire, skew, kinds not listed)
    tripped_now: bool = False  # the tripwire tripped in this cycle (announce it once)
    admin_report: AdminReport = field(default_factory=AdminReport)
    silent_gpu_pods: tuple[PodView, ...] = ()
    evidence_failures: tuple[str, ...] = ()
    skew_seconds: float | None = None  # the janitor's clock minus the apiserver's, when the latter is known
    blind: Reason | None = None  # why this cycle changes nothing: pods or namespaces could not be read
    beside: tuple[ObjectRef, ...] = ()  # where kube-janitor runs beside the janitor (decide.neighbours)
    paused: HoldReason | None = None  # the rail that stops every deletion this cycle, due or not
    holder_notices: tuple[HolderNotice, ...] = ()  # owners of deleted pods whose processes hold GPUs

    def deletions(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.type is ActionType.DELETE)

    def change_for(self, action: Action) -> Change | None:
        return self._acts.get(action.key)

    @functools.cached_property
    def _acts(self) -> dict[tuple[str, ActionType, str], Change]:
        """The first ACT change per action key: `change_for` is asked once per action applied."""
        acts: dict[tuple[str, ActionType, str], Change] = {}
        for c in self.changes:
            if c.step is Step.ACT and c.action is not None:
                acts.setdefault(c.action.key, c)
        return acts


def _expiry(observation: Observation, gate: selection.Gate, by_uid: Mapping[str, ObjectView],
            now: datetime.datetime, deleted: Mapping[str, Deletion]) -> list[Finding]:
    subjects: list[ObjectView] = []
    found: list[Finding] = []
    for obj in observation.objects:
        skipped = gate(obj)
        if skipped is not None:
            found.append(Finding(TriggerKind.EXPIRY, EXPIRY.name, Mode.ENFORCE, obj.ref, State.SKIPPED, skipped,
                                 rule="rails"))
        elif obj.readings.rules:  # a janitor/ttl or janitor/expires, parsed when its view was built
            subjects.append(obj)
    return found + expiry.judged(subjects, by_uid, EXPIRY, now, deleted)


def _pod_triggers(workloads: Sequence[Workload], observation: Observation, policies: Sequence[Policy],
                  now: datetime.datetime) -> list[Finding]:
    found: list[Finding] = []
    governance = Governance(policies)
    for trigger in registry.POD_TRIGGERS:
        assert trigger.pods is not None and trigger.policy is not None
        governed: dict[str, tuple[Policy, list[Workload]]] = {}
        for workload in workloads:
            if not workload.candidate and not trigger.daemonsets:
                continue  # DaemonSet pods: only their stuck Terminating pods are reported
            pods = trigger.pods(workload)
            policy = governance.governing(trigger.policy, workload, pods) if pods else None
            if policy is not None:
                governed.setdefault(policy.name, (policy, []))[1].append(workload)
        for policy, members in governed.values():
            found.extend(trigger.findings(members, observation, policy, now))
    return found


def _one_deletion_per_object(findings: Sequence[Finding]) -> list[Action]:
    """An object with both a passed TTL and a passed expiry is deleted once, by the earliest rule."""
    best: dict[str, Finding] = {}
    for f in findings:
        if f.proposal is not None and f.proposal.type is ActionType.DELETE:
            kept = best.get(f.subject.uid)
            if kept is None or (f.deadline or _ENDLESS, f.rule) < (kept.deadline or _ENDLESS, kept.rule):
                best[f.subject.uid] = f
    ordered = sorted(best.values(), key=lambda f: (f.deadline or _ENDLESS, str(f.subject)))
    return [f.proposal for f in ordered if f.proposal is not None]


def _reports(findings: Sequence[Finding], by_uid: Mapping[str, ObjectView], gate: selection.Gate) -> list[Action]:
    """Several pods inheriting one template give one report on their controller; nothing is
    reported on an object the rails leave alone (a pod's controller may be opted out)."""
    merged: dict[str, Action] = {}
    for f in findings:
        action = f.proposal
        if action is None or action.type is not ActionType.REPORT:
            continue
        target = by_uid.get(action.target.uid)
        if target is None or gate(target) is not None:
            continue
        previous = merged.get(action.target.uid)
        if previous is None:
            merged[action.target.uid] = action
        elif action.report_key and previous.report_key and action.report_key not in previous.report_key:
            lines = set(previous.report_key.splitlines()) | set(action.report_key.splitlines())
            merged[action.target.uid] = Action(
                previous.type, previous.target, previous.resource_version, previous.policy, previous.trigger,
                previous.rule, previous.reason, previous.why, previous.evidence, "\n".join(sorted(lines)))
    return list(merged.values())


def decide(observation: Observation, policies: Sequence[Policy], now: datetime.datetime,
           settings: PlanSettings = PlanSettings(), deleted: Mapping[str, Deletion] | None = None) -> Decision:
    """Steps 1-3 of a plan: findings, the lifecycle's changes, and what is due (before the rails).
    `deleted`: what expiries deleted lately (the ledger's, by "Kind/namespace/name")."""
    now = observation.at or now
    rails = settings.rails
    by_uid = {o.ref.uid: o for o in observation.objects}
    gate = selection.Gate(observation, rails)
    blind = sight.lost(observation)
    if blind is not None:
        seen = gate.unprotected(observation.objects)
        return Decision(now, (), sight.hold(seen, blind), (), ())
    workloads = selection.workloads(observation, rails, cronjob_mode=settings.cronjob_mode,
                                    owner_keys=settings.owner_keys, by_uid=by_uid)
    expired = _expiry(observation, gate, by_uid, now, deleted or {})
    found = _pod_triggers(workloads, observation, policies, now)
    found += usage.findings(workloads, found, observation, policies, now)
    # Triggers whose subjects are objects of their own (what Kueue admits, DRA claims), pods or none.
    judging = Cycle(workloads, observation, policies, now, gate, by_uid, settings.cronjob_mode, settings.owner_keys)
    podless: list[Workload] = []
    for trigger in registry.OBJECT_TRIGGERS:
        assert trigger.subjects is not None
        more, subjects = trigger.subjects(judging)
        found += more
        podless.extend(subjects)
    objects = gate.unprotected((*observation.objects, *registry.objects(observation, policies)))
    owners = {o.ref.uid: find_owner(o, observation.namespace(o.ref.namespace), settings.owner_keys,
                                    parent=gate.cronjob_of(o))
              for o in selection.with_marks(objects)}
    changes = lifecycle.plan_lifecycle((*workloads, *podless), objects, found, policies, now, settings.lifecycle,
                                       owners)
    acts = sorted((c for c in changes if c.step is Step.ACT and c.action is not None),
                  key=lambda c: (c.deadline or _ENDLESS, str(c.workload)))
    forced = [f.proposal for f in found if f.proposal is not None and f.mode is Mode.ENFORCE]
    deletions = _one_deletion_per_object(expired)
    deleting = {a.target.uid for a in deletions}
    due = deletions + [c.action for c in acts if c.action is not None and c.workload.uid not in deleting] + forced
    return Decision(now, tuple(expired + found), changes, tuple(due), tuple(_reports(expired, by_uid, gate)))


def silent_gpu_pods(observation: Observation) -> tuple[PodView, ...]:
    """Running GPU pods without a single GPU series, when GPU evidence was read and is usable. A
    series of another pod of the same name (by UID) is not the pod's."""
    gpu = observation.evidence.gpu
    if not gpu or any(e.failed for e in gpu.values()):
        return ()
    series = [e.pods for e in gpu.values()]

    def silent(pod: PodView) -> bool:
        # Each pod looked up in each read, not every series of every read gathered first. The
        # namespace as it is: a pod without one matches only a series read without one.
        key, uid = PodKey(cast(str, pod.ref.namespace), pod.ref.name), pod.ref.uid
        for pods in series:
            if any_candidate(uid, pods.get(key, ())):
                return False
        return True

    return tuple(p for p in observation.pods if p.gpus and p.phase == "Running" and silent(p))


def _holder_owners(held: Sequence[tuple[str, HeldGpu]], observation: Observation,
                   keys: Sequence[tuple[str, str]]) -> dict[str, Owner]:
    """The owner of each namespace whose deleted pod's process is believed to hold a GPU."""
    namespaces = {h.namespace for _, h in held if h.namespace}
    return {ns: find_owner(None, observation.namespace(ns), keys) for ns in sorted(namespaces)}


def _claims_unknown(observation: Observation, policies: Sequence[Policy]) -> tuple[str, ...]:
    """Why workloads are kept that no finding's words explain: where the claims' read failed, a pod
    that names one and has no GPU series holds a GPU of unknown use (decide.usage), under an idle
    policy. The words stay the same from cycle to cycle (a note is logged again when they change)."""
    read = observation.claims
    if read is None or not read.problem or not any(p.trigger(IdleGpu) or p.trigger(IdleCpu) for p in policies):
        return ()
    if not any(p.resource_claims and not p.gpus and p.phase == "Running" and not p.deleting for p in observation.pods):
        return ()
    return (f"{read.problem}: running pods that request no GPU name a claim; where one has no GPU series, its GPU is "
            "unknown and its workload is not marked or reclaimed by an idle policy",)


def plan(observation: Observation, policies: Sequence[Policy], ledger: SafetyLedger, now: datetime.datetime, *,
         settings: PlanSettings = PlanSettings()) -> CyclePlan:
    """The whole cycle's plan; `now` is the janitor's own clock, compared with the apiserver's."""
    deleted = {d.target: d for d in ledger.deletions if d.target}
    decision = decide(observation, policies, now, settings, deleted)
    skew = clock_skew(now, observation.at)
    railed = apply_rails(decision.due, ledger, settings.rails, now=decision.now, skew=skew)
    notices = list(railed.notices)
    if observation.skipped_kinds:
        notices.append("not listed: " + ", ".join(f"{s.kind} ({s.reason})" for s in observation.skipped_kinds))
    if observation.evidence.intervals_notice is not None:
        notices.append(observation.evidence.intervals_notice)
    notices.extend(observation.evidence.exporting_failures)
    notices.extend(_claims_unknown(observation, policies))
    silent = silent_gpu_pods(observation)
    tripwire = railed.notices[0] if is_tripped(railed.ledger) and railed.notices else None
    beside = neighbours.kube_janitors(observation.objects, observation.pods)
    undone = held.undone_records(observation.objects)
    blind = sight.lost(observation)
    held_gpus = believed(observation.nodes, observation.pods, observation.nodes_at or decision.now)
    owners = _holder_owners(held_gpus, observation, settings.owner_keys)
    read = observation.claims  # without sight of pods, no reservation is called stale
    claims = lingering(read if blind is None or read is None else replace(read, pods=None), decision.now,
                       settings.claims_after)
    owners |= {ns: find_owner(None, observation.namespace(ns), settings.owner_keys)
               for ns in sorted({v.claim.ref.namespace for v in claims} - set(owners))}
    report = admin_report(decision.findings, observation.nodes, silent, tripwire,
                          observation.evidence.ghost_gpus or (), railed.held, settings.state, beside, undone, blind,
                          owners, held_gpus, claims)
    # Blind, the ledger stays as it was: a count of no candidates would make the next cycle's look like a spike.
    return CyclePlan(decision.now, decision.reports + railed.allowed, railed.held, decision.changes,
                     decision.findings, ledger if blind else railed.ledger, tuple(notices),
                     railed.tripped_now and not blind, report, silent, observation.evidence.failures,
                     (now - observation.at).total_seconds() if observation.at is not None else None, blind,
                     beside, railed.paused, () if blind else holder_notices(held_gpus, owners))


def verdicts(findings: Sequence[Finding]) -> Mapping[str, tuple[Finding, ...]]:
    """Findings by the uid of what they judged, for `janitor explain`."""
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.subject.uid, []).append(f)
    return {uid: tuple(fs) for uid, fs in out.items()}


__all__ = ["CyclePlan", "Decision", "PlanSettings", "decide", "plan", "silent_gpu_pods", "why", "Code"]
