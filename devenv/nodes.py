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


def node_manifest(spec: NodeSpec) -> dict:
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
        core.create_node(node_manifest(spec))


def kwok_component(bin_dir: Path, kubeconfig: Path, log: Path) -> Component:
    return Component(
        "kwok",
        [
            str(bin_dir / "kwok"),
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--cidr=10.244.0.0/16",
            "--node-ip=10.0.0.10",
            "--node-lease-duration-seconds=40",
            f"--config={STAGES}",
        ],
        log,
    )


def all_ready(core: client.CoreV1Api, names: list[str]) -> bool:
    ready = set()
    for node in core.list_node().items:
        for cond in node.status.conditions or []:
            if cond.type == "Ready" and cond.status == "True":
                ready.add(node.metadata.name)
    return set(names) <= ready
