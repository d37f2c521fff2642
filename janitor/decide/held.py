"""Reclaims that hold, or are not tried.

GitOps (Argo CD, Flux) and KEDA restore what they own: a Deployment scaled to zero is back at one
replica minutes later, idle again, marked and warned again, round after round, and the GPU is never
free for long. So:

- a workload such a manager restores (`selection.managed_by`: its labels, or the controller that
  last wrote its replicas) is, by default, only reported: marked and its owner warned, never acted
  on; a policy names the managers it reclaims from anyway (`lifecycle.reclaimManaged`);
- a reclaim other than delete is recorded with it (`janitor/reclaimed`), and the cycles after it
  check that it held (for `HELD_AFTER`, so a slow sync has had its turn): only then does the owner
  hear "done". One that was undone is said once, to the
  owner (with who undid it) and in the admins' report, recorded (`janitor/undone`), and its policy
  does not mark the workload again where a controller restored it, or once it was undone twice
  (an owner resuming their own workload once is theirs to do).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping

from janitor import annotations as ann
from janitor.annotations import NoticeKind, Reclaimed, Undone
from janitor.decide.model import Finding, ObjectRef, ObjectView
from janitor.decide.notices import Notice, resume_command
from janitor.decide.owners import Owner
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import RESTORER_MANAGERS, RESTORERS, copied_from
from janitor.policy import endings
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import Manager, Policy

# How long a reclaim must hold before "done" is said: Argo CD self-heals in seconds, KEDA polls every
# 30 s, Flux syncs every 10 minutes by default. An undo found sooner is said at once.
HELD_AFTER = datetime.timedelta(minutes=15)


def manager_of(findings: tuple[Finding, ...]) -> str | None:
    """The tool that restores this workload ("Argo CD", "Flux", "KEDA"), or None."""
    tool = next((f.managed_by for f in findings if f.managed_by), None)
    return tool if tool in RESTORERS else None


def effective(policy: Policy, manager: str | None) -> Policy:
    """The policy as it applies to a workload `manager` restores: `report` unless it reclaims from it."""
    if manager is None or policy.lifecycle.action is PolicyAction.REPORT \
            or Manager(RESTORERS[manager]) in policy.lifecycle.reclaim_managed:
        return policy
    return dataclasses.replace(policy, lifecycle=dataclasses.replace(policy.lifecycle, action=PolicyAction.REPORT))


def record(policy: Policy, view: ObjectView, now: datetime.datetime) -> Mapping[str, str]:
    """What a reclaim writes with it, for the next cycle to check (a delete leaves nothing to check)."""
    if not policy.lifecycle.action.ending.reclaims:
        return {}
    return {ann.RECLAIMED: str(Reclaimed(str(policy.lifecycle.action), now, policy.name, view.replicas))}


def recorded(view: ObjectView) -> bool:
    """`view` carries a reclaim's record the janitor wrote on it: not a ReplicaSet's copy of its
    Deployment's (the controller copies annotations), nor one someone else wrote or re-applied."""
    return ann.RECLAIMED in view.annotations and ann.RECLAIMED not in view.foreign_marks \
        and copied_from(view) is None


def undone_on(view: ObjectView) -> Undone | None:
    """The janitor's own record of an undone reclaim on `view`, if any (a copy or a forgery is none)."""
    if ann.UNDONE not in view.annotations or ann.UNDONE in view.foreign_marks or copied_from(view) is not None:
        return None
    return Undone.parse(view.annotations[ann.UNDONE])


def undone_records(views: Iterable[ObjectView]) -> tuple[tuple[ObjectRef, Undone], ...]:
    """`undone_on` of every view that has a record, for the admins' report: asked of every object a
    cycle read, so the key is looked for before anything else is."""
    return tuple((v.ref, u) for v in views if ann.UNDONE in v.annotations and (u := undone_on(v)) is not None)


def through(action: PolicyAction, view: ObjectView) -> tuple[ObjectRef | None, Reason | None]:
    """Where `action`'s patch goes on `view`: (the Kueue Workload, None) for a workload Kueue admits,
    whose own switch Kueue would undo; (None, None) for the workload itself; (None, why not) when Kueue
    admits it and its Workload was not found or could not be read: then nothing is done at all."""
    ending = action.ending.on(view)
    if ending.target is endings.PatchTarget.WORKLOAD:
        return None, None
    queued = view.queued
    if queued is None or not queued.found:
        problem = queued.problem if queued is not None and queued.problem else "its Workload was not read"
        return None, why(Code.KUEUE_UNREACHED, action=str(action), kind=view.ref.kind, problem=problem)
    if queued.active is False:
        return None, why(Code.KUEUE_INACTIVE, workload=queued.name, action=str(action))
    return ObjectRef("Workload", f"{endings.KUEUE_GROUP}/{queued.version}", view.ref.namespace, queued.name,
                     queued.uid), None


def _held(action: str, view: ObjectView) -> bool | None:
    """Whether the reclaim recorded as `action` still holds on `view`; None when that cannot be told
    (the object does not say, or the record names no reclaim this version knows)."""
    ending = endings.find(action)
    return ending.held(view) if ending is not None else None


def check(view: ObjectView, owner: Owner, now: datetime.datetime, held_after: datetime.timedelta = HELD_AFTER
          ) -> tuple[str, Reason, Mapping[str, str | None], Notice | None]:
    """The next cycle's look at a reclaim: ("held" | "undone" | "wait", why, the patch, the notice)."""
    text = view.annotations[ann.RECLAIMED]
    done = Reclaimed.parse(text)
    if done is None:
        return "held", why(Code.RECLAIM_RECORD_BROKEN, value=text[:80]), {ann.RECLAIMED: None}, None
    held = _held(done.action, view)
    if held is None:
        return "wait", why(Code.RECLAIM_UNCHECKED, action=done.action), {}, None
    if held and now - done.at < held_after:
        return "wait", why(Code.RECLAIM_HOLDING, action=done.action, at=done.at, after=held_after), {}, None
    if held:  # and a count of undos by this policy starts again: "twice" means twice in a row
        before = undone_on(view)
        reset = {ann.UNDONE: None} if before is not None and before.policy == done.policy else {}
        return "held", why(Code.RECLAIM_HELD, action=done.action, at=done.at), {ann.RECLAIMED: None, **reset}, None
    by = view.restored_by or ""
    before = undone_on(view)
    times = before.times + 1 if before is not None and before.policy == done.policy else 1
    undone = Undone(done.action, now, done.policy, times, by)
    reason = why(Code.RECLAIM_UNDONE, action=done.action, at=done.at, by=_who(by), policy=done.policy,
                 again=_again(undone))
    notice = Notice(NoticeKind.UNDONE, view.ref, done.policy, owner, done.action, reason, now,
                    resume_command=resume_command(view.ref, PolicyAction(done.action), done.replicas, seen=view),
                    managed_by=RESTORER_MANAGERS.get(by, ""))
    return "undone", reason, {ann.RECLAIMED: None, ann.UNDONE: str(undone)}, notice


def _who(by: str) -> str:
    tool = RESTORER_MANAGERS.get(by)
    if tool:
        return f"{tool} ({by})"
    return by or "someone the apiserver does not name"


def _again(undone: Undone) -> str:
    if RESTORER_MANAGERS.get(undone.by):
        return f"policy {undone.policy} does not mark it again while {RESTORER_MANAGERS[undone.by]} restores it"
    if undone.times >= 2:
        return f"undone {undone.times} times: policy {undone.policy} does not mark it again"
    return f"policy {undone.policy} may mark it again; a second undo stops that"


def blocked(view: ObjectView, policy: str) -> Reason | None:
    """Why `policy` does not mark `view` again: a reclaim of it that a controller undid, or that was
    undone twice; None otherwise. Removing janitor/undone lets it try again."""
    undone = undone_on(view)
    if undone is None or undone.policy != policy:
        return None
    if not RESTORER_MANAGERS.get(undone.by) and undone.times < 2:
        return None
    return why(Code.NOT_AGAIN_UNDONE, action=undone.action, at=undone.at, by=_who(undone.by), policy=policy)
