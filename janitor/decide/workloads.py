"""Which workload a pod belongs to: the object to mark, warn about and act on.

Deleting a pod that a controller recreates reclaims nothing, so the janitor follows the chain of
controller ownerReferences (Pod -> ReplicaSet -> Deployment, Pod -> Job -> CronJob, StatefulSet,
custom resources such as a Kubeflow Notebook) to its top and acts there. Every link must be
readable: an owner that is not in the snapshot (forbidden, unknown kind, dangling) or that is
already being deleted makes the workload *unknown*, and unknown is never acted on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from janitor.decide.model import ObjectRef, ObjectView

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
