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
from janitor.decide.triggers import registry
from janitor.decide.triggers.spec import duration as _duration
from janitor.policy.model import Policy
from janitor.why_note import Scalar, WhyNote


def trigger_facts(trigger: TriggerKind, policy: Policy, *, gpus: int) -> dict[str, Scalar]:
    """The numbers the policy judged by (window, threshold, ...), as the policy file names them
    (each trigger's own, `TriggerSpec.facts`), and the GPUs the workload holds: what a researcher
    needs to tell whether the verdict is fair."""
    spec = registry.spec(trigger)
    found = policy.trigger(spec.policy) if spec.policy is not None else None
    facts = spec.facts(found) if found is not None else {}
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
