"""Tests of janitor/act/slack.py against the Slack stand-in, through the real slack_sdk client.

Aspects covered:
- destinations: an e-mail owner's digest lands in their DM with the intent in its metadata; a
  digest of several messages is delivered as its first message; a "#name" channel owner gets it
  in that channel; a Slack user id owner in their DM;
- caching: users.lookupByEmail and conversations.open once per ttl, misses included; a transient
  lookup failure is not cached and does not go to the admins;
- admins: unknown owners, unknown e-mails and missing channels go to the admin channel with
  to_admins set, or fail with the reason when there is no fallback;
- failures: a 429 with Retry-After and a 500 are retried by the client's handlers and delivered;
  invalid_auth fails with its error text and reaches nobody;
- find_sent: after a reply that never came (the stand-in's "slow" fault against a short client
  timeout), a fresh Slack finds the message by intent; another intent is not found; a channel
  named "#team" is searched by its id; an unreachable owner's digest is looked for with the
  admins, or not at all without them; Slack failing to answer raises SlackUnavailable; asked
  about one workload, only a message naming it in its metadata counts (another digest under the
  same intent does not), and a kept note's message names its workload;
- Outbox: FIFO order; a slow Slack spends the budget and the rest waits for the next flush.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import replace

import pytest
from slack_sdk import WebClient

from devenv.slack_standin import DEFAULT_TOKEN, SlackStandIn, SlackUser
from janitor.act.slack import Digest, Outbox, Slack, SlackUnavailable
from janitor.act.slack_messages import Message
from janitor.annotations import Delivery
from janitor.decide.model import ObjectRef
from janitor.decide.notices import Notice, NoticeKind
from janitor.decide.owners import Owner, OwnerKind

UTC = datetime.timezone.utc
ALICE = SlackUser(email="alice@lab.example", id="U0ALICE01", name="alice")
ALICE_BY_EMAIL = Owner(OwnerKind.EMAIL, "Alice@lab.example", "namespace annotation owner")
NOBODY = Owner(OwnerKind.EMAIL, "nobody@lab.example")
UNKNOWN = Owner(OwnerKind.UNKNOWN)
ADMINS = "C0ADMINS"


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    with SlackStandIn(users=[ALICE], channels={ADMINS: "gpu-admins", "C0TEAMML": "team-ml"}) as s:
        yield s


@pytest.fixture
def slack(standin: SlackStandIn) -> Slack:
    return Slack.connect(DEFAULT_TOKEN, base_url=standin.base_url, admin_channel=ADMINS)


def notice(owner: Owner, name: str = "train-0", kind: NoticeKind = NoticeKind.WARNING) -> Notice:
    now = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    return Notice(kind, ObjectRef("Pod", "v1", "team-a", name, f"uid-{name}"), "idle-gpu", owner,
                  "delete", "0% GPU use for 2h", now, deadline=now + datetime.timedelta(hours=24))


def digest(owner: Owner, intent: str = "cycle-1/alice", texts: tuple[str, ...] = ("2 idle GPUs",),
           names: tuple[str, ...] = ("train-0",)) -> Digest:
    blocks = ({"type": "section", "text": {"type": "mrkdwn", "text": "*idle*"}},)
    return Digest(owner, tuple(notice(owner, n) for n in names), intent,
                  tuple(Message(t, blocks) for t in texts))


def dm_of(standin: SlackStandIn, user_id: str) -> str:
    return WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url).conversations_open(
        users=[user_id])["channel"]["id"]


def test_an_email_owner_gets_the_digest_in_their_dm_with_its_intent(
        standin: SlackStandIn, slack: Slack) -> None:
    result = slack.send(digest(ALICE_BY_EMAIL, names=("train-0", "train-1")))
    dm = dm_of(standin, ALICE.id)
    [msg] = standin.messages(dm)
    assert result.delivery == Delivery(dm, msg.ts, to_admins=False) and result.error == ""
    assert msg.text == "2 idle GPUs" and msg.blocks == [
        {"type": "section", "text": {"type": "mrkdwn", "text": "*idle*"}}]
    assert msg.metadata == {"event_type": "janitor_notice", "event_payload": {
        "intent": "cycle-1/alice", "uids": ["uid-train-0", "uid-train-1"], "kind": "warning"}}


def test_a_digest_of_several_messages_is_delivered_as_its_first(
        standin: SlackStandIn, slack: Slack) -> None:
    result = slack.send(digest(Owner(OwnerKind.SLACK_USER, ALICE.id), texts=("part 1", "part 2")))
    messages = standin.messages(dm_of(standin, ALICE.id))
    assert [m.text for m in messages] == ["part 1", "part 2"]
    assert result.delivery is not None and result.delivery.ts == messages[0].ts


def test_a_channel_owner_named_by_name_gets_it_in_that_channel(
        standin: SlackStandIn, slack: Slack) -> None:
    result = slack.send(digest(Owner(OwnerKind.CHANNEL, "#team-ml")))
    assert result.delivery is not None and result.delivery.channel == "C0TEAMML"
    assert [m.text for m in standin.messages("C0TEAMML")] == ["2 idle GPUs"]


def test_lookups_are_cached_for_the_ttl_misses_too(standin: SlackStandIn) -> None:
    now = [0.0]
    slack = Slack(WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url), admin_channel=ADMINS,
                  cache_ttl=datetime.timedelta(minutes=10), clock=lambda: now[0])
    for _ in range(2):
        assert slack.send(digest(ALICE_BY_EMAIL)).delivery is not None
        assert slack.send(digest(NOBODY)).delivery is not None
    lookups = [r.params["email"] for r in standin.requests("users.lookupByEmail")]
    assert lookups == [ALICE_BY_EMAIL.value, NOBODY.value]
    assert len(standin.requests("conversations.open")) == 1
    now[0] += 601
    slack.send(digest(NOBODY))
    assert len(standin.requests("users.lookupByEmail")) == 3


def test_unreachable_owners_go_to_the_admins(standin: SlackStandIn, slack: Slack) -> None:
    unknown = slack.send(digest(UNKNOWN))
    no_user = slack.send(digest(NOBODY, intent="cycle-1/nobody"))
    no_channel = slack.send(digest(Owner(OwnerKind.CHANNEL, "#no-such-team"), intent="c1/x"))
    assert [r.delivery and (r.delivery.channel, r.delivery.to_admins)
            for r in (unknown, no_user, no_channel)] == [(ADMINS, True)] * 3
    assert len(standin.messages(ADMINS)) == 3
    again = slack.send(digest(Owner(OwnerKind.CHANNEL, "#no-such-team"), intent="c2/x"))
    assert again.delivery is not None and again.delivery.to_admins
    assert [r.params["channel"] for r in standin.requests("chat.postMessage")].count(
        "#no-such-team") == 1  # the missing channel is remembered, not tried every cycle


def test_without_a_fallback_unreachable_owners_fail_with_the_reason(standin: SlackStandIn) -> None:
    slack = Slack(WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url), admin_channel=ADMINS,
                  allow_admin_fallback=False)
    assert slack.destination(UNKNOWN) == "unknown owner"
    result = slack.send(digest(NOBODY))
    assert (result.delivery, result.error) == (None, "users_not_found: nobody@lab.example")
    assert standin.messages(ADMINS) == []
    no_admins = Slack(WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url))
    assert no_admins.send(digest(UNKNOWN)).error == "unknown owner"


def test_a_transient_lookup_failure_is_neither_cached_nor_sent_to_the_admins(
        standin: SlackStandIn) -> None:
    slack = Slack(WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url), admin_channel=ADMINS)
    standin.fail("server_error", method="users.lookupByEmail")
    failed = slack.send(digest(ALICE_BY_EMAIL))
    assert (failed.delivery, failed.error) == (None, "internal_error")
    assert standin.messages(ADMINS) == []
    assert slack.send(digest(ALICE_BY_EMAIL)).delivery is not None


def test_a_rate_limit_is_waited_out_and_delivered(standin: SlackStandIn, slack: Slack) -> None:
    standin.fail("ratelimited", method="chat.postMessage", retry_after=1)
    result = slack.send(digest(ALICE_BY_EMAIL))
    assert result.delivery is not None and result.error == ""
    assert [r.status for r in standin.requests("chat.postMessage")] == [429, 200]
    assert len(standin.messages(result.delivery.channel)) == 1


def test_a_server_error_on_a_post_is_not_retried_blindly(standin: SlackStandIn, slack: Slack) -> None:
    """Slack may have posted before failing: the recovery decides, then the next send delivers."""
    standin.fail("server_error", method="chat.postMessage", status=500)
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)
    result = slack.send(digest(ALICE_BY_EMAIL))
    assert result.delivery is None and result.error
    assert slack.find_sent(ALICE_BY_EMAIL, "cycle-1/alice", since=since) is None
    assert slack.send(digest(ALICE_BY_EMAIL)).delivery is not None
    assert [r.status for r in standin.requests("chat.postMessage")] == [500, 200]


def test_invalid_auth_fails_with_its_error_and_reaches_nobody(standin: SlackStandIn) -> None:
    slack = Slack.connect("xoxb-revoked", base_url=standin.base_url, admin_channel=ADMINS)
    for owner in (ALICE_BY_EMAIL, UNKNOWN):
        result = slack.send(digest(owner))
        assert (result.delivery, result.error) == (None, "invalid_auth")
    assert standin.messages(ADMINS) == []


def test_find_sent_recognises_a_send_whose_reply_never_came(standin: SlackStandIn) -> None:
    since = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
    hasty = Slack.connect(DEFAULT_TOKEN, base_url=standin.base_url, timeout=0.5)
    standin.fail("slow", method="chat.postMessage", delay=1.5)
    lost = hasty.send(digest(ALICE_BY_EMAIL, intent="cycle-7/alice", texts=("a", "b")))
    assert (lost.delivery, lost.error) == (None, "timed out")
    [posted] = standin.messages(dm_of(standin, ALICE.id))  # Slack has it; the janitor did not learn
    restarted = Slack.connect(DEFAULT_TOKEN, base_url=standin.base_url)
    found = restarted.find_sent(ALICE_BY_EMAIL, "cycle-7/alice", since=since)
    assert found == Delivery(posted.channel, posted.ts)
    assert restarted.find_sent(ALICE_BY_EMAIL, "cycle-8/alice", since=since) is None
    later = datetime.datetime.fromtimestamp(float(posted.ts), UTC) + datetime.timedelta(seconds=1)
    assert restarted.find_sent(ALICE_BY_EMAIL, "cycle-7/alice", since=later) is None


def test_find_sent_returns_the_first_message_of_the_digest(standin: SlackStandIn, slack: Slack) -> None:
    since = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
    sent = slack.send(digest(Owner(OwnerKind.CHANNEL, "#team-ml"), texts=("1", "2", "3")))
    slack.send(digest(Owner(OwnerKind.CHANNEL, "#team-ml"), intent="cycle-2/team"))
    restarted = Slack.connect(DEFAULT_TOKEN, base_url=standin.base_url)
    found = restarted.find_sent(Owner(OwnerKind.CHANNEL, "#team-ml"), "cycle-1/alice", since=since)
    assert found == sent.delivery and found is not None and found.channel == "C0TEAMML"


def test_find_sent_looks_where_an_unreachable_owner_s_digest_went(
        standin: SlackStandIn, slack: Slack) -> None:
    since = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
    sent = slack.send(digest(NOBODY, intent="cycle-3/nobody"))
    assert slack.find_sent(NOBODY, "cycle-3/nobody", since=since) == sent.delivery
    assert sent.delivery is not None and sent.delivery.to_admins
    no_admins = Slack(WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url))
    assert no_admins.find_sent(UNKNOWN, "cycle-3/nobody", since=since) is None  # nowhere to go


def test_find_sent_about_one_workload_needs_a_message_naming_it(standin: SlackStandIn, slack: Slack) -> None:
    """One intent per owner and cycle: another workload's digest under it says nothing of this one."""
    since = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
    sent = slack.send(digest(ALICE_BY_EMAIL, names=("train-0", "train-1")))
    assert slack.find_sent(ALICE_BY_EMAIL, "cycle-1/alice", since=since, uid="uid-train-1") == sent.delivery
    assert slack.find_sent(ALICE_BY_EMAIL, "cycle-1/alice", since=since, uid="uid-other") is None
    kept = Digest(ALICE_BY_EMAIL, (), "cycle-1/alice", (Message("done", ()),), about=("uid-other",))
    again = slack.send(kept)  # a kept note, sent alone: no notices, its workload named all the same
    assert again.delivery is not None
    assert standin.messages(again.delivery.channel)[-1].metadata["event_payload"]["uids"] == ["uid-other"]
    assert slack.find_sent(ALICE_BY_EMAIL, "cycle-1/alice", since=since, uid="uid-other") == again.delivery


def test_find_sent_raises_when_slack_cannot_say(standin: SlackStandIn, slack: Slack) -> None:
    since = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
    slack.send(digest(ALICE_BY_EMAIL))
    standin.fail("invalid_auth", method="conversations.history")
    with pytest.raises(SlackUnavailable, match="invalid_auth"):
        slack.find_sent(ALICE_BY_EMAIL, "cycle-1/alice", since=since)


def test_outbox_sends_in_order(standin: SlackStandIn, slack: Slack) -> None:
    outbox = Outbox(slack)
    for n in range(3):
        outbox.add(digest(UNKNOWN, intent=f"cycle-1/{n}", texts=(f"digest {n}",)))
    results = outbox.flush(budget_seconds=60)
    assert [r.digest.intent for r in results] == ["cycle-1/0", "cycle-1/1", "cycle-1/2"]
    assert [m.text for m in standin.messages(ADMINS)] == ["digest 0", "digest 1", "digest 2"]
    assert outbox.pending == 0


def test_a_slow_slack_spends_the_budget_and_the_rest_waits(standin: SlackStandIn, slack: Slack) -> None:
    outbox = Outbox(slack)
    outbox.add(digest(UNKNOWN, intent="cycle-1/first", texts=("first",)))
    outbox.add(digest(UNKNOWN, intent="cycle-1/second", texts=("second",)))
    standin.fail("slow", method="chat.postMessage", delay=2)
    [first] = outbox.flush(budget_seconds=1)
    assert first.digest.intent == "cycle-1/first" and first.delivery is not None
    assert outbox.pending == 1 and [m.text for m in standin.messages(ADMINS)] == ["first"]
    [second] = outbox.flush(budget_seconds=1)
    assert second.digest.intent == "cycle-1/second" and second.delivery is not None
    assert outbox.pending == 0


def test_a_digest_needs_a_message() -> None:
    with pytest.raises(ValueError, match="no messages"):
        Digest(UNKNOWN, (notice(UNKNOWN),), "cycle-1/x", ())


def test_a_digest_the_admins_already_heard_about_never_falls_back_to_them(
        standin: SlackStandIn, slack: Slack) -> None:
    result = slack.send(replace(digest(NOBODY), admin_fallback=False))
    assert result.delivery is None and "users_not_found" in result.error
    assert standin.messages(ADMINS) == []
    assert slack.send(digest(NOBODY)).delivery == Delivery(ADMINS, standin.messages(ADMINS)[0].ts, to_admins=True)
