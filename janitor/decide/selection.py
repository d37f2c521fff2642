"""Which objects the janitor may judge, how pods group into workloads, and which policy governs one.

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
- **the governing policy**: for each trigger kind, the first policy in load order that defines it
  and matches the workload (every judged pod) decides it; an opted-out workload is skipped by a
  policy that honours opt-outs.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from janitor import annotations as ann
from janitor.decide.model import NamespaceView, ObjectRef, ObjectView, Observation, OwnerRef, PodView, TriggerKind
from janitor.decide.owners import DEFAULT_OWNER_KEYS, Owner, OwnerKind, find_owner
from janitor.decide.rails import Rails
from janitor.decide.reasons import Code, Reason, why
from janitor.policy.model import CrashLoop, IdleCpu, IdleGpu, Pending, Policy, Terminating, Trigger

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
# (kind, controller kind): the controller copies its own annotations onto the object.
ANNOTATION_COPIES: frozenset[tuple[str, str]] = frozenset({("ReplicaSet", "Deployment")})
POLICY_TRIGGERS: Mapping[TriggerKind, type[Trigger]] = {
    TriggerKind.IDLE_GPU: IdleGpu, TriggerKind.IDLE_CPU: IdleCpu, TriggerKind.PENDING: Pending,
    TriggerKind.CRASH_LOOP: CrashLoop, TriggerKind.TERMINATING: Terminating,
}


class CronJobMode(StrEnum):
    """Act on the Job a CronJob started, or on the CronJob itself (stopping all future runs)."""

    JOB = "job"
    CRONJOB = "cronjob"


def is_protected(namespace: str | None, rails: Rails) -> bool:
    return namespace is not None and namespace in rails.protected_namespaces


def opted_out(notes: Mapping[str, str], namespace: NamespaceView | None) -> Reason | None:
    """Why an object is opted out (its own annotation, or its namespace's), if it is."""
    if ann.is_true(notes.get(ann.OPT_OUT)):
        return why(Code.OPTED_OUT, where="the object")
    if namespace is not None and ann.is_true(namespace.annotations.get(ann.OPT_OUT)):
        return why(Code.OPTED_OUT, where=f"namespace {namespace.name}")
    return None


def namespace_of(obj: ObjectView) -> str | None:
    return obj.ref.name if obj.ref.kind == "Namespace" else obj.ref.namespace


def gate(obj: ObjectView, observation: Observation, rails: Rails) -> Reason | None:
    """Why the plain expiry path must leave `obj` alone whatever its annotations say, if it must."""
    if obj.deleting:
        return why(Code.DELETING)
    namespace = namespace_of(obj)
    if is_protected(namespace, rails):
        return why(Code.PROTECTED, namespace=namespace)
    out = opted_out(obj.annotations, observation.namespaces.get(namespace or ""))
    return out if out is not None and rails.honour_opt_out else None


def copied_from(obj: ObjectView) -> OwnerRef | None:
    """The controller whose annotations `obj` carries copies of (a Deployment's ReplicaSet)."""
    controller = obj.controller
    if controller is not None and (obj.ref.kind, controller.kind) in ANNOTATION_COPIES:
        return controller
    return None


def managed_by(obj: ObjectView) -> str | None:
    for where, key, value, tool in MANAGED_BY_MARKERS:
        found = (obj.labels if where == "labels" else obj.annotations).get(key)
        if found is not None and value in (None, found):
            return tool
    return None


def pod_as_object(pod: PodView) -> ObjectView:
    return ObjectView(pod.ref, pod.resource_version, pod.created or pod.started or EPOCH, pod.annotations,
                      pod.labels, pod.deleting, pod.controller)


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


def _resolve(pod: PodView, by_uid: Mapping[str, ObjectView], cronjob_mode: CronJobMode) -> _Group:
    """The top of `pod`'s chain."""
    current = pod_as_object(pod)
    chain = [pod.ref]
    views = [current]
    candidate = True
    while current.controller is not None:
        owner_ref = current.controller
        candidate = candidate and owner_ref.kind != "DaemonSet"
        if owner_ref.kind == "CronJob" and current.ref.kind == "Job" and cronjob_mode is CronJobMode.JOB:
            break  # act on this run's Job, leave the schedule alone
        owner = by_uid.get(owner_ref.uid)
        kind = pod.controller.kind if pod.controller else "Pod"
        if owner is None:
            reason = why(Code.OWNER_UNREADABLE, owner=f"{owner_ref.kind}/{owner_ref.name}", uid=owner_ref.uid)
            return _Group(pod.ref, None, (pod.ref,), None, reason, kind, candidate)
        if owner.deleting:
            return _Group(pod.ref, None, (pod.ref,), None, why(Code.OWNER_DELETING, owner=str(owner.ref)), kind,
                          candidate)
        chain.append(owner.ref)
        views.append(owner)
        current = owner
    if len(chain) == 1 and pod.deleting:
        return _Group(pod.ref, None, (pod.ref,), None, why(Code.POD_DELETING), "Pod")
    marker = next((m for m in (managed_by(v) for v in views) if m), None)
    return _Group(current.ref, current, tuple(chain), marker, None, current.ref.kind, candidate)


def workloads(observation: Observation, rails: Rails, *, cronjob_mode: CronJobMode = CronJobMode.JOB,
              owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS) -> tuple[Workload, ...]:
    """Every pod outside the protected namespaces, grouped by the workload it belongs to (a pod
    whose chain cannot be read is a workload of its own, unknown)."""
    by_uid = {o.ref.uid: o for o in observation.objects}
    groups: dict[str, _Group] = {}
    for pod in observation.pods:
        if is_protected(pod.ref.namespace, rails):
            continue
        group = _resolve(pod, by_uid, cronjob_mode)
        key = group.ref.uid if group.unknown is None else f"unknown:{pod.ref.uid}"
        groups.setdefault(key, group).pods.append(pod)
    found = []
    for group in groups.values():
        namespace = observation.namespace(group.ref.namespace)
        notes = group.view.annotations if group.view is not None else group.pods[0].annotations
        found.append(Workload(group.ref, group.view, tuple(group.pods), namespace, group.kind, group.chain,
                              group.marker, group.unknown, opted_out(notes, namespace),
                              find_owner(group.view, namespace, owner_keys), group.candidate))
    return tuple(found)


def governing(policies: Sequence[Policy], trigger: TriggerKind, workload: Workload,
              pods: Sequence[PodView]) -> Policy | None:
    """The policy that decides `trigger` for this workload, judging `pods`: the first in load order
    that defines it and whose match holds for every one of those pods; None when that policy
    honours an opt-out the workload carries (later policies are not consulted)."""
    kind = POLICY_TRIGGERS[trigger]
    namespace = workload.namespace
    policy = next((p for p in policies if p.trigger(kind) is not None and all(
        p.match.matches(namespace=namespace.name, namespace_labels=namespace.labels, kind=workload.kind,
                        pod_labels=pod.labels) for pod in pods)), None)
    if policy is None or (policy.lifecycle.honour_opt_out and workload.opted_out is not None):
        return None
    return policy
