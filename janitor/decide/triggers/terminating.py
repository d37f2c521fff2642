"""Pods stuck Terminating: what holds each one, and whether a force delete may remove it.

A pod whose deletion does not finish is an admin's problem, not its owner's: the janitor names
what holds it (finalizers, its node NotReady or gone, live processes the node agent reports) and
the remedy to consider. Force deleting (grace 0) only removes the API object: if the processes
still run, the GPUs stay taken and a StatefulSet could start a second copy of the pod. So it is
off by default and, when a policy turns it on, proposed only on positive evidence that nothing of
the pod is alive: the Node object is gone, an admin tainted it `node.kubernetes.io/out-of-service`,
or the node agent reported after the deletion that no process of a deleted pod is stuck there.
Never on silence (a NotReady node says nothing), never for StatefulSet pods, never with
finalizers (grace 0 does not remove them), never while the node agent may be reporting the pod.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from janitor.decide import selection
from janitor.decide.model import (
    Action,
    ActionType,
    Finding,
    NodeInfo,
    Observation,
    PodView,
    State,
    StuckPod,
    TriggerKind,
)
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import Workload
from janitor.policy.model import Policy, Terminating

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
RULE = "terminating"


def pods(workload: Workload) -> tuple[PodView, ...]:
    """The pods `terminating` judges: the workload's pods whose deletion has begun."""
    return tuple(p for p in workload.pods if p.state.deleting_since is not None)


def _agent_reports(pod: PodView, node: NodeInfo | None) -> bool:
    """The node agent says (or may be saying) that processes of this pod are stuck there."""
    agent = node.agent if node is not None else None
    return agent is not None and agent.status is True and agent.message.names(pod.ref.uid)


def _holds(pod: PodView, node: NodeInfo | None, nodes_known: bool) -> tuple[list[Reason], Reason]:
    holds: list[Reason] = []
    remedy: Reason | None = None
    if pod.state.finalizers:
        holds.append(why(Code.HOLD_FINALIZERS, finalizers=pod.state.finalizers))
        remedy = why(Code.REMEDY_FINALIZERS)
    if pod.node and node is None and nodes_known:
        holds.append(why(Code.HOLD_NODE_GONE, node=pod.node))
    elif node is not None and node.ready is False:
        holds.append(why(Code.HOLD_NODE_NOT_READY, node=node.name))
        remedy = remedy or why(Code.REMEDY_OUT_OF_SERVICE, node=node.name)
    if node is not None and node.agent is not None and _agent_reports(pod, node):
        holds.append(why(Code.HOLD_D_STATE, node=node.name, summary=node.agent.message.summary[:300]))
        remedy = why(Code.REMEDY_REBOOT, node=node.name)
    if not holds:
        holds.append(why(Code.HOLD_NOTHING))
        remedy = remedy or (why(Code.REMEDY_KUBELET, node=pod.node) if pod.node else why(Code.REMEDY_EVENTS))
    return holds, remedy or why(Code.REMEDY_EVENTS)


def _proof(pod: PodView, node: NodeInfo | None, since: datetime.datetime, nodes_known: bool) -> Reason | None:
    """Why a force delete is safe, or None. Only positive evidence counts: a node missing from a
    node list that was not read is no evidence that it was deleted."""
    if pod.state.finalizers:
        return None
    if pod.controller is not None and pod.controller.kind == "StatefulSet":
        return None  # a second copy with the same identity could start while the first still runs
    if _agent_reports(pod, node):
        return None
    if pod.node and node is None and nodes_known:
        return why(Code.PROOF_NODE_DELETED, node=pod.node)
    if node is not None and any(key == OUT_OF_SERVICE for key, _, _ in node.taints):
        return why(Code.PROOF_OUT_OF_SERVICE, node=node.name)
    agent = node.agent if node is not None else None
    if node is not None and agent is not None and agent.status is False and agent.heartbeat and agent.heartbeat > since:
        return why(Code.PROOF_AGENT_CLEAR, node=node.name, at=agent.heartbeat)
    return None


def findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
             now: datetime.datetime) -> list[Finding]:
    """One finding per pod Terminating longer than its grace plus the policy's `after`."""
    trigger = policy.trigger(Terminating)
    assert trigger is not None
    by_name = {n.name: n for n in observation.nodes}
    found = []
    for workload in workloads:
        for pod in pods(workload):
            if policy.lifecycle.honour_opt_out and selection.opted_out(pod.annotations, workload.namespace):
                continue  # the pod's own opt-out (the workload's is honoured by selection.governing)
            since = pod.state.deleting_since
            assert since is not None
            overdue = now - since - datetime.timedelta(seconds=pod.state.grace_seconds)
            if overdue < trigger.after:
                continue
            node = by_name.get(pod.node or "")
            holds, remedy = _holds(pod, node, observation.nodes_known)
            proof = _proof(pod, node, since, observation.nodes_known) if trigger.force_delete else None
            force = None
            if proof is not None:
                force = Action(ActionType.FORCE_DELETE, pod.ref, pod.resource_version, policy.name,
                               TriggerKind.TERMINATING, RULE, "ForceDeletedStuckPod",
                               why(Code.FORCE_DELETED, since=since, holds=tuple(holds), policy=policy.name,
                                   proof=proof))
                remedy = why(Code.REMEDY_FORCE, proof=proof)
            stuck = StuckPod(pod.node, since, overdue, tuple(holds), remedy)
            found.append(Finding(TriggerKind.TERMINATING, policy.name, policy.mode, pod.ref, State.FIRES,
                                 why(Code.STUCK_TERMINATING, since=since, overdue=overdue, holds=tuple(holds)),
                                 source=policy.source, proposal=force, stuck=stuck))
    return found
