"""The Kueue Workload that admits a workload, read at the API version the cluster serves.

Kueue owns the `spec.suspend` of what it admits (a Job, a JobSet, a RayCluster): it un-suspends a
Job whose Workload is admitted, so a suspend goes through the Workload's `spec.active` instead
(policy.endings). That Workload is the one whose controller ownerReference is the workload; it is
found by listing the Workloads of the namespace, at the version discovery says is served (v1beta2,
else v1beta1). Whatever cannot be read becomes a `Queued` with its problem, never an exception: the
planner then does nothing to that workload (decide.held.through).

Looked up only where it matters (`wanted`), so a cycle lists a namespace's Workloads only where an
enforcing suspend policy or a reservedQuota policy applies, or the janitor marked or reclaimed a
workload; the re-check right before a suspend looks its workload up whatever its labels say
(Kueue may manage Jobs without one).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from janitor import annotations as ann
from janitor import errors
from janitor.decide.model import GPU_RESOURCE, NamespaceView, ObjectView, ResourceKind
from janitor.observe import cluster
from janitor.policy.endings import KUEUE_GROUP, KUEUE_QUEUE_LABEL, KUEUE_VERSIONS, Action, Queued
from janitor.policy.model import Mode, Policy, ReservedQuota

logger = logging.getLogger(__name__)

KINDS = frozenset(Action.SUSPEND.ending.queued.kinds or ()) if Action.SUSPEND.ending.queued else frozenset()


def workloads(version: str) -> ResourceKind:
    return ResourceKind(KUEUE_GROUP, version, "Workload", "workloads")


def version(group: Mapping[str, Any]) -> str | None:
    """The Workload API version to read: the first of `KUEUE_VERSIONS` the group serves."""
    return cluster.first_version(group, KUEUE_VERSIONS)


def served(api: ApiClient) -> tuple[str | None, str]:
    """(the version to read, "") or (None, why not); ("", "") when Kueue's API is not served at all."""
    return cluster.served_version(api, KUEUE_GROUP, KUEUE_VERSIONS, name="Kueue")


def owned(items: Iterable[Mapping[str, Any]], uid: str, at: str) -> Queued | None:
    """The Workload among `items` whose controller owner is `uid` (as `Queued`, read at version `at`);
    None when there is none."""
    mine = [i for i in items if any(isinstance(o, Mapping) and o.get("controller") is True and o.get("uid") == uid
                                    for o in (i.get("metadata") or {}).get("ownerReferences") or ())]
    if not mine:
        return None
    if len(mine) > 1:
        return Queued(at, problem=f"{len(mine)} Kueue Workloads are owned by it")
    meta, spec = mine[0].get("metadata") or {}, mine[0].get("spec")
    active = spec.get("active", True) if isinstance(spec, Mapping) else None
    status = mine[0].get("status")
    held = reservation(status)
    return Queued(at, str(meta.get("name") or ""), str(meta.get("uid") or ""),
                  active if isinstance(active, bool) else None,
                  "" if isinstance(active, bool) else "its Workload's spec.active is not a boolean",
                  held.since, held.evicted, held.problem, admitted_gpus(status), held.finished, held.elsewhere,
                  held.stopped_at)


def admitted_gpus(status: Any) -> int:
    """The whole GPUs its admission counts (status.admission.podSetAssignments[].resourceUsage), for
    the words; 0 where not written or not a whole number."""
    admission = status.get("admission") if isinstance(status, Mapping) else None
    assignments = admission.get("podSetAssignments") if isinstance(admission, Mapping) else None
    total = 0
    for a in assignments if isinstance(assignments, list) else ():
        usage = a.get("resourceUsage") if isinstance(a, Mapping) else None
        value = usage.get(GPU_RESOURCE) if isinstance(usage, Mapping) else None
        if isinstance(value, (str, int)) and str(value).isdigit():
            total += int(value)
    return total


RESERVING = ("QuotaReserved", "Admitted")  # the conditions under which a ClusterQueue counts its quota


@dataclasses.dataclass(frozen=True, slots=True)
class Reservation:
    """What a Workload's status says of the quota it holds (policy.endings.Queued has the same fields)."""

    since: datetime.datetime | None = None  # the later transition of QuotaReserved and Admitted that are True
    evicted: bool = False
    problem: str = ""  # its status cannot be read: nothing is known of its quota
    finished: bool = False  # Finished True: its ClusterQueue no longer counts it
    # Why its pods may run elsewhere or be on their way (MultiKueue, admission checks, a topology
    # request still pending): then no pod here says nothing.
    elsewhere: str = ""
    stopped_at: datetime.datetime | None = None  # the later of Evicted turning True and PodsReady turning False


def reservation(status: Any) -> Reservation:
    """The Workload's quota from its status (see `Reservation`). A True condition without a time it
    became so, or a status of the wrong shape, is a problem, never a time made up."""
    if status is None:
        return Reservation()
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if conditions is None and isinstance(status, Mapping):
        return Reservation(elsewhere=_elsewhere(status))
    if not isinstance(status, Mapping) or not isinstance(conditions, list) or not all(
            isinstance(c, Mapping) for c in conditions):
        return Reservation(problem="its Workload's status.conditions is not a list of conditions")
    by_type: dict[str, Mapping[str, Any]] = {}
    for c in conditions:
        kind = str(c.get("type") or "")
        if kind in by_type:
            return Reservation(problem=f"its Workload has two {kind} conditions")
        by_type[kind] = c
    times: list[datetime.datetime] = []
    stopped: list[datetime.datetime] = []
    for kind, status_, into in (*((k, "True", times) for k in RESERVING), ("Evicted", "True", stopped),
                                ("PodsReady", "False", stopped)):
        c = by_type.get(kind)
        if c is None or c.get("status") != status_:
            continue
        at = cluster.api_time(c.get("lastTransitionTime"))
        if at is None:
            return Reservation(problem=f"its Workload's {kind} condition has no readable lastTransitionTime")
        into.append(at)
    return Reservation(max(times) if times else None, (by_type.get("Evicted") or {}).get("status") == "True", "",
                       (by_type.get("Finished") or {}).get("status") == "True", _elsewhere(status),
                       max(stopped) if stopped else None)


def _elsewhere(status: Mapping[str, Any]) -> str:
    """Why the Workload's pods may run elsewhere or be on their way, or "": MultiKueue runs it on a
    worker cluster (`clusterName`, or a check naming one), admission checks run before its pods may
    start (a ProvisioningRequest waiting for nodes), a topology-aware placement is still pending."""
    if status.get("clusterName"):
        return f"MultiKueue runs it on cluster {status.get('clusterName')}"
    checks = status.get("admissionChecks")
    if checks:
        names = ", ".join(f"{c.get('name')} ({c.get('state')})" for c in checks if isinstance(c, Mapping)) \
            if isinstance(checks, list) else "unreadable"
        return f"it has admission checks ({names}): its pods may run on another cluster or wait for nodes"
    admission = status.get("admission")
    assignments = admission.get("podSetAssignments") if isinstance(admission, Mapping) else None
    if isinstance(assignments, list) and any(isinstance(a, Mapping) and a.get("delayedTopologyRequest") == "Pending"
                                             for a in assignments):
        return "its topology-aware placement is still pending"
    return ""



def suspending(policies: Iterable[Policy], namespaces: Mapping[str, NamespaceView]) -> frozenset[str]:
    """The namespaces an enforcing policy whose action is suspend covers: where a mark's warning
    names the Workload its suspend would go through."""
    acting = [p for p in policies if p.mode is Mode.ENFORCE and p.lifecycle.action is Action.SUSPEND]
    return frozenset(n for n, v in namespaces.items() if any(
        p.match.namespaces.matches(n) and p.match.namespace_selector.matches(v.labels) for p in acting))


def reserving(policies: Iterable[Policy], namespaces: Mapping[str, NamespaceView]) -> frozenset[str]:
    """The namespaces a policy with the reservedQuota trigger covers, in any mode: there every
    workload Kueue may admit is looked up, since its Workload's conditions are what is judged."""
    judging = [p for p in policies if p.trigger(ReservedQuota) is not None]
    return frozenset(n for n, v in namespaces.items() if any(
        p.match.namespaces.matches(n) and p.match.namespace_selector.matches(v.labels) for p in judging))


def looked_up(policies: Iterable[Policy], namespaces: Mapping[str, NamespaceView]) -> frozenset[str]:
    """Where a cycle reads Kueue Workloads: `suspending` and `reserving` namespaces."""
    policies = tuple(policies)
    return suspending(policies, namespaces) | reserving(policies, namespaces)


def wanted(view: ObjectView, *, every: bool = False, namespaces: Collection[str] = ()) -> bool:
    """Whether to look up the Workload of `view` (see the module's words): for the re-check (`every`),
    each one of a kind Kueue may admit; in a cycle, one with the janitor's reclaim record (checked on
    the Workload), and one that is marked or in `namespaces` (a suspend policy's: its warning names the
    Workload), whether Kueue's label queues it or not."""
    if view.ref.kind not in KINDS or view.deleting:
        return False
    notes = view.annotations
    if every or ann.RECLAIMED in notes:
        return True
    # Its queue label is not needed: Kueue may admit Jobs without one (manageJobsWithoutQueueName, a
    # prebuilt Workload), and the warning must name the Workload the suspend will go through.
    return ann.carries_mark(notes) or view.ref.namespace in namespaces


def attach(api: ApiClient, objects: Sequence[ObjectView], *, page_size: int = 250, every: bool = False,
           namespaces: Collection[str] = ()) -> tuple[ObjectView, ...]:
    """`objects`, each one `wanted` with the `Queued` read for it (None where no Workload admits it and
    no label says Kueue does: then nothing is known against acting on it directly)."""
    looked = [o for o in objects if wanted(o, every=every, namespaces=namespaces)]
    if not looked:
        return tuple(objects)
    at, problem = served(api)
    found: dict[str, Queued | None] = {}
    if at == "":  # no Kueue here: a queue label alone is no Workload
        found = {o.ref.uid: Queued(problem="Kueue's API is not served") for o in looked
                 if KUEUE_QUEUE_LABEL in o.labels}
    elif at is None:
        found = {o.ref.uid: Queued(problem=problem) for o in looked}
    else:
        by_namespace: dict[str, list[ObjectView]] = defaultdict(list)
        for o in looked:
            by_namespace[o.ref.namespace or ""].append(o)
        for namespace, views in by_namespace.items():
            found |= _in(api, at, namespace, views, page_size)
    return tuple(dataclasses.replace(o, queued=found[o.ref.uid]) if o.ref.uid in found else o for o in objects)


def _in(api: ApiClient, at: str, namespace: str, views: Sequence[ObjectView], page_size: int
        ) -> dict[str, Queued | None]:
    items: list[Mapping[str, Any]] = []
    try:
        for page, _ in cluster.list_items(api, workloads(at), page_size=page_size, namespaces=[namespace]):
            items.extend(page)
    except errors.KubeError as e:
        logger.warning("cannot list Kueue Workloads in %s: %s", namespace, e)
        return {v.ref.uid: Queued(at, problem=f"its namespace's Kueue Workloads could not be listed "
                                              f"({e.server_message})") for v in views}
    out: dict[str, Queued | None] = {}
    for v in views:
        queued = owned(items, v.ref.uid, at)
        if queued is None and KUEUE_QUEUE_LABEL in v.labels:  # queued, and no Workload (yet, or any more)
            queued = Queued(at, problem="no Kueue Workload is owned by it")
        out[v.ref.uid] = queued  # None: unlabelled and owned by none, so Kueue does not admit it
    return out
