"""Tests of the Slack Web API stand-in (devenv/slack_standin.py), driven by the real
``slack_sdk.WebClient`` so they prove the stand-in speaks the API the janitor's code will use.

Aspects covered:
- binding: 127.0.0.1 only, ephemeral port, base_url ending in /api/;
- auth.test: the configured token works and is recorded; unknown token gives invalid_auth, no
  token gives not_authed;
- users.lookupByEmail: directory hit (also for users added through the control API) and
  users_not_found as a SlackApiError;
- conversations.open: stable D... id per user set, already_open on reopening, and the
  user_not_found / users_list_not_supplied / channel_not_found errors;
- chat.postMessage: text and blocks recorded (JSON body), visible per channel through the
  control client; ts strictly increasing and unique; channel_not_found and no_text;
- chat.update: edits the stored message in place; unknown ts gives message_not_found;
- message metadata: stored from JSON and form-encoded posts, returned by chat.postMessage;
  a malformed one is invalid_metadata_format;
- conversations.history: newest first, ``oldest`` exclusive, ``limit`` with has_more and a
  next_cursor that continues where the page ended, metadata only with include_all_metadata,
  channel ids only (channel_not_found for a "#name" or an unknown id);
- conversations.list: public channels with their names, paged by cursor;
- unknown methods give unknown_method;
- faults: 429 with Retry-After raised as SlackApiError (status, header, error), scoped to one
  method and used up after count calls; RateLimitErrorRetryHandler waits Retry-After and then
  succeeds; HTTP 500/503 on demand; invalid_auth on demand; bad fault kinds are refused;
  "slow": the message is posted although the reply comes too late for the client, and other
  calls are served while that reply waits (also set through the control API);
- control: reset clears requests, messages and faults and restores the initial directory;
- standalone process: ``python -m devenv.slack_standin --port 0`` prints its base URL, the
  control client works against it exactly as in-process, and SIGTERM/SIGINT stop it cleanly.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import RateLimitErrorRetryHandler

from devenv import slack_standin
from devenv.slack_standin import (
    DEFAULT_TOKEN,
    SlackStandIn,
    SlackStandInControl,
    SlackUser,
)

ROOT = Path(__file__).resolve().parents[2]

ALICE = SlackUser(email="alice@example.org", id="U0ALICE", name="alice")
BOB = SlackUser(email="bob@example.org", id="U0BOB", name="bob")


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    with SlackStandIn(users=[ALICE, BOB]) as server:
        yield server


@pytest.fixture
def client(standin: SlackStandIn) -> WebClient:
    return WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url, timeout=10)


@pytest.fixture
def control(standin: SlackStandIn) -> SlackStandInControl:
    return SlackStandInControl(standin.base_url)


def slack_error(call) -> SlackApiError:  # type: ignore[no-untyped-def]
    with pytest.raises(SlackApiError) as info:
        call()
    return info.value


def test_binds_loopback_on_an_ephemeral_port(standin: SlackStandIn) -> None:
    assert standin.port != 0
    assert standin.base_url == f"http://127.0.0.1:{standin.port}/api/"
    assert standin._server is not None and standin._server.server_address[0] == "127.0.0.1"


def test_auth_test_accepts_the_configured_token_and_records_it(
        client: WebClient, control: SlackStandInControl) -> None:
    resp = client.auth_test()
    assert resp["ok"] is True
    assert resp["user_id"].startswith("U") and resp["team_id"].startswith("T") and resp["bot_id"]
    [req] = control.requests("auth.test")
    assert (req.token, req.http_method, req.status, req.error) == (DEFAULT_TOKEN, "POST", 200, None)
    # No params means no body, labelled as JSON (slack_sdk 3.47) or as a form (3.48): the stand-in takes both.
    assert req.params == {}
    assert req.headers["Content-Type"].startswith(("application/json", "application/x-www-form-urlencoded"))


def test_auth_test_with_an_unknown_token_is_invalid_auth(standin: SlackStandIn) -> None:
    err = slack_error(WebClient(token="xoxb-wrong", base_url=standin.base_url).auth_test)
    assert err.response["error"] == "invalid_auth"
    assert standin.requests()[0].token == "xoxb-wrong"


def test_auth_test_without_a_token_is_not_authed(standin: SlackStandIn) -> None:
    err = slack_error(WebClient(base_url=standin.base_url).auth_test)
    assert err.response["error"] == "not_authed"


def test_lookup_by_email_finds_directory_users(
        client: WebClient, control: SlackStandInControl) -> None:
    assert client.users_lookupByEmail(email=ALICE.email)["user"]["id"] == ALICE.id
    [req] = control.requests("users.lookupByEmail")  # a method with params is form-encoded
    assert req.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert req.params == {"email": ALICE.email}
    control.add_user("carol@example.org", "U0CAROL", "carol")
    user = client.users_lookupByEmail(email="carol@example.org")["user"]
    assert (user["id"], user["name"], user["profile"]["email"]) == (
        "U0CAROL", "carol", "carol@example.org")


def test_lookup_by_email_of_an_unknown_address_is_users_not_found(client: WebClient) -> None:
    err = slack_error(lambda: client.users_lookupByEmail(email="nobody@example.org"))
    assert err.response["error"] == "users_not_found"
    assert err.response.status_code == 200


def test_conversations_open_gives_a_stable_dm_id_per_user_set(client: WebClient) -> None:
    first = client.conversations_open(users=ALICE.id)
    again = client.conversations_open(users=[ALICE.id])
    other = client.conversations_open(users=BOB.id)
    dm = first["channel"]["id"]
    assert dm.startswith("D") and again["channel"]["id"] == dm
    assert "already_open" not in first.data and again["already_open"] is True
    assert other["channel"]["id"] != dm
    assert client.conversations_open(channel=dm)["channel"]["id"] == dm


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"users": "U0NOBODY"}, "user_not_found"),
    ({"users": f"{ALICE.id},U0NOBODY"}, "user_not_found"),
    ({}, "users_list_not_supplied"),
    ({"channel": "D0NEVEROPENED"}, "channel_not_found"),
])
def test_conversations_open_errors(client: WebClient, kwargs: dict, error: str) -> None:
    # api_call, because conversations_open() itself refuses to send without users or channel
    call = lambda: client.api_call("conversations.open", params=kwargs)  # noqa: E731
    assert slack_error(call).response["error"] == error


def test_post_message_is_recorded_and_visible_through_the_control_client(
        client: WebClient, control: SlackStandInControl) -> None:
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*idle* GPU pod"}}]
    resp = client.chat_postMessage(channel=dm, text="Your pod is idle", blocks=blocks)
    assert resp["channel"] == dm and resp["message"]["text"] == "Your pod is idle"
    assert resp["message"]["ts"] == resp["ts"]
    [msg] = control.messages(dm)
    assert (msg.ts, msg.text, msg.blocks, msg.edited_ts) == (resp["ts"], "Your pod is idle",
                                                             blocks, None)
    [req] = control.requests("chat.postMessage")
    assert req.params == {"channel": dm, "text": "Your pod is idle", "blocks": blocks}
    assert req.headers["Content-Type"].startswith("application/json")
    assert control.messages("D0OTHER") == []


def test_post_message_to_a_user_id_lands_in_the_dm(
        client: WebClient, control: SlackStandInControl) -> None:
    resp = client.chat_postMessage(channel=BOB.id, text="hello")
    dm = client.conversations_open(users=BOB.id)["channel"]["id"]
    assert resp["channel"] == dm and [m.text for m in control.messages(dm)] == ["hello"]


def test_post_message_errors(client: WebClient, control: SlackStandInControl) -> None:
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    err = slack_error(lambda: client.chat_postMessage(channel="C0NOWHERE", text="x"))
    assert err.response["error"] == "channel_not_found"
    no_text = lambda: client.api_call("chat.postMessage", json={"channel": dm})  # noqa: E731
    assert slack_error(no_text).response["error"] == "no_text"
    assert control.messages(dm) == []


def test_ts_are_strictly_increasing_and_unique_even_if_the_clock_stalls(
        client: WebClient, control: SlackStandInControl, monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = SimpleNamespace(time=time.time, time_ns=lambda: 1_700_000_000_000_000_000)
    monkeypatch.setattr(slack_standin, "time", frozen)
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    stamps = [client.chat_postMessage(channel=dm, text=str(i))["ts"] for i in range(25)]
    values = [Decimal(ts) for ts in stamps]
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    assert [m.ts for m in control.messages(dm)] == stamps


def test_chat_update_edits_the_message_in_place(
        standin: SlackStandIn, client: WebClient, control: SlackStandInControl) -> None:
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    blocks = [{"type": "section", "text": {"type": "plain_text", "text": "warning"}}]
    posted = client.chat_postMessage(channel=dm, text="will delete in 1h", blocks=blocks)
    [before] = standin.messages(dm)
    updated = client.chat_update(channel=dm, ts=posted["ts"], text="deleted")
    assert (updated["ts"], updated["text"]) == (posted["ts"], "deleted")
    [msg] = control.messages(dm)
    assert (msg.ts, msg.text, msg.blocks) == (posted["ts"], "deleted", blocks)
    assert before.text == "will delete in 1h"  # what was read earlier is a snapshot
    assert msg.edited_ts is not None and Decimal(msg.edited_ts) > Decimal(msg.ts)


def test_chat_update_of_an_unknown_ts_is_message_not_found(client: WebClient) -> None:
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    client.chat_postMessage(channel=dm, text="x")
    err = slack_error(lambda: client.chat_update(channel=dm, ts="1.000001", text="y"))
    assert err.response["error"] == "message_not_found"


METADATA = {"event_type": "janitor_notice", "event_payload": {"intent": "c1/alice", "uids": ["u1"]}}


def test_post_message_stores_metadata_as_json_or_form_field(
        standin: SlackStandIn, client: WebClient) -> None:
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    posted = client.chat_postMessage(channel=dm, text="json", metadata=METADATA)
    assert posted["message"]["metadata"] == METADATA
    client.api_call("chat.postMessage", data={"channel": dm, "text": "form",
                                              "metadata": json.dumps(METADATA)})
    assert [m.metadata for m in standin.messages(dm)] == [METADATA, METADATA]
    bad = lambda: client.chat_postMessage(channel=dm, text="x", metadata={"event_type": "x"})  # noqa: E731
    assert slack_error(bad).response["error"] == "invalid_metadata_format"


def test_conversations_history_pages_newest_first(client: WebClient) -> None:
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    stamps = [client.chat_postMessage(channel=dm, text=str(i), metadata=METADATA)["ts"]
              for i in range(5)]
    everything = client.conversations_history(channel=dm)
    assert [m["ts"] for m in everything["messages"]] == stamps[::-1]
    assert everything["has_more"] is False and "metadata" not in everything["messages"][0]
    first = client.conversations_history(channel=dm, oldest=stamps[0], limit=2,
                                         include_all_metadata=True)
    assert [m["text"] for m in first["messages"]] == ["4", "3"] and first["has_more"] is True
    assert first["messages"][0]["metadata"] == METADATA
    rest = client.conversations_history(channel=dm, oldest=stamps[0], limit=2,
                                        cursor=first["response_metadata"]["next_cursor"])
    assert [m["text"] for m in rest["messages"]] == ["2", "1"]  # oldest is exclusive: no "0"
    assert rest["has_more"] is False and not rest.get("response_metadata")


def test_conversations_history_takes_channel_ids_only(standin: SlackStandIn,
                                                      client: WebClient) -> None:
    standin.add_channel("C0TEAMML", "team-ml")
    client.chat_postMessage(channel="#team-ml", text="hello team")
    [msg] = client.conversations_history(channel="C0TEAMML")["messages"]
    assert msg["text"] == "hello team" and msg["bot_id"]
    for channel in ("#team-ml", "C0NOWHERE"):
        call = lambda channel=channel: client.conversations_history(channel=channel)  # noqa: E731
        assert slack_error(call).response["error"] == "channel_not_found"


def test_conversations_list_names_the_public_channels(standin: SlackStandIn,
                                                      client: WebClient) -> None:
    for n in range(3):
        standin.add_channel(f"C0CHAN{n}", f"chan-{n}")
    first = client.conversations_list(limit=2)
    rest = client.conversations_list(limit=2, cursor=first["response_metadata"]["next_cursor"])
    found = {c["id"]: c["name"] for c in first["channels"] + rest["channels"]}
    assert found == {"C0CHAN0": "chan-0", "C0CHAN1": "chan-1", "C0CHAN2": "chan-2"}
    assert rest["response_metadata"]["next_cursor"] == ""


def test_a_slow_reply_comes_after_the_message_is_posted(
        standin: SlackStandIn, control: SlackStandInControl) -> None:
    hasty = WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url, timeout=0.5)  # type: ignore[arg-type]
    dm = hasty.conversations_open(users=ALICE.id)["channel"]["id"]
    control.fail("slow", method="chat.postMessage", delay=1.5)
    with pytest.raises(TimeoutError):
        hasty.chat_postMessage(channel=dm, text="did it go out?")
    assert [m.text for m in standin.messages(dm)] == ["did it go out?"]
    [req] = standin.requests("chat.postMessage")
    assert (req.status, req.error) == (200, None)


def test_calls_are_served_while_a_slow_reply_waits(standin: SlackStandIn,
                                                   client: WebClient) -> None:
    standin.fail("slow", method="chat.postMessage", delay=2)
    replies: list[str] = []
    slow = threading.Thread(target=lambda: replies.append(
        client.chat_postMessage(channel=ALICE.id, text="slow")["ts"]), daemon=True)
    slow.start()
    while not standin.requests("chat.postMessage"):  # the pytest timeout bounds this wait
        time.sleep(0.01)
    assert client.auth_test()["ok"] and replies == []  # served while the slow reply waits
    slow.join(timeout=10)
    assert replies == [m.ts for m in standin.messages(client.conversations_open(
        users=ALICE.id)["channel"]["id"])]


def test_unknown_method(client: WebClient, control: SlackStandInControl) -> None:
    assert slack_error(lambda: client.api_call("chat.teleport")).response["error"] == \
        "unknown_method"
    assert control.requests()[0].method == "chat.teleport"


def test_ratelimited_fault_answers_429_with_retry_after(
        client: WebClient, control: SlackStandInControl) -> None:
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    control.fail("ratelimited", method="chat.postMessage", retry_after=1)
    assert client.auth_test()["ok"]  # another method is not affected
    err = slack_error(lambda: client.chat_postMessage(channel=dm, text="x"))
    assert err.response.status_code == 429
    assert err.response.headers["Retry-After"] == "1"
    assert err.response["error"] == "ratelimited"
    assert client.chat_postMessage(channel=dm, text="x")["ok"]  # count=1 is used up
    assert [r.status for r in control.requests("chat.postMessage")] == [429, 200]
    assert len(control.messages(dm)) == 1


def test_rate_limit_retry_handler_waits_retry_after_then_succeeds(
        standin: SlackStandIn, control: SlackStandInControl) -> None:
    client = WebClient(token=DEFAULT_TOKEN, base_url=standin.base_url,
                       retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=1)])
    control.fail("ratelimited", method="auth.test", retry_after=1)
    started = time.monotonic()
    assert client.auth_test()["ok"] is True
    assert time.monotonic() - started >= 1.0
    calls = control.requests("auth.test")
    assert [r.status for r in calls] == [429, 200]
    assert calls[1].at - calls[0].at >= 1.0


@pytest.mark.parametrize("status", [500, 503])
def test_server_error_on_demand(client: WebClient, control: SlackStandInControl,
                                status: int) -> None:
    control.fail("server_error", count=2, status=status)
    for _ in range(2):
        assert slack_error(client.auth_test).response.status_code == status
    assert client.auth_test()["ok"] is True


def test_invalid_auth_on_demand(client: WebClient, control: SlackStandInControl) -> None:
    control.fail("invalid_auth", method="users.lookupByEmail")
    err = slack_error(lambda: client.users_lookupByEmail(email=ALICE.email))
    assert (err.response.status_code, err.response["error"]) == (200, "invalid_auth")
    assert client.users_lookupByEmail(email=ALICE.email)["user"]["id"] == ALICE.id


def test_fail_refuses_unknown_kinds(standin: SlackStandIn, control: SlackStandInControl) -> None:
    with pytest.raises(ValueError, match="400"):
        control.fail("meteor_strike")
    with pytest.raises(ValueError):
        standin.fail("ratelimited", count=0)
    with pytest.raises(ValueError):
        standin.fail("slow", delay=-1)


def test_reset_clears_requests_messages_faults_and_added_users(
        client: WebClient, control: SlackStandInControl) -> None:
    dm = client.conversations_open(users=ALICE.id)["channel"]["id"]
    client.chat_postMessage(channel=dm, text="x")
    control.add_user("carol@example.org", "U0CAROL", "carol")
    control.fail("server_error", count=5)
    control.reset()
    assert control.requests() == [] and control.messages(dm) == []
    assert client.users_lookupByEmail(email=ALICE.email)["ok"]  # no fault left; directory kept
    err = slack_error(lambda: client.users_lookupByEmail(email="carol@example.org"))
    assert err.response["error"] == "users_not_found"


def test_control_paths_do_not_reach_slack_methods(standin: SlackStandIn) -> None:
    root = f"http://127.0.0.1:{standin.port}"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{root}/_standin/nothing", timeout=5)
    assert info.value.code == 404
    with urllib.request.urlopen(urllib.request.Request(
            f"{root}/api/_standin/reset", data=b"", method="POST"), timeout=5) as resp:
        assert json.loads(resp.read()) == {"ok": False, "error": "unknown_method"}


def start_subprocess() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "devenv.slack_standin", "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    base_url = proc.stdout.readline().strip()  # the pytest timeout bounds this read
    return proc, base_url


@pytest.fixture
def subprocess_standin() -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc, base_url = start_subprocess()
    try:
        yield proc, base_url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.mark.timeout(60)
def test_control_api_against_a_standin_in_another_process(
        subprocess_standin: tuple[subprocess.Popen[str], str]) -> None:
    proc, base_url = subprocess_standin
    parts = urlsplit(base_url)
    assert (parts.hostname, parts.path) == ("127.0.0.1", "/api/") and (parts.port or 0) > 0
    control = SlackStandInControl(base_url)
    client = WebClient(token=DEFAULT_TOKEN, base_url=base_url, timeout=10)
    control.add_user(ALICE.email, ALICE.id, ALICE.name)
    user_id = client.users_lookupByEmail(email=ALICE.email)["user"]["id"]
    dm = client.conversations_open(users=user_id)["channel"]["id"]
    ts = client.chat_postMessage(channel=dm, text="idle GPU")["ts"]
    assert [(m.ts, m.text) for m in control.messages(dm)] == [(ts, "idle GPU")]
    assert [r.method for r in control.requests()] == [
        "users.lookupByEmail", "conversations.open", "chat.postMessage"]
    assert len(control.requests("conversations.open")) == 1
    control.fail("ratelimited", retry_after=1)
    err = slack_error(client.auth_test)
    assert (err.response.status_code, err.response.headers["Retry-After"]) == (429, "1")
    control.reset()
    assert control.requests() == [] and control.messages(dm) == []
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


@pytest.mark.timeout(60)
def test_standalone_process_stops_cleanly_on_sigint(
        subprocess_standin: tuple[subprocess.Popen[str], str]) -> None:
    proc, base_url = subprocess_standin
    assert WebClient(token=DEFAULT_TOKEN, base_url=base_url).auth_test()["ok"]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0
