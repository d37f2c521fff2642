"""A stand-in for cluster-autoscaler with a GPU node group at zero (scale from zero), for the tests.

Labs scale their GPU pools to zero: a GPU pod then fits no node that exists until the autoscaler
adds one. `ScaleFromZero` plays that part as the janitor sees it, on one node group of kwok GPU
nodes, for the Pending GPU pods of one namespace that select the group
(`nodeSelector: {POOL_LABEL: <group>}`):

- `Mode.SCALE_UP`: for each such unschedulable pod it posts the `TriggeredScaleUp` Event
  cluster-autoscaler posts ("pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]", source component
  `cluster-autoscaler`) and, `delay` seconds later, creates a kwok GPU node of the group, which
  the scheduler then binds the pod to;
- `Mode.NEVER`: it posts `NotTriggerScaleUp` with a predicate reason instead ("pod didn't trigger
  scale-up: 1 node(s) didn't match Pod's node affinity/selector"), as the Event looks once
  cluster-autoscaler has said so twice: first `never_since` ago and again now (count 2), since it
  repeats itself every 5 minutes at most.

While it runs it also keeps cluster-autoscaler's status ConfigMap, kube-system/
cluster-autoscaler-status, as cluster-autoscaler does. `stop()` deletes the nodes it made and the
ConfigMap. A thread; start it with `start()` or as a context manager.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devenv.nodes import NodeSpec, node_manifest

logger = logging.getLogger(__name__)

POOL_LABEL = "devenv.janitor.dev/pool"
COMPONENT = "cluster-autoscaler"
STATUS = ("kube-system", "cluster-autoscaler-status")
NEVER_WORDS = "1 node(s) didn't match Pod's node affinity/selector"


class Mode(StrEnum):
    SCALE_UP = "scale-up"
    NEVER = "never"


def _stamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ScaleFromZero:
    core: client.CoreV1Api
    namespace: str  # only this namespace's pods: other tests share the sandbox
    group: str
    mode: Mode = Mode.SCALE_UP
    delay: float = 5.0  # seconds from the scale-up to the node
    gpus: int = 4
    max_size: int = 4
    taints: list[dict[str, str]] = field(default_factory=list)  # on the nodes it makes (keep other pods off)
    never_since: datetime.timedelta = datetime.timedelta(minutes=6)
    status_configmap: bool = True  # keep kube-system/cluster-autoscaler-status (one stand-in of several)
    interval: float = 0.5

    def __post_init__(self) -> None:
        self.nodes: list[str] = []
        self.events: list[dict[str, Any]] = []  # what it posted, for the test to look at
        self._seen: set[str] = set()
        self._due: list[tuple[float, str]] = []  # (monotonic time, node name) to create
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"scale-from-zero {self.group}", daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> ScaleFromZero:
        self._status("NoActivity")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for name in self.nodes:
            try:
                self.core.delete_node(name)
            except ApiException as e:
                if e.status != 404:
                    raise
        if not self.status_configmap:
            return
        try:
            self.core.delete_namespaced_config_map(STATUS[1], STATUS[0])
        except ApiException as e:
            if e.status != 404:
                raise

    def __enter__(self) -> ScaleFromZero:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- the loop ------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._loop()
            except Exception:  # the apiserver going away at the end of a run
                logger.exception("scale-from-zero stand-in: loop failed")

    def _loop(self) -> None:
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            if pod.metadata.uid in self._seen or not self._wanting(pod):
                continue
            self._seen.add(pod.metadata.uid)
            if self.mode is Mode.NEVER:
                self._event(pod, "NotTriggerScaleUp", f"pod didn't trigger scale-up: {NEVER_WORDS}", count=2,
                            first=datetime.datetime.now(datetime.timezone.utc) - self.never_since)
                continue
            size = len(self.nodes) + len(self._due)
            self._event(pod, "TriggeredScaleUp",
                        f"pod triggered scale-up: [{{{self.group} {size}->{size + 1} (max: {self.max_size})}}]")
            self._due.append((time.monotonic() + self.delay, f"{self.group}-{uuid.uuid4().hex[:5]}"))
            self._status("InProgress")
        for due in [d for d in self._due if d[0] <= time.monotonic()]:
            self._due.remove(due)
            self._node(due[1])
            self._status("NoActivity")

    def _wanting(self, pod: Any) -> bool:
        """A Pending pod of this group the scheduler found no node for, asking for GPUs."""
        if pod.status.phase != "Pending" or (pod.spec.node_selector or {}).get(POOL_LABEL) != self.group:
            return False
        scheduled = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
        if not scheduled or scheduled[0].reason != "Unschedulable":
            return False
        return any("nvidia.com/gpu" in ((c.resources.limits or {}) | (c.resources.requests or {}))
                   for c in pod.spec.containers if c.resources)

    # -- what it writes ---------------------------------------------------------------------------------
    def _event(self, pod: Any, reason: str, message: str, *, count: int = 1,
               first: datetime.datetime | None = None) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        body = {
            "metadata": {"name": f"{pod.metadata.name}.{uuid.uuid4().hex[:16]}", "namespace": self.namespace},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": self.namespace,
                               "name": pod.metadata.name, "uid": pod.metadata.uid,
                               "resourceVersion": pod.metadata.resource_version},
            "reason": reason, "message": message, "type": "Normal", "source": {"component": COMPONENT},
            "firstTimestamp": _stamp(first or now), "lastTimestamp": _stamp(now), "count": count,
        }
        self.core.create_namespaced_event(self.namespace, body)
        self.events.append(body)

    def _node(self, name: str) -> None:
        manifest = node_manifest(NodeSpec(name, gpus=self.gpus))
        manifest["metadata"]["labels"][POOL_LABEL] = self.group
        manifest["spec"] = {"taints": self.taints}
        self.core.create_node(manifest)
        self.nodes.append(name)

    def _status(self, scale_up: str) -> None:
        if not self.status_configmap:
            return
        now = _stamp(datetime.datetime.now(datetime.timezone.utc))
        status = (f"time: {now}\nautoscalerStatus: Running\nnodeGroups:\n- name: {self.group}\n"
                  f"  health:\n    status: Healthy\n    nodeCounts:\n      registered:\n"
                  f"        total: {len(self.nodes)}\n        ready: {len(self.nodes)}\n"
                  f"    cloudProviderTarget: {len(self.nodes) + len(self._due)}\n    minSize: 0\n"
                  f"    maxSize: {self.max_size}\n  scaleUp:\n    status: {scale_up}\n")
        body = {"metadata": {"name": STATUS[1], "namespace": STATUS[0]}, "data": {"status": status}}
        try:
            self.core.replace_namespaced_config_map(STATUS[1], STATUS[0], body)
        except ApiException as e:
            if e.status != 404:
                raise
            self.core.create_namespaced_config_map(STATUS[0], body)
