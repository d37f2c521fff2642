"""The safety rails every deletion path goes through, whatever decided the deletion.

A janitor that deletes a running experiment is worse than none, so after the triggers have
proposed deletions these rails decide how many may really go this cycle: none in dry-run, none
while the janitor's clock disagrees with the apiserver's, none while a tripped tripwire waits for
an admin, and never more than the rolling hourly and daily caps, in total and per namespace.
Pure: the caller passes the ledger of past deletions and the current time.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from janitor.decide.model import Action, Deletion, ObjectRef, SafetyLedger, TriggerKind

DEFAULT_PROTECTED_NAMESPACES: tuple[str, ...] = ("kube-system", "kube-public", "kube-node-lease")

HOUR = datetime.timedelta(hours=1)
DAY = datetime.timedelta(days=1)


class HoldReason(StrEnum):
    DRY_RUN = "dry-run"
    CAP = "cap"
    TRIPWIRE = "tripwire"
    CLOCK_SKEW = "clock-skew"
    LEDGER = "ledger-unreadable"


@dataclass(frozen=True, slots=True)
class Held:
    """A deletion the rails did not let through this cycle, and why."""

    action: Action
    reason: HoldReason
    why: str


@dataclass(frozen=True)
class Caps:
    """Deletions allowed over rolling windows; a cap of 0 stops that path entirely."""

    per_hour: int = 30
    per_day: int = 200
    per_namespace_per_hour: int = 10
    per_namespace_per_day: int = 50


@dataclass(frozen=True)
class Tripwire:
    """Stop all deletions when this cycle's candidates exceed the previous cycle's by more than
    `fraction` (0.5 = 50 % more) and by at least `min_jump` objects (so 0 -> 1 never trips)."""

    fraction: float = 0.5
    min_jump: int = 20


@dataclass(frozen=True)
class Rails:
    protected_namespaces: tuple[str, ...] = DEFAULT_PROTECTED_NAMESPACES
    honour_opt_out: bool = True
    caps: Caps = field(default_factory=Caps)
    tripwire: Tripwire = field(default_factory=Tripwire)
    dry_run: bool = False
    max_clock_skew: datetime.timedelta = datetime.timedelta(seconds=30)


@dataclass(frozen=True)
class RailsOutcome:
    allowed: tuple[Action, ...]
    held: tuple[Held, ...]
    ledger: SafetyLedger
    notices: tuple[str, ...]
    tripped_now: bool = False  # the tripwire tripped in this cycle: admins must be told once
    # The rail that stops every deletion this cycle, whether or not one was due: a pause shows
    # before the deletion it holds (a clock off by a minute holds the first one due tomorrow).
    paused: HoldReason | None = None


def clock_skew(local: datetime.datetime, apiserver: datetime.datetime | None) -> datetime.timedelta | None:
    return None if apiserver is None else abs(local - apiserver)


def is_tripped(ledger: SafetyLedger) -> bool:
    """Tripped and not acknowledged since: an acknowledgment older than the trip does not count."""
    if ledger.tripped_at is None:
        return False
    return ledger.acknowledged_at is None or ledger.acknowledged_at < ledger.tripped_at


def _hold_all(actions: Sequence[Action], reason: HoldReason, why: str) -> tuple[Held, ...]:
    return tuple(Held(a, reason, why) for a in actions)


def apply_rails(
    candidates: Sequence[Action],
    ledger: SafetyLedger,
    rails: Rails,
    *,
    now: datetime.datetime,
    skew: datetime.timedelta | None,
) -> RailsOutcome:
    """Let through the deletions the rails allow, in the order given (most overdue first)."""
    if ledger.unreadable:
        why = ("the rails' ledger (deletions of the last day, tripwire state) is unreadable; deletions stop "
               "until an admin repairs or deletes it (a deleted ledger starts empty)")
        return RailsOutcome((), _hold_all(candidates, HoldReason.LEDGER, why), ledger, (why,),
                            paused=HoldReason.LEDGER)
    recent = tuple(d for d in ledger.deletions if now - d.at < DAY)
    ledger = replace(ledger, deletions=recent)
    notices: list[str] = []

    acknowledged = ledger.tripped_at is not None and not is_tripped(ledger)
    if acknowledged:
        # The admin has looked: the jump that tripped it is the new normal.
        ledger = replace(ledger, tripped_at=None, previous_candidates=len(candidates))
    previous = ledger.previous_candidates
    jump = len(candidates) - (previous or 0)
    if is_tripped(ledger):
        why = (
            f"deletions are stopped since {ledger.tripped_at:%Y-%m-%d %H:%M:%SZ} by the tripwire; "
            "an admin must acknowledge it"
        )
        return RailsOutcome((), _hold_all(candidates, HoldReason.TRIPWIRE, why), ledger, (why,),
                            paused=HoldReason.TRIPWIRE)
    if (
        previous is not None
        and not acknowledged
        and jump >= rails.tripwire.min_jump
        and len(candidates) > previous * (1 + rails.tripwire.fraction)
    ):
        why = (
            f"tripwire: {len(candidates)} deletion candidates against {previous} in the previous "
            f"cycle (more than {rails.tripwire.fraction:.0%} and {rails.tripwire.min_jump} more); "
            "all deletions stop until an admin acknowledges"
        )
        ledger = replace(ledger, tripped_at=now, acknowledged_at=None)
        return RailsOutcome((), _hold_all(candidates, HoldReason.TRIPWIRE, why), ledger, (why,), tripped_now=True,
                            paused=HoldReason.TRIPWIRE)
    ledger = replace(ledger, previous_candidates=len(candidates))

    if skew is None:
        # No Date header from the apiserver (a proxy may strip it): deadlines could only be
        # compared with our own clock, which the skew guard exists to distrust.
        why = "the apiserver's clock is unknown (no Date header); deletions pause until it is known"
        notices.append(why)
        return RailsOutcome((), _hold_all(candidates, HoldReason.CLOCK_SKEW, why), ledger, tuple(notices),
                            paused=HoldReason.CLOCK_SKEW)
    if skew > rails.max_clock_skew:
        why = (
            f"the janitor's clock is {skew.total_seconds():.0f}s off the apiserver's "
            f"(more than {rails.max_clock_skew.total_seconds():.0f}s); deletions pause until it is fixed"
        )
        notices.append(why)
        return RailsOutcome((), _hold_all(candidates, HoldReason.CLOCK_SKEW, why), ledger, tuple(notices),
                            paused=HoldReason.CLOCK_SKEW)

    if rails.dry_run:
        why = "dry-run: nothing is deleted"
        return RailsOutcome((), _hold_all(candidates, HoldReason.DRY_RUN, why), ledger, tuple(notices))

    allowed, held = _within_caps(candidates, recent, rails.caps, now)
    if held:
        notices.append(f"{len(held)} deletions held back by the deletion caps")
    return RailsOutcome(allowed, held, ledger, tuple(notices))


def _within_caps(
    candidates: Sequence[Action], recent: Sequence[Deletion], caps: Caps, now: datetime.datetime
) -> tuple[tuple[Action, ...], tuple[Held, ...]]:
    hour_total = sum(1 for d in recent if now - d.at < HOUR)
    day_total = len(recent)
    hour_ns = Counter(d.namespace for d in recent if now - d.at < HOUR)
    day_ns = Counter(d.namespace for d in recent)
    allowed: list[Action] = []
    held: list[Held] = []
    for action in candidates:
        ns = action.target.namespace
        over = [
            name
            for name, used, cap in (
                ("per hour", hour_total, caps.per_hour),
                ("per day", day_total, caps.per_day),
                (f"per hour in namespace {ns}", hour_ns[ns], caps.per_namespace_per_hour),
                (f"per day in namespace {ns}", day_ns[ns], caps.per_namespace_per_day),
            )
            if used >= cap
        ]
        if over:
            held.append(Held(action, HoldReason.CAP, f"deletion cap reached ({', '.join(over)})"))
            continue
        allowed.append(action)
        hour_total += 1
        day_total += 1
        hour_ns[ns] += 1
        day_ns[ns] += 1
    return tuple(allowed), tuple(held)


def expiry_of(action: Action) -> tuple[str, str]:
    """(target, rule) of an expiry's deletion, as the ledger keeps them; ("", "") for any other."""
    if action.trigger is not TriggerKind.EXPIRY or action.rule not in ("ttl", "expires"):
        return "", ""
    value = action.evidence.get(f"janitor/{action.rule}", "")
    return deleted_key(action.target), f"{action.rule}={value}"


def deleted_key(ref: ObjectRef) -> str:
    return f"{ref.kind}/{ref.namespace or ''}/{ref.name}"


def record_deletions(ledger: SafetyLedger, done: Sequence[Action], now: datetime.datetime) -> SafetyLedger:
    """The ledger after `done` deletions went through (act calls this with what succeeded)."""
    added = tuple(Deletion(now, a.target.namespace, *expiry_of(a)) for a in done)
    return replace(ledger, deletions=ledger.deletions + added)
