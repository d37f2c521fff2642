"""The "done" and "cancelled" notes kept in the state ConfigMap until Slack has them (act/notes.py),
with the lifecycle's fake apiserver and fake Slack (test_act_lifecycle).

Aspects covered:
- a "done" note kept before its action and not delivered (Slack down) is sent in a later cycle,
  once, and crossed off;
- a "cancelled" note is kept before the unmark it announces; when it cannot be kept the unmark
  waits (the mark, which says who to tell, stays);
- a kept note is sent only on positive evidence: its workload still carrying the mark means the
  change never happened (dropped); Slack already holding a message of its intent about its
  workload means it was sent (dropped), while one about another of the owner's workloads under
  the same intent (one intent per owner and cycle) does not; Slack unable to say means it waits;
  an unreadable workload means it waits; a workload of a kind no longer among `--kinds` can never
  be read: its note is dropped, said once;
- notes older than a week are dropped; notes.json round-trips, and a malformed one is logged and
  starts empty;
- notes.json is written over the ConfigMap's resourceVersion read only: a note `janitor unmark`
  dropped meanwhile stays dropped, a note the daemon kept meanwhile stays kept (read again, merged
  once); a second conflict refuses that one change, and the next one is kept; the state
  ConfigMap's PATCH names the version;
- warnings sent and notes kept are rendered with the cluster's name and where to ask.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
from factories import NOW, ago
from test_act_lifecycle import ALICE, POLICY, SENT_AT, Cluster, Slack, decide, marked, ts

from janitor import annotations as a
from janitor import errors
from janitor.act.lifecycle import LifecycleRun
from janitor.act.notes import KEEP_FOR, NoteBox, dumps, loads
from janitor.act.slack import Digest, SendResult, SlackUnavailable
from janitor.act.slack_messages import Message, MessageContext
from janitor.annotations import Delivery, NoticeKind
from janitor.decide.consent import intent_id
from janitor.decide.lifecycle import Step
from janitor.decide.model import ObjectRef, ObjectView, State
from janitor.decide.owners import Owner

H = datetime.timedelta(hours=1)


class Store:
    """notes.json in the state ConfigMap, written over the ConfigMap's version only (as act.kube
    writes it); writes land on the cluster's timeline."""

    def __init__(self, cluster: Cluster, text: str | None = None, fail: bool = False) -> None:
        self.cluster, self.text, self.fail = cluster, text, fail
        self.version = 1
        self.before_write: list[Callable[[], None]] = []  # another writer's, each right before one write

    def read(self) -> tuple[str | None, str | None]:
        return self.text, str(self.version)

    def write(self, text: str, version: str | None) -> str | None:
        if self.before_write:
            self.before_write.pop(0)()
        if self.fail:
            raise errors.Forbidden("configmaps is forbidden", status=403)
        if version != str(self.version):
            raise errors.Conflict("the object has been modified", status=409)
        self.cluster.timeline.append(("keep", str(len(loads(text)))))
        self.text, self.version = text, self.version + 1
        return str(self.version)

    def box(self) -> NoteBox:
        return NoteBox(self)

    def kept(self) -> list[tuple[str, str]]:
        return [(n.kind, n.workload.name) for n in loads(self.text or "[]")]


def cycle(cluster: Cluster, slack: Slack, store: Store, *, now: datetime.datetime = NOW,
          states: dict[str, State] | None = None) -> NoteBox:
    """A cycle as cycle.apply runs it: the lifecycle with the notes box, then the box stored."""
    box = store.box()
    decided = decide(cluster, states, now=now)
    LifecycleRun(cluster, slack, {POLICY.name: POLICY}, now, decided.seen, notes=box).run(decided.changes, ())
    box.store(now)
    return box


def acted_on(cluster: Cluster, store: Store, name: str, *, slack: Slack) -> None:
    """The deadline cycle: the "done" note kept (as act.executor does), the Job deleted, the
    note sent through the lifecycle."""
    box = store.box()
    decided = decide(cluster)
    act = decided.only(Step.ACT)
    assert act.notice is not None
    assert box.expect(act.notice, intent_id(ALICE, NOW), cluster.notes(name)[a.MARKED_AT], NOW) == ""
    del cluster.objects[f"uid-{name}"]  # the delete went through
    LifecycleRun(cluster, slack, {POLICY.name: POLICY}, NOW, decided.seen, notes=box).run(decided.changes, [act])
    box.store(NOW)


def test_a_done_note_slack_did_not_take_is_sent_in_a_later_cycle_once() -> None:
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    down = Slack(cluster, deliver=False)
    store = Store(cluster)
    acted_on(cluster, store, "old", slack=down)
    assert [(n.kind, n.workload.name) for d in down.sent for n in d.notices] == [(NoticeKind.DONE, "old")]
    assert store.kept() == [("done", "old")]
    assert cluster.timeline[0] == ("keep", "1")  # kept before anything else happened

    up = Slack(cluster)
    cycle(cluster, up, store, now=NOW + H)
    [digest] = up.sent
    assert digest.intent == intent_id(ALICE, NOW) and "old" in digest.messages[0].text + str(digest.messages[0].blocks)
    assert up.asked == [(ALICE, intent_id(ALICE, NOW), NOW - datetime.timedelta(minutes=5))]  # asked first
    assert store.kept() == []

    cycle(cluster, up, store, now=NOW + 2 * H)
    assert len(up.sent) == 1


def test_a_cancelled_note_is_kept_before_the_unmark_and_sent_when_slack_is_back() -> None:
    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=2), ago(hours=2)))
    store = Store(cluster)
    cycle(cluster, Slack(cluster, deliver=False), store, states={"train": State.CLEAR})
    assert cluster.timeline[:2] == [("keep", "1"), ("write", "train")]  # the note, then the unmark
    assert a.read_mark(cluster.notes("train")) is None and store.kept() == [("cancelled", "train")]

    up = Slack(cluster)
    cycle(cluster, up, store, now=NOW + H, states={"train": State.CLEAR})
    assert up.notices() == [] and len(up.sent) == 1  # the kept digest (rendered when it was kept)
    assert "train" in up.sent[0].messages[0].text + str(up.sent[0].messages[0].blocks)
    assert store.kept() == []


def test_an_unmark_waits_while_its_note_cannot_be_kept() -> None:
    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=2), ago(hours=2)))
    before = cluster.notes("train")
    slack = Slack(cluster)
    box = Store(cluster, fail=True).box()
    decided = decide(cluster, {"train": State.CLEAR})
    out = LifecycleRun(cluster, slack, {POLICY.name: POLICY}, NOW, decided.seen, notes=box).run(decided.changes, ())
    assert cluster.notes("train") == before and slack.sent == []
    assert out.failed and "could not be kept" in out.failed[0]


def kept_done_note(cluster: Cluster, store: Store, name: str, *, action: str = "") -> None:
    """A cycle that kept the "done" note of `name` and then died (before acting, or after); `action`:
    another than the policy's (delete)."""
    box = store.box()
    act = decide(cluster).only(Step.ACT)
    assert act.notice is not None
    notice = replace(act.notice, action=action) if action else act.notice
    box.expect(notice, intent_id(ALICE, NOW), cluster.notes(name)[a.MARKED_AT], NOW)


def later(cluster: Cluster, slack: Slack, store: Store, changes: tuple = (), seen: dict | None = None) -> None:
    """A later cycle's lifecycle with the notes box (an hour on), then the box stored."""
    box = store.box()
    LifecycleRun(cluster, slack, {POLICY.name: POLICY}, NOW + H, seen or {}, notes=box).run(changes, ())
    box.store(NOW + H)


def test_a_kept_note_whose_workload_still_carries_the_mark_is_dropped() -> None:
    """The janitor died after keeping the note, before the delete: nothing happened, nothing is said."""
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    kept_done_note(cluster, store, "old")
    slack = Slack(cluster)
    later(cluster, slack, store)
    assert slack.sent == [] and slack.asked == [] and store.kept() == []


@pytest.mark.parametrize(("history", "sent", "kept"), [
    pytest.param(Delivery("D0ALICE", ts(NOW)), 0, [], id="slack-has-it"),
    pytest.param(None, 1, [], id="slack-does-not"),
    pytest.param(SlackUnavailable("ratelimited"), 0, [("done", "old")], id="slack-cannot-say"),
])
def test_a_kept_note_of_a_gone_workload_is_sent_only_when_slack_does_not_have_it(
        history: Delivery | SlackUnavailable | None, sent: int, kept: list[tuple[str, str]]) -> None:
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    kept_done_note(cluster, store, "old")
    del cluster.objects["uid-old"]
    slack = Slack(cluster, history=history)
    box = store.box()
    LifecycleRun(cluster, slack, {POLICY.name: POLICY}, NOW + H, {}, notes=box).run((), ())
    box.store(NOW + H)
    assert len(slack.sent) == sent and store.kept() == kept


def test_a_kept_note_waits_while_its_workload_cannot_be_read() -> None:
    class Unreadable(Cluster):
        def read(self, ref: ObjectRef) -> ObjectView | None:
            raise errors.KubeError("timed out", doing=f"read {ref}")

    cluster = Unreadable()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    kept_done_note(cluster, store, "old")
    slack = Slack(cluster)
    later(cluster, slack, store)
    assert slack.sent == [] and store.kept() == [("done", "old")]


def test_notes_older_than_a_week_are_dropped_and_said(caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    kept_done_note(cluster, store, "old")
    box = store.box()
    box.store(NOW + KEEP_FOR + H)
    assert store.kept() == [] and "never reached them; dropped after 7 d 1 h" in caplog.text


def test_notes_round_trip_and_a_malformed_file_starts_empty(caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    kept_done_note(cluster, store, "old")
    assert store.text is not None and dumps(loads(store.text)) == store.text
    with caplog.at_level(logging.ERROR):
        box = NoteBox(Store(cluster, '[{"intent": 1}]'))
    assert box.pending == 0 and "cannot be read" in caplog.text


CONTEXT = MessageContext("mn2", "#gpu-admins", "https://wiki.lab.example/gpu-janitor")


def says_where(message: Message) -> bool:
    footer = "Questions? Ask in #gpu-admins · Researcher guide: <https://wiki.lab.example/gpu-janitor>"
    return (str(message.blocks[0]["text"]["text"]).startswith("Idle GPUs on mn2: ")
            and message.text.startswith("GPU janitor on mn2: ")
            and message.blocks[-1] == {"type": "context", "elements": [{"type": "mrkdwn", "text": footer}]})


def test_warnings_sent_and_notes_kept_name_the_cluster_and_where_to_ask() -> None:
    cluster = Cluster()
    cluster.add("new")
    cluster.add("train", marked("train", ago(hours=2), ago(hours=2)))
    store = Store(cluster)
    box = NoteBox(store, context=CONTEXT)
    slack = Slack(cluster, deliver=False)
    decided = decide(cluster, {"new": State.FIRES, "train": State.CLEAR})
    LifecycleRun(cluster, slack, {POLICY.name: POLICY}, NOW, decided.seen, notes=box, context=CONTEXT).run(
        decided.changes, ())
    box.store(NOW)
    assert sorted(slack.notices()) == [(NoticeKind.CANCELLED, "train"), (NoticeKind.WARNING, "new")]
    assert all(says_where(m) for d in slack.sent for m in d.messages)
    [note] = loads(store.text or "[]")
    assert note.kind == "cancelled" and all(says_where(m) for m in note.messages)


def reclaimed(cluster: Cluster, store: Store, name: str) -> None:
    """The deadline cycle of a suspend: the note kept, the mark gone and the reclaim recorded in one write."""
    kept_done_note(cluster, store, name, action="suspend")
    cluster.update(name, {k: None for k in cluster.notes(name)} | {a.RECLAIMED: f"suspend {ts(NOW)} idle-gpu"})


def test_a_reclaims_done_note_waits_for_the_check_that_it_held_then_goes() -> None:
    from janitor.decide.lifecycle import Change
    from janitor.decide.reasons import Code, why

    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    reclaimed(cluster, store, "old")
    slack = Slack(cluster)
    later(cluster, slack, store)
    assert slack.sent == [] and store.kept() == [("done", "old")]  # not before the check

    view = cluster.view("old")
    held = Change(Step.CHECK, view.ref, view.resource_version, POLICY.name, why(Code.RECLAIM_HELD, action="suspend",
                                                                                 at=NOW), {a.RECLAIMED: None})
    later(cluster, slack, store, (held,), {view.ref.uid: dict(view.annotations)})
    [digest] = slack.sent  # the note as kept: its messages, sent under the action's intent
    assert digest.intent == intent_id(ALICE, NOW) and "Done" in str(digest.messages[0].blocks)
    assert store.kept() == [] and a.RECLAIMED not in cluster.notes("old")


def test_a_reclaim_undone_drops_its_done_note_and_says_so_instead() -> None:
    from janitor.decide.lifecycle import Change
    from janitor.decide.notices import Notice
    from janitor.decide.reasons import Code, why

    cluster = Cluster()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    reclaimed(cluster, store, "old")
    view = cluster.view("old")
    reason = why(Code.RECLAIM_UNDONE, action="suspend", at=NOW, by="Argo CD (argocd-controller)", policy="idle-gpu",
                 again="policy idle-gpu does not mark it again while Argo CD restores it")
    undone = Change(Step.UNDONE, view.ref, view.resource_version, POLICY.name, reason,
                    {a.RECLAIMED: None, a.UNDONE: f"suspend {ts(NOW)} idle-gpu 1 argocd-controller"},
                    Notice(NoticeKind.UNDONE, view.ref, POLICY.name, ALICE, "suspend", reason, NOW + H))
    slack = Slack(cluster)
    later(cluster, slack, store, (undone,), {view.ref.uid: dict(view.annotations)})
    assert [(n.kind, n.workload.name) for d in slack.sent for n in d.notices] == [(NoticeKind.UNDONE, "old")]
    assert store.kept() == [] and cluster.notes("old")[a.UNDONE].endswith("argocd-controller")
    text = str(slack.sent[0].messages[0].blocks)
    assert "did not hold" in text and "Argo CD (argocd-controller) undid it" in text


@dataclass
class Told(Slack):
    """Slack whose history is what it delivered: messages of an intent, each naming the workloads its
    digest tells of in its metadata (as act.slack posts them)."""

    delivered: list[Digest] = field(default_factory=list)

    def send(self, digest: Digest) -> SendResult:
        result = super().send(digest)
        if result.delivery is not None:
            self.delivered.append(digest)
        return result

    def find_sent(self, owner: Owner, intent: str, *, since: datetime.datetime,
                  uid: str | None = None) -> Delivery | None:
        self.asked.append((owner, intent, since))
        told = [d for d in self.delivered if d.intent == intent and (uid is None or uid in d.uids)]
        return Delivery("D0ALICE", ts(SENT_AT)) if told else None


def test_a_kept_note_is_sent_when_another_workload_of_the_owner_was_told_in_the_same_cycle() -> None:
    """Two of alice's Jobs are acted on in one cycle: `a`'s "done" goes out under the cycle's intent
    (one per owner and cycle); `b`'s note stays in notes.json under the same intent. The next cycle
    asks Slack for that intent and finds `a`'s digest, which says nothing of `b`: `b`'s note is
    still to be sent, not crossed off."""
    cluster = Cluster()
    for name in ("a", "b"):
        cluster.add(name, marked(name, ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    box = store.box()
    decided = decide(cluster)
    acts = {c.workload.name: c for c in decided.changes if c.step is Step.ACT}
    intent = intent_id(ALICE, NOW)
    for name, act in acts.items():  # as the executor keeps them
        assert act.notice is not None
        assert box.expect(act.notice, intent, cluster.notes(name)[a.MARKED_AT], NOW) == ""
    del cluster.objects["uid-a"]
    del cluster.objects["uid-b"]
    slack = Told(cluster)
    LifecycleRun(cluster, slack, {POLICY.name: POLICY}, NOW, decided.seen, notes=box).run(decided.changes,
                                                                                         [acts["a"]])
    box.store(NOW)
    assert [(n.kind, n.workload.name) for d in slack.sent for n in d.notices] == [("done", "a")]
    assert [(n.kind, n.workload.name) for n in box.carried] == [] and store.kept() == [("done", "b")]
    later(cluster, slack, store)
    said = " ".join(m.text + str(m.blocks) for d in slack.sent[1:] for m in d.messages)
    assert "Job team-a/b" in said, f"b's 'done' note was crossed off unsent; kept now: {store.kept()}"


def test_kept_notes_under_one_intent_are_crossed_off_only_as_their_own_message_arrives() -> None:
    """Each kept note goes out alone, and two of one owner's share the intent of the cycle that kept
    them: Slack taking the first says nothing of the second, which waits for the next cycle."""
    cluster = Cluster()
    for name in ("a", "b"):
        cluster.add(name, marked(name, ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    box = store.box()
    decided = decide(cluster)
    for act in (c for c in decided.changes if c.step is Step.ACT):
        assert act.notice is not None
        assert box.expect(act.notice, intent_id(ALICE, NOW), cluster.notes(act.workload.name)[a.MARKED_AT], NOW) == ""
        del cluster.objects[act.workload.uid]  # deleted; the janitor stopped before the send

    class Once(Told):
        def send(self, digest: Digest) -> SendResult:
            result = super().send(digest)
            self.deliver = False  # Slack throttles after the first
            return result

    slack = Once(cluster)
    later(cluster, slack, store)
    assert len(slack.sent) == 2 and store.kept() == [("done", "b")]
    assert slack.sent[0].uids == ("uid-a",) and slack.sent[1].uids == ("uid-b",)


def _two_notes(cluster: Cluster, store: Store) -> None:
    """The "done" notes of `a` and `b` kept (their changes made, not yet told)."""
    for name in ("a", "b"):
        cluster.add(name, marked(name, ago(hours=30), ago(hours=30)))
    box = store.box()
    for act in (c for c in decide(cluster).changes if c.step is Step.ACT):
        assert act.notice is not None
        assert box.expect(act.notice, intent_id(ALICE, NOW), cluster.notes(act.workload.name)[a.MARKED_AT], NOW) == ""


def test_a_note_dropped_by_another_writer_stays_dropped_and_one_kept_meanwhile_stays_kept() -> None:
    cluster = Cluster()
    store = Store(cluster)
    _two_notes(cluster, store)
    daemon, unmark = store.box(), store.box()  # both read the same notes.json
    assert unmark.unmarked(cluster.view("a").ref, cluster.notes("a")[a.MARKED_AT])
    unmark.flush()  # `janitor unmark` removed a's mark: its note goes
    assert store.kept() == [("done", "b")]
    cluster.add("c", marked("c", ago(hours=30), ago(hours=30)))
    notice = next(c.notice for c in decide(cluster).changes if c.workload.name == "c" and c.step is Step.ACT)
    assert notice is not None
    assert daemon.expect(notice, intent_id(ALICE, NOW + H), cluster.notes("c")[a.MARKED_AT], NOW + H) == ""
    assert store.kept() == [("done", "b"), ("done", "c")]  # not a's again, written over unmark's
    again = store.box()
    assert again.unmarked(cluster.view("b").ref, cluster.notes("b")[a.MARKED_AT])
    daemon.forget(cluster.view("c").ref, intent_id(ALICE, NOW + H))  # the daemon writes again meanwhile
    again.flush()
    assert store.kept() == []


def test_a_second_conflict_refuses_that_change_only() -> None:
    cluster = Cluster()
    store = Store(cluster)
    _two_notes(cluster, store)
    box = store.box()
    cluster.add("c", marked("c", ago(hours=30), ago(hours=30)))
    notice = next(c.notice for c in decide(cluster).changes if c.workload.name == "c" and c.step is Step.ACT)
    assert notice is not None
    busy = [lambda: setattr(store, "version", store.version + 1)] * 2  # someone writes before each of two writes
    store.before_write = list(busy)
    marked_at = cluster.notes("c")[a.MARKED_AT]
    refused = box.expect(notice, intent_id(ALICE, NOW + H), marked_at, NOW + H)
    assert "could not be kept" in refused and store.kept() == [("done", "a"), ("done", "b")]
    assert not box.broken and box.expect(notice, intent_id(ALICE, NOW + H), marked_at, NOW + H) == ""
    assert store.kept() == [("done", "a"), ("done", "b"), ("done", "c")]


def test_the_state_configmap_is_patched_over_the_version_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from typing import Any

    from janitor import cycle
    from janitor.act import kube
    from janitor.observe import cluster as observed
    from janitor.settings import Settings

    sent: list[tuple[str, Any]] = []

    def call(api: Any, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        sent.append((method, body))
        return {"metadata": {"resourceVersion": "8"}}

    monkeypatch.setattr(observed, "read_state_versioned", lambda api, ns, name, key: ("[]", "7"))
    monkeypatch.setattr(kube, "_call", call)
    fake = Cluster()
    fake.add("old", marked("old", ago(hours=30), ago(hours=30)))
    box = cycle.note_box(None, Settings())  # type: ignore[arg-type]
    act = decide(fake).only(Step.ACT)
    assert act.notice is not None
    assert box.expect(act.notice, intent_id(ALICE, NOW), fake.notes("old")[a.MARKED_AT], NOW) == ""
    box.forget(act.workload, intent_id(ALICE, NOW))
    assert [(m, b["metadata"]) for m, b in sent] == [("PATCH", {"resourceVersion": "7"}),
                                                    ("PATCH", {"resourceVersion": "8"})]


def test_a_kept_note_whose_kind_is_no_longer_read_is_dropped_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """Notebooks were among --kinds when the note was kept, and no longer are: nothing can ever tell
    whether it changed. Dropped, in one line, not a warning each cycle until the note expires."""
    from janitor.act.lifecycle import UnknownKind
    from janitor.cycle import _Annotator

    with pytest.raises(UnknownKind):
        _Annotator(None, {}).read(ObjectRef("Notebook", "kubeflow.org/v1", "team-a", "nb", "uid-nb"))  # type: ignore[arg-type]

    class NoNotebooks(Cluster):
        def read(self, ref: ObjectRef) -> ObjectView | None:
            raise UnknownKind(ref.kind)

    cluster = NoNotebooks()
    cluster.add("old", marked("old", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    kept_done_note(cluster, store, "old")
    slack = Slack(cluster)
    with caplog.at_level(logging.INFO):
        later(cluster, slack, store)
    assert slack.sent == [] and store.kept() == []
    assert [r.getMessage() for r in caplog.records if "no longer among the kinds" in r.getMessage()] != []
    assert len([r for r in caplog.records if "old" in r.getMessage()]) == 1
