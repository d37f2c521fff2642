"""Notice counted in working time.

Aspects covered:
- inside a working day the grace is plain time; after hours it starts next working morning;
- a Friday-evening warning is not acted on over the weekend;
- a namespace's own zone replaces the policy's; an unknown zone falls back to the policy's;
- a daylight-saving change inside the count neither adds nor loses an hour of working time;
- the lifecycle's deadline after delivery includes it.
"""

from __future__ import annotations

import datetime

import pytest

from janitor.decide.workhours import add_working_time
from janitor.policy.model import WorkingHours

UTC = datetime.timezone.utc
BERLIN = WorkingHours("Europe/Berlin", grace=datetime.timedelta(hours=4))


def utc(*args: int) -> datetime.datetime:
    return datetime.datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(("start", "expected"), [
    pytest.param(utc(2026, 11, 24, 9), utc(2026, 11, 24, 13), id="tuesday-10h-berlin"),
    pytest.param(utc(2026, 11, 24, 15), utc(2026, 11, 25, 10), id="tuesday-16h-runs-into-wednesday"),
    pytest.param(utc(2026, 11, 24, 21), utc(2026, 11, 25, 12), id="after-hours-starts-next-morning"),
    pytest.param(utc(2026, 11, 27, 18), utc(2026, 11, 30, 12), id="friday-evening-to-monday"),
    pytest.param(utc(2026, 11, 28, 10), utc(2026, 11, 30, 12), id="saturday-to-monday"),
])
def test_grace_counts_only_working_time(start: datetime.datetime, expected: datetime.datetime) -> None:
    assert add_working_time(start, BERLIN) == expected


def test_namespace_zone_replaces_the_policys_and_unknown_falls_back() -> None:
    friday_evening_berlin = utc(2026, 11, 27, 18)  # 13:00 in New York: still the working day there
    assert add_working_time(friday_evening_berlin, BERLIN, "America/New_York") == utc(2026, 11, 27, 22)
    assert add_working_time(friday_evening_berlin, BERLIN, "Mars/Olympus") == utc(2026, 11, 30, 12)


def test_daylight_saving_change_keeps_working_hours_whole() -> None:
    # Europe moves to summer time on Sunday 2026-03-29; Friday 17:00 CET + 4 working hours is
    # Monday 12:00 CEST, which is 10:00 UTC (not 11:00).
    assert add_working_time(utc(2026, 3, 27, 16), BERLIN) == utc(2026, 3, 30, 10)


def test_no_working_days_falls_back_to_plain_grace() -> None:
    never = WorkingHours("UTC", days=(), grace=datetime.timedelta(hours=4))
    assert add_working_time(utc(2026, 11, 24, 9), never) == utc(2026, 11, 24, 13)
