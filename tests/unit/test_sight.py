"""No sight, no change: a cycle that could not read pods or namespaces changes nothing.

Aspects covered:
- pods forbidden (a watch's 403 after an RBAC edit): a marked and warned Job is not unmarked "no longer
  covered" and its owner is not told "nothing will happen"; nothing new is marked; the plan says which
  kind and why; read again, the same mark is acted on as before;
- namespaces forbidden: an expired object in an opted-out namespace is not deleted;
- a kind that is not a foundation (a custom resource not served) changes nothing of that.
"""

from __future__ import annotations

from dataclasses import replace

from factories import NOW, ago, obj
from test_fuzz import NS, marked_job_observation

from janitor import annotations as ann
from janitor.decide.lifecycle import Step
from janitor.decide.model import NamespaceView, Observation, SafetyLedger, SkippedKind
from janitor.decide.plan import plan
from janitor.decide.reasons import Code
from janitor.telemetry import Telemetry

FORBIDDEN = "forbidden: pods is forbidden: User cannot watch resource"


def test_pods_that_cannot_be_read_leave_every_mark_as_it_is() -> None:
    observation, policy = marked_job_observation()
    seen = plan(observation, [policy], SafetyLedger(), NOW)
    assert [a.type for a in seen.actions] == ["delete"]  # read whole, the warned, due Job is deleted
    blind = replace(observation, pods=(), skipped_kinds=(SkippedKind("Pod", FORBIDDEN),))
    planned = plan(blind, [policy], SafetyLedger(), NOW)
    assert planned.actions == () and planned.findings == ()
    [change] = planned.changes
    assert change.step is Step.WAIT and change.notice is None and change.annotations == {}
    assert change.why.code is Code.SIGHT_LOST and change.why.fact("kind") == "Pod"
    assert "Pod could not be read" in str(change.why) and FORBIDDEN in str(change.why)
    assert any("Pod" in n for n in planned.notices)
    assert planned.blind is not None and seen.blind is None
    telemetry = Telemetry()
    telemetry.observe_plan(planned, objects=1, skipped_kinds=blind.skipped_kinds, tripped=False, skew=None)
    assert telemetry.registry.get_sample_value("janitor_sight_lost") == 1


def test_a_cycle_without_sight_leaves_the_tripwire_count_as_it_was() -> None:
    """The tripwire compares each cycle's deletion candidates with the last one's: a blind cycle
    counting none would make the first cycle that sees again look like a spike, and stop deletions."""
    expired = [obj(f"old-{i}", kind="ConfigMap", namespace=NS, annotations={ann.EXPIRES: "2020-01-01"})
               for i in range(25)]
    namespaces = {NS: NamespaceView(NS)}
    seeing = plan(Observation(NOW, tuple(expired), (), namespaces), (), SafetyLedger(), NOW)
    assert seeing.ledger.previous_candidates == 25
    blind = Observation(NOW, tuple(expired), (), {}, skipped_kinds=(SkippedKind("Namespace", FORBIDDEN),))
    after = plan(blind, (), seeing.ledger, NOW).ledger
    assert after == seeing.ledger
    again = plan(Observation(NOW, tuple(expired), (), namespaces), (), after, NOW)
    assert not again.tripped_now and len(again.actions) > 0


def test_namespaces_that_cannot_be_read_delete_nothing() -> None:
    expired = obj("old", kind="ConfigMap", namespace=NS, annotations={ann.EXPIRES: ago(hours=1).strftime(
        "%Y-%m-%dT%H:%M:%SZ")})
    opted_out = {NS: NamespaceView(NS, {}, {ann.OPT_OUT: "true"})}
    assert plan(Observation(NOW, (expired,), (), opted_out), (), SafetyLedger(), NOW).actions == ()
    # Read whole, an expired object in a namespace that did not opt out is deleted ...
    assert [a.type for a in plan(Observation(NOW, (expired,), (), {NS: NamespaceView(NS)}), (), SafetyLedger(),
                                  NOW).actions] == ["delete"]
    # ... but with namespaces unread, whether it opted out is not known: nothing is deleted.
    blind = Observation(NOW, (expired,), (), {}, skipped_kinds=(SkippedKind("Namespace", FORBIDDEN),))
    planned = plan(blind, (), SafetyLedger(), NOW)
    assert planned.actions == ()


def test_a_kind_not_served_is_no_reason_to_stop() -> None:
    observation, policy = marked_job_observation()
    observation = replace(observation, skipped_kinds=(
        SkippedKind("notebooks.kubeflow.org", "not served (kubeflow.org/v1 notebooks)"),))
    assert [a.type for a in plan(observation, [policy], SafetyLedger(), NOW).actions] == ["delete"]


def test_a_first_mark_is_written_only_if_a_fresh_read_bears_it_out() -> None:
    """`recheck.still_notices`: the cycle's read may be minutes old (a watch); a namespace opted out
    since, or a workload gone, gets no mark; the same state gets the same mark."""
    from janitor.decide.recheck import first_notice, still_notices

    unmarked = {k: None for k in ann.MARK_KEYS}
    observation, policy = marked_job_observation()
    bare = replace(observation, objects=tuple(replace(o, annotations={k: v for k, v in o.annotations.items()
                                                                      if k not in unmarked})
                                              for o in observation.objects))
    [mark] = [c for c in plan(bare, [policy], SafetyLedger(), NOW).changes if c.step is Step.MARK]
    assert first_notice(mark)
    assert still_notices(mark, bare, [policy], NOW).change is not None
    opted = replace(bare, namespaces={NS: NamespaceView(NS, {}, {ann.OPT_OUT: "true"})})
    again = still_notices(mark, opted, [policy], NOW)
    assert again.change is None and again.why.code is Code.NO_LONGER_DUE
    assert still_notices(mark, None, [policy], NOW).why.code is Code.GONE


def test_the_admins_report_says_which_kind_cannot_be_read() -> None:
    observation, policy = marked_job_observation()
    blind = replace(observation, skipped_kinds=(SkippedKind("Pod", "pods is forbidden"),))
    report = plan(blind, [policy], SafetyLedger(), NOW).admin_report
    [(title, (line,))] = [s for s in report.sections if s[0] == "No sight, no change"]
    assert "Pod" in line and "pods is forbidden" in line and "reclaims nothing" in line
