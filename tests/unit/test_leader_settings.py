"""Leader election settings and the daemon's error attribution (no apiserver needed).

Aspects covered:
- the fence must close before anyone could take over: retry < renew deadline < lease duration;
  an identity is required;
- a failed cycle is counted against the dependency that failed;
- the logged settings never contain the Slack token.
"""

from __future__ import annotations

import datetime

import pytest

from janitor import errors
from janitor.daemon import error_source
from janitor.leader import LeaseSettings
from janitor.observe.prometheus import ErrorKind, PrometheusError

S = datetime.timedelta(seconds=1)


def test_fence_closes_before_the_lease_can_be_taken() -> None:
    LeaseSettings("ns", identity="pod-a", lease_duration=15 * S, renew_deadline=10 * S, retry_period=2 * S)
    with pytest.raises(ValueError, match="renew_deadline < lease_duration"):
        LeaseSettings("ns", identity="pod-a", lease_duration=10 * S, renew_deadline=10 * S, retry_period=2 * S)
    with pytest.raises(ValueError, match="identity"):
        LeaseSettings("ns")


@pytest.mark.parametrize(("error", "source"), [
    (errors.from_status(503, b"down", doing="list pods"), "kubernetes"),
    (PrometheusError(ErrorKind.TRANSPORT, "connection refused", query="up"), "prometheus"),
    (ValueError("a bug"), "janitor"),
])
def test_errors_are_counted_by_source(error: BaseException, source: str) -> None:
    assert error_source(error) == source


def test_the_slack_token_never_shows_in_the_logged_settings() -> None:
    from janitor.settings import Settings, SlackSettings, logged

    shown = "\n".join(logged(Settings(slack=SlackSettings(token="xoxb-1234-secret", admin_channel="#gpu-admins"))))
    assert "xoxb-1234-secret" not in shown and "#gpu-admins" in shown
