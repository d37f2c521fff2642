"""The deadline in force, and the one a warning names: never earlier than what the owner was told.

Every date the janitor gives an owner comes from here, so that the lifecycle, the Slack buttons,
`janitor keep` and `kubectl janitor` cannot disagree about it: how long an owner may keep a
workload (`keep_cap`, `kept_until`), the deadline in force for a mark (`deadline_in_force`, and
`effective_deadline` saying why), the least notice after a delivery (`earliest_after_delivery`, in
working time where the policy says so) and the deadline a warning sent now names
(`warning_deadline`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime
from dataclasses import replace

from janitor import annotations as ann
from janitor.annotations import Mark
from janitor.decide.model import Finding
from janitor.decide.readings import Keep
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.workhours import add_working_time
from janitor.policy.model import IdleGpu, Policy

_ENDLESS = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)


def keep_cap(marked_at: datetime.datetime | None, max_extension: datetime.timedelta, *,
             trusted: bool = True) -> datetime.datetime | None:
    """The latest `janitor/keep-until` honoured: `max_extension` (the policy's maxExtension) after
    the first mark, so asking again and again never keeps a workload for ever. None means no
    keeping: a policy whose maxExtension is 0, a first mark not known, or a mark whose marked-at or
    policy someone else wrote last (`trusted` False), because a forward-dated marked-at would buy
    any time at all."""
    if marked_at is None or not max_extension or not trusted:
        return None
    return marked_at + max_extension


def as_found(policy: Policy, finding: Finding) -> Policy:
    """The policy as it applies to what `finding` found (`shortened` for a workload never used)."""
    return shortened(policy) if finding.never_used else policy


def shortened(policy: Policy) -> Policy:
    """The policy as it applies to a workload never used since it started: its idle-GPU trigger's
    never-used notice (`neverUsed.warnBefore`) stands for both warnBefore and minGrace, so its
    deadline and the least notice after delivery are the shorter ones."""
    trigger = policy.trigger(IdleGpu)
    never = trigger.never_used if trigger is not None else None
    if never is None:
        return policy
    return replace(policy, lifecycle=replace(policy.lifecycle, warn_before=never.warn_before,
                                             min_grace=never.warn_before))


def earliest_after_delivery(delivered_at: datetime.datetime, policy: Policy,
                            time_zone: str | None = None) -> datetime.datetime:
    """The least notice: `grace` after delivery and, with working hours, that much working time."""
    at = delivered_at + policy.lifecycle.grace
    hours = policy.lifecycle.working_hours
    return max(at, add_working_time(delivered_at, hours, time_zone)) if hours else at


def deadline_in_force(mark: Mark, keep: Keep | str | None, cap: datetime.datetime | None,
                      least: datetime.datetime | None = None) -> datetime.datetime | None:
    """The deadline the janitor holds a mark to: never earlier than the mark's, than the one the
    delivered warning named, or than `least` (delivery + grace, for a reader that has the policy),
    because an owner must never be acted on sooner than they were told; an owner's keep-until (`keep`,
    as written or as its view read it), within `cap`, only moves it later. None while nothing names
    one (someone else wrote the mark's deadline, and no warning was delivered)."""
    named = [mark.deadline, mark.warned_of.deadline if mark.warned and mark.warned_of is not None else None, least]
    known = [d for d in named if d is not None]
    if not known:
        return None
    deadline = max(known)
    kept = kept_until(keep, cap)
    return max(deadline, kept) if kept is not None else deadline


def effective_deadline(mark: Mark, policy: Policy, keep: Keep | str | None,
                       time_zone: str | None = None) -> tuple[datetime.datetime, Reason]:
    """The deadline in force for a warned mark, with the reason the lifecycle gives for it: the
    owner reads why the date moved (their keep-until, the cap, the grace after delivery) or why
    their keep-until did not move it. `keep`: the workload's keep-until, as written or as read."""
    assert mark.warned and mark.warned_at is not None
    cap = keep_cap(mark.marked_at, policy.lifecycle.max_extension, trusted=mark.cap_trusted)
    keep = _keep(keep)
    least = earliest_after_delivery(mark.warned_at, policy, time_zone)
    deadline = deadline_in_force(mark, keep, cap, least)
    unkept = deadline_in_force(mark, None, None, least)
    assert deadline is not None and unkept is not None
    reason = why(Code.DELIVERY_GRACE)
    if keep is not None and not mark.cap_trusted:
        reason = why(Code.KEEP_UNTRUSTED, keys=tuple(k for k in ann.CAP_KEYS if k in mark.foreign))
    if keep is not None and cap is not None:
        if keep.until is None:
            reason = why(Code.KEEP_UNPARSEABLE, value=keep.value[:80])
        elif deadline > unkept:
            reason = why(Code.KEPT_UNTIL, until=ann.format_deadline(deadline),
                         capped=" (the policy's maxExtension cap)" if keep.until > cap else "")
    return deadline, reason


def _keep(keep: Keep | str | None) -> Keep | None:
    """A keep-until as read: a view's (`ObjectView.readings.keep`, parsed once), or one parsed now."""
    return Keep.of(keep) if isinstance(keep, str) else keep


def kept_until(keep: Keep | str | None, cap: datetime.datetime | None) -> datetime.datetime | None:
    """The owner's keep-until (`keep`, as written or as read) within its cap; an unparseable one
    keeps the workload until the cap, since its owner plainly asked for time. None without one, or
    without a cap (no keeping)."""
    keep = _keep(keep)
    if keep is None or cap is None:
        return None
    return min(keep.until, cap) if keep.until is not None else cap


def warning_deadline(base: datetime.datetime, keep: Keep | str | None, cap: datetime.datetime | None,
                     policy: Policy, now: datetime.datetime, time_zone: str | None = None) -> datetime.datetime:
    """The deadline a warning sent now names: the one the janitor will keep, never before `base`,
    nor before the least notice after a delivery now, nor before the owner's keep-until (`keep`,
    within its cap), so that a late warning or an owner who asked for time beforehand reads the
    real date."""
    deadline = max(base, earliest_after_delivery(now, policy, time_zone))
    kept = kept_until(keep, cap)
    return max(deadline, kept) if kept is not None else deadline


def keep_order(value: Keep | str | None) -> tuple[int, datetime.datetime]:
    """Which keep-until keeps longer: an unparseable one (kept to the cap) over any time, absence last."""
    keep = _keep(value)
    return (0, _ENDLESS) if keep is None else keep.order
