"""A plan's actions applied in the order that keeps the rails' and the owners' promises.

For each action but a report, in this order:

1. the re-check: the action is decided again on a fresh read of its object (`StillDue`); no
   longer due, or gone, means no write at all;
2. the ledger: a deletion is recorded before it happens (`LedgerWriter.record`); a record that
   cannot be written means no deletion, and none after it this cycle;
3. the note: a lifecycle action's "done" note to its owner is kept before the change
   (`Notes.expect`); a note that cannot be kept means no change (the janitor does not do what it
   cannot announce);
4. the write (`Applier`); a note whose change did not happen, or only in part, is forgotten
   (`Notes.forget`): the applier's result is DONE only for a change that happened (a write whose
   answer was lost is read again to tell, act.kube), so no note is kept on "it may have happened";
   a CONFLICT (the object changed since the read) is decided again once, on a new fresh read, and
   not recorded twice.

Before each action, between its re-check and its record (a re-read may outlast what is left of the
lease), before each write of the record (`LedgerWriter`), right before the write (the record may
outlast it too) and, in act.kube, after the write's probe and again after its Event, the fence is
asked: a replica no longer sure it leads stops, and stores no ledger. Once closed, it stays closed
for the cycle: nothing more is written even if the lease is renewed late. The ledger is stored
once at the end (`LedgerWriter.store`), whatever happened.

It talks to the cluster only through these small interfaces, so the order is unit-tested with
fakes as well as on the sandbox; `cycle.py` wires the real ones in.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from janitor import annotations as ann
from janitor import errors
from janitor.act.kube import NOT_LEADING, ActionResult, Outcome
from janitor.act.ledger_writer import LedgerWriter
from janitor.decide.consent import intent_id
from janitor.decide.lifecycle import Change
from janitor.decide.model import Action, ActionType, ObjectRef, ObjectView
from janitor.decide.notices import Notice
from janitor.decide.plan import CyclePlan
from janitor.decide.recheck import Recheck

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Fresh:
    """An action decided again on a fresh read of its object."""

    verdict: Recheck
    gone: bool = False  # the read found no object (deleted, or another one under its name)


class StillDue(Protocol):
    def __call__(self, action: Action) -> Fresh:
        """`action` decided again on a fresh read of its object. Raises errors.KubeError when the
        object cannot be read."""


class Applier(Protocol):
    def __call__(self, action: Action) -> ActionResult:
        """Apply `action` (dry-run or not); never raises for an API failure."""


class Notes(Protocol):
    def expect(self, notice: Notice, intent: str, marked_at: str, now: datetime.datetime) -> str:
        """Keep `notice` before its change; '' when kept, else why the change must not be made."""

    def forget(self, workload: ObjectRef, intent: str) -> None:
        """The change did not happen: its note goes."""


@dataclass
class Executor:
    """One cycle's actions, each re-checked, recorded and announced before it is applied."""

    plan: CyclePlan
    seen: Mapping[str, ObjectView]  # the objects the plan was made on, by uid (their marks)
    still_due: StillDue
    apply: Applier
    ledger: LedgerWriter
    notes: Notes | None  # None: no lifecycle this cycle (dry run, or policies never read)
    clock: Callable[[], datetime.datetime]
    fence: Callable[[], bool]  # False once another replica may be leader: asked before each write
    dry_run: bool
    rechecked: dict[tuple[str, ActionType, str], Change] = field(default_factory=dict)  # as the re-check decided

    def run(self, actions: Iterable[Action], done: Callable[[ActionResult], None]) -> None:
        """Each action in turn, each result to `done` as it comes; the ledger stored at the end."""
        try:
            for action in actions:
                if not self._leading():
                    logger.warning("no longer the leader: stopping before %s; the new leader decides again",
                                   action.target)
                    break
                done(self.one(action))
        finally:
            self.ledger.store()

    def one(self, action: Action) -> ActionResult:
        """One action: a report as planned; anything else decided again on a fresh, scoped read first,
        recorded in the ledger and its "done" note kept before it happens."""
        if action.type is ActionType.REPORT:
            return self.apply(action)
        if self.ledger.broken:
            return ActionResult(action, Outcome.FAILED, self.ledger.record(action))
        result = ActionResult(action, Outcome.SKIPPED, "not tried")
        for _ in range(2):  # the cycle's read, then once more after a conflict
            try:
                fresh = self.still_due(action)
            except errors.KubeError as e:
                logger.warning("could not re-read %s before acting on it: %s", action.target, e)
                return ActionResult(action, Outcome.FAILED, f"re-read failed: {e}")
            again = fresh.verdict
            if again.action is None:
                logger.info("not acting on %s: %s", action.target, again.why, extra={"object": str(action.target)})
                return ActionResult(action, Outcome.GONE if fresh.gone else Outcome.SKIPPED, str(again.why))
            if not self._leading():  # the re-read may have taken longer than the lease has left
                logger.warning("no longer the leader after re-reading %s: not acting on it", action.target)
                return ActionResult(action, Outcome.SKIPPED, NOT_LEADING)
            # Recorded once: a deletion retried after a conflict is already in the ledger.
            refused = self.ledger.record(again.action) if result.outcome is not Outcome.CONFLICT else ""
            if refused and self.ledger.fenced:
                return ActionResult(action, Outcome.SKIPPED, refused)
            change = again.change or self.plan.change_for(action)
            if change is not None:
                self.rechecked[action.key] = change
            intent, unkept = self._announced(action, change) if not (refused or self.dry_run) else ("", "")
            if refused or unkept:
                return ActionResult(action, Outcome.FAILED, refused or unkept)
            if not self._leading():  # the record and the note may have taken longer than the lease has left
                logger.warning("no longer the leader after recording %s: not acting on it", action.target)
                if self.notes is not None and intent:
                    self.notes.forget(action.target, intent)  # (fenced too: the new leader sees it still marked)
                return ActionResult(action, Outcome.SKIPPED, NOT_LEADING)
            result = self.apply(again.action)
            if self.notes is not None and intent and result.outcome is not Outcome.DONE:
                self.notes.forget(action.target, intent)
            if result.outcome is not Outcome.CONFLICT:
                return result
        return result

    def _leading(self) -> bool:
        """The fence, latched with the ledger's: once closed in this cycle (here or while the ledger's
        record was written), closed, and the ledger not stored at the end."""
        if not self.ledger.fenced and not self.fence():
            self.ledger.close()
        return not self.ledger.fenced

    def _announced(self, action: Action, change: Change | None) -> tuple[str, str]:
        """Keep the "done" note of a lifecycle action (`change`, as the re-check decided it) before it
        happens: (its intent, '' or why not)."""
        if self.notes is None or change is None or change.notice is None:
            return "", ""
        now = self.clock()
        seen = self.seen.get(action.target.uid)
        marks = seen.annotations if seen is not None else {}
        intent = intent_id(change.notice.owner, self.plan.now)
        return intent, self.notes.expect(change.notice, intent, marks.get(ann.MARKED_AT, ""), now)
