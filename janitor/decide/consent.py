"""Consent, bound to what was consented to: whom a warning reached, and what a release answered.

A warning is consent asked of one owner about one action; "Release now" is that owner's answer.
Neither outlives what it was about: a warning counts for the owner it reached (`janitor/warned-to`,
`sent_to`), so a workload handed to another owner is warned anew; a release counts for the mark,
the action and the warning it answered, from that owner, and only briefly (`released_by`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping

from janitor import annotations as ann
from janitor.annotations import Intent, Mark, Release
from janitor.decide.owners import Owner

RELEASE_LAPSES_AFTER = datetime.timedelta(hours=1)
"""A release is consent to act now, not whenever the caps next let an action through: held past
this (a busy hour of deletions), it counts for nothing and the deadline the warning named stands."""
_SECOND = datetime.timedelta(seconds=1)


def _digest(owner: Owner) -> str:
    return hashlib.sha1(owner.key.encode()).hexdigest()[:10]


def intent_id(owner: Owner, now: datetime.datetime) -> str:
    """The same for every notice to one owner in one cycle: one digest, one id (it names the owner)."""
    return f"{_digest(owner)}-{int(now.timestamp())}"


def sent_to(intent: Intent, owner: Owner) -> str:
    """Who a send went to, as janitor/warned-to records it: `owner` when its intent was for them, or
    another owner's digest (the owner changed between the send and its record: a recovered send was
    for someone else, so the owner now is warned anew)."""
    digest = intent.id.split("-", 1)[0]
    return owner.key if digest == _digest(owner) else f"other:{digest}"


def released_by(mark: Mark, notes: Mapping[str, str], owner: Owner, action: str,
                now: datetime.datetime) -> Release | None:
    """The owner's release of this mark, when it still counts: for this mark (not an old message's,
    before the workload was marked again), for `action`, the action the last delivered warning
    named, answering that very warning (a later one asks again), from the owner warned (`owner`,
    now), pressed no more than RELEASE_LAPSES_AFTER ago. None otherwise."""
    if ann.RELEASE in mark.foreign:  # a release the janitor did not write: no button was pressed
        return None
    release = Release.parse(notes.get(ann.RELEASE, ""))
    if release is None or mark.marked_at is None or mark.warned_at is None or mark.warned_of is None:
        return None
    if (release.marked_at, release.action, release.warned_at, release.owner) != (
            mark.marked_at, mark.warned_of.action, mark.warned_at, owner.key) or release.action != action:
        return None
    # Pressed after the warning arrived (whole seconds: a delivery is recorded rounded up, a click down).
    answered = mark.warned_at - _SECOND <= release.at <= now
    return release if answered and now - release.at <= RELEASE_LAPSES_AFTER else None


def warned_to(mark: Mark, owner: Owner) -> bool:
    """Whether the delivered warning was for this owner (a record from before owners were recorded:
    taken as it is)."""
    return mark.warned_to is None or mark.warned_to == owner.key
