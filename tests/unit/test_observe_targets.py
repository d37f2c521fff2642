"""Scrape intervals from Prometheus' targets API, without a Prometheus (the sandbox tests read a real one).

Covered: Prometheus durations (`15s`, `1m30s`, `500ms`; garbage and zero are no interval); a job's
interval is the shortest of its active targets; targets without a job or an interval are left out;
an error from the API is "unknown" (no jobs), with its reason, never a guess.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from janitor.observe.prometheus import ErrorKind, PrometheusConfig, PrometheusError, PrometheusSource
from janitor.observe.targets import by_job, parse_interval, scrape_intervals

S = datetime.timedelta(seconds=1)


@pytest.mark.parametrize(("text", "interval"), [
    ("15s", 15 * S), ("1m", 60 * S), ("1m30s", 90 * S), ("500ms", S / 2), ("1h", 3600 * S),
    ("", None), ("0s", None), ("15", None), ("fast", None), ("15s ", None), ("-15s", None),
])
def test_prometheus_durations(text: str, interval: datetime.timedelta | None) -> None:
    assert parse_interval(text) == interval


def test_a_jobs_interval_is_the_shortest_of_its_targets() -> None:
    targets: list[dict[str, Any]] = [
        {"labels": {"job": "dcgm", "instance": "a"}, "scrapeInterval": "30s"},
        {"labels": {"job": "dcgm", "instance": "b"}, "scrapeInterval": "15s"},
        {"labels": {"job": "cadvisor"}, "scrapeInterval": "1m"},
        {"labels": {"job": "old"}},  # a Prometheus too old to say
        {"labels": {}, "scrapeInterval": "5s"},
        {"scrapeInterval": "5s"},
    ]
    assert by_job(targets) == {"dcgm": 15 * S, "cadvisor": 60 * S}


class Failing(PrometheusSource):
    def active_targets(self) -> list[Any]:
        raise PrometheusError(ErrorKind.MALFORMED, "no targets answer: HTTP 404", status=404)


def test_no_targets_api_means_unknown() -> None:
    read = scrape_intervals(Failing(PrometheusConfig(url="http://127.0.0.1:9")))
    assert read.jobs is None and read.error is not None and "404" in read.error
