"""Scheduler-aware suspends (issue 26, item 7): Kueue owns the `spec.suspend` of what it admits.

Aspects covered:
- the endings table: a suspend of a workload Kueue admits (its queue label, or a Workload found
  owned by it) is carried out through its Kueue Workload (`spec.active: false`), checked there, and
  undone there (`kubectl patch workloads.kueue.x-k8s.io/NAME ... active: true`); a RayCluster not
  under Kueue is suspended through its own `spec.suspend`;
- where the patch goes (`held.through`): the workload itself, the Workload found, or nowhere (fail
  closed, with the problem) when Kueue admits it and its Workload was not found or not read;
- the lifecycle: at the deadline the action names the Workload, and its "done" note the Workload's
  resume command; without the Workload it waits, and never suspends the Job itself;
- the next cycle's check reads the Workload: active again is undone; deactivated holds once Kueue
  has stopped the Job, and before that (or with no Kueue controller) neither "done" nor "undone" is
  said; not read is unchecked;
- observing: the version discovery picks (v1beta2, else v1beta1), the Workload found by its
  controller owner's uid, and what is not served, forbidden or missing becomes a problem on the view,
  never an exception; which views are looked up at all;
- acting: the Workload is patched (guarded by its uid) before the record goes on the Job, the Job's
  own spec is never touched, and a refused Workload patch writes no record; a Workload patch whose
  answer was lost is read again: deactivated, the record follows; still active, nothing is done.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from factories import NOW
from test_decide_lifecycle import ALICE, DAY, H, M, job, marked, one, policy

from janitor import annotations as a
from janitor import errors, kubeapi
from janitor.act import kube
from janitor.annotations import Reclaimed
from janitor.decide import held
from janitor.decide.lifecycle import Step, plan_lifecycle
from janitor.decide.model import Action as PlannedAction
from janitor.decide.model import ActionType, ObjectRef, ObjectView, ResourceKind, TriggerKind
from janitor.decide.notices import resume_command
from janitor.decide.owners import Owner
from janitor.decide.reasons import Code, text
from janitor.observe import kueue
from janitor.policy.endings import KUEUE_QUEUE_LABEL, Action, PatchTarget, Queued
from janitor.policy.model import Mode

QUEUE = {KUEUE_QUEUE_LABEL: "team-a-gpus"}
FOUND = Queued("v1beta2", "job-train-3f2a1", "uid-wl", active=True)
SUSPEND = policy(action=Action.SUSPEND)


def kjob(notes: Mapping[str, str] | None = None, *, labels: Mapping[str, str] = QUEUE,
         queued: Queued | None = FOUND, kind: str = "Job") -> ObjectView:
    return dataclasses.replace(job(notes, kind=kind), labels=dict(labels), queued=queued)


def due_notes() -> dict[str, str]:
    return marked(NOW - 2 * DAY, NOW - DAY, NOW - 2 * DAY, action="suspend") | {a.WARNED_TO: ALICE.key}


# -- the endings table ----------------------------------------------------------------------------------

def test_a_suspend_of_a_workload_kueue_admits_goes_through_its_workload() -> None:
    ending = Action.SUSPEND.ending
    assert ending.on(job()) is ending and ending.on(job()).target is PatchTarget.WORKLOAD
    through = ending.on(kjob())
    assert through is ending.queued and through is not None and through.target is PatchTarget.KUEUE_WORKLOAD
    assert through.patch is not None and through.patch(NOW) == {"spec": {"active": False}}
    assert through.done == "suspended" and through.action is Action.SUSPEND
    # Unlabelled, but a Workload was found owned by it (Kueue managing Jobs without a queue name).
    assert ending.on(kjob(labels={})) is through
    assert ending.on(kjob(queued=None)) is through  # the label alone says Kueue admits it


def test_it_holds_on_the_workload_not_on_the_jobs_own_suspend() -> None:
    ending = Action.SUSPEND.ending
    off = dataclasses.replace(FOUND, active=False)
    assert ending.held(dataclasses.replace(kjob(queued=off), suspended=True)) is True
    assert ending.held(kjob(queued=off)) is None  # Kueue has not stopped the Job yet: neither held nor undone
    assert ending.held(dataclasses.replace(kjob(queued=FOUND), suspended=True)) is False  # active again
    assert ending.held(kjob(queued=None)) is None  # not read: cannot tell
    assert ending.held(kjob(queued=Queued("v1beta2", problem="forbidden"))) is None
    assert ending.held(dataclasses.replace(job(), suspended=True)) is True  # no Kueue: its own spec.suspend


def test_the_resume_command_is_the_workload_patch() -> None:
    view = kjob()
    assert resume_command(view.ref, Action.SUSPEND, None, seen=view) == (
        "kubectl -n team-a patch workloads.kueue.x-k8s.io/job-train-3f2a1 --type=merge "
        "-p '{\"spec\":{\"active\":true}}'")
    unknown = kjob(queued=None)
    assert "workloads.kueue.x-k8s.io/<the Workload of job/train>" in resume_command(
        unknown.ref, Action.SUSPEND, None, seen=unknown)
    assert resume_command(job().ref, Action.SUSPEND, None, seen=job()) == \
        "kubectl -n team-a patch job/train --type=merge -p '{\"spec\":{\"suspend\":false}}'"


def test_a_raycluster_outside_kueue_is_suspended_through_its_own_spec() -> None:
    ray = dataclasses.replace(job(kind="RayCluster"), ref=ObjectRef("RayCluster", "ray.io/v1", "team-a", "rc", "u"))
    assert Action.SUSPEND.applies_to("RayCluster")
    ending = Action.SUSPEND.ending.on(ray)
    assert ending.target is PatchTarget.WORKLOAD and ending.patch is not None
    assert ending.patch(NOW) == {"spec": {"suspend": True}}
    assert resume_command(ray.ref, Action.SUSPEND, None, seen=ray) == \
        "kubectl -n team-a patch raycluster.ray.io/rc --type=merge -p '{\"spec\":{\"suspend\":false}}'"
    queued = dataclasses.replace(ray, labels=QUEUE, queued=FOUND)
    assert Action.SUSPEND.ending.on(queued).target is PatchTarget.KUEUE_WORKLOAD  # under Kueue: its Workload


# -- where the patch goes -------------------------------------------------------------------------------

def test_the_target_is_the_workload_found_or_nothing() -> None:
    assert held.through(Action.SUSPEND, job()) == (None, None)
    assert held.through(Action.DELETE, kjob()) == (None, None)  # a delete is the Job's own
    via, refused = held.through(Action.SUSPEND, kjob())
    assert refused is None and via == ObjectRef("Workload", "kueue.x-k8s.io/v1beta2", "team-a", "job-train-3f2a1",
                                                "uid-wl")
    for queued, problem in ((None, "its Workload was not read"),
                            (Queued("v1beta1", problem="no Kueue Workload is owned by it"), "no Kueue Workload"),
                            (Queued(problem="Kueue's API is not served"), "not served")):
        via, refused = held.through(Action.SUSPEND, kjob(queued=queued))
        assert via is None and refused is not None and refused.code is Code.KUEUE_UNREACHED
        assert problem in str(refused) and "not acted on" in str(refused)


# -- the lifecycle --------------------------------------------------------------------------------------

def test_at_the_deadline_the_action_names_the_workload_and_its_resume() -> None:
    change = one(kjob(due_notes()), pol=SUSPEND)
    assert change.step is Step.ACT and change.action is not None
    assert change.action.via is not None and change.action.via.name == "job-train-3f2a1"
    assert change.notice is not None and "workloads.kueue.x-k8s.io/job-train-3f2a1" in change.notice.resume_command
    plain = one(job(due_notes()), pol=SUSPEND)
    assert plain.action is not None and plain.action.via is None


@pytest.mark.parametrize("queued", [None, Queued("v1beta2", problem="its namespace's Kueue Workloads could not be "
                                                                    "listed (forbidden)")], ids=["unread", "forbidden"])
def test_without_its_workload_nothing_is_done(queued: Queued | None) -> None:
    change = one(kjob(due_notes(), queued=queued), pol=SUSPEND)
    assert change.step is Step.WAIT and change.action is None and change.why.code is Code.KUEUE_UNREACHED
    from test_consent import released, warned_of_suspend
    pressed = dataclasses.replace(released(warned_of_suspend()), labels=QUEUE, queued=queued)
    change = one(pressed, pol=SUSPEND)  # the owner pressed Release: still not without the Workload
    assert change.step is Step.WAIT and change.action is None and change.why.code is Code.KUEUE_UNREACHED
    act = one(dataclasses.replace(pressed, queued=FOUND), pol=SUSPEND)
    assert act.step is Step.ACT and act.action is not None and act.action.via is not None


def test_the_warning_names_the_workloads_resume_command() -> None:
    warned = one(kjob(marked(NOW - H, NOW + DAY)), pol=SUSPEND)
    assert warned.step is Step.NOTIFY and warned.notice is not None
    assert "patch workloads.kueue.x-k8s.io/job-train-3f2a1" in warned.notice.resume_command


def _check(view: ObjectView, *, at: Any = NOW + H) -> Any:
    [change] = plan_lifecycle([], [view], [], [SUSPEND], at, owners={view.ref.uid: Owner(ALICE.kind, ALICE.value)})
    return change


def test_the_next_cycle_checks_the_reclaim_on_the_workload() -> None:
    record = {a.RECLAIMED: str(Reclaimed("suspend", NOW, "idle-gpu"))}
    deactivated = dataclasses.replace(FOUND, active=False)
    slow = _check(kjob(record, queued=deactivated))  # the Job not suspended yet: Kueue is slower
    assert slow.step is Step.WAIT and slow.why.code is Code.RECLAIM_UNCHECKED and slow.notice is None
    stopped = dataclasses.replace(kjob(record, queued=deactivated), suspended=True)
    holding = _check(stopped, at=NOW + 5 * M)
    assert holding.step is Step.WAIT and holding.why.code is Code.RECLAIM_HOLDING
    assert _check(stopped, at=NOW + DAY).step is Step.CHECK
    undone = _check(kjob(record, queued=FOUND))
    assert undone.step is Step.UNDONE and undone.notice is not None
    assert "workloads.kueue.x-k8s.io/job-train-3f2a1" in undone.notice.resume_command
    unread = _check(dataclasses.replace(kjob(record, queued=None), suspended=True))
    assert unread.step is Step.WAIT and unread.why.code is Code.RECLAIM_UNCHECKED


# -- observing ------------------------------------------------------------------------------------------

def test_the_version_read_is_v1beta2_else_v1beta1() -> None:
    def group(*versions: str) -> dict[str, Any]:
        return {"versions": [{"groupVersion": f"kueue.x-k8s.io/{v}", "version": v} for v in versions]}

    assert kueue.version(group("v1beta2", "v1beta1")) == "v1beta2"
    assert kueue.version(group("v1beta1", "v1beta2")) == "v1beta2"
    assert kueue.version(group("v1beta1")) == "v1beta1"
    assert kueue.version(group("v1alpha1")) is None and kueue.version({}) is None


def _workload(name: str, owner_uid: str, *, controller: bool = True, active: Any = "absent") -> dict[str, Any]:
    spec: dict[str, Any] = {"queueName": "team-a-gpus"}
    if active != "absent":
        spec["active"] = active
    return {"metadata": {"name": name, "uid": f"uid-{name}", "namespace": "team-a", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": owner_uid, "controller": controller}]},
        "spec": spec}


def test_the_workload_is_the_one_its_controller_owner_uid_names() -> None:
    items = [_workload("other", "uid-other"), _workload("mine", "uid-train"),
             _workload("borrowed", "uid-train", controller=False)]
    assert kueue.owned(items, "uid-train", "v1beta2") == Queued("v1beta2", "mine", "uid-mine", active=True)
    assert kueue.owned(items, "uid-none", "v1beta2") is None
    off = kueue.owned([_workload("mine", "uid-train", active=False)], "uid-train", "v1beta1")
    assert off == Queued("v1beta1", "mine", "uid-mine", active=False)
    two = kueue.owned([_workload("a", "uid-train"), _workload("b", "uid-train")], "uid-train", "v1beta2")
    assert two is not None and not two.found and "2 Kueue Workloads" in two.problem
    odd = kueue.owned([_workload("mine", "uid-train", active="no")], "uid-train", "v1beta2")
    assert odd is not None and not odd.found and odd.active is None


class FakeApi:
    """The apiserver as `kubeapi.request` sees it: answers by path, errors by path, requests recorded."""

    def __init__(self, answers: Mapping[str, Any], failing: Mapping[str, errors.KubeError] | None = None) -> None:
        self.answers, self.failing = dict(answers), dict(failing or {})
        self.sent: list[tuple[str, str, Any, list[Any]]] = []

    def request(self, api: object, method: str, path: str, *, query: Any = (), body: Any = None,
                **_: Any) -> SimpleNamespace:
        self.sent.append((method, path, body, list(query)))
        for prefix, error in self.failing.items():
            if path.startswith(prefix):
                raise error
        return SimpleNamespace(data=json.dumps(self.answers.get(path, {})).encode(), status=200, headers={})


DISCOVERY = {"versions": [{"version": "v1beta2"}, {"version": "v1beta1"}]}
LIST_PATH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads"


def _attach(monkeypatch: pytest.MonkeyPatch, fake: FakeApi, views: list[ObjectView], *, every: bool = False
            ) -> dict[str, Queued | None]:
    monkeypatch.setattr(kubeapi, "request", fake.request)
    return {v.ref.name: v.queued for v in kueue.attach(None, views, every=every)}  # type: ignore[arg-type]


def test_only_marked_workloads_are_looked_up_in_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi({"/apis/kueue.x-k8s.io": DISCOVERY, LIST_PATH: {"items": [_workload("job-train", "uid-train")]}})
    quiet = dataclasses.replace(job(name="quiet"), labels=QUEUE)  # queued, no mark: nothing is needed of it yet
    assert _attach(monkeypatch, fake, [quiet]) == {"quiet": None}
    assert fake.sent == []
    # A marked Job without Kueue's label is looked up too: Kueue may admit Jobs without one, and its
    # warning must name the Workload its suspend would go through. None is found for it here.
    assert _attach(monkeypatch, fake, [job(due_notes(), name="plain")]) == {"plain": None}
    assert [p for _, p, _, _ in fake.sent] == ["/apis/kueue.x-k8s.io", LIST_PATH]
    fake.sent.clear()
    found = _attach(monkeypatch, fake, [kjob(due_notes(), queued=None)])
    assert found == {"train": Queued("v1beta2", "job-train", "uid-job-train", active=True)}
    assert [p for _, p, _, _ in fake.sent] == ["/apis/kueue.x-k8s.io", LIST_PATH]


def test_in_a_suspend_policys_namespace_a_queued_workload_is_looked_up_before_its_mark(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from janitor.decide.model import NamespaceView
    namespaces = {"team-a": NamespaceView("team-a"), "team-b": NamespaceView("team-b")}
    assert kueue.suspending([SUSPEND], namespaces) == {"team-a", "team-b"}  # the helper's policy matches all
    assert kueue.suspending([policy(action=Action.DELETE), policy(action=Action.SUSPEND, mode=Mode.SHADOW)],
                            namespaces) == frozenset()
    fake = FakeApi({"/apis/kueue.x-k8s.io": DISCOVERY, LIST_PATH: {"items": [_workload("job-train", "uid-train")]}})
    quiet = kjob(queued=None)  # queued, not marked yet: its first warning names the Workload
    monkeypatch.setattr(kubeapi, "request", fake.request)
    [seen] = kueue.attach(None, [quiet], namespaces={"team-a"})  # type: ignore[arg-type]
    assert seen.queued is not None and seen.queued.name == "job-train"
    assert kueue.attach(None, [quiet], namespaces={"team-b"}) == (quiet,)  # type: ignore[arg-type]
    record = job({a.RECLAIMED: str(Reclaimed("suspend", NOW, "idle-gpu"))})  # unlabelled, reclaimed: checked
    assert kueue.wanted(record) and not kueue.wanted(job()) and kueue.wanted(job(), every=True)
    assert not kueue.wanted(dataclasses.replace(kjob(), deleting=True), every=True)
    assert not kueue.wanted(job(kind="Deployment"), every=True)


def test_before_acting_any_job_is_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi({"/apis/kueue.x-k8s.io": DISCOVERY, LIST_PATH: {"items": [_workload("job-train", "uid-train")]}})
    found = _attach(monkeypatch, fake, [job(), job(name="other")], every=True)
    assert found["train"] is not None and found["train"].name == "job-train"  # unlabelled, but Kueue admits it
    assert found["other"] is None  # owned by none and unlabelled: Kueue does not admit it


def test_what_cannot_be_read_is_a_problem_on_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    views = [kjob(due_notes(), queued=None), job(due_notes(), name="plain")]
    forbidden = errors.Forbidden("workloads.kueue.x-k8s.io is forbidden", status=403)
    listed = _attach(monkeypatch, FakeApi({"/apis/kueue.x-k8s.io": DISCOVERY}, {LIST_PATH: forbidden}), views,
                     every=True)
    assert listed["train"] is not None and "could not be listed" in listed["train"].problem
    assert listed["plain"] is not None and not listed["plain"].found  # may be Kueue's: unknown, not "none"
    absent = _attach(monkeypatch, FakeApi({}, {"/apis/kueue.x-k8s.io": errors.NotFound("nope", status=404)}),
                     views, every=True)
    assert absent["train"] == Queued(problem="Kueue's API is not served") and absent["plain"] is None
    old = _attach(monkeypatch, FakeApi({"/apis/kueue.x-k8s.io": {"versions": [{"version": "v1alpha1"}]}}), views)
    assert old["train"] is not None and "serves none of v1beta2, v1beta1" in old["train"].problem
    empty = _attach(monkeypatch, FakeApi({"/apis/kueue.x-k8s.io": DISCOVERY, LIST_PATH: {"items": []}}), views)
    assert empty["train"] == Queued("v1beta2", problem="no Kueue Workload is owned by it")


def test_v1beta1_is_read_where_only_it_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    path = "/apis/kueue.x-k8s.io/v1beta1/namespaces/team-a/workloads"
    fake = FakeApi({"/apis/kueue.x-k8s.io": {"versions": [{"version": "v1beta1"}]},
                    path: {"items": [_workload("job-train", "uid-train", active=False)]}})
    found = _attach(monkeypatch, fake, [kjob(due_notes(), queued=None)])
    assert found["train"] == Queued("v1beta1", "job-train", "uid-job-train", active=False)


# -- acting ---------------------------------------------------------------------------------------------

JOBS = ResourceKind("batch", "v1", "Job", "jobs")
WL = ObjectRef("Workload", "kueue.x-k8s.io/v1beta1", "team-a", "job-train-3f2a1", "uid-wl")


def _planned(via: ObjectRef | None = WL) -> PlannedAction:
    return PlannedAction(ActionType.SUSPEND, ObjectRef("Job", "batch/v1", "team-a", "train", "uid-train"), "7", "p",
                         TriggerKind.IDLE_GPU, "lifecycle", "IdleReclaimed", text("due"),
                         record={a.RECLAIMED: "r"}, via=via)


def test_the_workload_is_switched_first_and_the_job_only_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi({})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    result = kube.apply(None, _planned(), kind=JOBS)  # type: ignore[arg-type]
    assert result.outcome is kube.Outcome.DONE and "through Workload/team-a/job-train-3f2a1" in result.detail
    job_path = "/apis/batch/v1/namespaces/team-a/jobs/train"
    wl_path = "/apis/kueue.x-k8s.io/v1beta1/namespaces/team-a/workloads/job-train-3f2a1"
    sent = [(path, body, ("dryRun", "All") in query) for _, path, body, query in fake.sent]
    assert [(p, dry) for p, _, dry in sent] == [(job_path, True), (wl_path, True),
                                                 ("/api/v1/namespaces/team-a/events", False),
                                                 (wl_path, False), (job_path, False)]
    notes = {**{k: None for k in a.MARK_KEYS}, a.RECLAIMED: "r"}
    assert sent[0][1] == {"metadata": {"annotations": notes, "uid": "uid-train", "resourceVersion": "7"}}
    assert sent[3][1] == {"spec": {"active": False}, "metadata": {"uid": "uid-wl"}}
    assert sent[4][1] == {"metadata": {"uid": "uid-train", "annotations": notes}}  # no spec: Kueue owns it
    assert all("spec" not in body for path, body, _ in sent if path == job_path)


def test_a_refused_workload_patch_writes_no_record(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi({}, {"/apis/kueue.x-k8s.io/": errors.Forbidden("cannot patch workloads", status=403)})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    result = kube.apply(None, _planned(), kind=JOBS)  # type: ignore[arg-type]
    assert result.outcome is kube.Outcome.FORBIDDEN
    assert [(m, p) for m, p, _, q in fake.sent if ("dryRun", "All") not in q] == []  # nothing for real, no Event


@pytest.mark.parametrize(("active", "outcome"), [(False, kube.Outcome.DONE), (True, kube.Outcome.FAILED)])
def test_a_workload_patch_whose_answer_was_lost_is_read_again(monkeypatch: pytest.MonkeyPatch, active: bool,
                                                              outcome: kube.Outcome) -> None:
    wl_path = "/apis/kueue.x-k8s.io/v1beta1/namespaces/team-a/workloads/job-train-3f2a1"
    fake = FakeApi({wl_path: {"metadata": {"name": WL.name, "uid": "uid-wl"}, "spec": {"active": active}}})
    answered = fake.request

    def request(api: object, method: str, path: str, *, query: Any = (), body: Any = None, **kw: Any) -> Any:
        if method == "PATCH" and path == wl_path and ("dryRun", "All") not in list(query):
            fake.sent.append((method, path, body, list(query)))
            raise errors.ServerError("read timed out", status=None)
        return answered(api, method, path, query=query, body=body, **kw)

    monkeypatch.setattr(kubeapi, "request", request)
    result = kube.apply(None, _planned(), kind=JOBS)  # type: ignore[arg-type]
    assert result.outcome is outcome, result.detail
    real = [(m, p) for m, p, _, q in fake.sent if ("dryRun", "All") not in q and "/events" not in p]
    job_path = "/apis/batch/v1/namespaces/team-a/jobs/train"
    assert real == [("PATCH", wl_path), ("GET", wl_path)] + ([("PATCH", job_path)] if not active else [])


def test_a_dry_run_probes_both_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi({})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    result = kube.apply(None, _planned(), kind=JOBS, dry_run=True)  # type: ignore[arg-type]
    assert result.outcome is kube.Outcome.DONE and result.detail.startswith("dry run")
    assert len(fake.sent) == 2 and all(("dryRun", "All") in q for _, _, _, q in fake.sent)


def test_a_suspend_through_kueue_without_a_workload_named_is_refused() -> None:
    with pytest.raises(ValueError, match="caller bug"):
        kube._reclaim(None, dataclasses.replace(_planned(), also=(WL,)), kind=JOBS,  # type: ignore[arg-type]
                      dry_run=True, component="t")
