"""Every trigger, in the order their findings are considered: the one list the rest reads.

A trigger is added here by its module's `TRIGGER` value (decide.triggers.spec); plan, selection,
the in-use checks, observing, the re-check, metrics and reports all take what they need from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from janitor.decide.model import Finding, ObjectView, Observation, State, TriggerKind
from janitor.decide.triggers import (
    crashloop,
    expiry,
    hung,
    idle,
    orphaned_claim,
    pending,
    reserved,
    signals,
    terminating,
)
from janitor.decide.triggers.spec import Role, TriggerSpec, Usage
from janitor.policy.model import Policy
from janitor.policy.model import Trigger as PolicyTrigger

ALL: tuple[TriggerSpec, ...] = (
    signals.TRIGGER,
    idle.CPU_TRIGGER,
    pending.TRIGGER,
    crashloop.TRIGGER,
    terminating.TRIGGER,
    hung.TRIGGER,
    reserved.TRIGGER,
    orphaned_claim.TRIGGER,
    expiry.TRIGGER,
)
BY_KIND: Mapping[TriggerKind, TriggerSpec] = {t.kind: t for t in ALL}
POD_TRIGGERS: tuple[TriggerSpec, ...] = tuple(t for t in ALL if t.pods is not None and t.policy is not None)
POLICY_TRIGGERS: Mapping[TriggerKind, type[PolicyTrigger]] = {t.kind: t.policy for t in ALL if t.policy is not None}
USAGE: tuple[TriggerSpec, ...] = tuple(t for t in ALL if t.usage is Usage.READS)  # the in-use checks read these
MARKING: frozenset[TriggerKind] = frozenset(t.kind for t in ALL if t.role is Role.MARKS)  # `marks`, asked per finding
OBJECT_TRIGGERS: tuple[TriggerSpec, ...] = tuple(t for t in ALL if t.subjects is not None)  # judge their own subjects


def objects(observation: Observation, policies: Sequence[Policy]) -> tuple[ObjectView, ...]:
    """The objects besides the cycle's that the lifecycle looks at (`TriggerSpec.objects`)."""
    return tuple(o for t in ALL for o in t.objects(observation, policies))


def spec(kind: TriggerKind) -> TriggerSpec:
    return BY_KIND[kind]


def of_policy(trigger: PolicyTrigger) -> TriggerSpec:
    """The trigger a policy key enables."""
    return next(t for t in ALL if t.policy is not None and isinstance(trigger, t.policy))


def word(finding: Finding) -> str:
    """The verdict as plans, metrics and logs show it: idle/busy, stuck or not, delete/keep."""
    return BY_KIND[finding.trigger].word(finding.state)


def in_use(finding: Finding) -> bool:
    """Positive evidence of use on a usage signal: no policy marks or acts on this workload."""
    return BY_KIND[finding.trigger].in_use(finding.state)


def _blind(governing: Finding | None) -> tuple[frozenset[str], frozenset[str]]:
    """What the governing trigger is blind to, and the pods it judged (its blindness covers those only:
    a stuck GPU pod's spin says nothing of its data-prep pod's CPU)."""
    if governing is None:
        return frozenset(), frozenset()
    return BY_KIND[governing.trigger].blind_to, frozenset(j.pod.uid for j in governing.pods)


def vetoes(finding: Finding, governing: Finding | None) -> bool:
    """Whether `finding` shows use that stops `governing`: any use, unless the governing trigger is
    blind to every signal it was shown on, on pods it judged itself. A busy pod naming no signal, and
    a workload in use with no busy pod (one starting), veto."""
    if not in_use(finding):
        return False
    blind, judged = _blind(governing)
    if not blind:
        return True
    busy = [j for j in finding.pods if j.state in (State.CLEAR, State.PARTIAL)]
    return not busy or any(j.pod.uid not in judged or not j.busy_on or j.busy_on - blind for j in busy)


def holds(finding: Finding, governing: Finding) -> bool:
    """Whether a usage finding that does not say idle holds what a blind trigger would do: where any
    of its pods is in doubt on a signal that trigger is not blind to (a failed read that might have
    shown use), or on a pod it did not judge. Use it is blind to holds nothing."""
    blind, judged = _blind(governing)
    if BY_KIND[finding.trigger].usage is not Usage.READS or finding.state is State.FIRES or not blind:
        return False
    unsure = [j for j in finding.pods if j.state is not State.FIRES]
    if not unsure:
        return True
    return any(j.pod.uid not in judged or j.doubt_on - blind or (
        not j.doubt_on and j.state not in (State.CLEAR, State.PARTIAL)) for j in unsure)


def marks(finding: Finding) -> bool:
    """Whether the finding goes to the lifecycle (a workload's verdict under a policy)."""
    return finding.trigger in MARKING


def condition(finding: Finding) -> str:
    """What the owner is told is wrong: "unused" where the policy's never-used window found it."""
    return "unused" if finding.never_used else BY_KIND[finding.trigger].condition


__all__ = ["ALL", "BY_KIND", "MARKING", "OBJECT_TRIGGERS", "POD_TRIGGERS", "POLICY_TRIGGERS", "USAGE", "condition",
           "in_use", "marks", "objects", "of_policy", "holds", "spec", "vetoes", "word"]
