"""The sandbox's scale-from-zero stand-in speaks as cluster-autoscaler does (devenv.autoscaler).

Aspects covered:
- for an unschedulable GPU pod of its group it posts TriggeredScaleUp in cluster-autoscaler's words
  and source, which the janitor reads as a node coming for that group, then makes the node;
- in its never mode it posts NotTriggerScaleUp with a predicate reason, said twice over minutes,
  which the janitor reads as never;
- pods of other groups, other namespaces' pods, pods not unschedulable or asking no GPU are left alone;
- it keeps cluster-autoscaler's status ConfigMap while it runs, and removes it and its nodes after.
"""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devenv.autoscaler import POOL_LABEL, Mode, ScaleFromZero
from janitor.decide.autoscaling import Said
from janitor.observe import autoscalers


def pod(name: str, group: str, *, gpus: int = 4, reason: str = "Unschedulable") -> client.V1Pod:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace="team-a", uid=f"uid-{name}", resource_version="1"),
        spec=client.V1PodSpec(node_selector={POOL_LABEL: group}, containers=[client.V1Container(
            name="main", resources=client.V1ResourceRequirements(limits=limits))]),
        status=client.V1PodStatus(phase="Pending", conditions=[
            client.V1PodCondition(type="PodScheduled", status="False", reason=reason)]))


class FakeCore:
    def __init__(self, pods: list[client.V1Pod]) -> None:
        self.pods, self.events, self.nodes = pods, [], []
        self.configmaps: dict[tuple[str, str], Any] = {}

    def list_namespaced_pod(self, namespace: str) -> Any:
        return client.V1PodList(items=[p for p in self.pods if p.metadata.namespace == namespace])

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append(body)

    def create_node(self, body: dict[str, Any]) -> None:
        self.nodes.append(body)

    def delete_node(self, name: str) -> None:
        self.nodes = [n for n in self.nodes if n["metadata"]["name"] != name]

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any) -> None:
        if (namespace, name) not in self.configmaps:
            raise ApiException(status=404)
        self.configmaps[(namespace, name)] = body

    def create_namespaced_config_map(self, namespace: str, body: Any) -> None:
        self.configmaps[(namespace, body["metadata"]["name"])] = body

    def delete_namespaced_config_map(self, name: str, namespace: str) -> None:
        self.configmaps.pop((namespace, name))


def test_a_scale_up_is_announced_as_cluster_autoscaler_does_and_the_node_follows() -> None:
    core = FakeCore([pod("train", "gpu-pool"), pod("other", "gpu-other"), pod("cpu", "gpu-pool", gpus=0),
                     pod("gated", "gpu-pool", reason="SchedulingGated")])
    scaler = ScaleFromZero(core, "team-a", "gpu-pool", delay=0)  # type: ignore[arg-type]
    scaler._status("NoActivity")
    assert ("kube-system", "cluster-autoscaler-status") in core.configmaps
    scaler._loop()
    [event] = core.events
    assert event["involvedObject"]["uid"] == "uid-train" and event["source"] == {"component": "cluster-autoscaler"}
    assert event["message"] == "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]"
    found = autoscalers.note(event)
    assert found is not None and found[1].said is Said.COMING and found[1].targets == ("gpu-pool 0->1 (max: 4)",)
    scaler._loop()
    [node] = core.nodes
    assert node["metadata"]["labels"][POOL_LABEL] == "gpu-pool"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert len(core.events) == 1  # said once per pod
    scaler.stop()
    assert core.nodes == [] and core.configmaps == {}


def test_the_never_mode_says_no_group_could_run_it_as_if_said_twice() -> None:
    core = FakeCore([pod("huge", "gpu-none")])
    refuser = ScaleFromZero(core, "team-a", "gpu-none", mode=Mode.NEVER, status_configmap=False)  # type: ignore[arg-type]
    refuser._loop()
    [event] = core.events
    assert event["reason"] == "NotTriggerScaleUp" and event["count"] == 2
    assert event["message"] == "pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector"
    found = autoscalers.note(event)
    assert found is not None and found[1].said is Said.NEVER
    assert found[1].last is not None and found[1].first is not None
    assert found[1].last - found[1].first >= datetime.timedelta(minutes=5)
    assert core.nodes == [] and core.configmaps == {}
