"""Which objects the janitor may judge, and how pods group into workloads.

One copy of each rule every path uses (the plain expiry path, the triggers, the lifecycle and the
re-check before acting):

- **protected namespaces** are never judged, marked or acted on;
- **opt-out**: `janitor/opt-out: "true"` on an object or on its namespace, honoured by the plain
  path (unless the rails say otherwise) and by every policy that honours it;
- **workloads**: a pod belongs to the top of its chain of controller ownerReferences (Pod ->
  ReplicaSet -> Deployment, Pod -> Job [-> CronJob], StatefulSet, Notebook), since deleting a pod
  a controller recreates reclaims nothing. Every link must be readable: an owner that was not read
  or is being deleted makes the workload *unknown*, never acted on. DaemonSet pods are never
  candidates (one per node by design): only their stuck Terminating pods are reported;
- **copies**: the Deployment controller copies a Deployment's annotations onto its ReplicaSets and
  never removes them, so a ReplicaSet's janitor/* annotations are the Deployment's, not its own;

Which policy governs a workload is `decide.governance`'s.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from janitor import annotations as ann
from janitor.decide.model import NamespaceView, ObjectRef, ObjectView, Observation, OwnerRef, PodView
from janitor.decide.owners import DEFAULT_OWNER_KEYS, Owner, OwnerKind, find_owner
from janitor.decide.rails import Rails
from janitor.decide.reasons import Code, Reason, why

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)  # a pod not started yet

# Tools that recreate what is deleted: acting on their objects only fights them.
# (where, key, required value or None for any, the tool's name)
MANAGED_BY_MARKERS: tuple[tuple[str, str, str | None, str], ...] = (
    ("labels", "app.kubernetes.io/managed-by", "Helm", "Helm"),
    ("labels", "argocd.argoproj.io/instance", None, "Argo CD"),
    ("annotations", "argocd.argoproj.io/tracking-id", None, "Argo CD"),
    ("labels", "kustomize.toolkit.fluxcd.io/name", None, "Flux"),
    ("labels", "helm.toolkit.fluxcd.io/name", None, "Flux"),
)
# The field managers (metadata.managedFields) of controllers that restore spec.replicas or spec.suspend
# when someone else changes them: GitOps self-heal, and KEDA's scale from zero to its minReplicaCount.
# A plain HPA is not among them: it stops scaling a workload at zero replicas.
RESTORER_MANAGERS: Mapping[str, str] = {
    "argocd-controller": "Argo CD", "argocd-application-controller": "Argo CD",
    "kustomize-controller": "Flux", "helm-controller": "Flux",
    "keda": "KEDA", "keda-operator": "KEDA",
}
# The tools that restore what the janitor reclaims, by the id a policy names them with
# (`lifecycle.reclaimManaged`). Helm alone restores nothing until the next upgrade.
RESTORERS: Mapping[str, str] = {"Argo CD": "argocd", "Flux": "flux", "KEDA": "keda"}
# (kind, controller kind): the controller copies its own annotations onto the object.
ANNOTATION_COPIES: frozenset[tuple[str, str]] = frozenset({("ReplicaSet", "Deployment")})


class CronJobMode(StrEnum):
    """Act on the Job a CronJob started, or on the CronJob itself (stopping all future runs)."""

    JOB = "job"
    CRONJOB = "cronjob"


def is_protected(namespace: str | None, rails: Rails) -> bool:
    return namespace is not None and namespace in rails.protected_namespaces


def opted_out(notes: Mapping[str, str], namespace: NamespaceView | None, *,
              where: str = "the object") -> Reason | None:
    """Why an object is opted out (its own annotation, or its namespace's), if it is."""
    if ann.is_true(notes.get(ann.OPT_OUT)):
        return why(Code.OPTED_OUT, where=where)
    if namespace is not None and ann.is_true(namespace.annotations.get(ann.OPT_OUT)):
        return why(Code.OPTED_OUT, where=f"namespace {namespace.name}")
    return None


def namespace_of(obj: ObjectView) -> str | None:
    return obj.ref.name if obj.ref.kind == "Namespace" else obj.ref.namespace


def gate(obj: ObjectView, observation: Observation, rails: Rails) -> Reason | None:
    """Why the plain expiry path must leave `obj` alone whatever its annotations say, if it must
    (deleting, protected, or opted out where the rails honour it): `Gate`, for one object."""
    return Gate(observation, rails)(obj)


def copied_from(obj: ObjectView) -> OwnerRef | None:
    """The controller whose annotations `obj` carries copies of (a Deployment's ReplicaSet)."""
    controller = obj.controller
    if controller is not None and (obj.ref.kind, controller.kind) in ANNOTATION_COPIES:
        return controller
    return None


_MARKER_LABELS = frozenset(key for where, key, _, _ in MANAGED_BY_MARKERS if where == "labels")
_MARKER_NOTES = frozenset(key for where, key, _, _ in MANAGED_BY_MARKERS if where == "annotations")


def managed_by(obj: ObjectView | PodView) -> str | None:
    """The tool that manages `obj`: by its labels and annotations, or (an object) by the controller
    that last wrote its replicas or suspend (KEDA marks nothing on what it scales). A tool that
    restores what is reclaimed wins over Helm's label, which Argo CD and Flux charts carry too."""
    restorer = RESTORER_MANAGERS.get(obj.restored_by or "") if isinstance(obj, ObjectView) else None
    if _MARKER_LABELS.isdisjoint(obj.labels) and _MARKER_NOTES.isdisjoint(obj.annotations):
        return restorer  # no marker key at all, as on most objects
    tools = [tool for where, key, value, tool in MANAGED_BY_MARKERS
             if (found := (obj.labels if where == "labels" else obj.annotations).get(key)) is not None
             and value in (None, found)]
    return strongest(*tools, restorer)


def strongest(*tools: str | None) -> str | None:
    """Of the tools found (on an object, or along a chain), the first that restores what is
    reclaimed (`RESTORERS`), else the first at all."""
    for t in tools:  # none at all, as along most chains: answered without the generators
        if t:
            break
    else:
        return None
    return next((t for t in tools if t in RESTORERS), next((t for t in tools if t), None))


_MARK_ONLY = frozenset(ann.JANITOR_ONLY_KEYS)


def carries_mark(notes: Mapping[str, str]) -> bool:
    """`annotations.carries_mark`, after a set test that rules out in C the many objects with no
    janitor-only key at all (every object of a cycle is asked)."""
    return not _MARK_ONLY.isdisjoint(notes) and ann.carries_mark(notes)


def with_marks(views: Iterable[ObjectView]) -> list[ObjectView]:
    """The objects that carry a mark, in order (`carries_mark`, as their views read it when built)."""
    return [v for v in views if v.readings.marked]


def marks_per_policy(observation: Observation) -> Counter[str]:
    """The workloads carrying the janitor's mark, per marking policy: each mark on the object it was
    written on (a ReplicaSet's copy of its Deployment's mark is the Deployment's), bare pods too."""
    listed = {o.ref.uid for o in observation.objects}
    views = [*observation.objects, *(pod_as_object(p) for p in observation.pods if p.ref.uid not in listed)]
    return Counter(v.annotations[ann.POLICY] for v in with_marks(views)
                   if ann.POLICY in v.annotations and v.annotations.get(ann.MARKED_UID) == v.ref.uid)


def pod_as_object(pod: PodView) -> ObjectView:
    return ObjectView(pod.ref, pod.resource_version, pod.created or pod.started or EPOCH, pod.annotations,
                      pod.labels, pod.deleting, pod.controller, foreign_marks=pod.foreign_marks)


@dataclass(frozen=True, slots=True)
class Workload:
    """The unit the pod triggers judge and the lifecycle marks: the top of a pod's owner chain."""

    ref: ObjectRef  # the workload; the pod itself when its chain cannot be read (`unknown`)
    view: ObjectView | None  # as read (a bare pod as an object); None when unknown
    pods: tuple[PodView, ...]
    namespace: NamespaceView
    kind: str  # for policy matching: the workload's kind; for an unknown one, its pod's controller's or Pod
    chain: tuple[ObjectRef, ...] = ()  # from the pod up to the workload, for `explain`
    managed_by: str | None = None
    unknown: Reason | None = None  # why the owner chain cannot be read: then never acted on
    opted_out: Reason | None = None
    owner: Owner = Owner(OwnerKind.UNKNOWN)  # who is told about it
    candidate: bool = True  # False: never marked or reclaimed (a DaemonSet's pods run one per node by design)
    # The CronJob above a Job that is the workload (`--cronjob-target job`, or the CronJob suspended):
    # its opt-out, owner and keep-until govern the Job, as annotations on the CronJob never reach its Jobs.
    parent: ObjectView | None = None
    # `running` and `gpu_pods`, found the first time they are asked (each trigger, each in-use check and
    # the choice of the policy governing it ask), from `pods` alone: a copy (`replace`) finds its own.
    _running: tuple[PodView, ...] | None = field(default=None, init=False, repr=False, compare=False)
    _gpu_pods: tuple[PodView, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def running(self) -> tuple[PodView, ...]:
        """Its pods that are running and not being deleted."""
        found = self._running
        if found is None:
            found = tuple([p for p in self.pods if p.phase == "Running" and not p.deleting])
            object.__setattr__(self, "_running", found)
        return found

    @property
    def gpu_pods(self) -> tuple[PodView, ...]:
        """Its running pods that hold GPUs."""
        found = self._gpu_pods
        if found is None:
            found = tuple([p for p in self.running if p.gpus > 0])
            object.__setattr__(self, "_gpu_pods", found)
        return found

    @property
    def known(self) -> bool:
        return self.unknown is None


@dataclass
class _Group:
    ref: ObjectRef
    view: ObjectView | None
    chain: tuple[ObjectRef, ...]
    marker: str | None
    unknown: Reason | None
    kind: str
    candidate: bool = True
    pods: list[PodView] = field(default_factory=list)
    parent: ObjectView | None = None


@dataclass(frozen=True, slots=True)
class _Above:
    """A pod's chain above it, which every pod of one controller shares: the owners from its
    controller up (refs and views), the marker on them, or why the chain cannot be read."""

    refs: tuple[ObjectRef, ...] = ()
    top: ObjectView | None = None  # None: the pod is the top of its own chain
    marker: str | None = None
    unknown: Reason | None = None
    candidate: bool = True
    parent: ObjectView | None = None  # a CronJob above the Job the chain stops at


def _walk(kind: str, controller: OwnerRef, by_uid: Mapping[str, ObjectView], cronjob_mode: CronJobMode) -> _Above:
    """Up from the controller of an object of `kind` to the top of the chain. A CronJob is read
    either way: it is the workload (`CronJobMode.CRONJOB`), or it governs the Job that is (its
    opt-out, owner and keep-until), so a Job whose CronJob cannot be read is unknown."""
    refs: list[ObjectRef] = []
    views: list[ObjectView] = []
    candidate = True
    parent = None
    owner_ref: OwnerRef | None = controller
    seen: set[str] = set()
    while owner_ref is not None:
        if owner_ref.uid in seen:  # the apiserver accepts A -> B -> A; such a chain has no top
            return _Above(unknown=why(Code.OWNER_CYCLE, owner=f"{owner_ref.kind}/{owner_ref.name}"),
                          candidate=candidate)
        seen.add(owner_ref.uid)
        candidate = candidate and owner_ref.kind != "DaemonSet"
        owner = by_uid.get(owner_ref.uid)
        if owner is None:
            reason = why(Code.OWNER_UNREADABLE, owner=f"{owner_ref.kind}/{owner_ref.name}", uid=owner_ref.uid)
            return _Above(unknown=reason, candidate=candidate)
        if owner.deleting:
            return _Above(unknown=why(Code.OWNER_DELETING, owner=str(owner.ref)), candidate=candidate)
        if owner_ref.kind == "CronJob" and kind == "Job" and (cronjob_mode is CronJobMode.JOB or owner.suspended):
            # Act on this run's Job, leave the schedule alone; or, the schedule suspended, on a run it left.
            parent = owner
            break
        refs.append(owner.ref)
        views.append(owner)
        kind, owner_ref = owner.ref.kind, owner.controller
    marker = strongest(*(managed_by(v) for v in [*views, *([parent] if parent else [])]))
    return _Above(tuple(refs), views[-1] if views else None, marker, None, candidate, parent)


_NO_OWNER = _Above()


class _Chains:
    """Every pod's chain for one cycle, each controller's walked once (its pods share it)."""

    def __init__(self, by_uid: Mapping[str, ObjectView], cronjob_mode: CronJobMode) -> None:
        self.by_uid, self.cronjob_mode = by_uid, cronjob_mode
        self.above: dict[tuple[str, str, str, str, str], _Above] = {}

    def above_of(self, pod: PodView) -> _Above:
        c = pod.controller
        if c is None:
            return _NO_OWNER
        key = (pod.ref.kind, c.kind, c.api_version, c.name, c.uid)
        found = self.above.get(key)
        return found if found is not None else self.above.setdefault(
            key, _walk(pod.ref.kind, c, self.by_uid, self.cronjob_mode))

    def listed(self, pod: PodView) -> ObjectView:
        """A bare pod as an object: as listed among the objects (pods are a kind read, by default), at
        the pod's resourceVersion, whose annotations its view read once (decide.readings); else made
        of the pod, read now."""
        listed = self.by_uid.get(pod.ref.uid)
        if listed is not None and listed.ref == pod.ref and listed.resource_version == pod.resource_version:
            return listed
        return pod_as_object(pod)

    def resolve(self, pod: PodView, above: _Above) -> _Group:
        """The top of `pod`'s chain."""
        c = pod.controller
        if above.unknown is not None:
            return _Group(pod.ref, None, (pod.ref,), None, above.unknown, c.kind if c else "Pod", above.candidate)
        if above.top is None:
            if pod.deleting:
                return _Group(pod.ref, None, (pod.ref,), None, why(Code.POD_DELETING), "Pod")
            view = self.listed(pod)
            return _Group(pod.ref, view, (pod.ref,), managed_by(pod), None, view.ref.kind, above.candidate)
        top = above.top
        return _Group(top.ref, top, (pod.ref, *above.refs), strongest(managed_by(pod), above.marker), None,
                      top.ref.kind,
                      above.candidate, parent=above.parent)


def workloads(observation: Observation, rails: Rails, *, cronjob_mode: CronJobMode = CronJobMode.JOB,
              owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS,
              by_uid: Mapping[str, ObjectView] | None = None) -> tuple[Workload, ...]:
    """Every pod outside the protected namespaces, grouped by the workload it belongs to (a pod
    whose chain cannot be read is a workload of its own, unknown). `by_uid`: the observation's
    objects by uid, when the caller has them already."""
    chains = _Chains(by_uid if by_uid is not None else {o.ref.uid: o for o in observation.objects}, cronjob_mode)
    protected = frozenset(rails.protected_namespaces)
    groups: dict[str, _Group] = {}
    for pod in observation.pods:
        namespace = pod.ref.namespace
        if namespace is not None and namespace in protected:
            continue
        above = chains.above_of(pod)
        if above.top is not None and above.unknown is None:
            joined = groups.get(above.top.ref.uid)
            if joined is not None:  # the workload's first pod made its group
                joined.pods.append(pod)
                continue
        group = chains.resolve(pod, above)
        key = group.ref.uid if group.unknown is None else f"unknown:{pod.ref.uid}"
        groups.setdefault(key, group).pods.append(pod)
    return tuple(_workload(group, observation, owner_keys) for group in groups.values())


def _workload(group: _Group, observation: Observation, owner_keys: Sequence[tuple[str, str]]) -> Workload:
    namespace_view = observation.namespace(group.ref.namespace)
    notes = group.view.annotations if group.view is not None else group.pods[0].annotations
    parent = group.parent
    out = opted_out(notes, None) or (opted_out(parent.annotations, None, where=str(parent.ref)) if parent
                                     else None) or opted_out({}, namespace_view)
    return Workload(group.ref, group.view, tuple(group.pods), namespace_view, group.kind, group.chain, group.marker,
                    group.unknown, out, find_owner(group.view, namespace_view, owner_keys, parent=parent),
                    group.candidate, parent)


def podless(view: ObjectView, observation: Observation, by_uid: Mapping[str, ObjectView], *,
            cronjob_mode: CronJobMode = CronJobMode.JOB,
            owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS) -> Workload:
    """`view` as a workload with no pods (a Job whose pods Kueue stopped), by the rules pods' workloads
    follow: its chain above it must be readable, and it must be the top of it (not the Job of a CronJob
    that `cronjob_mode` makes the workload: unknown then, `Code.QUOTA_ABOVE`)."""
    above = _walk(view.ref.kind, view.controller, by_uid, cronjob_mode) if view.controller is not None else _NO_OWNER
    unknown = above.unknown
    if unknown is None and above.top is not None:
        unknown = why(Code.QUOTA_ABOVE, top=str(above.top.ref), mode=str(cronjob_mode))
    group = _Group(view.ref, view, (view.ref, *above.refs), strongest(managed_by(view), above.marker), unknown,
                   view.ref.kind, above.candidate, parent=above.parent)
    return _workload(group, observation, owner_keys)


class Gate:
    """`gate` for one cycle: whether a namespace is protected or opted out is read once per
    namespace, not once per object in it."""

    def __init__(self, observation: Observation, rails: Rails) -> None:
        self.observation, self.rails = observation, rails
        self.protected = frozenset(rails.protected_namespaces)
        self.namespace_out: dict[str, Reason | None] = {}
        self.cronjobs: dict[str, ObjectView] | None = None

    def protects(self, namespace: str | None) -> bool:
        """As `is_protected(namespace, rails)`."""
        return namespace is not None and namespace in self.protected

    def unprotected(self, objects: Iterable[ObjectView]) -> list[ObjectView]:
        """The objects outside the protected namespaces, in order: `protects`, for every object read."""
        protected = self.protected
        return [o for o in objects if (o.ref.name if o.ref.kind == "Namespace" else o.ref.namespace) not in protected]

    def cronjob_of(self, obj: ObjectView) -> ObjectView | None:
        """The CronJob controlling a Job, as read: its opt-out is its Jobs' (annotations on a
        CronJob never reach them)."""
        controller = obj.controller
        if controller is None or controller.kind != "CronJob" or obj.ref.kind != "Job":
            return None
        if self.cronjobs is None:
            self.cronjobs = {o.ref.uid: o for o in self.observation.objects if o.ref.kind == "CronJob"}
        return self.cronjobs.get(controller.uid)

    def __call__(self, obj: ObjectView) -> Reason | None:
        """Why `obj` is left alone: deleting, in a protected namespace, or opted out (its own
        annotation first, then its namespace's) when the rails honour opt-outs."""
        if obj.deleting:
            return why(Code.DELETING)
        ref = obj.ref
        namespace = ref.name if ref.kind == "Namespace" else ref.namespace  # namespace_of, inline: every object
        if namespace is not None and namespace in self.protected:
            return why(Code.PROTECTED, namespace=namespace)
        controller = obj.controller
        cron = self.cronjob_of(obj)
        if cron is None and controller is not None and controller.kind == "CronJob" and ref.kind == "Job":
            # Its CronJob's opt-out governs it, and the CronJob was not read (a kind left out of --kinds).
            return why(Code.OWNER_UNREADABLE, owner=f"CronJob/{controller.name}", uid=controller.uid)
        if not self.rails.honour_opt_out:
            return None
        own = obj.annotations.get(ann.OPT_OUT)
        if own is not None and ann.is_true(own):
            return why(Code.OPTED_OUT, where="the object")
        if cron is not None and ann.is_true(cron.annotations.get(ann.OPT_OUT)):
            return why(Code.OPTED_OUT, where=str(cron.ref))
        name = namespace or ""
        if name not in self.namespace_out:
            self.namespace_out[name] = opted_out({}, self.observation.namespaces.get(name))
        return self.namespace_out[name]
