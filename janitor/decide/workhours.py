"""Counting notice in working time, for the least notice before an idle workload is reclaimed.

A 24-hour notice sent on Friday at 19:00 ends on Saturday evening, when nobody reads Slack. With
working hours a policy can demand that part of the notice falls inside the owner's working day:
`add_working_time(friday 19:00, 4h)` is Monday 13:00 with 09:00-18:00 working hours. Time zones
come from the IANA database (zoneinfo), so daylight-saving changes are handled by the library.
"""

from __future__ import annotations

import datetime
from zoneinfo import ZoneInfo

from janitor.annotations import parse_time_zone
from janitor.policy.model import WorkingHours

_MAX_DAYS = 366  # a configuration with no working time at all must not loop forever


def zone(name: str) -> ZoneInfo | None:
    """The zone a namespace's `janitor/time-zone` names, or None for anything else: whatever a
    user wrote there (a directory of the zone database, a path, 300 characters) must not fail a cycle."""
    try:
        return parse_time_zone(name)
    except ValueError:
        return None


def add_working_time(start: datetime.datetime, hours: WorkingHours, time_zone: str | None = None) -> datetime.datetime:
    """The moment `hours.grace` of working time has passed after `start` (aware, any zone).

    `time_zone` overrides the policy's zone (a namespace's own); an unknown name falls back to
    the policy's. Days without working time are skipped; the result is in UTC."""
    tz = zone(time_zone or "") or zone(hours.time_zone) or datetime.timezone.utc
    left = hours.grace
    cursor = start.astimezone(tz)
    day = cursor.date()
    for _ in range(_MAX_DAYS):
        if day.weekday() in hours.days:
            opens = datetime.datetime.combine(day, hours.start, tz)
            closes = datetime.datetime.combine(day, hours.end, tz)
            begin = max(opens, cursor)
            if begin < closes:
                # Wall-clock arithmetic inside one working day, converted through UTC, so a
                # daylight-saving change inside the day neither adds nor loses an hour.
                available = closes.astimezone(datetime.timezone.utc) - begin.astimezone(datetime.timezone.utc)
                if left <= available:
                    return begin.astimezone(datetime.timezone.utc) + left
                left -= available
        day += datetime.timedelta(days=1)
    return start.astimezone(datetime.timezone.utc) + hours.grace  # no working days configured
