"""The safety ledger's storage contract: how a `SafetyLedger` is written into its ConfigMap.

`observe` reads the ledger and `act` writes it; they may not import each other, and both must
agree on the format, so the format lives here, once, as pure functions (standard library only,
no clock), like the annotation contract in `ann.py`.

The ConfigMap (Settings.state_namespace/state_name) holds:
- `data["ledger.json"]`: `{"version": 1, "deletions": [{"at": <ISO 8601 UTC>, "namespace": str |
  null[, "target": "Kind/namespace/name", "rule": "expires=<value>" | "ttl=<value>"]}, ...],
  "previous_candidates": int | null, "tripped_at": <ISO 8601 UTC> | null}`, written by the janitor
  only (target and rule on an expiry's deletions; a ledger without them reads as before);
- annotation `janitor/acknowledge-tripwire` (ann.ACKNOWLEDGE_TRIPWIRE), written by admins:
  when they acknowledged a trip, in the `janitor/expires` forms (2026-05-01T09:30:00Z,
  2026-05-01T09:30, 2026-05-01) or RFC 3339 with an offset (2026-05-01T11:30:00+02:00). The
  janitor never writes it, so the two writers never touch the same field.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from janitor import annotations as ann
from janitor.decide.model import Deletion, SafetyLedger

DATA_KEY = "ledger.json"
FORMAT_VERSION = 1


class LedgerFormatError(ValueError):
    """The stored ledger is not one this janitor wrote (hand-edited, truncated, newer format)."""


def dumps(ledger: SafetyLedger) -> str:
    """The `ledger.json` text for `ledger`; `acknowledged_at` is not stored (admins own it)."""
    document = {
        "version": FORMAT_VERSION,
        "deletions": [{"at": _write_time(d.at), "namespace": d.namespace,
                       **({"target": d.target, "rule": d.rule} if d.target else {})} for d in ledger.deletions],
        "previous_candidates": ledger.previous_candidates,
        "tripped_at": _write_time(ledger.tripped_at) if ledger.tripped_at else None,
    }
    return json.dumps(document, separators=(",", ":"))


def loads(text: str, *, acknowledged_at: datetime.datetime | None = None) -> SafetyLedger:
    """Read `ledger.json` text back; LedgerFormatError says what is wrong with it."""
    try:
        document = json.loads(text)
    except ValueError as e:
        raise LedgerFormatError(f"{DATA_KEY} is not JSON: {e}") from e
    if not isinstance(document, dict):
        raise LedgerFormatError(f"{DATA_KEY} must be a JSON object")
    if document.get("version") != FORMAT_VERSION:
        raise LedgerFormatError(
            f"{DATA_KEY} has version {document.get('version')!r}; this janitor reads {FORMAT_VERSION}"
        )
    candidates = document.get("previous_candidates")
    if candidates is not None and (type(candidates) is not int or candidates < 0):
        raise LedgerFormatError(f"previous_candidates must be a non-negative integer or null: {candidates!r}")
    tripped = document.get("tripped_at")
    return SafetyLedger(
        deletions=_read_deletions(document.get("deletions", [])),
        previous_candidates=candidates,
        tripped_at=_read_time(tripped, "tripped_at") if tripped is not None else None,
        acknowledged_at=acknowledged_at,
    )


def parse_acknowledged(text: str) -> datetime.datetime:
    """The time in an admin's `janitor/acknowledge-tripwire` annotation, aware UTC.

    Accepts the `janitor/expires` forms (read as UTC) and RFC 3339 with an explicit offset;
    a time without a zone that is not one of the `janitor/expires` forms is refused rather
    than guessed. Raises ValueError naming the accepted forms.
    """
    try:
        return ann.parse_expires(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or when.utcoffset() is None:
        raise ValueError(
            f"{text[:80]!r} is not an acknowledgement time: use 2026-05-01T09:30:00Z, "
            "2026-05-01T09:30, 2026-05-01 (UTC) or RFC 3339 with an offset"
        )
    return when.astimezone(datetime.timezone.utc)


def _read_deletions(raw: Any) -> tuple[Deletion, ...]:
    if not isinstance(raw, list):
        raise LedgerFormatError("deletions must be a list")
    deletions = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict) or "at" not in entry:
            raise LedgerFormatError(f"deletions[{index}] must be an object with 'at'")
        namespace = entry.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise LedgerFormatError(f"deletions[{index}].namespace must be a string or null")
        target, rule = entry.get("target", ""), entry.get("rule", "")
        if not isinstance(target, str) or not isinstance(rule, str):
            raise LedgerFormatError(f"deletions[{index}].target and .rule must be strings")
        deletions.append(Deletion(at=_read_time(entry["at"], f"deletions[{index}].at"), namespace=namespace,
                                  target=target, rule=rule))
    return tuple(deletions)


def _write_time(when: datetime.datetime) -> str:
    """ISO 8601 in UTC, microseconds kept, so a round trip gives back the same instant."""
    if when.utcoffset() is None:
        raise ValueError(f"cannot store naive datetime {when!r} in the ledger: give it a timezone")
    return when.astimezone(datetime.timezone.utc).isoformat()


def _read_time(raw: Any, where: str) -> datetime.datetime:
    if not isinstance(raw, str):
        raise LedgerFormatError(f"{where} must be an ISO 8601 string: {raw!r}")
    try:
        when = datetime.datetime.fromisoformat(raw)
    except ValueError as e:
        raise LedgerFormatError(f"{where} is not an ISO 8601 time: {raw[:80]!r}") from e
    if when.utcoffset() is None:
        raise LedgerFormatError(f"{where} has no timezone: {raw[:80]!r}")
    return when.astimezone(datetime.timezone.utc)


def same(a: SafetyLedger, b: SafetyLedger) -> bool:
    """Whether two ledgers store the same thing (the admins' acknowledgement is not the janitor's)."""
    return dumps(a) == dumps(b) and a.unreadable == b.unreadable


def merge(read: SafetyLedger, stored: SafetyLedger, mine: SafetyLedger) -> SafetyLedger:
    """What to store when another writer changed the ledger (`stored`) since this janitor read it
    (`read`) and made `mine` from it: every deletion of both counted once (theirs are `stored`, mine
    the ones `mine` adds to `read`), the later trip (a newer one is not acknowledged yet; the
    earlier would hide it behind an acknowledgement given before it), this cycle's candidates."""
    added = list(mine.deletions)
    for deletion in read.deletions:
        if deletion in added:
            added.remove(deletion)
    trips = [t for t in (stored.tripped_at, mine.tripped_at) if t is not None]
    return SafetyLedger(tuple(sorted((*stored.deletions, *added), key=lambda d: d.at)), mine.previous_candidates,
                        max(trips) if trips else None, stored.acknowledged_at, stored.unreadable)
