"""Reclaims that hold, or are not tried.

GitOps (Argo CD, Flux) and KEDA restore what they own: a Deployment scaled to zero is back at one
replica minutes later, idle again, marked and warned again, round after round, and the GPU is never
free for long. So:

- a workload such a manager restores (`selection.managed_by`: its labels, or the controller that
  last wrote its replicas) is, by default, only reported: marked and its owner warned, never acted
  on; a policy names the managers it reclaims from anyway (`lifecycle.reclaimManaged`);
- a reclaim other than delete is recorded with it (`janitor/reclaimed`), and the next cycle checks
  that it held: only then does the owner hear "done". One that was undone is said once, to the
  owner (with who undid it) and in the admins' report, recorded (`janitor/undone`), and its policy
  does not mark the workload again where a controller restored it, or once it was undone twice
  (an owner resuming their own workload once is theirs to do).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping

from janitor import annotations as ann
from janitor.annotations import NoticeKind, Reclaimed, Undone
from janitor.decide.model import Finding, ObjectView
from janitor.decide.notices import Notice, resume_command
from janitor.decide.owners import Owner
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import RESTORER_MANAGERS, RESTORERS
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import Manager, Policy

_RECLAIMS = (PolicyAction.SUSPEND, PolicyAction.SCALE_TO_ZERO, PolicyAction.STOP)


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
    if policy.lifecycle.action not in _RECLAIMS:
        return {}
    return {ann.RECLAIMED: str(Reclaimed(str(policy.lifecycle.action), now, policy.name, view.replicas))}


def _held(action: str, view: ObjectView) -> bool | None:
    if action == PolicyAction.SCALE_TO_ZERO:
        return None if view.replicas is None else view.replicas == 0
    if action == PolicyAction.SUSPEND:
        return view.suspended
    if action == PolicyAction.STOP:
        return ann.NOTEBOOK_STOPPED in view.annotations
    return None


def check(view: ObjectView, owner: Owner, now: datetime.datetime) -> tuple[str, Reason, Mapping[str, str | None],
                                                                           Notice | None]:
    """The next cycle's look at a reclaim: ("held" | "undone" | "wait", why, the patch, the notice)."""
    text = view.annotations[ann.RECLAIMED]
    done = Reclaimed.parse(text)
    if done is None:
        return "held", why(Code.RECLAIM_RECORD_BROKEN, value=text[:80]), {ann.RECLAIMED: None}, None
    held = _held(done.action, view)
    if held is None:
        return "wait", why(Code.RECLAIM_UNCHECKED, action=done.action), {}, None
    if held:
        return "held", why(Code.RECLAIM_HELD, action=done.action, at=done.at), {ann.RECLAIMED: None}, None
    by = view.restored_by or ""
    before = Undone.parse(view.annotations.get(ann.UNDONE, ""))
    times = before.times + 1 if before is not None and before.policy == done.policy else 1
    undone = Undone(done.action, now, done.policy, times, by)
    reason = why(Code.RECLAIM_UNDONE, action=done.action, at=done.at, by=_who(by), policy=done.policy,
                 again=_again(undone))
    notice = Notice(NoticeKind.UNDONE, view.ref, done.policy, owner, done.action, reason, now,
                    resume_command=resume_command(view.ref, PolicyAction(done.action), done.replicas),
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
    undone = Undone.parse(view.annotations.get(ann.UNDONE, ""))
    if undone is None or undone.policy != policy:
        return None
    if not RESTORER_MANAGERS.get(undone.by) and undone.times < 2:
        return None
    return why(Code.NOT_AGAIN_UNDONE, action=undone.action, at=undone.at, by=_who(undone.by), policy=policy)
