"""The "done" note of a lifecycle action: kept before the change, and sent only on evidence it held.

The executor keeps the note before it acts (act/executor.py) and forgets it when the change did
not happen; a note left in notes.json is weighed again by a later cycle (act/notes.py,
act/lifecycle.py). These tests follow a note through the ways an action can end badly.

Aspects covered:
- a DELETE or a suspend that reached the apiserver, its answer lost (a timeout, a reset, a 5xx):
  the Job is read again at once; gone (or on its way out, but for a force delete of what was on
  its way out already), or suspended as the janitor wrote it, is the change done, and its note
  kept; anything else, or a read that fails too, is no change, and its note goes; one the
  apiserver refused (403, 422, 429) did not happen: its note goes;
- a CronJob suspended and unmarked, one of its Jobs not: the note about the CronJob goes (it would
  say the GPUs were freed while the Job runs);
- a note kept again for the same mark (the write before it did not happen after all) takes the
  place of the earlier one: the owner hears "done" once;
- a "done: deleted" note whose DELETE failed, and whose forget was lost (the lease lapsed, the
  store failed, the janitor died), is never sent once the mark goes without the delete: neither
  when the lifecycle unmarks the busy workload nor when an admin runs `janitor unmark`; a delete's
  evidence is its workload gone (by uid) or on its way out, a reclaim's the check of a later cycle
  that it held (recorded on the note, so it outlives that cycle);
- removing a mark (the lifecycle's unmark, `janitor unmark`) drops the "done" notes about that
  mark, written at once; a forgotten note is written at once too;
- the note of a bare pod's delete (Pod not among `--kinds`: the pod is a workload, not a listed
  object) names the pod's mark;
- a DELETE answered with a 5xx that deleted nothing (a webhook timed out): when someone else
  deletes the workload before the next cycle, the owner is not told the janitor deleted it;
- a CronJob suspended whose running Job could not be: the owner is never told "done ... freeing N
  GPUs" while the Job runs;
- a delete and a suspend for one owner in one cycle share its intent: the delete's "done" goes out
  at once, and the suspend's, once its check held, is not taken as already sent.
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

import pytest
from factories import NOW, ago
from test_act_executor import Store as LedgerStore
from test_act_executor import World, reclaim
from test_act_lifecycle import ALICE, POLICY, Cluster, Slack, decide, marked
from test_act_notes import Store, Told, cycle, kept_done_note, later, reclaimed

from janitor import annotations as a
from janitor import errors, unmark
from janitor.act import kube
from janitor.act.executor import Executor, Fresh
from janitor.act.kube import Outcome
from janitor.act.ledger_writer import LedgerWriter
from janitor.act.lifecycle import LifecycleRun
from janitor.act.notes import loads
from janitor.decide.claims import ClaimsRead
from janitor.decide.consent import intent_id
from janitor.decide.lifecycle import Change, Step
from janitor.decide.model import ActionType, ObjectRef, Observation, ResourceKind, SafetyLedger, State
from janitor.decide.plan import CyclePlan
from janitor.decide.reasons import Code, why
from janitor.decide.recheck import Recheck
from janitor.settings import Settings

JOBS = ResourceKind("batch", "v1", "Job", "jobs")
CRONJOBS = ResourceKind("batch", "v1", "CronJob", "cronjobs")
H = datetime.timedelta(hours=1)


class Apiserver:
    """One Job, `train`, behind `kube._call`: the real write (not its probe) reaches it and is applied
    or not (`applies`); its answer is lost (a read timeout); a GET after it answers with the Job as it
    is then, or fails too (`reads`)."""

    def __init__(self, *, applies: bool, reads: bool = True, finalizer: bool = False) -> None:
        self.applies, self.reads, self.finalizer = applies, reads, finalizer
        self.job: dict[str, Any] | None = {"metadata": {"name": "train", "namespace": "team-a", "uid": "uid-train",
                                                        "resourceVersion": "100", "annotations": {a.MARKED_AT: MARK}},
                                           "spec": {"suspend": False}}
        self.calls: list[str] = []

    def __call__(self, api: Any, method: str, path: str, *, body: Any = None, content_type: str = "",
                 dry_run: bool = False, doing: str = "", field_manager: str = "") -> dict[str, Any]:
        probe = dry_run or "All" in ((body or {}).get("dryRun") or [])
        self.calls.append(f"{method}{' (probe)' if probe else ''}")
        if method == "GET":
            if not self.reads:
                raise errors.ServerError("read timed out", status=None, doing=doing)
            if self.job is None:
                raise errors.NotFound("jobs \"train\" not found", status=404, doing=doing)
            return self.job
        if method in ("DELETE", "PATCH") and not probe:
            if self.applies and method == "DELETE" and self.finalizer:
                self.job = {**self.job, "metadata": {**self.job["metadata"],  # type: ignore[index]
                                                     "deletionTimestamp": "2026-11-23T12:00:00Z"}}
            elif self.applies and method == "DELETE":
                self.job = None
            elif self.applies:
                self.job = _merged(self.job or {}, body)
            raise errors.ServerError("read timed out", status=None, doing=doing)  # the answer never came
        return {}


def _merged(into: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """An RFC 7386 merge patch applied, the guard aside."""
    out = dict(into)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = _merged(out.get(key) or {}, {k: v for k, v in value.items()
                                                    if k not in ("uid", "resourceVersion")})
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("kind", [ActionType.DELETE, ActionType.SUSPEND])
@pytest.mark.parametrize(("applies", "reads", "outcome", "kept"), [
    pytest.param(True, True, Outcome.DONE, True, id="applied"),
    pytest.param(False, True, Outcome.FAILED, False, id="not-applied"),
    pytest.param(True, False, Outcome.FAILED, False, id="applied-but-unreadable"),
    pytest.param(False, False, Outcome.FAILED, False, id="not-applied-and-unreadable"),
])
def test_a_write_whose_answer_was_lost_is_read_again_to_tell_whether_it_happened(
        monkeypatch: pytest.MonkeyPatch, kind: ActionType, applies: bool, reads: bool, outcome: Outcome,
        kept: bool) -> None:
    """The write reaches the apiserver; its answer never comes (a read timeout). The Job is read again
    at once: gone, or suspended as the janitor wrote it, is the change done (its note kept, sent this
    cycle); still there, or not suspended, is no change (its note goes). A read that fails too tells
    nothing: the note goes, so no later change by someone else can pass for the janitor's."""
    apiserver = Apiserver(applies=applies, reads=reads)
    monkeypatch.setattr(kube, "_call", apiserver)
    act, change = reclaim("train", kind)
    world = World(act, changes=(change,))
    world.cluster.apply = lambda x: kube.apply(None, x, kind=JOBS)  # type: ignore[method-assign]
    assert world.run() == [("train", outcome)]
    real = "DELETE" if kind is ActionType.DELETE else "PATCH"
    assert apiserver.calls == [f"{real} (probe)", "POST", real, "GET"]  # the Event, the write, the read
    assert len(world.store.ledger.deletions) == 1  # the ledger kept its record
    assert [k[0] for k in world.notes.kept] == (["train"] if kept else [])
    if not kept:
        assert "did not happen" in world.results[0].detail or "unknown" in world.results[0].detail


def test_a_delete_whose_answer_was_lost_is_done_when_the_job_is_on_its_way_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A finalizer holds the Job: read again it is still there, with its deletionTimestamp."""
    monkeypatch.setattr(kube, "_call", Apiserver(applies=True, finalizer=True))
    act, change = reclaim("train", ActionType.DELETE)
    world = World(act, changes=(change,))
    world.cluster.apply = lambda x: kube.apply(None, x, kind=JOBS)  # type: ignore[method-assign]
    assert world.run() == [("train", Outcome.DONE)]
    assert [k[0] for k in world.notes.kept] == ["train"]


def test_a_force_delete_whose_answer_was_lost_counts_only_when_the_pod_is_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A force delete is of an object on its way out already: its deletionTimestamp says nothing."""
    apiserver = Apiserver(applies=False)
    assert apiserver.job is not None
    apiserver.job["metadata"]["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    monkeypatch.setattr(kube, "_call", apiserver)
    act, _ = reclaim("train", ActionType.FORCE_DELETE)
    result = kube.apply(None, act, kind=JOBS)  # type: ignore[arg-type]
    assert result.outcome is Outcome.FAILED and "did not happen" in result.detail
    apiserver.applies = True
    assert kube.apply(None, act, kind=JOBS).outcome is Outcome.DONE  # type: ignore[arg-type]


def test_a_suspend_read_again_counts_only_as_the_janitor_wrote_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Suspended, but still marked and without the janitor's record: someone else's write, not the
    janitor's (which unmarks and records in the same write). No "done"."""
    apiserver = Apiserver(applies=False)
    assert apiserver.job is not None
    apiserver.job["spec"]["suspend"] = True
    monkeypatch.setattr(kube, "_call", apiserver)
    act, change = reclaim("train", ActionType.SUSPEND)
    world = World(act, changes=(change,))
    world.cluster.apply = lambda x: kube.apply(None, x, kind=JOBS)  # type: ignore[method-assign]
    assert world.run() == [("train", Outcome.FAILED)]
    assert world.notes.kept == []


@pytest.mark.parametrize("refusal", [
    pytest.param(errors.Forbidden("jobs is forbidden", status=403), id="403"),
    pytest.param(errors.KubeError("spec.suspend: Invalid value", status=422), id="422"),
    pytest.param(errors.TooManyRequests("too many requests", status=429), id="429"),
])
def test_a_done_note_goes_when_the_apiserver_refused_the_write(monkeypatch: pytest.MonkeyPatch,
                                                               refusal: errors.KubeError) -> None:
    """An answer that refuses the write says it did not happen: nothing to announce."""
    def call(api: Any, method: str, path: str, *, body: Any = None, content_type: str = "",
             dry_run: bool = False, doing: str = "", field_manager: str = "") -> dict[str, Any]:
        if method == "PATCH" and not dry_run:
            raise refusal
        return {}

    monkeypatch.setattr(kube, "_call", call)
    act, change = reclaim("train", ActionType.SUSPEND)
    world = World(act, changes=(change,))
    world.cluster.apply = lambda x: kube.apply(None, x, kind=JOBS)  # type: ignore[method-assign]
    [(_, outcome)] = world.run()
    assert outcome in (Outcome.FAILED, Outcome.FORBIDDEN)
    assert world.notes.kept == []


def test_a_cronjob_suspended_without_one_of_its_jobs_forgets_its_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CronJob's write landed (suspended, unmarked, its reclaim recorded); one Job it runs could
    not be suspended. The outcome is a failure, and its note goes: "suspended, freeing N GPUs" is not
    so while the Job runs, and the check of the next cycles looks at the CronJob only."""
    patched: list[str] = []

    def call(api: Any, method: str, path: str, *, body: Any = None, content_type: str = "",
             dry_run: bool = False, doing: str = "", field_manager: str = "") -> dict[str, Any]:
        if method == "PATCH" and not dry_run:
            if path.endswith("/jobs/nightly-2"):
                raise errors.Forbidden("jobs \"nightly-2\" is forbidden", status=403, doing=doing)
            patched.append(path.rsplit("/", 2)[-2])
        return {}

    monkeypatch.setattr(kube, "_call", call)
    cronjob = ObjectRef("CronJob", "batch/v1", "team-a", "nightly", "uid-nightly")
    runs = tuple(ObjectRef("Job", "batch/v1", "team-a", f"nightly-{i}", f"uid-nightly-{i}") for i in (1, 2))
    act, change = reclaim("nightly", ActionType.SUSPEND)
    act = replace(act, target=cronjob, also=runs)
    assert change.notice is not None
    change = replace(change, workload=cronjob, action=act, notice=replace(change.notice, workload=cronjob))
    world = World(act, changes=(change,))
    world.cluster.apply = lambda x: kube.apply(None, x, kind=CRONJOBS)  # type: ignore[method-assign]
    assert world.run() == [("nightly", Outcome.FAILED)]
    assert patched == ["cronjobs", "jobs"]  # the CronJob, and the one Job that could be
    assert "but not the Jobs it runs" in world.results[0].detail
    assert world.notes.kept == []


def test_a_note_kept_again_for_the_same_mark_takes_the_place_of_the_first() -> None:
    """The first deadline cycle kept its note, and its DELETE did not happen (an answer lost, the
    janitor stopped): the next one acts again and keeps a note of its own. One "done" note."""
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    kept_done_note(cluster, store, "old")
    box = store.box()
    decided = decide(cluster, now=NOW + H)
    act = decided.only(Step.ACT)
    assert act.notice is not None
    assert box.expect(act.notice, intent_id(ALICE, NOW + H), cluster.notes("old")[a.MARKED_AT], NOW + H) == ""
    del cluster.objects["uid-old"]  # deleted this time
    slack = Slack(cluster)
    LifecycleRun(cluster, slack, {POLICY.name: POLICY}, NOW + H, decided.seen, notes=box).run(decided.changes, [act])
    box.store(NOW + H)
    assert [(n.kind, n.workload.name) for d in slack.sent for n in d.notices] == [("done", "old")]
    assert len(slack.sent) == 1 and store.kept() == []


@pytest.mark.parametrize("unmarked_by", ["lifecycle", "janitor unmark"])
def test_a_done_note_whose_delete_did_not_happen_is_not_sent_after_an_unmark(unmarked_by: str) -> None:
    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    # The deadline cycle, as the executor runs it: the note kept, the DELETE fails (a 5xx), the note
    # forgotten in memory only; then the lease lapses, so the notes are not stored at the end and the
    # forget is never written (likewise when that write fails, or the janitor dies).
    box = store.box()
    act = decide(cluster).only(Step.ACT)
    assert act.notice is not None
    intent = intent_id(ALICE, NOW)
    assert box.expect(act.notice, intent, cluster.notes("train")[a.MARKED_AT], NOW) == ""
    box.forget(act.workload, intent)
    # Between cycles or in the next one, the mark goes without the delete having happened.
    if unmarked_by == "janitor unmark":
        cluster.update("train", dict.fromkeys(a.mark_keys_on(cluster.notes("train"))))  # as janitor/unmark.py writes
    # else: busy again, so the next cycle's lifecycle unmarks it (and says "cancelled")
    up = Slack(cluster)
    cycle(cluster, up, store, now=NOW + H, states={"train": State.CLEAR})
    assert "uid-train" in cluster.objects  # the Job was never deleted
    said = " ".join(m.text for d in up.sent for m in d.messages)
    assert "deleted" not in said, said


def test_a_done_note_whose_suspend_did_not_happen_is_not_sent_once_its_mark_is_removed_by_hand() -> None:
    """As above, for a reclaim: the suspend failed, its forget was lost, and the owner removed the mark
    with kubectl. No mark and no record of a reclaim is no evidence that one happened and held."""
    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    box = store.box()
    act = decide(cluster).only(Step.ACT)
    assert act.notice is not None
    suspend = replace(act.notice, action="suspend")
    intent = intent_id(ALICE, NOW)
    assert box.expect(suspend, intent, cluster.notes("train")[a.MARKED_AT], NOW) == ""
    box.forget(act.workload, intent)  # in memory only: never written
    cluster.update("train", dict.fromkeys(a.mark_keys_on(cluster.notes("train"))))
    slack = Slack(cluster)
    later(cluster, slack, store)
    assert slack.sent == [] and store.kept() == []


def test_a_reclaims_done_note_held_while_slack_was_down_is_sent_later() -> None:
    """The check that the reclaim held is the note's evidence, and outlives the cycle that made it."""
    from janitor.decide.lifecycle import Change
    from janitor.decide.reasons import Code, why

    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    reclaimed(cluster, store, "old")
    view = cluster.view("old")
    held = Change(Step.CHECK, view.ref, view.resource_version, POLICY.name,
                  why(Code.RECLAIM_HELD, action="suspend", at=NOW), {a.RECLAIMED: None})
    down = Slack(cluster, deliver=False)
    later(cluster, down, store, (held,), {view.ref.uid: dict(view.annotations)})
    assert len(down.sent) == 1 and store.kept() == [("done", "old")] and a.RECLAIMED not in cluster.notes("old")
    up = Slack(cluster)
    later(cluster, up, store)
    assert [(n.kind, n.workload.name) for d in up.sent for n in d.notices] == [] and len(up.sent) == 1
    assert store.kept() == []


def test_the_lifecycles_unmark_drops_the_done_note_about_its_mark_at_once() -> None:
    """Written with the "cancelled" note kept before the unmark, not at the end of the cycle (which a
    lapsed lease skips)."""
    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    kept_done_note(cluster, store, "train")  # and the DELETE failed; its forget was never written
    box = store.box()
    decided = decide(cluster, {"train": State.CLEAR}, now=NOW + H)
    assert decided.step("train") is Step.UNMARK
    LifecycleRun(cluster, Slack(cluster, deliver=False), {POLICY.name: POLICY}, NOW + H, decided.seen,
                 notes=box).run(decided.changes, ())
    # no box.store(): the lease lapsed after the lifecycle's writes
    assert store.kept() == [("cancelled", "train")]


def test_a_forgotten_note_is_written_at_once() -> None:
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    box = store.box()
    act = decide(cluster).only(Step.ACT)
    assert act.notice is not None
    assert box.expect(act.notice, intent_id(ALICE, NOW), cluster.notes("old")[a.MARKED_AT], NOW) == ""
    box.forget(act.workload, intent_id(ALICE, NOW))
    assert store.kept() == []  # before any store() at the end of the cycle


def test_janitor_unmark_drops_the_done_notes_about_the_marks_it_removes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A note about the mark removed goes; one about another workload, or about an older mark, stays."""
    from janitor.observe import cluster as observed

    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=30), ago(hours=30)))
    cluster.add("other", marked("other", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    box = store.box()
    acts = {c.workload.name: c.notice for c in decide(cluster).changes if c.step is Step.ACT}
    older = "2026-11-01T00:00:00Z"
    for name, marked_at, at in (("train", cluster.notes("train")[a.MARKED_AT], NOW),
                                ("other", cluster.notes("other")[a.MARKED_AT], NOW), ("train", older, NOW - H)):
        notice = acts[name]
        assert notice is not None and box.expect(notice, intent_id(ALICE, at), marked_at, at) == ""
    assert len(store.kept()) == 3
    written: list[str] = []

    def annotate(api: Any, ref: ObjectRef, resource_version: str, notes: Any, **kw: Any) -> str:
        written.append(ref.name)
        return "101"

    monkeypatch.setattr(unmark.observation, "read",
                        lambda api, settings, policies, now: Observation(NOW, (cluster.view("train"),), (), {}))
    monkeypatch.setattr(unmark.claims, "read", lambda api, namespaces, **kw: ClaimsRead())  # no DRA claims here
    monkeypatch.setattr(kube, "annotate", annotate)
    monkeypatch.setattr(observed, "read_state_versioned", lambda api, ns, name, key: store.read())
    monkeypatch.setattr(kube, "write_state", lambda api, ns, name, data, **kw: store.write(data["notes.json"],
                                                                                             kw["resource_version"]))
    done = unmark.unmark(None, Settings())  # type: ignore[arg-type]
    assert [u.result for u in done] == ["removed"] and written == ["train"]
    assert sorted(f"{n.workload.name} {n.marked_at}" for n in loads(store.text or "[]")) == [
        f"other {cluster.notes('other')[a.MARKED_AT]}", f"train {older}"]


MARK = "2026-11-22T06:00:00Z"


@pytest.mark.parametrize(("kind", "action", "held", "now", "seen"), [
    pytest.param("done", "delete", False, None, "happened", id="delete-gone"),
    pytest.param("done", "delete", False, {a.MARKED_AT: MARK, "deleting": "1"}, "happened",
                 id="delete-on-its-way-out-with-finalizers"),
    pytest.param("done", "delete", False, {}, "never", id="delete-mark-gone-workload-there"),
    pytest.param("done", "delete", False, {a.MARKED_AT: MARK}, "never", id="delete-still-marked"),
    pytest.param("done", "suspend", False, {a.RECLAIMED: "suspend"}, "not yet", id="reclaim-not-checked-yet"),
    pytest.param("done", "suspend", True, {}, "happened", id="reclaim-held"),
    pytest.param("done", "suspend", False, {}, "never", id="reclaim-mark-gone-no-record"),
    pytest.param("done", "suspend", False, None, "never", id="reclaim-gone-unchecked"),
    pytest.param("done", "suspend", False, {a.MARKED_AT: MARK}, "never", id="reclaim-still-marked"),
    pytest.param("done", "", False, None, "happened", id="older-note-gone"),
    pytest.param("done", "", False, {}, "never", id="older-note-mark-gone-workload-there"),
    pytest.param("cancelled", "delete", False, {}, "happened", id="cancelled-mark-gone"),
    pytest.param("cancelled", "delete", False, {a.MARKED_AT: MARK}, "never", id="cancelled-still-marked"),
])
def test_a_kept_note_is_weighed_on_the_workload_as_it_is_now(kind: str, action: str, held: bool,
                                                             now: dict[str, str] | None, seen: str) -> None:
    from janitor.act.notes import PendingNote, weigh
    from janitor.decide.model import ObjectView

    ref = ObjectRef("Job", "batch/v1", "team-a", "train", "uid-train")
    note = PendingNote("i", ALICE, kind, ref, MARK, NOW, (), action=action, held=held)
    view = None if now is None else ObjectView(ref, "7", NOW, {k: v for k, v in now.items() if k != "deleting"},
                                               deleting="deleting" in now)
    verdict, why_not = weigh(note, view)
    assert str(verdict) == seen and bool(why_not) == (seen == "never")



def test_the_note_of_a_bare_pods_delete_names_its_mark() -> None:
    """With Pod not among `--kinds`, pods are read for the triggers but not listed as objects, and a
    bare pod is its own workload: the lifecycle marks, warns and deletes it. Its note must name the
    mark the pod carries, or nothing can tell it from a newer one."""
    from test_act_executor import Cluster as Acting
    from test_act_executor import Notes
    from test_act_executor import Store as Ledger
    from test_decide_idle_findings import cpu, gpu, idle, pod

    from janitor.act.executor import Executor
    from janitor.act.ledger_writer import LedgerWriter
    from janitor.cycle import Memory, Planned
    from janitor.decide.evidence import CpuUsage, Evidence
    from janitor.decide.model import NamespaceView, SafetyLedger
    from janitor.decide.plan import plan
    from janitor.policy.model import IdleGpu, Lifecycle, Mode, Policy

    policy = Policy("idle-gpu", (IdleGpu(window=2 * H),), mode=Mode.ENFORCE, lifecycle=Lifecycle(warn_before=24 * H))
    bare = pod("notebook")
    marked_at, deadline = a.format_deadline(NOW - 30 * H), a.format_deadline(NOW - 6 * H)
    bare = replace(bare, annotations={
        a.POLICY: policy.name, a.DEADLINE: deadline, a.MARKED_AT: marked_at, a.REASON: "idle",
        a.MARKED_UID: bare.ref.uid, a.WARNED_AT: marked_at,
        a.WARNED_VIA: f"owner D0ALICE/{(NOW - 30 * H).timestamp():.6f}", a.WARNED_OF: f"delete {deadline}",
        a.OWNER: ALICE.value})
    observation = Observation(NOW, (), (bare,), {"ml": NamespaceView("ml")},
                              evidence=Evidence(gpu({"notebook": idle()}), cpu({"notebook": CpuUsage(0.01, 120)})))
    decided = plan(observation, [policy], SafetyLedger(), NOW)
    assert [(x.type, x.target) for x in decided.actions] == [(ActionType.DELETE, bare.ref)]  # reachable
    planned = Planned(observation, decided, (policy,), Memory())
    timeline: list[tuple[str, ...]] = []
    acting, notes, ledger = Acting(timeline), Notes(timeline), Ledger(timeline)
    writer = LedgerWriter(ledger, decided.ledger, ledger.ledger, clock=lambda: NOW, fence=lambda: True,
                          dry_run=False)
    Executor(decided, planned.objects_by_uid, acting.still_due, acting.apply, writer, notes, lambda: NOW,
             lambda: True, False).run(decided.actions, lambda _: None)
    assert notes.kept == [("notebook", intent_id(ALICE, NOW), marked_at)]


def _executor(cluster: Any, store: Store, change: Change, apply: Any) -> Executor:
    """The executor of one deadline cycle over the lifecycle's fake cluster, its note kept in `store`."""
    act = change.action
    assert act is not None
    plan = CyclePlan(NOW, (act,), (), (change,), (), SafetyLedger())
    ledger = LedgerWriter(LedgerStore([]), SafetyLedger(), SafetyLedger(), clock=lambda: NOW, fence=lambda: True,
                          dry_run=False)
    seen = {v.ref.uid: v for v in cluster.objects.values()}
    return Executor(plan, seen, lambda x: Fresh(Recheck(x, why(Code.STILL_DUE), change)), apply, ledger, store.box(),
                    lambda: NOW, lambda: True, False)


def _as_read(cluster: Any, path: str) -> dict[str, Any]:
    """A GET of a Job as the apiserver answers it, from the fake cluster."""
    view = next((v for v in cluster.objects.values() if path.endswith(f"/jobs/{v.ref.name}")), None)
    if view is None:
        raise errors.NotFound(f"jobs {path.rsplit('/', 1)[-1]} not found", status=404)
    return {"metadata": {"name": view.ref.name, "namespace": view.ref.namespace, "uid": view.ref.uid,
                         "resourceVersion": view.resource_version, "annotations": dict(view.annotations)}}


def test_a_delete_refused_with_a_5xx_is_not_announced_once_someone_else_deletes_the_workload(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A validating webhook on DELETE times out: the apiserver answers 500 ("failed calling webhook")
    and deletes nothing. Before the next cycle the owner (or a pipeline) deletes the Job. "Gone by
    uid" then is someone else's doing: the owner must not be told the janitor deleted it."""
    def call(api: Any, method: str, path: str, *, body: Any = None, content_type: str = "",
             dry_run: bool = False, doing: str = "", field_manager: str = "") -> dict[str, Any]:
        probe = dry_run or "All" in ((body or {}).get("dryRun") or [])
        if method == "DELETE" and not probe:
            raise errors.ServerError('Internal error occurred: failed calling webhook "guard.example": '
                                     "context deadline exceeded", status=500, doing=doing)
        return _as_read(cluster, path) if method == "GET" else {}

    monkeypatch.setattr(kube, "_call", call)
    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    change = decide(cluster).only(Step.ACT)
    executor = _executor(cluster, store, change, lambda x: kube.apply(None, x, kind=JOBS))
    results: list[kube.ActionResult] = []
    assert change.action is not None
    executor.run([change.action], results.append)
    assert [r.outcome for r in results] == [Outcome.FAILED]
    assert "uid-train" in cluster.objects  # the janitor deleted nothing
    del cluster.objects["uid-train"]  # the owner deletes it themselves before the next cycle
    slack = Slack(cluster)
    later(cluster, slack, store)
    said = " ".join(m.text + str(m.blocks) for d in slack.sent for m in d.messages)
    assert "Done" not in said, "the owner is told the janitor deleted a Job it never deleted"


def test_a_cronjob_whose_job_was_not_suspended_is_not_announced_as_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CronJob is suspended and unmarked; its running Job refuses the suspend (403). The check of a
    later cycle sees the CronJob's suspension hold (it does not look at the Job): the owner must not
    hear "suspended, freeing 1 GPU" while the Job runs."""
    cluster = Cluster()
    cluster.add("nightly", marked("nightly", ago(hours=30), ago(hours=30)))
    job = ObjectRef("Job", "batch/v1", "team-a", "nightly-2", "uid-nightly-2")

    def call(api: Any, method: str, path: str, *, body: Any = None, content_type: str = "",
             dry_run: bool = False, doing: str = "", field_manager: str = "") -> dict[str, Any]:
        if method == "PATCH" and not dry_run and "dryRun" not in str(body):
            if path.endswith("/nightly-2"):
                raise errors.Forbidden('jobs "nightly-2" is forbidden', status=403, doing=doing)
            cluster.update("nightly", {k: None for k in cluster.notes("nightly")}
                           | {a.RECLAIMED: f"suspend {a.format_expires(NOW)} idle-gpu"})
        return _as_read(cluster, path) if method == "GET" else {}

    monkeypatch.setattr(kube, "_call", call)
    store = Store(cluster)
    change = decide(cluster).only(Step.ACT)
    assert change.action is not None and change.notice is not None
    act = replace(change.action, type=ActionType.SUSPEND, also=(job,),
                  record={a.RECLAIMED: f"suspend {a.format_expires(NOW)} idle-gpu"})
    change = replace(change, action=act, notice=replace(change.notice, action="suspend"))
    executor = _executor(cluster, store, change, lambda x: kube.apply(None, x, kind=JOBS))
    results: list[kube.ActionResult] = []
    executor.run([act], results.append)
    assert results[0].outcome in (Outcome.FORBIDDEN, Outcome.FAILED)
    # 15 minutes on, the check sees the CronJob still suspended (it cannot see the Job)
    view = cluster.view("nightly")
    held = Change(Step.CHECK, view.ref, view.resource_version, POLICY.name,
                  why(Code.RECLAIM_HELD, action="suspend", at=NOW), {a.RECLAIMED: None})
    slack = Slack(cluster)
    later(cluster, slack, store, (held,), {view.ref.uid: dict(view.annotations)})
    said = " ".join(m.text + str(m.blocks) for d in slack.sent for m in d.messages)
    assert "Done" not in said, f"told 'done' while Job nightly-2 still runs: {said[:300]}"


def test_a_suspends_done_note_is_sent_after_a_delete_of_the_same_owner_and_cycle() -> None:
    """One deadline cycle deletes `old` and suspends `train`, both alice's: one intent. `old`'s "done"
    goes out then; `train`'s waits for the check that the suspend held. Slack has a message of that
    intent, but it tells of `old` only: `train`'s "done" is sent, not crossed off."""
    cluster = Cluster()
    for name in ("old", "train"):
        cluster.add(name, marked(name, ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    box = store.box()
    decided = decide(cluster)
    acts = {c.workload.name: c for c in decided.changes if c.step is Step.ACT}
    record = {a.RECLAIMED: f"suspend {a.format_expires(NOW)} idle-gpu"}
    train = acts["train"]
    assert train.action is not None and train.notice is not None
    train = replace(train, action=replace(train.action, type=ActionType.SUSPEND, record=record),
                    notice=replace(train.notice, action="suspend"))
    for change in (acts["old"], train):
        assert change.notice is not None
        marked_at = cluster.notes(change.workload.name)[a.MARKED_AT]
        assert box.expect(change.notice, intent_id(ALICE, NOW), marked_at, NOW) == ""
    del cluster.objects["uid-old"]  # deleted
    cluster.update("train", {k: None for k in cluster.notes("train")} | record)  # suspended, unmarked, recorded
    slack = Told(cluster)
    LifecycleRun(cluster, slack, {POLICY.name: POLICY}, NOW, decided.seen, notes=box).run(decided.changes,
                                                                                         [acts["old"], train])
    box.store(NOW)
    assert [(n.kind, n.workload.name) for d in slack.sent for n in d.notices] == [("done", "old")]
    assert store.kept() == [("done", "train")]
    view = cluster.view("train")
    held = Change(Step.CHECK, view.ref, view.resource_version, POLICY.name,
                  why(Code.RECLAIM_HELD, action="suspend", at=NOW), {a.RECLAIMED: None})
    later(cluster, slack, store, (held,), {view.ref.uid: dict(view.annotations)})
    [_, second] = slack.sent
    said = " ".join(m.text + str(m.blocks) for m in second.messages)
    assert "Job team-a/train" in said and "suspended" in said and store.kept() == []
