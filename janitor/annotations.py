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
3. A TTL beyond timedelta's range (about 2.7 million years) is rejected;
   kube-janitor keeps the huge integer, which never expires either.
4. format_duration writes one exact unit (3900 s -> `65m`) so the result is
   a valid TTL; kube-janitor's writes display text (`1h5m`, `-1s`) that its
   own parse_ttl rejects. Negative or sub-second input is refused.
5. format_expires refuses naive and sub-second datetimes instead of
   guessing a zone or silently dropping precision (which could move an
   expiry earlier).

Everything here is pure: no clock reads, standard library only.
"""

from __future__ import annotations

import datetime as _dt
import re

TTL = "janitor/ttl"  # users/CI: lifetime counted from creation, e.g. 8h; FOREVER = none
EXPIRES = "janitor/expires"  # users/CI: absolute UTC time after which the object may be deleted
POLICY = "janitor/policy"  # the janitor: the policy that marked it; beside EXPIRES, the mark is its own
REASON = "janitor/reason"  # the janitor: why it marked the object, with the numbers
WARNED_AT = "janitor/warned-at"  # the janitor: UTC time (format_expires) the warning was delivered
WARNED_VIA = "janitor/warned-via"  # the janitor: where it went, "owner|admins <channel>/<Slack ts>"
MARKED_AT = "janitor/marked-at"  # the janitor: when it first marked the object (extensions count from it)
REMINDED_AT = "janitor/reminded-at"  # the janitor: UTC time the last reminder was delivered
NOTICE = "janitor/notice"  # the janitor: a send in flight, "<kind> <intent id> <UTC time>", recorded before it
KEEP_UNTIL = "janitor/keep-until"  # owners: never reclaim before this UTC time; unparseable = keep
TIME_ZONE = "janitor/time-zone"  # admins, on a namespace: the IANA zone its working hours are counted in
OPT_OUT = "janitor/opt-out"  # owners/admins: "true" = never act on this, where the policy honours it
REPORTED = "janitor/reported"  # the janitor: the mistakes on this object it already reported (one Event each)
ACKNOWLEDGE_TRIPWIRE = "janitor/acknowledge-tripwire"  # admins, on the state ConfigMap: resume deletions
NOTEBOOK_STOPPED = "kubeflow-resource-stopped"  # Kubeflow: the Notebook is stopped (the `stop` action sets it)
FOREVER = "forever"  # TTL value meaning "no TTL" (matched case-insensitively, as kube-janitor)

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
_SECOND = _dt.timedelta(seconds=1)


def _show(text: str) -> str:
    """Quote a rejected value for an error message; repr shows stray
    whitespace, and the cut keeps a huge annotation out of the logs."""
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def parse_ttl(text: str) -> _dt.timedelta | None:
    """Parse a `janitor/ttl` value; None means `forever`.

    Raises ValueError naming the valid forms, so whoever logs or reports
    it tells the owner how to fix the annotation.
    """
    if text.lower() == FOREVER:  # no non-ASCII character lowercases into "forever"
        return None
    match = _TTL_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{_show(text)} is not a valid TTL: {_TTL_FORMS}")
    try:
        # int() raises ValueError past 4300 digits; timedelta raises
        # OverflowError past 999999999 days. Both are "too large".
        return _dt.timedelta(seconds=int(match[1]) * _UNIT_SECONDS[match[2]])
    except (OverflowError, ValueError):
        raise ValueError(
            f"{_show(text)} is not a valid TTL: too large; {_TTL_FORMS}"
        ) from None


def parse_expires(text: str) -> _dt.datetime:
    """Parse a `janitor/expires` (or `janitor/keep-until`) value as an
    aware UTC datetime; ValueError, naming the valid forms, otherwise."""
    match = _EXPIRES_RE.fullmatch(text)
    if match is not None:
        fields = [int(group) for group in match.groups(default="0")]
        try:
            return _dt.datetime(*fields, tzinfo=_dt.timezone.utc)
        except ValueError:  # e.g. Feb 30, hour 24, second 60, year 0000
            pass
    raise ValueError(f"{_show(text)} is not a valid expiry time: {_EXPIRES_FORMS}")


def format_duration(delta: _dt.timedelta) -> str:
    """Write `delta` as a TTL string in its largest exact unit (90 min ->
    `90m`, 2 days -> `2d`), so that parse_ttl gives back exactly `delta`."""
    if delta < _dt.timedelta(0) or delta % _SECOND:
        raise ValueError(
            f"cannot write {delta!r} as a TTL: it must be a non-negative whole number of seconds"
        )
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
    truncated, so parse_expires(format_expires(t)) == t always holds.
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
