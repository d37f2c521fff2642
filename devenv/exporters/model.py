"""Plain values the synthetic exporters render from, and the identities real nodes would have.

The exporters never talk to Kubernetes: a provider turns pod and node objects into these frozen
views (see `devenv.podviews`), so rendering is a pure function that unit tests can call with
hand-made values. Everything a real node would invent (GPU UUIDs, PCI bus ids, container ids,
cgroup paths, IPs) is derived deterministically from names, so a series scraped live and the
same series written by the backfill are byte-for-byte the same labels.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_GPU_MODEL = "NVIDIA A100-SXM4-80GB"
DRIVER_VERSION = "570.124.06"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
DEFAULT_IMAGE = "docker.io/library/python:3.11-slim"

# Phases in which the kubelet holds a pod's devices and cgroups (pod-resources lists it).
ACTIVE_PHASES = frozenset({"Pending", "Running"})

# Bus ids of the 8 GPUs of a DGX A100, reused cyclically (only the format matters to readers).
_PCI_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)
# First GPU instance id per compute-slice count on an A100 (nvidia-smi mig -lgi numbering).
_MIG_FIRST_GI = {1: 7, 2: 3, 3: 1, 4: 0, 7: 0}
_NS = uuid.UUID("6f1c3a52-1d7e-4b8e-9a43-5b0c2e7d9f10")


@dataclass(frozen=True, slots=True)
class ContainerView:
    """One app container: what kube-state-metrics and the device plugin see of it.

    `gpus` counts whole GPUs or MIG instances (whatever the node offers). `image` is an addition
    for the cAdvisor `image` label; providers that don't know it get a realistic default.
    """

    name: str
    cpu_request_cores: float
    gpus: int
    image: str = DEFAULT_IMAGE


@dataclass(frozen=True, slots=True)
class PodView:
    """The fields of a pod that the exporters derive series from. Times are unix seconds."""

    namespace: str
    name: str
    uid: str
    node: str | None
    phase: str
    created: float
    owner_kind: str
    owner_name: str
    containers: tuple[ContainerView, ...]
    deletion_timestamp: float | None
    unschedulable: bool

    @property
    def gpus(self) -> int:
        return sum(c.gpus for c in self.containers)


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node. With `mig_profile` set, `gpus` counts MIG instances of that profile, not boards."""

    name: str
    gpus: int
    gpu_model: str = DEFAULT_GPU_MODEL
    mig_profile: str | None = None


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One entity dcgm-exporter reports: a whole GPU, or a MIG GPU instance of a parent GPU.

    MIG instances carry the parent's `index`/`uuid`/`pci_bus_id` (as the real exporter does) and
    are told apart by `gpu_instance_id`.
    """

    node: str
    index: int
    uuid: str
    pci_bus_id: str
    model: str
    mig_profile: str | None = None
    gpu_instance_id: int | None = None

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None


@dataclass(frozen=True, slots=True)
class GpuAssignment:
    """A device and, if the device plugin gave it to a pod, the pod, container and slot.

    `slot` is the device's position within the pod (0..pod.gpus-1): tests address GPUs by slot
    because indices on the node depend on which other pods exist.
    """

    device: GpuDevice
    pod: PodView | None = None
    container: str | None = None
    slot: int | None = None


def gpu_uuid(node: str, index: int) -> str:
    """Stable `GPU-<uuid>` for board `index` of `node`."""
    return f"GPU-{uuid.uuid5(_NS, f'{node}/gpu/{index}')}"


def pci_bus_id(index: int) -> str:
    return f"00000000:{_PCI_BUSES[index % len(_PCI_BUSES)]:02X}:00.0"


def mig_instances_per_gpu(profile: str) -> int:
    """How many instances of `profile` (e.g. '3g.40gb') fit on one A100/H100 (7 compute slices)."""
    slices = int(profile.split("g", 1)[0])
    return max(1, 7 // slices)


def node_devices(node: NodeView) -> list[GpuDevice]:
    """The dcgm entities of a node, in index order."""
    if not node.mig_profile:
        return [
            GpuDevice(node.name, i, gpu_uuid(node.name, i), pci_bus_id(i), node.gpu_model)
            for i in range(node.gpus)
        ]
    per_gpu = mig_instances_per_gpu(node.mig_profile)
    first_gi = _MIG_FIRST_GI.get(int(node.mig_profile.split("g", 1)[0]), 1)
    devices = []
    for i in range(node.gpus):
        board = i // per_gpu
        devices.append(
            GpuDevice(
                node.name,
                board,
                gpu_uuid(node.name, board),
                pci_bus_id(board),
                node.gpu_model,
                mig_profile=node.mig_profile,
                gpu_instance_id=first_gi + i % per_gpu,
            )
        )
    return devices


def pods_on(node: str, pods: Iterable[PodView]) -> list[PodView]:
    """Pods bound to `node` in the order the device plugin is assumed to have admitted them."""
    return sorted(
        (p for p in pods if p.node == node), key=lambda p: (p.created, p.namespace, p.name)
    )


def assign_gpus(
    node: NodeView, pods: Iterable[PodView], sticky: dict[str, tuple[int, ...]] | None = None
) -> list[GpuAssignment]:
    """Give devices to the node's GPU pods, first fit in admission order.

    Only Pending/Running pods hold devices (finished pods released them). A pod that does not fit
    into what is left gets nothing, as the kubelet would reject it. With `sticky` (pod uid ->
    device indices, updated in place) a pod keeps its devices for its whole life, as with a real
    device plugin, so its series never change `gpu` label when another pod on the node goes.
    """
    devices = node_devices(node)
    active = [p for p in pods_on(node.name, pods) if p.phase in ACTIVE_PHASES and p.gpus > 0]
    used: set[int] = set()
    placed: dict[str, tuple[int, ...]] = {}
    for pod in active if sticky is not None else []:
        kept = sticky.get(pod.uid) if sticky is not None else None
        if kept and len(kept) == pod.gpus and all(i < len(devices) and i not in used for i in kept):
            placed[pod.uid] = kept
            used.update(kept)
    for pod in active:
        if pod.uid in placed:
            continue
        free = [i for i in range(len(devices)) if i not in used]
        if len(free) < pod.gpus:
            continue
        placed[pod.uid] = tuple(free[: pod.gpus])
        used.update(placed[pod.uid])
        if sticky is not None:
            sticky[pod.uid] = placed[pod.uid]
    result: list[GpuAssignment] = []
    for pod in active:
        indices = iter(placed.get(pod.uid, ()))
        slot = 0
        for container in pod.containers if pod.uid in placed else ():
            for _ in range(container.gpus):
                result.append(GpuAssignment(devices[next(indices)], pod, container.name, slot))
                slot += 1
    result.extend(GpuAssignment(devices[i]) for i in range(len(devices)) if i not in used)
    return result


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def container_id(pod_uid: str, container: str) -> str:
    """64-hex containerd id of a container (the pause sandbox is container '')."""
    return _digest(pod_uid, container)


def qos_class(pod: PodView) -> str:
    """Burstable if anything is requested, else BestEffort (views carry no limits: never Guaranteed)."""
    return "burstable" if any(c.cpu_request_cores > 0 for c in pod.containers) else "besteffort"


def pod_cgroup(pod: PodView) -> str:
    """systemd-driver pod cgroup: /kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice."""
    qos = qos_class(pod)
    uid = pod.uid.replace("-", "_")
    return f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice"


def container_cgroup(pod: PodView, cid: str) -> str:
    return f"{pod_cgroup(pod)}/cri-containerd-{cid}.scope"


def _ip(prefix: str, *parts: str) -> str:
    d = bytes.fromhex(_digest(*parts)[:4])
    return f"{prefix}.{d[0]}.{max(d[1], 2) % 254 + 1}"


def node_ip(node: str) -> str:
    """InternalIP of a node (10.0.x.y); also the kubelet's scrape address."""
    return _ip("10.0", "node", node)


def pod_ip(pod_uid: str) -> str:
    return _ip("10.244", "pod", pod_uid)


def exporter_pod_ip(exporter: str, node: str) -> str:
    """IP of a per-node exporter pod (dcgm-exporter, node-exporter) for `instance` labels."""
    return _ip("10.244", exporter, node)
