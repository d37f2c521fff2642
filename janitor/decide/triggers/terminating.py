"""Pods stuck Terminating: what holds each one, and whether a force delete may remove it.

A pod whose deletion does not finish is an admin's problem, not its owner's: the janitor names
what holds it (finalizers, its node NotReady or gone, live processes the node agent reports)
and the remedy to consider. Force deleting (grace 0) only removes the API object: if the
processes still run, the GPUs stay taken and a StatefulSet could start a second copy of the pod.
So it is off by default and, when a policy turns it on, proposed only on positive evidence that
nothing of the pod is alive: the Node object is gone, an admin tainted it
`node.kubernetes.io/out-of-service`, or the node agent proves it. The agent's word counts only
when all of this holds (`_agent_proof`): the node is Ready (on a NotReady node the kubelet may be
down with the containers still running); the agent says, as data, that its last complete scan
found a process of some other pod the API lists on that node (else it cannot show it sees any
pod's processes: no hostPID, a wrong --proc-root, a sandboxed runtime; an agent that does not
say proves nothing either); its condition is False (not Unknown: still starting or unable to
see, not True: leftovers there); the agent started before the deletion (a restarted agent did not
watch the pod's processes go) and has completed `--sustain` scans; its last complete scan began
after the deletion and within `MAX_REPORT_AGE` of when the node was read (silence or a stale
report proves nothing; the daemon lists nodes every --node-refresh, and the re-check before a
force delete reads the node again and judges its report against that time); and that scan
reported the pod's UID gone. A process of the pod it saw in any state vetoes. Never for
StatefulSet pods, never with finalizers (grace 0 does not remove them). When the policy
allows force deletes and none is proved, the finding and the remedy say which of these was
missing.
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
from janitor.decide.triggers.spec import NodeScope, Reads, Recheck, Role, TriggerSpec, Usage, duration
from janitor.node_report import PodTaskState, Sight
from janitor.policy.model import Policy, Terminating

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
RULE = "terminating"
# How old the node agent's last complete scan may be, either way of now, and still prove a pod
# gone: four scans at the agent's default --interval of 30 s. An agent scanning less often than
# every two minutes never proves anything.
MAX_REPORT_AGE = datetime.timedelta(minutes=2)


def pods(workload: Workload) -> tuple[PodView, ...]:
    """The pods `terminating` judges: the workload's pods whose deletion has begun."""
    return tuple([p for p in workload.pods if p.state.deleting_since is not None])


def _agent_reports(pod: PodView, node: NodeInfo | None) -> bool:
    """The node agent says (or may be saying) that processes of this pod are stuck there."""
    agent = node.agent if node is not None else None
    if agent is None:
        return False
    return agent.message.state(pod.ref.uid) is PodTaskState.D_STATE or (
        agent.status is True and agent.message.names(pod.ref.uid))


def _gone(pod: PodView, node: NodeInfo | None, nodes_known: bool, read: datetime.datetime) -> bool:
    """Whether the pod's node is known to be gone: missing from a node list read after the pod began
    terminating (a node list older than that may predate the node)."""
    since = pod.state.deleting_since
    return bool(pod.node) and node is None and nodes_known and since is not None and read > since


def _holds(pod: PodView, node: NodeInfo | None, gone: bool) -> tuple[list[Reason], Reason]:
    holds: list[Reason] = []
    remedy: Reason | None = None
    if pod.state.finalizers:
        holds.append(why(Code.HOLD_FINALIZERS, finalizers=pod.state.finalizers))
        remedy = why(Code.REMEDY_FINALIZERS)
    if gone:
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


def _agent_proof(pod: PodView, node: NodeInfo, since: datetime.datetime, read: datetime.datetime) -> Reason:
    """PROOF_AGENT_CLEAR when the node agent proves that nothing of the pod is left on `node`,
    else the first thing missing (each check in the module docstring, in that order)."""
    name = node.name
    if node.ready is not True:
        return why(Code.UNPROVEN_NOT_READY, node=name)
    agent = node.agent
    if agent is None:
        return why(Code.UNPROVEN_NO_AGENT, node=name)
    run = agent.message.agent
    if run is None:
        return why(Code.UNPROVEN_OLD_AGENT, node=name)
    sight = agent.message.sight
    if sight is None:
        return why(Code.UNPROVEN_AGENT_SIGHT_UNKNOWN, node=name)
    if not sight.proven:
        return blind(name, sight)
    if agent.status is True:
        return why(Code.UNPROVEN_AGENT_LEFTOVERS, node=name)
    if agent.status is not False or run.scans < max(run.sustain, 1):
        return why(Code.UNPROVEN_AGENT_STARTING, node=name, scans=run.scans, sustain=run.sustain, started=run.started)
    if run.started >= since:
        return why(Code.UNPROVEN_AGENT_RESTARTED, node=name, started=run.started)
    if run.scanned <= since:
        return why(Code.UNPROVEN_NOT_SCANNED_SINCE, node=name, at=run.scanned)
    if abs(read - run.scanned) > MAX_REPORT_AGE:
        return why(Code.UNPROVEN_STALE, node=name, at=run.scanned, age=abs(read - run.scanned), limit=MAX_REPORT_AGE)
    state = agent.message.state(pod.ref.uid)
    if state is PodTaskState.GONE:
        return why(Code.PROOF_AGENT_CLEAR, node=name, started=run.started, at=run.scanned)
    if state is not None:  # alive (a D state is vetoed before this)
        return why(Code.UNPROVEN_ALIVE, node=name, at=run.scanned)
    return why(Code.UNPROVEN_NOT_REPORTED, node=name, at=run.scanned)


def blind(node: str, sight: Sight) -> Reason:
    """Why an agent that saw no other pod's process proves nothing, with what an admin can check."""
    causes = why(Code.AGENT_BLIND_CAUSES) if sight.listed else why(Code.AGENT_BLIND_ALONE)
    return why(Code.UNPROVEN_AGENT_BLIND, node=node, visible=sight.visible, listed=sight.listed, causes=causes)


PROOFS = frozenset({Code.PROOF_NODE_DELETED, Code.PROOF_OUT_OF_SERVICE, Code.PROOF_AGENT_CLEAR})
_NAMED_BY_HOLDS = frozenset({Code.UNPROVEN_FINALIZERS, Code.UNPROVEN_D_STATE})  # the remedy already answers these


def _proof(pod: PodView, node: NodeInfo | None, since: datetime.datetime, nodes_known: bool,
           read: datetime.datetime) -> Reason:
    """Why a force delete is safe (a code in PROOFS), or why it is not proved. Only positive
    evidence counts: a node missing from a node list that was not read, or was read before the pod
    began terminating, is no evidence that it was deleted. `read`: when the nodes were read (what
    the agent's report says is as of then; the re-check before a force delete reads them again)."""
    if pod.state.finalizers:
        return why(Code.UNPROVEN_FINALIZERS)
    if pod.controller is not None and pod.controller.kind == "StatefulSet":
        return why(Code.UNPROVEN_STATEFULSET)  # a second copy with the same identity could start
    if _agent_reports(pod, node):
        return why(Code.UNPROVEN_D_STATE, node=pod.node)
    if pod.node and node is None and nodes_known:
        if not _gone(pod, node, nodes_known, read):  # listed before the deletion (every --node-refresh)
            return why(Code.UNPROVEN_NODES_EARLIER, node=pod.node, at=read)
        return why(Code.PROOF_NODE_DELETED, node=pod.node)
    if node is None:
        return why(Code.UNPROVEN_NO_NODE, node=pod.node or "(none)")
    if any(key == OUT_OF_SERVICE for key, _, _ in node.taints):
        return why(Code.PROOF_OUT_OF_SERVICE, node=node.name)
    return _agent_proof(pod, node, since, read)


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
                continue  # the pod's own opt-out (the workload's is honoured by governance.governing)
            since = pod.state.deleting_since
            assert since is not None
            overdue = now - since - datetime.timedelta(seconds=pod.state.grace_seconds)
            if overdue < trigger.after:
                continue
            node = by_name.get(pod.node or "")
            read = observation.nodes_at or now
            holds, remedy = _holds(pod, node, _gone(pod, node, observation.nodes_known, read))
            proof = _proof(pod, node, since, observation.nodes_known, read) if trigger.force_delete else None
            force = not_forced = None
            if proof is not None and proof.code in PROOFS:
                force = Action(ActionType.FORCE_DELETE, pod.ref, pod.resource_version, policy.name,
                               TriggerKind.TERMINATING, RULE, "ForceDeletedStuckPod",
                               why(Code.FORCE_DELETED, since=since, holds=tuple(holds), policy=policy.name,
                                   proof=proof))
                remedy = why(Code.REMEDY_FORCE, proof=proof)
            elif proof is not None:
                not_forced = why(Code.NOT_FORCED, why=proof)
                if proof.code not in _NAMED_BY_HOLDS:
                    remedy = why(Code.REMEDY_UNPROVEN, remedy=remedy, not_forced=not_forced)
            stuck = StuckPod(pod.node, since, overdue, tuple(holds), remedy)
            found.append(Finding(TriggerKind.TERMINATING, policy.name, policy.mode, pod.ref, State.FIRES,
                                 why(Code.STUCK_TERMINATING, since=since, overdue=overdue, holds=tuple(holds),
                                     not_forced=not_forced),
                                 source=policy.source, proposal=force, stuck=stuck))
    return found


def _describe(t: object) -> str:
    assert isinstance(t, Terminating)
    return f"terminating: after {duration(t.after)} past grace" + (
        ", force delete on evidence" if t.force_delete else "")


# Pods of DaemonSets too: only their stuck Terminating pods are reported.
TRIGGER = TriggerSpec(TriggerKind.TERMINATING, Role.REPORTS, Usage.NONE, findings, policy=Terminating, pods=pods,
                      reads=lambda _: Reads(nodes=True, ghost_gpus=True), recheck=Recheck(nodes=NodeScope.OF_PODS),
                      daemonsets=True, describe=_describe)
