"""What the stuck triggers read of pods and nodes, from the API's own JSON.

Aspects covered:
- each container's status is kept on its own (restarts are never summed across containers), with
  its state now, its last run's start and end and its exit in words; init containers, native
  sidecars (init containers with restartPolicy Always) and app containers are told apart;
- a node's capacity and its cordon (spec.unschedulable) are read beside what is allocatable.
"""

from __future__ import annotations

import datetime

from janitor.decide.model import ContainerKind, ContainerStatus
from janitor.observe.views import node_info, pod_state

UTC = datetime.timezone.utc


def at(minute: int) -> datetime.datetime:
    return datetime.datetime(2026, 11, 23, 12, minute, tzinfo=UTC)


SPEC = {
    "initContainers": [{"name": "fetch"}, {"name": "istio-proxy", "restartPolicy": "Always"}],
    "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
}
STATUS = {
    "phase": "Running",
    "initContainerStatuses": [
        {"name": "fetch", "restartCount": 0,
         "state": {"terminated": {"reason": "Completed", "exitCode": 0, "finishedAt": "2026-11-23T12:01:00Z"}}},
        {"name": "istio-proxy", "restartCount": 9,
         "state": {"running": {"startedAt": "2026-11-23T12:09:00Z"}},
         "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "startedAt": "2026-11-23T12:05:00Z",
                                      "finishedAt": "2026-11-23T12:08:00Z"}}},
    ],
    "containerStatuses": [
        {"name": "train", "restartCount": 2,
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
         "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "startedAt": "2026-11-23T12:02:00Z",
                                      "finishedAt": "2026-11-23T12:07:00Z"}}},
    ],
}


def test_each_container_is_read_on_its_own() -> None:
    state = pod_state({"name": "p"}, SPEC, STATUS)
    assert state.containers == (
        ContainerStatus("fetch", ContainerKind.INIT, 0, "terminated", "Completed", at(1), 0),
        ContainerStatus("istio-proxy", ContainerKind.SIDECAR, 9, "running", "", at(9), None, "Error, exit code 1",
                        at(5), at(8)),
        ContainerStatus("train", ContainerKind.APP, 2, "waiting", "CrashLoopBackOff", None, None,
                        "OOMKilled, exit code 137", at(2), at(7)),
    )
    assert state.waiting == (("train", "CrashLoopBackOff", "back-off 40s"),)


def test_a_pod_the_kubelet_has_not_reported_on_has_no_container_statuses() -> None:
    assert pod_state({"name": "p"}, SPEC, {"phase": "Pending"}).containers == ()


def test_a_nodes_capacity_and_cordon_are_read() -> None:
    node = node_info({"metadata": {"name": "gpu-node-9"}, "spec": {"unschedulable": True},
                      "status": {"capacity": {"nvidia.com/gpu": "4", "cpu": "64"},
                                 "allocatable": {"nvidia.com/gpu": "0", "cpu": "63500m"}}})
    assert node.unschedulable and node.capacity == {"nvidia.com/gpu": 4, "cpu": 64}
    assert node.allocatable == {"nvidia.com/gpu": 0, "cpu": 63.5}
    assert not node_info({"metadata": {"name": "n"}}).unschedulable
