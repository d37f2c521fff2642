"""Two writers of one ledger: what is stored when another janitor wrote it since this one read it."""

from __future__ import annotations

import datetime

import pytest

from janitor import errors
from janitor.act import kube
from janitor.decide.model import Deletion, SafetyLedger
from janitor.decide.rails import is_tripped
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


def test_the_later_trip_stands_and_the_admins_acknowledgement_is_kept() -> None:
    """Tripped at 12:00 (read so), acknowledged at 12:05, the other janitor trips again at 12:08: the
    12:08 trip stands, unacknowledged, so deletions stay stopped."""
    read = SafetyLedger(tripped_at=T0)
    theirs = SafetyLedger(tripped_at=T0 + 8 * M, acknowledged_at=T0 + 5 * M)
    mine = SafetyLedger(tripped_at=T0)
    merged = merge(read, theirs, mine)
    assert merged.tripped_at == T0 + 8 * M and merged.acknowledged_at == T0 + 5 * M
    assert is_tripped(merged)
    assert merge(read, SafetyLedger(), SafetyLedger()).tripped_at is None


def test_the_same_ledger_is_the_same_whatever_the_admins_acknowledged() -> None:
    assert same(SafetyLedger((Deletion(T0, "a"),)), SafetyLedger((Deletion(T0, "a"),), acknowledged_at=T0))
    assert not same(SafetyLedger((Deletion(T0, "a"),)), SafetyLedger())
    assert not same(SafetyLedger(), SafetyLedger(unreadable=True))


def _recording(monkeypatch: pytest.MonkeyPatch, fails: dict[str, errors.KubeError]) -> list[str]:
    """`janitor.act.kube`'s calls, answered by `fails` (method -> the error it raises) or success."""
    calls: list[str] = []

    def call(api: object, method: str, path: str, **_: object) -> None:
        calls.append(method)
        if method in fails:
            raise fails[method]

    monkeypatch.setattr(kube, "_call", call)
    return calls


def test_an_exclusive_write_where_none_was_read_only_creates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first cycle ever, and another janitor creates the ConfigMap first: a Conflict to read again,
    never a patch over what it wrote."""
    calls = _recording(monkeypatch, {"POST": errors.Conflict("already exists", status=409)})
    with pytest.raises(errors.Conflict):
        kube.write_ledger(None, "ns", "janitor-state", SafetyLedger(), None, exclusive=True)  # type: ignore[arg-type]
    assert calls == ["POST"]


def test_an_exclusive_write_over_a_version_that_is_gone_is_a_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _recording(monkeypatch, {"PATCH": errors.NotFound("not found", status=404)})
    with pytest.raises(errors.Conflict):
        kube.write_ledger(None, "ns", "janitor-state", SafetyLedger(), "7", exclusive=True)  # type: ignore[arg-type]
    assert calls == ["PATCH"]
    calls = _recording(monkeypatch, {"POST": errors.Conflict("already exists", status=409)})
    kube.write_state(None, "ns", "janitor-state", {"notes.json": "[]"}, what="notes")  # type: ignore[arg-type]
    assert calls == ["PATCH"]  # a write not exclusive patches over whatever is there
