"""The deadline in force, and the one a warning names: never earlier than what the owner was told.

Every date the lifecycle gives an owner comes from here: the least notice after a delivery
(`earliest_after_delivery`, in working time where the policy says so), how long an owner may
keep a workload (`extension_cap`, `kept_until`), the deadline in force for a warned mark
(`effective_deadline`) and the one a warning sent now names (`warning_deadline`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from janitor import annotations as ann
from janitor.annotations import Mark
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.workhours import add_working_time
from janitor.policy.model import Policy

_ENDLESS = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)


def extension_cap(mark: Mark, policy: Policy) -> datetime.datetime | None:
    """How long an owner may keep the workload: maxExtension after the first mark; None for no
    keeping, also when the mark's marked-at or policy was last written by someone else."""
    if mark.marked_at is None or not policy.lifecycle.max_extension or not mark.cap_trusted:
        return None
    return mark.marked_at + policy.lifecycle.max_extension


def earliest_after_delivery(delivered_at: datetime.datetime, policy: Policy,
                            time_zone: str | None = None) -> datetime.datetime:
    """The least notice: `grace` after delivery and, with working hours, that much working time."""
    at = delivered_at + policy.lifecycle.grace
    hours = policy.lifecycle.working_hours
    return max(at, add_working_time(delivered_at, hours, time_zone)) if hours else at


def effective_deadline(mark: Mark, policy: Policy, notes: Mapping[str, str],
                       time_zone: str | None = None) -> tuple[datetime.datetime, Reason]:
    """The deadline in force for a warned mark: never earlier than the mark's, than the one the
    warning named, or than delivery + grace; an owner's keep-until (within its cap) only moves it later."""
    assert mark.deadline is not None and mark.warned_at is not None and mark.warned_of is not None
    deadline = max(mark.deadline, mark.warned_of.deadline, earliest_after_delivery(mark.warned_at, policy, time_zone))
    reason = why(Code.DELIVERY_GRACE)
    cap = extension_cap(mark, policy)
    keep = notes.get(ann.KEEP_UNTIL)
    if keep is not None and not mark.cap_trusted:
        reason = why(Code.KEEP_UNTRUSTED, keys=tuple(k for k in ann.CAP_KEYS if k in mark.foreign))
    if keep is not None and cap is not None:
        try:
            wanted = ann.parse_expires(keep)
        except ValueError:
            wanted, reason = cap, why(Code.KEEP_UNPARSEABLE, value=keep[:80])
        kept = min(wanted, cap)
        if kept > deadline:
            deadline = kept
            if reason.code is not Code.KEEP_UNPARSEABLE:
                reason = why(Code.KEPT_UNTIL, until=ann.format_deadline(kept),
                             capped=" (the policy's maxExtension cap)" if wanted > cap else "")
    return deadline, reason


def kept_until(notes: Mapping[str, str], cap: datetime.datetime | None) -> datetime.datetime | None:
    """The owner's keep-until within its cap (an unparseable one keeps it until the cap); None
    without one, or without a cap (no extensions)."""
    keep = notes.get(ann.KEEP_UNTIL)
    if keep is None or cap is None:
        return None
    try:
        return min(ann.parse_expires(keep), cap)
    except ValueError:
        return cap


def warning_deadline(base: datetime.datetime, notes: Mapping[str, str], cap: datetime.datetime | None,
                     policy: Policy, now: datetime.datetime, time_zone: str | None = None) -> datetime.datetime:
    """The deadline a warning sent now names: the one the janitor will keep, never before `base`,
    nor before the least notice after a delivery now, nor before the owner's keep-until (within its
    cap), so that a late warning or an owner who asked for time beforehand reads the real date."""
    deadline = max(base, earliest_after_delivery(now, policy, time_zone))
    kept = kept_until(notes, cap)
    return max(deadline, kept) if kept is not None else deadline


def keep_order(value: str | None) -> tuple[int, datetime.datetime]:
    """Which keep-until keeps longer: an unparseable one (kept to the cap) over any time, absence last."""
    if value is None:
        return 0, _ENDLESS
    try:
        return 1, ann.parse_expires(value)
    except ValueError:
        return 2, _ENDLESS
