"""The janitor/* annotation contract, read the way kube-janitor reads it.

Users already annotate objects for kube-janitor (hjacobs/kube-janitor), so
`janitor/ttl` and `janitor/expires` must mean the same thing here as there.
The facts below were taken from kube_janitor/helper.py (parse_ttl,
parse_expiry, format_duration, TTL_PATTERN, TIME_UNIT_TO_SECONDS,
DATETIME_PATTERNS), kube_janitor/janitor.py and tests/test_parse_*.py:

* TTL: `^(\\d+)([smhdw])$`, lower-case units s/m/h/d/w (1, 60, 3600, 86400,
  604800 s), leading zeros allowed (`08s` is 8 s), `0s` allowed, no
  whitespace, no sign, no decimals; `forever` case-insensitively
  (`FOREVER` too) means no TTL.
* Expiry: strptime with `%Y-%m-%dT%H:%M:%SZ`, `%Y-%m-%dT%H:%M`, `%Y-%m-%d`,
  read as UTC (compared against `utcnow()`); no offsets, no fractions.
* janitor.py acts on a TTL only when it is > 0 seconds, so `0s` (like
  `forever`) never deletes anything. Callers of parse_ttl must keep that:
  timedelta(0) is "no TTL enforced", never "delete now".

Intentional differences, and why:

1. Results are typed: parse_ttl returns a timedelta or None (kube-janitor:
   int seconds, -1 for forever, a sentinel that reads as "already expired"
   if it leaks into arithmetic); parse_expires returns an aware UTC
   datetime (kube-janitor: naive), because naive values are silently
   misread as local time and cannot be compared with aware ones.
2. Stricter parsing, never looser. kube-janitor's regex `$` also accepts
   one trailing newline (`"5m\\n"`), its `\\d` and strptime accept non-ASCII
   digits (`"٥m"`), and strptime also accepts lower-case `t`/`z`,
   unpadded fields (`2019-2-5`, `T9:5`) and a space-padded day
   (`2019-02- 5`). We reject all of these. Every value we accept,
   kube-janitor accepts with the same meaning; where we differ we reject,
   the annotation is ignored and nothing is deleted. A janitor that deletes
   the wrong thing is worse than one that deletes nothing.
3. Bounds, so the arithmetic the janitor does with what it read never
   leaves the calendar: a TTL (and every policy duration) is at most
   MAX_DURATION, 100 years of 365 days (36500d); a time is in the years
   1000 to 8999 (EARLIEST to LATEST). A time plus or minus several of the
   longest durations (a deadline + maxExtension, delivery + grace + a year
   of days without working time) then stays far inside Python's years 1 to
   9999, in any time zone. kube-janitor keeps a huge TTL, which never
   expires, and any strptime year; here such a value is malformed and
   reported, like any other. The admission policy
   (manifests/base/admission-annotations.yaml) has the same bounds.
4. format_duration writes one exact unit (3900 s -> `65m`) so the result is
   a valid TTL; kube-janitor's writes display text (`1h5m`, `-1s`) that its
   own parse_ttl rejects. Negative or sub-second input is refused.
5. format_expires refuses naive and sub-second datetimes instead of
   guessing a zone or silently dropping precision (which could move an
   expiry earlier).

The janitor's own mark is part of the same contract (`read_mark`, `Mark`, `Intent`, `Delivery`,
`WarnedOf`): the deciding code reads it and the acting code writes it, so both use these values
and neither parses the other's strings. Its deadline is `janitor/deadline`, a key kube-janitor does
not read: the janitor often waits past a mark's deadline on purpose (a `report` policy, a warning
not delivered yet, evidence it cannot judge, an action other than delete), and kube-janitor, still
running during a migration, deletes whatever `janitor/expires` has passed. Marks written before
kept their deadline in `janitor/expires` (`Mark.legacy`): they are read as before, and moved to
`janitor/deadline` on the next cycle.

Everything here is pure: no clock reads, standard library only (zoneinfo reads the zone
database, which is data, not state).
"""

from __future__ import annotations

import datetime as _dt
import enum
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

TTL = "janitor/ttl"  # users/CI: lifetime counted from creation, e.g. 8h; FOREVER = none
EXPIRES = "janitor/expires"  # users/CI: absolute UTC time after which the object may be deleted
KEEP_UNTIL = "janitor/keep-until"  # owners: never reclaim before this UTC time; unparseable = keep
TIME_ZONE = "janitor/time-zone"  # admins, on a namespace: the IANA zone its working hours are counted in
OPT_OUT = "janitor/opt-out"  # owners/admins, on an object or its namespace: "true" = never act on it
OWNER = "janitor/owner"  # owners: who is warned (a Slack user, an e-mail or a channel)
# The janitor's mark. Its deadline is DEADLINE; on a mark without one (written before DEADLINE was), EXPIRES.
DEADLINE = "janitor/deadline"  # when the mark's action is due: a key kube-janitor does not act on
POLICY = "janitor/policy"  # the policy that marked the object
REASON = "janitor/reason"  # why it marked the object, with the numbers (words for people)
WHY = "janitor/why"  # the same as data, one line of JSON (janitor.why_note): what programs read
MARKED_AT = "janitor/marked-at"  # when it first marked the object (extensions count from it)
MARKED_UID = "janitor/marked-uid"  # the UID of the object the mark was written on: a copy elsewhere is not a mark
NOTICE = "janitor/notice"  # a send in flight, "<kind> <intent id> <UTC time> [<action> <deadline>]", written before it
WARNED_AT = "janitor/warned-at"  # UTC time (format_expires) the warning was delivered
WARNED_VIA = "janitor/warned-via"  # where it went, "owner|admins <channel>/<Slack ts>"
WARNED_OF = "janitor/warned-of"  # what the delivered warning said would happen: "<action> <deadline>"
REMINDED_AT = "janitor/reminded-at"  # UTC time the last reminder was delivered
WARNED_TO = "janitor/warned-to"  # who the delivered warning was for, "<kind>:<value>" (another owner now: warn)
# owners, by the "Release now" button (`Release`): the owner is done with the workload; the lifecycle acts on
# that mark at once, through the rails, without further notice, for the action and the warning it answered
RELEASE = "janitor/release"
# After a reclaim other than delete: the janitor checks on its next cycle that it held (GitOps and
# autoscalers restore what they own) before it says "done"; one that did not is recorded, and told.
RECLAIMED = "janitor/reclaimed"  # "<action> <UTC time> <policy> [<replicas>]": written with the action, until checked
UNDONE = "janitor/undone"  # "<action> <UTC time> <policy> <times> <by>": restored; not marked again (see Undone)
REPORTED = "janitor/reported"  # the janitor: the mistakes on this object it already reported (one Event each)
ACKNOWLEDGE_TRIPWIRE = "janitor/acknowledge-tripwire"  # admins, on the state ConfigMap: resume deletions
NOTEBOOK_STOPPED = "kubeflow-resource-stopped"  # Kubeflow: the Notebook is stopped (the `stop` action sets it)
FOREVER = "forever"  # TTL value meaning "no TTL" (matched case-insensitively, as kube-janitor)

# Everything the janitor writes for a mark; removing them all is "unmark". keep-until is the owner's.
MARK_KEYS: tuple[str, ...] = (DEADLINE, POLICY, REASON, WHY, MARKED_AT, MARKED_UID, NOTICE, WARNED_AT, WARNED_VIA,
                              WARNED_OF, WARNED_TO, REMINDED_AT, RELEASE)
# Written by the janitor only: any of them on an object makes it marked (and its EXPIRES, on a mark
# without DEADLINE, that mark's deadline).
JANITOR_ONLY_KEYS: tuple[str, ...] = MARK_KEYS
# What a mark may hold, older marks' deadline included: whose writes are read (managedFields), and
# what a decision reads.
MARK_READ_KEYS: tuple[str, ...] = (*MARK_KEYS, EXPIRES)
# Who wrote each key is the apiserver's record (metadata.managedFields, by field manager): every
# write of the janitor names FIELD_MANAGER. Before it did, its writes went under the Python client's
# default manager, the first word of its User-Agent; that name still counts as the janitor's, so
# marks made before an upgrade go on as they were (docs/policies.md, "Who wrote it").
FIELD_MANAGER = "kube-idle-janitor"
FIELD_MANAGERS: frozenset[str] = frozenset({FIELD_MANAGER, "OpenAPI-Generator"})
CAP_KEYS: tuple[str, ...] = (MARKED_AT, POLICY)  # a mark's cap is counted from these

MAX_DURATION = _dt.timedelta(days=36500)  # 100 years of 365 days: the longest TTL or policy duration
EARLIEST = _dt.datetime(1000, 1, 1, tzinfo=_dt.timezone.utc)  # the first time accepted
LATEST = _dt.datetime(8999, 12, 31, 23, 59, 59, tzinfo=_dt.timezone.utc)  # the last time accepted
MAX_TIME_ZONE_LENGTH = 64  # the longest IANA name has 32 characters
DURATION_BOUND = "at most 36500d (100 years)"
TIME_BOUND = "years 1000 to 8999"

# Largest unit first: format_duration relies on this order.
_UNIT_SECONDS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
# [0-9], not \d: \d also matches non-ASCII digits. Used with fullmatch,
# never `$`, which would let one trailing newline through.
_TTL_RE = re.compile(r"([0-9]+)([smhdw])")
_EXPIRES_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:T([0-9]{2}):([0-9]{2})(?::([0-9]{2})Z)?)?"
)
_TTL_FORMS = (
    "use <integer><unit> with unit s, m, h, d or w (e.g. 30m, 8h, 7d), or 'forever'"
)
_EXPIRES_FORMS = (
    "use 2019-02-25T09:26:14Z, 2019-02-25T09:26 or 2019-02-25 (UTC, no offset)"
)
# The characters of IANA names (Etc/GMT+5, America/Port-au-Prince); parts never empty, `.` or `..`.
_ZONE_RE = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")
_ZONE_FORMS = "use an IANA time zone such as Europe/Berlin, America/New_York or UTC"
_MAX_DIGITS = len(str(MAX_DURATION // _dt.timedelta(seconds=1)))  # more significant digits: too large
_SECOND = _dt.timedelta(seconds=1)
T = TypeVar("T")


def _show(text: str) -> str:
    """Quote a rejected value for an error message; repr shows stray
    whitespace, and the cut keeps a huge annotation out of the logs."""
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."


class OutOfRange(ValueError):
    """A value of the right form past the bounds: the policy loader says "out of range" instead of
    repeating the forms, which the value already has."""


def parse_ttl(text: str) -> _dt.timedelta | None:
    """Parse a `janitor/ttl` value (or a policy duration); None means `forever`.

    Raises ValueError naming the valid forms (OutOfRange past MAX_DURATION),
    so whoever logs or reports it tells the owner how to fix the annotation.
    """
    if text.lower() == FOREVER:  # no non-ASCII character lowercases into "forever"
        return None
    match = _TTL_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{_show(text)} is not a valid TTL: {_TTL_FORMS}")
    digits = match[1].lstrip("0")
    # Counting digits first keeps int() away from thousands of them (its limit is 4300).
    if len(digits) <= _MAX_DIGITS:
        seconds = int(digits or "0") * _UNIT_SECONDS[match[2]]
        if seconds <= MAX_DURATION // _SECOND:
            return _dt.timedelta(seconds=seconds)
    raise OutOfRange(f"{_show(text)} is not a valid TTL: too large, {DURATION_BOUND}; {_TTL_FORMS}")


def parse_expires(text: str) -> _dt.datetime:
    """Parse a `janitor/expires` (or `janitor/keep-until`, or a time of
    the mark) value as an aware UTC datetime from EARLIEST to LATEST;
    ValueError, naming the valid forms (OutOfRange for other years), otherwise."""
    match = _EXPIRES_RE.fullmatch(text)
    if match is not None:
        year, month, day, hour, minute, second = (int(group) for group in match.groups(default="0"))
        try:
            when = _dt.datetime(year, month, day, hour, minute, second, tzinfo=_dt.timezone.utc)
        except ValueError:  # e.g. Feb 30, hour 24, second 60, year 0000
            pass
        else:
            if EARLIEST <= when <= LATEST:
                return when
            raise OutOfRange(f"{_show(text)} is not a valid expiry time: out of range: {TIME_BOUND}; "
                             f"{_EXPIRES_FORMS}")
    raise ValueError(f"{_show(text)} is not a valid expiry time: {_EXPIRES_FORMS}")


def parse_time_zone(text: str) -> ZoneInfo:
    """Parse a `janitor/time-zone` value (or a policy's `timeZone`): an IANA name the zone database
    has. zoneinfo raises ZoneInfoNotFoundError, ValueError or OSError (a directory such as
    `Europe`, a name too long for the file system) for other names; here all are ValueError."""
    if len(text) <= MAX_TIME_ZONE_LENGTH and _ZONE_RE.fullmatch(text):
        try:
            return ZoneInfo(text)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise ValueError(f"{_show(text)} is not an IANA time zone: {_ZONE_FORMS}")


def format_duration(delta: _dt.timedelta) -> str:
    """Write `delta` as a TTL string in its largest exact unit (90 min ->
    `90m`, 2 days -> `2d`), so that parse_ttl gives back exactly `delta`."""
    if delta < _dt.timedelta(0) or delta % _SECOND:
        raise ValueError(
            f"cannot write {delta!r} as a TTL: it must be a non-negative whole number of seconds"
        )
    if delta > MAX_DURATION:
        raise ValueError(f"cannot write {delta!r} as a TTL: {DURATION_BOUND}")
    seconds = delta // _SECOND
    if seconds == 0:
        return "0s"
    for unit, factor in _UNIT_SECONDS.items():
        if seconds % factor == 0:
            return f"{seconds // factor}{unit}"
    raise AssertionError("unreachable: every whole second count is a multiple of 1s")


def format_expires(when: _dt.datetime) -> str:
    """Write an aware datetime in the canonical `%Y-%m-%dT%H:%M:%SZ` form, in UTC.

    Naive datetimes are refused: their zone is a guess, and a wrong guess
    moves a deletion by hours. Sub-second values are refused rather than
    truncated, so parse_expires(format_expires(t)) == t holds for every t
    from EARLIEST to LATEST. Other years are written all the same: a
    deadline computed from a time near LATEST must not fail a cycle; read
    back, it is out of range, and the mark holding it is started again.
    """
    if when.utcoffset() is None:
        raise ValueError(f"cannot write naive datetime {when!r}: give it a timezone")
    try:
        utc = when.astimezone(_dt.timezone.utc)
    except OverflowError:
        raise ValueError(f"{when!r} is outside the representable UTC range") from None
    if utc.microsecond:
        raise ValueError(f"{when!r} has sub-second precision: drop the microseconds first")
    # Explicit padding: strftime("%Y") writes years before 1000 unpadded on glibc.
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}"
        f"T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
    )


def format_deadline(when: _dt.datetime) -> str:
    """A deadline in kube-janitor's whole-second format, rounded *up*, so a written deadline is
    never earlier than the one decided."""
    if when.microsecond:
        when = when.replace(microsecond=0) + _SECOND
    return format_expires(when)


def is_true(value: str | None) -> bool:
    """How every `"true"` flag annotation reads (opt-out): case and surrounding spaces ignored."""
    return value is not None and value.strip().lower() == "true"


# -- the mark codec: what the janitor writes on a workload it marks, and reads back ------------------

class NoticeKind(enum.StrEnum):
    """What a message to an owner says: the kinds of notice, and of sends in flight."""

    WARNING = "warning"  # marked: it will be reclaimed at the deadline unless used or kept
    REMINDER = "reminder"  # still idle, the deadline is near
    CANCELLED = "cancelled"  # in use again (or no longer covered): the mark is gone
    DONE = "done"  # the action was taken (and, other than a delete, held until the next cycle)
    UNDONE = "undone"  # the action was taken, and another controller (or someone) undid it


def _time_of_ts(ts: str) -> _dt.datetime | None:
    """A Slack timestamp as a time, within the years every other time of the mark is held to."""
    try:
        at = _dt.datetime.fromtimestamp(float(ts), _dt.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None
    return at if EARLIEST <= at <= LATEST else None


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where a message went and Slack's timestamp for it (also its send time)."""

    channel: str
    ts: str
    to_admins: bool = False  # the owner could not be reached; the admin channel got it instead

    @property
    def at(self) -> _dt.datetime:
        at = _time_of_ts(self.ts)
        if at is None:
            raise ValueError(f"Slack timestamp {self.ts!r} is not a time")
        return at

    def __str__(self) -> str:
        return f"{'admins' if self.to_admins else 'owner'} {self.channel}/{self.ts}"

    @classmethod
    def parse(cls, text: str) -> Delivery | None:
        """The `__str__` form back; None if it is not one (then the delivery is unknown)."""
        who, _, rest = text.strip().partition(" ")
        channel, _, ts = rest.partition("/")
        if who not in ("owner", "admins") or not channel or not ts or _time_of_ts(ts) is None:
            return None
        return cls(channel, ts, who == "admins")


@dataclass(frozen=True, slots=True)
class WarnedOf:
    """What a delivered warning told its owner would happen, and when: acting needs exactly this."""

    action: str  # the policy's action: delete | suspend | scale-to-zero | stop | report
    deadline: _dt.datetime
    # It said the action deletes the workload's volumes (a StatefulSet's claims, `decide.volumes`):
    # an action that would, warned of without it, is warned of again first.
    volumes: bool = False

    def __str__(self) -> str:
        return f"{self.action} {format_deadline(self.deadline)}" + (f" {_VOLUMES}" if self.volumes else "")

    @classmethod
    def parse(cls, text: str) -> WarnedOf | None:
        parts = text.split()
        if len(parts) not in (2, 3) or not parts[0] or parts[2:] not in ([], [_VOLUMES]):
            return None
        try:
            return cls(parts[0], parse_expires(parts[1]), len(parts) == 3)
        except ValueError:
            return None


_VOLUMES = "volumes"


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """A reclaim other than delete, recorded with it: what the next cycle checks held."""

    action: str  # suspend | scale-to-zero | stop
    at: _dt.datetime
    policy: str
    replicas: int | None = None  # a scale-to-zero's replicas before it, for the command that resumes it

    def __str__(self) -> str:
        replicas = "" if self.replicas is None else f" {self.replicas}"
        return f"{self.action} {format_deadline(self.at)} {self.policy}{replicas}"

    @classmethod
    def parse(cls, text: str) -> Reclaimed | None:
        parts = text.split()
        if len(parts) not in (3, 4) or (len(parts) == 4 and not (parts[3].isascii() and parts[3].isdigit())):
            return None
        try:
            return cls(parts[0], parse_expires(parts[1]), parts[2], int(parts[3]) if len(parts) == 4 else None)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Undone:
    """A reclaim that did not hold: who restored it (a field manager, "" when the apiserver names
    none), and how many times in a row; while it names a policy, that policy does not mark the
    workload again where a controller restored it, or where it was undone twice."""

    action: str
    at: _dt.datetime  # when the janitor found it undone
    policy: str
    times: int = 1
    by: str = ""

    def __str__(self) -> str:
        return f"{self.action} {format_deadline(self.at)} {self.policy} {self.times} {self.by}".rstrip()

    @classmethod
    def parse(cls, text: str) -> Undone | None:
        parts = text.split(" ", 4)
        if len(parts) < 4 or not parts[3].isascii() or not parts[3].isdigit():
            return None
        try:
            return cls(parts[0], parse_expires(parts[1]), parts[2], int(parts[3]), parts[4] if len(parts) == 5 else "")
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Intent:
    """A send in flight, recorded before the message goes out; for a warning, what it says."""

    kind: NoticeKind
    id: str
    at: _dt.datetime
    warns_of: WarnedOf | None = None

    def __str__(self) -> str:
        text = f"{self.kind} {self.id} {format_deadline(self.at)}"
        return f"{text} {self.warns_of}" if self.warns_of is not None else text

    @classmethod
    def parse(cls, text: str) -> Intent | None:
        parts = text.split()
        if len(parts) not in (3, 5, 6):
            return None
        try:
            kind, at = NoticeKind(parts[0]), parse_expires(parts[2])
        except ValueError:
            return None
        warns_of = WarnedOf.parse(" ".join(parts[3:])) if len(parts) > 3 else None
        if len(parts) > 3 and warns_of is None:
            return None
        return cls(kind, parts[1], at, warns_of)


@dataclass(frozen=True, slots=True)
class Release:
    """"Release now", pressed on a warning: who, when, and what it consented to, which is all it
    counts for: this mark (its marked-at), this action, the warning delivered at `warned_at` (a later
    warning is a new question), and the owner it was for (`<kind>:<value>`, as WARNED_TO).
    `<marked-at> <UTC time> <Slack user> <action> <warned-at> <owner>`."""

    marked_at: _dt.datetime
    at: _dt.datetime
    user: str
    action: str
    warned_at: _dt.datetime
    owner: str

    def __str__(self) -> str:
        return (f"{format_expires(self.marked_at)} {format_expires(self.at)} {self.user} {self.action} "
                f"{format_expires(self.warned_at)} {self.owner}")

    @classmethod
    def parse(cls, text: str) -> Release | None:
        """The `__str__` form back; None for anything else (an older janitor's release counts for nothing)."""
        parts = text.split(" ", 5)
        if len(parts) != 6 or not all(parts):
            return None
        try:
            return cls(parse_expires(parts[0]), parse_expires(parts[1]), parts[2], parts[3], parse_expires(parts[4]),
                       parts[5])
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Mark:
    """The janitor's mark on an object, as read back from its annotations.

    `uid` is the object the mark was written on: on any other object (a ReplicaSet the Deployment
    controller copied it onto, a restored or re-applied object) it is a copy, never a mark.
    `problems` lists what is missing or does not parse: such a mark is never acted on."""

    uid: str | None
    policy: str | None
    deadline: _dt.datetime | None
    marked_at: _dt.datetime | None
    reason: str = ""
    warned_at: _dt.datetime | None = None
    warned_via: Delivery | None = None
    warned_of: WarnedOf | None = None
    warned_to: str | None = None  # the owner the delivered warning was for (None: an older janitor's record)
    reminded_at: _dt.datetime | None = None
    intent: Intent | None = None
    problems: tuple[str, ...] = ()
    foreign: frozenset[str] = frozenset()  # its keys someone other than the janitor wrote last
    legacy: bool = False  # its deadline is in EXPIRES (written before DEADLINE was): kube-janitor reads it

    @property
    def deadline_key(self) -> str:
        return EXPIRES if self.legacy else DEADLINE

    @property
    def owns_expires(self) -> bool:
        """Its EXPIRES goes with it: an older mark's deadline (whoever wrote it last, it was never a
        user's deadline beside a mark, and left alone it would be a delete order)."""
        return self.legacy

    def belongs_to(self, uid: str) -> bool:
        return self.uid == uid

    @property
    def cap_trusted(self) -> bool:
        """Its cap (maxExtension after marked-at, of its policy) is counted from what the janitor wrote."""
        return self.foreign.isdisjoint(CAP_KEYS)

    @property
    def warned(self) -> bool:
        """A delivered warning is on record, with what it said."""
        return self.warned_at is not None and self.warned_via is not None and self.warned_of is not None


def carries_mark(notes: Mapping[str, str]) -> bool:
    """Any janitor-only mark key is present: the object is marked, and the plain expiry path never acts
    on its EXPIRES (an older mark's deadline, or a user's beside a mark: the lifecycle decides)."""
    return any(key in notes for key in JANITOR_ONLY_KEYS)


def mark_keys_on(notes: Mapping[str, str]) -> tuple[str, ...]:
    """The keys removing the mark on an object removes: the janitor's keys present, and EXPIRES where
    it is an older mark's deadline (no janitor/deadline beside it), whoever wrote it last: it was
    never a user's deadline, and left behind it would be a delete order. Beside janitor/deadline a
    janitor/expires is a user's, and stays."""
    keys = tuple(k for k in MARK_KEYS if k in notes)
    if keys and DEADLINE not in notes and EXPIRES in notes:
        keys += (EXPIRES,)
    return keys


_WARNING_RECORD = frozenset({WARNED_AT, WARNED_VIA, WARNED_OF, WARNED_TO})
_FACTS = frozenset({DEADLINE, EXPIRES, NOTICE, REMINDED_AT, RELEASE}) | _WARNING_RECORD


def read_mark(notes: Mapping[str, str], foreign: Collection[str] = frozenset()) -> Mark | None:
    """The mark on an object, whole or partial; None if it carries none of the janitor's keys.

    `foreign` are the keys someone other than the janitor wrote last (observe reads them from the
    apiserver's managedFields). What they say is no fact of the janitor's: a warning record with
    any of them was never delivered, an intent or a reminder time among them is none, and a
    deadline among them is replaced by the one the janitor's own record names (none before the
    warning: the lifecycle names one then). Who marked it (policy, marked-at, marked-uid) is read
    as written, and `Mark.foreign` keeps the keys, so that a cap counted from them is none.
    """
    if not carries_mark(notes):
        return None
    legacy = DEADLINE not in notes
    due_key = EXPIRES if legacy else DEADLINE
    untrusted = frozenset(foreign).intersection(notes, MARK_KEYS if not legacy else MARK_READ_KEYS)
    if untrusted & _WARNING_RECORD:
        untrusted |= _WARNING_RECORD.intersection(notes)
    if untrusted & _FACTS:
        notes = {k: v for k, v in notes.items() if k not in untrusted or k not in _FACTS}
    problems: list[str] = []

    def time(key: str, *, required: bool = False) -> _dt.datetime | None:
        text = notes.get(key)
        if text is None:
            if required:
                problems.append(f"{key} missing")
            return None
        try:
            return parse_expires(text)
        except ValueError:
            problems.append(f"{key}={_show(text)}")
            return None

    def parsed(key: str, parse: Callable[[str], T | None]) -> T | None:
        text = notes.get(key)
        value = parse(text) if text is not None else None
        if text is not None and value is None:
            problems.append(f"{key}={_show(text)}")
        return value

    for key in (POLICY, MARKED_UID):
        if not notes.get(key):
            problems.append(f"{key} missing")
    warned = [k for k in (WARNED_AT, WARNED_VIA, WARNED_OF) if k in notes]
    if warned and len(warned) != 3:
        problems.append("warning record incomplete (" + ", ".join(warned) + " without the rest)")
    mark = Mark(
        uid=notes.get(MARKED_UID) or None, policy=notes.get(POLICY) or None,
        deadline=time(due_key, required=due_key not in untrusted), marked_at=time(MARKED_AT, required=True),
        reason=notes.get(REASON, ""), warned_at=time(WARNED_AT), warned_via=parsed(WARNED_VIA, Delivery.parse),
        warned_of=parsed(WARNED_OF, WarnedOf.parse), warned_to=notes.get(WARNED_TO) or None,
        reminded_at=time(REMINDED_AT),
        intent=parsed(NOTICE, Intent.parse), problems=tuple(problems), foreign=untrusted, legacy=legacy,
    )
    if due_key in untrusted:
        named = mark.intent.warns_of if mark.intent is not None else None
        deadline = mark.warned_of if mark.warned else named
        mark = replace(mark, deadline=deadline.deadline if deadline is not None else None)
    return mark
