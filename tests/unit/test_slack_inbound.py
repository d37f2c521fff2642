"""The signed HTTP endpoint for Slack's clicks, over real HTTP with Slack's own signing scheme.

Aspects covered:
- a request signed with the signing secret, within five minutes, reaches the handler once (200);
- a wrong secret, a stale timestamp, a missing signature: 401, never handled, counted as forged;
- the same request sent again: answered 200 (Slack retries) but not handled, counted as replayed;
- another path is 404; the handler runs off the request thread, so a slow one never delays the answer;
- a connection that sends nothing, or half a request, is closed after the read timeout, so idle
  connections cannot hold the receiver's threads.
"""

from __future__ import annotations

import socket
import threading
import time

from devenv import slack_interactive as slack
from janitor.act.slack_inbound import PATH, HttpReceiver

SECRET = "s3cret"
PAYLOAD = {"type": "block_actions", "actions": [{"action_id": "janitor.why", "value": "{}"}]}


class Seen:
    def __init__(self, delay: float = 0.0) -> None:
        self.payloads: list[dict] = []
        self.refused: list[str] = []
        self.handled = threading.Event()
        self.delay = delay

    def handle(self, payload) -> None:
        time.sleep(self.delay)
        self.payloads.append(dict(payload))
        self.handled.set()


def receiver(seen: Seen, **kwargs) -> HttpReceiver:
    r = HttpReceiver(SECRET, seen.handle, seen.refused.append, port=0, host="127.0.0.1", **kwargs)
    r.start()
    return r


def test_a_signed_click_is_handled_once_and_a_replay_is_dropped() -> None:
    seen = Seen()
    r = receiver(seen)
    url = f"http://127.0.0.1:{r.port}{PATH}"
    try:
        request = slack.sign(PAYLOAD, SECRET)
        assert slack.post(url, request)[0] == 200
        assert seen.handled.wait(5) and seen.payloads == [PAYLOAD]
        assert slack.post(url, request)[0] == 200  # a replay, byte for byte
        time.sleep(0.3)
        assert seen.payloads == [PAYLOAD] and seen.refused == ["replayed"]
    finally:
        r.stop()


def test_forged_and_stale_requests_are_refused_and_never_handled() -> None:
    seen = Seen()
    r = receiver(seen)
    url = f"http://127.0.0.1:{r.port}{PATH}"
    try:
        assert slack.post(url, slack.sign(PAYLOAD, "not-the-secret"))[0] == 401
        assert slack.post(url, slack.sign(PAYLOAD, SECRET, int(time.time()) - 301))[0] == 401
        unsigned = slack.SignedRequest(slack.sign(PAYLOAD, SECRET).body, {"Content-Type": "application/x-www-form-"
                                                                                          "urlencoded"})
        assert slack.post(url, unsigned)[0] == 401
        assert slack.post(f"http://127.0.0.1:{r.port}/other", slack.sign(PAYLOAD, SECRET))[0] == 404
        time.sleep(0.3)
        assert seen.payloads == [] and seen.refused == ["forged"] * 3
    finally:
        r.stop()


def test_slack_is_answered_before_a_slow_click_is_done() -> None:
    seen = Seen(delay=2.0)
    r = receiver(seen)
    try:
        assert slack.post(f"http://127.0.0.1:{r.port}{PATH}", slack.sign(PAYLOAD, SECRET))[0] == 200
        assert not seen.handled.is_set()  # still working when the answer came
        assert seen.handled.wait(5)
    finally:
        r.stop()


def test_idle_and_half_sent_connections_are_closed_after_the_read_timeout() -> None:
    r = receiver(Seen(), read_timeout=0.5)
    try:
        idle = socket.create_connection(("127.0.0.1", r.port), timeout=5)
        half = socket.create_connection(("127.0.0.1", r.port), timeout=5)
        half.sendall(b"POST " + PATH.encode() + b" HTTP/1.1\r\nContent-Length: 100\r\n\r\npartial")
        for conn in (idle, half):
            started = time.monotonic()
            assert conn.recv(1024) == b""  # closed by the receiver, not by this test's own timeout
            assert time.monotonic() - started < 3
            conn.close()
        # and the receiver still answers the next click
        assert slack.post(f"http://127.0.0.1:{r.port}{PATH}", slack.sign(PAYLOAD, SECRET))[0] == 200
    finally:
        r.stop()
