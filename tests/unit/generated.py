"""Generated clusters for the promise properties (test_promises.py), and a small model of what
happens around the janitor between its cycles.

A `Cluster` is the ground truth of one generated cluster: its objects and pods with their
annotations and owner chains, its namespaces and nodes, what every pod really uses on each signal,
which evidence queries fail, which warnings were delivered before the run began, and what Slack
holds. `Cluster.observe(policies, at)` is what one cycle (or one re-check) reads of it.

`Simulator` runs the janitor's plans on a cluster for many cycles: it applies the plan's changes
to the annotations as the acting layer does (a send's intent first, its delivery record after,
`janitor.decide.lifecycle.delivered`; a send in flight asked about on Slack and sent again under a
new intent), carries out the actions after their re-check, lets the Deployment controller copy
annotations onto ReplicaSets, and does what users do between cycles. It keeps its own record of
every warning that really reached someone: what the message said would happen, when, and when
it arrived.

Everything random is drawn through hypothesis, so every failure shrinks to a small cluster and a
short script.
"""

from __future__ import annotations

import copy
import datetime
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from factories import NOW
from hypothesis import strategies as st

from janitor import annotations as ann
from janitor.annotations import Delivery, Intent, NoticeKind, WarnedOf
from janitor.decide.autoscaling import AutoscalerNote, Autoscaling, Said
from janitor.decide.claims import Claim, ClaimRef, ClaimsRead, Consumer, Device
from janitor.decide.clicks import ButtonValue, Op, Outcome, Presser, judge
from janitor.decide.evidence import (
    ActivityEvidence,
    CpuEvidence,
    CpuUsage,
    Evidence,
    EvidenceWindow,
    GpuEvidence,
    GpuSeries,
    PodKey,
    Quality,
)
from janitor.decide.lifecycle import Change, LifecycleSettings, MarkCaps, Step, delivered, resend
from janitor.decide.model import (
    Action,
    ActionType,
    AgentCondition,
    ContainerStatus,
    ContainerView,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodState,
    PodView,
    SafetyLedger,
    SkippedKind,
    TriggerKind,
)
from janitor.decide.owners import Owner, OwnerKind, find_owner
from janitor.decide.plan import CyclePlan, PlanSettings
from janitor.decide.rails import Caps, Rails, record_deletions
from janitor.decide.selection import CronJobMode
from janitor.decide.volumes import ClaimTemplates
from janitor.node_report import AgentRun, ConditionMessage, PodTaskState, Sight
from janitor.policy.endings import Queued
from janitor.policy.model import (
    Action as PolicyAction,
)
from janitor.policy.model import (
    Activity,
    ActivityRule,
    CrashLoop,
    GpuSignal,
    Hung,
    IdleCpu,
    IdleGpu,
    LabelSelector,
    Lifecycle,
    Manager,
    Match,
    Mode,
    Namespaces,
    NeverUsed,
    Operator,
    Pending,
    Policy,
    Requirement,
    ReservedQuota,
    Terminating,
    WorkingHours,
)

M = datetime.timedelta(minutes=1)
H = datetime.timedelta(hours=1)
DAY = datetime.timedelta(days=1)

NAMESPACES = ("team-a", "team-b", "ml", "kube-system", "vault")
PROTECTED = ("kube-system", "kube-public", "kube-node-lease", "vault")
NODES = ("gpu-1", "gpu-2", "cpu-1")
GONE_POLICY = "retired"  # a policy name that marks may carry but no policy has any more
SIDECAR = "sidecar"
API = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
       "Job": "batch/v1", "CronJob": "batch/v1", "Notebook": "kubeflow.org/v1", "Pod": "v1", "ConfigMap": "v1",
       "Namespace": "v1"}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job", "CronJob", "Notebook", "Pod", "DaemonSet")
MARK_STATES = ("none", "warned", "unwarned", "in-flight", "partial", "copy", "user-expires", "malformed")
SIGNAL_MAX = {str(s): s.maximum for s in GpuSignal if not s.relative}
IDLE_WATTS, BUSY_WATTS = 55.0, 400.0  # the generated GPUs' draw, idle and at full load
IDLE_POWER = (("NVIDIA A100*", IDLE_WATTS),)  # what a policy reading power is told
MODELS = ("NVIDIA A100-SXM4-80GB", "Tesla T4")  # the second: a model the policies give no idle power for
GPU_STEP = datetime.timedelta(seconds=15)
CPU_STEP = datetime.timedelta(minutes=1)


def stamp(when: datetime.datetime) -> str:
    return ann.format_deadline(when)


# -- the ground truth -----------------------------------------------------------------------------------


@dataclass
class Use:
    """What one pod really does, as the exporters would report it."""

    gpu: tuple[float | None, ...] = ()  # per GPU, the peak as a fraction of the signal's range (None: NaN)
    gpu_coverage: float = 1.0  # the part of the window the samples cover
    gpu_gap: bool = False  # the exporter lost one GPU's series
    cpu: float | None = 0.0  # peak cores of the app containers (None: not a finite number)
    sidecar: float = 0.0  # peak cores of the sidecar
    cpu_coverage: float = 1.0
    absent: bool = False  # no series at all (a scrape gap)
    gpu_absent: bool = False  # no GPU series, its CPU read (its node's dcgm-exporter down)
    doubt: str = ""  # what is wrong with the samples: DOUBTS (the GPUs are MIG slices with "mig")
    # Per signal, what it reads where that differs from `gpu` (a hung job: GPU_UTIL full, SM idle).
    signals: tuple[tuple[str, float], ...] = ()
    missing: tuple[str, ...] = ()  # signals with no series for this pod while its node exports them
    unexported: tuple[str, ...] = ()  # signals its node exports for no pod (the PROF fields are off by default)
    model: str = MODELS[0]
    uids: str = ""  # the exporter's pod UID labels: UIDS
    predecessor: float | None = None  # with UID labels: a pod of the same name before it, its peak per GPU
    host: str = ""  # the exporter's hostname label on its series where that is not its node's name


@dataclass
class Thing:
    """An object as the cluster holds it."""

    kind: str
    namespace: str | None
    name: str
    uid: str
    created: datetime.datetime
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    controller: OwnerRef | None = None
    deleting: bool = False
    template: dict[str, str] = field(default_factory=dict)
    replicas: int | None = None
    version: int = 1
    suspended: bool = False
    foreign: set[str] = field(default_factory=set)  # keys of its mark someone other than the janitor wrote last
    claims: ClaimTemplates | None = None  # a StatefulSet's claim templates and their retention
    restored_by: str | None = None  # the field manager other than the janitor's that last wrote its replicas
    queued: Queued | None = None  # the Kueue Workload that admits it, as read (observe.kueue)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.kind, API.get(self.kind, "v1"), self.namespace, self.name, self.uid)

    def owner_ref(self) -> OwnerRef:
        return OwnerRef(self.kind, API.get(self.kind, "v1"), self.name, self.uid)

    def view(self) -> ObjectView:
        return ObjectView(self.ref, str(self.version), self.created, dict(self.annotations), dict(self.labels),
                          self.deleting, self.controller, dict(self.template), self.replicas, self.suspended,
                          frozenset(self.foreign & set(self.annotations)), self.claims, self.restored_by,
                          queued=self.queued)


@dataclass
class Pod:
    namespace: str
    name: str
    uid: str
    controller: OwnerRef | None
    node: str | None
    phase: str
    started: datetime.datetime | None
    gpus: int
    created: datetime.datetime
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    containers: tuple[ContainerView, ...] = ()
    deleting: bool = False
    state: PodState = field(default_factory=PodState)
    use: Use = field(default_factory=Use)
    version: int = 1
    foreign: set[str] = field(default_factory=set)
    claimed: int = 0  # GPUs held through a DRA claim, none requested (`gpus` 0): seen on the GPU read alone

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("Pod", "v1", self.namespace, self.name, self.uid)

    @property
    def holds(self) -> int:
        """The GPUs dcgm-exporter maps to it: requested or claimed."""
        return self.gpus or self.claimed

    def view(self) -> PodView:
        return PodView(self.ref, str(self.version), dict(self.labels), self.controller, self.node, self.phase,
                       self.started, self.gpus, self.containers, self.deleting, dict(self.annotations), self.state,
                       self.created, frozenset(self.foreign & set(self.annotations)),
                       resource_claims=(f"{self.name}-gpu",) if self.claimed else ())

    def as_object(self) -> ObjectView:
        return ObjectView(self.ref, str(self.version), self.created, dict(self.annotations), dict(self.labels),
                          self.deleting, self.controller, foreign_marks=frozenset(self.foreign & set(self.annotations)))


@dataclass(frozen=True)
class Warning:
    """A warning that reached someone: what it said would happen, when it arrived, and for whom
    (the owner's `<kind>:<value>`; "" for a record that does not say, as an older janitor's)."""

    uid: str
    action: str
    deadline: datetime.datetime
    at: datetime.datetime
    to_admins: bool
    owner: str = ""
    volumes: bool = False  # it said the action deletes the workload's volumes


@dataclass
class Cluster:
    objects: dict[str, Thing]
    pods: dict[str, Pod]
    namespaces: dict[str, tuple[dict[str, str], dict[str, str]]]  # name -> (labels, annotations)
    nodes: tuple[NodeInfo, ...] = ()
    nodes_known: bool = True
    pods_listed: bool = False
    namespaces_listed: bool = False
    autoscaling: Autoscaling = field(default_factory=Autoscaling)  # whether nodes can be added
    autoscaler: dict[str, tuple[AutoscalerNote, ...]] = field(default_factory=dict)  # pod uid -> what they said
    failing: set[str] = field(default_factory=set)  # evidence queries that fail ("gpu:..." / "cpu:...")
    unread: set[str] = field(default_factory=set)  # evidence queries not made at all
    history: dict[str, list[Warning]] = field(default_factory=dict)  # warnings delivered before the run
    slack: dict[str, Delivery] = field(default_factory=dict)  # intent id -> the delivery Slack has
    serial: int = 0
    forbidden: str = ""  # a kind the janitor may no longer read ("Pod", "Namespace": an RBAC edit), or ""
    expires_by_janitor: set[str] = field(default_factory=set)  # uids whose janitor/expires the janitor wrote
    swept: list[tuple[str, bool]] = field(default_factory=list)  # deleted by kube-janitor: (uid, the janitor's?)
    # What the activity rules answer (docs/policies.md, "activity rules"): "named" names some pods
    # (by name, by their own UID, or by an earlier pod's UID), "failed" errors, "anonymous" names none.
    activity: str = "named"
    named: int = 1  # the pods named: those whose serial is this modulo 4 (0: the stuck jobs' in "signals")
    # What the DRA claims' read says of the claims pods name: each holds a GPU driver's device
    # ("gpu"), a NIC's ("nic"), or the claims were not read ("unread") or their list failed ("failed").
    claims: str = "unread"

    def new_uid(self, what: str) -> str:
        self.serial += 1
        return f"{what}-new-{self.serial}"

    def copy(self) -> Cluster:
        return copy.deepcopy(self)

    # -- reading ------------------------------------------------------------------------------------

    def find(self, uid: str) -> Thing | Pod | None:
        return self.objects.get(uid) or self.pods.get(uid)

    def notes(self, uid: str) -> dict[str, str] | None:
        found = self.find(uid)
        return None if found is None else found.annotations

    def namespace_views(self) -> dict[str, NamespaceView]:
        return {name: NamespaceView(name, dict(labels), dict(notes))
                for name, (labels, notes) in self.namespaces.items()}

    def observe(self, policies: Sequence[Policy], at: datetime.datetime) -> Observation:
        objects = [t.view() for t in self.objects.values()]
        if self.pods_listed:
            objects += [p.as_object() for p in self.pods.values()]
        if self.namespaces_listed:
            objects += [ObjectView(ObjectRef("Namespace", "v1", None, name, f"ns-{name}"), "1", NOW - 400 * DAY,
                                   dict(notes), dict(labels)) for name, (labels, notes) in self.namespaces.items()]
        pods = () if self.forbidden == "Pod" else tuple(p.view() for p in self.pods.values())
        if self.forbidden == "Pod":  # its watch answered 403: no pods at all, as the watch cache has them
            objects = [o for o in objects if o.ref.kind != "Pod"]
        namespaces = {} if self.forbidden == "Namespace" else self.namespace_views()
        if self.forbidden == "Namespace":
            objects = [o for o in objects if o.ref.kind != "Namespace"]
        skipped = (SkippedKind(self.forbidden, f"forbidden: {self.forbidden.lower()}s is forbidden"),) \
            if self.forbidden else ()
        return Observation(at, tuple(objects), pods, namespaces,
                           self.nodes, self.nodes_known, self.evidence(policies, at), skipped_kinds=skipped,
                           autoscaling=self.autoscaling, autoscaler={
                               uid: notes for uid, notes in self.autoscaler.items() if uid in self.pods},
                           claims=self.claims_read(pods))

    def claims_read(self, pods: Sequence[PodView]) -> ClaimsRead | None:
        if self.claims == "unread":
            return None
        if self.claims == "failed":
            return ClaimsRead(version="v1", problem="ResourceClaims could not be listed (403 Forbidden)")
        driver = "gpu.nvidia.com" if self.claims == "gpu" else "dra.net"
        return ClaimsRead(tuple(Claim(ClaimRef(p.ref.namespace or "", name, f"claim-{p.ref.uid}"), "1",
                                      "resource.k8s.io/v1", p.created, True,
                                      consumers=(Consumer("", "pods", p.ref.name, p.ref.uid),),
                                      devices=(Device("d", driver, "pool", "d0"),))
                                for p in pods for name in p.resource_claims), "v1")

    def evidence(self, policies: Sequence[Policy], at: datetime.datetime) -> Evidence:
        """What Prometheus answers to the queries the janitor makes for these policies (their own
        signals and their in-use checks')."""
        from janitor.observe.observation import covered_namespaces, needs

        need = needs(policies)
        gpu: dict[tuple[str, datetime.timedelta], GpuEvidence] = {}
        cpu: dict[tuple[datetime.timedelta, tuple[str, ...]], CpuEvidence] = {}
        running = [p for p in self.pods.values() if p.phase == "Running" and not p.use.absent]
        off: dict[str | None, frozenset[str]] = {}  # per node, the signals it exports for no pod
        for p in running:
            off[p.node] = off.get(p.node, frozenset()) | set(p.use.unexported)
        # The pods read: those of the namespaces the usage policies cover, as the queries scope them
        # (a node's other pods may be in none of them).
        covered = covered_namespaces(policies, self.namespace_views())
        read = [p for p in running if covered is None or p.namespace in covered]
        for signal, span in sorted(need.gpu, key=str):
            key = f"gpu:{signal}:{span}"
            if key in self.unread:
                continue
            window = EvidenceWindow(signal, span, GPU_STEP, at)
            # Which nodes export it, read across the cluster where a policy (or an in-use check beside
            # GPU_UTIL) reads several signals
            # (every node with a GPU pod, but where the field is off): a pod missing its series alone.
            exporting = frozenset(p.use.host or p.node or "" for p in running if p.holds and not p.use.gpu_absent
                                  and signal not in off[p.node]) if (signal, span) in need.gpu_exporting else None
            gpu[(signal, span)] = GpuEvidence(window, failed="query timed out") if key in self.failing else \
                GpuEvidence(window, {PodKey(p.namespace, p.name): _series(p, signal, window, off[p.node])
                                     for p in read if p.holds and not p.use.gpu_absent}, exporting=exporting)
        for span, ignored in sorted(need.cpu, key=str):
            key = f"cpu:{span}:{','.join(ignored)}"
            if key in self.unread:
                continue
            window = EvidenceWindow("cpu", span, CPU_STEP, at)
            cpu[(span, ignored)] = CpuEvidence(window, failed="partial response") if key in self.failing else \
                CpuEvidence(window, {PodKey(p.namespace, p.name): _cpu(p, SIDECAR in ignored, window)
                                     for p in read})
        return Evidence(gpu, cpu, activity={expr: self.activity_answer() for expr in need.activity})

    def activity_answer(self) -> ActivityEvidence:
        """Every fourth pod (by its serial) named: by name alone, by its own UID, or by another's."""
        if self.activity == "failed":
            return ActivityEvidence(failed="query timed out")
        if self.activity == "anonymous":
            return ActivityEvidence(anonymous=1)
        return ActivityEvidence({PodKey(p.namespace, p.name): frozenset({("", p.uid, "an-earlier-pod")[
            serial_of(p) // 4 % 3]}) for p in self.pods.values() if serial_of(p) % 4 == self.named})

    # -- changing -----------------------------------------------------------------------------------

    def write(self, uid: str, patch: Mapping[str, str | None], *, by_janitor: bool = True) -> bool:
        """A merge patch of annotations on the object with this uid, by the janitor or someone else
        (the apiserver records who: a key of a mark someone else wrote last is foreign); False when
        it is gone."""
        found = self.find(uid)
        if found is None:
            return False
        marked = ann.carries_mark(found.annotations) or ann.carries_mark({k: v for k, v in patch.items() if v})
        for key, value in patch.items():
            if value is None:
                found.annotations.pop(key, None)
                found.foreign.discard(key)
            else:
                found.annotations[key] = value
                if by_janitor and key == ann.EXPIRES:
                    self.expires_by_janitor.add(uid)
                elif key == ann.EXPIRES:
                    self.expires_by_janitor.discard(uid)
                if by_janitor:
                    found.foreign.discard(key)
                elif key in ann.JANITOR_ONLY_KEYS or (key == ann.EXPIRES and marked):
                    found.foreign.add(key)
        found.version += 1
        return True

    def below(self, uid: str) -> tuple[list[str], list[str]]:
        """The objects and pods whose controller chain passes through `uid` (not `uid` itself)."""
        objects: list[str] = []
        frontier = {uid}
        while frontier:
            step = [t.uid for t in self.objects.values() if t.controller is not None
                    and t.controller.uid in frontier and t.uid not in objects]
            objects += step
            frontier = set(step)
        tops = {uid, *objects}
        pods = [p.uid for p in self.pods.values() if p.controller is not None and p.controller.uid in tops]
        return objects, pods

    def delete(self, uid: str) -> None:
        """Deleted with background propagation: the garbage collector takes what it owns, and a
        namespace takes everything in it."""
        if uid.startswith("ns-"):
            name = uid[3:]
            self.namespaces.pop(name, None)
            self.objects = {u: t for u, t in self.objects.items() if t.namespace != name}
            self.pods = {u: p for u, p in self.pods.items() if p.namespace != name}
            return
        objects, pods = self.below(uid)
        for gone in (uid, *objects):
            self.objects.pop(gone, None)
        for gone in (uid, *pods):
            self.pods.pop(gone, None)

    def stop_pods(self, uid: str) -> None:
        """Suspend, scale to zero or stop: the workload stays, its pods go."""
        for gone in self.below(uid)[1]:
            self.pods.pop(gone, None)

    def copy_to_replicasets(self) -> None:
        """The Deployment controller copies a Deployment's annotations onto its ReplicaSets; it adds
        and overwrites, and never removes one."""
        for t in self.objects.values():
            if t.kind == "ReplicaSet" and t.controller is not None and t.controller.kind == "Deployment":
                source = self.objects.get(t.controller.uid)
                if source is not None and any(t.annotations.get(k) != v for k, v in source.annotations.items()):
                    changed = {k: v for k, v in source.annotations.items() if t.annotations.get(k) != v}
                    self.write(t.uid, changed, by_janitor=False)  # kube-controller-manager writes the copy


def gpu_key(trigger: IdleGpu, signal: GpuSignal | None = None) -> str:
    return f"gpu:{signal or trigger.signal}:{trigger.window}"


def gpu_keys(trigger: IdleGpu) -> set[str]:
    """The evidence keys of every signal the trigger reads."""
    return {gpu_key(trigger, s) for s, _ in trigger.limits}


def cpu_key(trigger: IdleCpu) -> str:
    return f"cpu:{trigger.window}:{','.join(sorted(trigger.ignore_containers))}"


SCRAPE = datetime.timedelta(seconds=15)
DOUBTS = ("", "gap", "nan", "interval", "mig")
# "": no series carries a pod UID (matched by name); "own": each carries the pod's; "mixed": the
# exporter was restarted with the UID flag within the window, so GPU 0 also has an unlabelled part.
UIDS = ("", "own", "mixed")


def quality(use: Use, window: EvidenceWindow | None = None, life: datetime.timedelta | None = None) -> Quality:
    """What Prometheus would say of the samples behind `use`; for a pod younger than the window
    (`life`), its own series began at its start, so the window's time before it is a gap too."""
    gap = 30 * M if use.doubt == "gap" else SCRAPE
    if life is not None and window is not None:
        gap = min(window.window, window.window - life + gap)
    return Quality(None if use.doubt == "interval" else SCRAPE, gap, use.doubt == "nan")


def _life(pod: Pod, window: EvidenceWindow) -> datetime.timedelta | None:
    """How long the pod has run, where that is less than the window (its series began then)."""
    if pod.started is None or window.at - pod.started >= window.window:
        return None
    return max(window.at - pod.started, datetime.timedelta(0))


def _series(pod: Pod, signal: str, window: EvidenceWindow, unexported: frozenset[str]) -> tuple[GpuSeries, ...]:
    use = pod.use
    if signal in use.missing or signal in unexported:
        return ()
    life = _life(pod, window)
    samples = max(0, int((life / SCRAPE if life else window.expected_at(SCRAPE)) * use.gpu_coverage))
    level = dict(use.signals).get(signal)
    fractions = use.gpu if level is None else (level,) * pod.holds
    peaks = [None if f is None else _reading(signal, f) for f in fractions[: pod.holds]]
    peaks += [_reading(signal, 0.0)] * (pod.holds - len(peaks))
    if use.gpu_gap and peaks:
        peaks = peaks[:-1]
    mig = use.doubt == "mig"
    uid = pod.uid if use.uids else ""
    # The lowest sample: a signal that reads otherwise (`signals`) reads so all along (a hung job's
    # GPU_UTIL stays full); a peak of `gpu` is the most of a GPU that worked in bursts and rested.
    host = use.host or pod.node or ""
    own = tuple(GpuSeries(f"{i}/1" if mig else str(i), peak, samples, host, quality(use, window, life), mig, use.model,
                          uid=uid, low=peak if level is not None or peak is None else 0.0)
                for i, peak in enumerate(peaks))
    if use.uids == "mixed" and own:  # the GPU's samples from before the restart, without a UID
        own += (replace(own[0], peak=_reading(signal, 0.0), samples=samples // 2, uid=""),)
    if not use.uids or use.predecessor is None:
        return own
    # A pod of the same name before this one (a StatefulSet's pod re-created): its own UID, a clean
    # series over the whole window on every GPU, idle or busy. It says nothing about this pod.
    before = _reading(signal, use.predecessor)
    return own + tuple(GpuSeries(f"{i}/1" if mig else str(i), before, window.expected_at(SCRAPE), pod.node or "",
                                 Quality(SCRAPE, SCRAPE), mig, use.model, uid=f"{pod.uid}-before", low=before)
                       for i in range(pod.gpus))


def _reading(signal: str, fraction: float) -> float:
    """What the exporter reports for a GPU doing `fraction` of its most on this signal."""
    if signal == str(GpuSignal.POWER):
        return IDLE_WATTS + fraction * (BUSY_WATTS - IDLE_WATTS)
    return fraction * SIGNAL_MAX[signal]


def _cpu(pod: Pod, sidecar_ignored: bool, window: EvidenceWindow) -> CpuUsage:
    use = pod.use
    peak = use.cpu if use.cpu is None or sidecar_ignored else use.cpu + use.sidecar
    life = _life(pod, window)
    expected = int(life / window.step) if life else window.expected_samples
    return CpuUsage(peak, max(0, int(expected * use.cpu_coverage)), quality(use, window, life))


# -- strategies -------------------------------------------------------------------------------------------

@functools.cache
def _sampled(typed: tuple[tuple[type, object], ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(tuple(choice for _, choice in typed))


def one_of(choices: Sequence[Any]) -> st.SearchStrategy[Any]:
    """One of `choices`, shrinking towards the first (built once where it can be: building a
    strategy costs more than drawing from it; keyed with the types, as "delete" == Action.DELETE)."""
    try:
        return _sampled(tuple((type(choice), choice) for choice in choices))
    except TypeError:  # unhashable choices
        return st.sampled_from(tuple(choices))


@functools.cache
def ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


BOOLEANS = st.booleans()


@st.composite
def idle_gpu(draw: st.DrawFn) -> IdleGpu:
    signal = draw(one_of((GpuSignal.GPU_UTIL, GpuSignal.GR_ENGINE_ACTIVE)))
    top = SIGNAL_MAX[str(signal)]
    window = draw(one_of((H, 2 * H)))
    low = draw(one_of((True, False)))
    coverage, age = draw(one_of((0.8, 0.5))), draw(one_of((H, 2 * H, 3 * H)))
    # The other signals it reads (as labs that enabled the PROF fields write them): chosen by what
    # was drawn, not drawn (see `with_signals`).
    extra = ALSO[(low + 2 * (window == H) + 4 * (coverage == 0.8) + 3 * int(age / H)) % len(ALSO)]
    also = tuple((s, (1.2 if low else 3.0) if s.relative else (0.05 if low else 0.5) * s.maximum)
                 for s in extra if s is not signal)
    return IdleGpu(signal, (0.05 if low else 0.5) * top, window, coverage, age, also=also,
                   idle_power=IDLE_POWER if any(s.relative for s, _ in also) else ())


ALSO: tuple[tuple[GpuSignal, ...], ...] = ((), (), (), (GpuSignal.SM_ACTIVE, GpuSignal.POWER), (GpuSignal.POWER,),
                                           (GpuSignal.MEM_COPY,), (GpuSignal.GR_ENGINE_ACTIVE, GpuSignal.SM_ACTIVE))


@st.composite
def idle_cpu(draw: st.DrawFn) -> IdleCpu:
    by_cores = draw(BOOLEANS)
    return IdleCpu(cores=draw(one_of((0.1, 1.0))) if by_cores else None,
                   fraction_of_request=None if by_cores else draw(one_of((0.1, 0.5))),
                   window=draw(one_of((H, 2 * H))), min_coverage=0.8,
                   min_pod_age=draw(one_of((H, 2 * H))),
                   ignore_containers=draw(one_of(((), (SIDECAR,)))))


TRIGGERS: Mapping[str, st.SearchStrategy[object]] = {
    "idleGpu": idle_gpu(),
    "idleCpu": idle_cpu(),
    "pending": st.builds(Pending, after=st.sampled_from((30 * M, 4 * H)), include_gated=st.booleans()),
    "crashLoop": st.builds(CrashLoop, restarts=st.sampled_from((3, 5)), window=st.just(H)),
    "terminating": st.builds(Terminating, after=st.sampled_from((10 * M, H)), force_delete=st.booleans()),
}


TRIGGER_KINDS = st.lists(one_of(("idleGpu", "idleGpu", "idleCpu", "idleCpu", "pending", "crashLoop", "terminating")),
                         min_size=1, max_size=3, unique=True)


@st.composite
def matches(draw: st.DrawFn) -> Match:
    include = draw(one_of((("*",), ("*",), ("team-*",), ("ml", "team-a"), ("*", "kube-system"))))
    exclude = draw(one_of(((), (), ("team-b",), ("t*",))))
    ns_selector = draw(one_of((LabelSelector(), LabelSelector(), LabelSelector((("tier", "gpu"),)))))
    pod_selector = draw(one_of((
        LabelSelector(), LabelSelector(),
        LabelSelector(match_expressions=(Requirement("app", Operator.IN, ("jupyter",)),)),
        LabelSelector(match_expressions=(Requirement("app", Operator.NOT_IN, ("batch",)),)))))
    kinds = draw(one_of(((), (), ("Notebook", "Pod"), ("Job", "Deployment", "StatefulSet"))))
    return Match(Namespaces(include, exclude), ns_selector, pod_selector, kinds)


@st.composite
def lifecycles(draw: st.DrawFn) -> Lifecycle:
    hours = draw(one_of((None, None, None, WorkingHours("Europe/Berlin", grace=4 * H))))
    return Lifecycle(
        warn_before=draw(one_of((H, 6 * H, 24 * H))),
        remind_every=draw(one_of((datetime.timedelta(0), 2 * H, 8 * H))),
        action=draw(one_of((PolicyAction.DELETE, PolicyAction.DELETE, PolicyAction.SUSPEND,
                            PolicyAction.SCALE_TO_ZERO, PolicyAction.STOP, PolicyAction.REPORT))),
        max_extension=draw(one_of((datetime.timedelta(0), DAY, 7 * DAY))),
        honour_opt_out=draw(BOOLEANS),
        min_grace=draw(one_of((None, None, 30 * M, 12 * H))),
        admin_fallback_counts=draw(BOOLEANS),
        working_hours=hours,
        delete_volumes=draw(one_of((False, False, True))),
        reclaim_managed=draw(one_of((frozenset(), frozenset(), frozenset({Manager.ARGOCD}),
                                     frozenset({Manager.KEDA, Manager.FLUX}), frozenset(Manager)))),
    )


@st.composite
def policy(draw: st.DrawFn, name: str) -> Policy:
    kinds = draw(TRIGGER_KINDS)
    triggers = tuple(draw(TRIGGERS[k]) for k in kinds)  # type: ignore[misc]
    mode = draw(one_of((Mode.ENFORCE, Mode.ENFORCE, Mode.SHADOW)))
    return Policy(name, triggers, match=draw(matches()), lifecycle=draw(lifecycles()), mode=mode,  # type: ignore[arg-type]
                  source=f"policies.yaml:{name}")


@st.composite
def policy_sets(draw: st.DrawFn) -> tuple[Policy, ...]:
    count = draw(ints(1, 4))
    return tuple(draw(policy(f"p{i}")) for i in range(count))


@st.composite
def plan_settings(draw: st.DrawFn) -> PlanSettings:
    rails = Rails(protected_namespaces=PROTECTED, honour_opt_out=draw(BOOLEANS),
                  caps=draw(one_of((Caps(1000, 1000, 1000, 1000), Caps(1000, 1000, 1000, 1000), Caps()))),
                  dry_run=draw(one_of((False, False, False, True))))
    lifecycle = LifecycleSettings(pace=draw(one_of((H, H, datetime.timedelta(0)))),
                                  caps=draw(one_of((MarkCaps(), MarkCaps(2, 1, 1)))))
    return PlanSettings(rails, lifecycle,
                        cronjob_mode=draw(one_of((CronJobMode.JOB, CronJobMode.JOB, CronJobMode.CRONJOB))))


@dataclass(frozen=True)
class Story:
    """A mark as the generator wrote it, and the warning that was really delivered before, if any."""

    notes: dict[str, str]
    delivered: Warning | None = None
    intent: Intent | None = None  # a send in flight
    on_slack: Delivery | None = None  # ... that Slack has (the record of it was lost)
    foreign: frozenset[str] = frozenset()  # keys of it someone other than the janitor wrote (forged)


@st.composite
def marks(draw: st.DrawFn, uid: str, policies: Sequence[Policy], *, profile: str = "any",
          strangers: Sequence[str] = ()) -> Story:
    """Any state a mark can be in on the object `uid` ("due": mostly warned and past its deadline;
    "idle": mostly none yet)."""
    due = profile == "due"
    weights = {"due": ("warned",) * 6 + MARK_STATES, "idle": ("none",) * 12 + MARK_STATES}.get(
        profile, MARK_STATES + ("none", "none", "warned", "partial", "partial", "copy"))
    state = draw(one_of(weights))
    if state == "none":
        return Story({})
    if state == "user-expires":
        return Story({ann.EXPIRES: stamp(NOW + draw(one_of((-3 * H, 5 * H, -30 * DAY))))})
    enforcing = [p for p in policies if p.mode is Mode.ENFORCE]
    names = [p.name for p in (enforcing if due and enforcing else policies)] + ([] if due else [GONE_POLICY])
    name = draw(one_of(names))
    found = next((p for p in policies if p.name == name), None)
    named = str(found.lifecycle.action) if found is not None and draw(ints(0, 3)) else \
        str(draw(one_of(tuple(PolicyAction))))
    marked_at = NOW - (30 * H if due else draw(one_of((H, 10 * H, 30 * H, 8 * DAY))))
    deadline = marked_at + (24 * H if due else draw(one_of((H, 6 * H, 24 * H, 48 * H))))
    # Marks written before janitor/deadline kept their deadline in janitor/expires: still on clusters.
    due_key = ann.EXPIRES if draw(ints(0, 4)) == 0 else ann.DEADLINE
    notes = {due_key: stamp(deadline), ann.POLICY: name, ann.REASON: "idle: GPU 0 peak 0",
             ann.MARKED_AT: stamp(marked_at), ann.MARKED_UID: uid}
    story = Story(notes)
    if state in ("warned", "in-flight", "partial", "copy", "malformed") and (state != "in-flight" or draw(BOOLEANS)):
        warned_at = min(NOW, marked_at + (0 * H if due else draw(one_of((0 * H, 30 * M, 5 * H)))))
        told = deadline + draw(one_of((0 * H, 0 * H, -2 * H, 3 * H)))
        to_admins = not due and draw(ints(0, 3)) == 0
        delivery = Delivery("D0OWNER" if not to_admins else "C0ADMINS", f"{warned_at.timestamp():.6f}", to_admins)
        notes |= {ann.WARNED_AT: stamp(warned_at), ann.WARNED_VIA: str(delivery),
                  ann.WARNED_OF: str(WarnedOf(named, told))}
        # For whom: not recorded (an older janitor), the owners workloads get here, or someone since gone.
        to = draw(one_of(("", "", "email:alice@lab.example", "channel:#team-ml", "email:carol@lab.example")))
        if to:
            notes[ann.WARNED_TO] = to
        if draw(BOOLEANS):
            notes[ann.REMINDED_AT] = stamp(min(NOW, warned_at + 2 * H))
        story = Story(notes, Warning(uid, named, told, warned_at, to_admins, to))
    if state == "in-flight" or (state == "unwarned" and draw(BOOLEANS)):
        at = NOW - draw(one_of((2 * M, 40 * M, 3 * H)))
        kind = draw(one_of((NoticeKind.WARNING, NoticeKind.WARNING, NoticeKind.REMINDER)))
        warns_of = WarnedOf(named, deadline) if kind is NoticeKind.WARNING else None
        intent = Intent(kind, f"gen{uid[-6:]}-{int(at.timestamp())}", at, warns_of)
        notes[ann.NOTICE] = str(intent)
        on_slack = None
        if draw(BOOLEANS):  # it went out; the janitor stopped before recording it
            on_slack = Delivery("D0OWNER", f"{(at + 5 * M).timestamp():.6f}")
        told_now = Warning(uid, named, deadline, at + 5 * M, False) if on_slack and warns_of else None
        story = Story(notes, told_now or story.delivered, intent, on_slack)
    if state == "partial":
        keys = sorted(notes)
        gone = draw(st.sets(st.sampled_from(keys), min_size=1, max_size=len(keys) - 1))
        for key in gone:
            del notes[key]
    if state == "copy":
        notes[ann.MARKED_UID] = draw(one_of((*strangers, "uid-of-a-deleted-object")))
        story = Story(notes)  # delivered, but to the object it was written on
    if state == "malformed":
        key = draw(one_of(sorted(notes)))
        notes[key] = draw(one_of(("soon", "", "2026-02-30T00:00:00Z", "delete", "owner /")))
    if draw(ints(0, 4)) == 0:  # someone other than the janitor wrote some of it: forged, never a delivery
        forged = frozenset(draw(st.sets(st.sampled_from(sorted(notes)), min_size=1, max_size=3)))
        warned = forged & {ann.WARNED_AT, ann.WARNED_VIA, ann.WARNED_OF, ann.NOTICE}
        story = replace(story, foreign=forged, delivered=None if warned else story.delivered)
    return story


@st.composite
def user_notes(draw: st.DrawFn, owner: bool = True) -> dict[str, str]:
    notes: dict[str, str] = {}
    ttl = draw(one_of((None, None, None, "forever", "FOREVER", "1h", "30d", "0s", "8 hours")))
    if ttl is not None:
        notes[ann.TTL] = ttl
    keep = draw(one_of((None, None, None, 5 * H, -5 * H, 3 * DAY, 30 * DAY, "next week")))
    if keep is not None:
        notes[ann.KEEP_UNTIL] = keep if isinstance(keep, str) else stamp(NOW + keep)
    opt_out = draw(one_of((None,) * 6 + ("true", " True ", "false")))
    if opt_out is not None:
        notes[ann.OPT_OUT] = opt_out
    who = draw(one_of((None, "alice@lab.example", "#team-ml", "U0ALICE123", "bob"))) if owner else None
    if who is not None:
        notes[ann.OWNER] = who
    return notes


@st.composite
def uses(draw: st.DrawFn, gpus: int, *, idle: bool = False) -> Use:
    levels = (0.0, 0.0, 0.01) if idle else (0.0, 0.0, 0.01, 0.3, 0.97, None)
    gpu = tuple(draw(one_of(levels)) for _ in range(gpus))
    cpu = draw(one_of((0.01, 0.05) if idle else (0.01, 0.05, 0.3, 3.0, 40.0, None)))
    odd = not idle and draw(ints(0, 5)) == 0
    return Use(gpu, draw(one_of((0.4, 1.0))) if odd else 1.0, odd and draw(BOOLEANS), cpu,
               draw(one_of((0.0, 0.0, 0.0, 2.0) if idle else (0.0, 2.0))), draw(one_of((0.4, 1.0))) if odd else 1.0,
               odd and draw(BOOLEANS), draw(one_of(DOUBTS + ("",) * (12 if idle else 4))))


def with_uids(use: Use, serial: int, *, idle: bool) -> Use:
    """Pod UID labels on some pods' series, and beside some of those a predecessor of the same name;
    a mix of labelled and unlabelled series (never idle) only where the pod may be odd anyway.

    Chosen by the pod's serial, not drawn: a draw more would change every cluster the derandomized
    default run draws after it, and with them the situations it is known to reach."""
    uids = ("", "own", "", "own", "" if idle else "mixed")[serial % 5]
    return replace(use, uids=uids, predecessor=(None, 0.0, 0.97)[serial // 5 % 3] if uids else None)


_SM, _GR, _UTIL, _POWER = (str(s) for s in (GpuSignal.SM_ACTIVE, GpuSignal.GR_ENGINE_ACTIVE, GpuSignal.GPU_UTIL,
                                             GpuSignal.POWER))
_A100, _T4 = MODELS
_Story = tuple[tuple[tuple[str, float], ...], tuple[str, ...], tuple[str, ...], str]
_PLAIN: _Story = ((), (), (), _A100)
# (signals that read otherwise, signals missing for the pod, signals its node exports for no pod,
# GPU model): where the signals disagree (a job hung in a collective, SM activity while GPU_UTIL
# reads 0, power alone above idle, a PROF field stuck at 0 under load), a series lost for one pod,
# a node without the PROF fields or without SM activity, a GPU model the policies give no idle
# power for.
_ODD: tuple[_Story, ...] = (
    (((_UTIL, 1.0), (_SM, 0.01), (_GR, 0.01), (_POWER, 0.01)), (), (), _A100),
    (((_UTIL, 0.0), (_SM, 0.6)), (), (), _A100), (((_POWER, 0.6),), (), (), _A100),
    (((_UTIL, 0.6), (_GR, 0.0), (_SM, 0.0)), (), (), _A100), ((), (_SM,), (), _A100),
    ((), (), (_SM, _GR), _A100), ((), (), (_SM,), _A100), ((), (), (), _T4),
    (((_UTIL, 0.0), (_SM, 0.6)), (), (_GR,), _T4))
# Workloads at full GPU_UTIL (docs/policies.md, "hung"): stuck (SM activity and power idle), working,
# dipping below the hung level, SM activity at exactly 0 (the PROF fields' fault), power between an
# idle policy's limit and the hung one's (stuck, and in use to the idle policy: that use vetoes).
_FULL: tuple[tuple[tuple[str, float], ...], ...] = (
    _ODD[0][0], _ODD[0][0], ((_UTIL, 1.0), (_SM, 0.3), (_POWER, 0.3)), ((_UTIL, 0.5), (_SM, 0.01), (_POWER, 0.01)),
    ((_UTIL, 1.0), (_SM, 0.0), (_POWER, 0.01)), ((_UTIL, 1.0), (_SM, 0.01), (_POWER, 0.05)))
# Idle pods stay idle on GPU_UTIL, some on a node that lacks a signal, some without a signal's
# series while their node exports it, some in use on SM activity or power alone (what only a
# policy reading several signals sees).
_IDLE_STORIES = (_PLAIN,) * 8 + tuple(s for s in _ODD if s[2] and not s[0]) + _ODD[1:3]
_STORIES = (_PLAIN,) * 3 + _ODD


def with_signals(use: Use, serial: int, *, idle: bool) -> Use:
    """What each GPU signal reads where that differs from GPU_UTIL (see `_ODD`), by the pod's
    serial like `with_uids` (a draw more would change the clusters the default run is known to
    reach), on a cycle prime to its."""
    stories = _IDLE_STORIES if idle else _STORIES
    # Scrambled: serials step in patterns (a chain's objects, then its pods) a plain modulus follows.
    scrambled = (serial * 2654435761) % 2**32
    signals, missing, unexported, model = stories[scrambled // 7 % len(stories)]
    if idle and (signals, missing, unexported, model) == _PLAIN and scrambled // 11 % 4 == 0:
        # An idle pod whose SM activity series is lost while its node exports the field (for its
        # other pods, perhaps of namespaces no usage policy reads): unknown to a policy reading it.
        missing = (_SM,)
    return replace(use, signals=signals, missing=missing, unexported=unexported, model=model)


POD_STORIES = ("running",) * 5 + ("crash-looping",) * 3 + ("restarted", "pending", "pending", "starting", "gated",
                                                            "never-fits", "stuck-terminating", "stuck-terminating",
                                                            "succeeded")


@st.composite
def pods(draw: st.DrawFn, cluster: Cluster, namespace: str, name: str, controller: OwnerRef | None,
         *, profile: str = "any", story: str | None = None) -> Pod:
    """A pod with one story: running (idle or not), crash-looping, restarted long ago, pending in
    one of its ways, stuck Terminating, or finished."""
    calm = profile != "any"
    story = story or draw(one_of(("running",) * 12 + ("pending",) if calm else POD_STORIES))
    gpus = draw(one_of((1, 1, 2) if calm else (1, 1, 2, 0)))
    phase = {"pending": "Pending", "starting": "Pending", "gated": "Pending", "never-fits": "Pending",
             "succeeded": "Succeeded"}.get(story, "Running")
    age = 3 * DAY if calm else draw(one_of((30 * M, 3 * H, 10 * H, 3 * DAY)))
    started = None if phase == "Pending" else NOW - age
    state = PodState()
    if story == "crash-looping":
        state = PodState(containers=(ContainerStatus(
            "main", restarts=7, state="waiting", reason="CrashLoopBackOff", last_exit="OOMKilled, exit code 137",
            last_started=NOW - 11 * M, last_exit_at=NOW - 10 * M),))
    elif story == "restarted":
        state = PodState(containers=(ContainerStatus(
            "main", restarts=draw(one_of((2, 7))), state="running", since=NOW - 3 * H + M,
            last_exit="Error, exit code 1", last_started=NOW - 4 * H, last_exit_at=NOW - 3 * H),))
    elif phase == "Pending":
        since = NOW - draw(one_of((10 * M, 5 * H, 2 * DAY)))
        state = {
            "pending": PodState(scheduled=False, schedule_reason="Unschedulable", scheduled_changed=since,
                                schedule_message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                                requests={"nvidia.com/gpu": float(gpus)} if gpus else {}),
            "starting": PodState(scheduled=True, scheduled_changed=since,
                                 waiting=(("main", "ImagePullBackOff", "pull access denied"),)),
            "gated": PodState(gated=True, schedule_reason="SchedulingGated", scheduled_changed=since),
            "never-fits": PodState(scheduled=False, schedule_reason="Unschedulable", scheduled_changed=since,
                                   requests={"nvidia.com/gpu": 16.0}),
        }[story]
    deleting = story == "stuck-terminating"
    if deleting:
        state = replace(state, deleting_since=NOW - draw(one_of((5 * M, 2 * H))),
                        finalizers=draw(one_of(((), (), ("example.com/hold",)))))
    app = "" if calm else draw(one_of(("jupyter", "jupyter", "batch", "")))
    labels = {"app": app} if app else {}
    containers = (ContainerView("main", 4.0 if calm else draw(one_of((4.0, 4.0, 0.0)))),)
    if draw(BOOLEANS):
        containers += (ContainerView(SIDECAR, 0.5),)
    notes = {}
    if draw(ints(0, 5)) == 0:
        notes[ann.OPT_OUT] = "true"
    uid = cluster.new_uid(f"pod-{name}")
    use = with_signals(with_uids(draw(uses(gpus, idle=calm)), cluster.serial, idle=calm), cluster.serial, idle=calm)
    if calm and draw(ints(0, 4)) == 0:  # mixed signals: one GPU busy beside an idle one, or busy on one signal only
        mixed = draw(one_of(("one-gpu", "gpu-not-cpu", "cpu-not-gpu")))
        use = replace(use, gpu=(0.97,) + use.gpu[1:] if mixed != "cpu-not-gpu" else use.gpu,
                      cpu=40.0 if mixed == "cpu-not-gpu" else use.cpu)
    node = None if state.scheduled is False else draw(one_of(NODES))  # an unschedulable pod is bound to no node
    return Pod(namespace, name, uid, controller, node, phase, started, gpus,
               (started or NOW) - M, labels, notes, containers, deleting, state, use)


@st.composite
def workloads(draw: st.DrawFn, cluster: Cluster, index: int, policies: Sequence[Policy], *,
              profile: str = "any", theme: str | None = None, kinds: tuple[str, ...] = (),
              managed: bool = False) -> None:
    """One workload (of one of `kinds`, where given) with its owner chain and pods, added to `cluster`;
    `managed`: mostly one that GitOps or KEDA keeps."""
    calm = profile != "any"  # "due" and "idle": plain, readable, idle workloads
    kind = draw(one_of(kinds or (WORKLOAD_KINDS[:-1] if calm else WORKLOAD_KINDS)))
    namespace = draw(one_of(NAMESPACES[:3] if calm else NAMESPACES + NAMESPACES[:3]))
    name = f"w{index}"
    created = NOW - draw(one_of((2 * H, 5 * DAY)))
    strangers = [*cluster.objects, *cluster.pods]

    def thing(kind: str, name: str, controller: Thing | None = None) -> Thing:
        made = Thing(kind, namespace, name, cluster.new_uid(kind.lower()), created,
                     controller=controller.owner_ref() if controller is not None else None,
                     replicas=1 if kind in ("Deployment", "StatefulSet", "ReplicaSet") else None)
        cluster.objects[made.uid] = made
        return made

    chain: list[Thing] = []
    if kind == "Deployment":
        chain = [thing("Deployment", name)]
        chain.append(thing("ReplicaSet", f"{name}-7d9f", chain[0]))
    elif kind == "CronJob":
        chain = [thing("CronJob", name)]
        chain.append(thing("Job", f"{name}-2901", chain[0]))
    elif kind == "Notebook":
        chain = [thing("Notebook", name)]
        chain.append(thing("StatefulSet", name, chain[0]))
        chain[1].claims = draw(one_of(CLAIMS))  # its workspace volume, from the StatefulSet the Notebook made
    elif kind != "Pod":
        chain = [thing(kind, name)]
        if kind == "StatefulSet":  # its volumes: kept by default, deleted when scaled or deleted if it says so
            chain[0].claims = draw(one_of(CLAIMS[2:] if kinds else CLAIMS))  # a case of chosen kinds: claims
    if chain and chain[0].kind in ("Deployment", "StatefulSet", "Notebook", "CronJob", "Job") and (
            not calm or managed):
        # Who else keeps it: GitOps (labels), KEDA or an HPA (the manager of its replicas), plain Helm.
        manager = draw(one_of(MANAGERS[3:] if managed else MANAGERS))
        if manager in ("argocd", "flux", "helm"):
            chain[0].labels.update(MANAGER_LABELS[manager])
        elif manager and chain[0].replicas is not None:
            chain[0].restored_by = manager
    parent = chain[-1].owner_ref() if chain else None
    count = draw(ints(1, 3) if calm or kind == "Pod" else ints(0, 3))
    theme = theme or (None if calm else draw(one_of((None, None, None, "crash-looping", "stuck-terminating",
                                                      "pending"))))
    members = [draw(pods(cluster, namespace, f"{name}-{i}", parent, profile=profile, story=theme))
               for i in range(1 if kind == "Pod" else count)]
    for pod in members:
        cluster.pods[pod.uid] = pod
    top = chain[0] if chain else (members[0] if members else None)
    if top is None:
        return
    # A CronJob's run: its Job carries the mark (the Job is the workload with --cronjob-target job), its
    # CronJob the owner's opt-out, owner and keep-until, which never reach the Job by themselves.
    marked = chain[1] if kind == "CronJob" and draw(BOOLEANS) else top
    story = draw(marks(marked.uid, policies, profile=profile, strangers=strangers))
    notes = draw(user_notes()) if not calm else {ann.OWNER: "alice@lab.example"} | (
        {ann.OPT_OUT: "true"} if draw(ints(0, 4)) == 0 else {})
    if kind == "CronJob" and draw(ints(0, 2)) == 0:
        notes[ann.OPT_OUT] = "true"  # the schedule opted out: its runs are too
    top.annotations.update(notes)
    marked.annotations.update(story.notes)
    marked.foreign |= story.foreign
    if isinstance(marked, Thing) and marked.claims is not None and ann.WARNED_OF in marked.annotations \
            and draw(BOOLEANS):
        marked.annotations[ann.WARNED_OF] += " volumes"  # the warning said the volumes would go
        if story.delivered is not None:
            story = replace(story, delivered=replace(story.delivered, volumes=True))
    warned_of = WarnedOf.parse(marked.annotations.get(ann.WARNED_OF, ""))
    if managed and warned_of is not None and story.delivered is not None and draw(BOOLEANS):
        # Warned, as a workload a manager keeps is, that it is only reported.
        marked.annotations[ann.WARNED_OF] = str(replace(warned_of, action="report"))
        story = replace(story, delivered=replace(story.delivered, action="report"))
    if kind == "CronJob" and not calm and draw(ints(0, 3)) == 0:
        top.suspended = True  # suspended since, its run left behind
    if story.delivered is not None:
        cluster.history.setdefault(marked.uid, []).append(story.delivered)
    if story.intent is not None and story.on_slack is not None:
        cluster.slack[story.intent.id] = story.on_slack
    if kind == "Deployment" and draw(ints(0, 2)):  # the controller's copy, possibly stale
        stale = draw(st.sets(st.sampled_from(sorted(top.annotations)), max_size=2)) if top.annotations else set()
        chain[1].annotations.update({k: v for k, v in top.annotations.items() if k not in stale})
        if ann.DEADLINE in top.annotations and draw(ints(0, 2)) == 0:  # copied while its deadline was in expires
            chain[1].annotations[ann.EXPIRES] = top.annotations[ann.DEADLINE]
    if chain and not calm and draw(ints(0, 4)) == 0:  # a TTL in the pod template, inherited by the pods
        chain[-1].template[ann.TTL] = "1h"
        for pod in members:
            pod.annotations[ann.TTL] = "1h"
    if chain and members and not calm and draw(ints(0, 5)) == 0:  # another object carries this mark
        members[0].annotations.update({k: v for k, v in top.annotations.items() if k in ann.MARK_KEYS})
    defect = "none" if calm or not chain else draw(one_of(("none",) * 6 + ("missing", "deleting")))
    if defect != "none":
        broken = draw(one_of(chain))
        if defect == "missing":
            del cluster.objects[broken.uid]
        else:
            broken.deleting = True


@st.composite
def clusters(draw: st.DrawFn, policies: Sequence[Policy], *, profile: str = "any", theme: str | None = None,
             kinds: tuple[str, ...] = (), managed: bool = False) -> Cluster:
    """A whole cluster: namespaces, nodes, 1-6 workloads (pods of one story, `theme`, where given),
    loose objects, evidence gaps."""
    calm = profile != "any"
    namespaces: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for name in NAMESPACES:
        labels = {"tier": draw(one_of(("gpu", "cpu")))}
        notes: dict[str, str] = {}
        if draw(ints(0, 4 if calm else 5)) == 0:
            notes[ann.OPT_OUT] = "true"
        if draw(BOOLEANS):
            notes[ann.OWNER] = "#team-ml"
        if draw(ints(0, 4)) == 0:
            notes[ann.TIME_ZONE] = "America/New_York"
        if not calm and draw(ints(0, 6)) == 0:
            notes[ann.TTL] = "1h"
        namespaces[name] = (labels, notes)
    pending = theme in STORIES["pending"]
    nodes_known = pending or draw(BOOLEANS)  # a pending policy reads the nodes
    # the GPU node group scaled to zero (scale-from-zero, the cost setting): often, where pods are pending
    at_zero = draw(ints(0, 1 if theme in STORIES["pending"] else 3)) == 0
    node_views = tuple(NodeInfo(n, {"pool": n[:3]}, (("node.kubernetes.io/out-of-service", "", "NoExecute"),)
                                if n == "gpu-2" and draw(BOOLEANS) else (),
                                {"nvidia.com/gpu": 8.0 if n.startswith("gpu") else 0.0, "cpu": 64.0},
                                draw(one_of((True, False)))) for n in NODES
                       if draw(ints(0, 5)) and not (at_zero and n.startswith("gpu")))
    cluster = Cluster({}, {}, namespaces, node_views, nodes_known, pods_listed=not calm and draw(BOOLEANS),
                      namespaces_listed=not calm and draw(ints(0, 3)) == 0)
    # an RBAC edit took pods or namespaces from the janitor (its watch answers 403): now and then
    cluster.forbidden = draw(one_of(("",) * 10 + ("Pod", "Namespace"))) if not calm else ""
    for index in range(draw(ints(1, 6))):
        draw(workloads(cluster, index, policies, profile=profile, kinds=kinds, managed=managed,
                       theme=draw(one_of((None, theme, theme))) if theme else None))
    if not calm:
        for index in range(draw(ints(0, 2))):
            namespace = draw(one_of(NAMESPACES))
            loose = Thing("ConfigMap", namespace, f"cm{index}", cluster.new_uid("configmap"),
                          NOW - draw(one_of((2 * H, 5 * DAY))))
            strangers = [*cluster.objects]
            loose.annotations.update(draw(user_notes(owner=False)) | draw(marks(loose.uid, policies,
                                                                                strangers=strangers)).notes)
            cluster.objects[loose.uid] = loose
        cluster.autoscaling = draw(one_of((AUTOSCALED, KARPENTER, Autoscaling()) if pending else
                                          (Autoscaling(), Autoscaling(), AUTOSCALED, AUTOSCALED, KARPENTER)))
        if cluster.autoscaling.present:  # what they said of pods is a sign of them too (observe reads it so)
            cluster.autoscaler = {p.uid: draw(autoscaler_notes(cluster.autoscaling.sources))
                                  for p in cluster.pods.values() if p.phase == "Pending" and draw(ints(0, 2))}
    cluster.nodes = tuple(replace(n, agent=agent, ready=True if agent is not None and agent.status is False
                                  and (agent.message.summary == PROVING or draw(BOOLEANS)) else n.ready)
                          for n in cluster.nodes for agent in [draw(agents(cluster, n.name,
                                                                           stuck=theme in STORIES["stuck"]))])
    if not calm:
        keys = sorted({k for p in policies if (g := p.trigger(IdleGpu)) for k in gpu_keys(g)} |
                      {cpu_key(c) for p in policies if (c := p.trigger(IdleCpu))})
        if keys:
            cluster.failing = set(draw(st.sets(st.sampled_from(keys), max_size=1)))
            cluster.unread = set(draw(st.sets(st.sampled_from(keys), max_size=1))) if draw(ints(0, 5)) == 0 \
                else set()
        if cluster.serial % 3 == 0:  # by the serial, after every draw: the draws stay as they were
            older_mark_opted_out(cluster, policies)
    return cluster


def older_mark_opted_out(cluster: Cluster, policies: Sequence[Policy]) -> None:
    """A workload that opted out after a policy honouring opt-outs marked it, its deadline still in
    janitor/expires (an older janitor's mark), beside a pod whose owner is being deleted: the
    namespace's coverage is unsure, so the mark stays and only its deadline may move out of
    kube-janitor's reach."""
    honouring = [p.name for p in policies if p.lifecycle.honour_opt_out]
    marked = sorted((t for t in cluster.objects.values() if t.kind != "ConfigMap" and ann.DEADLINE in t.annotations
                     and t.annotations.get(ann.MARKED_UID) == t.uid), key=lambda t: t.uid)
    if not honouring or not marked:
        return
    chosen = marked[cluster.serial % len(marked)]
    chosen.annotations[ann.EXPIRES] = chosen.annotations.pop(ann.DEADLINE)
    chosen.annotations[ann.POLICY] = honouring[0]
    chosen.annotations[ann.OPT_OUT] = "true"
    going = Thing("ReplicaSet", chosen.namespace, f"{chosen.name}-going", cluster.new_uid("replicaset"), NOW - 3 * DAY,
                  deleting=True)
    cluster.objects[going.uid] = going
    uid = cluster.new_uid("pod")
    cluster.pods[uid] = Pod(chosen.namespace, f"{going.name}-0", uid, going.owner_ref(), "cpu-1", "Running",
                            NOW - 3 * DAY, 0, NOW - 3 * DAY)


AUTOSCALED = Autoscaling(("cluster-autoscaler's status ConfigMap kube-system/cluster-autoscaler-status",),
                         ("cluster-autoscaler",))
KARPENTER = Autoscaling(("the API group karpenter.sh",), ("karpenter",))
SPOKEN = {"cluster-autoscaler": ("TriggeredScaleUp", "NotTriggerScaleUp"),
          "karpenter": ("Nominated", "FailedScheduling")}


@st.composite
def autoscaler_notes(draw: st.DrawFn, running: Sequence[str]) -> tuple[AutoscalerNote, ...]:
    """What node autoscalers said about a pending pod: a node coming, a limit, not now, never, or
    words not understood, first and last said at any time around now (a clock ahead too); or, as
    often, what a settled "never" looks like: every autoscaler that runs (`running`) said it again
    and again, lately."""
    settled = draw(BOOLEANS)
    sources = set(running) | set(draw(st.sets(st.sampled_from(sorted(SPOKEN)), min_size=0 if running else 1)))
    notes = []
    for source in sorted(sources):
        said = Said.NEVER if settled else draw(one_of((Said.NEVER, *Said)))
        coming = said is Said.COMING
        last = NOW + (-3 * M if settled else draw(one_of((-3 * M, 0 * M, -20 * M, -2 * H, 30 * M))))
        first = last - (H if settled else draw(one_of((10 * M, H, 0 * M, 2 * M))))
        notes.append(AutoscalerNote(source, SPOKEN[source][0 if coming else 1], said, first, last,
                                    "1 Insufficient nvidia.com/gpu" if said is Said.NEVER else "",
                                    ("gpu-pool 0->1 (max: 4)",) if coming else ()))
    return tuple(notes)


PROVING = "agent proving"


@st.composite
def agents(draw: st.DrawFn, cluster: Cluster, node: str, *, stuck: bool = False) -> AgentCondition | None:
    """A node agent's condition on `node` as the janitor reads it, any of them: none, an older
    agent's (no run, no sight), one starting, one that cannot see pods' processes (its `gone` proves
    nothing), one that lies (False with nothing seen), or a healthy one; each Terminating pod there
    reported in any state or not at all. `stuck`: pods are stuck Terminating here, healthy agents
    that proved them gone as likely as all the others together."""
    kinds = ("seeing", "proving", "lying", "blind", "blind", "none", "old", "starting")
    kind = draw(one_of(("proving", "lying") * (len(kinds) // 2 if stuck else 1) + kinds))
    if kind == "none":
        return None
    if kind in ("proving", "lying"):
        # A healthy agent that watched the pods go and sees the node's other pods; or one that says
        # the same but sees no pod's processes at all (an older agent's False, a wrong --proc-root).
        gone = {p.uid: PodTaskState.GONE for p in cluster.pods.values()
                if p.node == node and p.state.deleting_since is not None}
        sight = Sight(draw(ints(1, 4)), 4) if kind == "proving" else Sight(0, draw(ints(0, 4)))
        return AgentCondition(False, ConditionMessage(PROVING, gone, True, AgentRun(
            NOW - 3 * DAY, 40, 3, NOW - datetime.timedelta(seconds=20)), sight))
    pods = {p.uid: draw(one_of((PodTaskState.GONE, PodTaskState.GONE, PodTaskState.ALIVE, PodTaskState.D_STATE,
                                None)))
            for p in cluster.pods.values() if p.node == node and p.state.deleting_since is not None}
    states = {uid: state for uid, state in pods.items() if state is not None}
    if kind == "old":
        return AgentCondition(draw(one_of((False, True, None))), ConditionMessage("older agent", states))
    run = AgentRun(NOW - draw(one_of((3 * DAY, 3 * DAY, 10 * M))), draw(one_of((40, 3, 0))), 3,
                   NOW - draw(one_of((datetime.timedelta(seconds=20), datetime.timedelta(seconds=20), 10 * M))))
    listed = draw(ints(0, 6))
    sight = {"blind": Sight(0, listed), "starting": Sight(draw(ints(0, listed)), listed),
             "seeing": Sight(draw(ints(1, max(1, listed))), max(1, listed))}[kind]
    status = None if kind == "starting" else draw(one_of((False, False, True))) if kind == "seeing" else \
        draw(one_of((None, False)))  # a blind agent says Unknown, or an older or lying one False
    leftovers = status is True or any(s is PodTaskState.D_STATE for s in states.values())
    return AgentCondition(True if leftovers and status is not None else status,
                          ConditionMessage(f"agent {kind}", states, draw(one_of((True, True, False))), run,
                                           draw(one_of((sight, sight, None)))))


@dataclass(frozen=True)
class Case:
    """One generated cluster, with the policies and settings a cycle runs under."""

    cluster: Cluster
    policies: tuple[Policy, ...]
    settings: PlanSettings


STORIES = {"pending": ("pending", "never-fits"), "stuck": ("stuck-terminating",)}  # the pods of a themed profile


@st.composite
def cases(draw: st.DrawFn, *profiles: str) -> Case:
    """A cluster of one of `profiles` (default all): "any" (everything mixed), "due" (idle
    workloads, warned, past their deadlines), "idle" (idle workloads not marked yet), "pending"
    (mixed, with pending pods under a pending policy: pools at zero, autoscalers), "stuck" (mixed,
    with pods stuck Terminating under a policy that may force delete: node agents of every kind)."""
    profile = draw(one_of(profiles or ("any", "any", "due", "idle")))
    if profile in STORIES:
        first = Pending(after=draw(one_of((30 * M, 4 * H)))) if profile == "pending" else \
            Terminating(after=10 * M, force_delete=True)
        policies = (Policy(profile, (first,), mode=Mode.ENFORCE),) + draw(policy_sets())
        theme = draw(one_of(STORIES[profile]))
        cluster = draw(clusters(policies, theme=theme))
        return Case(cluster, with_kueue(policies, cluster), draw(plan_settings()))
    releases = profile == "releases"  # "due", with an enforcing first policy that deletes: releases act
    # "due" StatefulSets mostly, under a first policy that deletes or scales them (and may delete volumes)
    volumes = profile in ("volumes", "volumes-allowed")
    allowed = profile == "volumes-allowed"
    # "due" Deployments, mostly kept by GitOps or KEDA, under a first policy that scales them to zero
    reclaims = profile == "reclaims"
    # "due", under a first policy reading GPU_UTIL, SM activity and power, with pods in use on SM
    # activity or power alone beside idle ones: what a policy reading one signal misses
    several = profile == "signals"
    profile = "due" if releases or volumes or reclaims or several else profile
    calm = profile != "any"
    policies = draw(policy_sets())
    if calm:  # an idle policy first that matches everything (enforcing, mostly), so that reclaims come due
        first = policies[0]
        mode = Mode.ENFORCE if releases else draw(one_of((Mode.ENFORCE, Mode.ENFORCE, Mode.ENFORCE, Mode.SHADOW)))
        triggers = first.triggers if first.trigger(IdleGpu) else (draw(idle_gpu()),) + first.triggers[1:]
        lifecycle = replace(first.lifecycle, action=PolicyAction.DELETE) if releases else first.lifecycle
        if volumes:
            lifecycle = replace(first.lifecycle, action=draw(one_of((PolicyAction.DELETE, PolicyAction.SCALE_TO_ZERO))),
                                delete_volumes=allowed or draw(one_of((False, False, True))))
            mode = Mode.ENFORCE
        if reclaims:
            lifecycle = replace(first.lifecycle, action=PolicyAction.SCALE_TO_ZERO)
            mode = Mode.ENFORCE
        if several:
            gpu = next(t for t in triggers if isinstance(t, IdleGpu))
            triggers = tuple(replace(gpu, signal=GpuSignal.GPU_UTIL, threshold=5.0, idle_power=IDLE_POWER, also=(
                (GpuSignal.SM_ACTIVE, 0.05), (GpuSignal.POWER, 1.2))) if t is gpu else t for t in triggers)
            mode = Mode.ENFORCE
        policies = (replace(first, mode=mode, match=Match(), triggers=triggers, lifecycle=lifecycle),) + policies[1:]
    settings = draw(plan_settings())
    if calm:
        settings = replace(settings, rails=replace(settings.rails, dry_run=False, caps=Caps(1000, 1000, 1000, 1000)))
    kinds = ("StatefulSet", "StatefulSet", "Job") if volumes else ("Deployment",) if reclaims else ()
    cluster = draw(clusters(policies, profile=profile, kinds=kinds, managed=reclaims))
    if several:
        # Some workloads stuck on every GPU pod (a job hung in a collective: GPU_UTIL full, SM
        # activity and power idle, on a node exporting both); every other GPU pod of the rest in
        # use on SM activity or power alone.
        def owner(pod: Pod) -> str:
            return pod.controller.uid if pod.controller is not None else pod.uid
        plain = [p for p in cluster.pods.values() if p.gpus and not p.use.signals]
        owners = list(dict.fromkeys(owner(p) for p in plain if serial_of(p) % 4 == 0))
        stuck = {o: _FULL[(i + cluster.serial) % len(_FULL)] for i, o in enumerate(owners)}
        for pod in plain:
            if owner(pod) in stuck:
                pod.use = replace(pod.use, signals=stuck[owner(pod)], missing=(), unexported=(), model=_A100)
        for uid, story in stuck.items():  # a stuck job no policy marked yet: what a hung policy marks first
            thing = cluster.objects.get(uid)
            if thing is not None and story in (_FULL[0], _FULL[-1]):
                for key in ann.MARK_KEYS:
                    thing.annotations.pop(key, None)
                thing.foreign -= set(ann.MARK_KEYS)
            elif serial_of(pod) % 2:
                pod.use = replace(pod.use, signals=_ODD[1 + serial_of(pod) // 2 % 2][0])
    if several or cluster.serial % 4 == 2:  # by the serial, after every draw: the draws stay as they were
        policies += (stuck_policy(policies[0], cluster.serial),)
    if profile == "idle" and not (releases or volumes or reclaims or several) and cluster.serial % 3 == 1:
        policies = with_never_used(policies)
        for pod in cluster.pods.values():  # some GPU pods opened 40 minutes ago and never used since (by serial)
            if pod.started is not None and pod.gpus and pod.phase == "Running" and serial_of(pod) % 4 != 3:
                pod.started = NOW - 40 * M
                pod.use = replace(pod.use, gpu=(0.0,) * pod.gpus, gpu_coverage=1.0, gpu_gap=False, cpu=0.0,
                                  sidecar=0.0, cpu_coverage=1.0, absent=False, doubt="", signals=(), missing=(),
                                  uids="own" if serial_of(pod) % 4 in (0, 2) else pod.use.uids,
                                  predecessor=0.97 if serial_of(pod) % 8 == 2 else None)
    if cluster.serial % 5 == (1 if several else 3) and not (releases or volumes or reclaims):
        policies = with_activity(policies, cluster, named_only=several)  # the stories above need their verdicts
    if cluster.serial % 7 == 4 and not (releases or volumes or reclaims):
        with_claimed_gpus(cluster)
    return Case(cluster, with_kueue(policies, cluster), settings)


def with_claimed_gpus(cluster: Cluster) -> None:
    """Beside some running GPU pods, a pod of the same workload that holds a GPU (or a MIG slice)
    through a DRA claim and requests none (by the serial, after every draw): busy at 97 % on every
    signal, idle, or without a series. An idle-GPU policy judges only the pods that request a GPU; what the other's
    GPU shows is the in-use check's to read. The claims' read says each claim holds a GPU, or a NIC,
    or was not made, or failed."""
    turns = 0
    stuck = {p.controller.uid for p in cluster.pods.values() if p.use.signals in _FULL and p.controller is not None}
    for pod in sorted(cluster.pods.values(), key=lambda p: p.uid):
        turn = serial_of(pod)
        if pod.phase != "Running" or not pod.gpus or pod.controller is None or pod.deleting or turn % 3 != 1 \
                or pod.controller.uid in stuck:  # a stuck job's story stays its own
            continue
        level = (0.97, 0.0, 0.97)[turn // 3 % 3]
        use = Use((level,), cpu=0.01, absent=turn // 3 % 3 == 1 and turn % 2 == 0,
                  gpu_absent=turn // 3 % 3 == 1 and turn % 4 == 1, model=pod.use.model,
                  doubt="mig" if turn // 3 % 2 else "")  # a MIG slice: GPU_UTIL reads it as nothing
        if level and turn // 3 % 4 in (0, 3):  # the GPUs requested beside it idle: the idle-GPU verdict fires
            for other in cluster.pods.values():
                if other.controller == pod.controller and other.gpus and not other.claimed:
                    other.use = Use((0.0,) * other.gpus, cpu=0.0, model=other.use.model)
        uid = f"pod-claim-{turn}"
        turns += turn
        cluster.pods[uid] = Pod(pod.namespace, f"{pod.name}-c", uid, pod.controller, pod.node, "Running",
                                pod.started, 0, pod.created, dict(pod.labels), containers=pod.containers,
                                claimed=1, use=use)
    cluster.claims = ("gpu", "unread", "failed", "nic")[turns // 3 % 4]


_HELD_SINCE = (None, NOW - 10 * M, NOW - 2 * H, NOW - 5 * DAY)


def with_kueue(policies: tuple[Policy, ...], cluster: Cluster) -> tuple[Policy, ...]:
    """Kueue in the cluster, by the serial (after every draw: the draws stay as they were): some Jobs
    admitted by a Workload that holds quota or not, since any time, deactivated now and then, its
    status odd now and then, and half of those holding quota left with no pod (kueue#14811: evicted,
    its pods deleted, its quota still reserved); and, on most serials, a reservedQuota policy after
    the others (reporting or suspending, enforcing or not, its namespaces everything or one), so that
    a profile's first policy stays the one it made."""
    serial = cluster.serial
    jobs = sorted((t for t in cluster.objects.values() if t.kind == "Job"), key=lambda t: t.uid)
    for k, job in enumerate(jobs):
        turn = k + serial
        if turn % 4 == 0:
            continue
        since = _HELD_SINCE[(k + serial // 4) % 4]
        job.labels["kueue.x-k8s.io/queue-name"] = "team-gpus"
        job.queued = Queued("v1beta2", f"job-{job.name}", f"wl-{job.uid}", turn % 5 != 4, reserved_since=since,
                            evicted=turn % 4 != 2, status_problem="its Workload has two Admitted conditions"
                            if turn % 7 == 6 else "", gpus=8 * (k % 2), finished=turn % 9 == 8,
                            elsewhere="MultiKueue runs it on cluster worker-1" if turn % 11 == 10 else "",
                            stopped_at=NOW - 20 * M if turn % 6 == 1 else None)
        # Evicted: its pods deleted, its quota not released (not on the serials whose activity floor
        # needs its running pods).
        job.suspended = job.suspended or turn % 3 == 0  # Kueue stopped it
        if since is not None and turn % 2 == 1 and serial % 3 != 0:
            for uid in cluster.below(job.uid)[1]:
                cluster.pods.pop(uid, None)
    if serial % 5 == 1:
        return policies
    action = PolicyAction.SUSPEND if serial % 2 == 0 else PolicyAction.REPORT
    match = Match(Namespaces(("ml",), ())) if serial % 7 == 0 else Match()
    return policies + (Policy("quota", (ReservedQuota(after=4 * H if serial % 3 == 0 else 30 * M),), match=match,
                              mode=Mode.SHADOW if serial % 6 == 5 else Mode.ENFORCE,
                              lifecycle=Lifecycle(warn_before=H, remind_every=2 * H, action=action),
                              source="policies.yaml:quota"),)


NEVER_USED = NeverUsed(after=20 * M, warn_before=10 * M)


def with_never_used(policies: tuple[Policy, ...]) -> tuple[Policy, ...]:
    """Each idle-GPU trigger with a never-used window (docs/policies.md, "Never used"), where its
    minimum age allows one: the young pods of a cluster (30 minutes old) are judged on their life."""
    def later(t: Any) -> Any:
        return replace(t, never_used=NEVER_USED) if isinstance(t, IdleGpu) and t.min_pod_age <= t.window else t
    return tuple(replace(p, triggers=tuple(later(t) for t in p.triggers)) for p in policies)


ACTIVITY_RULE = ActivityRule("requests", "sum by (namespace, pod) (increase(requests_total[30m])) > 0")


def with_activity(policies: tuple[Policy, ...], cluster: Cluster, *, named_only: bool = False) -> tuple[Policy, ...]:
    """The first idle policy with an activity rule (and, on some serials, a floor of 3h); the rule's
    answer by the serial: mostly naming pods, sometimes failing or naming none."""
    at = next((i for i, p in enumerate(policies) if p.trigger(IdleGpu) or p.trigger(IdleCpu)), None)
    if at is None:
        return policies
    cluster.named = 0 if named_only else 1
    cluster.activity = "named" if named_only else {3: "failed", 23: "anonymous"}.get(cluster.serial % 40, "named")
    floor = datetime.timedelta(hours=3) if cluster.serial % 3 == 0 else datetime.timedelta(0)
    return policies[:at] + (replace(policies[at], activity=Activity((ACTIVITY_RULE,), floor)),) + policies[at + 1:]


def stuck_policy(first: Policy, serial: int) -> Policy:
    """A hung policy beside the drawn ones (docs/policies.md, "hung"): it reports, or takes the first
    policy's action where a hung policy may (never delete), mostly enforcing."""
    action = first.lifecycle.action if first.lifecycle.action in (
        PolicyAction.SUSPEND, PolicyAction.SCALE_TO_ZERO, PolicyAction.STOP) else PolicyAction.REPORT
    hung = Hung(window=H, utilization=90.0, sm_active=0.05, power=1.5, idle_power=IDLE_POWER, min_pod_age=H)
    return Policy("hung", (hung,), match=Match(), mode=Mode.SHADOW if serial % 16 == 6 else Mode.ENFORCE,
                  lifecycle=replace(first.lifecycle, action=action), source="policies.yaml:hung")


def serial_of(pod: Pod) -> int:
    """The pod's serial in its cluster (its UID ends with it)."""
    return int(pod.uid.rsplit("-", 1)[-1])


# -- between cycles -------------------------------------------------------------------------------------

SENDS = ("delivered", "delivered", "delivered", "late", "failed", "failed", "lost-record", "unsent", "unreachable")
FATES = st.lists(one_of(SENDS), max_size=3)
# A StatefulSet's claim templates: none, kept (the default), deleted when scaled, deleted with it, both.
CLAIMS = (None, ClaimTemplates(()), ClaimTemplates(("data",)), ClaimTemplates(("data",), when_scaled="Delete"),
          ClaimTemplates(("data",), when_deleted="Delete"), ClaimTemplates(("data", "ckpt"), "Delete", "Delete"))
EVENTS = ("edit-expires", "edit-expires", "remove-expires", "remove-policy", "keep-until", "change-action",
          "change-action", "change-action", "revert-action", "reapply", "busy", "idle", "resume", "opt-out",
          "release", "release", "release", "release", "release-old", "release-stale", "change-owner", "change-owner",
          "forge", "volumes", "revoke", "restore", "kube-janitor", "self-heal", "self-heal", "sync", "sync")
# Who else keeps a workload: mostly no one; GitOps by its labels; KEDA or an HPA by its replicas' manager.
# The steps whose annotations the acting layer writes (act/lifecycle.py WRITES).
WRITES = (Step.MARK, Step.UNMARK, Step.DROP_COPY, Step.EXTEND, Step.NOTIFY, Step.MOVE, Step.CHECK, Step.UNDONE)
MANAGERS = ("", "", "", "", "argocd", "flux", "helm", "keda-operator", "kube-controller-manager")
MANAGER_LABELS = {"argocd": {"argocd.argoproj.io/instance": "team-apps"},
                  "flux": {"kustomize.toolkit.fluxcd.io/name": "apps"},
                  "helm": {"app.kubernetes.io/managed-by": "Helm"}}
OWNERS = ("carol@lab.example", "#team-vision", "U0DAVE1234", "")  # a workload handed over ("": to nobody known)


@dataclass(frozen=True)
class Event:
    """Something an owner or admin does between two cycles."""

    kind: str  # one of EVENTS
    target: int  # which object, pod or policy it is about (modulo how many there are)
    amount: datetime.timedelta  # the time it writes, relative to now
    action: PolicyAction  # change-action: the policy's new action


@dataclass(frozen=True)
class Between:
    """What happens in one cycle besides the janitor's plan."""

    advance: datetime.timedelta
    sends: tuple[str, ...]  # the fate of each digest sent this cycle, in order (then "delivered")
    events: tuple[Event, ...]
    failing: bool  # this cycle's evidence queries fail


EVENT = st.builds(Event, one_of(EVENTS), ints(0, 30), one_of((-5 * H, 2 * H, 30 * H, 10 * DAY)),
                  one_of(tuple(PolicyAction)))
EVENT_LISTS = st.lists(EVENT, max_size=2)


# What owners and admins do to warnings: answer them, hand the workload over, change the action.
ANSWERS = ("release", "release", "release", "release-stale", "release-old", "change-owner", "change-owner",
           "change-action", "change-action", "change-action", "change-action", "revert-action", "keep-until",
           "busy", "idle", "forge", "forge", "volumes")
# Owners releasing: mostly on the warning in hand, sometimes on an older one, forged, or then kept.
RELEASES = ("release", "release", "release", "release", "release-stale", "release-old", "forge", "forge", "forge",
            "keep-until", "change-action", "release-then-keep", "release-then-keep")


def _answer_lists(kinds: tuple[str, ...]) -> st.SearchStrategy[list[Event]]:
    return st.lists(st.builds(Event, one_of(kinds), ints(0, 30), one_of((-5 * H, 2 * H, 30 * H, 10 * DAY)),
                              one_of(tuple(PolicyAction))), max_size=2)


# Charts upgraded under marked StatefulSets: their retention policy changes, between owners' answers.
VOLUME_CHANGES = ("volumes", "volumes", "volumes", "release", "idle")
# Reclaims undone: GitOps, KEDA or an owner puts back what was reclaimed, between owners' answers.
HEALS = ("self-heal", "self-heal", "self-heal", "self-heal", "release", "keep-until", "change-action", "sync",
         "sync")
ANSWER_LISTS = {"answers": _answer_lists(ANSWERS), "releases": _answer_lists(RELEASES),
                "volumes": _answer_lists(VOLUME_CHANGES), "heals": _answer_lists(HEALS)}


@st.composite
def scripts(draw: st.DrawFn, cycles: int, *, quiet: bool = False, answers: str | None = None) -> tuple[Between, ...]:
    """`cycles` steps between cycles; `quiet`: every message arrives at once, and nobody does anything;
    `answers` ("answers" or "releases"): owners and admins mostly answer warnings (ANSWERS, RELEASES),
    at short steps; "volumes": charts change StatefulSets' retention policies (VOLUME_CHANGES)."""
    steps = (5 * M, 5 * M, 30 * M, H, 3 * H, 26 * H) if answers in ("answers", "releases") else \
        (5 * M, 30 * M, H, 3 * H, 8 * H, 26 * H)
    return tuple(Between(
        advance=draw(one_of(steps)),
        sends=("delivered",) if quiet else tuple(draw(FATES)),
        events=() if quiet else tuple(draw(ANSWER_LISTS[answers] if answers else EVENT_LISTS)),
        failing=not quiet and draw(ints(0, 7)) == 0,
    ) for _ in range(cycles))


PlanFn = Callable[[Observation, Sequence[Policy], SafetyLedger, datetime.datetime, PlanSettings], CyclePlan]
RecheckFn = Callable[[Action, Observation, Sequence[Policy], datetime.datetime, PlanSettings], Action | None]


@dataclass
class Simulator:
    """The janitor's cycles on one cluster, with Slack, the acting layer and the users around them."""

    cluster: Cluster
    policies: list[Policy]
    settings: PlanSettings
    plan: PlanFn
    recheck: RecheckFn
    now: datetime.datetime = NOW
    ledger: SafetyLedger = field(default_factory=SafetyLedger)
    delivered: dict[str, list[Warning]] = field(default_factory=dict)  # uid -> warnings that reached someone
    notice_retry: datetime.timedelta = 5 * M
    configured: tuple[Policy, ...] = field(init=False, default=())  # the policies as the admin first wrote them
    held_back: dict[str, list[Change]] = field(default_factory=dict)  # uid -> "done" waiting for its check
    gone: list[Thing] = field(default_factory=list)  # objects an expiry deleted, as they were
    expired: list[tuple[str, str, str, datetime.datetime]] = field(default_factory=list)  # (name, rule, value, at)
    dones: list[tuple[str, datetime.datetime]] = field(default_factory=list)  # "done" notes delivered: (uid, at)

    def __post_init__(self) -> None:
        for uid, told in self.cluster.history.items():
            self.delivered.setdefault(uid, []).extend(told)
        self.configured = tuple(self.policies)

    def by_name(self) -> dict[str, Policy]:
        return {p.name: p for p in self.policies}

    def observe(self) -> Observation:
        return self.cluster.observe(self.policies, self.now)

    def cycle(self, step: Between, check: Callable[[Simulator, CyclePlan, Observation], None]) -> CyclePlan:
        """One cycle: read, plan, check, act, write and send; then what happens until the next one."""
        failing = set(self.cluster.failing)
        if step.failing:
            self.cluster.failing |= {k for p in self.policies if (t := p.trigger(IdleGpu)) for k in gpu_keys(t)}
        observation = self.observe()
        planned = self.plan(observation, self.policies, self.ledger, self.now, self.settings)
        check(self, planned, observation)
        self.cluster.failing = failing
        done = self._act(planned)
        self._lifecycle(planned, done, step)
        self.cluster.copy_to_replicasets()
        self._user(step)
        self.now += step.advance
        return planned

    def _act(self, planned: CyclePlan) -> list[Change]:
        done: list[Change] = []
        applied: list[Action] = []
        for action in planned.actions:
            if action.type is ActionType.REPORT:
                self.cluster.write(action.target.uid, {ann.REPORTED: action.report_key})
                continue
            again = self.recheck(action, self.observe(), self.policies, self.now, self.settings)
            if again is None:
                continue
            uid = again.target.uid
            if again.type in (ActionType.DELETE, ActionType.FORCE_DELETE):
                gone = self.cluster.objects.get(uid)
                if gone is not None and again.trigger is TriggerKind.EXPIRY:
                    self.gone.append(copy.deepcopy(gone))  # what a sync may create again
                    self.expired.append((f"{gone.kind}/{gone.namespace or ''}/{gone.name}", again.rule,
                                         gone.annotations.get(f"janitor/{again.rule}", ""), self.now))
                self.cluster.delete(uid)
            else:
                self.cluster.write(uid, {k: None for k in ann.MARK_KEYS} | dict(again.record) | (
                    {ann.NOTEBOOK_STOPPED: stamp(self.now)} if again.type is ActionType.STOP else {}))
                self.cluster.stop_pods(uid)
                target = self.cluster.objects.get(uid)
                if target is not None and again.type is ActionType.SCALE_TO_ZERO:
                    target.replicas = 0
                if target is not None and again.type is ActionType.SUSPEND:
                    target.suspended = True
                    if again.via is not None and target.queued is not None:  # Kueue evicts it and frees its quota
                        target.queued = replace(target.queued, active=False, reserved_since=None)
            applied.append(again)
            change = planned.change_for(action)
            if change is not None:
                done.append(change)
        self.ledger = record_deletions(planned.ledger, applied, self.now)
        return done

    def _lifecycle(self, planned: CyclePlan, done: Sequence[Change], step: Between) -> None:
        """As act/lifecycle.py: writes first (an intent before its send), then one digest per owner,
        then the delivery records."""
        policies = self.by_name()
        to_send: list[Change] = []
        for change in planned.changes:
            if change.step is Step.RECOVER:
                assert change.intent is not None
                found = self.cluster.slack.get(change.intent.id)
                if found is not None:
                    self.cluster.write(change.workload.uid, delivered(change, found, policies.get(change.policy)))
                    continue
                if self.now - change.intent.at < self.notice_retry:
                    continue
                change = resend(change, self.now)
            if change.step in WRITES and change.annotations:
                if not self.cluster.write(change.workload.uid, change.annotations):
                    continue
            if change.notice is not None and change.step is not Step.ACT:
                to_send.append(change)
            if change.step is Step.CHECK:  # the "done" held back since its reclaim goes now
                to_send.extend(self.held_back.pop(change.workload.uid, ()))
            elif change.step is Step.UNDONE:
                self.held_back.pop(change.workload.uid, None)
        # A reclaim other than delete is announced once the next cycle saw it hold (decide.held).
        to_send.extend(c for c in done if c.notice is not None and not (c.action and c.action.record))
        for c in done:
            if c.notice is not None and c.action is not None and c.action.record:
                self.held_back[c.workload.uid] = [c]
        digests: dict[str, list[Change]] = {}
        for change in to_send:
            assert change.notice is not None
            digests.setdefault(str(change.notice.owner), []).append(change)
        fates = iter(step.sends)
        for members in digests.values():
            fate = next(fates, "delivered")
            if fate in ("failed", "unsent"):
                continue
            owner = members[0].notice.owner  # type: ignore[union-attr]
            to_admins = owner.kind is OwnerKind.UNKNOWN or fate == "unreachable"
            # A late one arrives minutes after the cycle's read, still before the next cycle.
            at = self.now + (3 * M + 13 * datetime.timedelta(seconds=1) if fate == "late" else
                             datetime.timedelta(seconds=2))
            delivery = Delivery("C0ADMINS" if to_admins else "D0OWNER", f"{at.timestamp():.6f}", to_admins)
            for change in members:
                notice = change.notice
                assert notice is not None
                if notice.kind is NoticeKind.DONE:
                    self.dones.append((change.workload.uid, self.now))
                if notice.kind is NoticeKind.WARNING:
                    assert notice.deadline is not None
                    self.delivered.setdefault(change.workload.uid, []).append(
                        Warning(change.workload.uid, notice.action, notice.deadline, delivery.at, to_admins,
                                notice.owner.key, notice.volumes_lost))
                intent = change.annotations.get(ann.NOTICE)
                if change.step in (Step.MARK, Step.NOTIFY) and intent:
                    self.cluster.slack[Intent.parse(intent).id] = delivery  # type: ignore[union-attr]
                    if fate != "lost-record":
                        record = delivered(change, delivery, policies.get(change.policy))
                        self.cluster.write(change.workload.uid, record)

    def _user(self, step: Between) -> None:
        for event in step.events:
            self._event(event)

    def _event(self, event: Event) -> None:
        """What owners and admins do between two cycles."""
        cluster, kind = self.cluster, event.kind
        tops = [t for t in cluster.objects.values() if t.controller is None] + \
            [p for p in cluster.pods.values() if p.controller is None]
        marked = [t for t in tops if ann.carries_mark(t.annotations)]
        in_flight = [t for t in marked if ann.NOTICE in t.annotations]
        if kind in ("edit-expires", "remove-expires", "remove-policy", "keep-until", "reapply", "release",
                    "release-old", "release-stale", "forge", "change-owner", "release-then-keep") and marked:
            # What owners do to a mark they were warned of, or just found on their workload while
            # its warning is still on its way.
            tops = in_flight if in_flight and event.target % 2 == 0 else marked
        target = tops[event.target % len(tops)] if tops else None
        # The mark's deadline (janitor/expires on an older mark), or now and then a janitor/expires beside it.
        key = None if target is None else ann.EXPIRES if event.target % 3 == 0 or \
            ann.DEADLINE not in target.annotations else ann.DEADLINE
        if kind == "edit-expires" and key is not None:
            cluster.write(target.uid, {key: stamp(self.now + event.amount)}, by_janitor=False)
        elif kind == "remove-expires" and key is not None:
            cluster.write(target.uid, {key: None}, by_janitor=False)
        elif kind == "remove-policy" and target is not None:
            cluster.write(target.uid, {ann.POLICY: None}, by_janitor=False)
        elif kind == "keep-until" and target is not None:
            cluster.write(target.uid, {ann.KEEP_UNTIL: stamp(self.now + event.amount)}, by_janitor=False)
        elif kind == "opt-out" and target is not None:
            cluster.write(target.uid, {ann.OPT_OUT: "true"}, by_janitor=False)
        elif kind == "release" and target is not None:
            self._release(target)
        elif kind == "release-then-keep" and target is not None:  # the owner changes their mind
            self._release(target)
            cluster.write(target.uid, {ann.KEEP_UNTIL: stamp(self.now + 2 * H)}, by_janitor=False)
        elif kind in ("release-old", "release-stale") and target is not None:
            # A release record that answered something else: an earlier mark of the workload
            # ("release-old", carried by re-applied YAML), or an earlier warning of this mark
            # ("release-stale"): the lifecycle must never act on it.
            mark = ann.read_mark(target.annotations)
            if mark is not None and mark.marked_at is not None and mark.warned_at is not None and mark.warned_of:
                old = kind == "release-old"
                record = ann.Release(mark.marked_at - DAY if old else mark.marked_at, self.now, "U0OWNER",
                                     mark.warned_of.action, mark.warned_at - (0 * H if old else H),
                                     self.owner_of(target).key)
                cluster.write(target.uid, {ann.RELEASE: str(record)})
        elif kind == "forge" and target is not None:
            # An owner writes the janitor's keys: a release of their own, or the mark's start two months
            # on with a keep-until in the same update (moving the cap, if it were trusted).
            mark = ann.read_mark(target.annotations)
            if event.target % 2:
                self._release(target, by_janitor=False)  # what the button would write, written by hand
            elif mark is not None and mark.marked_at is not None:
                cluster.write(target.uid, {ann.MARKED_AT: stamp(self.now + 60 * DAY),
                                           ann.KEEP_UNTIL: stamp(self.now + event.amount)}, by_janitor=False)
        elif kind == "change-owner" and target is not None:
            who = OWNERS[event.target % len(OWNERS)]
            cluster.write(target.uid, {ann.OWNER: who or None}, by_janitor=False)
        elif kind == "change-action" and self.policies:
            index = event.target % len(self.policies)
            chosen = self.policies[index]
            self.policies[index] = replace(chosen, lifecycle=replace(chosen.lifecycle, action=event.action))
        elif kind == "revert-action" and self.policies:  # the admin undoes their change
            index = event.target % len(self.policies)
            self.policies[index] = self.configured[index]
        elif kind == "reapply" and isinstance(target, Thing):
            self._reapply(target)
        elif kind in ("busy", "idle") and cluster.pods:
            pod = list(cluster.pods.values())[event.target % len(cluster.pods)]
            level = 0.97 if kind == "busy" else 0.0
            pod.use = Use(tuple(level for _ in range(pod.gpus)), cpu=40.0 if kind == "busy" else 0.01)
        elif kind == "resume" and isinstance(target, Thing) and not cluster.below(target.uid)[1]:
            self._resume(target)
        elif kind == "revoke":  # an RBAC edit: the janitor may no longer watch pods, or namespaces
            cluster.forbidden = ("Pod", "Namespace")[event.target % 2]
        elif kind == "restore":
            cluster.forbidden = ""
        elif kind == "kube-janitor":  # still running beside it: deletes whatever janitor/expires has passed
            self._sweep()
        elif kind == "self-heal":  # GitOps or KEDA puts back what was reclaimed, an owner now and then
            self._heal(event.target)
        elif kind == "sync":  # GitOps (or a CI job) applies again what an expiry deleted: same name, new uid
            self._sync()
        elif kind == "volumes":  # a chart upgrade changes a StatefulSet's retention policy, a marked one mostly
            sets = [t for t in cluster.objects.values() if t.kind == "StatefulSet" and t.controller is None]
            pool = [t for t in sets if ann.carries_mark(t.annotations)] or sets
            if pool:
                chosen = pool[event.target % len(pool)]
                chosen.claims = CLAIMS[2 + (event.target // 3) % (len(CLAIMS) - 2)]  # claims, kept or not
                chosen.version += 1

    def owner_of(self, top: Thing | Pod) -> Owner:
        """Who owns a workload now (docs/owners.md): its own owner annotation, else its namespace's."""
        labels, notes = self.cluster.namespaces.get(top.namespace or "", ({}, {}))
        namespace = NamespaceView(top.namespace or "", dict(labels), dict(notes))
        above = self.cluster.objects.get(top.controller.uid) if top.controller is not None else None
        parent = above.view() if above is not None and above.kind == "CronJob" and top.kind == "Job" else None
        return find_owner(top.view() if isinstance(top, Thing) else top.as_object(), namespace, parent=parent)

    def _release(self, top: Thing | Pod, *, by_janitor: bool = True) -> None:
        """"Release now" pressed by its owner on the warning in hand, as the click handler judges it
        (or, `by_janitor` False, the same record written by hand)."""
        view = top.view() if isinstance(top, Thing) else top.as_object()
        mark = ann.read_mark(view.annotations)
        if mark is None or mark.marked_at is None or mark.warned_of is None:
            return
        button = ButtonValue.of(view.ref, mark.marked_at, mark.warned_of.action)
        at = max(self.now, mark.warned_at or self.now) + M  # a minute after the message arrived
        verdict = judge(Op.RELEASE, 0, button, view, Presser("U0OWNER", owner=True, admin=False),
                        self.owner_of(top), self.by_name().get(mark.policy or ""), at)
        if verdict.outcome is Outcome.DONE:
            self.cluster.write(top.uid, verdict.annotations, by_janitor=by_janitor)

    def _reapply(self, old: Thing) -> None:
        """The object deleted and applied again from saved YAML: a new uid, the old annotations.
        What it owned goes with it and is created anew."""
        objects, _ = self.cluster.below(old.uid)
        saved = [copy.deepcopy(self.cluster.objects[u]) for u in objects]
        self.cluster.delete(old.uid)
        fresh = replace(old, uid=self.cluster.new_uid(old.kind.lower()), created=self.now, version=1,
                        annotations=dict(old.annotations))
        self.cluster.objects[fresh.uid] = fresh
        renamed = {old.uid: fresh.owner_ref()}
        for child in saved:
            assert child.controller is not None
            made = replace(child, uid=self.cluster.new_uid(child.kind.lower()), created=self.now, version=1,
                           controller=renamed.get(child.controller.uid, child.controller),
                           annotations=dict(child.annotations))
            renamed[child.uid] = made.owner_ref()
            self.cluster.objects[made.uid] = made
        self._resume(fresh)

    def _sync(self) -> None:
        """Every object an expiry deleted, created again from its manifest (its own annotations, no mark)."""
        for old in self.gone:
            if any(t.kind == old.kind and t.namespace == old.namespace and t.name == old.name
                   for t in self.cluster.objects.values()):
                continue
            notes = {k: v for k, v in old.annotations.items() if k not in ann.MARK_READ_KEYS or k == ann.EXPIRES}
            fresh = replace(old, uid=self.cluster.new_uid(old.kind.lower()), created=self.now, version=1,
                            annotations=notes, foreign=set())
            self.cluster.objects[fresh.uid] = fresh

    def _heal(self, which: int) -> None:
        """A reclaimed workload restored by whoever keeps it (Argo CD, KEDA, or its owner by hand)."""
        reclaimed = [t for t in self.cluster.objects.values() if t.controller is None
                     and (t.replicas == 0 or t.suspended or ann.NOTEBOOK_STOPPED in t.annotations)]
        if not reclaimed:
            return
        top = reclaimed[which % len(reclaimed)]
        top.restored_by = ("argocd-controller", "keda-operator", "kubectl-scale")[which % 3]
        top.suspended = False
        self.cluster.write(top.uid, {ann.NOTEBOOK_STOPPED: None}, by_janitor=False)
        self._resume(top)

    def _sweep(self) -> None:
        """kube-janitor beside the janitor: it deletes every object whose janitor/expires has passed,
        mark or no mark (its garbage collection takes what the object owned)."""
        things: list[Thing | Pod] = [*self.cluster.objects.values(), *self.cluster.pods.values()]
        for thing in things:
            if self.cluster.find(thing.uid) is None or ann.EXPIRES not in thing.annotations:
                continue
            try:
                due = ann.parse_expires(thing.annotations[ann.EXPIRES]) <= self.now
            except ValueError:
                continue
            if due:
                self.cluster.swept.append((thing.uid, thing.uid in self.cluster.expires_by_janitor))
                self.cluster.delete(thing.uid)

    def _resume(self, top: Thing) -> None:
        """The owner starts it again: a new pod under its lowest controller, starting up."""
        objects, _ = self.cluster.below(top.uid)
        lowest = self.cluster.objects[objects[-1]] if objects else top
        if top.kind in ("ConfigMap", "Namespace"):
            return
        top.annotations.pop(ann.NOTEBOOK_STOPPED, None)
        if top.replicas == 0:
            top.replicas = 1
        uid = self.cluster.new_uid("pod")
        self.cluster.pods[uid] = Pod(top.namespace or "", f"{lowest.name}-{uid[-3:]}", uid, lowest.owner_ref(),
                                     NODES[0], "Running", self.now, 1, self.now, use=Use((0.0,), cpu=0.01))


def lifecycle_actions(actions: Iterable[Action]) -> list[Action]:
    return [a for a in actions if a.rule == "lifecycle"]
