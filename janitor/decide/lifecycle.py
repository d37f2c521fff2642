"""The lifecycle of a workload under an enforcing policy: mark, warn, remind, act, or let go.

All state lives in annotations on the workload (the mark codec of `janitor.annotations`), so this
is a pure function of what was observed, the findings of every policy, and the time:

* **busy beats idle**: a workload in use on any signal any matching policy reads (any mode) is
  never marked or acted on, and loses its mark; a workload under an idle policy is marked or acted
  on only when every usage finding on it says idle (unknown or too young on one holds it);
* an idle (or stuck) workload without a mark is marked (`janitor/expires` = now + warnBefore,
  `janitor/policy`, `janitor/reason` and, as data, `janitor/why`, `janitor/marked-at`,
  `janitor/marked-uid`) and its owner
  warned; a send is recorded as an *intent* (naming the action and deadline it warns of) in the
  same write, and its delivery (`janitor/warned-*`) after; an intent without a delivery means the
  janitor stopped in between, so the next cycle asks Slack before sending again (RECOVER);
* the deadline in force is the latest of: the mark's deadline, the deadline the delivered warning
  named, delivery + grace (in working time, with working hours) and the owner's keep-until within
  its cap; an extension never moves it earlier. It is written back into `janitor/expires` (and
  `janitor/why`);
* only a workload whose warning, naming the policy's current action, reached its owner (admins
  only with adminFallbackCounts), with nothing in flight, is acted on, once the deadline passed;
  a changed action is warned of again first;
* a mark belongs to the object it was written on (`janitor/marked-uid`): a copy on any other
  object is never acted on and is removed, unless its controller copied it from itself and still
  carries it (a Deployment's ReplicaSet); a mark that does not parse is removed, to start again;
* a marked workload no longer covered by an enforcing policy loses its mark, and a warned owner
  hears so; a user's own `janitor/expires` is never marked over.
"""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from janitor import annotations as ann
from janitor.annotations import Intent, Mark, NoticeKind, WarnedOf
from janitor.decide import held, volumes, why_notes
from janitor.decide.consent import intent_id, released_by, sent_to, warned_to
from janitor.decide.deadlines import (
    as_found,
    earliest_after_delivery,
    effective_deadline,
    keep_cap,
    keep_order,
    kept_until,
    shortened,
    warning_deadline,
)
from janitor.decide.model import Action, ActionType, Finding, ObjectRef, ObjectView, State
from janitor.decide.notices import Notice, keep_command, resume_command
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.readings import Keep
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import Workload
from janitor.decide.triggers import registry
from janitor.decide.triggers.spec import Usage
from janitor.decide.volumes import ClaimTemplates
from janitor.policy import endings
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import Mode, Policy

RULE = "lifecycle"
REASON_MAX = 512  # janitor/reason stays readable in `kubectl describe`
_ENDLESS = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class MarkCaps:
    """New marks allowed per cycle, so a first start on a big cluster does not flood anyone."""

    per_cycle: int = 50
    per_owner: int = 10
    per_namespace: int = 20


@dataclass(frozen=True)
class LifecycleSettings:
    pace: datetime.timedelta = datetime.timedelta(hours=1)  # at most one warning/reminder per owner per pace
    caps: MarkCaps = field(default_factory=MarkCaps)
    held_after: datetime.timedelta = held.HELD_AFTER  # how long a reclaim holds before "done" is said


class Step(StrEnum):
    MARK = "mark"
    NOTIFY = "notify"  # warn or remind a marked workload's owner
    RECOVER = "recover"  # a send was in flight when the janitor stopped: ask Slack first
    EXTEND = "extend"  # the deadline in force moved: write it into janitor/expires
    UNMARK = "unmark"
    DROP_COPY = "drop-copy"  # a copy of another object's mark: removed, silently
    ACT = "act"
    WAIT = "wait"
    HELD = "held"  # a new mark over the caps: next cycle
    MOVE = "move"  # an older mark's deadline, from janitor/expires to janitor/deadline (nothing else changes)
    CHECK = "check"  # a reclaim held: its record goes, and its owner hears "done" (decide.held)
    UNDONE = "undone"  # a reclaim did not hold: recorded, and its owner told


@dataclass(frozen=True, slots=True)
class Change:
    """What the lifecycle does to one workload this cycle, and why."""

    step: Step
    workload: ObjectRef
    resource_version: str
    policy: str
    why: Reason
    annotations: Mapping[str, str | None] = field(default_factory=dict)  # merge-patch of annotations
    notice: Notice | None = None  # to send after the patch (its intent is in `annotations`)
    deadline: datetime.datetime | None = None
    action: Action | None = None  # ACT: what goes through the rails
    intent: Intent | None = None  # RECOVER: the send to look for
    time_zone: str | None = None  # the namespace's own zone for working hours (janitor/time-zone)
    gpu_hours: float = 0.0  # ACT: the idle GPU-hours the finding proved (GPUs x window), for the metric
    never_used: bool = False  # its finding: never used since it started (the policy's shorter notice applies)


def delivered(change: Change, delivery: ann.Delivery, policy: Policy | None,
              notes: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The annotations recording that `change`'s send (its intent) reached Slack (or the admins);
    `notes` are the object's annotations, whose janitor/why is kept in step with the deadline."""
    at = ann.format_deadline(delivery.at)
    patch: dict[str, str | None] = {ann.NOTICE: None}
    intent = change.intent or Intent.parse(str(change.annotations.get(ann.NOTICE) or ""))
    if intent is None or intent.kind is NoticeKind.REMINDER:
        patch[ann.REMINDED_AT] = at
        return patch
    patch |= {ann.WARNED_AT: at, ann.WARNED_VIA: str(delivery)}
    if change.notice is not None:
        patch[ann.WARNED_TO] = sent_to(intent, change.notice.owner)
    if intent.warns_of is not None:
        deadline = intent.warns_of.deadline
        if policy is not None:
            applied = shortened(policy) if change.never_used else policy
            deadline = max(deadline, earliest_after_delivery(delivery.at, applied, change.time_zone))
        patch[ann.WARNED_OF] = str(replace(intent.warns_of, deadline=deadline))
        patch[ann.DEADLINE] = ann.format_deadline(deadline)
        patch |= why_notes.in_step({**(notes or {}), **change.annotations}, deadline=deadline,
                                   action=intent.warns_of.action, policy=policy)
    return patch


def resend(change: Change, now: datetime.datetime) -> Change:
    """A RECOVER whose message Slack does not have: send it again under this cycle's intent. The
    message is rendered now, so the intent records what it says now (the deadline may have moved
    since the first attempt), never what the lost attempt would have said."""
    assert change.notice is not None and change.intent is not None
    notice = change.notice
    warns_of = change.intent.warns_of
    if notice.kind is NoticeKind.WARNING and notice.deadline is not None:
        warns_of = WarnedOf(notice.action, notice.deadline, notice.volumes_lost)
    intent = Intent(notice.kind, intent_id(notice.owner, now), now, warns_of)
    return replace(change, step=Step.NOTIFY, why=why(Code.RESEND, why=change.why),
                   annotations={ann.NOTICE: str(intent)}, intent=intent)


class _Pace:
    """At most one warning or reminder per owner per `pace`; everything for an owner in this
    cycle goes into the one digest already being sent."""

    def __init__(self, last: Mapping[str, datetime.datetime], pace: datetime.timedelta) -> None:
        self.last, self.pace, self.now_sending = last, pace, set[str]()

    def allows(self, owner: str, now: datetime.datetime) -> bool:
        last = self.last.get(owner)
        return owner in self.now_sending or last is None or now - last >= self.pace

    def sending(self, owner: str) -> None:
        self.now_sending.add(owner)


@dataclass(frozen=True)
class _Case:
    """One workload as the lifecycle sees it: the object, its mark and every finding on it."""

    view: ObjectView
    mark: Mark | None
    findings: tuple[Finding, ...]  # every policy's, any mode, in policy order
    time_zone: str | None
    owner: Owner  # who is told: a "cancelled" note reaches a warned owner even when no policy covers it
    untraced: Reason | None = None  # why some pods of its namespace could not be traced to their workload
    parent: ObjectView | None = None  # the CronJob that governs this Job (its keep-until keeps it too)
    also: tuple[ObjectRef, ...] = ()  # a CronJob's running Jobs: suspended with it
    # The claim templates its action reaches: its own (a StatefulSet), or those of a StatefulSet below
    # it in its pods' chain (a custom resource or Notebook deleted or stopped takes its StatefulSet along).
    claims: ClaimTemplates | None = None
    manager: str | None = None  # the tool that restores it ("Argo CD", "Flux", "KEDA"): decide.held
    queued_runs: tuple[str, ...] = ()  # those of `also` Kueue admits: suspending them directly would not hold

    @property
    def kept(self) -> Keep | None:
        """The keep-until the deadline is read with: the workload's, or its CronJob's when that keeps
        it longer (an unparseable one keeps it to the cap, like the workload's own); as their views
        read them (decide.readings)."""
        own = self.view.readings.keep
        theirs = self.parent.readings.keep if self.parent is not None else None
        if theirs is None or (own is not None and theirs.value == own.value):
            return own
        return theirs if own is None or keep_order(theirs) > keep_order(own) else own


def _cap(mark: Mark | None, policy: Policy, now: datetime.datetime) -> datetime.datetime | None:
    """The keep cap of `mark`, or of the mark about to be written now (none yet: its first mark is now)."""
    if mark is None:
        return keep_cap(now, policy.lifecycle.max_extension)
    return keep_cap(mark.marked_at, policy.lifecycle.max_extension, trusted=mark.cap_trusted)


def _notice(kind: NoticeKind, finding: Finding, case: _Case, policy: Policy, now: datetime.datetime,
            deadline: datetime.datetime | None) -> Notice:
    cap = _cap(case.mark, policy, now)
    view = case.view
    warns = kind in (NoticeKind.WARNING, NoticeKind.REMINDER)
    told = warns and case.mark is not None and case.mark.warned_via is not None and case.mark.warned_via.to_admins
    marked_at = case.mark.marked_at if case.mark is not None else ann.parse_expires(ann.format_deadline(now))
    return Notice(kind, view.ref, policy.name, finding.owner, str(policy.lifecycle.action), finding.reason, now,
                  deadline, keep_command(view.ref, cap) if warns else "",
                  resume_command(view.ref, policy.lifecycle.action, view.replicas, _also(case, policy), view),
                  finding.gpus, registry.condition(finding),
                  told, marked_at if warns else None, cap if warns else None,
                  volumes.fate(policy.lifecycle.action, case.claims),
                  volumes.lost_under(policy.lifecycle.action, case.claims) is not None,
                  (case.manager or "") if policy.lifecycle.action is PolicyAction.REPORT else "")


def _intent(kind: NoticeKind, owner: Owner, now: datetime.datetime, policy: Policy,
            deadline: datetime.datetime | None, claims: ClaimTemplates | None) -> Intent:
    lost = volumes.lost_under(policy.lifecycle.action, claims) is not None
    warns_of = WarnedOf(str(policy.lifecycle.action), deadline, lost) \
        if kind is NoticeKind.WARNING and deadline else None
    return Intent(kind, intent_id(owner, now), now, warns_of)


def _unmark(case: _Case, reason: Reason, owner: Owner | None, now: datetime.datetime, *,
            step: Step = Step.UNMARK) -> Change:
    """Remove the mark; an owner who was warned hears that nothing will happen."""
    view, mark = case.view, case.mark
    assert mark is not None
    notice = None
    if step is Step.UNMARK and mark.warned_at is not None and owner is not None and owner.kind is not OwnerKind.UNKNOWN:
        warned = mark.warned_of.action if mark.warned_of is not None else ""
        notice = Notice(NoticeKind.CANCELLED, view.ref, mark.policy or "", owner, warned, reason, now)
    return Change(step, view.ref, view.resource_version, mark.policy or "", reason,
                  dict.fromkeys(ann.mark_keys_on(view.annotations)), notice)


def _copy(case: _Case, views: Mapping[str, ObjectView], now: datetime.datetime) -> Change:
    """A mark written on another object: left while the controller it was copied from still carries
    it (the controller would copy it again), removed otherwise. Never acted on."""
    view, mark = case.view, case.mark
    assert mark is not None and mark.uid is not None
    source = views.get(view.controller.uid) if view.controller is not None else None
    if source is not None and source.ref.uid == mark.uid:
        own = source.readings.mark
        if own is not None and own.belongs_to(source.ref.uid):
            if ann.EXPIRES in view.annotations and ann.EXPIRES not in source.annotations:
                # An older mark's deadline, copied before it moved: the controller never removes a key,
                # and kube-janitor would delete this copy (and its pods) on it.
                return Change(Step.DROP_COPY, view.ref, view.resource_version, mark.policy or "",
                              why(Code.COPY_REMOVED, uid=mark.uid), {ann.EXPIRES: None})
            return Change(Step.WAIT, view.ref, view.resource_version, mark.policy or "",
                          why(Code.COPY_OF_SOURCE, source=str(source.ref)))
    return _unmark(case, why(Code.COPY_REMOVED, uid=mark.uid), None, now, step=Step.DROP_COPY)


def _unsure(case: _Case, governing: Finding) -> Finding | None:
    """A usage finding that does not say idle, when an idle policy governs: it holds the workload."""
    if registry.spec(governing.trigger).blind_to:
        return next((f for f in case.findings if registry.holds(f, governing)), None)
    if registry.spec(governing.trigger).usage is not Usage.READS:
        return None
    return next((f for f in case.findings if registry.spec(f.trigger).usage is Usage.READS
                 and f.state is not State.FIRES), None)


def _marked(case: _Case, finding: Finding, policy: Policy, now: datetime.datetime, pace: _Pace,
            configured: Policy | None = None) -> Change:
    """`policy` as it applies to this workload (`held.effective`); `configured` as the admin wrote it."""
    view, mark = case.view, case.mark
    assert mark is not None
    ref, rv = view.ref, view.resource_version
    condition = registry.condition(finding)
    if mark.intent is not None:
        # Sent again if Slack does not have it: a warning names the deadline kept from now, not the mark's.
        named = warning_deadline(mark.deadline or now + policy.lifecycle.warn_before, case.kept,
                                 _cap(mark, policy, now), policy, now, case.time_zone) \
            if mark.intent.kind is NoticeKind.WARNING else mark.deadline
        notice = _notice(mark.intent.kind, finding, case, policy, now, named)
        return Change(Step.RECOVER, ref, rv, policy.name, why(Code.RECOVER, kind=str(mark.intent.kind),
                                                              at=mark.intent.at),
                      notice=notice, deadline=mark.deadline, intent=mark.intent, never_used=finding.never_used)
    owner = str(finding.owner)
    counted = mark.warned and mark.warned_via is not None and (
        not mark.warned_via.to_admins or policy.lifecycle.admin_fallback_counts)
    action = str(policy.lifecycle.action)
    wrong_action = counted and mark.warned_of is not None and mark.warned_of.action != action
    # The action now deletes volumes (the retention policy changed since), and the warning did not say so.
    volumes_unwarned = counted and not wrong_action and mark.warned_of is not None and not mark.warned_of.volumes \
        and volumes.lost_under(policy.lifecycle.action, case.claims) is not None
    wrong_action = wrong_action or volumes_unwarned
    new_owner = counted and not wrong_action and not warned_to(mark, finding.owner)
    if not counted or wrong_action or new_owner:
        if finding.state is not State.FIRES:
            return Change(Step.WAIT, ref, rv, policy.name, why(Code.NOT_WARNED_NOT_IDLE, condition=condition,
                                                               why=finding.reason))
        if not wrong_action and mark.warned_via is not None and finding.owner.kind is OwnerKind.UNKNOWN:
            return Change(Step.WAIT, ref, rv, policy.name, why(Code.ADMINS_ONLY))
        if not pace.allows(owner, now):
            return Change(Step.WAIT, ref, rv, policy.name, why(Code.WARNING_PACED))
        pace.sending(owner)
        base = max(mark.deadline or now, now + policy.lifecycle.warn_before) if wrong_action else \
            mark.deadline or now + policy.lifecycle.warn_before  # none: someone else wrote janitor/expires
        deadline = warning_deadline(base, case.kept, _cap(mark, policy, now), policy, now, case.time_zone)
        intent = _intent(NoticeKind.WARNING, finding.owner, now, policy, deadline, case.claims)
        reason = (why(Code.WARN_AGAIN_VOLUMES, action=action) if volumes_unwarned else
                  why(Code.WARN_AGAIN_ACTION, warned=str(mark.warned_of), action=action) if wrong_action else
                  why(Code.WARN_NEW_OWNER, was=mark.warned_to or "", owner=owner) if new_owner else
                  why(Code.WARN, again=" again (only the admins were reached)" if mark.warned_via else ""))
        return Change(Step.NOTIFY, ref, rv, policy.name, reason, {ann.NOTICE: str(intent)},
                      _notice(NoticeKind.WARNING, finding, case, policy, now, deadline), deadline,
                      never_used=finding.never_used)
    deadline, extended = effective_deadline(mark, policy, case.kept, case.time_zone)
    shown = ann.format_deadline(deadline)
    if finding.state is not State.FIRES:
        return Change(Step.WAIT, ref, rv, policy.name, why(Code.WAIT_NOT_IDLE, condition=condition,
                                                           why=finding.reason), deadline=deadline)
    unsure = _unsure(case, finding)
    if unsure is not None:
        return Change(Step.WAIT, ref, rv, policy.name, why(Code.NOT_SURE, trigger=str(unsure.trigger),
                                                           policy=unsure.policy, why=unsure.reason), deadline=deadline)
    released = released_by(mark, view.annotations, finding.owner, action, now)
    via, refused = held.through(policy.lifecycle.action, view)  # the Kueue Workload a suspend goes through
    if refused is None and case.queued_runs and _also(case, policy):
        refused = why(Code.KUEUE_RUNS, job=", ".join(case.queued_runs))
    kept = kept_until(case.kept, _cap(mark, policy, now))
    if released is not None and (kept is None or kept <= now) and policy.lifecycle.action is not PolicyAction.REPORT:
        # A keep-until in force (pressed after the release, say) wins over it.
        # The owner pressed "Release now" on the warning in force, for this action: no more notice is owed.
        reason = why(Code.RELEASED, by=released.user, at=released.at, warned=mark.warned_at, action=action,
                     policy=policy.name, why=finding.reason)
        if refused is not None:  # Kueue admits it and its Workload is not known: nothing at all
            return Change(Step.WAIT, ref, rv, policy.name, refused, deadline=mark.deadline)
        act = Action(ActionType.carrying(policy.lifecycle.action), ref, rv, policy.name, finding.trigger, RULE,
                     "IdleReleased", reason, {"released-by": released.user, "warned-of": str(mark.warned_of)},
                     also=_also(case, policy), record=held.record(policy, view, now), via=via)
        return Change(Step.ACT, ref, rv, policy.name, reason, notice=_notice(NoticeKind.DONE, finding, case, policy,
                                                                             now, None),
                      deadline=now, action=act, gpu_hours=finding.reclaim_gpu_hours)
    if mark.deadline is None or ann.format_deadline(mark.deadline) != shown or mark.deadline_key in mark.foreign:
        return Change(Step.EXTEND, ref, rv, policy.name, why(Code.EXTEND, deadline=shown, why=extended),
                      {ann.DEADLINE: shown, **why_notes.in_step(view.annotations, deadline=deadline, policy=policy)},
                      deadline=deadline)
    if now >= deadline and policy.lifecycle.action is PolicyAction.REPORT:
        reason = why(Code.MANAGED_REPORT_ONLY, deadline=shown, manager=case.manager,
                     action=str(configured.lifecycle.action)) \
            if case.manager and configured is not None and configured.lifecycle.action is not PolicyAction.REPORT \
            else why(Code.REPORT_ONLY, deadline=shown)
        return Change(Step.WAIT, ref, rv, policy.name, reason, deadline=deadline)
    if now >= deadline:
        reason = why(Code.RECLAIM, condition=condition, marked=mark.marked_at, warned=mark.warned_at,
                     deadline=shown, action=action, policy=policy.name, why=finding.reason)
        if refused is not None:
            return Change(Step.WAIT, ref, rv, policy.name, refused, deadline=deadline)
        act = Action(ActionType.carrying(policy.lifecycle.action), ref, rv, policy.name, finding.trigger, RULE,
                     "IdleReclaimed", reason, {"deadline": shown, "warned-of": str(mark.warned_of)},
                     also=_also(case, policy), record=held.record(policy, view, now), via=via)
        done = _notice(NoticeKind.DONE, finding, case, policy, now, None)
        return Change(Step.ACT, ref, rv, policy.name, reason, notice=done, deadline=deadline, action=act,
                      gpu_hours=finding.reclaim_gpu_hours)
    every = policy.lifecycle.remind_every
    last = max(t for t in (mark.warned_at, mark.reminded_at) if t is not None)
    if every and now - last >= every and pace.allows(owner, now):
        pace.sending(owner)
        intent = _intent(NoticeKind.REMINDER, finding.owner, now, policy, deadline, case.claims)
        return Change(Step.NOTIFY, ref, rv, policy.name, why(Code.REMIND, condition=condition, deadline=shown),
                      {ann.NOTICE: str(intent)},
                      _notice(NoticeKind.REMINDER, finding, case, policy, now, deadline), deadline)
    if extended.code is Code.KEEP_UNTRUSTED:  # the owner asked for time the mark cannot give: say why
        return Change(Step.WAIT, ref, rv, policy.name, why(Code.WAITING, action=action, deadline=shown,
                                                           extended=f" ({extended})", keep=extended), deadline=deadline)
    return Change(Step.WAIT, ref, rv, policy.name, why(Code.WAITING, action=action, deadline=shown,
                                                       extended=f" ({extended})" if extended.code is Code.KEPT_UNTIL
                                                       else ""), deadline=deadline)


def _also(case: _Case, policy: Policy) -> tuple[ObjectRef, ...]:
    """What the ending patches besides its target: for a suspend, a CronJob's running Jobs (a delete takes
    them along)."""
    return case.also if policy.lifecycle.action.ending.carries_runs else ()


def _volumes_lost(policy: Policy, case: _Case) -> str | None:
    """The retention rule under which the policy's action would delete volumes it may not, or None."""
    return None if policy.lifecycle.delete_volumes else volumes.lost_under(policy.lifecycle.action, case.claims)


def _in_use(case: _Case, governing: Finding | None) -> Finding | None:
    """The first finding whose use stops what `governing` would do (decide.triggers.registry.vetoes)."""
    return next((f for f in case.findings if registry.vetoes(f, governing)), None)


def _governing(case: _Case) -> Finding | None:
    enforcing = [f for f in case.findings if f.mode is Mode.ENFORCE and f.known]
    if case.mark is not None:
        return next((f for f in enforcing if f.policy == case.mark.policy), None)
    return next((f for f in enforcing if f.state is State.FIRES), None)


def _new_marks(candidates: Sequence[tuple[_Case, Finding, Policy]], now: datetime.datetime,
               settings: LifecycleSettings, pace: _Pace) -> list[Change]:
    """Most GPUs first, within the caps on new marks per cycle, owner and namespace."""
    out: list[Change] = []
    per_owner: Counter[str] = Counter()
    per_ns: Counter[str] = Counter()
    caps = settings.caps
    marks = 0
    for case, finding, policy in sorted(candidates, key=lambda c: (-c[1].gpus, str(c[0].view.ref))):
        view = case.view
        ref, owner, condition = view.ref, str(finding.owner), registry.condition(finding)
        if ann.EXPIRES in view.annotations:
            out.append(Change(Step.WAIT, ref, view.resource_version, policy.name,
                              why(Code.USERS_EXPIRES, condition=condition)))
            continue
        if not policy.lifecycle.action.applies_to(ref.kind):
            out.append(Change(Step.WAIT, ref, view.resource_version, policy.name,
                              why(Code.ACTION_DOES_NOT_FIT, condition=condition, action=str(policy.lifecycle.action),
                                  kind=ref.kind)))
            continue
        rule = _volumes_lost(policy, case)
        if rule is not None:
            out.append(Change(Step.WAIT, ref, view.resource_version, policy.name,
                              why(Code.VOLUMES_WOULD_GO, condition=condition, action=str(policy.lifecycle.action),
                                  rule=rule, policy=policy.name)))
            continue
        over = tuple(name for name, used, cap in (
            ("per cycle", marks, caps.per_cycle), (f"per owner ({owner})", per_owner[owner], caps.per_owner),
            (f"per namespace ({ref.namespace})", per_ns[ref.namespace or ""], caps.per_namespace)) if used >= cap)
        if over:
            out.append(Change(Step.HELD, ref, view.resource_version, policy.name,
                              why(Code.MARK_CAPPED, condition=condition, over=over)))
            continue
        marks += 1
        per_owner[owner] += 1
        per_ns[ref.namespace or ""] += 1
        deadline = warning_deadline(now + policy.lifecycle.warn_before, case.kept, _cap(None, policy, now), policy,
                                    now, case.time_zone)
        patch: dict[str, str | None] = {
            ann.DEADLINE: ann.format_deadline(deadline),
            ann.POLICY: policy.name,
            ann.REASON: str(finding.reason)[:REASON_MAX],
            ann.WHY: why_notes.for_mark(finding, policy, now, deadline),
            ann.MARKED_AT: ann.format_deadline(now),
            ann.MARKED_UID: ref.uid,
        }
        notice = None
        paced = pace.allows(owner, now)
        if paced:
            notice = _notice(NoticeKind.WARNING, finding, case, policy, now, deadline)
            patch[ann.NOTICE] = str(_intent(NoticeKind.WARNING, finding.owner, now, policy, deadline, case.claims))
            pace.sending(owner)
        reason = why(Code.MARKED, condition=condition, action=str(policy.lifecycle.action),
                     deadline=ann.format_deadline(deadline),
                     paced="" if paced else "; the warning waits for the per-owner message pace")
        out.append(Change(Step.MARK, ref, view.resource_version, policy.name, reason, patch, notice, deadline,
                          never_used=finding.never_used))
    return out


def _last_message_per_owner(cases: Sequence[_Case]) -> dict[str, datetime.datetime]:
    last: dict[str, datetime.datetime] = {}
    for case in cases:
        if case.mark is None or not case.findings:
            continue
        times = [t for t in (case.mark.warned_at, case.mark.reminded_at) if t is not None]
        if times:
            key = str(case.findings[0].owner)
            last[key] = max([*times, last.get(key, times[0])])
    return last


def plan_lifecycle(
    workloads: Sequence[Workload],
    objects: Sequence[ObjectView],
    findings: Sequence[Finding],
    policies: Sequence[Policy],
    now: datetime.datetime,
    settings: LifecycleSettings = LifecycleSettings(),
    owners: Mapping[str, Owner] | None = None,
) -> tuple[Change, ...]:
    """One change per workload with findings and per marked object, in a stable order.

    `workloads` are the workloads outside protected namespaces; `objects` every object read outside
    them (a mark on one without findings is no longer covered); `findings` those of the pod
    triggers, every policy and mode; `owners` the owner of each object (by uid) that has no
    finding to name it (the workloads' owners are known)."""
    by_policy = {p.name: p for p in policies}
    order = {p.name: i for i, p in enumerate(policies)}
    per_subject: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        if f.known and registry.marks(f):
            per_subject[f.subject.uid].append(f)
    views: dict[str, ObjectView] = {o.ref.uid: o for o in objects}
    zones: dict[str, str | None] = {}
    known_owners: dict[str, Owner] = dict(owners or {})
    untraced: dict[str, Reason] = {}  # namespace -> why one of its pods' chains could not be read
    parents: dict[str, ObjectView] = {}
    also: dict[str, tuple[ObjectRef, ...]] = {}
    claims: dict[str, ClaimTemplates] = {}
    queued_runs: dict[str, tuple[str, ...]] = {}
    for w in workloads:
        if w.unknown is not None:
            untraced.setdefault(w.ref.namespace or "", w.unknown)
        elif w.view is not None:
            views.setdefault(w.ref.uid, w.view)
            for r in (*w.chain, w.ref):  # the first claim templates along its chain (a loop: every workload)
                v = views.get(r.uid)
                if v is not None and v.claims:
                    claims[w.ref.uid] = v.claims
                    break
            zones[w.ref.uid] = w.namespace.annotations.get(ann.TIME_ZONE)
            known_owners[w.ref.uid] = w.owner  # found with its CronJob, where it has one
            if w.parent is not None:
                parents[w.ref.uid] = w.parent
            if w.ref.kind == "CronJob":
                also[w.ref.uid] = _running_jobs(w, views, now)
                queued_runs[w.ref.uid] = tuple(r.name for r in also[w.ref.uid]
                                               if (run := views.get(r.uid)) is not None and endings.kueue_managed(run))
    subjects = [uid for uid in per_subject if uid in views]
    marked: list[str] = []  # carrying a mark (`with_marks`), with no finding on them
    checked: list[str] = []  # unmarked, with a reclaim's record to look at, and no finding
    for v in views.values():  # one pass over every object read
        if v.readings.marked:
            if v.ref.uid not in per_subject:
                marked.append(v.ref.uid)
        elif ann.RECLAIMED in v.annotations and v.ref.uid not in per_subject and held.recorded(v):
            checked.append(v.ref.uid)
    cases = []
    for uid in [*subjects, *marked, *checked]:
        view = views[uid]
        mark = view.readings.mark  # parsed once per resourceVersion, when its view was built
        if view.deleting or (mark is None and not _may_mark(view, per_subject.get(uid, ()))):
            continue
        found = tuple(sorted(per_subject.get(uid, ()), key=lambda f: (order.get(f.policy, len(order)), f.trigger)))
        owner = found[0].owner if found else known_owners.get(uid, Owner(OwnerKind.UNKNOWN))
        cases.append(_Case(view, mark, found, zones.get(uid), owner, untraced.get(view.ref.namespace or ""),
                           parents.get(uid), also.get(uid, ()), claims.get(uid, view.claims), held.manager_of(found),
                           queued_runs.get(uid, ())))
    pace = _Pace(_last_message_per_owner(cases), settings.pace)
    changes: list[Change] = []
    candidates: list[tuple[_Case, Finding, Policy]] = []
    for case in cases:
        change, candidate = _decide(case, views, by_policy, now, pace, settings.held_after)
        if change is not None:
            changes.append(_in_zone(change, case.time_zone))
        if candidate is not None:
            candidates.append((case, candidate, as_found(held.effective(by_policy[candidate.policy], case.manager),
                                                         candidate)))
    changes.extend(_in_zone(c, zones.get(c.workload.uid)) for c in _new_marks(candidates, now, settings, pace))
    return tuple(changes)


def _may_mark(view: ObjectView, findings: Sequence[Finding]) -> bool:
    """Whether `_decide` can come to anything for an unmarked workload: a reclaim recorded on it to
    check, or an enforcing policy's finding that fires (only such a finding governs an unmarked one).
    Most workloads judged have neither, and are not made cases at all."""
    return held.recorded(view) or any(f.mode is Mode.ENFORCE and f.known and f.state is State.FIRES
                                      for f in findings)


def _running_jobs(workload: Workload, views: Mapping[str, ObjectView], now: datetime.datetime
                  ) -> tuple[ObjectRef, ...]:
    """The Jobs a CronJob is running, to suspend with it (suspending a CronJob starts no new run but
    stops none): the controllers of its pods that are not on their way out, as read, and not opted
    out or kept (`janitor/keep-until` in the future, or unparseable) on their own."""
    jobs: dict[tuple[str, str], ObjectRef] = {}
    for p in workload.pods:
        job = views.get(p.controller.uid) if p.controller is not None and p.controller.kind == "Job" else None
        if job is None or p.deleting or p.phase not in ("Pending", "Running") or ann.is_true(
                job.annotations.get(ann.OPT_OUT)) or keep_order(job.readings.keep) > (1, now):
            continue
        jobs[(job.ref.name, job.ref.uid)] = job.ref
    return tuple(jobs[k] for k in sorted(jobs))


def _in_zone(change: Change, time_zone: str | None) -> Change:
    """`change` with the namespace's time zone (most have none, as the change already says)."""
    return change if change.time_zone == time_zone else replace(change, time_zone=time_zone)


def _decide(case: _Case, views: Mapping[str, ObjectView], by_policy: Mapping[str, Policy], now: datetime.datetime,
            pace: _Pace, held_after: datetime.timedelta = held.HELD_AFTER) -> tuple[Change | None, Finding | None]:
    """The change for one marked workload, or the finding to mark an unmarked one with."""
    mark, view = case.mark, case.view
    if mark is None and held.recorded(view):  # last cycle's reclaim: did it hold?
        return _check(case, now, held_after), None
    governing = _governing(case)
    in_use = _in_use(case, governing)
    if mark is None and in_use is not None:
        # Use that another finding's trigger is blind to (a stuck job's spinning GPU_UTIL) stops
        # that one only.
        governing = next((f for f in case.findings if f.mode is Mode.ENFORCE and f.known and f.state is State.FIRES
                          and _in_use(case, f) is None), governing)
        in_use = _in_use(case, governing)
    if mark is None:
        if in_use is not None or governing is None or governing.state is not State.FIRES:
            return None, None
        if _unsure(case, governing) is not None:
            return None, None
        if PolicyAction.STOP.ending.held(view):  # a Notebook stopped already holds nothing to reclaim
            return Change(Step.WAIT, view.ref, view.resource_version, governing.policy, why(Code.STOPPED)), None
        not_again = held.blocked(view, governing.policy)
        if not_again is not None:
            return Change(Step.WAIT, view.ref, view.resource_version, governing.policy, not_again), None
        return None, governing
    if mark.uid is not None and not mark.belongs_to(view.ref.uid):
        return _copy(case, views, now), None
    owner = case.owner
    if mark.problems:
        return _unmark(case, why(Code.MARK_BROKEN, problems=mark.problems), None, now), None
    if in_use is not None:
        return _unmark(case, why(Code.IN_USE, trigger=str(in_use.trigger), policy=in_use.policy,
                                 why=in_use.reason), in_use.owner, now), None
    configured = by_policy.get(mark.policy or "")
    policy = held.effective(configured, case.manager) if configured is not None else None
    if policy is not None and governing is not None and governing.policy == policy.name:
        policy = as_found(policy, governing)
    if governing is None or policy is None:
        other = next((f for f in case.findings if f.mode is Mode.ENFORCE and f.known and f.state is State.FIRES), None)
        if other is None and policy is not None and case.untraced is not None:
            # Its pods may be among those not traced: "no longer covered" would be a guess.
            return _moved(case) or Change(Step.WAIT, view.ref, view.resource_version, policy.name,
                          why(Code.COVERAGE_UNSURE, policy=policy.name, why=case.untraced)), None
        reason = (why(Code.OTHER_POLICY, marked=mark.policy, policy=other.policy) if other is not None else
                  why(Code.NO_LONGER_COVERED, policy=mark.policy))
        return _unmark(case, reason, owner, now), None
    if governing.state in (State.CLEAR, State.PARTIAL):
        return _unmark(case, why(Code.IN_USE, trigger=str(governing.trigger), policy=governing.policy,
                                 why=governing.reason), governing.owner, now), None
    if not policy.lifecycle.action.applies_to(view.ref.kind):
        return _unmark(case, why(Code.ACTION_NO_LONGER_FITS, policy=policy.name, action=str(policy.lifecycle.action),
                                 kind=view.ref.kind), owner, now), None
    rule = _volumes_lost(policy, case)
    if rule is not None:
        return _unmark(case, why(Code.VOLUMES_NOW_AT_RISK, action=str(policy.lifecycle.action), rule=rule,
                                 policy=policy.name), owner, now), None
    if _started_since(governing, mark.marked_at, now):
        # Its warning was of an earlier pod: the window decides this one, once it is old enough for it.
        return Change(Step.WAIT, view.ref, view.resource_version, policy.name,
                      why(Code.NEVER_USED_SINCE_MARK, marked=mark.marked_at), deadline=mark.deadline), None
    # A mark that stays has its deadline moved first: kube-janitor deletes on janitor/expires.
    return _moved(case) or _marked(case, governing, policy, now, pace, configured), None


def _started_since(finding: Finding, marked_at: datetime.datetime | None, now: datetime.datetime) -> bool:
    """Whether a pod a never-used finding judged started after the mark: the warning named another pod's
    idleness, and this one is owed its own notice."""
    if marked_at is None or not finding.never_used:
        return False
    lives = (j.why.fact("life") for j in finding.pods)
    return any(isinstance(life, datetime.timedelta) and now - life > marked_at for life in lives)


def _check(case: _Case, now: datetime.datetime, held_after: datetime.timedelta) -> Change:
    """The look, the cycles after it, at a reclaim other than delete (decide.held)."""
    view = case.view
    verdict, reason, patch, notice = held.check(view, case.owner, now, held_after)
    step = {"held": Step.CHECK, "undone": Step.UNDONE}.get(verdict, Step.WAIT)
    policy = (ann.Reclaimed.parse(view.annotations[ann.RECLAIMED]) or ann.Reclaimed("", now, "")).policy
    return Change(step, view.ref, view.resource_version, policy, reason, patch, notice)


def _moved(case: _Case) -> Change | None:
    """An older mark's deadline, moved from janitor/expires (which kube-janitor deletes on) to
    janitor/deadline before anything else is done with it; the janitor/expires goes whoever wrote it
    last (a deadline someone else wrote on a mark was never one: the mark's is its own records').
    None when there is nothing to move."""
    mark, view = case.mark, case.view
    assert mark is not None
    if not mark.legacy:
        return None
    patch: dict[str, str | None] = {}
    if mark.deadline is not None:
        patch[ann.DEADLINE] = ann.format_deadline(mark.deadline)
    if mark.owns_expires:
        patch[ann.EXPIRES] = None
    if not patch:
        return None
    return Change(Step.MOVE, view.ref, view.resource_version, mark.policy or "",
                  why(Code.DEADLINE_MOVED, deadline=patch.get(ann.DEADLINE) or "none yet"), patch,
                  deadline=mark.deadline)
