"""What a force delete needs from the node agent, and the words when it is not there.

Aspects covered:
- the agent proves a pod gone only when all of it holds: the node Ready; the condition False; an
  agent with per-pod data that says it saw another pod's process in its last scan (not one that
  sees none, whatever its condition says, nor one that does not say), started before the
  deletion, past its `sustain` scans; its last complete scan begun after the deletion and within
  MAX_REPORT_AGE of when the node was read (either way: now, or the start of the daemon's last
  node list); the pod's UID reported gone. Each missing piece, alone, stops the force delete;
- a node missing from a node list begun before the pod's deletion proves nothing (the node may be
  newer than the list), and is not said to be gone;
- a process of the pod the agent saw, alive in any state or stuck in D, vetoes;
- the finding (what `janitor explain` shows) and the admin report's remedy say, in words, which
  piece was missing; the proof is named in the force delete;
- an agent that cannot see other pods' processes is named with what to check, in explain, in the
  pod's remedy and in a section of its own in the admin report;
- a policy without forceDelete says nothing about proofs.
"""

from __future__ import annotations

import datetime
from dataclasses import replace

import pytest
from factories import NOW

from janitor.decide import selection
from janitor.decide.admin_report import admin_report
from janitor.decide.model import (
    AgentCondition,
    Finding,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    Observation,
    OwnerRef,
    PodState,
    PodView,
    SafetyLedger,
)
from janitor.decide.plan import plan
from janitor.decide.rails import Rails
from janitor.decide.reasons import Code, Reason
from janitor.decide.triggers import terminating
from janitor.decide.triggers.terminating import MAX_REPORT_AGE
from janitor.node_report import AgentRun, ConditionMessage, PodTaskState, Sight, decode_condition
from janitor.policy.model import Match, Mode, Namespaces, Policy, Terminating
from janitor.report import explain

M = datetime.timedelta(minutes=1)
DELETED = NOW - 60 * M
UID = "0f1e2d3c-0000-4000-8000-000000000001"
OTHER = "0f1e2d3c-0000-4000-8000-000000000002"
GONE, ALIVE, D = PodTaskState.GONE, PodTaskState.ALIVE, PodTaskState.D_STATE
RUN = AgentRun(started=DELETED - 120 * M, scans=200, sustain=3, scanned=NOW - M)
SEES = Sight(visible=12, listed=14)  # the processes of other pods of the node: it can see


def the_pod(controller: str | None = None, finalizers: tuple[str, ...] = ()) -> PodView:
    owner = OwnerRef(controller, "apps/v1", "x", "u") if controller else None
    return PodView(ObjectRef("Pod", "v1", "team-a", "p", UID), "7", {}, owner, "n1", "Running", None, 0,
                   deleting=True, state=PodState(finalizers=finalizers, deleting_since=DELETED, grace_seconds=30))


def node(*, ready: bool | None = True, status: bool | None = False, run: AgentRun | None = RUN,
         pods: dict[str, PodTaskState] | None = None, complete: bool = True, agent: bool = True,
         sight: Sight | None = SEES) -> NodeInfo:
    message = ConditionMessage("no D-state processes of deleted pods", {UID: GONE} if pods is None else pods,
                               complete, run, sight)
    return NodeInfo("n1", ready=ready, agent=AgentCondition(status, message) if agent else None)


def policy(force: bool = True) -> Policy:
    return Policy("stuck", (Terminating(after=30 * M, force_delete=force),),
                  match=Match(namespaces=Namespaces(("*",))), mode=Mode.ENFORCE)


def observation(n: NodeInfo | None, pod: PodView | None = None, nodes_known: bool = True,
                nodes_at: datetime.datetime | None = None) -> Observation:
    return Observation(NOW, pods=(pod or the_pod(),), namespaces={"team-a": NamespaceView("team-a")},
                       nodes=(n,) if n else (), nodes_known=nodes_known, nodes_at=nodes_at)


def judged(n: NodeInfo | None, pod: PodView | None = None, *, now: datetime.datetime = NOW, force: bool = True,
           nodes_known: bool = True, nodes_at: datetime.datetime | None = None) -> Finding:
    seen = observation(n, pod, nodes_known, nodes_at)
    [found] = terminating.findings(selection.workloads(seen, Rails()), seen, policy(force), now)
    return found


def test_a_fresh_sustained_report_of_the_pod_gone_on_a_ready_node_proves_it() -> None:
    found = judged(node())
    assert found.proposal is not None
    proof = found.proposal.why.fact("proof")
    assert isinstance(proof, Reason) and proof.code is Code.PROOF_AGENT_CLEAR
    assert str(found.proposal.why).endswith(
        "because the node agent on n1 (running since 2026-11-23T09:00:00Z) found no process of it in its scan at "
        "2026-11-23T11:59:00Z, after the deletion, on a Ready node")
    assert found.stuck is not None and str(found.stuck.remedy).startswith("force delete: the node agent on n1")
    # A report a little ahead of the janitor's clock is as fresh as one a little behind it.
    assert judged(node(run=replace(RUN, scanned=NOW + M))).proposal is not None
    # The pod listed gone in a list cut short is still listed gone.
    assert judged(node(pods={UID: GONE}, complete=False)).proposal is not None


@pytest.mark.parametrize(("seen", "pod", "now", "words"), [
    pytest.param(node(ready=False), None, NOW, "its node n1 is not Ready, so its processes may run with no kubelet "
                 "to stop them; the node agent's word does not count there", id="node-not-ready"),
    pytest.param(node(ready=None), None, NOW, "its node n1 is not Ready", id="node-readiness-unknown"),
    pytest.param(node(agent=False), None, NOW, "no node agent reports on n1", id="no-agent"),
    pytest.param(node(run=None), None, NOW, "the node agent on n1 does not report what it saw per pod (an older "
                 "version)", id="older-agent"),
    pytest.param(node(status=None, run=replace(RUN, scans=1)), None, NOW,
                 "the node agent on n1 has no verdict yet: 1 of 3 scans since it started at 2026-11-23T09:00:00Z",
                 id="agent-starting"),
    pytest.param(node(run=replace(RUN, scans=2)), None, NOW, "has no verdict yet: 2 of 3 scans",
                 id="false-below-sustain"),
    pytest.param(node(status=True, pods={UID: GONE, OTHER: D}), None, NOW,
                 "the node agent on n1 reports processes of deleted pods stuck in D state there",
                 id="leftovers-of-another-pod"),
    pytest.param(node(run=replace(RUN, started=DELETED + M)), None, NOW,
                 "the node agent on n1 started at 2026-11-23T11:01:00Z, after the deletion, so it cannot have watched "
                 "the pod's processes go", id="agent-restarted-after-the-deletion"),
    pytest.param(node(run=replace(RUN, started=DELETED)), None, NOW, "after the deletion", id="agent-started-then"),
    pytest.param(node(run=replace(RUN, scanned=DELETED)), None, NOW,
                 "the node agent on n1 has not scanned since the deletion (its last scan: 2026-11-23T11:00:00Z)",
                 id="no-scan-since-the-deletion"),
    pytest.param(node(), None, NOW - M + MAX_REPORT_AGE + datetime.timedelta(seconds=1),
                 "the node agent on n1 last scanned at 2026-11-23T11:59:00Z, 2m01s away from when its node was read; "
                 "a report counts for 2m00s", id="stale-report"),
    pytest.param(node(run=replace(RUN, scanned=NOW + 3 * M)), None, NOW, "3m00s away from when its node was read",
                 id="report-from-the-future"),
    pytest.param(node(pods={UID: ALIVE}), None, NOW,
                 "the node agent on n1 saw a process of it alive in its scan at 2026-11-23T11:59:00Z",
                 id="alive"),
    pytest.param(node(pods={OTHER: GONE}), None, NOW,
                 "the node agent on n1 did not report it gone in its scan at 2026-11-23T11:59:00Z", id="not-reported"),
    pytest.param(node(pods={OTHER: GONE}, complete=False), None, NOW, "did not report it gone",
                 id="not-reported-list-cut-short"),
    pytest.param(node(pods={UID: D}), None, NOW, "the node agent on n1 reports a process of it stuck in D state",
                 id="d-state"),
    pytest.param(node(), the_pod(controller="StatefulSet"), NOW,
                 "a StatefulSet's pod (a second copy could start while this one still runs)", id="statefulset"),
    pytest.param(node(), the_pod(finalizers=("example.com/x",)), NOW, "grace 0 does not remove finalizers",
                 id="finalizers"),
])
def test_each_missing_piece_stops_the_force_delete_and_is_named(seen: NodeInfo, pod: PodView | None,
                                                                now: datetime.datetime, words: str) -> None:
    found = judged(seen, pod, now=now)
    assert found.proposal is None
    said = str(found.why)
    assert "; not force deleted: " in said and words in said.partition("; not force deleted: ")[2]
    assert found.stuck is not None and not str(found.stuck.remedy).startswith("force delete")


def test_a_node_not_read_is_no_proof_and_says_so() -> None:
    found = judged(None, nodes_known=False)
    assert found.proposal is None and str(found.why).endswith("; not force deleted: nothing was read of its node n1")


def test_explain_and_the_admin_report_say_why_it_was_not_force_deleted() -> None:
    seen = observation(node(run=replace(RUN, started=DELETED + M)))
    cycle = plan(seen, [policy()], SafetyLedger(), NOW)
    shown = explain(cycle, "Pod", "team-a", "p", "pod/team-a/p")
    assert "not force deleted: the node agent on n1 started at 2026-11-23T11:01:00Z, after the deletion" in shown
    assert "FORCE-DELETE" not in shown.upper().replace("NOT FORCE DELETED", "")
    [line] = dict(cycle.admin_report.sections)["Pods stuck Terminating"]
    assert line.endswith("Remedy: look at the kubelet on n1; not force deleted: the node agent on n1 started at "
                         "2026-11-23T11:01:00Z, after the deletion, so it cannot have watched the pod's processes go")
    report = admin_report(cycle.findings, seen.nodes, [], None)
    assert report.key == admin_report(plan(observation(node(ready=False)), [policy()], SafetyLedger(), NOW).findings,
                                      seen.nodes, [], None).key  # other words, same pods: not sent again


def test_a_policy_without_force_delete_says_nothing_of_proofs() -> None:
    found = judged(node(ready=False), force=False)
    assert found.proposal is None and "force" not in str(found.why)
    assert found.stuck is not None and "force" not in str(found.stuck.remedy)


# -- an agent that cannot see pods' processes proves nothing ------------------------------------------

DATA = f" started=2026-11-23T09:00:00Z scans=200/3 scanned=2026-11-23T11:59:00Z pods={UID}:gone"


def wire(status: bool | None, text: str) -> NodeInfo:
    """The node as the janitor reads it from the apiserver: the condition's message decoded."""
    return NodeInfo("n1", ready=True, agent=AgentCondition(status, decode_condition(text)))


@pytest.mark.parametrize(("seen", "words"), [
    pytest.param(wire(None, "the node agent sees no process of any pod on this node but its own" " sees=0/14" + DATA),
                 "the node agent on n1 saw no process of any other pod on that node in its last scan (0 of the 14 "
                 "other pods listed there), so its 'gone' proves nothing", id="cannot-see"),
    pytest.param(wire(False, "no D-state processes of deleted pods sees=0/14" + DATA),
                 "saw no process of any other pod on that node", id="a-lying-or-mistaken-false"),
    pytest.param(wire(False, "no D-state processes of deleted pods sees=0/0" + DATA),
                 "(0 of the 0 other pods listed there)", id="no-other-pod-on-the-node"),
    pytest.param(wire(False, "no D-state processes of deleted pods" + DATA),
                 "the node agent on n1 does not say whether it can see other pods' processes (an older version), "
                 "so its 'gone' proves nothing", id="an-agent-that-does-not-say"),
    pytest.param(wire(False, "no D-state processes of deleted pods sees=many/14" + DATA),
                 "does not say whether it can see", id="a-sight-this-janitor-cannot-read"),
])
def test_a_gone_from_an_agent_that_cannot_show_it_sees_pods_proves_nothing(seen: NodeInfo, words: str) -> None:
    found = judged(seen)
    assert found.proposal is None
    assert words in str(found.why).partition("; not force deleted: ")[2]


def test_a_blind_agent_is_named_with_its_likely_causes_in_explain_and_the_admin_report() -> None:
    seen = observation(wire(None, "the node agent sees no process of any pod on this node but its own sees=0/14"
                            + DATA))
    cycle = plan(seen, [policy()], SafetyLedger(), NOW)
    shown = explain(cycle, "Pod", "team-a", "p", "pod/team-a/p")
    causes = ("check that it runs with hostPID, that its --proc-root is the host's /proc, and that it does not run "
              "in a sandboxed runtime (gVisor, Kata)")
    assert "not force deleted: the node agent on n1 saw no process of any other pod" in shown and causes in shown
    [line] = dict(cycle.admin_report.sections)["Pods stuck Terminating"]
    assert "so its 'gone' proves nothing" in line and causes in line
    [blind] = dict(cycle.admin_report.sections)["Node agents that cannot see pods' processes"]
    assert blind.startswith("n1: 0 of the 14 other pods listed there") and causes in blind


def test_a_node_list_of_minutes_ago_is_judged_as_of_its_own_time() -> None:
    """The daemon lists nodes every --node-refresh: the agent's report in a list begun 4 minutes
    before the cycle is as fresh as it was then, and a report stale by then proves nothing."""
    listed = NOW - 4 * M
    fresh_then = node(run=replace(RUN, scanned=listed - datetime.timedelta(seconds=30)))
    found = judged(fresh_then, nodes_at=listed)
    assert found.proposal is not None, found.why
    assert judged(fresh_then).proposal is None  # against the cycle's own time it would be 4m30s old
    stale_then = judged(node(run=replace(RUN, scanned=listed - 3 * M)), nodes_at=listed)
    assert stale_then.proposal is None
    assert "3m00s away from when its node was read; a report counts for 2m00s" in str(stale_then.why)


def test_a_node_missing_from_a_list_begun_before_the_deletion_is_no_proof_it_is_gone() -> None:
    before = judged(None, nodes_at=DELETED - M)
    assert before.proposal is None and before.stuck is not None
    assert "its node n1 is not in the nodes as listed at 2026-11-23T10:59:00Z, before it began terminating: " \
           "no evidence that the node is gone" in str(before.why)
    assert "is gone" not in str(before.stuck.holds[0])
    after = judged(None, nodes_at=DELETED + M)
    assert after.proposal is not None and after.stuck is not None
    proof = after.proposal.why.fact("proof")
    assert isinstance(proof, Reason) and proof.code is Code.PROOF_NODE_DELETED
    assert "its node n1 is gone" in str(after.stuck.holds[0])
