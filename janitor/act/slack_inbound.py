"""Clicks coming in from Slack: over Socket Mode (default) or a signed HTTP endpoint.

Socket Mode is an outbound WebSocket opened with an app-level token (slack_sdk's own client), so a
cluster needs no public ingress for researchers' buttons to work. The HTTP endpoint is for
workspaces that prefer Slack's request URLs: every request must carry Slack's signature over its
body and a timestamp within five minutes (slack_sdk's `SignatureVerifier`), and a signature seen
before is a replay and is ignored. Either way Slack is answered at once and the click handled on a
worker thread: Slack gives an app three seconds, and a click reads and writes the cluster.
Nothing here decides: each payload goes to the handler given (janitor/clicks.py), and each refused
request to `refused`, so it is counted and logged.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

import slack_sdk
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.builtin.client import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

logger = logging.getLogger(__name__)

Handler = Callable[[Mapping[str, Any]], None]
Refused = Callable[[str], None]  # "forged" or "replayed"
PATH = "/slack/actions"
MAX_BODY = 1 << 20  # Slack's payloads are a few KB; anything this big is not Slack
REPLAY_WINDOW = 5 * 60  # seconds a signed request stays valid, so how long to remember signatures


class _Worker:
    """Runs handlers off the receiving thread; a failing handler is logged, never fatal."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="slack-click")

    def submit(self, payload: Mapping[str, Any]) -> None:
        self._pool.submit(self._run, payload)

    def _run(self, payload: Mapping[str, Any]) -> None:
        try:
            self._handler(payload)
        except Exception:  # noqa: BLE001 - one bad click must not stop the next
            logger.exception("Slack: a click could not be handled")

    def stop(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class SocketReceiver:
    """Slack's Socket Mode: acknowledges each interactive envelope, then hands its payload on."""

    def __init__(self, app_token: str, handler: Handler, *, base_url: str | None = None, timeout: float = 10.0) -> None:
        web = slack_sdk.WebClient(timeout=timeout,  # type: ignore[arg-type]
                                  **({"base_url": base_url} if base_url else {}))  # type: ignore[arg-type]
        self._client = SocketModeClient(app_token=app_token, web_client=web, auto_reconnect_enabled=True)
        self._client.socket_mode_request_listeners.append(self._on_request)  # type: ignore[arg-type]
        self._worker = _Worker(handler)

    def _on_request(self, client: SocketModeClient, request: SocketModeRequest) -> None:
        client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        if request.type == "interactive":
            self._worker.submit(request.payload)

    def start(self) -> None:
        """Connects in the background: a Slack that cannot be reached now is tried again by the
        client's reconnect loop, and the daemon's cycles go on meanwhile."""
        threading.Thread(target=self._connect, name="slack-socket-connect", daemon=True).start()

    def _connect(self) -> None:
        try:
            self._client.connect()
        except Exception as err:  # noqa: BLE001 - slack_sdk raises plain exceptions here
            logger.error("Slack Socket Mode: cannot connect (%s); buttons do nothing until it can", err)

    def connected(self) -> bool:
        return bool(self._client.is_connected())

    def stop(self) -> None:
        self._client.close()
        self._worker.stop()


class HttpReceiver:
    """Slack's request URL: verifies signature and age, refuses replays, answers 200 at once."""

    def __init__(self, signing_secret: str, handler: Handler, refused: Refused, *, port: int,
                 host: str = "0.0.0.0", clock: Callable[[], float] = time.time, read_timeout: float = 10.0) -> None:
        self._verifier = SignatureVerifier(signing_secret)
        self._worker = _Worker(handler)
        self._refused = refused
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        receiver = self

        class Handler_(BaseHTTPRequestHandler):
            # Each connection holds a thread: one that sends nothing (or half a request) is closed
            # after this many seconds. Slack sends a click whole in well under a second.
            timeout = read_timeout

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path.split("?")[0] != PATH or not 0 < length <= MAX_BODY:
                    self._answer(404 if self.path.split("?")[0] != PATH else 413)
                    return
                self._answer(receiver.receive(self.rfile.read(length), dict(self.headers.items())))

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer((host, port), Handler_)
        self._server.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def receive(self, body: bytes, headers: Mapping[str, str]) -> int:
        """The HTTP status for one request; a genuine click goes to the handler."""
        lower = {k.lower(): v for k, v in headers.items()}
        timestamp, signature = lower.get("x-slack-request-timestamp", ""), lower.get("x-slack-signature", "")
        if not timestamp.isdigit() or not signature or not self._verifier.is_valid(body, timestamp, signature):
            self._refused("forged")
            return 401
        with self._lock:
            now = self._clock()
            while self._seen and next(iter(self._seen.values())) < now - 2 * REPLAY_WINDOW:
                self._seen.popitem(last=False)
            if signature in self._seen:
                replayed = True
            else:
                replayed = False
                self._seen[signature] = now
        if replayed:
            self._refused("replayed")
            return 200  # Slack retries what it thinks failed; a replay is answered and dropped
        try:
            payload = json.loads(dict(parse_qsl(body.decode())).get("payload", ""))
        except ValueError:
            return 400
        if isinstance(payload, dict):
            self._worker.submit(payload)
        return 200

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, name="slack-http", daemon=True,
                         kwargs={"poll_interval": 0.2}).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._worker.stop()
