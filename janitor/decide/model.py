"""The values that cross layers: what `observe` reads, what `decide` returns, what `act` applies.

They live here, with the deciding code that consumes and produces them, so that `observe` and
`act` both depend on `decide` and never on each other (DESIGN.md, "Layers"). All are frozen
plain values: a snapshot is a fact about one moment, and a plan is a list of intentions with
their reasons in words, which dry-run, `janitor plan`, Events and the audit log all show.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """A kind the janitor lists and may delete; the same list generates its ClusterRole."""

    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """How admins name it in settings and `explain`: `Deployment`, `notebooks.kubeflow.org`."""
        return self.kind if self.group in ("", "apps", "batch") else f"{self.plural}.{self.group}"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Which object, exactly: the UID tells a recreated object with the same name apart."""

    kind: str
    api_version: str
    namespace: str | None
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    api_version: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class ObjectView:
    """The fields of one object that deciding reads, as they were at `resource_version`."""

    ref: ObjectRef
    resource_version: str
    created: datetime.datetime
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False  # deletionTimestamp is set: it is on its way out already
    controller: OwnerRef | None = None  # the ownerReference with controller: true
    # Annotations of the pod template (Deployments, Jobs, ...): a janitor/ttl there is inherited
    # by every pod, which is almost never what the user meant.
    template_annotations: Mapping[str, str] = field(default_factory=dict)
    replicas: int | None = None  # spec.replicas where the kind has one: what scale-to-zero undoes


@dataclass(frozen=True, slots=True)
class SkippedKind:
    """A configured kind that could not be listed (not served, or RBAC forbids): counted, not fatal."""

    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    objects: tuple[ObjectView, ...]
    skipped_kinds: tuple[SkippedKind, ...] = ()
    # The apiserver's clock (its Date header) when the snapshot was read; None if unknown.
    apiserver_time: datetime.datetime | None = None


@dataclass(frozen=True, slots=True)
class Deletion:
    """One past deletion, for the rolling-window caps."""

    at: datetime.datetime
    namespace: str | None


@dataclass(frozen=True, slots=True)
class SafetyLedger:
    """What the rails remember between cycles (kept on a ConfigMap, so restarts lose nothing)."""

    deletions: tuple[Deletion, ...] = ()
    previous_candidates: int | None = None
    tripped_at: datetime.datetime | None = None  # the tripwire stopped deletions at this time
    acknowledged_at: datetime.datetime | None = None  # an admin acknowledged a trip at this time
    # The stored ledger could not be read: the caps' memory is lost, so the rails stop deletions
    # (and it is not overwritten) until an admin repairs or deletes it.
    unreadable: bool = False


class ActionType(StrEnum):
    DELETE = "delete"
    # A Warning Event on the object plus a note on it, so the same mistake is reported once.
    REPORT = "report"
    # The idle lifecycle's other endings (policy `action`): they keep the object, reclaim its pods.
    SUSPEND = "suspend"
    SCALE_TO_ZERO = "scale-to-zero"
    STOP = "stop"
    FORCE_DELETE = "force-delete"  # grace 0, for pods stuck Terminating on positive evidence only


@dataclass(frozen=True, slots=True)
class Action:
    """One intended change, with its reason in words, as every sink shows it."""

    type: ActionType
    target: ObjectRef
    resource_version: str
    rule: str  # "ttl", "expires", "malformed", "inherited-ttl"
    reason: str  # CamelCase Event reason, e.g. "TTLExpired"
    why: str  # one sentence with the numbers
    evidence: Mapping[str, str] = field(default_factory=dict)
    # For REPORT: the note the janitor leaves so it does not report the same value again.
    report_key: str | None = None


class Outcome(StrEnum):
    DELETE = "delete"
    KEEP = "keep"
    SKIP = "skip"  # not the janitor's to judge now (being deleted, protected, opted out)
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One rule's judgement of one object, for `janitor explain` and the plan table."""

    target: ObjectRef
    rule: str
    outcome: Outcome
    why: str
    deadline: datetime.datetime | None = None


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


@dataclass(frozen=True, slots=True)
class Plan:
    now: datetime.datetime
    actions: tuple[Action, ...]  # what act applies, in order
    held: tuple[Held, ...]
    verdicts: tuple[Verdict, ...]
    ledger: SafetyLedger  # the ledger to store after this cycle (deletions not yet added)
    notices: tuple[str, ...] = ()  # things admins must hear about (tripwire, skew)
    tripped_now: bool = False  # the tripwire tripped in this cycle (announce it once)

    def deletions(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.type is ActionType.DELETE)


@dataclass(frozen=True, slots=True)
class ContainerView:
    name: str
    cpu_request_cores: float = 0.0


@dataclass(frozen=True, slots=True)
class PodState:
    """What the stuck triggers read of a pod besides its phase: times come from condition and
    container-status transitions, so "stuck for 2 h" means in that state, not since creation."""

    scheduled: bool | None = None  # the PodScheduled condition (None: not reported yet)
    schedule_reason: str = ""  # Unschedulable, SchedulingGated, ...
    schedule_message: str = ""  # the scheduler's own words ("0/4 nodes are available: ...")
    scheduled_changed: datetime.datetime | None = None  # PodScheduled lastTransitionTime
    gated: bool = False  # spec.schedulingGates: queued on purpose (Kueue and the like)
    waiting: tuple[tuple[str, str, str], ...] = ()  # (container, reason, message) of waiting containers
    restarts: int = 0
    last_exit: str = ""  # the last terminated container state in words ("OOMKilled, exit 137")
    last_exit_at: datetime.datetime | None = None  # when that container last stopped
    limits: Mapping[str, float] = field(default_factory=dict)  # resource -> limit, all containers
    requests: Mapping[str, float] = field(default_factory=dict)  # resource -> amount, all containers
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # requiredDuringScheduling node affinity: any term may hold, every expression of a term must
    required_affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    finalizers: tuple[str, ...] = ()
    deleting_since: datetime.datetime | None = None
    grace_seconds: int = 30


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as the stuck triggers and admin reports read it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    allocatable: Mapping[str, float] = field(default_factory=dict)
    ready: bool | None = None
    # The node agent's condition: (status, message, lastHeartbeatTime), if it reports on this node.
    agent: tuple[str, str, datetime.datetime | None] | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod as the idle and stuck triggers read it."""

    ref: ObjectRef
    resource_version: str
    labels: Mapping[str, str]
    controller: OwnerRef | None
    node: str | None
    phase: str
    started: datetime.datetime | None  # status.startTime: when its containers started
    gpus: int  # nvidia.com/gpu plus nvidia.com/mig-* it requests (limits count: GPUs are set as limits)
    containers: tuple[ContainerView, ...] = ()
    deleting: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)
    state: PodState = field(default_factory=PodState)


@dataclass(frozen=True, slots=True)
class NamespaceView:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
