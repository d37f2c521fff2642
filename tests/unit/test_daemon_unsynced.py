"""What the daemon says while its watch cache cannot sync (janitor/daemon.py), read live from the cache.

Aspects covered:
- before any cycle has ended, a kind whose request failed or got no answer in time is on
  /healthz (503: nothing was ever done) and /readyz, with the kind and why; a kind merely listing
  is not (the first cycle waits for it);
- after a recent success /healthz stays 200 and says it; past three intervals without one it is
  503, still saying why; once the kind syncs, "ok" again;
- a cycle skipped for the same kinds as the last one says so at DEBUG only; a new set of kinds is
  a WARNING again.
"""

from __future__ import annotations

import datetime
import logging
import time

import pytest

from janitor.cycle import Ports
from janitor.daemon import _Cycles
from janitor.observe.cache import NotSynced
from janitor.observe.kind_status import KindStatus, State
from janitor.settings import Settings
from janitor.telemetry import Telemetry

UNANSWERED = KindStatus("Pod", State.RETRYING, False, 0, 1, 0, 0, 2, 0,
                        "the apiserver did not answer the watch within 10s")
LISTING = KindStatus("Node", State.LISTING, False, 0, 0, 0, 0, 0, 0, underway=True)
SAID = "watch cache not synced, so cycles do nothing: Pod retrying (the apiserver did not answer the watch within 10s)"


class Cache:
    """The two questions the daemon asks its cache."""

    def __init__(self, *kinds: KindStatus) -> None:
        self.kinds = list(kinds)

    def unsynced(self) -> list[KindStatus]:
        return [k for k in self.kinds if not k.synced]

    def failing(self) -> list[KindStatus]:
        return [k for k in self.unsynced() if k.failing]


def cycles(cache: Cache) -> _Cycles:
    settings = Settings(interval=datetime.timedelta(seconds=60))
    return _Cycles(Ports(api=None, cache=cache), settings, Telemetry(), None)  # type: ignore[arg-type]


def test_before_any_cycle_ends_a_kind_that_cannot_sync_is_said_and_one_listing_is_not() -> None:
    cache = Cache(LISTING)
    daemon = cycles(cache)
    assert daemon.health() == (True, "ok, starting")
    assert daemon.readiness() == (False, "first cycle not done yet")
    cache.kinds.append(UNANSWERED)
    assert daemon.health() == (False, SAID)
    assert daemon.readiness() == (False, SAID)


def test_after_a_success_it_is_said_and_live_until_three_intervals_pass() -> None:
    cache = Cache(UNANSWERED)
    daemon = cycles(cache)
    daemon.last_success, daemon.ready = time.time() - 5, True
    ok, text = daemon.health()
    assert ok and text.startswith("ok, last success ") and text.endswith("s ago; " + SAID)
    daemon.last_success = time.time() - 181
    assert daemon.health() == (False, SAID)
    cache.kinds.clear()
    daemon.last_success = time.time() - 5
    assert daemon.health()[0] and daemon.health()[1].startswith("ok, last success ")


def test_a_cycle_skipped_for_the_same_kinds_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    cache = Cache(UNANSWERED)
    daemon = cycles(cache)
    error = NotSynced("the watch cache is not synced: Pod (retrying)", doing="read the watch cache")
    with caplog.at_level(logging.DEBUG, logger="janitor.daemon"):
        for _ in range(3):
            daemon._finished({"error": error})
        cache.kinds.append(KindStatus("Node", State.RETRYING, False, 0, 1, 0, 0, 1, 0, "HTTP 503"))
        daemon._finished({"error": error})
    levels = [r.levelname for r in caplog.records if r.getMessage().startswith("cycle skipped")]
    assert levels == ["WARNING", "DEBUG", "DEBUG", "WARNING"]
    assert daemon.telemetry.registry.get_sample_value("janitor_cycles_total", {"result": "unsynced"}) == 4
