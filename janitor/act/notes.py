"""The "done" and "cancelled" notes that must reach their owner although their workload changed.

A warning waits on its workload (the intent annotation is the queue), but a "done" or
"cancelled" note is about a workload whose mark is gone: deleted, reclaimed (the mark is removed
in the same write) or unmarked. So the note is written, before the change it announces, into
the janitor's state ConfigMap (`notes.json`, beside the ledger), and removed once Slack has it.

A note found there in a later cycle (Slack was down, the budget was spent, the janitor died
between keeping it and the change or the send, its forget could not be written, or it is a
reclaim's, waiting for the check that it held) is sent only on positive evidence, each cycle
again (`weigh`):
- the change happened: a workload that still carries the mark the note is about was never
  changed, and the note is dropped. Beyond that, a delete's evidence is its workload gone (by
  uid: another object under its name is not it) or on its way out; a reclaim's is a later
  cycle's check that it held (decide.held), recorded on the note (`held`) before that check's
  own record leaves the workload. A mark gone is no evidence of a "done": an admin, the owner or
  the lifecycle may have removed it without the action, and removing one drops the "done" notes
  about it (`unmarked`). A "cancelled" note's change is its mark gone;
- Slack does not already have it: a message of the note's intent that tells of its workload is
  looked up (as for a warning whose answer was lost) before it is sent again. The intent alone is
  not enough: it is one per owner and cycle, and another workload's message carries it too.

That a note's change did not happen is written at once (`forget`, `unmarked` then `flush`), not
at the end of the cycle, which a lapsed lease or a crash skips.

notes.json has two writers: the daemon, and `janitor unmark`, which drops the "done" notes about
the marks it removes. So it is written only over the ConfigMap's resourceVersion last read or
written (`NoteStore`), never blindly: when the other wrote in between, it is read again and the
two merged once (`_merged`: what each dropped stays dropped, what each added is kept), then
written over that version; a second conflict is a failure like any other write's.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

from janitor import annotations as ann
from janitor import errors
from janitor.act.slack import Digest
from janitor.act.slack_messages import Message, MessageContext, render_digest
from janitor.annotations import NoticeKind
from janitor.decide.model import ObjectRef, ObjectView
from janitor.decide.notices import Notice
from janitor.decide.owners import Owner, OwnerKind
from janitor.durations import in_words
from janitor.policy.model import Action as PolicyAction

logger = logging.getLogger(__name__)

DATA_KEY = "notes.json"
KEEP_FOR = datetime.timedelta(days=7)  # an owner unreachable for a week: the note is dropped, and logged
MOST = 500  # notes kept; past it the oldest go (a ConfigMap holds 1 MiB)


@dataclass(frozen=True)
class PendingNote:
    intent: str  # the digest it is sent in (this cycle's), looked up on Slack before sending again
    owner: Owner
    kind: str  # "done" | "cancelled"
    workload: ObjectRef
    marked_at: str  # the mark it is about: while the workload still carries it, nothing happened
    at: datetime.datetime  # when it was written
    messages: tuple[Message, ...]  # rendered alone, for a send in a later cycle
    admins_told: bool = False
    action: str = ""  # the policy's action it announces ("delete", "suspend", ...); "" in older notes
    held: bool = False  # a "done" note of a reclaim: a later cycle's check saw it hold

    def digest(self) -> Digest:
        return Digest(self.owner, (), self.intent, self.messages, admin_fallback=not self.admins_told,
                      about=(self.workload.uid,))


class NotesUnreadable(ValueError):
    """notes.json is not what this module writes."""


class NoteStore(Protocol):
    """notes.json in the state ConfigMap, read and written with the ConfigMap's resourceVersion."""

    def read(self) -> tuple[str | None, str | None]:
        """notes.json (None: none yet) and the ConfigMap's resourceVersion (None: no ConfigMap yet).
        Raises `errors.KubeError`."""

    def write(self, text: str, version: str | None) -> str | None:
        """Store notes.json over `version` of the ConfigMap only (None: only where there is none yet);
        the new resourceVersion. Raises `errors.Conflict` when it changed since, `errors.KubeError`."""


def dumps(notes: Iterable[PendingNote]) -> str:
    return json.dumps([{
        "intent": n.intent, "owner": [str(n.owner.kind), n.owner.value, n.owner.source], "kind": n.kind,
        "workload": [n.workload.kind, n.workload.api_version, n.workload.namespace, n.workload.name, n.workload.uid],
        "markedAt": n.marked_at, "at": n.at.isoformat(), "adminsTold": n.admins_told,
        "action": n.action, "held": n.held,
        "messages": [{"text": m.text, "blocks": [dict(b) for b in m.blocks]} for m in n.messages],
    } for n in notes], separators=(",", ":"))


def loads(text: str) -> tuple[PendingNote, ...]:
    try:
        return tuple(_note(item) for item in json.loads(text))
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise NotesUnreadable(f"{DATA_KEY}: {e}") from e


def _note(item: dict[str, Any]) -> PendingNote:
    kind, value, source = item["owner"]
    ref_kind, api_version, namespace, name, uid = item["workload"]
    at = datetime.datetime.fromisoformat(item["at"])
    if at.tzinfo is None:
        raise ValueError("a note's time must carry its zone")
    return PendingNote(
        str(item["intent"]), Owner(OwnerKind(kind), str(value), str(source)), str(item["kind"]),
        ObjectRef(str(ref_kind), str(api_version), namespace, str(name), str(uid)), str(item["markedAt"]), at,
        tuple(Message(str(m["text"]), tuple(m["blocks"])) for m in item["messages"]), bool(item["adminsTold"]),
        str(item.get("action") or ""), bool(item.get("held")))


class NoteBox:
    """This cycle's view of notes.json. `expect` writes at once (before the change it announces);
    what was sent or dropped is written by `store` at the end of the cycle."""

    def __init__(self, store: NoteStore, *, fence: Callable[[], bool] = lambda: True,
                 where: str = "the state ConfigMap", context: MessageContext = MessageContext()) -> None:
        """notes.json is read from `store` now; `context`: the cluster and where to ask, in the
        messages kept."""
        self._store, self._fence, self._where, self._context = store, fence, where, context
        self.broken = ""  # why notes cannot be kept: then nothing that needs one is done
        self._notes: list[PendingNote] = []
        self._version: str | None = None  # the ConfigMap's, as last read or written
        try:
            stored, self._version = store.read()
        except errors.KubeError as e:
            self.broken = f"cannot read {DATA_KEY}: {e}"
        else:
            self._notes = self._loaded(stored)
        self._written = list(self._notes)  # what notes.json holds, as far as this box knows
        self._carried = {self._key(n) for n in self._notes}

    @property
    def pending(self) -> int:
        return len(self._notes)

    @property
    def carried(self) -> tuple[PendingNote, ...]:
        """The notes of earlier cycles still held, as they are now (a check may have seen one hold)."""
        return tuple(n for n in self._notes if self._key(n) in self._carried)

    def expect(self, notice: Notice, intent: str, marked_at: str, now: datetime.datetime) -> str:
        """Keep `notice` (written now) before its change is made; '' when kept, else why the change
        must not be made (the janitor does not do what it cannot announce)."""
        if self.broken:
            return f"not done: its note to the owner cannot be kept ({self.broken})"
        note = PendingNote(intent, notice.owner, str(notice.kind), notice.workload, marked_at, now,
                           tuple(render_digest((notice,), now, context=self._context)), notice.admins_told,
                           notice.action)
        kept = [n for n in self._notes if not self._same(n, note)] + [note]
        try:
            self._notes = self._write(kept)
        except errors.Conflict as e:  # twice: another writer is busy there; the next change tries again
            logger.warning("a note could not be kept, so its change is not made: %s", e)
            return f"not done: its note to the owner could not be kept first ({e})"
        except errors.KubeError as e:
            logger.error("a note could not be kept; no change that needs one until it can: %s", e)
            self.broken = str(e)
            return f"not done: its note to the owner could not be kept first ({e})"
        return ""

    def forget(self, workload: ObjectRef, intent: str) -> None:
        """The change did not happen: its note goes, written now."""
        self._drop(lambda n: n.workload.uid == workload.uid and n.intent == intent)
        self.flush()

    def unmarked(self, workload: ObjectRef, marked_at: str) -> bool:
        """The mark `marked_at` on `workload` is removed: the "done" notes about it go (a change that
        happens takes the mark with it, so one still to remove never happened). Written by the next
        write (`flush`, `expect`); True when there was one."""
        before = len(self._notes)
        self._drop(lambda n: n.workload.uid == workload.uid and n.kind == str(NoticeKind.DONE)
                   and n.marked_at == marked_at)
        return len(self._notes) != before

    def held(self, workload: ObjectRef) -> str:
        """A later cycle's check saw the reclaim of `workload` hold: its "done" notes may go out. Written
        now, before that check's record leaves the workload (then nothing else would say so); '' when
        written (or there was none), else why not, and the check waits."""
        flagged = [replace(n, held=True) if self._reclaim_of(n, workload) else n for n in self._notes]
        if flagged == self._notes:
            return ""
        if self.broken:
            return f"its note to the owner cannot be kept ({self.broken})"
        try:
            self._notes = self._write(flagged)
        except errors.KubeError as e:
            return f"its note to the owner could not be kept first ({e})"
        return ""

    def flush(self) -> None:
        """Write what changed since the last write, now (a forget, a note about a removed mark); a
        failure is logged, and `store` tries again at the end of the cycle."""
        if self._notes == self._written or self.broken:
            return
        try:
            self._notes = self._write(self._notes)
        except errors.KubeError as e:
            logger.warning("the notes whose change did not happen could not be crossed off yet: %s", e)

    def sent(self, intent: str, uids: set[str]) -> None:
        """Slack has the digest `intent` with the notes of these workloads."""
        self._drop(lambda n: n.intent == intent and n.workload.uid in uids)

    def holds(self, note: PendingNote) -> bool:
        return note in self._notes

    def drop_done(self, workload: ObjectRef, why: str) -> None:
        """The "done" notes about `workload`: their change did not hold."""
        for note in [n for n in self._notes if n.workload.uid == workload.uid and n.kind == "done"]:
            self.drop(note, why)

    def drop(self, note: PendingNote, why: str) -> None:
        logger.info("note %s to %s about %s dropped: %s", note.kind, note.owner, note.workload, why)
        self._drop(lambda n: n == note)

    def store(self, now: datetime.datetime) -> None:
        """Write what changed this cycle; notes older than KEEP_FOR, or past MOST, go (logged)."""
        fresh = [n for n in self._notes if now - n.at <= KEEP_FOR][-MOST:]
        for note in self._notes:
            if note not in fresh:
                logger.warning("note %s to %s about %s never reached them; dropped after %s", note.kind,
                               note.owner, note.workload, in_words(now - note.at))
        self._notes = fresh
        if self._notes == self._written or self.broken or not self._fence():
            return
        try:
            self._notes = self._write(self._notes)
        except errors.KubeError as e:
            logger.error("the notes sent this cycle could not be crossed off (they are looked up on Slack "
                         "before any is sent again): %s", e)

    def _drop(self, gone: Callable[[PendingNote], bool]) -> None:
        self._notes = [n for n in self._notes if not gone(n)]

    @staticmethod
    def _key(note: PendingNote) -> tuple[str, str]:
        return note.workload.uid, note.intent

    @staticmethod
    def _reclaim_of(note: PendingNote, workload: ObjectRef) -> bool:
        return (note.workload.uid == workload.uid and note.kind == str(NoticeKind.DONE)
                and note.action != str(PolicyAction.DELETE) and not note.held)

    @staticmethod
    def _same(a: PendingNote, b: PendingNote) -> bool:
        """`b` takes the place of `a`: the same send, or a "done" note about the same mark. The mark goes
        with a change that happens (deleted with its workload, removed by a reclaim's write), so an
        action decided again on it means the earlier one did not happen: its note would be a second
        "done" for one change."""
        if a.workload.uid != b.workload.uid:
            return False
        return a.intent == b.intent or (a.kind == b.kind == str(NoticeKind.DONE) and a.marked_at == b.marked_at)

    def _write(self, notes: list[PendingNote]) -> list[PendingNote]:
        """Store `notes` over the version last read or written, and only over it; what was stored.
        Another writer's notes.json since is read again and merged with `notes` once (`_merged`)."""
        if not self._fence():
            raise errors.KubeError("no longer the leader", doing="keep a note")
        try:
            self._version = self._store.write(dumps(notes), self._version)
        except errors.Conflict:
            stored, version = self._store.read()
            notes = _merged(self._written, self._loaded(stored), notes)
            if not self._fence():
                raise errors.KubeError("no longer the leader", doing="keep a note") from None
            self._version = self._store.write(dumps(notes), version)
        self._written = list(notes)
        return list(notes)

    def _loaded(self, stored: str | None) -> list[PendingNote]:
        try:
            return list(loads(stored)) if stored else []
        except NotesUnreadable as e:
            # Unlike the ledger this holds no safety limit: start empty (and say so), the notes
            # lost are courtesy messages, and stopping every reclaim for them is not.
            logger.error("the notes waiting in %s cannot be read, and are dropped: %s", self._where, e)
            return []


def _merged(base: list[PendingNote], theirs: list[PendingNote], ours: list[PendingNote]) -> list[PendingNote]:
    """`ours` and `theirs`, both changed from `base`: what either dropped stays dropped (a note
    forgotten, crossed off, or about a mark `janitor unmark` removed), what either added is kept,
    and a note of ours takes the place of theirs for the same send or mark (`NoteBox._same`). A
    note ours only saw hold (`held`) is still gone when theirs dropped it."""
    dropped = [n for n in base if n not in ours]
    added = [n for n in ours if n not in base
             and not (n.held and replace(n, held=False) in base and replace(n, held=False) not in theirs)]
    kept = [n for n in theirs if n not in dropped and n not in added and not any(NoteBox._same(n, a) for a in added)]
    return kept + added


def still_marked(marks: Mapping[str, str], note: PendingNote) -> bool:
    """The workload carries the mark the note is about: the change it announces never happened."""
    return marks.get(ann.MARKED_AT) == note.marked_at


class Seen(StrEnum):
    """What the workload now says of a kept note's change."""

    HAPPENED = "happened"  # send it, unless Slack has it already
    NOT_YET = "not yet"  # a later cycle can tell: it waits
    NEVER = "never"  # it did not happen, or nothing will ever show it did: the note goes


def weigh(note: PendingNote, now: ObjectView | None) -> tuple[Seen, str]:
    """Whether the change `note` announces is seen to have happened, on `now` (the workload read by
    uid; None when gone or another object has its name), and why not."""
    done = note.kind == str(NoticeKind.DONE)
    if done and note.action == str(PolicyAction.DELETE):
        if now is None or now.deleting:  # one with finalizers keeps its mark while on its way out
            return Seen.HAPPENED, ""
        return Seen.NEVER, "the workload is still there: it was never deleted"
    if now is not None and still_marked(now.annotations, note):
        return Seen.NEVER, "the workload still carries the mark: the change never happened"
    if not done:
        return Seen.HAPPENED, ""  # "cancelled": the mark is gone
    if note.held:
        return Seen.HAPPENED, ""
    if now is not None and ann.RECLAIMED in now.annotations:
        return Seen.NOT_YET, ""  # whether it held is checked first
    if now is None and not note.action:
        return Seen.HAPPENED, ""  # kept before notes named their action: gone, as it was then
    return Seen.NEVER, f"nothing shows that the {note.action or 'change'} happened and held"

