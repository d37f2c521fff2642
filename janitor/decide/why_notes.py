"""The `janitor/why` note a mark carries (janitor.why_note), made from what the lifecycle decided.

The note is written in the same patch as the mark, from the finding that made it and the policy
that governs it, and kept in step by every later write that moves the deadline or warns of another
action; so a tool reading it and `janitor/expires` never sees two deadlines. A mark written before
the key existed gets none later: the words of `janitor/reason` are never parsed back into data.
Pure: the times come from the caller.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping

from janitor import annotations as ann
from janitor.annotations import Mark
from janitor.decide.deadlines import keep_cap
from janitor.decide.model import Finding, TriggerKind
from janitor.decide.plain import plain
from janitor.decide.triggers.registry import POLICY_TRIGGERS
from janitor.policy.model import CrashLoop, Hung, IdleCpu, IdleGpu, Pending, Policy
from janitor.why_note import Scalar, WhyNote


def _duration(delta: datetime.timedelta) -> str:
    try:
        return ann.format_duration(delta)
    except ValueError:  # sub-second: not from a policy file, which only has whole units
        return f"{delta.total_seconds():g}s"


def trigger_facts(trigger: TriggerKind, policy: Policy, *, gpus: int) -> dict[str, Scalar]:
    """The numbers the policy judged by (window, threshold, ...), as the policy file names them,
    and the GPUs the workload holds: what a researcher needs to tell whether the verdict is fair."""
    kind = POLICY_TRIGGERS.get(trigger)
    found = policy.trigger(kind) if kind is not None else None
    facts: dict[str, Scalar] = {}
    if isinstance(found, IdleGpu):
        facts = {"window": _duration(found.window), "threshold": found.threshold, "signal": str(found.signal)}
        if found.also:  # every signal with its threshold; power as a multiple of idle power
            facts["signals"] = ", ".join(f"{s.short}<={t:g}{'x idle' if s.relative else ''}" for s, t in found.limits)
    elif isinstance(found, IdleCpu):
        facts = {"window": _duration(found.window)}
        if found.cores is not None:
            facts["cores"] = found.cores
        if found.fraction_of_request is not None:
            facts["fractionOfRequest"] = found.fraction_of_request
    elif isinstance(found, Pending):
        facts = {"after": _duration(found.after)}
    elif isinstance(found, CrashLoop):
        facts = {"restarts": found.restarts, "window": _duration(found.window)}
    elif isinstance(found, Hung):
        facts = {"window": _duration(found.window), "utilization": found.utilization,
                 "signals": ", ".join(f"{s.short}<={t:g}{'x idle' if s.relative else ''}" for s, t in found.quiet)}
    if gpus:
        facts["gpus"] = gpus
    return facts


def of_mark(mark: Mark, notes: Mapping[str, str], foreign: Collection[str]) -> WhyNote | None:
    """The note `mark` carries, for a reader without the policies (`janitor keep`, `kubectl janitor`);
    None when there is none to trust: someone else wrote it last, or it is another mark's (written
    over, then carried along by the janitor's rewrites), whose cap would be another's."""
    if ann.WHY not in notes or ann.WHY in foreign:
        return None
    note = WhyNote.parse(notes[ann.WHY])
    if note is not None and mark.marked_at is not None and note.marked_at != mark.marked_at:
        return None
    return note


def for_mark(finding: Finding, policy: Policy, now: datetime.datetime, deadline: datetime.datetime) -> str:
    """The note of a new mark made `now` on `finding`, with the deadline it gets."""
    return WhyNote(
        policy=policy.name, trigger=str(finding.trigger), action=str(policy.lifecycle.action),
        code=str(finding.reason.code), words=plain(finding.reason),
        facts=trigger_facts(finding.trigger, policy, gpus=finding.gpus), marked_at=now, deadline=deadline,
        keep_cap=keep_cap(now, policy.lifecycle.max_extension), max_extension=_duration(policy.lifecycle.max_extension),
    ).encode()


def in_step(notes: Mapping[str, str | None], *, deadline: datetime.datetime, action: str | None = None,
            policy: Policy | None = None) -> dict[str, str]:
    """`{janitor/why: the note}` with the deadline (and action) in force now and the policy's cap as
    it reads now, for the patch that writes them; empty when the object carries no readable note."""
    text = notes.get(ann.WHY)
    note = WhyNote.parse(text) if text else None
    if note is None:
        return {}
    if policy is not None:
        note = note.with_changes(keep_cap=keep_cap(note.marked_at, policy.lifecycle.max_extension),
                                 max_extension=_duration(policy.lifecycle.max_extension))
    return {ann.WHY: note.with_changes(deadline=deadline, action=action).encode()}


__all__ = ["for_mark", "in_step", "of_mark", "trigger_facts"]
