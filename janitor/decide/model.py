"""The values that cross layers: what `observe` reads (`Observation`), what `decide` finds and plans
(`Finding`, `Action`), and what `act` applies.

They live here, with the deciding code that consumes and produces them, so that `observe` and
`act` both depend on `decide` and never on each other (DESIGN.md, "Layers"). All are frozen plain
values: an observation is a fact about one moment; a finding or an action carries its reason as
data (`decide.reasons.Reason`), rendered into words for people and never parsed back.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from janitor.decide.autoscaling import AutoscalerNote, Autoscaling
from janitor.decide.evidence import Evidence
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.readings import Readings, read
from janitor.decide.reasons import Reason
from janitor.decide.volumes import ClaimTemplates
from janitor.node_report import ConditionMessage, HoldersMessage, OomReport
from janitor.policy.endings import Ending, Queued
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import Mode

if TYPE_CHECKING:  # decide.claims reads this module's OwnerRef
    from janitor.decide.claims import ClaimsRead

# -- what was read ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """A kind the janitor lists and may act on; the same list generates its ClusterRole."""

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
    suspended: bool = False  # spec.suspend (a Job or CronJob): it starts nothing new
    # The janitor-only keys (and the janitor/expires of a mark) present here that someone other than
    # the janitor wrote last, by the apiserver's record (managedFields): never a cap, a deadline, a
    # delivered warning or a release (see `annotations.read_mark`).
    foreign_marks: frozenset[str] = frozenset()
    claims: ClaimTemplates | None = None  # a StatefulSet's claim templates: what its actions do to volumes
    # The field manager other than the janitor's that last wrote spec.replicas or spec.suspend (the
    # apiserver's managedFields): a GitOps or KEDA controller that owns them restores a reclaim.
    restored_by: str | None = None
    # The Kueue Workload that admits it, where one was looked for (a suspend goes through it); None:
    # none admits it, as far as was read (the queue label alone still says Kueue does: endings.kueue_managed).
    queued: Queued | None = None
    # Its janitor annotations as deciding reads them (TTL, expiry, keep-until, mark), parsed from the
    # fields above when the view is built: once per resourceVersion, as the watch cache keeps the view,
    # and never carried to another view (`dataclasses.replace` parses again). See decide.readings.
    readings: Readings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "readings", read(self.annotations, self.foreign_marks, self.created))


class SkipCause(StrEnum):
    """Why a kind was not listed: a kind RBAC forbids is never cleaned until an admin grants it; one
    the apiserver does not serve (Kubeflow's notebooks where Kubeflow is not installed) is normal."""

    FORBIDDEN = "forbidden"
    NOT_SERVED = "not-served"


@dataclass(frozen=True, slots=True)
class SkippedKind:
    """A configured kind that could not be listed (not served, or RBAC forbids): counted, not fatal."""

    kind: str
    reason: str
    cause: SkipCause = SkipCause.NOT_SERVED


@dataclass(frozen=True, slots=True)
class ContainerView:
    name: str
    cpu_request_cores: float = 0.0


class ContainerKind(StrEnum):
    """Where a container sits in its pod: the stuck triggers judge each kind differently."""

    APP = "app"  # spec.containers
    INIT = "init"  # spec.initContainers: runs to completion, one after another, before the app containers
    SIDECAR = "sidecar"  # an init container with restartPolicy: Always (a native sidecar): runs beside the app


@dataclass(frozen=True, slots=True)
class ContainerStatus:
    """One container's status as its kubelet reports it. Kubernetes keeps a restart count over the
    container's life and the times of its last run only (no history), so that is what the crash-loop
    trigger can prove things from; per container, because one sidecar's restarts say nothing about
    the trainer beside it."""

    name: str
    kind: ContainerKind = ContainerKind.APP
    restarts: int = 0  # restartCount: over the container's life in this pod
    state: str = ""  # "waiting", "running" or "terminated" now; "" when not reported
    reason: str = ""  # of the state now: CrashLoopBackOff, ImagePullBackOff, Completed, ...
    since: datetime.datetime | None = None  # running.startedAt, or terminated.finishedAt
    exit_code: int | None = None  # of the state now, when terminated
    last_exit: str = ""  # lastState.terminated in words: "OOMKilled, exit code 137"
    last_started: datetime.datetime | None = None  # lastState.terminated.startedAt: when its last run began
    last_exit_at: datetime.datetime | None = None  # lastState.terminated.finishedAt: when its last run ended


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
    containers: tuple[ContainerStatus, ...] = ()  # init containers (and native sidecars) first, as in the spec
    limits: Mapping[str, float] = field(default_factory=dict)  # resource -> limit, all containers
    requests: Mapping[str, float] = field(default_factory=dict)  # resource -> amount, all containers
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # requiredDuringScheduling node affinity: any term may hold, every expression of a term must
    required_affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    finalizers: tuple[str, ...] = ()
    deleting_since: datetime.datetime | None = None
    grace_seconds: int = 30


GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # a MIG slice of a profile: nvidia.com/mig-3g.40gb


def is_mig(resource: str) -> bool:
    return resource.startswith(MIG_RESOURCE_PREFIX)


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod as the pod triggers read it."""

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
    created: datetime.datetime | None = None  # metadata.creationTimestamp
    foreign_marks: frozenset[str] = frozenset()  # as ObjectView's: a bare pod is a workload that can be marked
    # The DRA ResourceClaims it names (spec.resourceClaims, and those generated for it in
    # status.resourceClaimStatuses, and the one made for its DRA-backed extended resources in
    # status.extendedResourceClaimStatus): a claim a pod that runs or waits names is in use, reserved or not.
    resource_claims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NamespaceView:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AgentCondition:
    """The node agent's condition on a node (janitor.node_report): True while processes of deleted
    pods are stuck in D state there, Unknown while the agent is starting. The message carries, as
    data, the agent's run (start, complete scans, last scan) and per Terminating pod what that
    scan saw of its tasks: only that proves a pod gone, never the status alone."""

    status: bool | None  # None: neither True nor False (Unknown)
    message: ConditionMessage  # the agent's run (when its last scan began) is in here, not lastHeartbeatTime


@dataclass(frozen=True, slots=True)
class HoldersCondition:
    """The node agent's GPU-holder condition on a node (janitor.node_report): True while processes
    of deleted pods hold GPUs there, naming each GPU, process and pod as data."""

    status: bool | None  # None: neither True nor False (Unknown)
    message: HoldersMessage


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as the stuck triggers and admin reports read it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    allocatable: Mapping[str, float] = field(default_factory=dict)
    ready: bool | None = None
    capacity: Mapping[str, float] = field(default_factory=dict)  # what it has when all its devices report
    unschedulable: bool = False  # cordoned (spec.unschedulable): new pods wait, they do not fit elsewhere
    agent: AgentCondition | None = None  # None: no node agent reports on this node
    gpu_holders: HoldersCondition | None = None  # None: no node agent reports GPU holders on this node


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything one cycle (or one re-check) read, as of `at`.

    Each kind is listed once: `objects` are the configured kinds (pods and namespaces among them
    when configured), and `pods` and `namespaces` are views of the same lists. What could not be
    read is said explicitly: `nodes_known` False means the nodes were not read (an empty tuple is
    then no evidence that a node is gone), `skipped_kinds` the kinds that could not be listed, and
    an evidence query that failed carries its failure."""

    at: datetime.datetime | None  # the apiserver's clock (its Date header) at the read; None if unknown
    objects: tuple[ObjectView, ...] = ()
    pods: tuple[PodView, ...] = ()
    namespaces: Mapping[str, NamespaceView] = field(default_factory=dict)
    nodes: tuple[NodeInfo, ...] = ()
    nodes_known: bool = False
    evidence: Evidence = field(default_factory=Evidence)
    oom: Mapping[str, tuple[OomReport, ...]] = field(default_factory=dict)  # pod uid -> the agent's reports
    skipped_kinds: tuple[SkippedKind, ...] = ()
    # Whether nodes can be added, and what autoscalers said per pod (uid -> newest note per source
    # and reason). observe always sets the first where a pending policy reads it; the default (no
    # sign of an autoscaler) is what `--node-autoscaling none` reads.
    autoscaling: Autoscaling = field(default_factory=Autoscaling)
    autoscaler: Mapping[str, tuple[AutoscalerNote, ...]] = field(default_factory=dict)
    # When the nodes were read, where earlier than the rest (the daemon lists them every
    # --node-refresh): what they say is as of then. None: read with the rest.
    nodes_at: datetime.datetime | None = None
    # The DRA ResourceClaims read (observe.claims), for the admin report; None: not read.
    claims: ClaimsRead | None = None

    def namespace(self, name: str | None) -> NamespaceView:
        """The namespace as read; one not read, as a view of its name alone (made only then: every
        workload of a cycle asks)."""
        found = self.namespaces.get(name or "")
        return found if found is not None else NamespaceView(name or "")


# -- the rails' memory ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deletion:
    """One past deletion, for the rolling-window caps; for an expiry's, what it deleted and on which
    annotation, so one that comes back under the same name with the same expiry is not deleted again."""

    at: datetime.datetime
    namespace: str | None
    target: str = ""  # "Kind/namespace/name" (an expiry's deletion only)
    rule: str = ""  # "expires=<value>" or "ttl=<value>": the annotation it was deleted on


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


# -- what was found and what is to be done ------------------------------------------------------------


class TriggerKind(StrEnum):
    """Every trigger, keyed as policy files name them (`expiry` is the annotations' own path). What
    each one reads, marks and says is its module's `TRIGGER` (decide.triggers.registry)."""

    EXPIRY = "expiry"
    IDLE_GPU = "idleGpu"
    IDLE_CPU = "idleCpu"
    PENDING = "pending"
    CRASH_LOOP = "crashLoop"
    TERMINATING = "terminating"
    HUNG = "hung"
    RESERVED_QUOTA = "reservedQuota"
    ORPHANED_CLAIM = "orphanedClaim"


class State(StrEnum):
    """A trigger's verdict on what it judged (`registry.word` gives the trigger's own word for it)."""

    FIRES = "fires"  # the condition holds: idle, stuck, crash-looping, stuck Terminating, expired
    PARTIAL = "partial"  # some GPUs idle, some busy: in use
    CLEAR = "clear"  # the condition does not hold: busy, running, not expired
    UNKNOWN = "unknown"  # the evidence does not say
    TOO_YOUNG = "too-young"  # not judged yet
    INVALID = "invalid"  # the annotation does not parse
    SKIPPED = "skipped"  # not this trigger's to judge here


class ActionType(StrEnum):
    """What a plan does to one object. Not the policy's `Action`: a report here is a Warning Event and
    a force delete is no policy's ending. The endings that act are spelled from the policy's names, so
    an action and the ending it carries out (policy.endings: its patch, its words) cannot drift apart."""

    DELETE = PolicyAction.DELETE.value
    # A Warning Event on the object plus a note on it, so the same mistake is reported once (not the
    # policy's `report` ending, which never makes an action).
    REPORT = "report"
    # The lifecycle's other endings (policy `action`): they keep the object, reclaim its pods.
    SUSPEND = PolicyAction.SUSPEND.value
    SCALE_TO_ZERO = PolicyAction.SCALE_TO_ZERO.value
    STOP = PolicyAction.STOP.value
    FORCE_DELETE = "force-delete"  # grace 0, for pods stuck Terminating on positive evidence only

    @property
    def deletes(self) -> bool:
        """Counted by the deletion caps and the tripwire (everything but a report)."""
        return self is not ActionType.REPORT

    @property
    def ending(self) -> Ending | None:
        """The policy ending this action carries out; None for a report (an Event, not the ending of
        that name) and a force delete, which no policy names."""
        if self in (ActionType.REPORT, ActionType.FORCE_DELETE):
            return None
        return PolicyAction(self.value).ending

    @classmethod
    def carrying(cls, action: PolicyAction) -> ActionType:
        """The action that carries out a policy's ending; one that does not act has none."""
        if not action.ending.acts:
            raise ValueError(f"the {action} ending makes no action")
        return cls(action.value)


EXPIRY_POLICY = "ttl-expiry"  # the policy name of the annotations' own path (janitor/ttl, janitor/expires)


@dataclass(frozen=True, slots=True)
class Action:
    """One intended change, with its reason as data; every sink renders `why` the same way."""

    type: ActionType
    target: ObjectRef
    resource_version: str
    policy: str  # the policy that decided it (EXPIRY_POLICY for janitor/ttl and janitor/expires)
    trigger: TriggerKind
    rule: str  # "ttl", "expires", "malformed", "inherited", "lifecycle", "terminating"
    reason: str  # CamelCase Event reason, e.g. "TTLExpired"
    why: Reason
    evidence: Mapping[str, str] = field(default_factory=dict)  # the values it was decided on, for the audit
    report_key: str | None = None  # REPORT: the note left so the same value is not reported again
    # What the action does to besides its target: a suspended CronJob's running Jobs, suspended with it.
    also: tuple[ObjectRef, ...] = ()
    # Annotations written with it, in the same request (a reclaim's record, checked on the next cycle).
    record: Mapping[str, str] = field(default_factory=dict)
    # The object the patch goes to when it is not the target: a Kueue-admitted workload's Workload.
    via: ObjectRef | None = None

    @property
    def key(self) -> tuple[str, ActionType, str]:
        """What a re-check must decide again, exactly: the object, the action and the policy."""
        return self.target.uid, self.type, self.policy


CPU_SIGNAL = "cpu"  # what `PodJudgement.busy_on` names CPU use by (GPU signals by their DCGM field)


@dataclass(frozen=True, slots=True)
class PodJudgement:
    """One pod's verdict inside a finding."""

    pod: ObjectRef
    state: State
    why: Reason
    idle_gpus: tuple[str, ...] = ()
    peaks: Mapping[str, float | None] = field(default_factory=dict)  # GPU -> peak over the window
    # The signals that showed use, when busy (a DCGM field, or CPU_SIGNAL): a trigger that a stuck
    # job's own spinning makes read busy is vetoed only by the others (decide.triggers.hung).
    busy_on: frozenset[str] = frozenset()
    doubt_on: frozenset[str] = frozenset()  # the signals it could not judge (unknown on them)
    never_used: bool = False  # idle on its own samples since it started (IdleGpu.never_used)


@dataclass(frozen=True, slots=True)
class StuckPod:
    """What holds a pod stuck Terminating, for the admins' report."""

    node: str | None
    since: datetime.datetime  # deletionTimestamp
    overdue: datetime.timedelta  # past deletionTimestamp + grace
    holds: tuple[Reason, ...]
    remedy: Reason | None


@dataclass(frozen=True, slots=True)
class Finding:
    """One trigger's verdict on one subject (a workload; for expiry any object; for terminating a
    pod) under one policy."""

    trigger: TriggerKind
    policy: str
    mode: Mode
    subject: ObjectRef  # the workload; the pod itself when its owner chain cannot be read
    state: State
    reason: Reason
    source: str = ""  # the policy's file:line
    known: bool = True  # False: the owner chain could not be read; never acted on
    pods: tuple[PodJudgement, ...] = ()
    gpus: int = 0  # GPUs its pods hold
    reclaim_gpu_hours: float = 0.0  # idle GPUs x the window they were proven idle for
    owner: Owner = Owner(OwnerKind.UNKNOWN)
    managed_by: str | None = None  # "Helm", "Argo CD", "Flux": they recreate what is deleted
    rule: str = ""  # expiry: "ttl", "expires", "rails"
    deadline: datetime.datetime | None = None  # expiry: when it expires
    proposal: Action | None = None  # what the trigger itself proposes (expiry, force delete)
    stuck: StuckPod | None = None  # terminating

    @property
    def workload(self) -> ObjectRef | None:
        return self.subject if self.known else None

    @property
    def never_used(self) -> bool:
        """Idle on every pod since it started, under the policy's shorter never-used window."""
        return self.state is State.FIRES and bool(self.pods) and all(j.never_used for j in self.pods)

    @property
    def why(self) -> str:
        return str(self.reason)

