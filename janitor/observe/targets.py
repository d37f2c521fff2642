"""How often Prometheus scrapes each job, read from Prometheus itself, once per cycle.

Why not a flag: coverage ("samples over the window / samples expected") and the longest gap are
only as good as the interval they are measured against. dcgm-exporter is commonly scraped every
15 s; judged against a 30 s flag, a series that lost half its samples looks complete. The
targets API says what each target is scraped at (`scrapeInterval`); a job's interval is the
shortest among its active targets, so a mixed job expects more samples, never fewer (towards
*unknown*, never towards idle).

Stores without a targets API (Mimir) answer with an error: then only an interval the admin set
with `--scrape-interval` is used, and without one every series' interval is unknown, which
judges nothing idle. So is an answer of targets none of which says its job and interval (a
Prometheus before 2.37, a proxy's own shape): it is no interval, and says why, never `{}`, which
would look like a Prometheus that scrapes nothing. The caller says it once (a plan notice).
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from janitor.observe.prometheus import PrometheusError, PrometheusSource

logger = logging.getLogger(__name__)

_PART = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000,
            "y": 31_536_000_000}


def parse_interval(text: str) -> datetime.timedelta | None:
    """A Prometheus duration (`15s`, `1m30s`, `500ms`) or None when it is not one (or zero)."""
    if not isinstance(text, str) or not text or _PART.sub("", text):
        return None
    ms = sum(int(n) * _UNIT_MS[unit] for n, unit in _PART.findall(text))
    return datetime.timedelta(milliseconds=ms) if 0 < ms < 10 * _UNIT_MS["y"] else None


def by_job(targets: Iterable[Mapping[str, Any]]) -> dict[str, datetime.timedelta]:
    """Each job's shortest scrape interval among its active targets (pure)."""
    jobs: dict[str, datetime.timedelta] = {}
    for target in targets:
        labels = target.get("labels")
        job = labels.get("job") if isinstance(labels, Mapping) else None
        interval = parse_interval(target.get("scrapeInterval", ""))
        if isinstance(job, str) and interval is not None:
            jobs[job] = min(interval, jobs.get(job, interval))
    return jobs


@dataclass(frozen=True, slots=True)
class ScrapeIntervals:
    """What the targets API said: each job's interval, or (`jobs` None) why it said none."""

    jobs: dict[str, datetime.timedelta] | None
    error: str | None = None


def scrape_intervals(source: PrometheusSource) -> ScrapeIntervals:
    """Each job's scrape interval, or why Prometheus cannot say."""
    try:
        targets = source.active_targets()
    except PrometheusError as error:
        logger.debug("scrape intervals unknown (Prometheus targets API): %s", error)
        return ScrapeIntervals(None, f"Prometheus targets API: {error}")
    jobs = by_job(targets)
    if targets and not jobs:
        first = ", ".join(sorted(str(k) for k in targets[0])[:8])
        return ScrapeIntervals(None, f"Prometheus targets API answered {len(targets)} active targets, none with a "
                                     f"job label and a scrapeInterval (the first has: {first or 'nothing'})")
    return ScrapeIntervals(jobs)
