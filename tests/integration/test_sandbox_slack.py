"""The sandbox's Slack stand-in speaks the Web API as slack_sdk uses it.

Aspects covered:
- a DM to a user found by e-mail is recorded with its text, readable as the user would see it;
- a 429 with Retry-After on demand reaches the client as slack_sdk raises it, and the next call
  goes through.
"""

from __future__ import annotations

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from devenv.slack_standin import SlackStandInControl


def test_post_message_is_recorded(sandbox, slack: SlackStandInControl) -> None:
    slack.add_user("alice@lab.example", "U0ALICE", "alice")
    web = WebClient(token=sandbox.slack_token, base_url=sandbox.slack_api_url)

    user = web.users_lookupByEmail(email="alice@lab.example")["user"]["id"]
    channel = web.conversations_open(users=[user])["channel"]["id"]
    web.chat_postMessage(channel=channel, text="Your notebook demo/notebook has been idle for 2h")

    [message] = slack.messages(channel)
    assert message.text == "Your notebook demo/notebook has been idle for 2h"
    assert [r.method for r in slack.requests()] == ["users.lookupByEmail", "conversations.open", "chat.postMessage"]


def test_rate_limit_on_demand(sandbox, slack: SlackStandInControl) -> None:
    web = WebClient(token=sandbox.slack_token, base_url=sandbox.slack_api_url)
    slack.fail("ratelimited", method="chat.postMessage", retry_after=7)

    with pytest.raises(SlackApiError) as limited:
        web.chat_postMessage(channel="C0ADMINS", text="first")
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] == "7"
    assert limited.value.response["error"] == "ratelimited"

    web.chat_postMessage(channel="C0ADMINS", text="second")
    assert [m.text for m in slack.messages("C0ADMINS")] == ["second"]


def test_admin_channel_by_name(sandbox, slack: SlackStandInControl) -> None:
    web = WebClient(token=sandbox.slack_token, base_url=sandbox.slack_api_url)
    posted = web.chat_postMessage(channel="#gpu-admins", text="3 pods stuck Terminating on gpu-node-1")
    assert posted["channel"] == sandbox.env["SLACK_ADMIN_CHANNEL"]
    with pytest.raises(SlackApiError) as unknown:
        web.chat_postMessage(channel="#no-such-channel", text="lost")
    assert unknown.value.response["error"] == "channel_not_found"
