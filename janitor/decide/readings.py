"""What deciding reads of an object's janitor annotations, parsed once per resourceVersion.

An object's `janitor/ttl`, `janitor/expires`, `janitor/keep-until` and the janitor's mark say the
same thing every cycle until the object changes, and a change gives it a new resourceVersion, so
a new `ObjectView`. Parsed every cycle, they were a large part of a plan where many objects carry
a TTL (every TTL parsed and every expiry formatted again, on every object, every cycle).
`ObjectView` therefore reads them here when it is built (`read`), and the watch cache keeps the
view, parse included, until the object's next version replaces it: a parse can never outlive the
version it was made of, since it is computed from the view's own fields and lives on that view
alone.

Only what is a pure function of the object is kept here: a TTL's deadline is its creation time
plus the TTL, and the words a reason writes for both. Whether a deadline has passed compares it
with the time of a cycle, so that stays in `plan()` (janitor.decide.triggers.expiry). A value that
does not parse is kept as such, with the error its report names, so a malformed annotation is
still reported, once, exactly as before.

Pure: no clock, standard library and the annotation contract only.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from janitor import annotations as ann

# The expiry annotations, kube-janitor's, in the order the expiry trigger judges them, with the rule
# each is judged by.
EXPIRY_KEYS: tuple[tuple[str, str], ...] = ((ann.TTL, "ttl"), (ann.EXPIRES, "expires"))
_OURS = frozenset({ann.TTL, ann.EXPIRES, ann.KEEP_UNTIL, ann.REPORTED, *ann.JANITOR_ONLY_KEYS})
_MARK = frozenset(ann.JANITOR_ONLY_KEYS)


class Says(StrEnum):
    """What an expiry annotation's value says, as far as it is a fact of the object alone."""

    INVALID = "invalid"  # it does not parse: `ExpiryRule.error` says why
    FOREVER = "forever"  # janitor/ttl: forever
    ZERO = "zero"  # janitor/ttl of zero: no TTL, as in kube-janitor
    NEVER = "never"  # creation plus the TTL is past the last time Python can hold: it never expires
    AT = "at"  # it expires at `ExpiryRule.deadline`


def stamp(when: datetime.datetime) -> str:
    """A time as the expiry reasons write it: whole seconds, UTC."""
    return ann.format_expires(when.replace(microsecond=0))


@dataclass(frozen=True, slots=True)
class ExpiryRule:
    """One expiry annotation of the object, parsed: what it says and when it expires."""

    key: str  # ann.TTL or ann.EXPIRES
    rule: str  # "ttl" or "expires": the finding's rule
    value: str  # as written
    says: Says
    ttl: datetime.timedelta | None = None  # janitor/ttl parsed (AT and NEVER)
    deadline: datetime.datetime | None = None  # AT: when it expires
    deadline_stamp: str = ""  # AT, janitor/ttl: `deadline` as its reasons write it
    created_stamp: str = ""  # janitor/ttl: the creation time as its reasons write it
    error: str = ""  # INVALID: why it does not parse, as its report says


@dataclass(frozen=True, slots=True)
class Keep:
    """A `janitor/keep-until` as written, and the time it names (None: it does not parse, which
    keeps the workload until its cap, since its owner plainly asked for time)."""

    value: str
    until: datetime.datetime | None

    @classmethod
    def of(cls, value: str | None) -> Keep | None:
        if value is None:
            return None
        try:
            return cls(value, ann.parse_expires(value))
        except ValueError:
            return cls(value, None)

    @property
    def order(self) -> tuple[int, datetime.datetime]:
        """Which keep-until keeps longer: an unparseable one (kept to the cap) over any time."""
        return (1, self.until) if self.until is not None else (2, _ENDLESS)


_ENDLESS = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)


@dataclass(frozen=True, slots=True)
class Readings:
    """An object's janitor annotations as deciding reads them; `NOTHING` for the many objects that
    carry none (one shared value)."""

    rules: tuple[ExpiryRule, ...] = ()  # its non-empty janitor/ttl and janitor/expires, in EXPIRY_KEYS order
    marked: bool = False  # it carries a janitor-only mark key (`annotations.carries_mark`)
    mark: ann.Mark | None = None  # the mark, whole or partial (`annotations.read_mark`), when marked
    keep: Keep | None = None  # its own janitor/keep-until
    reported: frozenset[str] = frozenset()  # the mistakes already reported on it (janitor/reported lines)


NOTHING = Readings()


def read(notes: Mapping[str, str], foreign: Collection[str], created: datetime.datetime) -> Readings:
    """The readings of an object with these annotations, foreign mark keys (`ObjectView.foreign_marks`)
    and creation time; never raises: what does not parse is read as not parsing."""
    if _OURS.isdisjoint(notes):
        return NOTHING
    marked = not _MARK.isdisjoint(notes)
    return Readings(
        rules=tuple(_rule(key, rule, value, created) for key, rule in EXPIRY_KEYS if (value := notes.get(key))),
        marked=marked,
        mark=ann.read_mark(notes, foreign) if marked else None,
        keep=Keep.of(notes.get(ann.KEEP_UNTIL)),
        reported=frozenset(line for line in notes.get(ann.REPORTED, "").splitlines() if line),
    )


def _rule(key: str, rule: str, value: str, created: datetime.datetime) -> ExpiryRule:
    if key == ann.TTL:
        return _ttl(value, created)
    try:
        deadline = ann.parse_expires(value)
    except ValueError as e:
        return ExpiryRule(key, rule, value, Says.INVALID, error=str(e))
    return ExpiryRule(key, rule, value, Says.AT, deadline=deadline)


def _ttl(value: str, created: datetime.datetime) -> ExpiryRule:
    try:
        ttl = ann.parse_ttl(value)
    except ValueError as e:
        return ExpiryRule(ann.TTL, "ttl", value, Says.INVALID, error=str(e))
    if ttl is None:
        return ExpiryRule(ann.TTL, "ttl", value, Says.FOREVER)
    if ttl <= datetime.timedelta(0):
        return ExpiryRule(ann.TTL, "ttl", value, Says.ZERO, ttl=ttl)
    try:
        deadline = created + ttl
    except OverflowError:
        return ExpiryRule(ann.TTL, "ttl", value, Says.NEVER, ttl=ttl)
    try:
        stamps = stamp(deadline), stamp(created)
    except ValueError:  # a naive creation time (never from the apiserver): written when judged, as before
        stamps = "", ""
    return ExpiryRule(ann.TTL, "ttl", value, Says.AT, ttl, deadline, *stamps)
