"""The write order of acting (act/executor.py, act/ledger_writer.py), against in-memory fakes.

The fakes stand for the small interfaces the executor talks through: the re-check (a fresh read
and its decision), the applier, the "done" notes, and the ledger's store (guarded by version, as
the state ConfigMap is). Every call lands on one timeline, so the order is what is asserted.

Aspects covered:
- a deletion is recorded in the ledger before it is applied, and a lifecycle action's "done" note
  kept before it too (re-check, ledger, note, write);
- a deletion whose record cannot be written is not done, and nothing more is deleted (nor re-read)
  in that cycle; the ledger is not stored over;
- a change whose "done" note cannot be kept is not made; a note whose change did not happen (any
  outcome but DONE: the applier reads a write whose answer was lost again to tell) is forgotten;
  one whose change happened is not;
- a re-check that says no longer due gives SKIPPED, one that finds the object gone GONE, one that
  cannot read FAILED: no ledger record, no note, no write;
- a CONFLICT is decided again once on a new fresh read, recorded in the ledger once; a second
  CONFLICT is the result;
- another writer's ledger found at the record: merged (both deletions kept), that deletion not
  done, nothing more deleted, nothing stored over the merge;
- dry run: nothing recorded, kept or stored (the applier, made dry-run, only probes);
- a fence that closes (another replica may lead) stops before the next action, and the ledger is
  not stored at the end; it is asked before each write of the ledger's record and right before
  the action's write (and, in act.kube, between the probe and the Event, and again between the
  Event and the write: a delete, a reclaim, a switch through Kueue and a report alike): one that
  closes while the record is read or written, or while the Event is posted, stops that action; a
  CronJob's Jobs are not suspended once it closed after the CronJob's write (a failure, in part);
  once closed, nothing more is written in the cycle, even if it opens again;
- a report is applied as planned, with no re-check and no record; the re-check's change is the
  one the lifecycle is handed.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from factories import NOW

from janitor import errors
from janitor.act import kube
from janitor.act.executor import Executor, Fresh
from janitor.act.kube import ActionResult, Outcome
from janitor.act.ledger_writer import LedgerWriter
from janitor.annotations import MARKED_AT, NoticeKind
from janitor.decide.lifecycle import Change, Step
from janitor.decide.model import (
    Action,
    ActionType,
    Deletion,
    ObjectRef,
    ObjectView,
    ResourceKind,
    SafetyLedger,
    TriggerKind,
)
from janitor.decide.notices import Notice
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.plan import CyclePlan
from janitor.decide.reasons import Code, why
from janitor.decide.recheck import Recheck

ALICE = Owner(OwnerKind.EMAIL, "alice@lab.example")
MARKED = "2026-11-22T12:00:00Z"


def ref(name: str, kind: str = "Job") -> ObjectRef:
    return ObjectRef(kind, "batch/v1" if kind == "Job" else "v1", "team-a", name, f"uid-{name}")


def action(name: str, kind: ActionType = ActionType.DELETE, *, policy: str = "ttl-expiry") -> Action:
    return Action(kind, ref(name), "100", policy, TriggerKind.EXPIRY, "expires", "Expired", why(Code.STILL_DUE),
                  report_key="malformed" if kind is ActionType.REPORT else None)


def reclaim(name: str, kind: ActionType = ActionType.SUSPEND) -> tuple[Action, Change]:
    """A lifecycle action and its ACT change, with the "done" note for its owner."""
    act = action(name, kind, policy="idle-gpu")
    notice = Notice(NoticeKind.DONE, act.target, "idle-gpu", ALICE, str(kind), why(Code.STILL_DUE), NOW)
    return act, Change(Step.ACT, act.target, "100", "idle-gpu", why(Code.STILL_DUE), notice=notice, action=act)


class Store:
    """The ledger in the state ConfigMap: each write only over the version it names."""

    def __init__(self, timeline: list[tuple[str, ...]], ledger: SafetyLedger = SafetyLedger()) -> None:
        self.timeline, self.ledger, self.version = timeline, ledger, 1
        self.fail = False
        self.before_write: Callable[[], None] | None = None  # another writer, once, right before a write
        self.during_read: Callable[[], None] | None = None  # once, while the ledger is read
        self.writes = 0

    def read(self) -> tuple[SafetyLedger, str | None]:
        if self.during_read is not None:
            meanwhile, self.during_read = self.during_read, None
            meanwhile()
        return self.ledger, str(self.version)

    def write(self, ledger: SafetyLedger, version: str | None) -> None:
        if self.before_write is not None:
            intruder, self.before_write = self.before_write, None
            intruder()
        if self.fail:
            raise errors.Forbidden("configmaps is forbidden", status=403)
        if version != str(self.version):
            raise errors.Conflict("the object has been modified", status=409)
        self.ledger, self.version, self.writes = ledger, self.version + 1, self.writes + 1
        self.timeline.append(("ledger", str(len(ledger.deletions))))

    def another_writer(self, deletion: Deletion) -> None:
        self.ledger = replace(self.ledger, deletions=(*self.ledger.deletions, deletion))
        self.version += 1


class Notes:
    def __init__(self, timeline: list[tuple[str, ...]]) -> None:
        self.timeline, self.refuse = timeline, ""
        self.kept: list[tuple[str, str, str]] = []  # (workload, intent, marked-at)

    def expect(self, notice: Notice, intent: str, marked_at: str, now: datetime.datetime) -> str:
        if self.refuse:
            return self.refuse
        self.timeline.append(("note", notice.workload.name))
        self.kept.append((notice.workload.name, intent, marked_at))
        return ""

    def forget(self, workload: ObjectRef, intent: str) -> None:
        self.timeline.append(("forget", workload.name))
        self.kept = [k for k in self.kept if (k[0], k[1]) != (workload.name, intent)]


@dataclass
class Cluster:
    """The re-check and the writes: each object still due unless told otherwise."""

    timeline: list[tuple[str, ...]]
    not_due: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    unreadable: set[str] = field(default_factory=set)
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)  # per name, one per apply; DONE after
    changes: dict[str, Change] = field(default_factory=dict)  # the re-check's change, per name

    def still_due(self, act: Action) -> Fresh:
        name = act.target.name
        self.timeline.append(("recheck", name))
        if name in self.unreadable:
            raise errors.ServerError("etcdserver: request timed out", status=500)
        if name in self.gone:
            return Fresh(Recheck(None, why(Code.GONE)), gone=True)
        if name in self.not_due:
            return Fresh(Recheck(None, why(Code.NO_LONGER_DUE, why=why(Code.GONE))))
        return Fresh(Recheck(replace(act, resource_version="200"), why(Code.STILL_DUE), self.changes.get(name)))

    def apply(self, act: Action) -> ActionResult:
        self.timeline.append(("apply", act.target.name))
        left = self.outcomes.get(act.target.name) or [Outcome.DONE]
        return ActionResult(act, left.pop(0), "")


class World:
    def __init__(self, *actions: Action, changes: tuple[Change, ...] = (), dry_run: bool = False,
                 fence: Iterator[bool] | None = None) -> None:
        self.timeline: list[tuple[str, ...]] = []
        self.store = Store(self.timeline)
        self.notes = Notes(self.timeline)
        self.cluster = Cluster(self.timeline)
        self.plan = CyclePlan(NOW, tuple(actions), (), changes, (), SafetyLedger())
        self.dry_run = dry_run
        self.fence = fence
        self.results: list[ActionResult] = []
        self.executor: Executor | None = None

    def run(self) -> list[tuple[str, Outcome]]:
        fence = (lambda: next(self.fence, False)) if self.fence is not None else (lambda: True)
        ledger = LedgerWriter(self.store, self.plan.ledger, self.store.ledger, clock=lambda: NOW, fence=fence,
                              dry_run=self.dry_run)
        seen = {c.workload.uid: ObjectView(c.workload, "100", NOW, {MARKED_AT: MARKED}) for c in self.plan.changes}
        self.executor = Executor(self.plan, seen, self.cluster.still_due, self.cluster.apply, ledger, self.notes,
                                 lambda: NOW, fence, self.dry_run)
        self.executor.run(self.plan.actions, self.results.append)
        return [(r.action.target.name, r.outcome) for r in self.results]

    @property
    def contended(self) -> bool:
        assert self.executor is not None
        return self.executor.ledger.contended


def test_the_ledger_record_and_the_note_are_written_before_the_change() -> None:
    act, change = reclaim("train")
    world = World(action("old"), act, changes=(change,))
    assert world.run() == [("old", Outcome.DONE), ("train", Outcome.DONE)]
    assert world.timeline == [
        ("recheck", "old"), ("ledger", "1"), ("apply", "old"),
        ("recheck", "train"), ("ledger", "2"), ("note", "train"), ("apply", "train"),
        ("ledger", "2"),  # stored at the end
    ]
    assert [d.namespace for d in world.store.ledger.deletions] == ["team-a", "team-a"]
    [(name, intent, marked_at)] = world.notes.kept  # kept: the change happened
    assert (name, marked_at) == ("train", MARKED) and intent


def test_a_deletion_the_ledger_cannot_record_is_not_done_and_nothing_more_is_deleted() -> None:
    world = World(action("first"), action("second"), action("third"))
    world.store.fail = True
    results = world.run()
    assert results == [("first", Outcome.FAILED), ("second", Outcome.FAILED), ("third", Outcome.FAILED)]
    assert "could not record it first" in world.results[0].detail
    assert all("not tried" in r.detail for r in world.results[1:])
    assert ("apply", "first") not in world.timeline and all(step != "apply" for step, _ in world.timeline)
    assert world.timeline == [("recheck", "first")]  # not even re-read after, and nothing stored at the end
    assert world.store.ledger == SafetyLedger()


def test_a_change_whose_note_cannot_be_kept_is_not_made() -> None:
    act, change = reclaim("train")
    world = World(act, changes=(change,))
    world.notes.refuse = "not done: its note to the owner cannot be kept (forbidden)"
    assert world.run() == [("train", Outcome.FAILED)]
    assert world.results[0].detail == world.notes.refuse
    assert ("apply", "train") not in world.timeline


def test_a_note_is_forgotten_when_its_change_did_not_happen() -> None:
    """A write whose answer was lost, read again and not found done, is FAILED like any other failure
    (act.kube): no note is kept on "it may have happened", for a later cycle to misread."""
    a, change_a = reclaim("refused")
    b, change_b = reclaim("failed", ActionType.SCALE_TO_ZERO)
    c, change_c = reclaim("answer-lost", ActionType.DELETE)
    d, change_d = reclaim("done", ActionType.DELETE)
    world = World(a, b, c, d, changes=(change_a, change_b, change_c, change_d))
    world.cluster.outcomes = {"refused": [Outcome.FORBIDDEN], "failed": [Outcome.FAILED],
                              "answer-lost": [Outcome.FAILED]}
    assert world.run() == [("refused", Outcome.FORBIDDEN), ("failed", Outcome.FAILED),
                           ("answer-lost", Outcome.FAILED), ("done", Outcome.DONE)]
    assert world.timeline[:4] == [("recheck", "refused"), ("ledger", "1"), ("note", "refused"), ("apply", "refused")]
    assert all(("forget", name) in world.timeline for name in ("refused", "failed", "answer-lost"))
    assert [k[0] for k in world.notes.kept] == ["done"]


def test_a_recheck_that_says_not_due_or_gone_or_cannot_read_writes_nothing() -> None:
    a, change = reclaim("busy-again")
    world = World(a, action("deleted-since"), action("unreadable"), changes=(change,))
    world.cluster.not_due, world.cluster.gone, world.cluster.unreadable = {"busy-again"}, {"deleted-since"}, \
        {"unreadable"}
    assert world.run() == [("busy-again", Outcome.SKIPPED), ("deleted-since", Outcome.GONE),
                           ("unreadable", Outcome.FAILED)]
    assert "no longer due" in world.results[0].detail and "re-read failed" in world.results[2].detail
    assert [step for step, _ in world.timeline] == ["recheck", "recheck", "recheck", "ledger"]  # the end's store
    assert world.store.ledger.deletions == () and world.notes.kept == []


def test_a_conflict_is_decided_again_once_and_recorded_once() -> None:
    act, change = reclaim("train")
    world = World(act, action("old"), changes=(change,))
    world.cluster.outcomes = {"train": [Outcome.CONFLICT, Outcome.DONE], "old": [Outcome.CONFLICT, Outcome.CONFLICT]}
    assert world.run() == [("train", Outcome.DONE), ("old", Outcome.CONFLICT)]
    assert world.timeline == [
        ("recheck", "train"), ("ledger", "1"), ("note", "train"), ("apply", "train"), ("forget", "train"),
        ("recheck", "train"), ("note", "train"), ("apply", "train"),
        ("recheck", "old"), ("ledger", "2"), ("apply", "old"), ("recheck", "old"), ("apply", "old"),
        ("ledger", "2"),
    ]
    assert len(world.store.ledger.deletions) == 2  # one each, not one per try
    assert [k[0] for k in world.notes.kept] == ["train"]


def test_another_writers_ledger_is_merged_and_nothing_more_is_deleted() -> None:
    world = World(action("first"), action("second"), action("third"))
    theirs = Deletion(NOW - datetime.timedelta(minutes=1), "elsewhere")
    world.store.before_write = lambda: world.store.another_writer(theirs)
    results = world.run()
    assert results == [("first", Outcome.FAILED), ("second", Outcome.FAILED), ("third", Outcome.FAILED)]
    assert "another janitor wrote the ledger" in world.results[0].detail and world.contended
    assert all(step != "apply" for step, _ in world.timeline)
    assert world.store.ledger.deletions == (theirs,) and world.store.writes == 1  # the merge; no store over it


def test_a_ledger_changed_by_the_notes_beside_it_is_read_again_and_written() -> None:
    """The notes share the ConfigMap: its version moves, the ledger in it does not. Not another writer."""
    world = World(action("old"))
    world.store.before_write = lambda: setattr(world.store, "version", world.store.version + 1)
    assert world.run() == [("old", Outcome.DONE)] and not world.contended
    assert len(world.store.ledger.deletions) == 1


def test_dry_run_records_keeps_and_stores_nothing() -> None:
    act, change = reclaim("train")
    world = World(action("old"), act, changes=(change,), dry_run=True)
    assert world.run() == [("old", Outcome.DONE), ("train", Outcome.DONE)]
    assert world.timeline == [("recheck", "old"), ("apply", "old"), ("recheck", "train"), ("apply", "train")]
    assert world.store.writes == 0 and world.notes.kept == []


def test_a_fence_that_closes_during_the_recheck_records_and_changes_nothing() -> None:
    """The re-read may outlast the lease: the fence is asked again before the record."""
    world = World(action("first"), fence=iter([True]))
    assert world.run() == [("first", Outcome.SKIPPED)]
    assert world.timeline == [("recheck", "first")]
    assert world.store.writes == 0


def test_a_fence_that_closes_stops_before_the_next_action_and_stores_no_ledger() -> None:
    world = World(action("first"), action("second"))
    world.fence = iter(lambda: ("apply", "first") not in world.timeline, None)  # closes once "first" is done
    assert world.run() == [("first", Outcome.DONE)]
    assert world.timeline == [("recheck", "first"), ("ledger", "1"), ("apply", "first")]  # no store at the end
    assert world.store.writes == 1


def test_a_fence_that_closes_while_the_ledger_record_is_written_stops_the_delete() -> None:
    """The fence is asked before the record, and the record (a read and a write of the state ConfigMap,
    twice on a conflict, each up to the client's timeout) can outlast the lease: an action without a
    note (an expiry's) must not be applied after it."""
    lease = {"held": True}
    world = World(action("first"), fence=iter(lambda: lease["held"], None))
    world.store.before_write = lambda: lease.update(held=False)  # the ledger request outlasts the lease
    world.run()
    assert ("apply", "first") not in world.timeline, world.timeline


def test_a_fence_that_closes_while_the_ledger_is_read_writes_no_record() -> None:
    lease = {"held": True}
    world = World(action("first"), fence=iter(lambda: lease["held"], None))
    world.store.during_read = lambda: lease.update(held=False)
    assert world.run() == [("first", Outcome.SKIPPED)]
    assert "no longer the leader" in world.results[0].detail
    assert world.timeline == [("recheck", "first")] and world.store.writes == 0


def test_a_fence_that_closes_once_stops_the_rest_of_the_cycle() -> None:
    """A lease renewed late opens the fence again; what this cycle decided is the new term's to redo."""
    blip = {"now": False}

    def fence() -> bool:
        closed, blip["now"] = blip["now"], False
        return not closed

    world = World(action("first"), action("second"), fence=iter(fence, None))
    world.store.before_write = lambda: blip.update(now=True)  # closed for one ask, right after the record
    assert world.run() == [("first", Outcome.SKIPPED)]
    assert [step for step, _ in world.timeline] == ["recheck", "ledger"]  # no apply, nothing stored at the end


def test_a_fence_that_closes_during_the_probe_posts_no_event_and_writes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe (a dry run) can take the client's whole timeout: the fence is asked again after it."""
    lease = {"held": True}
    calls: list[str] = []

    def call(api: Any, method: str, path: str, *, body: Any = None, content_type: str = "",
             dry_run: bool = False, doing: str = "", field_manager: str = "") -> dict[str, Any]:
        probe = dry_run or "All" in ((body or {}).get("dryRun") or [])
        calls.append(f"{method}{' (probe)' if probe else ''}")
        lease["held"] = False  # the answer came after the lease's renew deadline
        return {}

    monkeypatch.setattr(kube, "_call", call)
    act, _ = reclaim("train", ActionType.DELETE)
    result = kube.apply(None, act, kind=ResourceKind("batch", "v1", "Job", "jobs"), fence=lambda: lease["held"])  # type: ignore[arg-type]
    assert calls == ["DELETE (probe)"]
    assert result.outcome is Outcome.SKIPPED and "no longer the leader" in result.detail


def _lease_lost_at(monkeypatch: pytest.MonkeyPatch, lost: Callable[[str, str, bool], bool]) -> tuple[
        list[str], Callable[[], bool]]:
    """`kube._call` answering everything, and a lease that is lost once `lost(method, path, probe)`
    was answered; the calls made, and the fence."""
    lease = {"held": True}
    calls: list[str] = []

    def call(api: Any, method: str, path: str, *, body: Any = None, content_type: str = "",
             dry_run: bool = False, doing: str = "", field_manager: str = "") -> dict[str, Any]:
        probe = dry_run or "All" in ((body or {}).get("dryRun") or [])
        resource = "events" if path.endswith("/events") else path.rsplit("/", 2)[-2]
        calls.append(f"{method} {resource}{' (probe)' if probe else ''}")
        if lost(method, path, probe):
            lease["held"] = False  # the answer came after the lease's renew deadline
        return {}

    monkeypatch.setattr(kube, "_call", call)
    return calls, lambda: lease["held"]


KUEUE_WL = ObjectRef("Workload", "kueue.x-k8s.io/v1beta1", "team-a", "train-wl", "uid-wl")


@pytest.mark.parametrize(("kind", "via", "real"), [
    pytest.param(ActionType.DELETE, None, "DELETE jobs", id="delete"),
    pytest.param(ActionType.SUSPEND, None, "PATCH jobs", id="suspend"),
    pytest.param(ActionType.SUSPEND, KUEUE_WL, "PATCH workloads", id="through-kueue"),
    pytest.param(ActionType.REPORT, None, "PATCH jobs", id="report"),
])
def test_a_fence_that_closes_while_the_event_is_posted_writes_nothing(
        monkeypatch: pytest.MonkeyPatch, kind: ActionType, via: ObjectRef | None, real: str) -> None:
    """The Event is a request of its own, up to the client's whole timeout: longer than a lease may
    have left. The fence is asked again right before the real write."""
    calls, fence = _lease_lost_at(monkeypatch, lambda method, path, probe: method == "POST")
    act = replace(action("train", kind), via=via, record={"janitor/reclaimed": "r"} if via else {})
    result = kube.apply(None, act, kind=ResourceKind("batch", "v1", "Job", "jobs"), fence=fence)  # type: ignore[arg-type]
    assert result.outcome is Outcome.SKIPPED and "no longer the leader" in result.detail
    assert calls[-1] == "POST events" and real not in calls, calls  # the Event, and nothing after it


def test_a_fence_that_closes_after_a_cronjobs_write_suspends_none_of_its_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    cronjob = ObjectRef("CronJob", "batch/v1", "team-a", "nightly", "uid-nightly")
    runs = tuple(ObjectRef("Job", "batch/v1", "team-a", f"nightly-{i}", f"uid-nightly-{i}") for i in (1, 2))
    calls, fence = _lease_lost_at(monkeypatch, lambda method, path, probe: (method, probe) == ("PATCH", False)
                                  and "/cronjobs/" in path)
    act = replace(action("nightly", ActionType.SUSPEND), target=cronjob, also=runs)
    result = kube.apply(None, act, kind=ResourceKind("batch", "v1", "CronJob", "cronjobs"), fence=fence)  # type: ignore[arg-type]
    assert result.outcome is Outcome.FAILED and "but not the Jobs it runs" in result.detail
    assert [c for c in calls if "(probe)" not in c] == ["POST events", "PATCH cronjobs"]


def test_a_report_is_applied_as_planned_and_the_recheck_decides_the_lifecycles_change() -> None:
    act, planned_change = reclaim("train")
    fresh_change = replace(planned_change, why=why(Code.STILL_DUE))
    world = World(action("typo", ActionType.REPORT), act, changes=(planned_change,))
    world.cluster.changes["train"] = fresh_change
    assert world.run() == [("typo", Outcome.DONE), ("train", Outcome.DONE)]
    assert world.timeline[0] == ("apply", "typo")  # no re-check, no record
    assert world.executor is not None and world.executor.rechecked == {act.key: fresh_change}
