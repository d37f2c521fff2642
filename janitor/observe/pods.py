"""Pods and namespaces as the idle triggers read them (one paginated list each per cycle)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from janitor import kubeapi
from janitor.decide.model import (
    ContainerView,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    OwnerRef,
    PodState,
    PodView,
    ResourceKind,
)

PODS = ResourceKind("", "v1", "Pod", "pods")
NAMESPACES = ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False)
NODES = ResourceKind("", "v1", "Node", "nodes", namespaced=False)


def _time(text: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def cpu_cores(quantity: str | None) -> float:
    """A CPU quantity ('500m', '2', '1.5') in cores."""
    if not quantity:
        return 0.0
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _gpus(resources: Mapping[str, Any]) -> int:
    merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    return sum(int(v) for k, v in merged.items() if k == "nvidia.com/gpu" or k.startswith("nvidia.com/mig-"))


def pod_view(item: Mapping[str, Any]) -> PodView:
    meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    containers = spec.get("containers") or []
    return PodView(
        ref=ObjectRef("Pod", "v1", meta["namespace"], meta["name"], meta["uid"]),
        resource_version=meta.get("resourceVersion", ""),
        labels=dict(meta.get("labels") or {}),
        controller=OwnerRef(owner["kind"], owner["apiVersion"], owner["name"], owner["uid"]) if owner else None,
        node=spec.get("nodeName"),
        phase=status.get("phase", "Pending"),
        started=_time(status.get("startTime")),
        gpus=sum(_gpus(c.get("resources") or {}) for c in containers),
        containers=tuple(
            ContainerView(c["name"], cpu_cores(((c.get("resources") or {}).get("requests") or {}).get("cpu")))
            for c in containers
        ),
        deleting=bool(meta.get("deletionTimestamp")),
        annotations=dict(meta.get("annotations") or {}),
        state=pod_state(meta, spec, status),
    )


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


def _last_exit(statuses: list[Mapping[str, Any]]) -> tuple[str, datetime.datetime | None]:
    """The most recent terminated state of any container, in words, and when it ended."""
    latest: tuple[str, datetime.datetime | None] = ("", None)
    for c in statuses:
        done = (c.get("lastState") or {}).get("terminated")
        if done:
            at = _time(done.get("finishedAt"))
            if latest[1] is None or (at is not None and at > latest[1]):
                latest = (f"{c.get('name')}: {done.get('reason') or 'exited'}, exit code {done.get('exitCode')}", at)
    return latest


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
        restarts=sum(int(c.get("restartCount") or 0) for c in statuses),
        last_exit=_last_exit(statuses)[0],
        last_exit_at=_last_exit(statuses)[1],
        limits=_limits(list(spec.get("containers") or [])),
        requests=_requests(list(spec.get("containers") or [])),
        node_selector=dict(spec.get("nodeSelector") or {}),
        required_affinity=_affinity(spec),
        tolerations=tuple((t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")
                          for t in spec.get("tolerations") or []),
        finalizers=tuple(meta.get("finalizers") or ()),
        deleting_since=_time(meta.get("deletionTimestamp")),
        grace_seconds=int(meta.get("deletionGracePeriodSeconds") or spec.get("terminationGracePeriodSeconds") or 30),
    )


def node_info(item: Mapping[str, Any], agent_condition: str = "OrphanedDStateProcesses") -> NodeInfo:
    meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready")
    agent = conditions.get(agent_condition)
    return NodeInfo(
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        taints=tuple((t.get("key") or "", t.get("value") or "", t.get("effect") or "") for t in spec.get("taints") or []),
        allocatable={k: quantity(v) for k, v in (status.get("allocatable") or {}).items()},
        ready=None if ready is None else ready.get("status") == "True",
        agent=None if agent is None else (agent.get("status", ""), agent.get("message", ""),
                                          _time(agent.get("lastHeartbeatTime"))),
    )


EVENTS = ResourceKind("", "v1", "Event", "events")


def read_pod_events(api: ApiClient, reason: str, namespaces: Sequence[str] | None = None, *,
                    page_size: int = 500) -> dict[str, list[str]]:
    """Messages of the Events with `reason` (e.g. the node agent's OOMKillInPod), by pod uid, oldest first."""
    scopes: Sequence[str | None] = namespaces if namespaces is not None else [None]
    found: dict[str, list[tuple[str, str]]] = {}
    for scope in scopes:
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", page_size), ("fieldSelector", f"reason={reason}")]
            query += [("continue", token)] if token else []
            body = json.loads(kubeapi.request(api, "GET", kubeapi.path(EVENTS, scope), query=query,
                                              doing=f"list {reason} events").data)
            for item in body.get("items") or []:
                uid = (item.get("involvedObject") or {}).get("uid")
                if uid:
                    stamp = item.get("lastTimestamp") or item.get("eventTime") or ""
                    found.setdefault(uid, []).append((stamp, item.get("message") or ""))
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                break
    return {uid: [m for _, m in sorted(items)] for uid, items in found.items()}


def read_nodes(api: ApiClient, *, page_size: int = 500) -> list[NodeInfo]:
    return [node_info(item) for item in _items(api, NODES, None, page_size)]


def _items(api: ApiClient, kind: ResourceKind, namespace: str | None, page_size: int) -> Iterator[Mapping[str, Any]]:
    token: str | None = None
    while True:
        query: list[tuple[str, Any]] = [("limit", page_size)] + ([("continue", token)] if token else [])
        body = json.loads(kubeapi.request(api, "GET", kubeapi.path(kind, namespace), query=query,
                                          doing=f"list {kind.plural}").data)
        yield from body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return


def read_pods(api: ApiClient, namespaces: Sequence[str] | None = None, *, page_size: int = 500) -> list[PodView]:
    scopes: Sequence[str | None] = namespaces if namespaces is not None else [None]
    return [pod_view(item) for scope in scopes for item in _items(api, PODS, scope, page_size)]


def read_namespaces(api: ApiClient, *, page_size: int = 500) -> list[NamespaceView]:
    return [NamespaceView(i["metadata"]["name"], dict(i["metadata"].get("labels") or {}),
                          dict(i["metadata"].get("annotations") or {}))
            for i in _items(api, NAMESPACES, None, page_size)]
