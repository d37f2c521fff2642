"""The janitor beside kube-janitor (issue: "the mark is kube-janitor's delete order").

kube-janitor deletes whatever carries a `janitor/expires` that has passed. The janitor often waits
past its mark's deadline on purpose (a `report` policy, a warning not delivered, evidence it cannot
judge, an action other than delete), so its mark's deadline is `janitor/deadline`:

- a new mark, its extensions and its delivery record write `janitor/deadline`, never
  `janitor/expires`: past the deadline of a `report` policy, nothing on the object is a delete order;
- a mark written before (its deadline in `janitor/expires`) is read as before and, before anything
  else is done with it, its deadline is moved and that `janitor/expires` removed, whoever wrote it
  last (it was never a user's deadline beside a mark); removing the mark removes it too;
- a ReplicaSet's copy of an older mark's `janitor/expires` (the Deployment controller never removes
  a key) is removed once its Deployment's mark no longer has it;
- removing a mark removes an older mark's `janitor/expires`, never a user's beside a mark.
"""

from __future__ import annotations

import dataclasses

from factories import NOW, ago
from test_decide_lifecycle import ALICE, DAY, NS, applied, finding, job, marked, one, policy, t

from janitor import annotations as a
from janitor.decide.lifecycle import Step, plan_lifecycle
from janitor.decide.model import NamespaceView, State
from janitor.decide.reasons import Code
from janitor.decide.selection import Workload
from janitor.policy.model import Action


def kube_janitor_deletes(notes: dict[str, str]) -> bool:
    """kube-janitor's rule for janitor/expires: delete once the time has passed, whatever else is there."""
    value = notes.get(a.EXPIRES)
    return value is not None and a.parse_expires(value) <= NOW


def older(notes: dict[str, str]) -> dict[str, str]:
    """A mark as the janitor wrote it before janitor/deadline: its deadline in janitor/expires."""
    return {(a.EXPIRES if k == a.DEADLINE else k): v for k, v in notes.items()}


def test_a_report_policys_mark_past_its_deadline_is_no_delete_order() -> None:
    report = policy(action=Action.REPORT, warn_before=DAY)
    mark = one(job(), pol=report)
    assert mark.step is Step.MARK and a.EXPIRES not in mark.annotations
    view = applied(job(), mark.annotations)
    warned = applied(view, {a.WARNED_AT: t(NOW), a.WARNED_VIA: f"owner D0ALICE/{NOW.timestamp():.6f}",
                            a.WARNED_OF: f"report {t(NOW + DAY)}", a.WARNED_TO: ALICE.key, a.NOTICE: None})
    later = one(warned, pol=report, now=NOW + 3 * DAY)
    assert later.step is Step.WAIT and later.why.code is Code.REPORT_ONLY
    assert not kube_janitor_deletes(dict(warned.annotations))


def test_an_older_marks_deadline_moves_before_anything_else() -> None:
    notes = older(marked(ago(hours=30), ago(hours=6), ago(hours=30)))
    change = one(job(notes))
    assert change.step is Step.MOVE and change.why.code is Code.DEADLINE_MOVED
    assert change.annotations == {a.DEADLINE: t(ago(hours=6)), a.EXPIRES: None}
    assert change.action is None  # due, but acted on only once the deadline no longer reads as a delete order
    moved = applied(job(notes), change.annotations)
    assert not kube_janitor_deletes(dict(moved.annotations))
    assert one(moved).step is Step.ACT


def test_an_older_marks_expires_someone_else_wrote_moves_to_the_deadline_the_warning_named() -> None:
    notes = older(marked(ago(hours=30), ago(hours=6), ago(hours=30)))
    view = dataclasses.replace(job(notes | {a.EXPIRES: "2099-01-01"}), foreign_marks=frozenset({a.EXPIRES}))
    change = one(view)
    # The warning named ago(hours=6): that is the mark's deadline; the edited janitor/expires goes.
    assert change.annotations == {a.DEADLINE: t(ago(hours=6)), a.EXPIRES: None}


def test_a_replicasets_copy_of_an_older_deadline_is_removed() -> None:
    deployment = job(marked(ago(hours=30), NOW + DAY, ago(hours=30), uid="uid-train"), kind="Deployment")
    copy = job({**deployment.annotations, a.EXPIRES: t(NOW + DAY)}, name="train-5d4f", kind="ReplicaSet",
               owner=deployment)
    found = finding(deployment)
    changes = plan_lifecycle([Workload(deployment.ref, deployment, (copy.ref,), NamespaceView(NS), "Deployment",
                                       owner=ALICE)], [deployment, copy], [found], [policy()], NOW)
    on_copy = [c for c in changes if c.workload == copy.ref]
    assert [(c.step, dict(c.annotations)) for c in on_copy] == [(Step.DROP_COPY, {a.EXPIRES: None})]
    kept = job({k: v for k, v in copy.annotations.items() if k != a.EXPIRES}, name="train-5d4f",
               kind="ReplicaSet", owner=deployment)
    again = plan_lifecycle([Workload(deployment.ref, deployment, (kept.ref,), NamespaceView(NS), "Deployment",
                                     owner=ALICE)], [deployment, kept], [found], [policy()], NOW)
    assert [c.step for c in again if c.workload == kept.ref] == [Step.WAIT]  # the copy itself is the controller's


def test_unmark_removes_an_older_marks_expires_and_never_a_users() -> None:
    old = one(job(older(marked(ago(hours=30), NOW + DAY, ago(hours=30)))), State.CLEAR)
    assert old.step is Step.UNMARK and a.EXPIRES in old.annotations and old.annotations[a.EXPIRES] is None
    users = one(job(marked(ago(hours=30), NOW + DAY, ago(hours=30)) | {a.EXPIRES: "2099-01-01"}), State.CLEAR)
    assert users.step is Step.UNMARK and a.EXPIRES not in users.annotations and a.DEADLINE in users.annotations


def test_a_mark_reads_its_deadline_from_janitor_deadline_or_an_older_marks_expires() -> None:
    new = a.read_mark(marked(ago(hours=1), NOW + DAY) | {a.EXPIRES: "2099-01-01"})
    assert new is not None and not new.legacy and new.deadline == NOW + DAY and not new.problems
    old = a.read_mark(older(marked(ago(hours=1), NOW + DAY)))
    assert old is not None and old.legacy and old.deadline == NOW + DAY and not old.problems
    assert a.mark_keys_on(older(marked(ago(hours=1), NOW + DAY)))[-1] == a.EXPIRES
    assert a.EXPIRES not in a.mark_keys_on(marked(ago(hours=1), NOW + DAY) | {a.EXPIRES: "2099-01-01"})


def test_kube_janitor_running_beside_is_said_in_the_plan_and_the_admin_report() -> None:
    from factories import obj

    from janitor.decide.model import Observation, SafetyLedger
    from janitor.decide.plan import plan

    theirs = dataclasses.replace(obj("cleanup", kind="Deployment", namespace="default"),
                                 labels={"application": "kube-janitor"})
    ours = dataclasses.replace(obj("kube-idle-janitor", kind="Deployment", namespace="kube-idle-janitor"),
                               labels={"app.kubernetes.io/name": "kube-idle-janitor"})
    alone = plan(Observation(NOW, (ours,)), (), SafetyLedger(), NOW)
    assert alone.beside == () and alone.admin_report.empty
    beside = plan(Observation(NOW, (ours, theirs)), (), SafetyLedger(), NOW)
    assert beside.beside == (theirs.ref,)
    [(title, (line,))] = beside.admin_report.sections
    assert title == "Other cleaners acting on the same objects"
    assert "kube-janitor runs beside the janitor (Deployment default/cleanup)" in line
    assert "janitor/deadline" in line and "Beside kube-janitor" in line



def test_kube_janitor_is_found_by_its_running_pods_where_no_deployment_of_it_was_read() -> None:
    from janitor.decide.model import ObjectRef, PodView
    from janitor.decide.neighbours import kube_janitors

    def pod(name: str, labels: dict[str, str], phase: str = "Running", deleting: bool = False) -> PodView:
        return PodView(ObjectRef("Pod", "v1", "default", name, f"uid-{name}"), "1", labels, None, "n1", phase,
                       NOW, 0, deleting=deleting)

    found = [pod("kube-janitor-7d9f8c6b5-x2x9q", {}), pod("cleanup-0", {"app": "kube-janitor"})]
    missed = [pod("kube-janitorial-7d9f8c6b5-x2x9q", {}),  # another name that starts alike
              pod("kube-janitor-extra-7d9f8c6b5-x2x9q", {}),
              pod("cleanup-1", {"team": "kube-janitor"}),  # the value under a key that does not name it
              pod("kube-janitor-7d9f8c6b5-wait1", {}, phase="Pending"),
              pod("cleanup-2", {"application": "kube-janitor"}, deleting=True),
              pod("trainer-0", {"app": "trainer"})]
    assert kube_janitors((), (*missed, *found)) == tuple(sorted((p.ref for p in found), key=str))
    theirs = dataclasses.replace(obj_deployment("kube-janitor"), labels={})
    assert kube_janitors((theirs,), (*missed, *found)) == (theirs.ref,)  # its Deployment, where read


def obj_deployment(name: str):  # type: ignore[no-untyped-def]
    from factories import obj

    return obj(name, kind="Deployment", namespace="default")

# -- found by an adversarial read ----------------------------------------------------------------------------


def everything_foreign(view):  # type: ignore[no-untyped-def]
    """As observe reads an object whose mark keys someone else wrote last (a restore, a reset record)."""
    return dataclasses.replace(view, foreign_marks=frozenset(k for k in a.MARK_READ_KEYS if k in view.annotations))


def test_an_older_marks_expires_never_outlives_its_mark_whoever_wrote_it_last() -> None:
    """An older mark's janitor/expires was never a user's deadline: removing or moving the mark takes
    it along, or the plain path (or kube-janitor) deletes on it the next cycle."""
    from janitor.decide.model import Observation, SafetyLedger
    from janitor.decide.plan import plan

    notes = older(marked(ago(hours=30), ago(hours=6), ago(hours=30)))
    busy = one(everything_foreign(job(notes)), State.CLEAR)
    assert busy.step is Step.UNMARK and busy.annotations.get(a.EXPIRES, "kept") is None
    left = applied(job(notes), busy.annotations)
    assert [x.type for x in plan(Observation(NOW, (left,)), (), SafetyLedger(), NOW).actions] == []
    idle = one(everything_foreign(job(notes)))
    assert idle.step is Step.MOVE and idle.annotations.get(a.EXPIRES, "kept") is None
    restored = everything_foreign(job(notes, name="train2"))  # another uid: a copy, dropped whole
    [drop] = plan_lifecycle([], [restored], [], [policy()], NOW)
    assert drop.step is Step.DROP_COPY and drop.annotations.get(a.EXPIRES, "kept") is None
    assert a.EXPIRES in a.mark_keys_on(notes)  # `janitor unmark` too
