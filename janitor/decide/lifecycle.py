"""The lifecycle of an idle workload in enforce mode: mark, warn, remind, act, or let go.

All state lives in annotations on the workload (see `janitor.annotations`), so this is a pure
function of what the snapshot shows, the idle findings and the time:

* an idle workload without a mark is marked (`janitor/expires` = now + warnBefore,
  `janitor/policy`, `janitor/reason`, `janitor/marked-at`) and its owner warned;
* a send is recorded as an *intent* in the same write as the mark (or just before the send), and
  its delivery afterwards; an intent without a delivery means the janitor stopped in between, so
  the next cycle asks Slack before sending again (RECOVER);
* the effective deadline is the latest of the mark's deadline, delivery + grace and the owner's
  `janitor/keep-until` (capped at the first mark + maxExtension); it is written back into
  `janitor/expires` whenever it moves, so `kubectl` shows the truth;
* only an idle workload whose warning reached its owner, with nothing in flight, is acted on, and
  only once the effective deadline has passed; the rails and a fresh re-check come after this;
* a marked workload that is in use again, or no longer covered by an enforcing policy, loses its
  mark (and its owner hears so, if warned); unknown evidence keeps the mark and never acts;
* a user's own `janitor/expires` (without `janitor/policy`) is never touched: no mark is written
  over it, and the plain expiry path deals with it.
"""

from __future__ import annotations

import datetime
import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from janitor import annotations
from janitor.decide.idle import Idleness
from janitor.decide.model import Action, ActionType, NamespaceView, ObjectRef, ObjectView
from janitor.decide.notices import Delivery, Notice, NoticeKind
from janitor.decide.owners import DEFAULT_OWNER_KEYS, Owner, OwnerKind, find_owner
from janitor.decide.shadow import IdleFinding
from janitor.decide.workhours import add_working_time
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import Mode, Policy

RULE = "lifecycle"
_ACTION_TYPES = {
    PolicyAction.DELETE: ActionType.DELETE,
    PolicyAction.SUSPEND: ActionType.SUSPEND,
    PolicyAction.SCALE_TO_ZERO: ActionType.SCALE_TO_ZERO,
    PolicyAction.STOP: ActionType.STOP,
}
# Everything the janitor writes for a mark; removing them all is "unmark". keep-until is the owner's.
MARK_KEYS: tuple[str, ...] = (
    annotations.EXPIRES, annotations.POLICY, annotations.REASON, annotations.MARKED_AT,
    annotations.WARNED_AT, annotations.WARNED_VIA, annotations.REMINDED_AT, annotations.NOTICE,
)
REASON_MAX = 512  # janitor/reason stays readable in `kubectl describe`


def _stamp(when: datetime.datetime) -> str:
    """kube-janitor's format has whole seconds: round up, so a deadline is never earlier than meant."""
    if when.microsecond:
        when = when.replace(microsecond=0) + datetime.timedelta(seconds=1)
    return annotations.format_expires(when)


@dataclass(frozen=True, slots=True)
class Intent:
    """A send in flight: recorded before the message goes out."""

    kind: NoticeKind
    id: str
    at: datetime.datetime

    def __str__(self) -> str:
        return f"{self.kind} {self.id} {_stamp(self.at)}"

    @classmethod
    def parse(cls, text: str) -> Intent | None:
        parts = text.split()
        if len(parts) != 3:
            return None
        try:
            return cls(NoticeKind(parts[0]), parts[1], annotations.parse_expires(parts[2]))
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Mark:
    """The janitor's own mark on a workload, as read back from its annotations."""

    policy: str
    deadline: datetime.datetime | None
    marked_at: datetime.datetime | None
    warned_at: datetime.datetime | None = None
    warned_via: Delivery | None = None
    reminded_at: datetime.datetime | None = None
    intent: Intent | None = None
    problems: tuple[str, ...] = ()  # janitor annotations that do not parse: the mark is restarted


def _time(notes: Mapping[str, str], key: str, problems: list[str]) -> datetime.datetime | None:
    text = notes.get(key)
    if text is None:
        return None
    try:
        return annotations.parse_expires(text)
    except ValueError:
        problems.append(f"{key}={text!r}")
        return None


def read_mark(notes: Mapping[str, str]) -> Mark | None:
    """The mark, if the janitor owns one here (`janitor/policy` beside `janitor/expires`)."""
    policy = notes.get(annotations.POLICY)
    if policy is None:
        return None
    problems: list[str] = []
    deadline = _time(notes, annotations.EXPIRES, problems)
    if annotations.EXPIRES not in notes:
        problems.append(f"{annotations.EXPIRES} missing")
    via = notes.get(annotations.WARNED_VIA)
    delivery = Delivery.parse(via) if via is not None else None
    if via is not None and delivery is None:
        problems.append(f"{annotations.WARNED_VIA}={via!r}")
    intent_text = notes.get(annotations.NOTICE)
    intent = Intent.parse(intent_text) if intent_text is not None else None
    if intent_text is not None and intent is None:
        problems.append(f"{annotations.NOTICE}={intent_text!r}")
    return Mark(policy, deadline, _time(notes, annotations.MARKED_AT, problems),
                _time(notes, annotations.WARNED_AT, problems), delivery,
                _time(notes, annotations.REMINDED_AT, problems), intent, tuple(problems))


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


class Step(StrEnum):
    MARK = "mark"
    NOTIFY = "notify"  # warn or remind a marked workload's owner
    RECOVER = "recover"  # a send was in flight when the janitor stopped: ask Slack first
    EXTEND = "extend"  # the effective deadline moved: write it into janitor/expires
    UNMARK = "unmark"
    ACT = "act"
    WAIT = "wait"
    HELD = "held"  # a new mark over the caps: next cycle


@dataclass(frozen=True, slots=True)
class Change:
    """What the lifecycle does to one workload this cycle, and why in words."""

    step: Step
    workload: ObjectRef
    resource_version: str
    policy: str
    why: str
    annotations: Mapping[str, str | None] = field(default_factory=dict)  # merge-patch of annotations
    notice: Notice | None = None  # to send after the patch (its intent is in `annotations`)
    deadline: datetime.datetime | None = None
    action: Action | None = None  # ACT: what goes through the rails
    intent: Intent | None = None  # RECOVER: the send to look for
    time_zone: str | None = None  # the namespace's own zone for working hours (janitor/time-zone)
    gpu_hours: float = 0.0  # ACT: the idle GPU-hours the finding proved (GPUs x window), for the metric


@dataclass(frozen=True)
class LifecyclePlan:
    changes: tuple[Change, ...]

    def reclaims(self) -> tuple[Action, ...]:
        """ACT actions, most overdue first, for the rails."""
        acts = sorted((c for c in self.changes if c.step is Step.ACT and c.action),
                      key=lambda c: (c.deadline or datetime.datetime.max.replace(tzinfo=datetime.timezone.utc),
                                     str(c.workload)))
        return tuple(c.action for c in acts if c.action is not None)


def intent_id(owner: Owner, now: datetime.datetime) -> str:
    """The same for every notice to one owner in one cycle: one digest, one id."""
    digest = hashlib.sha1(f"{owner.kind}:{owner.value}".encode()).hexdigest()[:10]
    return f"{digest}-{int(now.timestamp())}"


def kubectl_ref(ref: ObjectRef) -> str:
    group = ref.api_version.split("/")[0] if "/" in ref.api_version else ""
    kind = ref.kind.lower() if group in ("", "apps", "batch") else f"{ref.kind.lower()}.{group}"
    return f"{kind}/{ref.name}"


def _ns(ref: ObjectRef) -> str:
    return f"-n {ref.namespace} " if ref.namespace else ""


def keep_command(ref: ObjectRef, until: datetime.datetime | None) -> str:
    if until is None:
        return ""
    return (f"kubectl {_ns(ref)}annotate {kubectl_ref(ref)} "
            f"{annotations.KEEP_UNTIL}={_stamp(until)} --overwrite")


def resume_command(ref: ObjectRef, action: PolicyAction, replicas: int | None) -> str:
    target = f"kubectl {_ns(ref)}"
    if action is PolicyAction.SUSPEND:
        return target + f"patch {kubectl_ref(ref)} --type=merge -p '{{\"spec\":{{\"suspend\":false}}}}'"
    if action is PolicyAction.SCALE_TO_ZERO:
        return target + f"scale {kubectl_ref(ref)} --replicas={replicas if replicas else 1}"
    if action is PolicyAction.STOP:
        return target + f"annotate {kubectl_ref(ref)} kubeflow-resource-stopped-"
    return ""


def extension_cap(mark: Mark, policy: Policy) -> datetime.datetime | None:
    if mark.marked_at is None or not policy.lifecycle.max_extension:
        return None
    return mark.marked_at + policy.lifecycle.max_extension


def earliest_after_delivery(delivered_at: datetime.datetime, policy: Policy,
                            time_zone: str | None = None) -> datetime.datetime:
    """The least notice: `grace` after delivery and, with working hours, that much working time."""
    at = delivered_at + policy.lifecycle.grace
    hours = policy.lifecycle.working_hours
    return max(at, add_working_time(delivered_at, hours, time_zone)) if hours else at


def effective_deadline(mark: Mark, policy: Policy, notes: Mapping[str, str],
                       time_zone: str | None = None) -> tuple[datetime.datetime | None, str]:
    """The latest of the mark's deadline, the least notice after delivery and a kept-until within its cap."""
    if mark.deadline is None or mark.warned_at is None:
        return None, "not warned yet"
    deadline = max(mark.deadline, earliest_after_delivery(mark.warned_at, policy, time_zone))
    why = ""
    cap = extension_cap(mark, policy)
    keep = notes.get(annotations.KEEP_UNTIL)
    if keep is not None and cap is not None:
        try:
            wanted = annotations.parse_expires(keep)
        except ValueError:
            wanted, why = cap, f"{annotations.KEEP_UNTIL}={keep!r} does not parse: kept until the cap"
        if wanted > deadline:
            deadline = min(wanted, cap)
            why = why or (f"kept until {_stamp(deadline)}"
                          + (" (the policy's maxExtension cap)" if wanted > cap else ""))
    return deadline, why


def delivered(change: Change, delivery: Delivery, policy: Policy | None) -> dict[str, str | None]:
    """The annotations recording that `change.notice` reached Slack (or the admins)."""
    at = _stamp(delivery.at)
    patch: dict[str, str | None] = {annotations.NOTICE: None}
    if change.notice is None or change.notice.kind is NoticeKind.REMINDER:
        patch[annotations.REMINDED_AT] = at
        return patch
    patch |= {annotations.WARNED_AT: at, annotations.WARNED_VIA: str(delivery)}
    if policy is not None and change.deadline is not None:
        deadline = max(change.deadline, earliest_after_delivery(delivery.at, policy, change.time_zone))
        patch[annotations.EXPIRES] = _stamp(deadline)
    return patch


def plan_lifecycle(
    findings: Sequence[IdleFinding],
    objects: Mapping[str, ObjectView],
    policies: Sequence[Policy],
    now: datetime.datetime,
    settings: LifecycleSettings = LifecycleSettings(),
    namespaces: Mapping[str, NamespaceView] | None = None,
    owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS,
) -> LifecyclePlan:
    """One change per enforced workload and per marked workload, in a stable order. `namespaces`
    carry the zones (`janitor/time-zone`) working hours are counted in."""
    by_name = {p.name: p for p in policies}
    pace = _Pace(_last_message_per_owner(findings, objects), settings.pace)
    changes: list[Change] = []
    seen: set[str] = set()
    candidates: list[tuple[IdleFinding, ObjectView, Policy]] = []
    for finding in _one_per_workload(findings, objects):
        if finding.mode is not Mode.ENFORCE or finding.workload is None or finding.workload.uid in seen:
            continue
        view = objects.get(finding.workload.uid)
        policy = by_name.get(finding.policy)
        if view is None or policy is None:
            continue
        seen.add(finding.workload.uid)
        mark = read_mark(view.annotations)
        if mark is None:
            if finding.idleness is Idleness.IDLE and annotations.NOTEBOOK_STOPPED not in view.annotations:
                candidates.append((finding, view, policy))  # a stopped Notebook's pods are on their way out
            continue
        changes.append(_marked(finding, view, policy, mark, now, pace, _zone(namespaces, view)))
    changes.extend(_new_marks(candidates, now, settings, pace))
    for uid, view in objects.items():  # marks nobody enforces any more
        mark = read_mark(view.annotations)
        if uid in seen or mark is None or view.deleting or not _may_carry_a_mark(view):
            continue
        why = (f"no longer covered: policy {mark.policy} is gone, in shadow mode or no longer matches, "
               "or the workload has no running pods")
        ns = (namespaces or {}).get(view.ref.namespace or "")
        changes.append(_unmark(view, mark, why, find_owner(view, ns, owner_keys), now))
    return LifecyclePlan(tuple(replace(c, time_zone=_zone(namespaces, c.workload)) for c in changes))


def _one_per_workload(findings: Sequence[IdleFinding], objects: Mapping[str, ObjectView]) -> list[IdleFinding]:
    """A workload may be found by several triggers (idle and crash-looping): the one whose policy
    marked it decides; otherwise the first that fired; otherwise the first."""
    by_uid: dict[str, list[IdleFinding]] = {}
    for f in findings:
        if f.mode is Mode.ENFORCE and f.workload is not None:
            by_uid.setdefault(f.workload.uid, []).append(f)
    chosen = []
    for uid, group in by_uid.items():
        view = objects.get(uid)
        mark = view.annotations.get(annotations.POLICY) if view else None
        chosen.append(next((f for f in group if f.policy == mark), None)
                      or next((f for f in group if f.idleness is Idleness.IDLE), group[0]))
    return chosen


def _may_carry_a_mark(view: ObjectView) -> bool:
    """Marks are written on workloads at the top of their owner chain (or a CronJob's Job). A
    ReplicaSet shows its Deployment's mark only because the Deployment controller copies
    annotations down: that copy is not the janitor's to remove."""
    return view.controller is None or (view.ref.kind == "Job" and view.controller.kind == "CronJob")


def _zone(namespaces: Mapping[str, NamespaceView] | None, item: ObjectView | ObjectRef) -> str | None:
    ref = item.ref if isinstance(item, ObjectView) else item
    view = (namespaces or {}).get(ref.namespace or "")
    return view.annotations.get(annotations.TIME_ZONE) if view else None


def _last_message_per_owner(findings: Sequence[IdleFinding],
                            objects: Mapping[str, ObjectView]) -> dict[str, datetime.datetime]:
    last: dict[str, datetime.datetime] = {}
    for f in findings:
        view = objects.get(f.workload.uid) if f.workload else None
        mark = read_mark(view.annotations) if view else None
        if mark is None:
            continue
        times = [t for t in (mark.warned_at, mark.reminded_at) if t is not None]
        if times:
            key = str(f.owner)
            last[key] = max([*times, last.get(key, times[0])])
    return last


def _notice(kind: NoticeKind, finding: IdleFinding, view: ObjectView, policy: Policy, now: datetime.datetime,
            deadline: datetime.datetime | None, mark: Mark | None) -> Notice:
    cap = extension_cap(mark, policy) if mark else (now + policy.lifecycle.max_extension
                                                     if policy.lifecycle.max_extension else None)
    return Notice(kind, view.ref, policy.name, finding.owner, str(policy.lifecycle.action), finding.why, now,
                  deadline, keep_command(view.ref, cap),
                  resume_command(view.ref, policy.lifecycle.action, view.replicas), finding.gpus_held,
                  finding.condition)


def _new_marks(candidates: list[tuple[IdleFinding, ObjectView, Policy]], now: datetime.datetime,
               settings: LifecycleSettings, pace: _Pace) -> list[Change]:
    """Most GPUs first, within the caps on new marks per cycle, owner and namespace."""
    out: list[Change] = []
    per_owner: Counter[str] = Counter()
    per_ns: Counter[str] = Counter()
    caps = settings.caps
    for finding, view, policy in sorted(candidates, key=lambda c: (-c[0].gpus_held, str(c[1].ref))):
        ref, owner = view.ref, str(finding.owner)
        if annotations.EXPIRES in view.annotations:
            out.append(Change(Step.WAIT, ref, view.resource_version, policy.name,
                              "idle, but the user's own janitor/expires is in force; the janitor does not mark over it"))
            continue
        if not policy.lifecycle.action.applies_to(ref.kind):
            out.append(Change(Step.WAIT, ref, view.resource_version, policy.name,
                              f"idle, but action {policy.lifecycle.action} does not apply to a {ref.kind}; not marked"))
            continue
        over = [name for name, used, cap in (("per cycle", len([c for c in out if c.step is Step.MARK]), caps.per_cycle),
                                            (f"per owner ({owner})", per_owner[owner], caps.per_owner),
                                            (f"per namespace ({ref.namespace})", per_ns[ref.namespace or ""],
                                             caps.per_namespace)) if used >= cap]
        if over:
            out.append(Change(Step.HELD, ref, view.resource_version, policy.name,
                              f"idle; new-mark cap reached ({', '.join(over)}), marked in a later cycle"))
            continue
        per_owner[owner] += 1
        per_ns[ref.namespace or ""] += 1
        deadline = now + policy.lifecycle.warn_before
        patch: dict[str, str | None] = {
            annotations.EXPIRES: _stamp(deadline),
            annotations.POLICY: policy.name,
            annotations.REASON: finding.why[:REASON_MAX],
            annotations.MARKED_AT: _stamp(now),
        }
        notice = None
        why = f"idle: marked, to {policy.lifecycle.action} at {_stamp(deadline)} at the earliest"
        if pace.allows(owner, now):
            notice = _notice(NoticeKind.WARNING, finding, view, policy, now, deadline, None)
            patch[annotations.NOTICE] = str(Intent(NoticeKind.WARNING, intent_id(finding.owner, now), now))
            pace.sending(owner)
        else:
            why += "; the warning waits for the per-owner message pace"
        out.append(Change(Step.MARK, ref, view.resource_version, policy.name, why, patch, notice, deadline))
    return out


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


def _unmark(view: ObjectView, mark: Mark, why: str, owner: Owner | None, now: datetime.datetime) -> Change:
    """Remove the mark; an owner who was warned hears that nothing will happen."""
    notice = None
    if mark.warned_at is not None and owner is not None and owner.kind is not OwnerKind.UNKNOWN:
        notice = Notice(NoticeKind.CANCELLED, view.ref, mark.policy, owner, "", why, now)
    return Change(Step.UNMARK, view.ref, view.resource_version, mark.policy, why,
                  {k: None for k in MARK_KEYS if k in view.annotations}, notice)


def _marked(finding: IdleFinding, view: ObjectView, policy: Policy, mark: Mark, now: datetime.datetime,
            pace: _Pace, time_zone: str | None) -> Change:
    ref, rv = view.ref, view.resource_version
    if mark.problems:
        return _unmark(view, mark, f"the mark does not parse ({'; '.join(mark.problems)}): removed, "
                                   "to start again", None, now)
    if mark.policy != policy.name:
        return _unmark(view, mark, f"marked by policy {mark.policy}, now decided by {policy.name}", finding.owner,
                       now)
    if finding.idleness in (Idleness.BUSY, Idleness.PARTIAL):
        return _unmark(view, mark, f"in use again: {finding.why}", finding.owner, now)
    if mark.intent is not None:
        notice = _notice(mark.intent.kind, finding, view, policy, now, mark.deadline, mark)
        return Change(Step.RECOVER, ref, rv, policy.name,
                      f"a {mark.intent.kind} was being sent at {_stamp(mark.intent.at)}; "
                      "asking Slack whether it arrived before sending again",
                      notice=notice, deadline=mark.deadline, intent=mark.intent)
    owner = str(finding.owner)
    counted = mark.warned_via is not None and (not mark.warned_via.to_admins or policy.lifecycle.admin_fallback_counts)
    if not counted:
        if finding.idleness is not Idleness.IDLE:
            return Change(Step.WAIT, ref, rv, policy.name, f"marked, not warned; not idle now: {finding.why}")
        if mark.warned_via is not None and finding.owner.kind is OwnerKind.UNKNOWN:
            return Change(Step.WAIT, ref, rv, policy.name,
                          "only the admins could be warned (no owner known); it is not acted on until an owner "
                          "is set and warned (or the policy's adminFallbackCounts)")
        if not pace.allows(owner, now):
            return Change(Step.WAIT, ref, rv, policy.name, "marked; the warning waits for the per-owner message pace")
        pace.sending(owner)
        intent = Intent(NoticeKind.WARNING, intent_id(finding.owner, now), now)
        return Change(Step.NOTIFY, ref, rv, policy.name,
                      "marked; warning the owner" + (" again (only the admins were reached)" if mark.warned_via else ""),
                      {annotations.NOTICE: str(intent)},
                      _notice(NoticeKind.WARNING, finding, view, policy, now, mark.deadline, mark), mark.deadline)
    deadline, extended = effective_deadline(mark, policy, view.annotations, time_zone)
    assert deadline is not None  # warned, and a mark without a readable deadline has problems
    shown = _stamp(deadline)
    if finding.idleness is not Idleness.IDLE:
        return Change(Step.WAIT, ref, rv, policy.name, f"marked; not acted on while not idle: {finding.why}",
                      deadline=deadline)
    if mark.deadline is None or _stamp(mark.deadline) != shown:
        return Change(Step.EXTEND, ref, rv, policy.name, f"deadline moves to {shown}: {extended or 'delivery + grace'}",
                      {annotations.EXPIRES: shown}, deadline=deadline)
    if now >= deadline and policy.lifecycle.action is PolicyAction.REPORT:
        return Change(Step.WAIT, ref, rv, policy.name, f"deadline {shown} passed; the policy only reports, "
                      "so nothing is done to it", deadline=deadline)
    if now >= deadline:
        action = Action(_ACTION_TYPES[policy.lifecycle.action], ref, rv, RULE, "IdleReclaimed",
                        f"idle since before {_stamp(mark.marked_at or now)} and warned at "
                        f"{_stamp(mark.warned_at or now)}; deadline {shown} passed: "
                        f"{policy.lifecycle.action} (policy {policy.name}): {finding.why}",
                        {"policy": policy.name, "trigger": finding.trigger})
        done = _notice(NoticeKind.DONE, finding, view, policy, now, None, mark)
        return Change(Step.ACT, ref, rv, policy.name, action.why, notice=replace(done, keep_command=""),
                      deadline=deadline, action=action, gpu_hours=finding.reclaim_gpu_hours)
    every = policy.lifecycle.remind_every
    last = max(t for t in (mark.warned_at, mark.reminded_at) if t is not None)
    if every and now - last >= every and pace.allows(owner, now):
        pace.sending(owner)
        intent = Intent(NoticeKind.REMINDER, intent_id(finding.owner, now), now)
        return Change(Step.NOTIFY, ref, rv, policy.name, f"still idle; reminding the owner of the deadline {shown}",
                      {annotations.NOTICE: str(intent)},
                      _notice(NoticeKind.REMINDER, finding, view, policy, now, deadline, mark), deadline)
    return Change(Step.WAIT, ref, rv, policy.name, f"marked and warned; {policy.lifecycle.action} at {shown}"
                  + (f" ({extended})" if extended else ""), deadline=deadline)


def resend(change: Change, now: datetime.datetime) -> Change:
    """A RECOVER whose message Slack does not have: send it again under this cycle's intent."""
    assert change.notice is not None
    intent = Intent(change.notice.kind, intent_id(change.notice.owner, now), now)
    return replace(change, step=Step.NOTIFY, why=f"{change.why}; it did not arrive, sending again",
                   annotations={annotations.NOTICE: str(intent)}, intent=None)
