"""A duration in the words people read: "4 h", "30 min", "1 h 30 min", "2 d", "3 d 4 h".

Wherever a person reads a duration (a Slack message, `janitor plan` and `explain`, an Event, a log
line, `janitor annotation`), it is written this way, never as Python writes a timedelta
("7 days, 0:00:00", "0:01:00"), which reads as a clock time. Policy files and annotations keep
their own form (7d, 30m: `annotations.format_duration`), which a person types back. Pure, and
below every other module, so the node agent and the core alike can use it.
"""

from __future__ import annotations

import datetime

_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def in_words(delta: datetime.timedelta) -> str:
    """The two largest units, a zero second one left out; under a second (or negative) is "0 s"."""
    seconds = max(0, int(delta.total_seconds()))
    index = next((i for i, (size, _) in enumerate(_UNITS) if seconds >= size), len(_UNITS) - 1)
    size, name = _UNITS[index]
    words = f"{seconds // size} {name}"
    if index + 1 < len(_UNITS):
        smaller, small_name = _UNITS[index + 1]
        rest = seconds % size // smaller
        if rest:
            words += f" {rest} {small_name}"
    return words


__all__ = ["in_words"]
