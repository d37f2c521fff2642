"""Deleting what comes back (issue: "GitOps re-creates what expired, and the janitor deletes it on
every sync").

- an object Argo CD or Flux keeps, whose own janitor/ttl or janitor/expires passed, is not deleted
  (they would create it again at once): it is reported, once (an Event and janitor/reported);
- the ledger keeps what an expiry deleted ("Kind/namespace/name" and the annotation): the same name
  back with the same janitor/expires is reported, once, and not deleted again, so the caps are not
  spent on the loop; another value, or another name, is deleted as before;
- the ledger's new fields round-trip, and a ledger without them reads as before.
"""

from __future__ import annotations

import dataclasses
import datetime

from factories import NOW, obj

from janitor import annotations as a
from janitor import ledger as ledger_format
from janitor.decide.model import ActionType, Deletion, Observation, SafetyLedger, State, TriggerKind
from janitor.decide.plan import plan
from janitor.decide.rails import record_deletions
from janitor.decide.reasons import Code

PASSED = "2026-11-01"


def planned(*objects, ledger: SafetyLedger = SafetyLedger()):  # type: ignore[no-untyped-def]
    return plan(Observation(NOW, tuple(objects)), (), ledger, NOW)


def test_what_gitops_keeps_is_reported_not_deleted() -> None:
    for labels, tool in (({"kustomize.toolkit.fluxcd.io/name": "apps"}, "Flux"),
                         ({"argocd.argoproj.io/instance": "team"}, "Argo CD")):
        kept = dataclasses.replace(obj("settings", annotations={a.EXPIRES: PASSED}), labels=labels)
        p = planned(kept)
        [finding] = [f for f in p.findings if f.trigger is TriggerKind.EXPIRY]
        assert finding.state is State.SKIPPED and finding.reason.code is Code.RECREATED_BY_GITOPS
        assert f"{tool} keeps this object and would create it again" in str(finding.reason)
        [report] = p.actions
        assert report.type is ActionType.REPORT and report.reason == "RecreatedAfterExpiry"
        # Reported once: the note it leaves stops the next report.
        reported = dataclasses.replace(kept, annotations={**kept.annotations, a.REPORTED: report.report_key or ""})
        assert planned(reported).actions == ()
    plain_helm = dataclasses.replace(obj("cm", annotations={a.EXPIRES: PASSED}),
                                     labels={"app.kubernetes.io/managed-by": "Helm"})
    assert [x.type for x in planned(plain_helm).actions] == [ActionType.DELETE]  # Helm alone creates nothing again


def test_the_same_name_back_with_the_same_expiry_is_not_deleted_again() -> None:
    first = obj("scratch", annotations={a.EXPIRES: PASSED})
    [delete] = planned(first).actions
    assert delete.type is ActionType.DELETE
    ledger = record_deletions(SafetyLedger(), [delete], NOW)
    assert ledger.deletions[0].target == "ConfigMap/team-a/scratch" and ledger.deletions[0].rule == f"expires={PASSED}"

    back = obj("scratch", annotations={a.EXPIRES: PASSED}, created=NOW)  # a sync created it again: another uid
    p = planned(back, ledger=ledger)
    [report] = p.actions
    assert report.type is ActionType.REPORT and report.target.uid == back.ref.uid
    [finding] = [f for f in p.findings if f.trigger is TriggerKind.EXPIRY]
    assert finding.reason.code is Code.RECREATED_BY_NAME and "not deleted again" in str(finding.reason)
    assert len(p.ledger.deletions) == 1  # nothing spent on it

    moved = obj("scratch", annotations={a.EXPIRES: "2026-11-02"})  # its owner set another time: theirs
    assert [x.type for x in planned(moved, ledger=ledger).actions] == [ActionType.DELETE]
    other = obj("other", annotations={a.EXPIRES: PASSED})
    assert [x.type for x in planned(other, ledger=ledger).actions] == [ActionType.DELETE]


def test_a_ttl_back_under_the_same_name_lives_its_ttl_again() -> None:
    """A re-created object's TTL counts from its new creation: it is not the loop the expiry is."""
    first = obj("scratch", annotations={a.TTL: "1h"}, created=NOW - datetime.timedelta(hours=2))
    ledger = record_deletions(SafetyLedger(), list(planned(first).actions), NOW)
    again = obj("scratch", annotations={a.TTL: "1h"}, created=NOW - datetime.timedelta(hours=2))
    assert [x.type for x in planned(again, ledger=ledger).actions] == [ActionType.DELETE]


def test_the_ledger_keeps_what_an_expiry_deleted_and_reads_older_ledgers() -> None:
    ledger = SafetyLedger((Deletion(NOW, "team-a", "ConfigMap/team-a/x", f"expires={PASSED}"), Deletion(NOW, None)))
    assert ledger_format.loads(ledger_format.dumps(ledger)) == ledger
    older = '{"version":1,"deletions":[{"at":"2026-11-24T12:00:00+00:00","namespace":"team-a"}]}'
    assert ledger_format.loads(older).deletions[0].target == ""


# -- found by an adversarial read ----------------------------------------------------------------------------


def test_a_delete_that_failed_is_no_sign_the_object_came_back() -> None:
    """The ledger records a deletion before it is tried: the same object still there (created before
    that record) is deleted again, not taken for one a sync created."""
    first = obj("scratch", annotations={a.EXPIRES: PASSED}, created=NOW - datetime.timedelta(days=3))
    ledger = record_deletions(SafetyLedger(), list(planned(first).actions), NOW)
    assert [x.type for x in planned(first, ledger=ledger).actions] == [ActionType.DELETE]


def test_an_object_reported_as_come_back_stays_kept_after_the_ledger_forgets() -> None:
    """The ledger keeps a day; the report note on the object keeps the decision after that, so the
    loop (and a tripwire of reappearing candidates) never starts again."""
    back = obj("scratch", annotations={a.EXPIRES: PASSED}, created=NOW)
    ledger = record_deletions(SafetyLedger(), list(planned(obj("scratch", annotations={a.EXPIRES: PASSED},
                                                                 created=NOW - datetime.timedelta(days=3))).actions),
                              NOW - datetime.timedelta(hours=1))
    [report] = planned(back, ledger=ledger).actions
    noted = dataclasses.replace(back, annotations={**back.annotations, a.REPORTED: report.report_key or ""})
    assert planned(noted).actions == ()  # the ledger forgot; the note did not
