"""Reclaims that hold, or are not tried (decide/held.py; issue: "GitOps undoes the reclaim, and
the janitor says done").

- a workload Argo CD, Flux or KEDA restores (its labels, or the field manager that last wrote its
  replicas) is marked and warned with `report`, and never acted on, unless the policy's
  `lifecycle.reclaimManaged` names the manager; plain Helm and an HPA restore nothing;
- a reclaim other than delete is written with `janitor/reclaimed`, and the ACT change's "done" is
  held back by the acting layer; the next cycle checks it: held, the record goes (CHECK) and the
  "done" goes out; undone, the owner hears who undid it (UNDONE), once, and `janitor/undone` says so;
- a policy does not mark a workload again whose reclaim a controller undid, or that was undone
  twice; one undo by someone the apiserver does not name as a controller lets it try once more;
- the admins' report lists the reclaims undone.
"""

from __future__ import annotations

import dataclasses

from factories import NOW
from test_decide_lifecycle import ALICE, DAY, NS, H, applied, job, marked, one, policy, t

from janitor import annotations as a
from janitor.annotations import NoticeKind, Reclaimed, Undone
from janitor.decide.admin_report import admin_report
from janitor.decide.lifecycle import Step
from janitor.decide.model import Finding, ObjectView, State, TriggerKind
from janitor.decide.reasons import Code
from janitor.decide.selection import managed_by
from janitor.policy.model import Action, Manager

ARGO = {"argocd.argoproj.io/instance": "team-a-notebooks"}


def deployment(notes: dict[str, str] | None = None, *, labels: dict[str, str] | None = None, replicas: int = 1,
               restored_by: str | None = None) -> ObjectView:
    view = job(notes, kind="Deployment")
    return dataclasses.replace(view, labels=labels or {}, replicas=replicas, restored_by=restored_by)


def with_manager(view: ObjectView, pol, state: State = State.FIRES):  # type: ignore[no-untyped-def]
    """One lifecycle change for `view`, its finding naming the tool that manages it as plan does."""
    from test_decide_lifecycle import REASONS, cycle
    found = Finding(TriggerKind.IDLE_GPU, pol.name, pol.mode, view.ref, state, REASONS[state], gpus=1,
                    reclaim_gpu_hours=2.0, owner=ALICE, managed_by=managed_by(view))
    [change] = cycle([view], [found], [pol])
    return change


def test_the_managers_are_read_from_labels_and_from_who_last_wrote_replicas() -> None:
    assert managed_by(deployment(labels=ARGO)) == "Argo CD"
    assert managed_by(deployment(labels={"kustomize.toolkit.fluxcd.io/name": "apps"})) == "Flux"
    assert managed_by(deployment(restored_by="keda-operator")) == "KEDA"
    assert managed_by(deployment(labels={"app.kubernetes.io/managed-by": "Helm"})) == "Helm"
    assert managed_by(deployment(labels={"app.kubernetes.io/managed-by": "Helm"},
                                 restored_by="helm-controller")) == "Flux"
    assert managed_by(deployment(restored_by="kube-controller-manager")) is None  # an HPA: stops at zero


def test_a_workload_gitops_restores_is_warned_of_a_report_and_never_scaled() -> None:
    scale = policy(action=Action.SCALE_TO_ZERO, warn_before=DAY)
    mark = with_manager(deployment(labels=ARGO), scale)
    assert mark.step is Step.MARK and mark.notice is not None
    assert mark.notice.action == "report" and mark.notice.managed_by == "Argo CD"
    intent = a.Intent.parse(str(mark.annotations[a.NOTICE]))
    assert intent is not None and intent.warns_of is not None and intent.warns_of.action == "report"
    warned = deployment(marked(NOW - 2 * DAY, NOW - DAY, NOW - 2 * DAY, action="report") | {a.WARNED_TO: ALICE.key},
                        labels=ARGO)
    due = with_manager(warned, scale)
    assert due.step is Step.WAIT and due.why.code is Code.MANAGED_REPORT_ONLY and due.action is None
    assert "Argo CD restores it, so a scale-to-zero would not hold" in str(due.why)


def test_keda_found_by_its_field_manager_is_reported_too() -> None:
    scale = policy(action=Action.SCALE_TO_ZERO)
    mark = with_manager(deployment(restored_by="keda-operator"), scale)
    assert mark.notice is not None and mark.notice.action == "report" and mark.notice.managed_by == "KEDA"


def test_a_policy_that_reclaims_from_a_manager_acts_and_records_the_reclaim() -> None:
    scale = policy(action=Action.SCALE_TO_ZERO, reclaim_managed=frozenset({Manager.ARGOCD}))
    warned = deployment(marked(NOW - 2 * DAY, NOW - DAY, NOW - 2 * DAY, action="scale-to-zero")
                        | {a.WARNED_TO: ALICE.key}, labels=ARGO, replicas=3)
    due = with_manager(warned, scale)
    assert due.step is Step.ACT and due.action is not None and due.notice is not None
    record = Reclaimed.parse(due.action.record[a.RECLAIMED])
    assert record == Reclaimed("scale-to-zero", NOW, scale.name, 3)
    # Another manager is still reported.
    other = with_manager(dataclasses.replace(warned, labels={}, restored_by="keda-operator"), scale)
    assert other.step is Step.NOTIFY and other.why.code is Code.WARN_AGAIN_ACTION  # warned of a scale: warn again


def test_a_delete_leaves_nothing_to_check() -> None:
    warned = job(marked(NOW - 2 * DAY, NOW - DAY, NOW - 2 * DAY) | {a.WARNED_TO: ALICE.key})
    due = one(warned)
    assert due.step is Step.ACT and due.action is not None and due.action.record == {}


def reclaimed(replicas: int, by: str | None, undone: Undone | None = None) -> ObjectView:
    notes = {a.RECLAIMED: str(Reclaimed("scale-to-zero", NOW, "idle-gpu", 3))}
    if undone is not None:
        notes[a.UNDONE] = str(undone)
    return deployment(notes, replicas=replicas, restored_by=by)


def check(view: ObjectView):  # type: ignore[no-untyped-def]
    from janitor.decide.lifecycle import plan_lifecycle
    from janitor.decide.owners import Owner
    [change] = plan_lifecycle([], [view], [], [policy(action=Action.SCALE_TO_ZERO)], NOW + H,
                              owners={view.ref.uid: Owner(ALICE.kind, ALICE.value)})
    return change


def test_a_reclaim_that_held_is_checked_off_and_announced() -> None:
    change = check(reclaimed(0, None))
    assert change.step is Step.CHECK and change.annotations == {a.RECLAIMED: None} and change.notice is None
    assert change.why.code is Code.RECLAIM_HELD


def test_a_reclaim_a_controller_undid_is_said_once_and_not_tried_again() -> None:
    change = check(reclaimed(1, "argocd-controller"))
    assert change.step is Step.UNDONE and change.notice is not None
    assert change.notice.kind is NoticeKind.UNDONE and change.notice.owner == ALICE
    assert "Argo CD (argocd-controller) undid it" in str(change.why)
    assert "kubectl -n team-a scale deployment/train --replicas=3" == change.notice.resume_command
    undone = Undone.parse(str(change.annotations[a.UNDONE]))
    assert undone is not None and (undone.by, undone.times, undone.policy) == ("argocd-controller", 1, "idle-gpu")
    assert change.annotations[a.RECLAIMED] is None
    # Idle again: the policy does not mark it again.
    after = deployment({a.UNDONE: str(undone)}, replicas=1, restored_by="argocd-controller")
    again = one(after, pol=policy(action=Action.SCALE_TO_ZERO, reclaim_managed=frozenset({Manager.ARGOCD})))
    assert again.step is Step.WAIT and again.why.code is Code.NOT_AGAIN_UNDONE
    # Another policy may.
    other = one(after, pol=policy("idle-cpu", action=Action.SCALE_TO_ZERO, reclaim_managed=frozenset({Manager.ARGOCD})))
    assert other.step is Step.MARK


def test_an_owner_resuming_once_may_be_reclaimed_again_and_twice_not() -> None:
    first = check(reclaimed(2, "kubectl-scale"))
    assert first.step is Step.UNDONE and "policy idle-gpu may mark it again" in str(first.why)
    once = Undone.parse(str(first.annotations[a.UNDONE]))
    assert once is not None and once.times == 1
    assert one(deployment({a.UNDONE: str(once)}), pol=policy(action=Action.SCALE_TO_ZERO)).step is Step.MARK
    second = check(reclaimed(2, "kubectl-scale", once))
    twice = Undone.parse(str(second.annotations[a.UNDONE]))
    assert twice is not None and twice.times == 2
    again = one(deployment({a.UNDONE: str(twice)}), pol=policy(action=Action.SCALE_TO_ZERO))
    assert again.step is Step.WAIT and again.why.code is Code.NOT_AGAIN_UNDONE


def test_a_broken_record_is_removed_and_an_unreadable_state_waits() -> None:
    broken = check(deployment({a.RECLAIMED: "yes"}, replicas=0))
    assert broken.step is Step.CHECK and broken.annotations == {a.RECLAIMED: None}
    unknown = check(dataclasses.replace(reclaimed(0, None), replicas=None))
    assert unknown.step is Step.WAIT and unknown.annotations == {}


def test_the_admins_report_lists_the_reclaims_undone() -> None:
    view = deployment()
    undone = Undone("scale-to-zero", NOW, "idle-gpu", 1, "keda-operator")
    report = admin_report((), (), (), None, undone=((view.ref, undone),))
    [(title, (line,))] = report.sections
    assert title == "Reclaims another controller undid"
    assert f"Deployment/{NS}/train: its scale-to-zero by policy idle-gpu was undone by keda-operator" in line
    assert "lifecycle.reclaimManaged" in line


def test_reclaimed_and_undone_records_read_back() -> None:
    record = Reclaimed("suspend", NOW, "stuck", None)
    assert Reclaimed.parse(str(record)) == record
    assert Reclaimed.parse("scale-to-zero " + t(NOW) + " p 3") == Reclaimed("scale-to-zero", NOW, "p", 3)
    assert Reclaimed.parse("scale-to-zero " + t(NOW) + " p x") is None
    undone = Undone("stop", NOW, "nb", 2, "argocd-controller")
    assert Undone.parse(str(undone)) == undone
    assert Undone.parse(str(Undone("stop", NOW, "nb", 1))) == Undone("stop", NOW, "nb", 1, "")
    assert applied(job(), {a.RECLAIMED: str(record)}).annotations[a.RECLAIMED] == str(record)


def test_a_replicasets_copy_of_the_records_is_never_checked_or_listed() -> None:
    """The Deployment controller copies janitor/reclaimed and janitor/undone onto its ReplicaSet (and
    never removes them): the copy is the Deployment's, never a reclaim of the ReplicaSet."""
    from janitor.decide.lifecycle import plan_lifecycle
    from janitor.decide.model import Observation, SafetyLedger
    from janitor.decide.plan import plan

    top = deployment({a.RECLAIMED: str(Reclaimed("scale-to-zero", NOW, "idle-gpu", 1))}, replicas=0)
    undone = str(Undone("scale-to-zero", NOW, "idle-gpu", 1, "argocd-controller"))
    copy = dataclasses.replace(job({**top.annotations, a.UNDONE: undone}, name="train-5d4f", kind="ReplicaSet",
                                   owner=top), replicas=1)
    changes = plan_lifecycle([], [top, copy], [], [policy(action=Action.SCALE_TO_ZERO)], NOW + H)
    assert [(c.workload.kind, c.step) for c in changes] == [("Deployment", Step.CHECK)]
    assert plan(Observation(NOW, (copy,)), (), SafetyLedger(), NOW).admin_report.empty


# -- found by an adversarial read ----------------------------------------------------------------------------


def test_a_helm_label_does_not_hide_the_gitops_tool_that_applies_the_chart() -> None:
    helm = {"app.kubernetes.io/managed-by": "Helm"}
    assert managed_by(deployment(labels=helm | ARGO)) == "Argo CD"
    assert managed_by(deployment(labels=helm | {"helm.toolkit.fluxcd.io/name": "apps"})) == "Flux"
    view = dataclasses.replace(deployment(labels=helm), annotations={"argocd.argoproj.io/tracking-id": "app:x"})
    assert managed_by(view) == "Argo CD"


def test_a_pods_helm_label_does_not_hide_its_deployments_gitops_tool() -> None:
    from factories import obj as make

    from janitor.decide.model import ContainerView, NamespaceView, ObjectRef, Observation, OwnerRef, PodView
    from janitor.decide.rails import Rails
    from janitor.decide.selection import workloads

    top = deployment(labels=ARGO)
    rs = make("train-5d4f", kind="ReplicaSet", namespace=NS, owner=top, uid="uid-rs")
    rs = dataclasses.replace(rs, labels={"app.kubernetes.io/managed-by": "Helm"})
    pod = PodView(ObjectRef("Pod", "v1", NS, "train-5d4f-x", "uid-pod"), "1", {"app.kubernetes.io/managed-by": "Helm"},
                  OwnerRef("ReplicaSet", "apps/v1", "train-5d4f", "uid-rs"), node="n", phase="Running", started=NOW,
                  gpus=1, containers=(ContainerView("main", 1.0),))
    [w] = workloads(Observation(NOW, (top, rs), (pod,), {NS: NamespaceView(NS)}), Rails())
    assert w.managed_by == "Argo CD"


def test_records_someone_else_wrote_are_not_the_janitors() -> None:
    """A forged or copied janitor/undone blocks nothing; a forged janitor/reclaimed is no reclaim."""
    undone = str(Undone("scale-to-zero", NOW, "idle-gpu", 2, "argocd-controller"))
    forged = dataclasses.replace(deployment({a.UNDONE: undone}), foreign_marks=frozenset({a.UNDONE}))
    assert one(forged, pol=policy(action=Action.SCALE_TO_ZERO)).step is Step.MARK
    fake = dataclasses.replace(deployment({a.RECLAIMED: f"scale-to-zero {t(NOW)} idle-gpu 1"}, replicas=1),
                               foreign_marks=frozenset({a.RECLAIMED}))
    assert one(fake, pol=policy(action=Action.SCALE_TO_ZERO)).step is Step.MARK  # no "Not held" about it


def test_a_reclaim_is_announced_only_once_it_held_long_enough_for_a_slow_sync() -> None:
    """Flux syncs every 10 minutes by default: a scale-to-zero checked a minute on proves nothing yet."""
    from janitor.decide.held import HELD_AFTER
    from janitor.decide.lifecycle import plan_lifecycle
    from janitor.decide.owners import Owner

    view = reclaimed(0, None)
    owners = {view.ref.uid: Owner(ALICE.kind, ALICE.value)}
    [early] = plan_lifecycle([], [view], [], [policy(action=Action.SCALE_TO_ZERO)], NOW + 60 * (H / 3600),
                             owners=owners)
    assert early.step is Step.WAIT and early.annotations == {}
    [late] = plan_lifecycle([], [view], [], [policy(action=Action.SCALE_TO_ZERO)], NOW + HELD_AFTER, owners=owners)
    assert late.step is Step.CHECK


def test_a_reclaim_that_held_resets_the_count_of_undos() -> None:
    once = Undone("scale-to-zero", NOW - 30 * DAY, "idle-gpu", 1, "kubectl-scale")
    held = check(reclaimed(0, None, once))
    assert held.step is Step.CHECK and held.annotations == {a.RECLAIMED: None, a.UNDONE: None}
