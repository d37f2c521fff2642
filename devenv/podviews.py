"""The synthetic exporters' view of the cluster, read from the real apiserver.

Series are derived from the real pod objects (name, namespace, uid, node, containers, GPUs), so a
test creates a pod the ordinary way and only sets usage values. Reads are cached for a moment:
Prometheus scrapes several exporter targets per interval and each asks for the same pod list.
"""

from __future__ import annotations

import threading
import time

from kubernetes import client

from devenv.exporters.model import ContainerView, NodeView, PodView
from devenv.nodes import GPU_MODEL


def _quantity(value: str | None) -> float:
    """CPU quantity ('500m', '2', '1.5') in cores; other suffixes are not used for CPU."""
    if not value:
        return 0.0
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _gpus(resources: client.V1ResourceRequirements | None) -> int:
    """Whole GPUs or MIG instances requested (limits count too: GPUs are set as limits)."""
    if resources is None:
        return 0
    merged = {**(resources.requests or {}), **(resources.limits or {})}
    return sum(
        int(v) for k, v in merged.items() if k == "nvidia.com/gpu" or k.startswith("nvidia.com/mig-")
    )


def pod_view(pod: client.V1Pod) -> PodView:
    meta, spec, status = pod.metadata, pod.spec, pod.status
    owner = next((o for o in meta.owner_references or [] if o.controller), None)
    unschedulable = any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in (status.conditions or [])
    )
    return PodView(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        node=spec.node_name,
        phase=status.phase or "Pending",
        # Since when the exporters show the pod: its start time if the sandbox backdated it
        # (STARTED_AT), so a backfilled history can cover hours before the object was made.
        created=min(
            meta.creation_timestamp.timestamp(),
            status.start_time.timestamp() if status.start_time else float("inf"),
        ),
        owner_kind=owner.kind if owner else "",
        owner_name=owner.name if owner else "",
        containers=tuple(
            ContainerView(
                name=c.name,
                cpu_request_cores=_quantity((c.resources.requests or {}).get("cpu") if c.resources else None),
                gpus=_gpus(c.resources),
            )
            for c in spec.containers
        ),
        deletion_timestamp=meta.deletion_timestamp.timestamp() if meta.deletion_timestamp else None,
        unschedulable=unschedulable,
    )


def node_view(node: client.V1Node) -> NodeView:
    """A node's GPUs as the device plugin advertises them (whole GPUs or MIG instances)."""
    allocatable = node.status.allocatable or {}
    mig = next((k for k in allocatable if k.startswith("nvidia.com/mig-")), None)
    gpus = int(allocatable.get(mig or "nvidia.com/gpu", 0))
    model = (node.metadata.annotations or {}).get(GPU_MODEL)
    return NodeView(
        name=node.metadata.name,
        gpus=gpus,
        mig_profile=mig.removeprefix("nvidia.com/mig-") if mig else None,
        **({"gpu_model": model} if model else {}),
    )


class CachedPods:
    """A pods provider for the exporters that lists pods at most once per `max_age` seconds."""

    def __init__(self, core: client.CoreV1Api, max_age: float = 1.0) -> None:
        self._core = core
        self._max_age = max_age
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._pods: list[PodView] = []

    def __call__(self) -> list[PodView]:
        with self._lock:
            if time.monotonic() - self._at > self._max_age:
                self._pods = [pod_view(p) for p in self._core.list_pod_for_all_namespaces().items]
                self._at = time.monotonic()
            return list(self._pods)
