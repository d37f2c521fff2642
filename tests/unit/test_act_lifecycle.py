"""The lifecycle's writes and messages (act/lifecycle.py), against a fake apiserver and a fake Slack.

The changes are real decisions (`plan_lifecycle` on the fake cluster's objects); the fakes stand
for the two small interfaces `LifecycleRun` talks through (`Annotator`, `Messenger`). The fake
apiserver guards every write by resourceVersion, as the real one does.

Aspects covered:
- a send's intent is written before the message goes out, and its delivery (warned-at,
  warned-via, warned-of, expires; reminded-at for a reminder) after it; a failed send leaves the
  intent, and the next cycle asks Slack about it;
- RECOVER: an earlier send Slack has is recorded without sending again; none on Slack sends again
  under a new intent once the retry time passed, and not before; nothing is sent while Slack
  cannot say (SlackUnavailable) or no Slack is configured;
- a conflict is retried once, on the fresh resourceVersion, only when the annotations the decision
  read are unchanged (a status update, the janitor's own earlier write); a changed opt-out,
  keep-until or janitor/ttl is not overwritten, and nothing is sent for it;
- a fence that closes (another replica may be leader) stops writes and sends; the intent left
  behind is the new leader's to recover;
- "done" notes are sent only for ACT changes whose action went through, and write nothing back;
- a "cancelled" note (and a dropped copy) never writes warning records back onto the workload;
- one digest per owner and cycle; a spent send budget leaves the intents for the next cycle.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import pytest
from factories import NOW, ago, obj

from janitor import annotations as a
from janitor import errors
from janitor.act.lifecycle import LifecycleOutcome, LifecycleRun
from janitor.act.slack import Digest, SendResult, SlackUnavailable
from janitor.annotations import Delivery, Intent, NoticeKind, WarnedOf
from janitor.decide.consent import intent_id
from janitor.decide.lifecycle import Change, Step, plan_lifecycle
from janitor.decide.model import Finding, ObjectRef, ObjectView, State, TriggerKind
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.reasons import Code, why
from janitor.policy.model import IdleGpu, Lifecycle, Mode, Policy
from janitor.why_note import WhyNote

M = datetime.timedelta(minutes=1)
H = datetime.timedelta(hours=1)
DAY = 24 * H
ALICE = Owner(OwnerKind.EMAIL, "alice@lab.example")
POLICY = Policy("idle-gpu", (IdleGpu(),), mode=Mode.ENFORCE, lifecycle=Lifecycle(warn_before=DAY, remind_every=8 * H))
SENT_AT = NOW + 90 * datetime.timedelta(seconds=1)  # Slack's timestamp of what the fake Slack delivers
REASONS = {
    State.FIRES: why(Code.GPU_IDLE, detail="GPU 0 peak 0", signal="DCGM_FI_DEV_GPU_UTIL", threshold=5.0,
                     window="2:00:00"),
    State.CLEAR: why(Code.GPU_BUSY, detail="GPU 0 peak 97"),
}


def t(when: datetime.datetime) -> str:
    return a.format_expires(when)


def ts(when: datetime.datetime) -> str:
    return f"{when.timestamp():.6f}"


def marked(name: str, marked_at: datetime.datetime, warned_at: datetime.datetime | None = None,
           **more: str) -> dict[str, str]:
    """The janitor's mark on `name` (uid `uid-<name>`), warned of a delete warnBefore after marking."""
    deadline = marked_at + DAY
    notes = {a.POLICY: POLICY.name, a.DEADLINE: t(deadline), a.MARKED_AT: t(marked_at), a.REASON: "idle",
             a.MARKED_UID: f"uid-{name}"}
    if warned_at is not None:
        notes |= {a.WARNED_AT: t(warned_at), a.WARNED_VIA: f"owner D0ALICE/{ts(warned_at)}",
                  a.WARNED_OF: f"delete {t(deadline)}"}
    return notes | more


SENT = intent_id(ALICE, datetime.datetime(2026, 11, 23, 9, tzinfo=datetime.timezone.utc))  # an earlier send's id


def in_flight(kind: NoticeKind, at: datetime.datetime, warns_of: WarnedOf | None = None) -> str:
    return str(Intent(kind, SENT, at, warns_of))


# -- the fakes ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Write:
    name: str
    resource_version: str  # the one the write was guarded by
    notes: Mapping[str, str | None]
    event: tuple[str, str] | None


@dataclass
class Cluster:
    """An apiserver holding annotations: writes are merge-patches guarded by uid and resourceVersion.
    `timeline` is shared with the fake Slack, so the order of writes and sends can be read off it."""

    objects: dict[str, ObjectView] = field(default_factory=dict)
    timeline: list[tuple[str, str]] = field(default_factory=list)  # ("write", name) | ("send", intent)
    attempts: list[Write] = field(default_factory=list)  # every annotate call, conflicting ones too
    before_write: list[Callable[[], None]] = field(default_factory=list)  # someone else's update lands first

    def add(self, name: str, notes: Mapping[str, str] | None = None) -> ObjectView:
        view = obj(name, kind="Job", namespace="team-a", annotations=dict(notes or {}), uid=f"uid-{name}")
        self.objects[view.ref.uid] = view
        return view

    def view(self, name: str) -> ObjectView:
        return self.objects[f"uid-{name}"]

    def notes(self, name: str) -> dict[str, str]:
        return dict(self.view(name).annotations)

    def update(self, name: str, notes: Mapping[str, str | None] | None = None) -> None:
        """Another client's write (a controller's status update, an owner's kubectl annotate)."""
        view = self.view(name)
        merged = {k: v for k, v in {**view.annotations, **(notes or {})}.items() if v is not None}
        self.objects[view.ref.uid] = replace(view, annotations=merged,
                                             resource_version=str(int(view.resource_version) + 1))

    # Annotator
    def annotate(self, ref: ObjectRef, resource_version: str, notes: Mapping[str, str | None], *,
                 event: tuple[str, str] | None = None) -> str:
        self.attempts.append(Write(ref.name, resource_version, dict(notes), event))
        if self.before_write:
            self.before_write.pop(0)()
        view = self.objects.get(ref.uid)
        if view is None:
            raise errors.NotFound(f"jobs {ref.name} not found", status=404)
        if view.resource_version != resource_version:
            raise errors.Conflict("the object has been modified; please apply your changes to the latest version",
                                  status=409)
        self.update(ref.name, notes)
        self.timeline.append(("write", ref.name))
        return self.view(ref.name).resource_version

    def read(self, ref: ObjectRef) -> ObjectView | None:
        return self.objects.get(ref.uid)


@dataclass
class Slack:
    """Slack as the janitor sees it: sends deliver (or fail), and its history says what arrived."""

    cluster: Cluster
    deliver: bool = True
    history: Delivery | SlackUnavailable | None = None  # what find_sent answers
    during_send: Callable[[], None] | None = None
    sent: list[Digest] = field(default_factory=list)
    asked: list[tuple[Owner, str, datetime.datetime]] = field(default_factory=list)

    def send(self, digest: Digest) -> SendResult:
        self.sent.append(digest)
        self.cluster.timeline.append(("send", digest.intent))
        if self.during_send is not None:
            self.during_send()
        if not self.deliver:
            return SendResult(digest, None, "ratelimited")
        return SendResult(digest, Delivery("D0ALICE", ts(SENT_AT)))

    def find_sent(self, owner: Owner, intent: str, *, since: datetime.datetime,
                  uid: str | None = None) -> Delivery | None:
        self.asked.append((owner, intent, since))
        if isinstance(self.history, SlackUnavailable):
            raise self.history
        return self.history

    def notices(self) -> list[tuple[NoticeKind, str]]:
        return [(n.kind, n.workload.name) for d in self.sent for n in d.notices]


class Fence:
    def __init__(self) -> None:
        self.open = True

    def __call__(self) -> bool:
        return self.open


# -- deciding and running a cycle ---------------------------------------------------------------------

@dataclass(frozen=True)
class Decided:
    changes: tuple[Change, ...]
    seen: Mapping[str, Mapping[str, str]]  # uid -> the annotations the changes were decided on

    def step(self, name: str) -> Step:
        return next(c.step for c in self.changes if c.workload.name == name)

    def only(self, step: Step) -> Change:
        [change] = [c for c in self.changes if c.step is step]
        return change


def decide(cluster: Cluster, states: Mapping[str, State] | None = None, *,
           now: datetime.datetime = NOW) -> Decided:
    """One cycle's lifecycle decision on the cluster as it is now (every workload idle unless said)."""
    views = list(cluster.objects.values())
    states = states if states is not None else {v.ref.name: State.FIRES for v in views}
    findings = [Finding(TriggerKind.IDLE_GPU, POLICY.name, POLICY.mode, cluster.view(name).ref, state,
                        REASONS[state], gpus=1, owner=ALICE) for name, state in states.items()]
    return Decided(plan_lifecycle([], views, findings, [POLICY], now),
                   {v.ref.uid: dict(v.annotations) for v in views})


def run(cluster: Cluster, slack: Slack | None, decided: Decided, *, done: Iterable[Change] = (),
        now: datetime.datetime = NOW, fence: Callable[[], bool] = lambda: True,
        send_budget: datetime.timedelta = datetime.timedelta(seconds=20)) -> LifecycleOutcome:
    lifecycle = LifecycleRun(cluster, slack, {POLICY.name: POLICY}, now, decided.seen, fence,
                             send_budget=send_budget, notice_retry=5 * M)
    return lifecycle.run(decided.changes, tuple(done))


def kinds(cluster: Cluster) -> list[str]:
    return [kind for kind, _ in cluster.timeline]


def mark_of(cluster: Cluster, name: str) -> a.Mark:
    mark = a.read_mark(cluster.notes(name))
    assert mark is not None, cluster.notes(name)
    return mark


# -- intents before sends, deliveries after ------------------------------------------------------------

def test_a_new_mark_is_written_with_its_intent_before_the_warning_and_its_delivery_after() -> None:
    cluster = Cluster()
    cluster.add("train")
    slack = Slack(cluster)
    decided = decide(cluster)
    assert decided.step("train") is Step.MARK
    out = run(cluster, slack, decided)

    [digest] = slack.sent
    assert cluster.timeline == [("write", "train"), ("send", digest.intent), ("write", "train")]
    mark_write, delivery_write = cluster.attempts
    intent = Intent.parse(str(mark_write.notes[a.NOTICE]))
    assert intent is not None and intent.id == digest.intent == intent_id(ALICE, NOW)  # findable on Slack
    assert mark_write.notes[a.MARKED_UID] == "uid-train" and mark_write.event is not None
    assert mark_write.event[0] == "IdleMarked"
    assert [(n.kind, n.workload.name) for n in digest.notices] == [(NoticeKind.WARNING, "train")]
    warned_of = f"delete {t(SENT_AT + DAY)}"  # the least notice counts from the delivery
    assert delivery_write.notes == {a.NOTICE: None, a.WARNED_AT: t(SENT_AT),
                                    a.WARNED_VIA: f"owner D0ALICE/{ts(SENT_AT)}",
                                    a.WARNED_OF: warned_of, a.WARNED_TO: "email:alice@lab.example",
                                    a.DEADLINE: t(SENT_AT + DAY), a.WHY: delivery_write.notes[a.WHY]}
    note = WhyNote.parse(str(delivery_write.notes[a.WHY]))  # the reason as data follows the deadline
    assert note is not None and note.deadline == SENT_AT + DAY and note.action == "delete"
    assert delivery_write.event is None
    assert out.failed == [] and [r.delivery is not None for r in out.sent] == [True]

    mark = mark_of(cluster, "train")
    assert mark.problems == () and mark.warned and mark.intent is None and mark.deadline == SENT_AT + DAY
    # The next cycle reads back what was written and waits for the deadline the owner was given.
    assert decide(cluster, now=NOW + H).step("train") is Step.WAIT


@pytest.mark.parametrize(("notes", "kind", "recorded"), [
    pytest.param(marked("train", ago(hours=2)), NoticeKind.WARNING,
                 {a.NOTICE, a.WARNED_AT, a.WARNED_VIA, a.WARNED_OF, a.WARNED_TO, a.DEADLINE},
                 id="warning-of-a-marked-workload"),
    pytest.param(marked("train", ago(hours=9), ago(hours=9)), NoticeKind.REMINDER, {a.NOTICE, a.REMINDED_AT},
                 id="reminder"),
])
def test_a_notice_to_a_marked_workload_writes_its_intent_first_and_its_delivery_after(
        notes: dict[str, str], kind: NoticeKind, recorded: set[str]) -> None:
    cluster = Cluster()
    cluster.add("train", notes)
    slack = Slack(cluster)
    decided = decide(cluster)
    assert decided.step("train") is Step.NOTIFY
    run(cluster, slack, decided)

    assert kinds(cluster) == ["write", "send", "write"]
    intent_write, delivery_write = cluster.attempts
    assert set(intent_write.notes) == {a.NOTICE}
    intent = Intent.parse(str(intent_write.notes[a.NOTICE]))
    assert intent is not None and intent.kind is kind and intent.id == slack.sent[0].intent
    assert set(delivery_write.notes) == recorded and delivery_write.notes[a.NOTICE] is None
    assert slack.notices() == [(kind, "train")]
    mark = mark_of(cluster, "train")
    assert mark.problems == () and mark.warned and mark.intent is None


def test_a_failed_send_leaves_the_intent_and_the_next_cycle_asks_slack() -> None:
    cluster = Cluster()
    cluster.add("train")
    slack = Slack(cluster, deliver=False)
    out = run(cluster, slack, decide(cluster))

    assert kinds(cluster) == ["write", "send"]  # nothing recorded after the failed send
    assert [r.delivery for r in out.sent] == [None]
    mark = mark_of(cluster, "train")
    assert mark.intent is not None and mark.intent.kind is NoticeKind.WARNING and not mark.warned
    assert a.WARNED_AT not in cluster.notes("train")
    later = decide(cluster, now=NOW + 10 * M)
    assert later.only(Step.RECOVER).intent == mark.intent


def test_without_slack_the_intent_is_written_and_nothing_is_sent_or_acted_on() -> None:
    cluster = Cluster()
    cluster.add("train")
    run(cluster, None, decide(cluster))
    assert kinds(cluster) == ["write"]
    assert mark_of(cluster, "train").intent is not None
    # A send in flight is left as it is: only Slack can say whether it arrived.
    run(cluster, None, decide(cluster, now=NOW + H), now=NOW + H)
    assert kinds(cluster) == ["write"]


# -- recovering a send in flight ----------------------------------------------------------------------

INTENT_AT = ago(minutes=10)
WARNS_OF = WarnedOf("delete", INTENT_AT + DAY)
FOUND_AT = INTENT_AT + 20 * datetime.timedelta(seconds=1)  # Slack's timestamp of the earlier send


def recovering(intent_at: datetime.datetime = INTENT_AT) -> Cluster:
    """Marked, its warning's intent written; the janitor stopped before recording the delivery."""
    cluster = Cluster()
    cluster.add("train", marked("train", intent_at) | {a.NOTICE: in_flight(NoticeKind.WARNING, intent_at, WARNS_OF)})
    return cluster


def test_a_send_slack_already_has_is_recorded_without_sending_again() -> None:
    cluster = recovering()
    slack = Slack(cluster, history=Delivery("D0ALICE", ts(FOUND_AT)))
    decided = decide(cluster)
    assert decided.step("train") is Step.RECOVER
    out = run(cluster, slack, decided)

    assert slack.sent == [] and out.recovered == 1
    assert slack.asked == [(ALICE, SENT, INTENT_AT - 5 * M)]
    [record] = cluster.attempts
    assert record.notes == {a.NOTICE: None, a.WARNED_AT: t(FOUND_AT), a.WARNED_VIA: f"owner D0ALICE/{ts(FOUND_AT)}",
                            a.WARNED_OF: f"delete {t(FOUND_AT + DAY)}", a.WARNED_TO: "email:alice@lab.example",
                            a.DEADLINE: t(FOUND_AT + DAY)}
    mark = mark_of(cluster, "train")
    assert mark.problems == () and mark.warned and mark.intent is None


def test_a_send_slack_does_not_have_is_sent_again_under_a_new_intent_once_the_retry_time_passed() -> None:
    cluster = recovering()
    slack = Slack(cluster, history=None)
    run(cluster, slack, decide(cluster))

    [digest] = slack.sent
    assert digest.intent == intent_id(ALICE, NOW) != SENT
    assert kinds(cluster) == ["write", "send", "write"]
    resent, delivery = cluster.attempts
    intent = Intent.parse(str(resent.notes[a.NOTICE]))
    # Sent again now, it names the deadline kept from now (the least notice), not the lost attempt's.
    assert intent is not None and intent.id == digest.intent and intent.warns_of == WarnedOf("delete", NOW + DAY)
    assert delivery.notes[a.WARNED_OF] == f"delete {t(SENT_AT + DAY)}" and delivery.notes[a.NOTICE] is None
    assert mark_of(cluster, "train").warned


@pytest.mark.parametrize(("history", "intent_at"), [
    pytest.param(None, ago(minutes=2), id="none-on-slack-retry-time-not-passed"),
    pytest.param(SlackUnavailable("ratelimited"), INTENT_AT, id="slack-cannot-say"),
    pytest.param(SlackUnavailable("ratelimited"), ago(hours=5), id="slack-cannot-say-for-hours"),
])
def test_a_send_in_flight_waits_when_sending_again_could_repeat_it(
        history: SlackUnavailable | None, intent_at: datetime.datetime) -> None:
    cluster = recovering(intent_at)
    before = cluster.notes("train")
    slack = Slack(cluster, history=history)
    out = run(cluster, slack, decide(cluster))
    assert len(slack.asked) == 1
    assert slack.sent == [] and cluster.attempts == [] and out.recovered == 0
    assert cluster.notes("train") == before


# -- conflicts ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("meanwhile", "retried"), [
    pytest.param({}, True, id="status-update"),
    pytest.param({"deployment.kubernetes.io/revision": "2"}, True, id="other-annotation"),
    pytest.param({a.OPT_OUT: "true"}, False, id="owner-opted-out"),
    pytest.param({a.KEEP_UNTIL: t(NOW + 48 * H)}, False, id="owner-keeps-it"),
    pytest.param({a.TTL: "1h"}, False, id="ttl-set"),
])
def test_a_conflict_is_retried_only_when_the_annotations_decided_on_are_unchanged(
        meanwhile: dict[str, str], retried: bool) -> None:
    cluster = Cluster()
    cluster.add("train")
    slack = Slack(cluster)
    decided = decide(cluster)
    cluster.before_write.append(lambda: cluster.update("train", meanwhile))  # lands between read and write
    out = run(cluster, slack, decided)

    first, *rest = cluster.attempts
    assert first.resource_version == "100"
    if retried:
        assert rest[0].resource_version == "101" and rest[0].notes == first.notes  # the same decision, fresh version
        assert kinds(cluster) == ["write", "send", "write"] and out.failed == []
        assert mark_of(cluster, "train").warned
    else:
        assert rest == [] and slack.sent == [] and len(out.failed) == 1
        assert a.read_mark(cluster.notes("train")) is None  # the owner's change stands; the next cycle decides again
        assert cluster.notes("train") == meanwhile


def test_a_conflict_is_retried_once_only() -> None:
    cluster = Cluster()
    cluster.add("train")
    slack = Slack(cluster)
    decided = decide(cluster)
    cluster.before_write.extend([lambda: cluster.update("train"), lambda: cluster.update("train"),
                                 lambda: cluster.update("train")])
    out = run(cluster, slack, decided)
    assert [w.resource_version for w in cluster.attempts] == ["100", "101"]
    assert cluster.timeline == [] and slack.sent == [] and len(out.failed) == 1


def test_a_conflict_after_the_janitors_own_write_is_retried() -> None:
    """The Job controller updates its status while the warning is being sent: the delivery is
    recorded on the fresh version, since the only annotation change is the janitor's own intent."""
    cluster = Cluster()
    cluster.add("train")
    slack = Slack(cluster, during_send=lambda: cluster.update("train"))
    out = run(cluster, slack, decide(cluster))
    assert [w.resource_version for w in cluster.attempts] == ["100", "101", "102"]
    assert kinds(cluster) == ["write", "send", "write"] and out.failed == []
    assert mark_of(cluster, "train").warned


def test_an_owner_edit_during_the_send_leaves_the_intent_for_the_next_cycle_to_recover() -> None:
    cluster = Cluster()
    cluster.add("train")
    slack = Slack(cluster, during_send=lambda: cluster.update("train", {a.KEEP_UNTIL: t(NOW + 48 * H)}))
    run(cluster, slack, decide(cluster))
    assert kinds(cluster) == ["write", "send"]  # the delivery write conflicted and was not retried
    mark = mark_of(cluster, "train")
    assert mark.intent is not None and not mark.warned

    # Next cycle: Slack has the message, so it is recorded, not sent again.
    slack = Slack(cluster, history=Delivery("D0ALICE", ts(SENT_AT)))
    later = decide(cluster, now=NOW + 10 * M)
    assert later.step("train") is Step.RECOVER
    out = run(cluster, slack, later, now=NOW + 10 * M)
    assert slack.sent == [] and out.recovered == 1
    assert mark_of(cluster, "train").warned and cluster.notes("train")[a.KEEP_UNTIL] == t(NOW + 48 * H)


# -- the leader's fence ---------------------------------------------------------------------------------

def test_a_closed_fence_stops_every_write_and_send() -> None:
    cluster = Cluster()
    cluster.add("train")
    cluster.add("done-job", marked("done-job", ago(hours=30), ago(hours=30)))
    slack = Slack(cluster)
    decided = decide(cluster)
    fence = Fence()
    fence.open = False
    out = run(cluster, slack, decided, done=[decided.only(Step.ACT)], fence=fence)
    assert cluster.attempts == [] and slack.sent == []
    assert len(out.failed) == 1 and "no longer the leader" in out.failed[0]


def test_a_fence_closing_after_the_intent_was_written_stops_the_send() -> None:
    cluster = Cluster()
    cluster.add("train")
    slack = Slack(cluster)
    fence = Fence()
    decided = decide(cluster)
    cluster.before_write.append(lambda: setattr(fence, "open", False))  # leadership lost during the write
    run(cluster, slack, decided, fence=fence)
    assert kinds(cluster) == ["write"] and slack.sent == []
    # The intent is on the workload: the new leader asks Slack before sending.
    assert decide(cluster, now=NOW + M).step("train") is Step.RECOVER


def test_a_fence_closing_during_the_send_stops_the_delivery_write() -> None:
    cluster = Cluster()
    cluster.add("train")
    fence = Fence()
    slack = Slack(cluster, during_send=lambda: setattr(fence, "open", False))
    out = run(cluster, slack, decide(cluster), fence=fence)
    assert kinds(cluster) == ["write", "send"] and len(cluster.attempts) == 1
    assert mark_of(cluster, "train").intent is not None and len(out.failed) == 1


# -- what is sent, and what a message writes back ------------------------------------------------------

@pytest.mark.parametrize("went_through", [True, False], ids=["action-done", "action-not-done"])
def test_done_notes_go_out_only_for_actions_that_went_through(went_through: bool) -> None:
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    before = cluster.notes("old")
    slack = Slack(cluster)
    decided = decide(cluster)
    act = decided.only(Step.ACT)
    run(cluster, slack, decided, done=[act] if went_through else [])
    assert slack.notices() == ([(NoticeKind.DONE, "old")] if went_through else [])
    assert cluster.attempts == [] and cluster.notes("old") == before  # a "done" note records nothing


def test_one_digest_per_owner_and_only_marks_record_its_delivery() -> None:
    cluster = Cluster()
    cluster.add("new")
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    slack = Slack(cluster)
    decided = decide(cluster)
    run(cluster, slack, decided, done=[decided.only(Step.ACT)])
    [digest] = slack.sent
    assert sorted((n.kind, n.workload.name) for n in digest.notices) == [(NoticeKind.DONE, "old"),
                                                                         (NoticeKind.WARNING, "new")]
    assert [w.name for w in cluster.attempts] == ["new", "new"]


@pytest.mark.parametrize("notes", [
    pytest.param(marked("train", ago(hours=2), ago(hours=2)), id="warned"),
    pytest.param(marked("train", ago(hours=2), ago(hours=2),
                        **{a.NOTICE: in_flight(NoticeKind.REMINDER, ago(minutes=1))}), id="warned-reminder-in-flight"),
])
def test_a_cancelled_note_never_writes_warning_records_back(notes: dict[str, str]) -> None:
    cluster = Cluster()
    cluster.add("train", notes | {a.KEEP_UNTIL: t(NOW + H)})
    slack = Slack(cluster)
    decided = decide(cluster, {"train": State.CLEAR})  # busy again
    assert decided.step("train") is Step.UNMARK
    out = run(cluster, slack, decided)

    assert slack.notices() == [(NoticeKind.CANCELLED, "train")] and out.sent[0].delivery is not None
    assert kinds(cluster) == ["write", "send"]  # the removal, the note; nothing after it
    assert a.read_mark(cluster.notes("train")) is None
    assert cluster.notes("train") == {a.KEEP_UNTIL: t(NOW + H)}  # the owner's own annotation stays


def test_a_dropped_copy_is_removed_without_a_message() -> None:
    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=30), ago(hours=30), **{a.MARKED_UID: "uid-of-the-deleted-job"}))
    slack = Slack(cluster)
    decided = decide(cluster)
    assert decided.step("train") is Step.DROP_COPY
    run(cluster, slack, decided)
    assert slack.sent == [] and kinds(cluster) == ["write"] and cluster.attempts[0].event is None
    assert cluster.notes("train") == {}


def test_a_spent_send_budget_leaves_the_intents_for_the_next_cycle() -> None:
    cluster = Cluster()
    cluster.add("train")
    slack = Slack(cluster)
    out = run(cluster, slack, decide(cluster), send_budget=datetime.timedelta(0))
    assert slack.sent == [] and out.unsent == 1 and kinds(cluster) == ["write"]
    assert mark_of(cluster, "train").intent is not None



def test_one_message_for_several_workloads_is_looked_up_once() -> None:
    """After a crash, the workloads of one digest share its intent: Slack is asked once per message,
    not once per workload (Slack's rate limits would stall the cycles)."""
    cluster = Cluster()
    for name in ("train-a", "train-b", "train-c"):
        cluster.add(name, marked(name, INTENT_AT) | {a.NOTICE: in_flight(NoticeKind.WARNING, INTENT_AT, WARNS_OF)})
    slack = Slack(cluster, history=Delivery("D0ALICE", ts(FOUND_AT)))
    decided = decide(cluster)
    assert [c.step for c in decided.changes] == [Step.RECOVER] * 3
    out = run(cluster, slack, decided)
    assert out.recovered == 3 and slack.sent == []
    assert len(slack.asked) == 1


def test_a_reclaim_other_than_delete_is_announced_only_after_the_next_cycle_saw_it_hold() -> None:
    """Its "done" note waits in notes.json (kept before the action): GitOps or KEDA may undo it."""
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    slack = Slack(cluster)
    act = decide(cluster).only(Step.ACT)
    assert act.action is not None
    scaled = replace(act, action=replace(act.action, record={a.RECLAIMED: f"scale-to-zero {t(NOW)} idle-gpu 1"}))
    run(cluster, slack, decide(cluster), done=[scaled])
    assert slack.notices() == []
