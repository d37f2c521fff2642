"""The one re-check right before acting: is this action still due, on a fresh look at its object?

Every action that deletes or reclaims (an expiry deletion, a lifecycle reclaim, a force delete) is
decided again, right before it is applied, on an observation read fresh and scoped to that one
object: the object itself, its owner chain, its pods (a ReplicaSet created since the cycle's read
included), its namespace (an opt-out added since), its node and the usage evidence of its pods.
It is decided by `plan.decide`, the same rules as the cycle's, so no rule exists twice; the
action goes ahead only if the same action (object, type, policy) comes out due again, and then
with the fresh resourceVersion as its precondition. A first mark or warning is looked at again
the same way before it is written (`still_notices`): a namespace opted out since the cycle's read
gets neither.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from janitor.annotations import NoticeKind
from janitor.decide.lifecycle import Change, Step
from janitor.decide.model import Action, Observation
from janitor.decide.plan import PlanSettings, decide
from janitor.decide.reasons import Code, Reason, why
from janitor.policy.model import Policy


@dataclass(frozen=True, slots=True)
class Recheck:
    action: Action | None  # the action to apply (with the fresh resourceVersion), or None: not now
    why: Reason
    # The lifecycle's change for it, decided on the fresh read: its "done" note says what happened
    # then (what the cycle's older read said may have changed since, a StatefulSet's volumes say).
    change: Change | None = None


def first_notice(change: Change) -> bool:
    """A new mark, or a marked workload's first warning (or one given again): decided on the cycle's
    read, which a watch may have kept from minutes ago, so looked at again fresh before it is written."""
    return change.step is Step.MARK or (change.step is Step.NOTIFY and change.notice is not None
                                        and change.notice.kind is NoticeKind.WARNING)


def still_notices(change: Change, fresh: Observation | None, policies: Sequence[Policy], now: datetime.datetime,
                  settings: PlanSettings = PlanSettings()) -> Recheck:
    """Whether a first mark or warning (`first_notice`) comes out the same on a fresh read of its
    workload and namespace: the same step by the same policy. `action` is None either way."""
    uid = change.workload.uid
    if fresh is None or not _present(uid, fresh):
        return Recheck(None, why(Code.GONE))
    again = next((c for c in decide(fresh, policies, now, settings).changes if c.workload.uid == uid), None)
    if again is not None and again.step is change.step and again.policy == change.policy:
        return Recheck(None, why(Code.STILL_DUE), again)
    return Recheck(None, why(Code.NO_LONGER_DUE, why=again.why if again is not None else why(
        Code.NO_LONGER_COVERED, policy=change.policy)))


def _present(uid: str, fresh: Observation) -> bool:
    return any(o.ref.uid == uid for o in fresh.objects) or any(p.ref.uid == uid for p in fresh.pods)


def still_due(action: Action, fresh: Observation | None, policies: Sequence[Policy], now: datetime.datetime,
              settings: PlanSettings = PlanSettings()) -> Recheck:
    """`fresh` is None when the object is gone, or is another object under the same name now."""
    if fresh is None or not _present(action.target.uid, fresh):
        return Recheck(None, why(Code.GONE))
    decision = decide(fresh, policies, now, settings)
    again = decision.still_due(action.key)
    if again is not None:
        acts = (c for c in decision.changes
                if c.step is Step.ACT and c.action is not None and c.action.key == again.key)
        return Recheck(again, why(Code.STILL_DUE), next(acts, None))
    uid = action.target.uid
    change = next((c for c in decision.changes if c.workload.uid == uid and c.step is not Step.ACT), None)
    finding = next((f for f in decision.findings if f.subject.uid == uid and f.policy == action.policy), None)
    if change is not None:
        return Recheck(None, why(Code.NO_LONGER_DUE, why=change.why))
    if finding is not None:
        return Recheck(None, why(Code.NO_LONGER_DUE, why=finding.reason))
    return Recheck(None, why(Code.NO_LONGER_DUE, why=why(Code.NO_LONGER_COVERED, policy=action.policy)))
