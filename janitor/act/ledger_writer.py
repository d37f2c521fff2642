"""The rails' ledger as one cycle changes it: each deletion recorded before it happens.

The caps and the tripwire count what the ledger in the state ConfigMap holds, so a deletion is
written there first: counted even if the janitor dies right after. A record that cannot be
written means no deletion, in this cycle and (the ledger being the same) the next.

The ledger is only ever written over the one this cycle read. Another writer's (a second janitor
without leader election, or a second install on the same state ConfigMap) is merged with this
one's, so that neither loses a deletion, and this cycle deletes nothing more.

The fence is asked before each write (a record is a read and a write, twice on a conflict, each
up to the client's timeout: longer than a lease may have left). Once it is closed, nothing more is
written in this cycle, and the deletion waiting on the record is not done (`fenced`).

It talks to the ConfigMap through one small interface (`LedgerStore`), so that order is
unit-tested with a fake as well as on the sandbox.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Protocol

from janitor import errors
from janitor.act.kube import NOT_LEADING
from janitor.decide.model import Action, SafetyLedger
from janitor.decide.rails import record_deletions
from janitor.ledger import merge as merge_ledgers
from janitor.ledger import same as same_ledger

logger = logging.getLogger(__name__)

CONTENDED = ("another janitor wrote the ledger since this one read it (two replicas without leader election, "
             "or two installs on one state ConfigMap): merged, and nothing more is deleted in this cycle")


class LedgerStore(Protocol):
    def read(self) -> tuple[SafetyLedger, str | None]:
        """The stored ledger and the version it was read at (None: nothing stored yet).
        Raises errors.KubeError."""

    def write(self, ledger: SafetyLedger, version: str | None) -> None:
        """Store `ledger` only over `version` (None: only where nothing is stored yet).
        Raises errors.Conflict when the store changed since, errors.KubeError otherwise."""


class LedgerWriter:
    """This cycle's ledger: `record` before each deletion, `store` once at the end."""

    def __init__(self, store: LedgerStore, ledger: SafetyLedger, read: SafetyLedger | None, *,
                 clock: Callable[[], datetime.datetime], fence: Callable[[], bool], dry_run: bool) -> None:
        """`ledger`: as plan() left it (the tripwire's count and state); `read`: what this cycle read
        from the store (None: not read), the only ledger it writes over; `fence`: False once another
        replica may be leader (then nothing is stored at the end)."""
        self._store, self._clock, self._fence, self._dry_run = store, clock, fence, dry_run
        self.ledger = ledger
        self.stored = read  # what this janitor knows the store holds
        self.broken = ""  # why the ledger cannot be written: then nothing is deleted
        self.contended = False  # another janitor wrote the ledger in this cycle
        self.fenced = False  # the fence closed before a write: nothing more is written in this cycle

    def record(self, action: Action) -> str:
        """'' once the deletion is recorded (or needs no record); else why it must not happen."""
        if self.broken:
            return f"not tried: the ledger could not be written ({self.broken})"
        if self._dry_run or not action.type.deletes:
            return ""
        after = record_deletions(self.ledger, [action], self._clock())
        refused = self._write(after)
        if self.fenced:
            logger.warning("no longer the leader while recording the deletion of %s: not deleting it", action.target)
            return NOT_LEADING
        if refused:
            self.broken = refused
            logger.error("the ledger could not be written; no deletion until it can: %s", refused)
            return f"not done: the ledger could not record it first ({refused})"
        self.ledger = after
        return ""

    def store(self) -> None:
        """The cycle's ledger as plan() left it (the tripwire's count and state), deletions included.
        Never over what an admin must look at, nor over what a new leader wrote."""
        if self._dry_run or self.ledger.unreadable or self.broken or not self._leading():
            return
        refused = self._write(self.ledger)
        if refused and not self.contended:
            logger.error("the ledger could not be written; no deletion until it can: %s", refused)
        elif refused:
            logger.error("%s", refused)

    def _write(self, after: SafetyLedger) -> str:
        """Store `after` over the ledger this janitor read, and only over it: '' when stored. Another
        writer's ledger is merged with this one's, and this cycle deletes nothing more."""
        try:
            for _ in range(2):  # once more when the ConfigMap changed between the read and the write
                stored, version = self._store.read()
                if self.stored is not None and not same_ledger(stored, self.stored):
                    if stored.unreadable:
                        return "the stored ledger became unreadable"
                    merged = merge_ledgers(self.stored, stored, self.ledger)  # what is done, not what was to be
                    if not self._leading():
                        return NOT_LEADING
                    self._store.write(merged, version)
                    self.stored, self.ledger, self.contended = merged, merged, True
                    return CONTENDED
                if not self._leading():
                    return NOT_LEADING
                try:
                    self._store.write(after, version)
                except errors.Conflict:
                    continue  # the notes waiting to be sent share the ConfigMap: read it again
                self.stored = after
                return ""
        except errors.KubeError as e:
            return str(e)
        return "the state ConfigMap kept changing between a read and a write"

    def close(self) -> None:
        """The fence closed (seen by the caller): nothing more is written in this cycle."""
        self.fenced = True

    def _leading(self) -> bool:
        """The fence, asked before each write; once closed it stays closed for this cycle (a lease
        renewed late opens it again, but what this cycle was doing is the next one's to decide)."""
        if not self.fenced and not self._fence():
            self.close()
        return not self.fenced
