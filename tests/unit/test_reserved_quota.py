"""Quota held by a Kueue Workload with no pods (issue 29, item 2): the reservedQuota trigger.

Aspects covered:
- reading a Workload's status: since when it holds quota (the later of QuotaReserved and Admitted
  that are True), Evicted, the GPUs its admission counts, and every odd shape a problem (never a
  time made up);
- the verdict: fires after `after` with no pod running or waiting; clear while any pod runs, waits
  or is Terminating, while it holds no quota, or is deactivated; unknown when its status or its
  chain cannot be read, or a pod of its namespace with unreadable owners may be its; a Job of a
  CronJob that `--cronjob-target cronjob` makes the workload is not judged;
- which policy governs a workload with no pods: namespaces, namespace selector and kinds hold, a
  pod selector never selects it, an opt-out is honoured;
- the lifecycle: marked and warned; at the deadline an enforcing suspend policy deactivates its
  Workload (the action names it), a report policy does nothing; a pod that came back unmarks it;
- policies: reservedQuota reports unless told to suspend, never deletes, takes a policy of its own;
- properties over generated Kueue-admitted workloads: never fires with a pod that runs or waits,
  with an unread status, or before `after`; never judged outside its policy's namespaces.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from factories import NOW
from hypothesis import given, settings
from hypothesis import strategies as st

from janitor import annotations as a
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    ActionType,
    NamespaceView,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodView,
    State,
    TriggerKind,
)
from janitor.decide.plan import PlanSettings, decide
from janitor.decide.reasons import Code
from janitor.decide.selection import CronJobMode
from janitor.observe import kueue
from janitor.policy import load
from janitor.policy.endings import Action, Queued
from janitor.policy.model import LabelSelector, Lifecycle, Match, Mode, Namespaces, Policy, ReservedQuota

H = datetime.timedelta(hours=1)
NS = "ml"
OWNER = {"janitor/owner": "alice@lab.example"}


def workload_of(uid: str, *, since: datetime.datetime | None = NOW - 3 * H, active: bool = True,
                problem: str = "", evicted: bool = False) -> Queued:
    return Queued("v1beta2", f"job-{uid[:5]}", f"wl-{uid}", active, reserved_since=since, evicted=evicted,
                  status_problem=problem, gpus=8)


def kjob(name: str = "train", *, queued: Queued | None = None, notes: Mapping[str, str] | None = None,
         namespace: str = NS, controller: ObjectView | None = None, deleting: bool = False,
         suspended: bool = True) -> ObjectView:
    """A Job Kueue admitted; suspended by default, as Kueue leaves one it evicted (kueue#14811)."""
    uid = f"uid-{name}"
    return ObjectView(ObjectRef("Job", "batch/v1", namespace, name, uid), "10", NOW - 5 * H,
                      {**OWNER, **(notes or {})}, {}, deleting,
                      OwnerRef(controller.ref.kind, controller.ref.api_version, controller.ref.name,
                               controller.ref.uid) if controller else None,
                      suspended=suspended, queued=queued if queued is not None else workload_of(uid))


def pod_of(owner: ObjectView, phase: str = "Running", *, deleting: bool = False, name: str = "",
           controller: OwnerRef | None = None) -> PodView:
    ctrl = controller or OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid)
    return PodView(ObjectRef("Pod", "v1", owner.ref.namespace, name or f"{owner.ref.name}-x", str(uuid.uuid4())), "1",
                   {"app": "train"}, ctrl, "node-1", phase, NOW - 4 * H, 1, deleting=deleting)


def quota_policy(*, mode: Mode = Mode.ENFORCE, action: Action = Action.REPORT, after: datetime.timedelta = 2 * H,
                 match: Match | None = None, name: str = "reserved-quota") -> Policy:
    return Policy(name, (ReservedQuota(after=after),), mode=mode,
                  match=match or Match(namespaces=Namespaces(include=(NS,))),
                  lifecycle=Lifecycle(action=action, warn_before=4 * H))


def observed(objects: Sequence[ObjectView], pods: Sequence[PodView] = (), *,
             namespaces: Sequence[str] = (NS,)) -> Observation:
    return Observation(NOW, tuple(objects), tuple(pods), {n: NamespaceView(n) for n in namespaces})


def quota(objects: Sequence[ObjectView], pods: Sequence[PodView] = (), policies: Sequence[Policy] | None = None,
          settings_: PlanSettings = PlanSettings()) -> Any:
    return decide(observed(objects, pods), policies or [quota_policy()], NOW, settings_)


def verdicts(decision: Any) -> dict[str, tuple[State, Any]]:
    return {f.subject.name: (f.state, f.reason) for f in decision.findings if f.trigger is TriggerKind.RESERVED_QUOTA}


# -- reading a Workload's status --------------------------------------------------------------------------

def _status(*conditions: tuple[str, str, str | None], usage: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"conditions": [{"type": k, "status": s, **({"lastTransitionTime": t} if t else {})}
                                          for k, s, t in conditions]}
    if usage is not None:
        out["admission"] = {"clusterQueue": "cq", "podSetAssignments": usage}
    return out


def test_it_holds_quota_since_the_later_of_its_true_conditions() -> None:
    utc = datetime.timezone.utc
    held = kueue.reservation(_status(("QuotaReserved", "True", "2026-11-23T08:00:00Z"),
                                     ("Admitted", "True", "2026-11-23T08:00:05Z"),
                                     ("Evicted", "True", "2026-11-23T09:00:00Z"),
                                     ("PodsReady", "False", "2026-11-23T08:50:00Z")))
    assert held.since == datetime.datetime(2026, 11, 23, 8, 0, 5, tzinfo=utc)
    assert held.evicted and held.problem == "" and not held.finished and held.elsewhere == ""
    assert held.stopped_at == datetime.datetime(2026, 11, 23, 9, tzinfo=utc)  # the later of the two
    # Admitted False, QuotaReserved True: held since the reservation.
    held = kueue.reservation(_status(("QuotaReserved", "True", "2026-11-23T08:00:00Z"),
                                     ("Admitted", "False", "2026-11-23T08:30:00Z")))
    assert held.since == datetime.datetime(2026, 11, 23, 8, 0, tzinfo=utc) and not held.evicted
    assert kueue.reservation(_status(("QuotaReserved", "False", "2026-11-23T08:00:00Z"))) == kueue.Reservation()
    assert kueue.reservation(None) == kueue.Reservation()  # a Workload Kueue has not looked at yet
    assert kueue.reservation({}) == kueue.Reservation()
    assert kueue.reservation(_status(("Finished", "True", "2026-11-23T09:00:00Z"))).finished


def test_pods_that_may_run_elsewhere_or_be_on_their_way_are_said() -> None:
    remote = kueue.reservation({"clusterName": "worker-1", "conditions": []})
    assert remote.elsewhere == "MultiKueue runs it on cluster worker-1"
    checks = kueue.reservation({"admissionChecks": [{"name": "dws-prov", "state": "Pending"}], "conditions": []})
    assert checks.elsewhere.startswith("it has admission checks (dws-prov (Pending))")
    topology = kueue.reservation({"admission": {"podSetAssignments": [{"name": "main",
                                                                       "delayedTopologyRequest": "Pending"}]}})
    assert topology.elsewhere == "its topology-aware placement is still pending"


@pytest.mark.parametrize("status", [
    _status(("QuotaReserved", "True", None)),
    _status(("Admitted", "True", "yesterday")),
    _status(("QuotaReserved", "True", "2026-11-23T08:00:00")),  # no zone: not a time the apiserver writes
    _status(("QuotaReserved", "True", "2026-11-23T08:00:00Z"), ("QuotaReserved", "False", "2026-11-23T09:00:00Z")),
    {"conditions": "QuotaReserved"},
    {"conditions": [["QuotaReserved", "True"]]},
    ["conditions"],
])
def test_a_status_of_an_odd_shape_is_a_problem_never_a_time(status: Any) -> None:
    held = kueue.reservation(status)
    assert held.since is None and held.problem


def test_the_gpus_its_admission_counts_are_read_where_whole() -> None:
    usage = [{"name": "main", "resourceUsage": {"nvidia.com/gpu": "8", "cpu": "32"}},
             {"name": "workers", "resourceUsage": {"nvidia.com/gpu": "16"}},
             {"name": "odd", "resourceUsage": {"nvidia.com/gpu": "500m"}}]
    assert kueue.admitted_gpus(_status(usage=usage)) == 24
    assert kueue.admitted_gpus(_status()) == 0 and kueue.admitted_gpus(None) == 0
    assert kueue.admitted_gpus({"admission": {"podSetAssignments": "x"}}) == 0


def test_the_workload_read_carries_its_reservation() -> None:
    item = {"metadata": {"name": "job-train-1", "uid": "wl-1", "ownerReferences": [
        {"controller": True, "uid": "uid-train", "kind": "Job", "name": "train"}]},
        "spec": {"active": True},
        "status": _status(("QuotaReserved", "True", "2026-11-23T08:00:00Z"),
                          ("Evicted", "True", "2026-11-23T09:00:00Z"),
                          usage=[{"name": "main", "resourceUsage": {"nvidia.com/gpu": "4"}}])}
    found = kueue.owned([item], "uid-train", "v1beta2")
    assert found is not None and found.found
    assert found.reserved_since == datetime.datetime(2026, 11, 23, 8, tzinfo=datetime.timezone.utc)
    assert found.evicted and found.gpus == 4 and found.status_problem == ""


# -- the verdict ---------------------------------------------------------------------------------------------

def test_a_job_whose_workload_holds_quota_with_no_pod_fires_after_after() -> None:
    decision = quota([kjob(queued=workload_of("uid-train", evicted=True))])
    state, reason = verdicts(decision)["train"]
    assert state is State.FIRES and reason.code is Code.QUOTA_HELD
    assert "since 2026-11-23T09:00:00Z (3h" in str(reason) and "evicted it without releasing it" in str(reason)
    [f] = [f for f in decision.findings if f.trigger is TriggerKind.RESERVED_QUOTA]
    assert f.gpus == 8 and f.owner.value == "alice@lab.example" and f.known
    # Marked and warned, as any finding of an enforcing policy.
    [change] = decision.changes
    assert change.step is Step.MARK and change.workload.name == "train" and change.policy == "reserved-quota"


@pytest.mark.parametrize("phase,deleting", [("Running", False), ("Pending", False), ("Unknown", False),
                                            ("Running", True)])
def test_a_pod_that_runs_waits_or_is_terminating_keeps_it(phase: str, deleting: bool) -> None:
    job = kjob()
    decision = quota([job], [pod_of(job, phase, deleting=deleting)])
    state, reason = verdicts(decision)["train"]
    assert state is State.CLEAR and reason.code is Code.QUOTA_PODS
    assert not decision.changes


def test_a_job_neither_evicted_nor_suspended_runs_as_far_as_anyone_says() -> None:
    running = kjob(suspended=False)  # a pod deleted a moment ago (preempted, its node gone), the next on its way
    state, reason = verdicts(quota([running]))["train"]
    assert state is State.CLEAR and reason.code is Code.QUOTA_RUNNING
    evicted = kjob(suspended=False, queued=workload_of("uid-train", evicted=True))  # Kueue evicted it
    assert verdicts(quota([evicted]))["train"][0] is State.FIRES


def test_finished_pods_are_no_work() -> None:
    job = kjob()
    decision = quota([job], [pod_of(job, "Succeeded", name="a"), pod_of(job, "Failed", name="b")])
    assert verdicts(decision)["train"][0] is State.FIRES


def test_too_short_held_no_quota_or_deactivated_is_not_acted_on() -> None:
    young = kjob("young", queued=workload_of("uid-young", since=NOW - H))
    free = kjob("free", queued=workload_of("uid-free", since=None))
    off = kjob("off", queued=workload_of("uid-off", active=False))
    found = verdicts(quota([young, free, off]))
    assert found["young"][0] is State.TOO_YOUNG and "judged after 2 h" in str(found["young"][1])
    assert found["free"] == (State.CLEAR, found["free"][1]) and found["free"][1].code is Code.QUOTA_NOT_HELD
    assert found["off"][0] is State.CLEAR and found["off"][1].code is Code.KUEUE_INACTIVE


def test_what_cannot_be_read_is_unknown() -> None:
    odd = kjob("odd", queued=workload_of("uid-odd", problem="its Workload has two QuotaReserved conditions"))
    assert verdicts(quota([odd]))["odd"][0] is State.UNKNOWN
    # Not found or not readable at all: not a subject (nothing is known of its quota).
    lost = kjob("lost", queued=Queued("v1beta2", problem="its namespace's Kueue Workloads could not be listed"))
    assert "lost" not in verdicts(quota([lost]))
    # A pod of its namespace whose owner chain cannot be read may be its own.
    job = kjob()
    stray = pod_of(job, controller=OwnerRef("Job", "batch/v1", "other", "uid-not-read"), name="stray")
    state, reason = verdicts(quota([job], [stray]))["train"]
    assert state is State.UNKNOWN and "stray" in str(reason)
    # A finished one cannot.
    done = dataclasses.replace(stray, phase="Succeeded")
    assert verdicts(quota([job], [done]))["train"][0] is State.FIRES


def test_a_job_whose_workload_is_its_cronjob_is_not_judged() -> None:
    cron = ObjectView(ObjectRef("CronJob", "batch/v1", NS, "nightly", "uid-nightly"), "1", NOW - 9 * H, OWNER, {},
                      False, None)
    run = kjob("nightly-1", controller=cron)
    by_job = verdicts(quota([cron, run]))
    assert by_job["nightly-1"][0] is State.FIRES  # the Job is the workload (--cronjob-target job)
    by_cron = verdicts(quota([cron, run], settings_=PlanSettings(cronjob_mode=CronJobMode.CRONJOB)))
    assert by_cron["nightly-1"][0] is State.UNKNOWN
    unread = verdicts(quota([run]))  # its CronJob not read: the chain is unknown
    assert unread["nightly-1"][0] is State.UNKNOWN


def test_deleting_and_protected_are_not_subjects() -> None:
    gone = kjob("gone", deleting=True)
    assert verdicts(quota([gone])) == {}


# -- which policy governs it ---------------------------------------------------------------------------------

def test_a_policy_selects_a_workload_without_pods_by_namespace_and_kind_not_by_pod_labels() -> None:
    job = kjob()
    elsewhere = quota_policy(match=Match(namespaces=Namespaces(include=("web",))), name="web")
    assert verdicts(quota([job], policies=[elsewhere])) == {}
    other_kinds = quota_policy(match=Match(namespaces=Namespaces(include=(NS,)), kinds=("JobSet",)), name="jobsets")
    assert verdicts(quota([job], policies=[other_kinds])) == {}
    by_pods = quota_policy(match=Match(namespaces=Namespaces(include=(NS,)),
                                       pod_selector=LabelSelector((("app", "train"),))), name="by-pods")
    assert verdicts(quota([job], policies=[by_pods])) == {}
    # Nor does the next: whether the pods to come would match is not known, and the first policy
    # may be an exemption written by pod labels.
    assert verdicts(quota([job], policies=[by_pods, quota_policy(name="all")])) == {}
    # With pods, it selects them as any policy does.
    done = pod_of(job, "Succeeded")
    decision = quota([job], [done], policies=[by_pods, quota_policy(name="all")])
    assert [f.policy for f in decision.findings if f.trigger is TriggerKind.RESERVED_QUOTA] == ["by-pods"]


def test_an_opted_out_workload_is_left_alone() -> None:
    job = kjob(notes={a.OPT_OUT: "true"})
    assert verdicts(quota([job])) == {}


# -- the lifecycle ---------------------------------------------------------------------------------------------

def due_notes(action: str) -> dict[str, str]:
    mark = {a.POLICY: "reserved-quota", a.DEADLINE: a.format_expires(NOW - H),
            a.MARKED_AT: a.format_expires(NOW - 6 * H), a.REASON: "holding Kueue quota with no pods",
            a.MARKED_UID: "uid-train", a.WARNED_AT: a.format_expires(NOW - 6 * H),
            a.WARNED_VIA: f"owner D0ALICE/{(NOW - 6 * H).timestamp():.6f}",
            a.WARNED_OF: f"{action} {a.format_expires(NOW - H)}", a.WARNED_TO: "email:alice@lab.example"}
    return mark


def test_at_the_deadline_a_suspend_policy_deactivates_its_workload() -> None:
    job = kjob(notes=due_notes("suspend"))
    decision = quota([job], policies=[quota_policy(action=Action.SUSPEND)])
    [act] = [c for c in decision.changes if c.step is Step.ACT]
    assert act.action is not None and act.action.type is ActionType.SUSPEND
    assert act.action.via is not None and act.action.via.kind == "Workload" and act.action.via.name == "job-uid-t"
    assert [a.key for a in decision.due] == [act.action.key]


def test_a_report_policy_does_nothing_at_the_deadline() -> None:
    job = kjob(notes=due_notes("report"))
    decision = quota([job])
    assert not decision.due
    assert all(c.step is not Step.ACT for c in decision.changes)


def test_a_pod_that_came_back_unmarks_it() -> None:
    job = kjob(notes=due_notes("suspend"))
    decision = quota([job], [pod_of(job)], policies=[quota_policy(action=Action.SUSPEND)])
    assert not decision.due
    [change] = decision.changes
    assert change.step is Step.UNMARK


# -- policies --------------------------------------------------------------------------------------------------

def _load(text: str) -> Any:
    policies, errors = load.from_text(text, file="p.yaml")
    return SimpleNamespace(policies=policies, errors=errors)


POLICY = """policies:
  - name: quota
    mode: enforce
    match: {namespaces: {include: [ml]}}
    triggers:
      reservedQuota: {after: 2h}
"""


def test_it_reports_unless_told_to_suspend_and_never_deletes() -> None:
    loaded = _load(POLICY)
    assert not loaded.errors and loaded.policies[0].lifecycle.action is Action.REPORT
    assert loaded.policies[0].trigger(ReservedQuota) == ReservedQuota(after=2 * H)
    suspending = _load(POLICY + "    lifecycle: {action: suspend}\n")
    assert not suspending.errors and suspending.policies[0].lifecycle.action is Action.SUSPEND
    deleting = _load(POLICY + "    lifecycle: {action: delete}\n")
    [error] = deleting.errors
    assert "p.yaml:7" in str(error) and "lifecycle.action" in str(error) and "never delete" in str(error)


def test_it_takes_a_policy_of_its_own_and_needs_after() -> None:
    both = _load(POLICY + "      pending: {after: 1h}\n")
    assert any("reservedQuota takes a policy of its own" in str(e) for e in both.errors)
    bare = _load(POLICY.replace("{after: 2h}", "{}"))
    assert any("after" in str(e) for e in bare.errors)


# -- properties --------------------------------------------------------------------------------------------------

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


@st.composite
def kueue_clusters(draw: st.DrawFn) -> tuple[list[ObjectView], list[PodView], Policy]:
    """Kueue-admitted Jobs in two namespaces: held or not, for any time, active or not, status odd or
    not, with pods of any phase (none, as after a PodsReadyTimeout eviction, often), some pods whose
    owners were not read; one policy whose namespaces, kinds or pod selector may miss."""
    objects: list[ObjectView] = []
    pods: list[PodView] = []
    for i in range(draw(st.integers(1, 6))):
        namespace = draw(st.sampled_from((NS, "web")))
        uid = f"uid-j{i}"
        held = draw(st.one_of(st.none(), st.integers(0, 10 * 3600).map(lambda s: NOW - datetime.timedelta(seconds=s))))
        queued = Queued("v1beta2", f"wl-{i}", f"wl-uid-{i}", draw(st.booleans()), reserved_since=held,
                        evicted=draw(st.booleans()), status_problem=draw(st.sampled_from(("", "", "", "odd"))))
        job = kjob(f"j{i}", queued=queued, namespace=namespace, suspended=draw(st.booleans()))
        objects.append(dataclasses.replace(job, ref=dataclasses.replace(job.ref, uid=uid)))
        for k in range(draw(st.sampled_from((0, 0, 1, 2)))):
            pods.append(pod_of(objects[-1], draw(st.sampled_from(PHASES)), deleting=draw(st.booleans()),
                               name=f"j{i}-{k}"))
    if draw(st.booleans()):
        ghost = OwnerRef("Job", "batch/v1", "unread", "uid-unread")
        pods.append(pod_of(objects[0], draw(st.sampled_from(PHASES)), controller=ghost, name="stray"))
    match = Match(namespaces=Namespaces(include=(draw(st.sampled_from((NS, "*"))),)),
                  kinds=draw(st.sampled_from(((), ("Job",), ("JobSet",)))),
                  pod_selector=draw(st.sampled_from((LabelSelector(), LabelSelector((("app", "train"),))))))
    after = datetime.timedelta(seconds=draw(st.integers(60, 5 * 3600)))
    return objects, pods, quota_policy(match=match, after=after, action=draw(st.sampled_from(
        (Action.REPORT, Action.SUSPEND))))


@settings(max_examples=300, deadline=None)
@given(kueue_clusters())
def test_it_never_fires_on_work_doubt_youth_or_outside_its_policy(case: tuple[list[ObjectView], list[PodView],
                                                                                Policy]) -> None:
    objects, pods, policy = case
    decision = quota(objects, pods, [policy])
    trigger = policy.trigger(ReservedQuota)
    assert trigger is not None
    by_uid = {o.ref.uid: o for o in objects}
    strays = [p for p in pods if p.ref.name == "stray" and p.phase not in ("Succeeded", "Failed")]
    for f in decision.findings:
        if f.trigger is not TriggerKind.RESERVED_QUOTA:
            continue
        view = by_uid[f.subject.uid]
        assert policy.match.namespaces.matches(view.ref.namespace or "")
        assert not policy.match.kinds or "Job" in policy.match.kinds
        assert not policy.match.pod_selector.match_labels or any(
            p.controller is not None and p.controller.uid == view.ref.uid for p in pods)
        if f.state is not State.FIRES:
            continue
        queued = view.queued
        assert queued is not None and not queued.status_problem and queued.active
        assert queued.evicted or view.suspended  # what kueue#14811 leaves, not a Job between two pods
        assert queued.reserved_since is not None and NOW - queued.reserved_since >= trigger.after
        mine = [p for p in pods if p.controller is not None and p.controller.uid == view.ref.uid]
        assert all(p.phase in ("Succeeded", "Failed") for p in mine)
        assert not [p for p in strays if p.ref.namespace == view.ref.namespace]
    # Nothing is ever due on a first look: a mark and a warning come first.
    assert not decision.due


def test_the_owner_hears_it_in_plain_words() -> None:
    from janitor.decide.plain import plain

    [f] = [f for f in quota([kjob()]).findings if f.trigger is TriggerKind.RESERVED_QUOTA]
    assert plain(f.reason) == ("it has held its Kueue quota for 3 h while none of its pods runs or waits, so others' "
                               "jobs queue behind it (Workload job-uid-t)")
