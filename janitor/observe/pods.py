"""Pods and namespaces as the idle triggers read them (one paginated list each per cycle)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from janitor import kubeapi
from janitor.decide.model import ContainerView, NamespaceView, ObjectRef, OwnerRef, PodView, ResourceKind

PODS = ResourceKind("", "v1", "Pod", "pods")
NAMESPACES = ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False)


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
    )


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
