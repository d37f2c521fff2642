"""What the daemon's log says about its own state, as an admin on call reads it.

Aspects covered:
- leader election: taking the lease is news, not a problem (INFO); losing it while running is a
  WARNING; letting it go on a clean stop is INFO again.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from janitor.leader import LeaseElector, LeaseSettings

S = datetime.timedelta(seconds=1)


class Leases:
    """A Lease API that has no lease until one is created, then keeps it."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> client.V1Lease:
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
        return self.lease

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease, **_: Any) -> client.V1Lease:
        body.metadata.resource_version = "1"
        self.lease = body
        return body

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease, **_: Any) -> client.V1Lease:
        self.lease = body
        return body


def elector(clock: list[float]) -> LeaseElector:
    settings = LeaseSettings("kube-idle-janitor", identity="pod-a", lease_duration=15 * S, renew_deadline=10 * S,
                             retry_period=2 * S)
    found = LeaseElector(client.ApiClient(), settings, monotonic=lambda: clock[0])
    found.leases = Leases()  # type: ignore[assignment]
    return found


def levels(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    return [r.levelname for r in caplog.records if word in r.getMessage()]


def test_taking_the_lease_is_info_and_losing_it_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="janitor")
    clock = [100.0]
    leader = elector(clock)
    assert leader.try_acquire_or_renew()
    assert levels(caplog, "acquired") == ["INFO"]
    clock[0] += 11  # no renewal within the renew deadline: the fence closes
    assert not leader.is_leader()
    assert levels(caplog, "lost") == ["WARNING"]


def test_letting_the_lease_go_on_a_clean_stop_is_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="janitor")
    leader = elector([100.0])
    assert leader.try_acquire_or_renew()
    leader.stop(release=True)
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert levels(caplog, "released") == ["INFO"]
