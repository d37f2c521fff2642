"""The lifecycle's writes and messages, in the order that makes a crash harmless.

An intent is written on the workload before its message goes out (in the same write as a new
mark), and the delivery (Slack's timestamp, and what the warning said) after. A cycle that finds
an intent without a delivery asks Slack before sending again (RECOVER). Every write carries the
uid and resourceVersion of the read that decided it. Unsent digests are not kept in memory: the
intents on the workloads are the queue, so a restart or a leader change loses and repeats nothing.

It talks to Kubernetes and Slack through two small interfaces (`Annotator`, `Messenger`), so the
write-ahead order is unit-tested with fakes as well as on the sandbox.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from janitor import annotations as ann
from janitor import errors
from janitor.act.notes import NoteBox, PendingNote, Seen, weigh
from janitor.act.slack import Digest, Outbox, SendResult, SlackUnavailable
from janitor.act.slack_messages import MessageContext, render_digest
from janitor.annotations import Delivery
from janitor.decide import consent, lifecycle
from janitor.decide.lifecycle import Change, Step
from janitor.decide.model import ObjectRef, ObjectView
from janitor.decide.owners import Owner
from janitor.decide.reasons import Code
from janitor.policy.model import Policy

logger = logging.getLogger(__name__)

EVENTS = {Step.MARK: "IdleMarked", Step.UNMARK: "IdleUnmarked", Step.EXTEND: "IdleDeadlineMoved",
          Step.UNDONE: "ReclaimUndone"}
KEPT = (Step.UNMARK, Step.UNDONE)  # steps whose note is kept in notes.json before their write
WRITES = (Step.MARK, Step.UNMARK, Step.DROP_COPY, Step.EXTEND, Step.NOTIFY, Step.MOVE, Step.CHECK, Step.UNDONE)


class UnknownKind(LookupError):
    """The janitor reads no objects of this kind (it is not among `--kinds`, or no longer is)."""


class Annotator(Protocol):
    def annotate(self, ref: ObjectRef, resource_version: str, notes: Mapping[str, str | None], *,
                 event: tuple[str, str] | None = None) -> str:
        """Merge `notes` (None removes) guarded by uid and resourceVersion; the new resourceVersion.
        Raises errors.KubeError (Conflict when the object changed)."""

    def read(self, ref: ObjectRef) -> ObjectView | None:
        """The object now, or None when gone or recreated. Raises errors.KubeError, or UnknownKind
        when objects of its kind are not read."""


class Messenger(Protocol):
    def send(self, digest: Digest) -> SendResult: ...

    def find_sent(self, owner: Owner, intent: str, *, since: datetime.datetime,
                  uid: str | None = None) -> Delivery | None:
        """The delivery of an earlier send with this intent (telling of the workload `uid`, when
        given); raises SlackUnavailable when Slack cannot say."""


@dataclass
class LifecycleOutcome:
    """What the lifecycle did this cycle, for logs, metrics and tests."""

    written: dict[str, int] = field(default_factory=dict)  # step -> successful writes
    failed: list[str] = field(default_factory=list)
    sent: list[SendResult] = field(default_factory=list)
    recovered: int = 0  # sends found on Slack after a crash, recorded without sending again
    unsent: int = 0  # digests left for the next cycle (time budget spent)


def decided_on(notes: Mapping[str, str]) -> dict[str, str]:
    """The annotations a lifecycle decision reads: if these are unchanged, so is the decision."""
    keys = (*ann.MARK_READ_KEYS, ann.KEEP_UNTIL, ann.OPT_OUT, ann.TTL)
    return {k: notes[k] for k in keys if k in notes}


@dataclass
class LifecycleRun:
    """One cycle's lifecycle writes and sends (the changes of one plan)."""

    annotator: Annotator
    messenger: Messenger | None
    policies: Mapping[str, Policy]
    now: datetime.datetime
    seen: Mapping[str, Mapping[str, str]]  # uid -> the annotations the plan was made on
    fence: Callable[[], bool] = lambda: True  # False once another replica may be leader
    send_budget: datetime.timedelta = datetime.timedelta(seconds=20)
    notice_retry: datetime.timedelta = datetime.timedelta(minutes=5)
    notes: NoteBox | None = None  # "done" and "cancelled" notes kept until Slack has them
    context: MessageContext = MessageContext()  # the cluster and where to ask, in every message
    out: LifecycleOutcome = field(default_factory=LifecycleOutcome)
    _rv: dict[str, str] = field(default_factory=dict)
    _expected: dict[str, dict[str, str]] = field(default_factory=dict)
    # One lookup per message (a digest's workloads share its intent; a kept note's is asked about its
    # workload), within the Slack time budget.
    _lookups: dict[tuple[Owner, str, str | None], Delivery | None | SlackUnavailable] = field(default_factory=dict)
    _lookup_seconds: float = 0.0

    def run(self, changes: Sequence[Change], done: Sequence[Change]) -> LifecycleOutcome:
        """Write and send `changes`; `done` are the ACT changes whose action went through ("done" notes)."""
        self._expected = {uid: dict(notes) for uid, notes in self.seen.items()}
        to_send: list[Change] = []
        for change in changes:
            if change.step is Step.RECOVER:
                again = self._recover(change)
                if again is None:
                    continue
                change = again
            if change.step in WRITES and change.annotations:
                if not self._notes_first(change):
                    continue
                if not self._write(change, event=EVENTS.get(change.step)):
                    if change.step in KEPT and change.notice is not None and self.notes is not None:
                        self.notes.forget(change.workload, consent.intent_id(change.notice.owner, self.now))
                    continue
                if change.step is Step.UNDONE and self.notes is not None:
                    self.notes.drop_done(change.workload, "the reclaim did not hold: its owner hears that instead")
            if change.notice is not None and change.step is not Step.ACT:  # "done" only once it is done
                to_send.append(change)
        # A reclaim other than delete is announced once the next cycle saw it hold (decide.held): its
        # note waits in notes.json until then.
        to_send.extend(c for c in done if c.notice is not None and not (c.action and c.action.record))
        if to_send and self.messenger is None:
            logger.warning("%d lifecycle messages not sent: no Slack token configured (--slack-token); "
                           "nothing is reclaimed without a delivered warning", len(to_send))
        elif to_send:
            self._send(to_send)
        if self.messenger is not None and self.notes is not None and self.fence():
            self._send_carried(self.notes.carried)
        return self.out

    def _notes_first(self, change: Change) -> bool:
        """What notes.json must say before `change` is written; False when it cannot be, and the write
        waits. An unmark drops the "done" notes about the mark it removes (their action never
        happened: it would have taken the mark), and keeps its "cancelled" note (the mark, which
        would say who to tell, goes with it); a reclaim's check that it held records that on its
        "done" notes (the check's write removes the only other sign of it)."""
        if self.notes is None:
            return True
        refused = ""
        marked_at = self.seen.get(change.workload.uid, {}).get(ann.MARKED_AT, "")
        dropped = change.step is Step.UNMARK and self.notes.unmarked(change.workload, marked_at)
        if change.step is Step.CHECK and change.why.code is Code.RECLAIM_HELD:
            refused = self.notes.held(change.workload)
        elif change.step in KEPT and change.notice is not None:
            refused = self.notes.expect(change.notice, consent.intent_id(change.notice.owner, self.now), marked_at,
                                        self.now)  # written with the notes dropped above
        elif dropped:
            self.notes.flush()
        if refused:
            self.out.failed.append(f"{change.step} {change.workload}: {refused}")
        return not refused

    def _send_carried(self, notes: Sequence[PendingNote]) -> None:
        """Notes of earlier cycles: sent once their change is seen done (act.notes.weigh) and Slack
        has no message of theirs. A note is crossed off only by a message that tells of its workload:
        its intent is one per owner and cycle, and may be on another workload's digest."""
        assert self.messenger is not None and self.notes is not None
        outbox = Outbox(self.messenger)
        for note in notes:
            if not self.notes.holds(note):  # dropped this cycle
                continue
            try:
                now = self.annotator.read(note.workload)
            except errors.KubeError as e:
                logger.warning("cannot tell whether %s changed, so its %s note waits: %s", note.workload, note.kind, e)
                continue
            except UnknownKind:  # nothing will ever tell: not a warning each cycle until the note expires
                self.notes.drop(note, f"{note.workload.kind} is no longer among the kinds the janitor reads "
                                      "(--kinds), so whether it changed cannot be told")
                continue
            seen, why_not = weigh(note, now)
            if seen is Seen.NEVER:
                self.notes.drop(note, why_not)
                continue
            if seen is Seen.NOT_YET:
                continue
            found = self._lookup(note.owner, note.intent, note.at, note.workload.uid)
            if isinstance(found, SlackUnavailable) or found is False:
                continue
            if found is not None:
                self.notes.sent(note.intent, {note.workload.uid})
                continue
            outbox.add(note.digest())
        for result in outbox.flush(max(0.0, self.send_budget.total_seconds() - self._lookup_seconds)):
            self.out.sent.append(result)
            if result.delivery is not None:
                self.notes.sent(result.digest.intent, set(result.digest.uids))
        self.out.unsent += outbox.pending

    def _lookup(self, owner: Owner, intent: str, at: datetime.datetime,
                uid: str | None = None) -> Delivery | None | SlackUnavailable | Literal[False]:
        """Whether Slack has the send `intent` (about the workload `uid`, when given; asked once per
        cycle); False: the budget is spent."""
        assert self.messenger is not None
        key = (owner, intent, uid)
        if key not in self._lookups:
            if self._lookup_seconds >= self.send_budget.total_seconds():
                return False
            began = time.monotonic()
            try:
                self._lookups[key] = self.messenger.find_sent(owner, intent, since=at - datetime.timedelta(minutes=5),
                                                              uid=uid)
            except SlackUnavailable as e:
                self._lookups[key] = e
            self._lookup_seconds += time.monotonic() - began
        return self._lookups[key]

    def _write(self, change: Change, *, event: str | None = None,
               notes: Mapping[str, str | None] | None = None) -> bool:
        """One guarded annotation write. A conflict re-reads the object: if none of the annotations
        the decision read has changed (a controller only updated its status), the same decision
        holds and is written on the fresh resourceVersion; otherwise it waits for the next cycle."""
        ref = change.workload
        if not self.fence():
            self.out.failed.append(f"{change.step} {ref}: not written, no longer the leader")
            return False
        patch = notes if notes is not None else change.annotations
        current = self._rv.get(ref.uid, change.resource_version)
        for attempt in range(2):
            try:
                self._rv[ref.uid] = self.annotator.annotate(ref, current, patch,
                                                            event=(event, str(change.why)) if event else None)
                break
            except errors.Conflict as e:
                fresh = self.annotator.read(ref) if attempt == 0 else None
                expected = self._expected.get(ref.uid)
                if fresh is None or expected is None or decided_on(fresh.annotations) != decided_on(expected):
                    return self._failed(change, e)
                current = fresh.resource_version
            except errors.KubeError as e:
                return self._failed(change, e)
        expected = self._expected.setdefault(ref.uid, {})
        for key, value in patch.items():
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
        self.out.written[str(change.step)] = self.out.written.get(str(change.step), 0) + 1
        logger.info("lifecycle %s %s: %s", change.step, ref, change.why,
                    extra={"object": str(ref), "policy": change.policy, "step": str(change.step)})
        return True

    def _failed(self, change: Change, error: errors.KubeError) -> bool:
        logger.warning("lifecycle %s %s not written: %s", change.step, change.workload, error)
        self.out.failed.append(f"{change.step} {change.workload}: {error}")
        return False

    def _recover(self, change: Change) -> Change | None:
        """Record a send Slack already has, or return the change to send again (None: not now)."""
        assert change.intent is not None and change.notice is not None
        if self.messenger is None:
            return None
        found = self._lookup(change.notice.owner, change.intent.id, change.intent.at)
        if found is False:
            logger.info("not asking Slack about the %s for %s this cycle: its time budget is spent",
                        change.intent.kind, change.workload)
            return None
        if isinstance(found, SlackUnavailable):
            logger.warning("cannot ask Slack whether the %s for %s arrived: %s; not sending again yet",
                           change.intent.kind, change.workload, found)
            return None
        if found is not None:
            record = lifecycle.delivered(change, found, self.policies.get(change.policy),
                                         self._expected.get(change.workload.uid))
            if self._write(change, notes=record):
                self.out.recovered += 1
            return None
        if self.now - change.intent.at < self.notice_retry:
            return None  # the last attempt was recent: Slack is not asked to fail again yet
        return lifecycle.resend(change, self.now)

    def _send(self, changes: Sequence[Change]) -> None:
        assert self.messenger is not None
        # One digest per owner; notices the admins already heard about (the owner was unreachable)
        # go in their own, which never falls back to the admins again.
        grouped: dict[tuple[str, bool], tuple[Owner, list[Change]]] = {}
        for change in changes:
            assert change.notice is not None
            key = (str(change.notice.owner), change.notice.admins_told)
            grouped.setdefault(key, (change.notice.owner, []))[1].append(change)
        outbox = Outbox(self.messenger)
        by_digest: dict[tuple[str, bool], list[Change]] = {}
        for (_, told), (owner, members) in grouped.items():
            notices = tuple(c.notice for c in members if c.notice is not None)
            intent = consent.intent_id(owner, self.now)  # the one the workloads' intents carry
            messages = tuple(render_digest(notices, self.now, context=self.context))
            outbox.add(Digest(owner, notices, intent, messages, admin_fallback=not told))
            by_digest[(intent, told)] = members
        if not self.fence():  # the intents are on the workloads: the new leader sends (after asking Slack)
            return
        results = outbox.flush(self.send_budget.total_seconds())
        self.out.unsent += outbox.pending
        for result in results:
            self.out.sent.append(result)
            if result.delivery is None:
                logger.warning("message to %s not delivered: %s", result.digest.owner, result.error)
                continue
            if self.notes is not None:
                self.notes.sent(result.digest.intent, {n.workload.uid for n in result.digest.notices})
            for change in by_digest[(result.digest.intent, not result.digest.admin_fallback)]:
                # An intent to settle: only marks and notices carry one (an unmark may clear a stale one,
                # and its "cancelled" note must not write warning records back onto the workload).
                if change.step in (Step.MARK, Step.NOTIFY) and change.annotations.get(ann.NOTICE):
                    self._write(change, notes=lifecycle.delivered(change, result.delivery,
                                                                  self.policies.get(change.policy),
                                                                  self._expected.get(change.workload.uid)))
