"""Pods stuck Terminating: what holds each one, and whether a force delete may remove it.

A pod whose deletion does not finish is an admin's problem, not its owner's: the janitor names
what holds it (finalizers, its node NotReady or gone, live processes the node agent reports) and
the remedy to consider. Force deleting (grace 0) only removes the API object: if the processes
still run, the GPUs stay taken and a StatefulSet could start a second copy of the pod. So it is
off by default and, when a policy turns it on, allowed only on positive evidence that nothing of
the pod is alive: the Node object is gone, an admin tainted it `node.kubernetes.io/out-of-service`,
or the node agent reported after the deletion that no process of it is stuck. Never on silence
(a NotReady node says nothing), never for StatefulSet pods, never with finalizers (grace 0 does
not remove them), never while the node agent reports the pod's processes.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from janitor.decide.model import Action, ActionType, NamespaceView, NodeInfo, ObjectRef, PodView
from janitor.policy.model import Policy, Terminating

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
RULE = "terminating"


@dataclass(frozen=True, slots=True)
class StuckPod:
    pod: ObjectRef
    node: str | None
    policy: str
    since: datetime.datetime  # deletionTimestamp
    overdue: datetime.timedelta  # past deletionTimestamp + grace
    holds: tuple[str, ...]  # what keeps it, in words
    remedy: str  # what an admin should consider
    force: Action | None = None  # the force delete, where the policy allows it and the evidence holds


def _holds(pod: PodView, node: NodeInfo | None, nodes_known: bool) -> tuple[list[str], str]:
    st = pod.state
    holds: list[str] = []
    remedy = ""
    if st.finalizers:
        holds.append(f"finalizers {', '.join(st.finalizers)}")
        remedy = "check the controllers of its finalizers; remove one only if its controller is gone"
    if pod.node and node is None and nodes_known:
        holds.append(f"its node {pod.node} is gone")
    elif node is not None and node.ready is False:
        holds.append(f"its node {node.name} is NotReady")
        remedy = remedy or (f"if {node.name} is down for good: taint it {OUT_OF_SERVICE}=nodeshutdown:NoExecute, "
                            "or delete the Node")
    if node is not None and node.agent and node.agent[0] == "True" and pod.ref.uid in node.agent[1]:
        holds.append(f"processes stuck in D state on {node.name} (node agent: {node.agent[1][:300]})")
        remedy = f"drain and reboot {node.name}: a process in D state cannot be killed"
    if not holds:
        holds.append("nothing the API shows (kubelet slow or stuck?)")
        remedy = remedy or (f"look at the kubelet on {pod.node}" if pod.node else "look at the pod's events")
    return holds, remedy


def _force_evidence(pod: PodView, node: NodeInfo | None, since: datetime.datetime, nodes_known: bool) -> str | None:
    """Why a force delete is safe, or None. Only positive evidence counts: a node missing from an
    empty node list (nothing read) is no evidence that it was deleted."""
    if pod.state.finalizers:
        return None
    if pod.controller is not None and pod.controller.kind == "StatefulSet":
        return None  # a second copy with the same identity could start while the first still runs
    if node is not None and node.agent and node.agent[0] == "True" and pod.ref.uid in node.agent[1]:
        return None
    if pod.node and node is None and nodes_known:
        return f"its node {pod.node} was deleted"
    if node is not None and any(key == OUT_OF_SERVICE for key, _, _ in node.taints):
        return f"an admin tainted {node.name} {OUT_OF_SERVICE}"
    if node is not None and node.agent and node.agent[0] == "False" and node.agent[2] and node.agent[2] > since:
        return (f"the node agent on {node.name} reported at {node.agent[2]:%Y-%m-%dT%H:%M:%SZ}, after the "
                "deletion, that no process of a deleted pod is stuck")
    return None


def stuck_pods(pods: Sequence[PodView], nodes: Sequence[NodeInfo], namespaces: Mapping[str, NamespaceView],
               policies: Sequence[Policy], now: datetime.datetime,
               protected_namespaces: Sequence[str] = ()) -> list[StuckPod]:
    by_name = {n.name: n for n in nodes}
    found: list[StuckPod] = []
    for pod in pods:
        since = pod.state.deleting_since
        namespace = pod.ref.namespace or ""
        if since is None or namespace in protected_namespaces:
            continue
        ns_view = namespaces.get(namespace, NamespaceView(namespace))
        policy = next((p for p in policies if p.trigger(Terminating) is not None and p.match.matches(
            namespace=namespace, namespace_labels=ns_view.labels, kind=pod.controller.kind if pod.controller else "Pod",
            pod_labels=pod.labels)), None)
        if policy is None:
            continue
        trigger = policy.trigger(Terminating)
        assert trigger is not None
        overdue = now - since - datetime.timedelta(seconds=pod.state.grace_seconds)
        if overdue < trigger.after:
            continue
        node = by_name.get(pod.node or "")
        holds, remedy = _holds(pod, node, bool(nodes))
        force = None
        evidence = _force_evidence(pod, node, since, bool(nodes)) if trigger.force_delete else None
        if evidence:
            force = Action(ActionType.FORCE_DELETE, pod.ref, pod.resource_version, RULE, "ForceDeletedStuckPod",
                           f"Terminating since {since:%Y-%m-%dT%H:%M:%SZ} ({', '.join(holds)}); force deleted "
                           f"(grace 0) by policy {policy.name} because {evidence}", {"policy": policy.name})
            remedy = f"force delete: {evidence}"
        found.append(StuckPod(pod.ref, pod.node, policy.name, since, overdue, tuple(holds), remedy, force))
    return sorted(found, key=lambda s: (s.node or "", str(s.pod)))
