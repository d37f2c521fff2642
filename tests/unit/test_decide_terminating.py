"""Pods stuck Terminating: what holds them, and when a force delete is allowed.

Aspects covered:
- only past deletion + grace + `after`, and no force delete without the policy's forceDelete;
- the holds named: finalizers, node NotReady or gone, processes the node agent reports;
- force delete only on positive evidence (node deleted, out-of-service taint, the agent's report
  that the pod is gone, after the deletion, on a Ready node), never on silence (NotReady, an agent
  Unknown or not heard since), never for StatefulSet pods or with finalizers, never while the
  agent's condition names the pod (every case of the agent's proof: test_decide_force_proof.py);
- the agent's condition message is data: a pod it lists, a list cut short (every pod on that
  node may be in it) or a message of an older agent without the list vetoes force deletes on that
  node only; a complete list that names other pods does not;
- a node list that was not read is no evidence that a node was deleted;
- through a cycle's plan: force deletes carry their policy and go through the rails; a policy
  in shadow mode never force deletes; policies match by the workload's kind, or by the pod's
  controller's kind when the owner chain cannot be read; a stuck pod is never marked, and a
  DaemonSet's stuck pod is reported like any other;
- the admins' report: sections, a key that ignores times that tick on, ghost GPUs beside the
  node agent's leftovers.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence

import pytest
from factories import NOW, obj

from janitor.decide import selection
from janitor.decide.admin_report import admin_report
from janitor.decide.evidence import GhostGpu
from janitor.decide.model import (
    ActionType,
    AgentCondition,
    Finding,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodState,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.plan import PlanSettings, decide, plan
from janitor.decide.rails import HoldReason, Rails
from janitor.decide.triggers import terminating
from janitor.decide.triggers.terminating import OUT_OF_SERVICE
from janitor.node_report import AgentRun, ConditionMessage, PodTaskState, Sight, decode_condition
from janitor.policy.model import Match, Mode, Namespaces, Policy, Terminating

M = datetime.timedelta(minutes=1)
DELETED = NOW - 60 * M
STUCK_UID = "0f1e2d3c-0000-4000-8000-000000000001"
OTHER_UID = "0f1e2d3c-0000-4000-8000-000000000002"
SHUT_DOWN = ((OUT_OF_SERVICE, "nodeshutdown", "NoExecute"),)


def pod(node: str = "n1", finalizers: Sequence[str] = (), controller: str | None = None, uid: str | None = None,
        name: str = "p", owner: ObjectView | None = None) -> PodView:
    if owner is not None:
        ref: OwnerRef | None = OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid)
    else:
        ref = OwnerRef(controller, "apps/v1", "x", "u") if controller else None
    return PodView(ObjectRef("Pod", "v1", "team-a", name, uid or str(uuid.uuid4())), "7", {}, ref, node, "Running",
                   None, 0, deleting=True,
                   state=PodState(finalizers=tuple(finalizers), deleting_since=DELETED, grace_seconds=30))


def policy(force: bool = True, *, mode: Mode = Mode.ENFORCE, name: str = "stuck", kinds: tuple[str, ...] = (),
           after: datetime.timedelta = 30 * M) -> Policy:
    return Policy(name, (Terminating(after=after, force_delete=force),),
                  match=Match(namespaces=Namespaces(("*",)), kinds=kinds), mode=mode)


def agent(status: bool | None, summary: str = "", pods: Sequence[str] = (), *, complete: bool = True,
          at: datetime.datetime | None = NOW, gone: Sequence[str] = ()) -> AgentCondition:
    """The agent's condition: `pods` stuck in D, `gone` reported gone, by an agent running since
    well before the deletion, seeing other pods' processes, whose last complete scan began `at`
    (None: no run data at all)."""
    states = {uid: PodTaskState.D_STATE for uid in pods} | {uid: PodTaskState.GONE for uid in gone}
    run = AgentRun(DELETED - 60 * M, 10, 3, at) if at is not None else None
    return AgentCondition(status, ConditionMessage(summary, states, complete, run, Sight(visible=5, listed=6)))


def observe(pods: Sequence[PodView], nodes: Sequence[NodeInfo] = (), *, nodes_known: bool = True,
            objects: Sequence[ObjectView] = (), at: datetime.datetime = NOW) -> Observation:
    return Observation(at, objects=tuple(objects), pods=tuple(pods), namespaces={"team-a": NamespaceView("team-a")},
                       nodes=tuple(nodes), nodes_known=nodes_known)


def stuck(pods: Sequence[PodView], nodes: Sequence[NodeInfo] = (), *, nodes_known: bool = True,
          the_policy: Policy | None = None, now: datetime.datetime = NOW) -> list[Finding]:
    observation = observe(pods, nodes, nodes_known=nodes_known, at=now)
    return terminating.findings(selection.workloads(observation, Rails()), observation, the_policy or policy(), now)


def holds(finding: Finding) -> list[str]:
    assert finding.stuck is not None
    return [str(h) for h in finding.stuck.holds]


@pytest.mark.parametrize(("the_pod", "nodes", "force", "held_by"), [
    pytest.param(pod(), [NodeInfo("n2")], True, "its node n1 is gone", id="node-deleted"),
    pytest.param(pod(), [NodeInfo("n1", taints=SHUT_DOWN)], True, "nothing the API shows", id="out-of-service"),
    pytest.param(pod(uid=STUCK_UID), [NodeInfo("n1", ready=True, agent=agent(
        False, "no D-state processes of deleted pods", gone=[STUCK_UID]))], True, "nothing the API shows",
                 id="agent-says-gone"),
    pytest.param(pod(uid=STUCK_UID), [NodeInfo("n1", ready=True, agent=agent(False, "no D-state processes"))], False,
                 "nothing the API shows", id="agent-clear-but-silent-on-the-pod"),
    pytest.param(pod(), [NodeInfo("n1", agent=agent(False, at=DELETED - M))], False, "nothing",
                 id="agent-clear-before-the-deletion"),
    pytest.param(pod(), [NodeInfo("n1", agent=agent(False, at=None))], False, "nothing", id="agent-never-heard"),
    pytest.param(pod(), [NodeInfo("n1", agent=agent(None))], False, "nothing", id="agent-unknown"),
    pytest.param(pod(), [NodeInfo("n1", ready=False)], False, "its node n1 is NotReady", id="silence"),
    pytest.param(pod(controller="StatefulSet"), [NodeInfo("n2")], False, "its node n1 is gone", id="statefulset"),
    pytest.param(pod(finalizers=["example.com/x"]), [NodeInfo("n2")], False, "finalizers example.com/x",
                 id="finalizer"),
    pytest.param(pod(uid=STUCK_UID), [NodeInfo("n1", taints=SHUT_DOWN, agent=agent(True, "1 tasks", [STUCK_UID]))],
                 False, "processes stuck in D state on n1 (node agent: 1 tasks)", id="agent-names-it"),
    pytest.param(pod(uid=STUCK_UID), [NodeInfo("n1", taints=SHUT_DOWN, agent=agent(True, "1 tasks", [OTHER_UID]))],
                 True, "nothing the API shows", id="agent-names-another-pod"),
    pytest.param(pod(uid=STUCK_UID), [NodeInfo("n1", taints=SHUT_DOWN,
                                               agent=agent(True, "90 tasks", [OTHER_UID], complete=False))],
                 False, "processes stuck in D state on n1 (node agent: 90 tasks)", id="agent-list-cut-short"),
    pytest.param(pod(uid=STUCK_UID), [NodeInfo("n1", taints=SHUT_DOWN, agent=AgentCondition(
        True, decode_condition("2 tasks in D state from 1 deleted pods")))],
                 False, "processes stuck in D state", id="older-agent-without-the-list"),
])
def test_force_only_on_positive_evidence(the_pod: PodView, nodes: list[NodeInfo], force: bool, held_by: str) -> None:
    [found] = stuck([the_pod], nodes)
    assert found.trigger is TriggerKind.TERMINATING and found.state is State.FIRES
    assert found.subject == the_pod.ref and found.policy == "stuck"
    assert (found.proposal is not None) is force
    assert any(held_by in h for h in holds(found)), holds(found)
    assert found.stuck is not None and found.stuck.remedy is not None
    if force:
        assert found.proposal is not None
        assert found.proposal.type is ActionType.FORCE_DELETE and found.proposal.resource_version == "7"
        assert found.proposal.target == the_pod.ref and found.proposal.policy == "stuck"
        assert str(found.stuck.remedy).startswith("force delete: ")
    else:
        assert not str(found.stuck.remedy).startswith("force delete")


def test_the_proof_is_named_in_the_force_delete() -> None:
    [gone] = stuck([pod()], [NodeInfo("n2")])
    assert gone.proposal is not None and "because its node n1 was deleted" in str(gone.proposal.why)
    [tainted] = stuck([pod()], [NodeInfo("n1", taints=SHUT_DOWN)])
    assert tainted.proposal is not None
    assert "an admin tainted n1 node.kubernetes.io/out-of-service" in str(tainted.proposal.why)
    [clear] = stuck([pod(uid=STUCK_UID)], [NodeInfo("n1", ready=True, agent=agent(False, gone=[STUCK_UID]))])
    assert clear.proposal is not None
    assert ("because the node agent on n1 (running since 2026-11-23T10:00:00Z) found no process of it in its scan at "
            "2026-11-23T12:00:00Z, after the deletion, on a Ready node") in str(clear.proposal.why)


def test_a_pod_the_agent_reports_is_to_be_rebooted_away() -> None:
    [found] = stuck([pod(uid=STUCK_UID)], [NodeInfo("n1", ready=False, agent=agent(True, "1 tasks", [STUCK_UID]))])
    assert holds(found) == ["its node n1 is NotReady", "processes stuck in D state on n1 (node agent: 1 tasks)"]
    assert found.stuck is not None
    assert str(found.stuck.remedy) == "drain and reboot n1: a process in D state cannot be killed"


def test_not_before_grace_plus_after_and_not_without_force_delete() -> None:
    assert stuck([pod()], [NodeInfo("n2")], the_policy=policy(after=120 * M)) == []
    # 30 minutes after the deletion it is 29m30s past its 30 s grace: short of `after`
    assert stuck([pod()], [NodeInfo("n2")], now=DELETED + 30 * M) == []
    [found] = stuck([pod()], [NodeInfo("n2")], now=DELETED + 31 * M)
    assert found.stuck is not None and found.stuck.overdue == 30 * M + datetime.timedelta(seconds=30)
    [kept] = stuck([pod()], [NodeInfo("n2")], the_policy=policy(force=False))
    assert kept.proposal is None and "its node n1 is gone" in holds(kept)


def test_a_pod_not_being_deleted_is_not_judged() -> None:
    running = PodView(ObjectRef("Pod", "v1", "team-a", "p", str(uuid.uuid4())), "7", {}, None, "n1", "Running",
                      None, 0)
    assert stuck([running], [NodeInfo("n2")]) == []


def test_a_node_list_not_read_is_no_evidence_that_the_node_was_deleted() -> None:
    [unread] = stuck([pod()], [], nodes_known=False)
    assert unread.proposal is None  # nothing read about nodes: the pod's node may well be there
    assert not any("gone" in h for h in holds(unread))
    [other] = stuck([pod()], [NodeInfo("n2")])
    assert other.proposal is not None and "its node n1 was deleted" in str(other.proposal.why)


# -- through a cycle's plan ---------------------------------------------------------------------------------


def forced(observation: Observation, policies: Sequence[Policy]) -> dict[str, str]:
    """The pods a cycle force deletes, by name, with the policy that decided it."""
    cycle = plan(observation, policies, SafetyLedger(), NOW)
    return {a.target.name: a.policy for a in cycle.actions if a.type is ActionType.FORCE_DELETE}


@pytest.mark.parametrize("complete", [pytest.param(True, id="complete-list"),
                                      pytest.param(False, id="list-cut-short")])
def test_a_condition_message_cut_short_vetoes_every_force_delete_on_its_node(complete: bool) -> None:
    named = pod(name="named", uid=STUCK_UID)
    beside = [pod(name="beside-1"), pod(name="beside-2")]
    elsewhere = pod(node="n9", name="elsewhere")  # its node was deleted
    n1 = NodeInfo("n1", taints=SHUT_DOWN, agent=agent(True, "many tasks in D state", [STUCK_UID], complete=complete))
    observation = observe([named, *beside, elsewhere], [n1])
    expected = {"beside-1": "stuck", "beside-2": "stuck"} if complete else {}
    assert forced(observation, [policy()]) == {**expected, "elsewhere": "stuck"}
    cycle = plan(observation, [policy()], SafetyLedger(), NOW)
    on_n1 = [f for f in cycle.findings if f.stuck is not None and f.stuck.node == "n1"]
    d_state = {f.subject.name for f in on_n1 if any("processes stuck in D state" in h for h in holds(f))}
    assert d_state == ({"named"} if complete else {"named", "beside-1", "beside-2"})


def test_a_shadow_policy_never_force_deletes() -> None:
    shadow = policy(mode=Mode.SHADOW)
    observation = observe([pod(name="a"), pod(name="b", node="n2")], [NodeInfo("n2", taints=SHUT_DOWN)])
    cycle = plan(observation, [shadow], SafetyLedger(), NOW)
    assert not any(a.type is ActionType.FORCE_DELETE for a in cycle.actions)
    assert not any(h.action.type is ActionType.FORCE_DELETE for h in cycle.held)
    assert not any(a.type is ActionType.FORCE_DELETE for a in decide(observation, [shadow], NOW).due)
    # still found and reported to the admins
    assert {f.subject.name for f in cycle.findings if f.trigger is TriggerKind.TERMINATING} == {"a", "b"}
    assert "Pods stuck Terminating" in dict(cycle.admin_report.sections)
    # the same cluster under an enforcing policy
    assert forced(observation, [policy()]) == {"a": "stuck", "b": "stuck"}


def test_a_force_delete_goes_through_the_rails() -> None:
    observation = observe([pod()], [NodeInfo("n2")])
    cycle = plan(observation, [policy()], SafetyLedger(), NOW, settings=PlanSettings(rails=Rails(dry_run=True)))
    assert cycle.actions == ()
    [held] = cycle.held
    assert held.reason is HoldReason.DRY_RUN and held.action.type is ActionType.FORCE_DELETE
    assert held.action.trigger is TriggerKind.TERMINATING and held.action.policy == "stuck"
    assert held.action.rule == "terminating"


def test_a_stuck_pod_is_never_marked_or_warned_about() -> None:
    job = obj("train", kind="Job")
    observation = observe([pod(owner=job)], [NodeInfo("n2")], objects=[job])
    cycle = plan(observation, [policy()], SafetyLedger(), NOW)
    assert cycle.changes == ()
    assert [a.target.name for a in cycle.actions if a.type is ActionType.FORCE_DELETE] == ["p"]


def owned(kind: str, *, read: bool) -> tuple[PodView, list[ObjectView]]:
    """A stuck pod under a `kind` controller, the controller read or not (deleted already)."""
    if kind == "Deployment":
        deployment = obj("web", kind="Deployment")
        replica = obj("web-5d4f", kind="ReplicaSet", owner=deployment)
        return pod(owner=replica), [deployment, replica] if read else []
    if kind == "Pod":
        return pod(), []
    owner = obj("x", kind=kind)
    return pod(owner=owner), [owner] if read else []


@pytest.mark.parametrize(("kind", "read", "kinds", "governed"), [
    pytest.param("Pod", True, ("Pod",), True, id="bare-pod"),
    pytest.param("Job", True, ("Job",), True, id="job-read"),
    pytest.param("Job", False, ("Job",), True, id="job-gone-by-the-pods-controller"),
    pytest.param("Job", False, ("Pod",), False, id="job-gone-is-no-bare-pod"),
    pytest.param("Deployment", True, ("Deployment",), True, id="deployment-by-the-top-of-the-chain"),
    pytest.param("Deployment", True, ("ReplicaSet",), False, id="deployment-not-by-its-replicaset"),
    pytest.param("Deployment", False, ("ReplicaSet",), True, id="replicaset-gone-by-the-pods-controller"),
])
def test_policies_match_stuck_pods_by_the_workloads_kind(kind: str, read: bool, kinds: tuple[str, ...],
                                                         governed: bool) -> None:
    stuck_pod, objects = owned(kind, read=read)
    narrow = policy(name="narrow", kinds=kinds)
    cycle = plan(observe([stuck_pod], [NodeInfo("n2")], objects=objects), [narrow], SafetyLedger(), NOW)
    found = [f for f in cycle.findings if f.trigger is TriggerKind.TERMINATING]
    assert [f.policy for f in found] == (["narrow"] if governed else [])
    actions = {a.target.name: a.policy for a in cycle.actions if a.type is ActionType.FORCE_DELETE}
    assert actions == ({"p": "narrow"} if governed else {})


def test_a_stuck_daemonset_pod_is_reported_to_the_admins() -> None:
    # One pod per node by design keeps DaemonSet pods from being reclaimed, not from being stuck:
    # a driver or exporter pod held by a D-state process is exactly what admins must hear about.
    daemonset = obj("gpu-exporter", kind="DaemonSet")
    exporter = pod(owner=daemonset, uid=STUCK_UID, name="gpu-exporter-x")
    n1 = NodeInfo("n1", agent=agent(True, "1 tasks in D state", [STUCK_UID]))
    cycle = plan(observe([exporter], [n1], objects=[daemonset]), [policy()], SafetyLedger(), NOW)
    [found] = [f for f in cycle.findings if f.trigger is TriggerKind.TERMINATING]
    assert found.subject == exporter.ref and found.proposal is None
    assert "processes stuck in D state on n1 (node agent: 1 tasks in D state)" in holds(found)
    [line] = dict(cycle.admin_report.sections)["Pods stuck Terminating"]
    assert line.startswith(f"n1: {exporter.ref} Terminating since ")


# -- the admins' report -------------------------------------------------------------------------------------


def silent_gpu_pod() -> PodView:
    return PodView(ObjectRef("Pod", "v1", "team-a", "nb", str(uuid.uuid4())), "1", {}, None, "n2", "Running",
                   NOW - 60 * M, 1)


def test_admin_report_sections_and_stable_key() -> None:
    node = NodeInfo("n1", agent=agent(True, "1 tasks in D state", [OTHER_UID]))
    held = pod(finalizers=["f"], uid=STUCK_UID)
    silent = silent_gpu_pod()
    report = admin_report(stuck([held], [node]), [node], [silent], None)
    assert [title for title, _ in report.sections] == [
        "Pods stuck Terminating", "Nodes with processes of deleted pods stuck in D state",
        "GPU pods without GPU telemetry (never judged idle)"]
    sections = dict(report.sections)
    [line] = sections["Pods stuck Terminating"]
    assert line.startswith(f"n1: {held.ref} Terminating since 2026-11-23 11:00Z, 60 min past its grace; ")
    assert "held by finalizers f. Remedy: check the controllers of its finalizers" in line
    assert sections["Nodes with processes of deleted pods stuck in D state"] == (
        "n1: 1 tasks in D state. Remedy: drain and reboot n1",)
    assert sections["GPU pods without GPU telemetry (never judged idle)"] == ("team-a/nb on n2",)

    later = admin_report(stuck([held], [node], now=NOW + 5 * M), [node], [silent], None)
    assert later.key == report.key and later.sections != report.sections
    resolved = admin_report([], [node], [silent], None)
    assert resolved.key != report.key
    assert admin_report([], [], [], None).empty


def test_ghost_gpus_are_put_beside_the_node_agents_leftovers() -> None:
    node = NodeInfo("n1", agent=agent(True, "1 tasks in D state from 1 deleted pods", [OTHER_UID]))
    report = admin_report([], [node], [], None, ghost_gpus=[GhostGpu("n1", "3", 30000.0), GhostGpu("n2", "0", 512.0)])
    [title, lines] = report.sections[-1]
    assert title == "Ghost GPUs (memory in use, no pod)"
    assert lines[0] == ("n1 GPU 3: 30000 MiB in use, no pod on it; the node agent reports processes of deleted pods "
                        "stuck there: 1 tasks in D state from 1 deleted pods")
    assert lines[1] == "n2 GPU 0: 512 MiB in use, no pod on it"


def test_a_clear_agent_is_not_in_the_report() -> None:
    node = NodeInfo("n1", agent=agent(False, "no D-state processes of deleted pods"))
    report = admin_report([], [node], [], None, ghost_gpus=[GhostGpu("n1", "3", 100.0)])
    assert [title for title, _ in report.sections] == ["Ghost GPUs (memory in use, no pod)"]
    assert report.sections[0][1] == ("n1 GPU 3: 100 MiB in use, no pod on it",)
