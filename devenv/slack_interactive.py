"""The interactive half of the Slack stand-in: Socket Mode's WebSocket and signed HTTP requests.

A researcher's click on a button of the janitor's message reaches the janitor one of two ways, and
the stand-in plays Slack's side of both, so the janitor's real receivers (slack_sdk's Socket Mode
client, its signature verifier) run unchanged:

- Socket Mode: `apps.connections.open` with an app-level token (`xapp-...`) answers a `ws://` URL;
  the server here says `hello`, pushes each click as an `interactive` envelope and records the
  client's acknowledgement of its `envelope_id`.
- HTTP: the click is POSTed to the janitor's endpoint as Slack does (`payload=<json>`, form
  encoded) with `X-Slack-Request-Timestamp` and `X-Slack-Signature` (v0, HMAC-SHA256 of
  `v0:<timestamp>:<body>` under the signing secret); tests may sign with a wrong secret, send an
  old timestamp, or send a request again byte for byte (a replay).

A click is built from a message the stand-in holds, as a user would make it: the button is found by
its action_id (and block), and its value is the one the janitor put there.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

APP_TOKEN = "xapp-sandbox"
SIGNING_SECRET = "sandbox-signing-secret"
APP_ID = "A0JANITOR"
TEAM = {"id": "T0SANDBOX", "domain": "sandbox"}


class NoButton(ValueError):
    """The message has no such button (or no such message)."""


class NotConnected(RuntimeError):
    """No Socket Mode client is connected to deliver to."""


def find_button(blocks: list[Any] | None, action_id: str, block_id: str | None = None) -> tuple[str, dict[str, Any]]:
    """(block_id, element) of the button a user would press."""
    for block in blocks or []:
        if block.get("type") != "actions" or (block_id is not None and block.get("block_id") != block_id):
            continue
        for element in block.get("elements", []):
            if element.get("action_id") == action_id:
                return str(block.get("block_id", "")), element
    raise NoButton(f"no button {action_id!r}" + (f" in block {block_id!r}" if block_id else ""))


def block_actions(user: Mapping[str, str], channel: str, message: Mapping[str, Any], action_id: str,
                  block_id: str | None = None, response_url: str = "") -> dict[str, Any]:
    """The payload Slack sends when `user` presses the button `action_id` on `message`."""
    found_block, button = find_button(message.get("blocks"), action_id, block_id)
    now = f"{time.time():.6f}"
    return {
        "type": "block_actions", "api_app_id": APP_ID, "token": "verification-token-unused", "team": TEAM,
        "user": {"id": user["id"], "username": user.get("name", ""), "name": user.get("name", ""),
                 "team_id": TEAM["id"]},
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel, "is_ephemeral": False},
        "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:8]}",
        "channel": {"id": channel, "name": channel},
        "message": dict(message),
        "response_url": response_url,
        "actions": [{"type": "button", "action_id": action_id, "block_id": found_block,
                     "text": button.get("text", {}), "value": button.get("value", ""), "action_ts": now}],
    }


@dataclass(frozen=True)
class SignedRequest:
    """One HTTP request as Slack signs it; kept so a test can send it again unchanged."""

    body: bytes
    headers: dict[str, str]


def sign(payload: Mapping[str, Any], secret: str, timestamp: int | None = None) -> SignedRequest:
    body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
    at = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + at.encode() + b":" + body, hashlib.sha256).hexdigest()
    return SignedRequest(body, {"Content-Type": "application/x-www-form-urlencoded",
                                "X-Slack-Request-Timestamp": at, "X-Slack-Signature": f"v0={digest}"})


def post(url: str, request: SignedRequest, timeout: float = 10.0) -> tuple[int, str]:
    req = urllib.request.Request(url, data=request.body, headers=request.headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


class SocketModeServer:
    """Slack's end of Socket Mode: hands out URLs, says hello, pushes envelopes, records acks."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
        self._lock = threading.Condition()
        self._connections: list[ServerConnection] = []
        self._acks: dict[str, dict[str, Any]] = {}
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> SocketModeServer:
        self._server = serve(self._serve, self._host, 0)
        self._thread = threading.Thread(target=self._server.serve_forever, name="slack-socket-mode", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def port(self) -> int:
        assert self._server is not None, "Socket Mode server is not running"
        return int(self._server.socket.getsockname()[1])

    def url(self) -> str:
        """What apps.connections.open answers: a fresh ticket each time, as Slack's are."""
        return f"ws://{self._host}:{self.port}/link/?ticket={uuid.uuid4()}&app_id={APP_ID}"

    def connected(self) -> int:
        with self._lock:
            return len(self._connections)

    def deliver(self, payload: Mapping[str, Any], *, kind: str = "interactive", timeout: float = 10.0) -> str:
        """Push one envelope to a connected client; its envelope_id (acked or not, see `acked`)."""
        envelope_id = str(uuid.uuid4())
        envelope = {"envelope_id": envelope_id, "type": kind, "accepts_response_payload": False,
                    "retry_attempt": 0, "retry_reason": "", "payload": dict(payload)}
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._connections:
                if not self._lock.wait(max(0.0, deadline - time.monotonic())):
                    raise NotConnected("no Socket Mode client connected")
            connection = self._connections[-1]
        connection.send(json.dumps(envelope))
        return envelope_id

    def acked(self, envelope_id: str, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while envelope_id not in self._acks:
                if not self._lock.wait(max(0.0, deadline - time.monotonic())):
                    return False
            return True

    def _serve(self, connection: ServerConnection) -> None:
        connection.send(json.dumps({"type": "hello", "num_connections": 1,
                                    "debug_info": {"host": "standin", "approximate_connection_time": 3600},
                                    "connection_info": {"app_id": APP_ID}}))
        with self._lock:
            self._connections.append(connection)
            self._lock.notify_all()
        try:
            for message in connection:
                try:
                    data = json.loads(message)
                except ValueError:
                    continue
                if isinstance(data, dict) and data.get("envelope_id"):
                    with self._lock:
                        self._acks[str(data["envelope_id"])] = data
                        self._lock.notify_all()
        except ConnectionClosed:
            pass
        finally:
            with self._lock:
                self._connections.remove(connection)
