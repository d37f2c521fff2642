"""Two writers of one ledger: what is stored when another janitor wrote it since this one read it."""

from __future__ import annotations

import datetime

from janitor.decide.model import Deletion, SafetyLedger
from janitor.ledger import merge, same

T0 = datetime.datetime(2026, 11, 27, 10, 0, tzinfo=datetime.timezone.utc)
M = datetime.timedelta(minutes=1)


def test_every_deletion_of_both_writers_is_counted_once() -> None:
    old = (Deletion(T0, "a"), Deletion(T0 + M, "b"))
    read = SafetyLedger(old, previous_candidates=3)
    theirs = SafetyLedger((*old, Deletion(T0 + 2 * M, "c"), Deletion(T0 + 2 * M, "c")), previous_candidates=5)
    mine = SafetyLedger((*old, Deletion(T0 + 3 * M, "a")), previous_candidates=4)
    merged = merge(read, theirs, mine)
    assert merged.deletions == (*old, Deletion(T0 + 2 * M, "c"), Deletion(T0 + 2 * M, "c"), Deletion(T0 + 3 * M, "a"))
    assert merged.previous_candidates == 4


def test_the_earlier_trip_stands_and_the_admins_acknowledgement_is_kept() -> None:
    read = SafetyLedger()
    theirs = SafetyLedger(tripped_at=T0 + M, acknowledged_at=T0 + 2 * M)
    mine = SafetyLedger(tripped_at=T0)
    merged = merge(read, theirs, mine)
    assert merged.tripped_at == T0 and merged.acknowledged_at == T0 + 2 * M
    assert merge(read, SafetyLedger(), SafetyLedger()).tripped_at is None


def test_the_same_ledger_is_the_same_whatever_the_admins_acknowledged() -> None:
    assert same(SafetyLedger((Deletion(T0, "a"),)), SafetyLedger((Deletion(T0, "a"),), acknowledged_at=T0))
    assert not same(SafetyLedger((Deletion(T0, "a"),)), SafetyLedger())
    assert not same(SafetyLedger(), SafetyLedger(unreadable=True))
