"""What a trigger is, as one value each trigger module exports (`TRIGGER`).

Every table that lists triggers reads these values (`triggers.registry`): which pods a trigger
judges, which policy key enables it, what observing must read for it (each cycle, and in the
re-check right before acting on it), whether its findings go through the lifecycle, and how usage
bears on it. A new trigger is its module and one line in the registry; the silent traps of adding
one by hand (evidence read only for the idle policies, a busy shortcut dropping the fields another
trigger needs, the busy veto) are fields here that the type checker asks for.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from janitor import annotations as ann
from janitor.decide.evidence import CpuKey, GpuKey
from janitor.decide.model import Finding, ObjectView, Observation, PodView, State, TriggerKind
from janitor.decide.selection import CronJobMode, Gate, Workload
from janitor.decide.triggers import Trigger
from janitor.policy.model import Policy
from janitor.policy.model import Trigger as PolicyTrigger
from janitor.why_note import Scalar


class Role(StrEnum):
    """What follows a finding that fires."""

    MARKS = "marks"  # the lifecycle: mark, warn the owner, act at the deadline on the policy's action
    FORCES = "forces"  # the trigger proposes its own action, through the rails alone (expiry deletes)
    REPORTS = "reports"  # the admins' report; an action only where a policy allows it (stuck Terminating)


class Usage(StrEnum):
    """How a workload's use bears on the trigger."""

    READS = "reads"  # its verdict says whether the workload is in use: busy on it vetoes every mark
    VETOED = "vetoed"  # it judges something else (stuck, crash-looping); busy on a usage signal still vetoes
    NONE = "none"  # use does not matter (an expired TTL, a pod stuck Terminating)


class NodeScope(StrEnum):
    """Which nodes the re-check reads."""

    NONE = "none"
    ALL = "all"  # whether any node could hold the pod (pending)
    OF_PODS = "of-pods"  # the nodes its pods are on (terminating)


@dataclass(frozen=True)
class Reads:
    """What observing reads for one policy's trigger; a cycle reads the union over its policies.

    `gpu` and `cpu` name one query each with the level above which this trigger calls a peak busy
    (None: no one level says busy for every reader, so the query keeps every series' fields)."""

    nodes: bool = False
    oom: bool = False  # the node agent's OOM reports
    autoscalers: bool = False  # what node autoscalers say about pods
    ghost_gpus: bool = False  # GPU memory in use with no pod
    gpu: tuple[tuple[GpuKey, float | None], ...] = ()
    gpu_low: tuple[GpuKey, ...] = ()  # queries whose lowest sample per GPU is read too (no busy level then)
    # queries whose reader looks across pods (which signals each node exports at all): their answer
    # holds every pod's series every cycle, none carried between cycles (janitor.observe.carry)
    gpu_whole: tuple[GpuKey, ...] = ()
    cpu: tuple[tuple[CpuKey, float | None, float | None], ...] = ()  # (key, busy above: in cores, as a fraction)


@dataclass(frozen=True)
class Recheck:
    """What the re-check reads before acting on the trigger's finding, besides the object and its
    owner chain."""

    pods: bool = False  # the workload's pods, by its selector (pods created since the cycle too)
    usage: bool = False  # every usage signal the policies read, for those pods: busy on any one vetoes
    nodes: NodeScope = NodeScope.NONE
    oom: bool = False
    autoscalers: bool = False
    kueue: bool = False  # the Kueue Workload of the object, whatever the action (observe.kueue)
    claims: bool = False  # a DRA claim: the claim itself and every pod of its namespace (observe.claims)


@dataclass(frozen=True)
class Cycle:
    """What a trigger that judges objects of its own (not only the pods' workloads) is given: the
    cycle's workloads of pods, what was observed, every policy, and how workloads are made."""

    workloads: Sequence[Workload]
    observation: Observation
    policies: Sequence[Policy]
    now: datetime.datetime
    gate: Gate
    by_uid: Mapping[str, ObjectView]
    cronjob_mode: CronJobMode
    owner_keys: Sequence[tuple[str, str]]


# The findings of every policy with the trigger, and the workloads with no pods among what they
# judged (the lifecycle knows the pods' workloads already).
Subjects = Callable[[Cycle], tuple[list[Finding], tuple[Workload, ...]]]


def _no_objects(_: Observation, __: Sequence[Policy]) -> tuple[ObjectView, ...]:
    return ()


def _none(_: PolicyTrigger) -> Reads:
    return Reads()


def _no_facts(_: PolicyTrigger) -> dict[str, Scalar]:
    return {}


def gap_words(configured: datetime.timedelta | None) -> str:
    return f"gaps <= {duration(configured)}" if configured else "gaps <= 4 scrape intervals (>= 1m)"


def duration(delta: datetime.timedelta) -> str:
    """A duration as policy files write it (2h, 30m), for a trigger's facts."""
    try:
        return ann.format_duration(delta)
    except ValueError:  # sub-second: not from a policy file, which only has whole units
        return f"{delta.total_seconds():g}s"


@dataclass(frozen=True)
class TriggerSpec:
    """One trigger, whole: the rest of the janitor asks this value, never the trigger's name."""

    kind: TriggerKind
    role: Role
    usage: Usage
    findings: Trigger
    # The policy key that enables it, and the pods of a workload it judges; None for expiry, which
    # judges every object by its own annotations.
    policy: type[PolicyTrigger] | None = None
    pods: Callable[[Workload], Sequence[PodView]] | None = None
    reads: Callable[[PolicyTrigger], Reads] = _none
    recheck: Recheck = Recheck()
    # The numbers the policy judged by, as the policy file names them (a mark's janitor/why facts).
    facts: Callable[[PolicyTrigger], dict[str, Scalar]] = _no_facts
    # The trigger with every number it judges by, for `janitor check` ("pending: after 1d in that state").
    describe: Callable[[PolicyTrigger], str] = str
    condition: str = "idle"  # what the owner is told is wrong ("stuck Pending")
    words: Mapping[State, str] = field(default_factory=dict)  # its own words for verdicts (expiry: delete/keep)
    daemonsets: bool = False  # judges pods of DaemonSets too (their workloads are no candidates)
    # Usage signals whose use does not veto it, since what it finds makes them read busy (hung:
    # GPU_UTIL counts a spinning kernel); use shown on any other signal still does.
    blind_to: frozenset[str] = frozenset()
    # A trigger whose subjects are not (only) the pods' workloads judges them itself, policies and
    # all (`pods` None): reservedQuota what Kueue admits, orphanedClaim DRA claims.
    subjects: Subjects | None = None
    # Objects besides the cycle's that the lifecycle looks at for it (claims, which are no kind's
    # objects unless --kinds lists them): marked ones at least, so a removed policy's marks go.
    objects: Callable[[Observation, Sequence[Policy]], tuple[ObjectView, ...]] = _no_objects

    def word(self, state: State) -> str:
        return self.words.get(state) or _WORDS[state]

    def in_use(self, state: State) -> bool:
        """Positive evidence of use: no policy marks or acts on the workload."""
        return self.usage is Usage.READS and state in (State.CLEAR, State.PARTIAL)


_WORDS = {
    State.FIRES: "idle", State.PARTIAL: "partially-idle", State.CLEAR: "busy", State.UNKNOWN: "unknown",
    State.TOO_YOUNG: "too-young", State.INVALID: "invalid", State.SKIPPED: "skip",
}


__all__ = ["Cycle", "NodeScope", "Reads", "Recheck", "Role", "Subjects", "TriggerSpec", "Usage"]
