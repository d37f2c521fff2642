"""DRA claims holding devices with no consumer (issue 29, item 2): the orphanedClaim trigger.

Aspects covered:
- the verdict: fires on a claim reserved for nobody, or only for pods that are gone, once the
  daemon has seen it so for `after` and its status was written that long ago; clear while a pod
  that runs or waits names it, while it is reserved for a pod that is there, or holds nothing;
  unknown for a non-pod consumer, a controller other than a pod, a gone pod's process still
  holding a GPU, pods or nodes not read, an unrecorded status write; too young on a fresh run;
- subjects: claims read at v1 only, not those being deleted, in protected namespaces or opted out,
  nor under a policy that selects by pod labels;
- the lifecycle: marked and warned to the namespace's owner; at the deadline an enforcing delete
  policy deletes the claim, a report policy does nothing; a pod that names it again unmarks it;
- policies: orphanedClaim reports unless told to delete, takes a policy of its own;
- the observation: claims are objects of the cycle where such a policy is loaded, and the re-check
  judges one with the daemon's memory of it.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from factories import NOW
from test_claims_observe import pod, raw, written
from test_holder_notices import held
from test_node_gpu_holders import GONE, LATE, held_on

from janitor import annotations as a
from janitor.decide import claims as dc
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    ActionType,
    NamespaceView,
    ObjectRef,
    Observation,
    OwnerRef,
    PodView,
    State,
    TriggerKind,
)
from janitor.decide.plan import Decision, PlanSettings, decide
from janitor.decide.rails import Rails
from janitor.decide.reasons import Code
from janitor.observe import claims as oc
from janitor.observe import views
from janitor.policy import load
from janitor.policy.endings import Action
from janitor.policy.model import LabelSelector, Lifecycle, Match, Mode, Namespaces, OrphanedClaim, Policy

H = datetime.timedelta(hours=1)
NS = "team-a"
V1 = "resource.k8s.io/v1"
ALICE = {"janitor/owner": "alice@lab.example"}


def claim_item(name: str = "gpu", *, reserved: Sequence[Mapping[str, str]] = (), allocated: bool = True,
               written_at: datetime.datetime | None = NOW - 5 * H, meta: Mapping[str, Any] | None = None,
               namespace: str = NS) -> dict[str, Any]:
    """A claim (test_claims_observe.raw) whose status was last written at `written_at`, and whose
    annotations the janitor wrote (its field manager owns them, as after its own mark)."""
    item = raw(name, namespace=namespace, reserved=list(reserved), allocated=allocated, meta=meta)
    item = written(item, (a.format_expires(written_at), "status")) if written_at is not None else item
    notes = item["metadata"].get("annotations") or {}
    item["metadata"].setdefault("managedFields", []).append(
        {"manager": a.FIELD_MANAGER, "operation": "Apply", "time": a.format_expires(NOW - 6 * H),
         "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in notes}}}})
    return item


def claim_policy(*, action: Action = Action.DELETE, after: datetime.timedelta = H, mode: Mode = Mode.ENFORCE,
                 match: Match | None = None) -> Policy:
    return Policy("orphaned-claims", (OrphanedClaim(after=after),), mode=mode,
                  match=match or Match(namespaces=Namespaces(include=(NS,))),
                  lifecycle=Lifecycle(action=action, warn_before=4 * H))


def a_pod(name: str = "train-0", *, phase: str = "Running", claims: Sequence[str] = (), uid: str = "",
          deleting: bool = False) -> PodView:
    return PodView(ObjectRef("Pod", "v1", NS, name, uid or str(uuid.uuid4())), "1", {}, None, "gpu-node-1", phase,
                   NOW - 4 * H, 1, deleting=deleting, resource_claims=tuple(claims))


def observed(*items: dict[str, Any], pods: Sequence[PodView] = (), seen_for: datetime.timedelta | None = 2 * H,
             nodes: Sequence[dict[str, Any]] = (), nodes_known: bool = True, version: str = V1,
             pods_read: bool = True, owner: Mapping[str, str] = ALICE) -> Observation:
    """A cycle's observation as observe makes it: the claims read (not among its objects: `decide`
    gives the lifecycle those it judges), and the daemon's memory saying each has been held `seen_for`."""
    claims = tuple(oc.to_claim(i, version) for i in items)
    seen_pods = dc.PodsSeen(frozenset(p.ref.uid for p in pods)) if pods_read else None
    memory = {c.ref.uid: (dc.verdict(c, seen_pods).state, NOW - seen_for) for c in claims} if seen_for else {}
    read = dc.ClaimsRead(claims, version.rpartition("/")[2], pods=seen_pods, seen=memory)
    return Observation(NOW, (), tuple(pods),
                       {NS: NamespaceView(NS, annotations=dict(owner)), "kube-system": NamespaceView("kube-system")},
                       tuple(views.node_info(n) for n in nodes), nodes_known, claims=read)


def decided(seen: Observation, policies: Sequence[Policy] | None = None,
            settings: PlanSettings = PlanSettings()) -> Decision:
    return decide(seen, policies or [claim_policy()], NOW, settings)


def verdicts(decision: Decision) -> dict[str, tuple[State, Any]]:
    return {f.subject.name: (f.state, f.reason) for f in decision.findings if f.trigger is TriggerKind.ORPHANED_CLAIM}


# -- the verdict ------------------------------------------------------------------------------------------

def test_a_claim_reserved_for_nobody_fires_after_the_grace_and_is_marked_for_its_namespace_owner() -> None:
    decision = decided(observed(claim_item()))
    [(state, reason)] = verdicts(decision).values()
    assert state is State.FIRES and reason.code is Code.CLAIM_HELD, reason
    assert "reserved for nobody" in str(reason) and "gpu.example.com/gpu-node-1/gpu-0" in str(reason)
    [change] = decision.changes
    assert change.step is Step.MARK and change.workload.kind == "ResourceClaim" and change.workload.name == "gpu"
    finding = next(f for f in decision.findings if f.trigger is TriggerKind.ORPHANED_CLAIM)
    assert str(finding.owner) == "alice@lab.example (email)"


def test_a_claim_reserved_only_for_pods_that_are_gone_fires() -> None:
    decision = decided(observed(claim_item(reserved=[pod("train-0", "uid-gone")]), pods=[a_pod("other")]))
    [(state, reason)] = verdicts(decision).values()
    assert state is State.FIRES and "only for pods that are gone: train-0" in str(reason)


def test_it_is_too_young_until_the_daemon_has_seen_it_held_for_after() -> None:
    for seen_for in (None, 30 * datetime.timedelta(minutes=1)):  # a fresh run knows nothing yet
        [(state, _)] = verdicts(decided(observed(claim_item(), seen_for=seen_for))).values()
        assert state is State.TOO_YOUNG, seen_for
    # Seen long enough, but its status was written (a reservation dropped) 20 minutes ago.
    item = claim_item(written_at=NOW - datetime.timedelta(minutes=20))
    [(state, reason)] = verdicts(decided(observed(item))).values()
    assert state is State.TOO_YOUNG and reason.code is Code.CLAIM_HELD_SHORT


@pytest.mark.parametrize(("pods", "reserved", "why"), [
    pytest.param([a_pod(claims=["gpu"])], (), "a running pod names it", id="named-running"),
    pytest.param([a_pod(phase="Pending", claims=["gpu"])], (), "a pending pod names it", id="named-pending"),
    pytest.param([a_pod(claims=["gpu"], deleting=True)], (), "a Terminating pod names it", id="named-terminating"),
    pytest.param([a_pod(uid="uid-live")], [pod("train-0", "uid-live")], "reserved for a pod that is there",
                 id="reserved-live"),
])
def test_a_claim_in_use_is_clear(pods: list[PodView], reserved: list[dict[str, str]], why: str) -> None:
    [(state, _)] = verdicts(decided(observed(claim_item(reserved=reserved), pods=pods))).values()
    assert state is State.CLEAR, why


def test_a_finished_pod_naming_it_does_not_keep_it() -> None:
    [(state, _)] = verdicts(decided(observed(claim_item(), pods=[a_pod(phase="Succeeded", claims=["gpu"])]))).values()
    assert state is State.FIRES


def test_a_claim_holding_nothing_is_clear() -> None:
    [(state, _)] = verdicts(decided(observed(claim_item(allocated=False)))).values()
    assert state is State.CLEAR


@pytest.mark.parametrize(("seen", "says"), [
    pytest.param(lambda: observed(claim_item(reserved=[{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                                        "name": "pg", "uid": "u"}])), "not a pod", id="not-a-pod"),
    pytest.param(lambda: observed(claim_item(reserved=[pod()]), pods_read=False), "pods of its namespace were not",
                 id="pods-unread"),
    # Reserved for nobody, a pod may still name it: without the pods that is not known either.
    pytest.param(lambda: observed(claim_item(), pods_read=False), "pods of its namespace were not read",
                 id="pods-unread-orphaned"),
    pytest.param(lambda: observed(claim_item(written_at=None)), "not recorded", id="no-status-write"),
    pytest.param(lambda: observed(claim_item(), nodes_known=False), "nodes were not read", id="nodes-unread"),
    pytest.param(lambda: observed(claim_item(meta={"ownerReferences": [
        {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "name": "cd", "uid": "u",
         "controller": True}]})), "ComputeDomain cd owns it", id="controller"),
    pytest.param(lambda: observed(claim_item(reserved=[pod("train-7f9", GONE)]),
                                  nodes=[held_on("gpu-7", held(GONE, namespace=NS))]), "still holds a GPU",
                 id="gpu-held"),
    pytest.param(lambda: observed(claim_item(), nodes=[held_on("gpu-7", held(GONE, namespace=NS))]),
                 "still holds a GPU", id="gpu-held-in-namespace"),
])
def test_what_cannot_be_told_is_unknown(seen: Any, says: str) -> None:
    [(state, reason)] = verdicts(decided(seen())).values()
    assert state is State.UNKNOWN and says in str(reason), reason


def test_a_claim_generated_for_a_pod_is_judged_as_any_other() -> None:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": "uid-gone", "controller": True}
    [(state, _)] = verdicts(decided(observed(claim_item(meta={"ownerReferences": [owner]})))).values()
    assert state is State.FIRES


# -- subjects ---------------------------------------------------------------------------------------------

def test_claims_read_at_a_beta_version_are_not_judged() -> None:
    assert verdicts(decided(observed(claim_item(), version="resource.k8s.io/v1beta2"))) == {}


def test_claims_being_deleted_protected_opted_out_or_outside_the_policy_are_not_judged() -> None:
    deleting = claim_item("a", meta={"deletionTimestamp": "2026-11-23T11:00:00Z",
                                     "finalizers": [dc.FINALIZER]})
    opted = claim_item("b", meta={"annotations": {a.OPT_OUT: "true"}})
    elsewhere = claim_item("c", namespace="team-b")
    system = claim_item("d", namespace="kube-system")
    rails = PlanSettings(rails=Rails(protected_namespaces=frozenset({"kube-system"})))
    broad = claim_policy(match=Match(namespaces=Namespaces(include=("*",))))
    found = verdicts(decided(observed(deleting, opted, elsewhere, system), [broad], rails))
    assert set(found) == {"c"}  # team-b is selected by "*"; the rest are left alone
    assert verdicts(decided(observed(elsewhere))) == {}  # the policy's namespaces hold


def test_a_policy_selecting_pods_by_labels_governs_no_claim() -> None:
    by_labels = claim_policy(match=Match(namespaces=Namespaces(include=(NS,)),
                                         pod_selector=LabelSelector(match_labels={"team": "a"})))
    assert verdicts(decided(observed(claim_item()), [by_labels])) == {}


# -- the lifecycle -----------------------------------------------------------------------------------------

def due_notes(action: str) -> dict[str, str]:
    return {a.POLICY: "orphaned-claims", a.DEADLINE: a.format_expires(NOW - H),
            a.MARKED_AT: a.format_expires(NOW - 6 * H), a.REASON: "holding devices no pod uses",
            a.MARKED_UID: "uid-gpu", a.WARNED_AT: a.format_expires(NOW - 6 * H),
            a.WARNED_VIA: f"owner D0ALICE/{(NOW - 6 * H).timestamp():.6f}",
            a.WARNED_OF: f"{action} {a.format_expires(NOW - H)}", a.WARNED_TO: "email:alice@lab.example"}


def test_at_the_deadline_an_enforcing_delete_policy_deletes_the_claim() -> None:
    decision = decided(observed(claim_item(meta={"annotations": due_notes("delete")})))
    [act] = [c for c in decision.changes if c.step is Step.ACT]
    assert act.action is not None and act.action.type is ActionType.DELETE
    assert act.action.target == ObjectRef("ResourceClaim", V1, NS, "gpu", "uid-gpu")
    assert [x.key for x in decision.due] == [act.action.key]


def test_a_report_policy_or_a_shadow_one_deletes_nothing() -> None:
    for policy in (claim_policy(action=Action.REPORT), claim_policy(mode=Mode.SHADOW)):
        decision = decided(observed(claim_item(meta={"annotations": due_notes(str(policy.lifecycle.action))})),
                           [policy])
        assert not decision.due and all(c.step is not Step.ACT for c in decision.changes), policy


def test_a_pod_that_names_it_again_unmarks_it() -> None:
    decision = decided(observed(claim_item(meta={"annotations": due_notes("delete")}),
                                pods=[a_pod(phase="Pending", claims=["gpu"])]))
    assert not decision.due
    [change] = decision.changes
    assert change.step is Step.UNMARK


def test_a_marked_claim_is_not_deleted_on_a_fresh_run_before_after_again() -> None:
    decision = decided(observed(claim_item(meta={"annotations": due_notes("delete")}), seen_for=None))
    assert not decision.due
    assert all(c.step is Step.WAIT for c in decision.changes), decision.changes


# -- policies ----------------------------------------------------------------------------------------------

def _load(text: str) -> tuple[Any, Any]:
    return load.from_text(text, file="p.yaml")


POLICY = """policies:
  - name: claims
    mode: enforce
    match: {{namespaces: {{include: ["*"]}}}}
    triggers:
      orphanedClaim: {{after: 30m}}{more}
{lifecycle}"""


def test_it_reports_unless_told_to_delete() -> None:
    policies, errors = _load(POLICY.format(more="", lifecycle=""))
    assert not errors
    [policy] = policies
    assert policy.lifecycle.action is Action.REPORT and policy.trigger(OrphanedClaim) == OrphanedClaim(after=H / 2)
    policies, errors = _load(POLICY.format(more="", lifecycle="    lifecycle: {action: delete}"))
    assert not errors and policies[0].lifecycle.action is Action.DELETE


def test_nothing_but_report_or_delete_and_no_other_trigger() -> None:
    _, errors = _load(POLICY.format(more="", lifecycle="    lifecycle: {action: suspend}"))
    [error] = errors
    assert "lifecycle.action" in str(error) and "reported or deleted" in str(error) and ":7" in str(error)
    _, errors = _load(POLICY.format(more="\n      pending: {after: 1h}", lifecycle=""))
    assert any("orphanedClaim takes a policy of its own" in str(e) for e in errors)


# -- the observation -----------------------------------------------------------------------------------------

def test_the_lifecycle_looks_at_claims_where_a_policy_judges_them_else_at_marked_ones_only() -> None:
    from janitor.decide.triggers import orphaned_claim

    seen = observed(claim_item("x"), claim_item("y", meta={"annotations": due_notes("delete")}))
    assert [v.ref.name for v in orphaned_claim.objects(seen, [claim_policy()])] == ["x", "y"]
    assert [v.ref.name for v in orphaned_claim.objects(seen, [])] == ["y"]  # to unmark it
    assert orphaned_claim.objects(dataclasses.replace(seen, claims=None), [claim_policy()]) == ()


def test_the_recheck_judges_a_claim_with_the_daemons_memory_of_it() -> None:
    item = claim_item()
    state = dc.State.ORPHANED
    again = oc.scoped(None, item, V1, [a_pod("other")], {"uid-gpu": (state, NOW - 2 * H), "uid-else": (state, NOW)})
    assert again.seen == {"uid-gpu": (state, NOW - 2 * H)} and again.pods is not None
    assert again.pods.covers(NS) and not again.pods.covers("team-b")
    assert [c.ref.name for c in again.claims] == ["gpu"] and again.claims[0].view is not None


def test_an_owner_reference_is_the_claims_own_in_its_view() -> None:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": "uid-gone", "controller": True}
    claim = oc.to_claim(claim_item(meta={"ownerReferences": [owner]}), V1)
    assert claim.view is not None and claim.view.controller == OwnerRef("Pod", "v1", "train-0", "uid-gone")


def test_the_owner_is_told_in_plain_words() -> None:
    from janitor.decide.plain import plain

    [(_, held)] = verdicts(decided(observed(claim_item()))).values()
    assert plain(held) == ("it has held gpu.example.com/gpu-node-1/gpu-0 for 2 h, reserved for nobody, so no other "
                           "pod can use them")
    [(_, named)] = verdicts(decided(observed(claim_item(), pods=[a_pod("next", claims=["gpu"])]))).values()
    assert plain(named) == "pod next uses it"


# -- the promise, over generated claims ------------------------------------------------------------------

# Each fault takes away one thing a deletion rests on; a drawn claim carries a few of them or none
# (then it is one the policy deletes), besides variations that must not matter.
FAULTS = ("unallocated", "live-consumer", "non-pod-consumer", "running-namer", "pending-namer", "not-warned",
          "warned-of-report", "fresh-run", "seen-short", "written-recently", "write-unknown", "other-controller",
          "gpu-held", "stale-gpu-report", "plain-owner", "nodes-unread", "pods-unread")


def test_a_claim_is_deleted_only_when_nothing_uses_it_and_its_owner_was_warned_of_that() -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    reached: dict[str, int] = {}

    @settings(max_examples=450, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(faults=st.sets(st.sampled_from(FAULTS), max_size=2), gone=st.booleans(),
           done=st.lists(st.sampled_from(["Succeeded", "Failed"]), max_size=2), by_pod=st.booleans())
    def check(faults: set[str], gone: bool, done: list[str], by_pod: bool) -> None:
        reserved = [pod("gone", GONE)] if gone else []
        reserved += [pod("live", "uid-live")] if "live-consumer" in faults else []
        reserved += [{"apiGroup": "x.io", "resource": "groups", "name": "g", "uid": "u"}] \
            if "non-pod-consumer" in faults else []
        namers = [*done, *(["Running"] if "running-namer" in faults else []),
                  *(["Pending"] if "pending-namer" in faults else [])]
        meta: dict[str, Any] = {}
        if "not-warned" not in faults:
            meta["annotations"] = due_notes("report" if "warned-of-report" in faults else "delete")
        if by_pod or "other-controller" in faults:
            other = "other-controller" in faults
            meta["ownerReferences"] = [{"apiVersion": "x.io/v1" if other else "v1", "kind": "Group" if other else "Pod",
                                        "name": "c", "uid": "uid-c", "controller": True}]
        written_at = None if "write-unknown" in faults else NOW - (10 * datetime.timedelta(minutes=1)
                                                                   if "written-recently" in faults else 5 * H)
        if "plain-owner" in faults:
            meta.setdefault("ownerReferences", []).append({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                           "name": "js", "uid": "uid-js"})
        item = claim_item(reserved=reserved, allocated="unallocated" not in faults, meta=meta, written_at=written_at)
        pods = [a_pod("live", uid="uid-live"), *(a_pod(f"namer-{i}", phase=p, claims=["gpu"])
                                                for i, p in enumerate(namers))]
        seen = None if "fresh-run" in faults else 10 * datetime.timedelta(minutes=1) if "seen-short" in faults \
            else 2 * H
        nodes = [held_on("gpu-7", held(GONE if gone else LATE, namespace=NS))] if "gpu-held" in faults else []
        if "stale-gpu-report" in faults:
            nodes.append(held_on("gpu-8", held(GONE if gone else LATE, namespace=NS), scanned=NOW - 2 * H))
        decision = decided(observed(item, pods=pods, seen_for=seen, nodes=nodes,
                                    nodes_known="nodes-unread" not in faults, pods_read="pods-unread" not in faults))
        deleted = any(x.target.uid == "uid-gpu" and x.type is ActionType.DELETE for x in decision.due)
        for fault in faults or {"none"}:
            reached[fault] = reached.get(fault, 0) + 1
        assert deleted is (not faults), (faults, decision.changes, verdicts(decision))

    check()
    assert reached.get("none", 0) >= 10 and all(reached.get(f, 0) >= 5 for f in FAULTS), [
        (f, reached.get(f, 0)) for f in FAULTS if reached.get(f, 0) < 5]
