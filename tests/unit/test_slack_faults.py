"""The janitor's Slack client with the fault proxy between it and the Slack stand-in.

Aspects covered:
- exactly one message per intent: a chat.postMessage whose answer is lost (Slack got it, the
  answer came too late) is not posted again by the client library's own retry; the send
  reports no delivery, and the janitor's recovery (message metadata) finds the one message; the
  same when Slack posted it and the answer became a reset or a 500/503 on the way back;
- a 429 on chat.postMessage (Slack posted nothing) is retried after Retry-After and delivered;
- reads (users.lookupByEmail) are still retried after a lost connection.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest
from test_act_slack import ALICE_BY_EMAIL, digest, dm_of

from devenv.faults import FaultProxy
from devenv.slack_standin import DEFAULT_TOKEN, SlackStandIn, SlackUser
from janitor.act.slack import Slack

ALICE = SlackUser(email="alice@lab.example", id="U0ALICE01", name="alice")


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    with SlackStandIn(users=[ALICE], channels={"C0ADMINS": "gpu-admins"}) as s:
        yield s


@pytest.fixture
def proxy(standin: SlackStandIn) -> Iterator[FaultProxy]:
    with FaultProxy(standin.base_url.removesuffix("/api/")) as p:
        yield p


def slack_through(proxy: FaultProxy, timeout: float = 10.0) -> Slack:
    return Slack.connect(DEFAULT_TOKEN, base_url=proxy.url.rstrip("/") + "/api/", timeout=timeout,
                         admin_channel="C0ADMINS")


def test_a_post_whose_answer_is_lost_is_not_posted_twice(standin: SlackStandIn, proxy: FaultProxy) -> None:
    slack = slack_through(proxy, timeout=1.0)
    dm = dm_of(standin, ALICE.id)
    proxy.delay(3, path="/api/chat.postMessage", times=1)  # forwarded after the client gave up
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)
    result = slack.send(digest(ALICE_BY_EMAIL))
    time.sleep(3.5)
    assert len(proxy.requests(path="/api/chat.postMessage")) == 1
    assert len(standin.messages(dm)) == 1
    assert result.delivery is None and result.error
    found = slack.find_sent(ALICE_BY_EMAIL, "cycle-1/alice", since=since)
    assert found is not None and found.ts == standin.messages(dm)[0].ts


@pytest.mark.parametrize("answer", [0, 500, 503], ids=["reset", "500", "503"])
def test_a_post_that_slack_made_but_whose_answer_failed_is_not_posted_again(
    standin: SlackStandIn, proxy: FaultProxy, answer: int
) -> None:
    slack = slack_through(proxy)
    dm = dm_of(standin, ALICE.id)
    proxy.lost(answer, path="/api/chat.postMessage", times=1)
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)

    result = slack.send(digest(ALICE_BY_EMAIL))

    assert len(proxy.requests(path="/api/chat.postMessage")) == 1
    assert len(standin.messages(dm)) == 1
    assert result.delivery is None and result.error
    found = slack.find_sent(ALICE_BY_EMAIL, "cycle-1/alice", since=since)
    assert found is not None and found.ts == standin.messages(dm)[0].ts


@pytest.mark.parametrize("path", ["/api/chat.postMessage", "/api/users.lookupByEmail", "/api/auth.test"])
def test_an_answer_that_is_not_json_is_a_failed_call_not_an_exception(
    standin: SlackStandIn, proxy: FaultProxy, path: str
) -> None:
    slack = slack_through(proxy)
    proxy.malformed(path=path)
    if path == "/api/auth.test":
        assert slack.check_token() != ""
        return
    result = slack.send(digest(ALICE_BY_EMAIL))
    assert result.delivery is None and "could not be read" in result.error


def test_a_rate_limited_post_is_retried_and_delivered_once(standin: SlackStandIn, proxy: FaultProxy) -> None:
    slack = slack_through(proxy)
    proxy.status(429, body={"ok": False, "error": "ratelimited"}, path="/api/chat.postMessage", times=1)
    result = slack.send(digest(ALICE_BY_EMAIL))
    assert result.delivery is not None
    assert [r.status for r in proxy.requests(path="/api/chat.postMessage")] == [429, 200]
    assert len(standin.messages(dm_of(standin, ALICE.id))) == 1


def test_a_lookup_is_retried_after_a_lost_connection(standin: SlackStandIn, proxy: FaultProxy) -> None:
    slack = slack_through(proxy)
    proxy.reset(path="/api/users.lookupByEmail", times=1)
    assert slack.send(digest(ALICE_BY_EMAIL)).delivery is not None
    assert len(proxy.requests(path="/api/users.lookupByEmail")) == 2
