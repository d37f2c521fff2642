"""Raw API items into the views deciding reads: pods, namespaces, nodes, the node agent's reports.

Only the fields `decide` reads are kept, so a cycle holds small values, not the API's objects.
The node agent's condition and OOM Events are decoded with its own codec (janitor.node_report):
pod UIDs and kill counts arrive as data, never read out of a sentence."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

from janitor import annotations as ann
from janitor import node_report
from janitor.decide.model import (
    GPU_RESOURCE,
    AgentCondition,
    ContainerKind,
    ContainerStatus,
    ContainerView,
    HoldersCondition,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    OwnerRef,
    PodState,
    PodView,
    ResourceKind,
    is_mig,
)
from janitor.node_report import OomReport

PODS = ResourceKind("", "v1", "Pod", "pods")
NAMESPACES = ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False)
NODES = ResourceKind("", "v1", "Node", "nodes", namespaced=False)
EVENTS = ResourceKind("", "v1", "Event", "events")


_H = TypeVar("_H", bound=Hashable)
_SHARED: dict[Any, Any] = {}
SHARED_MAX = 50_000  # distinct values kept for sharing; past it, values are kept as they come


def share(value: _H) -> _H:
    """One copy of a value that many pods carry alike (tolerations, resource totals, finalizers):
    a cache of 50,000 pods holds each once, not 50,000 times. Shared values are never mutated:
    views are read-only by type."""
    found: _H | None = _SHARED.get(value)
    if found is not None:
        return found
    if len(_SHARED) < SHARED_MAX:
        _SHARED[value] = value
    return value


def _shared_map(values: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping of strings to numbers or strings, shared with every equal one (see `share`)."""
    return share(_Frozen(values)).dict


class _Frozen:
    """A dict's items as a key of `_SHARED`, carrying the one dict they stand for."""

    __slots__ = ("dict", "_key")

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.dict: dict[str, Any] = {sys.intern(k): v for k, v in values.items()}
        self._key = frozenset(self.dict.items())

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and self._key == other._key


def strings(values: Mapping[str, Any] | None) -> dict[str, str]:
    """Labels or annotations, their keys (and short values) held once however many objects carry them."""
    return {sys.intern(k): sys.intern(v) if isinstance(v, str) and len(v) <= 64 else v
            for k, v in (values or {}).items()}


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""What `kubectl apply` (and GitOps tools applying client-side) writes on every object it applies:
the whole object as applied, a ConfigMap's data included, in its metadata. Nothing the janitor
decides reads it, and the watch cache would hold a copy of every applied object for as long as
the daemon runs."""


def kept_annotations(values: Mapping[str, Any] | None) -> dict[str, str]:
    """An object's annotations as its view keeps them: `strings`, without `LAST_APPLIED`."""
    return strings({k: v for k, v in values.items() if k != LAST_APPLIED} if values and LAST_APPLIED in values
                   else values)


_MARK_KEYS = frozenset(ann.MARK_READ_KEYS)
_JANITOR_ONLY = frozenset(ann.JANITOR_ONLY_KEYS)
_RECORDS = frozenset({ann.RECLAIMED, ann.UNDONE})  # a reclaim's records: the janitor's only when it wrote them
_NONE: frozenset[str] = frozenset()


def foreign_marks(meta: Mapping[str, Any]) -> frozenset[str]:
    """The keys of a mark on the object (the janitor-only keys, janitor/expires) that no field
    manager of the janitor owns in the apiserver's record (managedFields): someone else wrote them
    last, or the record was emptied. Only the keys are kept, never the record: the watch cache stays
    slim. A same-value write leaves the owner as it was; a different value makes its writer the owner."""
    notes = meta.get("annotations") or {}
    marked = not _JANITOR_ONLY.isdisjoint(notes)
    if not marked and _RECORDS.isdisjoint(notes):  # no mark, no record (a janitor/expires alone is its owner's)
        return _NONE
    present = (_MARK_KEYS.intersection(notes) if marked else set()) | _RECORDS.intersection(notes)
    owned: set[str] = set()
    for entry in meta.get("managedFields") or ():
        if isinstance(entry, Mapping) and entry.get("manager") in ann.FIELD_MANAGERS:
            fields = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations") or {}
            owned.update(key[2:] for key in fields if key.startswith("f:"))
    return share(frozenset(present - owned))


_RESTORED_FIELDS = ("f:replicas", "f:suspend")


def restored_by(meta: Mapping[str, Any]) -> str | None:
    """The field manager other than the janitor's that last wrote spec.replicas or spec.suspend (a
    `scale` subresource write counts: KEDA and HPAs scale through it), by the entries' times; None
    when no one else owns them."""
    latest: tuple[str, str] | None = None
    for entry in meta.get("managedFields") or ():
        if not isinstance(entry, Mapping) or entry.get("manager") in ann.FIELD_MANAGERS:
            continue
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if isinstance(spec, Mapping) and any(f in spec for f in _RESTORED_FIELDS):
            at = str(entry.get("time") or "")
            if latest is None or at >= latest[0]:
                latest = (at, str(entry.get("manager") or ""))
    return sys.intern(latest[1]) if latest is not None and latest[1] else None


def _time(text: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def cpu_cores(quantity: str | None) -> float:
    """A CPU quantity ('500m', '2', '1.5') in cores."""
    if not quantity:
        return 0.0
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _gpus(resources: Mapping[str, Any]) -> int:
    merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    return sum(int(v) for k, v in merged.items() if k == GPU_RESOURCE or is_mig(k))


def pod_view(item: Mapping[str, Any]) -> PodView:
    meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    containers = spec.get("containers") or []
    node = spec.get("nodeName")
    return PodView(
        ref=ObjectRef("Pod", "v1", sys.intern(meta["namespace"]), meta["name"], meta["uid"]),
        resource_version=meta.get("resourceVersion", ""),
        labels=strings(meta.get("labels")),
        controller=OwnerRef(sys.intern(owner["kind"]), sys.intern(owner["apiVersion"]), owner["name"], owner["uid"])
        if owner else None,
        node=sys.intern(node) if node else node,
        phase=sys.intern(status.get("phase", "Pending")),
        started=_time(status.get("startTime")),
        gpus=sum(_gpus(c.get("resources") or {}) for c in containers),
        containers=share(tuple(ContainerView(sys.intern(c["name"]), cpu_cores(
            ((c.get("resources") or {}).get("requests") or {}).get("cpu"))) for c in containers)),
        deleting=bool(meta.get("deletionTimestamp")),
        annotations=kept_annotations(meta.get("annotations")),
        state=pod_state(meta, spec, status),
        created=_time(meta.get("creationTimestamp")),
        foreign_marks=foreign_marks(meta),
        resource_claims=_claim_names(spec, status),
    )


def _claim_names(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[str, ...]:
    named = [c.get("resourceClaimName") for c in spec.get("resourceClaims") or () if isinstance(c, Mapping)]
    named += [c.get("resourceClaimName") for c in status.get("resourceClaimStatuses") or () if isinstance(c, Mapping)]
    extended = status.get("extendedResourceClaimStatus")  # the scheduler's claim for a DRA-backed extended resource
    if isinstance(extended, Mapping):
        named.append(extended.get("resourceClaimName"))
    return tuple(dict.fromkeys(n for n in named if isinstance(n, str) and n))


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
             "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def quantity(text: str | int | float | None) -> float:
    """A Kubernetes quantity ('500m', '16Gi', '2', '1e3') as a number; unparseable is 0."""
    if text is None:
        return 0.0
    if isinstance(text, int | float):
        return float(text)
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
            except ValueError:
                break
    try:
        return float(text)
    except ValueError:
        return 0.0


def _requests(containers: list[Mapping[str, Any]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for c in containers:
        resources = c.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, 0.0) + quantity(value)
    return total


def _affinity(spec: Mapping[str, Any]) -> tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...]:
    required = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    return tuple(tuple((e.get("key", ""), e.get("operator", ""), tuple(e.get("values") or ()))
                       for e in term.get("matchExpressions") or []) for term in required)


def _exit_words(done: Mapping[str, Any]) -> str:
    return f"{done.get('reason') or 'exited'}, exit code {done.get('exitCode')}"


def _container(status: Mapping[str, Any], kind: ContainerKind) -> ContainerStatus:
    """One container's status, kept per container: restarts are never summed across containers."""
    now = status.get("state") or {}
    state = next((s for s in ("waiting", "running", "terminated") if now.get(s) is not None), "")
    detail = now.get(state) or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    code = detail.get("exitCode")
    return ContainerStatus(
        name=sys.intern(status.get("name") or ""),
        kind=kind,
        restarts=int(status.get("restartCount") or 0),
        state=state,
        reason=detail.get("reason") or "",
        since=_time(detail.get("startedAt") if state == "running" else detail.get("finishedAt")),
        exit_code=int(code) if code is not None else None,
        last_exit=_exit_words(last) if last else "",
        last_started=_time(last.get("startedAt")),
        last_exit_at=_time(last.get("finishedAt")),
    )


def _containers(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[ContainerStatus, ...]:
    """Init containers (native sidecars among them: restartPolicy Always) in spec order, then the app
    containers; a container the kubelet has not reported on yet is left out."""
    sidecars = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    init = tuple(_container(c, ContainerKind.SIDECAR if c.get("name") in sidecars else ContainerKind.INIT)
                 for c in status.get("initContainerStatuses") or [])
    return init + tuple(_container(c, ContainerKind.APP) for c in status.get("containerStatuses") or [])


def _limits(containers: list[Mapping[str, Any]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for c in containers:
        for name, value in ((c.get("resources") or {}).get("limits") or {}).items():
            total[name] = total.get(name, 0.0) + quantity(value)
    return total


def pod_state(meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]) -> PodState:
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    statuses = list(status.get("containerStatuses") or []) + list(status.get("initContainerStatuses") or [])
    waiting = tuple((c.get("name", ""), w.get("reason", ""), w.get("message", ""))
                    for c in statuses if (w := (c.get("state") or {}).get("waiting")))
    return PodState(
        scheduled=None if scheduled is None else scheduled.get("status") == "True",
        schedule_reason=(scheduled or {}).get("reason") or "",
        schedule_message=(scheduled or {}).get("message") or "",
        scheduled_changed=_time((scheduled or {}).get("lastTransitionTime")),
        gated=bool(spec.get("schedulingGates")),
        waiting=waiting,
        containers=_containers(spec, status),
        limits=_shared_map(_limits(list(spec.get("containers") or []))),
        requests=_shared_map(_requests(list(spec.get("containers") or []))),
        node_selector=_shared_map(spec.get("nodeSelector") or {}),
        required_affinity=share(_affinity(spec)),
        tolerations=share(tuple((t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "",
                                 t.get("effect") or "")
                                for t in spec.get("tolerations") or [])),
        finalizers=share(tuple(meta.get("finalizers") or ())),
        deleting_since=_time(meta.get("deletionTimestamp")),
        grace_seconds=int(meta.get("deletionGracePeriodSeconds") or spec.get("terminationGracePeriodSeconds") or 30),
    )


def node_info(item: Mapping[str, Any], agent_condition: str = node_report.CONDITION_TYPE,
              gpu_condition: str = node_report.GPU_CONDITION_TYPE) -> NodeInfo:
    meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready")
    agent = conditions.get(agent_condition)
    holders = conditions.get(gpu_condition)
    return NodeInfo(
        name=sys.intern(meta["name"]),  # the pods' `node`, interned as well: one string a node
        labels=strings(meta.get("labels")),
        taints=tuple((t.get("key") or "", t.get("value") or "", t.get("effect") or "")
                     for t in spec.get("taints") or []),
        allocatable={k: quantity(v) for k, v in (status.get("allocatable") or {}).items()},
        ready=None if ready is None else ready.get("status") == "True",
        capacity={k: quantity(v) for k, v in (status.get("capacity") or {}).items()},
        unschedulable=bool(spec.get("unschedulable")),
        agent=None if agent is None else AgentCondition(
            {"True": True, "False": False}.get(agent.get("status", "")),
            node_report.decode_condition(agent.get("message") or "")),
        gpu_holders=None if holders is None else HoldersCondition(
            {"True": True, "False": False}.get(holders.get("status", "")),
            node_report.decode_holders(holders.get("message") or "")),
    )


def namespace_view(item: Mapping[str, Any]) -> NamespaceView:
    meta = item["metadata"]
    return NamespaceView(meta["name"], dict(meta.get("labels") or {}), dict(meta.get("annotations") or {}))


def oom_reports(items: Sequence[Mapping[str, Any]]) -> dict[str, tuple[OomReport, ...]]:
    """The node agent's OOM Events, by pod uid, oldest first. An Event without the data part (an
    older agent) counts as a report of unknown scope, with its words."""
    found: dict[str, list[tuple[str, OomReport]]] = {}
    for item in items:
        uid = (item.get("involvedObject") or {}).get("uid")
        if not uid or item.get("reason") != node_report.EVENT_OOM:
            continue
        message = item.get("message") or ""
        report = node_report.decode_oom(message) or OomReport(0, 0, node_report.OomScope.UNKNOWN, message)
        stamp = item.get("lastTimestamp") or item.get("eventTime") or ""
        found.setdefault(uid, []).append((stamp, report))
    return {uid: tuple(r for _, r in sorted(reports, key=lambda p: p[0])) for uid, reports in found.items()}
