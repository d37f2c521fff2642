"""janitor/ledger.py: the safety ledger's ConfigMap format, and the admin's acknowledgement.

Aspects covered:
- dumps/loads round trip keeps every field, microseconds and None namespaces included;
- acknowledged_at is never stored (the admin's annotation owns it) and is passed through loads;
- naive datetimes are refused when writing;
- malformed documents raise LedgerFormatError naming the field (matrix);
- acknowledgement times: the janitor/expires forms and RFC 3339 with an offset, as UTC; naive
  ISO times and garbage are refused (matrix).
"""

from __future__ import annotations

import datetime
import json

import pytest

from janitor import ledger
from janitor.decide.model import Deletion, SafetyLedger

UTC = datetime.timezone.utc
AT = datetime.datetime(2026, 5, 1, 9, 30, 15, 123456, tzinfo=UTC)


def test_round_trip_keeps_every_field() -> None:
    stored = SafetyLedger(
        deletions=(Deletion(AT, "team-a"), Deletion(AT + datetime.timedelta(hours=1), None)),
        previous_candidates=0,
        tripped_at=AT,
    )
    assert ledger.loads(ledger.dumps(stored)) == stored
    assert ledger.loads(ledger.dumps(SafetyLedger())) == SafetyLedger()


def test_acknowledgement_is_not_stored_but_passed_through() -> None:
    text = ledger.dumps(SafetyLedger(acknowledged_at=AT))
    assert "acknowledged" not in text
    assert ledger.loads(text, acknowledged_at=AT) == SafetyLedger(acknowledged_at=AT)


def test_other_zones_are_stored_as_the_same_instant_in_utc() -> None:
    east = AT.astimezone(datetime.timezone(datetime.timedelta(hours=9)))
    assert ledger.loads(ledger.dumps(SafetyLedger(tripped_at=east))).tripped_at == AT


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        ledger.dumps(SafetyLedger(tripped_at=AT.replace(tzinfo=None)))


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        pytest.param("{not json", "not JSON", id="not-json"),
        pytest.param("[]", "JSON object", id="not-an-object"),
        pytest.param('{"deletions": []}', "version", id="no-version"),
        pytest.param('{"version": 2}', "version 2", id="newer-version"),
        pytest.param('{"version": 1, "deletions": "lots"}', "deletions must be a list", id="deletions-not-list"),
        pytest.param('{"version": 1, "deletions": [{}]}', r"deletions\[0\]", id="deletion-without-at"),
        pytest.param('{"version": 1, "deletions": [{"at": "yesterday"}]}', r"deletions\[0\].at", id="bad-time"),
        pytest.param('{"version": 1, "deletions": [{"at": "2026-05-01T09:30:00"}]}', "no timezone", id="naive-time"),
        pytest.param('{"version": 1, "deletions": [{"at": "2026-05-01T09:30:00Z", "namespace": 3}]}',
                     "namespace", id="namespace-not-string"),
        pytest.param('{"version": 1, "previous_candidates": -1}', "previous_candidates", id="negative-count"),
        pytest.param('{"version": 1, "previous_candidates": true}', "previous_candidates", id="bool-count"),
        pytest.param('{"version": 1, "tripped_at": 5}', "tripped_at", id="tripped-not-string"),
    ],
)
def test_malformed_ledgers_are_refused(text: str, complaint: str) -> None:
    with pytest.raises(ledger.LedgerFormatError, match=complaint):
        ledger.loads(text)


def test_missing_optional_fields_read_as_empty() -> None:
    assert ledger.loads(json.dumps({"version": 1})) == SafetyLedger()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2026-05-01T09:30:00Z", datetime.datetime(2026, 5, 1, 9, 30, tzinfo=UTC), id="expires-seconds"),
        pytest.param("2026-05-01T09:30", datetime.datetime(2026, 5, 1, 9, 30, tzinfo=UTC), id="expires-minutes"),
        pytest.param("2026-05-01", datetime.datetime(2026, 5, 1, tzinfo=UTC), id="expires-date"),
        pytest.param("2026-05-01T11:30:00+02:00", datetime.datetime(2026, 5, 1, 9, 30, tzinfo=UTC),
                     id="rfc3339-offset"),
        pytest.param("2026-05-01T09:30:00.5Z", datetime.datetime(2026, 5, 1, 9, 30, 0, 500000, tzinfo=UTC),
                     id="rfc3339-fraction"),
    ],
)
def test_acknowledgement_times(text: str, expected: datetime.datetime) -> None:
    assert ledger.parse_acknowledged(text) == expected


@pytest.mark.parametrize("text", ["yes", "", "2026-05-01T09:30:00", "2026-02-30", "now"])
def test_unreadable_acknowledgements_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="acknowledgement time"):
        ledger.parse_acknowledged(text)
