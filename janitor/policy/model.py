"""What an admin policy says, as frozen values: which workloads it covers, when it fires, what follows.

Policies are plain data so that `decide/` can evaluate them without I/O and tests can build them
directly. `load.py` is the only place that turns YAML into these values; it has already checked
every range and form, so code reading a `Policy` never re-validates.

Why the shapes are what they are:

* Triggers are a tagged union keyed by their YAML key (`idleGpu`, `idleCpu`, `pending`,
  `terminating`). Adding a trigger kind means one dataclass here, one reader in `load.py`, and one
  evaluator in `decide/`; nothing else changes.
* Selection is "first match wins, per trigger kind" (`first_match`): for a given trigger kind the
  first policy in load order whose `match` selects the workload *and* that defines that trigger
  kind decides it. So `idle-gpu.yaml` and `pending.yaml` compose without either hiding the other,
  while a narrow policy placed before a broad one still overrides it. docs/policies.md says this
  with examples.
* Matching is written here, on plain strings and dicts, because it is a property of the policy
  (kube-janitor's `Rule.matches` is too); it needs no Kubernetes client and reads no clock.
"""

from __future__ import annotations

import datetime as _dt
import enum
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from janitor.policy.endings import Action as Action  # the endings' names live with what they mean


class Mode(enum.StrEnum):
    """shadow: evaluate and report what would happen (plan, metrics), never mark, warn or act.
    enforce: the lifecycle runs. New installs and every example start in shadow."""

    SHADOW = "shadow"
    ENFORCE = "enforce"


class Manager(enum.StrEnum):
    """A controller that restores what the janitor reclaims (GitOps self-heal, KEDA's minimum)."""

    ARGOCD = "argocd"
    FLUX = "flux"
    KEDA = "keda"


GAP_INTERVALS = 4
"""The longest stretch without samples an idle trigger accepts by default, in scrape intervals of
the target that exports the series: one or two missed scrapes happen, twenty minutes do not."""


class GpuSignal(enum.StrEnum):
    """A DCGM field an idle-GPU trigger reads, and the range its threshold lives in.

    They fail differently, so a policy may read several (`IdleGpu.also`): GPU_UTIL counts any
    kernel running and reads about 100 % for a job spinning in a hung collective; the PROF fields
    say how much of the GPU works but can read 0 under load on some driver and GPU combinations;
    power is judged against the GPU's idle power (`IdleGpu.idle_power`), since watts alone mean
    nothing across models."""

    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent 0-100; reads 0 for a MIG instance, busy or not
    GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0-1; measured per MIG instance
    SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"  # ratio 0-1 of cycles an SM has a warp; per MIG instance
    MEM_COPY = "DCGM_FI_DEV_MEM_COPY_UTIL"  # percent 0-100 of time memory was read or written
    POWER = "DCGM_FI_DEV_POWER_USAGE"  # watts, judged as a multiple of the GPU model's idle power

    @property
    def covers_mig(self) -> bool:
        """Whether the signal measures a MIG instance's own work. dcgm-exporter exports GPU_UTIL
        for MIG instances as 0 whatever they do (its maintainers call that expected); memory copy
        and power belong to the whole GPU, not to one slice."""
        return self in (GpuSignal.GR_ENGINE_ACTIVE, GpuSignal.SM_ACTIVE)

    @property
    def measures_work(self) -> bool:
        """Whether it shows any kernel at work: GPU_UTIL and the PROF fields do; memory copy and power
        alone miss a kernel that computes from cache or draws little."""
        return self in (GpuSignal.GPU_UTIL, GpuSignal.GR_ENGINE_ACTIVE, GpuSignal.SM_ACTIVE)

    @property
    def relative(self) -> bool:
        """Judged as a multiple of the GPU's idle power rather than on its own number."""
        return self is GpuSignal.POWER

    @property
    def maximum(self) -> float:
        """The highest threshold that means anything (for power, a multiple of idle power)."""
        return _SIGNAL_MAXIMUM[self]

    @property
    def default_threshold(self) -> float:
        """5 % busy: a notebook kernel left open idles at 0-2 %, real training is far above; power
        within a fifth above idle."""
        return _SIGNAL_DEFAULT[self]

    @property
    def short(self) -> str:
        """The name people say: GPU_UTIL, SM_ACTIVE, power."""
        return _SIGNAL_SHORT[self]


_SIGNAL_MAXIMUM = {GpuSignal.GPU_UTIL: 100.0, GpuSignal.GR_ENGINE_ACTIVE: 1.0, GpuSignal.SM_ACTIVE: 1.0,
                   GpuSignal.MEM_COPY: 100.0, GpuSignal.POWER: 5.0}
_SIGNAL_DEFAULT = {GpuSignal.GPU_UTIL: 5.0, GpuSignal.GR_ENGINE_ACTIVE: 0.05, GpuSignal.SM_ACTIVE: 0.05,
                   GpuSignal.MEM_COPY: 5.0, GpuSignal.POWER: 1.2}
_SIGNAL_SHORT = {GpuSignal.GPU_UTIL: "GPU_UTIL", GpuSignal.GR_ENGINE_ACTIVE: "GR_ENGINE_ACTIVE",
                 GpuSignal.SM_ACTIVE: "SM_ACTIVE", GpuSignal.MEM_COPY: "MEM_COPY_UTIL", GpuSignal.POWER: "power"}


class Operator(enum.StrEnum):
    """Kubernetes label selector operators (matchExpressions)."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions entry; `values` is empty for Exists/DoesNotExist."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator is Operator.EXISTS:
            return self.key in labels
        if self.operator is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        if self.operator is Operator.IN:
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values  # NotIn, as Kubernetes


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes LabelSelector: all matchLabels and all matchExpressions must hold (AND).
    An empty selector matches everything, as in Kubernetes."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True, slots=True)
class Namespaces:
    """Namespace globs (fnmatch: `*`, `?`, `[...]`). Exclude takes precedence over include."""

    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()

    def matches(self, namespace: str) -> bool:
        def hit(globs: Iterable[str]) -> bool:
            return any(fnmatch.fnmatchcase(namespace, g) for g in globs)

        return hit(self.include) and not hit(self.exclude)


@dataclass(frozen=True, slots=True)
class Match:
    """Which workloads a policy covers; every part given must hold (AND).

    `kinds` are kinds of the *owning workload* after resolving ownerReferences (Deployment, Job,
    StatefulSet, Notebook, ...; `Pod` means a bare pod). Empty means any kind. The pod selector
    must hold for every pod of the workload, which the caller checks pod by pod.
    """

    namespaces: Namespaces = field(default_factory=Namespaces)
    namespace_selector: LabelSelector = field(default_factory=LabelSelector)
    pod_selector: LabelSelector = field(default_factory=LabelSelector)
    kinds: tuple[str, ...] = ()

    def matches(
        self,
        *,
        namespace: str,
        namespace_labels: Mapping[str, str],
        kind: str,
        pod_labels: Mapping[str, str],
    ) -> bool:
        return (
            self.namespaces.matches(namespace)
            and self.namespace_selector.matches(namespace_labels)
            and (not self.kinds or kind in self.kinds)
            and self.pod_selector.matches(pod_labels)
        )


@dataclass(frozen=True, slots=True)
class NeverUsed:
    """A second, shorter window for a workload never used at all (`neverUsed:` in an idleGpu): a pod
    at least `after` old whose GPUs have stayed at or below every threshold since it started is
    marked with `warn_before` as its notice instead of the lifecycle's. A notebook opened and
    forgotten costs as much as one that worked and went quiet, and is owed less notice.

    Judged on the pod's own samples since it started (series labelled with its UID, so an earlier
    pod of the same name cannot lend it its history) within the idle window, which `after +
    warn_before` stays inside: the pod is judged on its whole life through its deadline."""

    after: _dt.timedelta
    warn_before: _dt.timedelta


@dataclass(frozen=True, slots=True)
class IdleGpu:
    """Idle when, for a GPU of the pod, the peak of `signal` over `window` is at or below
    `threshold`, with samples covering at least `min_coverage` of the window, no stretch without
    samples longer than `max_gap` (None: `GAP_INTERVALS` scrape intervals of the series' target)
    and no non-finite sample (anything less is *unknown*, never idle). Pods younger than
    `min_pod_age` are never judged."""

    key: ClassVar[str] = "idleGpu"
    signal: GpuSignal = GpuSignal.GPU_UTIL
    threshold: float = 5.0
    window: _dt.timedelta = _dt.timedelta(hours=2)
    min_coverage: float = 0.8
    min_pod_age: _dt.timedelta = _dt.timedelta(hours=2)
    max_gap: _dt.timedelta | None = None
    # More signals read with `signal` (`signals:` in YAML): a GPU is idle only when every one its
    # node exports is at or below its threshold; one its node does not export is reported as such.
    also: tuple[tuple[GpuSignal, float], ...] = ()
    # The idle power in watts per GPU model (fnmatch globs on dcgm-exporter's `modelName`), for POWER.
    idle_power: tuple[tuple[str, float], ...] = ()
    never_used: NeverUsed | None = None

    @property
    def limits(self) -> tuple[tuple[GpuSignal, float], ...]:
        """Every signal read, with its threshold, `signal` first."""
        return ((self.signal, self.threshold), *self.also)

    def idle_watts(self, model: str) -> float | None:
        """The idle power of a GPU of this model, by the first glob that matches it."""
        return next((w for glob, w in self.idle_power if model and fnmatch.fnmatchcase(model, glob)), None)


@dataclass(frozen=True, slots=True)
class IdleCpu:
    """Idle when the peak CPU use of the pod's app containers (all but `ignore_containers`) over
    `window` is at or below `cores`, or at or below `fraction_of_request` of their CPU request; exactly
    one of the two is set."""

    key: ClassVar[str] = "idleCpu"
    cores: float | None = None
    fraction_of_request: float | None = None
    window: _dt.timedelta = _dt.timedelta(hours=2)
    min_coverage: float = 0.8
    min_pod_age: _dt.timedelta = _dt.timedelta(hours=2)
    ignore_containers: tuple[str, ...] = ()
    max_gap: _dt.timedelta | None = None  # as for IdleGpu, on the containers' cAdvisor samples
    # Not in policy files: the in-use check of an idle-GPU policy with a never-used window judges a
    # pod at least this old, and younger than the window, on its CPU since it started (decide.usage).
    life_after: _dt.timedelta | None = None


@dataclass(frozen=True, slots=True)
class Pending:
    """A workload none of whose pods runs, its Pending pods unschedulable or not started for longer
    than `after` (time in that state, counted from their last progress: init containers running or
    completing); one that no node could ever hold, even with every node schedulable and reporting
    its full capacity, triggers at once."""

    key: ClassVar[str] = "pending"
    after: _dt.timedelta = _dt.timedelta(hours=24)
    include_gated: bool = False  # scheduling-gated pods (Kueue) are queued on purpose: not stuck by default


@dataclass(frozen=True, slots=True)
class Terminating:
    """A pod still Terminating `after` its deletion timestamp plus its grace period: reported to
    admins with what holds it. `force_delete` (off by default) removes it with grace 0, and only
    on positive evidence that nothing of it is alive (see decide/terminating.py)."""

    key: ClassVar[str] = "terminating"
    after: _dt.timedelta = _dt.timedelta(minutes=30)
    force_delete: bool = False


@dataclass(frozen=True, slots=True)
class ReservedQuota:
    """A workload Kueue admits whose Workload has held quota (QuotaReserved or Admitted True) for
    longer than `after` while none of its pods is running or pending: its ClusterQueue counts GPUs
    nothing uses (kueue#14811). Reported and warned about; an enforcing policy may suspend it, which
    deactivates its Workload (`spec.active: false`) and releases the quota; it is never deleted."""

    key: ClassVar[str] = "reservedQuota"
    after: _dt.timedelta = _dt.timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class OrphanedClaim:
    """A DRA ResourceClaim (resource.k8s.io/v1) that has held its devices for longer than `after`
    with no consumer: reserved for nobody, or only for pods that are gone, and named by no pod that
    runs or waits. Reported and warned about; an enforcing policy may delete it, which frees the
    devices for other pods; a claim generated for a pod goes when that pod does anyway."""

    key: ClassVar[str] = "orphanedClaim"
    after: _dt.timedelta = _dt.timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class CrashLoop:
    """A GPU workload whose every GPU pod has a container that restarted at least `restarts` times
    (each container counted on its own) and whose last run began and ended within `window`, still
    failing: it holds GPUs while doing nothing but failing. Sidecars are not judged: native ones
    (init containers with restartPolicy Always) and those named in `ignore_containers`."""

    key: ClassVar[str] = "crashLoop"
    restarts: int = 5
    window: _dt.timedelta = _dt.timedelta(hours=1)
    ignore_containers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Hung:
    """Stuck, not idle: on every GPU of the workload, `DCGM_FI_DEV_GPU_UTIL` at or above `utilization`
    at every sample of `window` while SM activity stays at or below `sm_active` and power at or below
    `power` times the GPU model's idle power (`idle_power`, as for IdleGpu). GPU_UTIL counts a kernel
    running, so a job deadlocked in a collective reads about 100 % there while its SMs and its power
    stay near idle. A quiet signal set to None is not read; at least one is. Evidence as for IdleGpu:
    anything short of the whole window, on every signal, is *unknown*, never hung."""

    key: ClassVar[str] = "hung"
    window: _dt.timedelta = _dt.timedelta(minutes=30)
    utilization: float = 90.0
    sm_active: float | None = 0.2  # a spinning collective holds one SM per channel, a working kernel most
    power: float | None = None
    idle_power: tuple[tuple[str, float], ...] = ()
    min_coverage: float = 0.8
    min_pod_age: _dt.timedelta = _dt.timedelta(minutes=30)
    max_gap: _dt.timedelta | None = None

    @property
    def quiet(self) -> tuple[tuple[GpuSignal, float], ...]:
        """The signals that must stay near idle, with their limits (power as a multiple of idle)."""
        return tuple((s, t) for s, t in ((GpuSignal.SM_ACTIVE, self.sm_active), (GpuSignal.POWER, self.power))
                     if t is not None)

    def idle_watts(self, model: str) -> float | None:
        return next((w for glob, w in self.idle_power if model and fnmatch.fnmatchcase(model, glob)), None)


@dataclass(frozen=True, slots=True)
class ActivityRule:
    """An admin's own "is it in use" check: a PromQL expression whose instant answer names the pods
    in use (by their `namespace` and `pod` labels, and `uid` or `pod_uid` where it has them)."""

    name: str
    expr: str


@dataclass(frozen=True, slots=True)
class Activity:
    """What counts as use besides the idle triggers' own signals (`activity:` in YAML).

    A pod is in use when any rule's answer has a sample for it, or while it has run less than
    `min_running`. A rule that cannot be evaluated (an error, a timeout, a partial answer), or
    whose samples name no pod, counts as use for every workload the policy covers: the janitor
    cannot tell whom it spoke of, and an admin's check that fails must never reclaim."""

    rules: tuple[ActivityRule, ...] = ()
    min_running: _dt.timedelta = _dt.timedelta(0)


Trigger = IdleGpu | IdleCpu | Pending | Terminating | CrashLoop | Hung | ReservedQuota | OrphanedClaim
TRIGGER_KINDS: tuple[type[Trigger], ...] = (IdleGpu, IdleCpu, Pending, Terminating, CrashLoop, Hung, ReservedQuota,
                                            OrphanedClaim)
T = TypeVar("T", bound=Trigger)


@dataclass(frozen=True, slots=True)
class WorkingHours:
    """The least notice counted in working time: `grace` of hours between `start` and `end` on
    `days` (0 = Monday) in `time_zone`, so a warning on Friday evening is not acted on over the
    weekend. A namespace annotated `janitor/time-zone` uses its own zone."""

    time_zone: str
    days: tuple[int, ...] = (0, 1, 2, 3, 4)
    start: _dt.time = _dt.time(9)
    end: _dt.time = _dt.time(18)
    grace: _dt.timedelta = _dt.timedelta(hours=4)


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What happens after a trigger fires, in enforce mode.

    Mark with a deadline `warn_before` ahead and warn the owner, remind every `remind_every`
    (zero: no reminders), then `action`. The action never comes sooner than `min_grace` (default:
    `warn_before`) after the warning was *delivered*, so a Slack outage moves the deadline instead
    of shortening the notice. A warning that only reached the admin channel counts as delivered
    only with `admin_fallback_counts`. Owners may keep the workload with `janitor/keep-until` up to
    `max_extension` after the first mark (zero: no extension). `honour_opt_out: false` makes the
    policy apply even to `janitor/opt-out: "true"` objects. `delete_volumes` lets the action delete
    a StatefulSet's claims when its retention policy says so (`decide.volumes`); without it such an
    action does not fit. A workload a `Manager` restores is only reported (marked, warned, never
    acted on), since the reclaim would not hold, unless `reclaim_managed` names that manager.
    """

    warn_before: _dt.timedelta = _dt.timedelta(hours=24)
    remind_every: _dt.timedelta = _dt.timedelta(hours=8)
    action: Action = Action.DELETE
    max_extension: _dt.timedelta = _dt.timedelta(days=7)
    honour_opt_out: bool = True
    min_grace: _dt.timedelta | None = None
    admin_fallback_counts: bool = False
    working_hours: WorkingHours | None = None
    delete_volumes: bool = False
    reclaim_managed: frozenset[Manager] = frozenset()

    @property
    def grace(self) -> _dt.timedelta:
        return self.warn_before if self.min_grace is None else self.min_grace


@dataclass(frozen=True, slots=True)
class Policy:
    """One admin policy. `source` is `file:line` of its entry, for plans, logs and errors."""

    name: str
    triggers: tuple[Trigger, ...]
    description: str = ""
    match: Match = field(default_factory=Match)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    mode: Mode = Mode.SHADOW
    source: str = ""
    activity: Activity | None = None  # the admin's own in-use checks, for its idle triggers

    def trigger(self, kind: type[T]) -> T | None:
        """This policy's trigger of `kind` (e.g. `policy.trigger(IdleGpu)`), or None."""
        for t in self.triggers:
            if isinstance(t, kind):
                return t
        return None


def first_match(
    policies: Sequence[Policy],
    kind: type[Trigger],
    *,
    namespace: str,
    namespace_labels: Mapping[str, str],
    workload_kind: str,
    pod_labels: Mapping[str, str],
) -> Policy | None:
    """The policy that decides trigger `kind` for this workload: the first, in load order, that
    defines that trigger and whose match selects the workload. Later policies are not consulted."""
    for policy in policies:
        if policy.trigger(kind) is not None and policy.match.matches(
            namespace=namespace, namespace_labels=namespace_labels, kind=workload_kind, pod_labels=pod_labels
        ):
            return policy
    return None
