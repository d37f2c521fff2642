"""Which workload a pod belongs to: the object to mark, warn about and act on.

Deleting a pod that a controller recreates reclaims nothing, so the janitor follows the chain of
controller ownerReferences (Pod -> ReplicaSet -> Deployment, Pod -> Job -> CronJob, StatefulSet,
custom resources such as a Kubeflow Notebook) to its top and acts there. Every link must be
readable: an owner that is not in the snapshot (forbidden, unknown kind, dangling) or that is
already being deleted makes the workload *unknown*, and unknown is never acted on.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from janitor.annotations import OPT_OUT
from janitor.decide.model import NamespaceView, ObjectRef, ObjectView, PodView
from janitor.policy.model import Policy

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

class CronJobMode(StrEnum):
    """Act on the Job a CronJob started, or on the CronJob itself (stopping all future runs)."""

    JOB = "job"
    CRONJOB = "cronjob"


@dataclass(frozen=True, slots=True)
class Workload:
    ref: ObjectRef
    resource_version: str
    chain: tuple[ObjectRef, ...]  # from the pod up to the workload, for `explain`
    managed_by: str | None = None  # "Helm", "Argo CD", "Flux": flagged, since they recreate it


@dataclass(frozen=True, slots=True)
class Unknown:
    """The workload could not be told; the pod is never a candidate then."""

    pod: ObjectRef
    why: str


@dataclass(frozen=True, slots=True)
class NotACandidate:
    """Pods the janitor never acts through (DaemonSet pods: one per node by design)."""

    pod: ObjectRef
    why: str


def managed_by(obj: ObjectView) -> str | None:
    for where, key, value, tool in MANAGED_BY_MARKERS:
        found = (obj.labels if where == "labels" else obj.annotations).get(key)
        if found is not None and value in (None, found):
            return tool
    return None

def resolve(
    pod: ObjectView, by_uid: Mapping[str, ObjectView], *, cronjob_mode: CronJobMode = CronJobMode.JOB
) -> Workload | Unknown | NotACandidate:
    """The top-level workload owning `pod` (a bare pod is its own workload)."""
    chain = [pod.ref]
    current = pod
    while current.controller is not None:
        owner_ref = current.controller
        if owner_ref.kind == "DaemonSet":
            return NotACandidate(pod.ref, f"DaemonSet pods are never candidates ({owner_ref.kind}/{owner_ref.name})")
        if owner_ref.kind == "CronJob" and current.ref.kind == "Job" and cronjob_mode is CronJobMode.JOB:
            break  # act on this run's Job, leave the schedule alone
        owner = by_uid.get(owner_ref.uid)
        if owner is None:
            return Unknown(pod.ref, f"owner {owner_ref.kind}/{owner_ref.name} (uid {owner_ref.uid}) cannot be read: "
                                    "not listed, forbidden or gone")
        if owner.deleting:
            return Unknown(pod.ref, f"owner {owner.ref} is already being deleted")
        chain.append(owner.ref)
        current = owner
    if current is pod and pod.deleting:
        return Unknown(pod.ref, "the pod is already being deleted")
    marker = next((m for m in (managed_by(o) for o in _chain_views(chain, by_uid, pod)) if m), None)
    return Workload(current.ref, current.resource_version, tuple(chain), marker)


def _chain_views(chain: list[ObjectRef], by_uid: Mapping[str, ObjectView], pod: ObjectView) -> list[ObjectView]:
    return [pod if ref.uid == pod.ref.uid else by_uid[ref.uid] for ref in chain]


def group_by_workload(
    pods: Sequence[PodView], objects_by_uid: Mapping[str, ObjectView], keep: Callable[[PodView], bool], *,
    cronjob_mode: CronJobMode = CronJobMode.JOB,
) -> list[tuple[Workload, list[PodView]]]:
    """The kept pods grouped by the workload they resolve to; pods whose chain cannot be read
    (unknown) or that are never candidates (DaemonSet) are left out."""
    index = dict(objects_by_uid)
    for pod in pods:
        index.setdefault(pod.ref.uid, pod_as_object(pod))
    groups: dict[str, tuple[Workload, list[PodView]]] = {}
    for pod in pods:
        if not keep(pod):
            continue
        owner = resolve(index[pod.ref.uid], index, cronjob_mode=cronjob_mode)
        if isinstance(owner, Workload):
            groups.setdefault(owner.ref.uid, (owner, []))[1].append(pod)
    return list(groups.values())


def pod_as_object(pod: PodView) -> ObjectView:
    return ObjectView(pod.ref, pod.resource_version, pod.started or EPOCH, pod.annotations, pod.labels,
                      pod.deleting, pod.controller)


def starting_pod(pods: Sequence[PodView], workload: ObjectView, objects_by_uid: Mapping[str, ObjectView], *,
                 cronjob_mode: CronJobMode = CronJobMode.JOB) -> PodView | None:
    """A pod of `workload` that is starting (not running or finished, not being deleted): the workload is in use
    again, or about to be, whatever its running pods' history says."""
    index = {**objects_by_uid, workload.ref.uid: workload}
    for pod in pods:
        if pod.phase in ("Running", "Succeeded", "Failed") or pod.deleting:
            continue
        owner = resolve(pod_as_object(pod), index, cronjob_mode=cronjob_mode)
        if isinstance(owner, Workload) and owner.ref.uid == workload.ref.uid:
            return pod
    return None


def workload_view(workload: Workload, members: Sequence[PodView],
                  objects_by_uid: Mapping[str, ObjectView]) -> ObjectView | None:
    """The workload as read, or the pod itself for a bare pod (listed or not)."""
    found = objects_by_uid.get(workload.ref.uid)
    return found or next((pod_as_object(p) for p in members if p.ref.uid == workload.ref.uid), None)


def deciding_policy(policies: Sequence[Policy], kind: type, workload: Workload, members: Sequence[PodView],
                    namespace: NamespaceView, view: ObjectView | None) -> Policy | None:
    """The first policy with a `kind` trigger whose match holds for every pod of the workload,
    unless the workload opted out and that policy honours it."""
    policy = next((p for p in policies if p.trigger(kind) is not None and all(
        p.match.matches(namespace=namespace.name, namespace_labels=namespace.labels, kind=workload.ref.kind,
                        pod_labels=pod.labels) for pod in members)), None)
    opted_out = view is not None and view.annotations.get(OPT_OUT, "").strip().lower() == "true"
    return None if policy is None or (policy.lifecycle.honour_opt_out and opted_out) else policy
