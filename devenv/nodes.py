"""Fake GPU nodes, run by kwok standing in for their kubelets.

kwok makes managed nodes Ready and keeps their heartbeats, moves pods bound to them to Running,
and finishes deletions, as `kwok-stages.yaml` describes: a pod annotated `HOLD_TERMINATING: "true"`
stays Terminating (as when its processes hang in D state) until the annotation is removed, and
a Job's pods complete only when its pod template carries `COMPLETE: "true"`, and a pod annotated
`STARTED_AT: <RFC 3339>` reports that as its start time (a pod running for hours, in a test).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from devenv.procs import Component

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
HOLD_TERMINATING = "devenv.janitor.dev/hold-terminating"
WAITING = "devenv.janitor.dev/waiting"  # pod annotation: stay Pending, containers waiting with this reason
CRASH = "devenv.janitor.dev/crash"  # pod annotation: Running in CrashLoopBackOff, last exit with this reason
COMPLETE = "devenv.janitor.dev/complete"
STARTED_AT = "devenv.janitor.dev/started-at"
GPU_MODEL = "devenv.janitor.dev/gpu-model"  # the exact model name; label values cannot hold spaces
STAGES = Path(__file__).resolve().parent / "kwok-stages.yaml"
# Scale mode (thousands of nodes). A lease renewal is a write per node every quarter of the lease
# duration: at the default 40 s that is 200 writes/s for 2,000 nodes, more than this machine's
# apiserver and etcd can spare. 200 s renews every 50 s (40 writes/s); the controller-manager's
# node monitor grace period is raised to match (devenv.controlplane.SCALE_CONTROLLER_FLAGS).
LEASE_SECONDS = 40
SCALE_LEASE_SECONDS = 200
# Node status heartbeats carry no liveness while leases do; in scale mode one every 4-6 minutes.
# kwok draws the delay between the two (a jitter below the duration would replace it).
SCALE_HEARTBEAT_MS = (240_000, 360_000)
# kwok's workers per stage kind and for leases (default 4). Each waits for its patch, so on a
# loaded apiserver pods became Running at ~40/s with 8 workers, behind populate's creation.
# Seen at scale (kwok 0.8): while pods arrive by the hundred per second, kwok plays pod-ready a
# second time on a fifth to a third of them from a stale event; that patch fails ("may specify no
# more than one IP for each IP family", logged as an ERROR) and is not retried. The pod stays
# Running with its first IP: one wasted patch per such pod, nothing else.
SCALE_PARALLELISM = 16


@dataclass(frozen=True)
class NodeSpec:
    """A fake node: its GPUs (whole GPUs or MIG instances of one profile) and its size."""

    name: str
    gpus: int = 0
    mig_profile: str | None = None
    cpu: int = 64
    memory: str = "512Gi"
    gpu_model: str = "NVIDIA A100-SXM4-80GB"

    @property
    def gpu_resource(self) -> str:
        return f"nvidia.com/mig-{self.mig_profile}" if self.mig_profile else "nvidia.com/gpu"


DEFAULT_NODES: tuple[NodeSpec, ...] = (
    NodeSpec("gpu-node-1", gpus=4),
    NodeSpec("gpu-node-2", gpus=4),
    NodeSpec("mig-node-1", gpus=2, mig_profile="3g.40gb"),
    NodeSpec("cpu-node-1", gpus=0, cpu=32, memory="128Gi"),
)


def node_manifest(spec: NodeSpec) -> dict[str, Any]:
    resources: dict[str, str] = {"cpu": str(spec.cpu), "memory": spec.memory, "pods": "110"}
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
    }
    if spec.gpus:
        resources[spec.gpu_resource] = str(spec.gpus)
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": spec.gpu_model.replace(" ", "-"),
            "nvidia.com/gpu.count": str(spec.gpus),
        }
        if spec.mig_profile:
            labels["nvidia.com/mig.strategy"] = "mixed"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {
                KWOK_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                **({GPU_MODEL: spec.gpu_model} if spec.gpus else {}),
            },
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def create_nodes(core: client.CoreV1Api, specs: tuple[NodeSpec, ...]) -> None:
    for spec in specs:
        core.create_node(node_manifest(spec))  # type: ignore[arg-type]  # a dict is accepted as a V1Node


def scale_stages(path: Path) -> Path:
    """`kwok-stages.yaml` with scale-mode heartbeats and parallelism, written to `path`."""
    docs = list(yaml.safe_load_all(STAGES.read_text()))
    for doc in docs:
        if doc.get("kind") == "Stage" and doc["metadata"]["name"] == "node-heartbeat":
            doc["spec"]["delay"] = {"durationMilliseconds": SCALE_HEARTBEAT_MS[0],
                                    "jitterDurationMilliseconds": SCALE_HEARTBEAT_MS[1]}
    docs.append({
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {"podPlayStageParallelism": SCALE_PARALLELISM, "nodePlayStageParallelism": SCALE_PARALLELISM,
                    "nodeLeaseParallelism": SCALE_PARALLELISM},
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def kwok_component(bin_dir: Path, kubeconfig: Path, log: Path, *, scale: bool = False) -> Component:
    """kwok for the sandbox's nodes; `scale`: longer leases and fewer heartbeats (see above)."""
    stages = scale_stages(log.parent / "kwok-scale.yaml") if scale else STAGES
    return Component(
        "kwok",
        [
            str(bin_dir / "kwok"),
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--cidr=10.244.0.0/16",
            "--node-ip=10.0.0.10",
            f"--node-lease-duration-seconds={SCALE_LEASE_SECONDS if scale else LEASE_SECONDS}",
            f"--config={stages}",
            *(["--v=WARN"] if scale else []),  # else three JSON lines per pod and lease renewal
        ],
        log,
    )


def all_ready(core: client.CoreV1Api, names: list[str]) -> bool:
    ready = set()
    for node in core.list_node().items:
        for cond in (node.status.conditions if node.status else None) or []:
            if cond.type == "Ready" and cond.status == "True" and node.metadata:
                ready.add(node.metadata.name)
    return set(names) <= ready
