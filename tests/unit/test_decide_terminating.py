"""Pods stuck Terminating: what holds them, and when a force delete is allowed.

Aspects covered:
- only past grace + `after`; holds named: finalizers, node NotReady or gone, stuck processes;
- force delete only with the policy's forceDelete and positive evidence (node deleted,
  out-of-service taint, an agent report after the deletion), never on silence (NotReady), never
  for StatefulSet pods, with finalizers, or while the agent reports the pod's processes;
- the admin report groups the items and its key ignores times that tick on.
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from factories import NOW

from janitor.decide.admin_report import admin_report
from janitor.decide.model import ActionType, NodeInfo, ObjectRef, OwnerRef, PodState, PodView
from janitor.decide.terminating import OUT_OF_SERVICE, stuck_pods
from janitor.policy.model import Match, Namespaces, Policy, Terminating

M = datetime.timedelta(minutes=1)
DELETED = NOW - 60 * M


def pod(node: str = "n1", finalizers=(), controller: str | None = None, uid: str | None = None) -> PodView:
    owner = OwnerRef(controller, "apps/v1", "x", "u") if controller else None
    return PodView(ObjectRef("Pod", "v1", "team-a", "p", uid or str(uuid.uuid4())), "7", {}, owner, node, "Running",
                   None, 0, state=PodState(finalizers=tuple(finalizers), deleting_since=DELETED, grace_seconds=30))


def policy(force: bool = True) -> Policy:
    return Policy("stuck", (Terminating(after=30 * M, force_delete=force),), match=Match(namespaces=Namespaces(("*",))))


def agent(status: str, message: str = "", at: datetime.datetime | None = NOW) -> tuple:
    return (status, message, at)


@pytest.mark.parametrize(("the_pod", "nodes", "force", "held_by"), [
    pytest.param(pod(), [NodeInfo("n2")], True, "its node n1 is gone", id="node-deleted"),
    pytest.param(pod(), [NodeInfo("n1", taints=((OUT_OF_SERVICE, "nodeshutdown", "NoExecute"),))], True,
                 "nothing the API shows", id="out-of-service"),
    pytest.param(pod(), [NodeInfo("n1", agent=agent("False"))], True, "nothing the API shows", id="agent-says-clear"),
    pytest.param(pod(), [NodeInfo("n1", agent=agent("False", at=DELETED - M))], False, "nothing", id="agent-too-old"),
    pytest.param(pod(), [NodeInfo("n1", ready=False)], False, "NotReady", id="silence"),
    pytest.param(pod(controller="StatefulSet"), [NodeInfo("n2")], False, "gone", id="statefulset"),
    pytest.param(pod(finalizers=["example.com/x"]), [], False, "finalizers example.com/x", id="finalizer"),
    pytest.param(pod(uid="u-stuck"), [NodeInfo("n1", agent=agent("True", "deleted pod uid u-stuck: process"))],
                 False, "processes stuck in D state", id="agent-reports-it"),
])
def test_force_only_on_positive_evidence(the_pod, nodes, force, held_by) -> None:
    [stuck] = stuck_pods([the_pod], nodes, {}, [policy()], NOW)
    assert (stuck.force is not None) is force
    assert any(held_by in h for h in stuck.holds), stuck.holds
    if force:
        assert stuck.force.type is ActionType.FORCE_DELETE and stuck.force.resource_version == "7"


def test_not_before_grace_plus_after_and_not_without_force_delete() -> None:
    assert stuck_pods([pod()], [], {}, [Policy("p", (Terminating(after=120 * M),),
                                               match=Match(namespaces=Namespaces(("*",))))], NOW) == []
    [stuck] = stuck_pods([pod()], [], {}, [policy(force=False)], NOW)
    assert stuck.force is None


def test_admin_report_sections_and_stable_key() -> None:
    node = NodeInfo("n1", agent=agent("True", "1 tasks in D state"))
    stuck = stuck_pods([pod(finalizers=["f"])], [node], {}, [policy()], NOW)
    report = admin_report(stuck, [], [node], ["team-a/nb on n2"], None)
    assert [title for title, _ in report.sections] == [
        "Pods stuck Terminating", "Nodes with processes of deleted pods stuck in D state",
        "GPU pods without GPU telemetry (never judged idle)"]
    later = admin_report(stuck_pods([pod(finalizers=["f"], uid=stuck[0].pod.uid)], [node], {}, [policy()],
                                    NOW + 5 * M), [], [node], ["team-a/nb on n2"], None)
    assert later.key == report.key and later.sections != report.sections
    assert admin_report([], [], [], [], None).empty


def test_ghost_gpus_are_put_beside_the_node_agents_leftovers() -> None:
    node = NodeInfo("n1", agent=agent("True", "1 tasks in D state from 1 deleted pods"))
    report = admin_report([], [], [node], [], None, ghost_gpus=[("n1", "3", 30000.0), ("n2", "0", 512.0)])
    [title, lines] = report.sections[-1]
    assert title == "Ghost GPUs (memory in use, no pod)"
    assert lines[0].startswith("n1 GPU 3: 30000 MiB in use, no pod on it; the node agent reports")
    assert lines[1] == "n2 GPU 0: 512 MiB in use, no pod on it"


def test_an_empty_node_list_is_no_evidence_that_the_node_was_deleted() -> None:
    [stuck] = stuck_pods([pod()], [], {}, [policy()], NOW)
    assert stuck.force is None  # nothing read about nodes: the pod's node may well be there
    assert not any("gone" in h for h in stuck.holds)
    [other] = stuck_pods([pod()], [NodeInfo("n2")], {}, [policy()], NOW)
    assert other.force is not None and "its node n1 was deleted" in other.force.why
