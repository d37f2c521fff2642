"""A local stand-in for the Slack Web API, for the sandbox and the tests.

Slack is the one external service the janitor cannot run locally, so rather than mock our own
wrapper we stand in for Slack: an HTTP server speaking the Web API as
``slack_sdk.WebClient(token=..., base_url=standin.base_url)`` uses it, so the janitor's real
Slack code and slack_sdk's retry handlers run unchanged. It serves only the methods the janitor
calls, with Slack's documented response shapes and error codes; records every call and what a
user would see, message metadata included (conversations.history returns it when asked, which is
how the janitor recognises its own earlier sends after a crash); injects faults on demand: 429 +
Retry-After, 500/503, invalid_auth, and "slow", which serves the call but answers it late, so a
client can time out or be killed after Slack accepted a message and before it learned so. The control
API under ``/_standin/`` (no Slack method can live there) lets ``SlackStandInControl`` do the same
from another process, as the sandbox runs it: ``python -m devenv.slack_standin --port 0``.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from devenv import slack_interactive as interactive

DEFAULT_TOKEN = "xoxb-sandbox"
HOST = "127.0.0.1"  # never reachable from outside the machine
CONTROL_PREFIX = "/_standin/"
FAULT_KINDS = ("ratelimited", "server_error", "invalid_auth", "slow")
HISTORY_LIMIT_MAX = 999  # conversations.history's documented maximum page size
BOT_USER_ID, BOT_ID = "U0JANITOR", "B0JANITOR"
# Who the bot token belongs to, as auth.test reports it.
BOT_IDENTITY: dict[str, Any] = {
    "url": "https://sandbox.slack.com/", "team": "Sandbox", "user": "janitor",
    "team_id": "T0SANDBOX", "user_id": BOT_USER_ID, "bot_id": BOT_ID,
    "is_enterprise_install": False}


@dataclass(frozen=True)
class SlackUser:
    """A directory entry: what users.lookupByEmail finds and conversations.open accepts."""
    email: str
    id: str
    name: str


@dataclass
class RecordedRequest:
    """One Web API call as the stand-in saw it, and what it answered (status, error code)."""
    method: str
    params: dict[str, Any]
    token: str | None
    headers: dict[str, str]
    http_method: str
    at: float
    status: int
    error: str | None


@dataclass
class PostedMessage:
    """A message as a user would see it now: chat.update edits it in place, as Slack does."""
    channel: str
    ts: str
    text: str
    blocks: list[Any] | None = None
    thread_ts: str | None = None
    user: str = BOT_USER_ID
    edited_ts: str | None = None
    metadata: dict[str, Any] | None = None  # {"event_type": ..., "event_payload": {...}}


@dataclass
class Fault:
    """A fault to answer the next ``count`` calls (of ``method``, or of any method) with.

    A "slow" fault is the one that still serves the call: only the reply waits ``delay`` seconds."""
    kind: str
    count: int = 1
    method: str | None = None
    retry_after: int = 1
    status: int = 500
    delay: float = 5.0


class SlackError(Exception):
    """Raised by a method handler to answer ``{"ok": false, "error": args[0]}``, HTTP 200."""


def _error(code: str) -> dict[str, Any]:
    return {"ok": False, "error": code}


def _flag(value: Any) -> bool:
    """Slack booleans: true/false, or "1"/"0" and "true"/"false" in forms and query strings."""
    return value is True or str(value).strip().lower() in ("1", "true")


def _ts_key(ts: Any, error: str) -> Decimal:
    """ts compare as numbers ("10.000001" > "9.999999"); a malformed one is Slack's ``error``."""
    try:
        value = Decimal(str(ts))
    except ArithmeticError:
        raise SlackError(error) from None
    if not value.is_finite():
        raise SlackError(error)
    return value


def _json_field(value: Any) -> Any:
    """Form-encoded calls send blocks as a JSON string; JSON calls send the list itself."""
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


class SlackStandIn:
    """The stand-in server and its state; thread-safe, usable as a context manager."""

    def __init__(self, port: int = 0, tokens: Iterable[str] = (DEFAULT_TOKEN,),
                 users: Iterable[SlackUser] = (),
                 channels: Mapping[str, str] | None = None) -> None:
        self._requested_port = port
        self._tokens = set(tokens)
        self._initial_users = list(users)
        # Public channels the bot is a member of, id -> name (admin reports go to one).
        self._initial_channels = dict(channels or {})
        self._lock = threading.RLock()
        self._last_ts_us = 0  # survives reset() so ts stay unique for the server's lifetime
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "auth.test": lambda params: dict(BOT_IDENTITY),
            "users.lookupByEmail": self._users_lookup_by_email,
            "conversations.open": self._conversations_open,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "conversations.history": self._conversations_history,
            "conversations.list": self._conversations_list,
            "apps.connections.open": lambda params: {"url": self._socket.url()},
            "chat.postEphemeral": self._chat_post_ephemeral,
            "users.info": self._users_info,
            "conversations.members": self._conversations_members,
        }
        self._socket = interactive.SocketModeServer(HOST)
        self._signed: dict[str, interactive.SignedRequest] = {}  # the last request per URL, to replay
        self.reset()

    # ----- lifecycle -------------------------------------------------------------------
    def start(self) -> SlackStandIn:
        server = ThreadingHTTPServer((HOST, self._requested_port), _Handler)
        server.daemon_threads = True
        server.standin = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="slack-standin",
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        self._socket.start()
        return self

    def stop(self) -> None:
        self._socket.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SlackStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "stand-in is not running"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as ``WebClient(base_url=...)``: Slack's is https://slack.com/api/."""
        return f"http://{HOST}:{self.port}/api/"

    # ----- test/sandbox controls (mirrored by SlackStandInControl) ---------------------
    def reset(self) -> None:
        """Back to the state at construction: no requests, messages, DMs or pending faults."""
        with self._lock:
            self._requests: list[RecordedRequest] = []
            self._messages: dict[str, list[PostedMessage]] = {}
            self._faults: list[Fault] = []
            self._dms: dict[str, tuple[str, ...]] = {}
            self._users: dict[str, SlackUser] = {u.email.lower(): u for u in self._initial_users}
            self._channels: dict[str, str] = dict(self._initial_channels)
            self._members: dict[str, list[str]] = {}  # channel id -> its members' user ids
            self._ephemeral: list[PostedMessage] = []  # `user` is who sees it

    def requests(self, method: str | None = None) -> list[RecordedRequest]:
        """Every Web API call so far (faulted ones too), oldest first; optionally of one method.

        Copies, like the control client's: a later chat.update must not change what a test
        already read."""
        with self._lock:
            return copy.deepcopy([r for r in self._requests if method in (None, r.method)])

    def messages(self, channel: str) -> list[PostedMessage]:
        """What a user sees in the channel, oldest first."""
        with self._lock:
            return copy.deepcopy(self._messages.get(channel, []))

    def recover(self) -> None:
        """Drop the pending faults and keep everything else (users, DMs, messages): Slack is back."""
        with self._lock:
            self._faults = []

    def fail(self, kind: str, count: int = 1, method: str | None = None,
             retry_after: int = 1, status: int = 500, delay: float = 5.0) -> None:
        """Answer the next ``count`` matching calls with a fault instead of serving them; or,
        for "slow", serve them and send the answer ``delay`` seconds late."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {FAULT_KINDS}, not {kind!r}")
        if int(count) < 1 or int(retry_after) < 0 or int(status) not in (500, 503) \
                or not 0 <= float(delay) <= 300:
            raise ValueError("count must be >= 1, retry_after >= 0, status 500 or 503, "
                             "delay 0..300 seconds")
        with self._lock:
            self._faults.append(Fault(kind, int(count), method, int(retry_after), int(status),
                                      float(delay)))

    def add_user(self, email: str, user_id: str, name: str) -> None:
        with self._lock:
            self._users[email.lower()] = SlackUser(email, user_id, name)

    def add_channel(self, channel_id: str, name: str, members: Iterable[str] = ()) -> None:
        """A public channel the bot may post to, by id or by `#name` as Slack accepts both."""
        with self._lock:
            self._channels[channel_id] = name.lstrip("#")
            self._members[channel_id] = list(members)

    def _conversations_members(self, params: dict[str, Any]) -> dict[str, Any]:
        """A channel's members, `limit` a page (cursor: base64 of the offset)."""
        channel = str(params.get("channel") or "")
        if channel not in self._channels:
            raise SlackError("channel_not_found")
        try:
            limit = min(max(int(params.get("limit") or 100), 1), 1000)
            start = int(base64.b64decode(str(params.get("cursor") or "")).decode() or 0)
        except ValueError:
            raise SlackError("invalid_cursor") from None
        members = self._members.get(channel, [])
        rest = members[start + limit:]
        cursor = base64.b64encode(str(start + limit).encode()).decode() if rest else ""
        return {"members": members[start:start + limit], "response_metadata": {"next_cursor": cursor}}

    # ----- Web API -----------------------------------------------------------------------
    def handle_api(self, method: str, params: dict[str, Any], token: str | None,
                   headers: dict[str, str], http_method: str) -> tuple[int, dict[str, str], dict]:
        """Serve one Web API call; returns (HTTP status, extra headers, JSON body).

        A "slow" fault's delay is slept here, after the call took effect and outside the lock:
        other calls are served meanwhile, and what the late reply reports is already visible."""
        with self._lock:
            fault = self._take_fault(method)
            if fault is not None and fault.kind != "slow":
                status, extra, body = self._faulted(fault)
            else:
                status, extra, body = self._dispatch(method, params, token)
            self._requests.append(RecordedRequest(method, params, token, headers, http_method,
                                                  time.time(), status, body.get("error")))
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.delay)
        return status, extra, body

    def _take_fault(self, method: str) -> Fault | None:
        fault = next((f for f in self._faults if f.method in (None, method)), None)
        if fault is not None:
            fault.count -= 1
            if fault.count <= 0:
                self._faults.remove(fault)
        return fault

    @staticmethod
    def _faulted(fault: Fault) -> tuple[int, dict[str, str], dict]:
        if fault.kind == "ratelimited":
            return 429, {"Retry-After": str(fault.retry_after)}, _error("ratelimited")
        if fault.kind == "server_error":
            code = "internal_error" if fault.status == 500 else "service_unavailable"
            return fault.status, {}, _error(code)
        return 200, {}, _error("invalid_auth")

    def _dispatch(self, method: str, params: dict[str, Any],
                  token: str | None) -> tuple[int, dict[str, str], dict]:
        handler = self._methods.get(method)
        if handler is None:
            return 200, {}, _error("unknown_method")
        token = token or params.get("token")  # Slack also accepts the token as a parameter
        if not token:
            return 200, {}, _error("not_authed")
        if token not in self._tokens and token != interactive.APP_TOKEN:
            return 200, {}, _error("invalid_auth")
        if (token == interactive.APP_TOKEN) != (method == "apps.connections.open"):
            return 200, {}, _error("not_allowed_token_type")  # app tokens open sockets, bot tokens do the rest
        try:
            return 200, {}, {"ok": True, **handler(params)}
        except SlackError as err:
            return 200, {}, _error(err.args[0])

    def _next_ts(self) -> str:
        """Slack ts are "seconds.micros" strings, unique per channel and increasing."""
        self._last_ts_us = max(time.time_ns() // 1000, self._last_ts_us + 1)
        return f"{self._last_ts_us // 1_000_000}.{self._last_ts_us % 1_000_000:06d}"

    def _users_lookup_by_email(self, params: dict[str, Any]) -> dict[str, Any]:
        email = str(params.get("email") or "")
        if not email:
            raise SlackError("invalid_arguments")
        user = self._users.get(email.lower())
        if user is None:
            raise SlackError("users_not_found")
        return {"user": {"id": user.id, "team_id": BOT_IDENTITY["team_id"], "name": user.name,
                         "deleted": False, "is_bot": False, "real_name": user.name,
                         "profile": {"email": user.email, "real_name": user.name,
                                     "display_name": user.name}}}

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = next((u for u in self._users.values() if u.id == params.get("user")), None)
        if user is None:
            raise SlackError("user_not_found")
        return self._users_lookup_by_email({"email": user.email})

    def _chat_post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(params.get("channel"))
        user = str(params.get("user") or "")
        if user not in {u.id for u in self._users.values()}:
            raise SlackError("user_not_found")
        blocks = _json_field(params.get("blocks"))
        if not (params.get("text") or blocks):
            raise SlackError("no_text")
        msg = PostedMessage(channel, self._next_ts(), str(params.get("text") or ""), blocks,
                            params.get("thread_ts"), user=user)
        self._ephemeral.append(msg)
        return {"message_ts": msg.ts}

    def ephemeral(self, user: str) -> list[PostedMessage]:
        """What only `user` saw (chat.postEphemeral), oldest first."""
        with self._lock:
            return copy.deepcopy([m for m in self._ephemeral if m.user == user])

    def click(self, user_id: str, channel: str, ts: str, action_id: str, *, block_id: str | None = None,
              via: str = "socket", url: str = "", secret: str = interactive.SIGNING_SECRET,
              timestamp: int | None = None) -> dict[str, Any]:
        """`user_id` presses a button of the message `ts`: pushed over Socket Mode (the answer says
        whether the client acknowledged it) or POSTed, signed with `secret`, to `url`."""
        with self._lock:
            msg = next((m for m in self._messages.get(channel, []) if m.ts == ts), None)
            user = next((u for u in self._users.values() if u.id == user_id), None)
            if msg is None:
                raise ValueError(f"no message {ts} in {channel}")
            message = self._message_json(msg, with_metadata=False)
        payload = interactive.block_actions({"id": user_id, "name": user.name if user else user_id}, channel,
                                            message, action_id, block_id)
        if via == "socket":
            envelope = self._socket.deliver(payload)
            return {"envelope_id": envelope, "acked": self._socket.acked(envelope)}
        request = interactive.sign(payload, secret, timestamp)
        with self._lock:
            self._signed[url] = request
        status, body = interactive.post(url, request)
        return {"status": status, "body": body}

    def replay(self, url: str) -> dict[str, Any]:
        """Send the last signed request to `url` again, byte for byte."""
        with self._lock:
            request = self._signed[url]
        status, body = interactive.post(url, request)
        return {"status": status, "body": body}

    def _open_dm(self, users: tuple[str, ...]) -> tuple[str, bool]:
        """A stable id per user set (a hash, so it survives reset and restarts); D... for 1:1
        DMs, G... for multi-person ones, as Slack's ids are."""
        prefix = "D" if len(users) == 1 else "G"
        digest = hashlib.sha1(",".join(sorted(users)).encode()).hexdigest()[:10].upper()
        channel_id = prefix + digest
        already_open = channel_id in self._dms
        self._dms[channel_id] = users
        return channel_id, already_open

    def _conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        users = params.get("users") or ()
        if isinstance(users, str):
            users = [u.strip() for u in users.split(",") if u.strip()]
        users = tuple(users)
        if not users:
            channel = params.get("channel")
            if not channel:
                raise SlackError("users_list_not_supplied")
            if channel not in self._dms:
                raise SlackError("channel_not_found")
            channel_id, already_open = channel, True
        else:
            if len(users) > 8:
                raise SlackError("too_many_users")
            known = {u.id for u in self._users.values()}
            if any(u not in known for u in users):
                raise SlackError("user_not_found")
            channel_id, already_open = self._open_dm(users)
        body: dict[str, Any] = {"channel": {"id": channel_id}}
        if already_open:
            body.update(no_op=True, already_open=True)
        return body

    def _resolve_channel(self, value: Any) -> str:
        """An opened DM, a channel (id or #name), or a user id: Slack then posts into the bot's
        DM with that user."""
        value = str(value or "")
        if value in self._dms or value in self._channels:
            return value
        by_name = {f"#{name}": cid for cid, name in self._channels.items()}
        if value in by_name:
            return by_name[value]
        if value in {u.id for u in self._users.values()}:
            return self._open_dm((value,))[0]
        raise SlackError("channel_not_found")

    @staticmethod
    def _message_json(msg: PostedMessage, with_metadata: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "message", "text": msg.text, "user": msg.user,
                               "bot_id": BOT_ID, "ts": msg.ts}
        fields = ("blocks", "thread_ts") + (("metadata",) if with_metadata else ())
        out.update({k: v for k in fields if (v := getattr(msg, k)) is not None})
        if msg.edited_ts:
            out["edited"] = {"user": msg.user, "ts": msg.edited_ts}
        return out

    def _chat_post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("channel"):
            raise SlackError("channel_not_found")
        channel = self._resolve_channel(params["channel"])
        blocks = _json_field(params.get("blocks"))
        if not (params.get("text") or blocks):
            raise SlackError("no_text")
        metadata = _json_field(params.get("metadata"))
        if metadata is not None and not (isinstance(metadata, dict)
                                         and isinstance(metadata.get("event_type"), str)
                                         and isinstance(metadata.get("event_payload"), dict)):
            raise SlackError("invalid_metadata_format")
        msg = PostedMessage(channel, self._next_ts(), str(params.get("text") or ""), blocks,
                            params.get("thread_ts"), metadata=metadata)
        self._messages.setdefault(channel, []).append(msg)
        return {"channel": channel, "ts": msg.ts, "message": self._message_json(msg)}

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(params.get("channel"))
        ts = str(params.get("ts") or "")
        msg = next((m for m in self._messages.get(channel, []) if m.ts == ts), None)
        if msg is None:
            raise SlackError("message_not_found")
        text, blocks = params.get("text"), _json_field(params.get("blocks"))
        if text is None and blocks is None:
            raise SlackError("no_text")
        if text is not None:
            msg.text = str(text)
        if blocks is not None:  # an omitted field keeps its previous value, as in Slack
            msg.blocks = blocks
        msg.edited_ts = self._next_ts()
        return {"channel": channel, "ts": msg.ts, "text": msg.text,
                "message": self._message_json(msg)}

    def _conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """Newest first, between ``oldest`` and ``latest`` (both exclusive unless ``inclusive``),
        ``limit`` a page, then ``response_metadata.next_cursor``; metadata only when asked."""
        channel = str(params.get("channel") or "")
        if channel not in self._dms and channel not in self._channels:
            raise SlackError("channel_not_found")  # ids only: Slack takes no "#name" here
        try:
            limit = min(max(int(params.get("limit") or 100), 1), HISTORY_LIMIT_MAX)
        except ValueError:
            raise SlackError("invalid_limit") from None
        inclusive = _flag(params.get("inclusive"))
        oldest = _ts_key(params.get("oldest") or 0, "invalid_ts_oldest")
        latest = _ts_key(params["latest"], "invalid_ts_latest") if params.get("latest") else None
        latest_inclusive = inclusive
        if params.get("cursor"):  # Slack's cursors are base64 of "next_ts:<ts>": where to go on
            try:
                where, _, ts = base64.b64decode(str(params["cursor"])).decode().partition(":")
                latest, latest_inclusive = _ts_key(ts, "invalid_cursor"), True
            except ValueError:
                raise SlackError("invalid_cursor") from None
            if where != "next_ts":
                raise SlackError("invalid_cursor")

        def wanted(msg: PostedMessage) -> bool:
            ts = _ts_key(msg.ts, "invalid_ts")
            after = ts >= oldest if inclusive else ts > oldest
            before = latest is None or (ts <= latest if latest_inclusive else ts < latest)
            return after and before

        found = [m for m in reversed(self._messages.get(channel, [])) if wanted(m)]
        page, rest = found[:limit], found[limit:]
        with_metadata = _flag(params.get("include_all_metadata"))
        body: dict[str, Any] = {"messages": [self._message_json(m, with_metadata) for m in page],
                                "has_more": bool(rest), "pin_count": 0}
        if rest:
            next_cursor = base64.b64encode(f"next_ts:{rest[0].ts}".encode()).decode()
            body["response_metadata"] = {"next_cursor": next_cursor}
        return body

    def _conversations_list(self, params: dict[str, Any]) -> dict[str, Any]:
        """The public channels (the only kind the stand-in has), by id, ``limit`` a page; how a
        client finds the id of a "#name" for the methods that take ids only."""
        types = {t.strip() for t in str(params.get("types") or "public_channel").split(",")}
        try:
            limit = min(max(int(params.get("limit") or 100), 1), 1000)
            after = base64.b64decode(str(params.get("cursor") or "")).decode()
        except ValueError:
            raise SlackError("invalid_cursor" if params.get("cursor") else "invalid_limit") from None
        ids = sorted(self._channels) if "public_channel" in types else []
        found = [cid for cid in ids if not after or cid >= after.partition(":")[2]]
        page, rest = found[:limit], found[limit:]
        channels = [{"id": cid, "name": self._channels[cid], "is_channel": True,
                     "is_private": False, "is_archived": False, "is_member": True}
                    for cid in page]
        cursor = base64.b64encode(f"channel:{rest[0]}".encode()).decode() if rest else ""
        return {"channels": channels, "response_metadata": {"next_cursor": cursor}}

    # ----- control API -------------------------------------------------------------------
    def handle_control(self, verb: str, action: str, query: dict[str, str],
                       body: dict[str, Any]) -> tuple[int, Any]:
        """Serve ``/_standin/<action>``: the HTTP face of the controls above."""
        try:
            if verb == "GET" and action == "requests":
                return 200, {"requests": [asdict(r) for r in self.requests(query.get("method"))]}
            if verb == "GET" and action == "messages":
                found = self.messages(query.get("channel", ""))
                return 200, {"messages": [asdict(m) for m in found]}
            if verb == "GET" and action == "ephemeral":
                return 200, {"messages": [asdict(m) for m in self.ephemeral(query.get("user", ""))]}
            if verb == "POST" and action == "click":
                return 200, {"ok": True, **self.click(
                    body["user"], body["channel"], body["ts"], body["action_id"], block_id=body.get("block_id"),
                    via=body.get("via", "socket"), url=body.get("url", ""),
                    secret=body.get("secret", interactive.SIGNING_SECRET), timestamp=body.get("timestamp"))}
            if verb == "POST" and action == "replay":
                return 200, {"ok": True, **self.replay(body["url"])}
            if verb == "POST" and action == "reset":
                self.reset()
            elif verb == "POST" and action == "recover":
                self.recover()
            elif verb == "POST" and action == "fail":
                self.fail(str(body.get("kind")), body.get("count", 1), body.get("method"),
                          body.get("retry_after", 1), body.get("status", 500),
                          body.get("delay", 5.0))
            elif verb == "POST" and action == "users":
                self.add_user(body["email"], body["id"], body["name"])
            elif verb == "POST" and action == "channels":
                self.add_channel(body["id"], body["name"], body.get("members") or ())
            else:
                return 404, _error(f"no control {verb} {action}")
        except (KeyError, TypeError, ValueError) as err:
            return 400, _error(f"bad request: {err!r}")
        except interactive.NotConnected as err:
            return 409, _error(str(err))
        return 200, {"ok": True}


class _Handler(BaseHTTPRequestHandler):
    """Parses HTTP the way slack_sdk sends it and hands calls to the SlackStandIn."""

    server_version = "slack-standin/1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        verb = self.command  # slack_sdk always POSTs; GET serves the control API (and curl)
        standin: SlackStandIn = self.server.standin  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        is_json = (self.headers.get("Content-Type") or "").startswith("application/json")
        try:
            body = json.loads(raw or b"{}") if is_json else dict(parse_qsl(raw.decode()))
        except ValueError:
            body = None
        if url.path.startswith(CONTROL_PREFIX):
            status, payload = standin.handle_control(
                verb, url.path[len(CONTROL_PREFIX):], query, body if isinstance(body, dict) else {})
            return self._reply(status, {}, payload)
        if not url.path.startswith("/api/"):
            return self._reply(404, {}, _error("not_found"))
        if not isinstance(body, dict):
            return self._reply(200, {}, _error("invalid_json" if is_json else "invalid_form_data"))
        auth = self.headers.get("Authorization") or ""
        token = auth[len("Bearer "):].strip() if auth.startswith("Bearer ") else None
        headers = {k: v for k in ("Content-Type", "User-Agent") if (v := self.headers.get(k))}
        method, params = url.path[len("/api/"):], {**query, **body}
        status, extra, payload = standin.handle_api(method, params, token, headers, verb)
        self._reply(status, extra, payload)

    do_GET = do_POST

    def _reply(self, status: int, headers: dict[str, str], payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class SlackStandInControl:
    """Drives a stand-in over its control API, so tests and the sandbox use the same calls
    whether it runs in this process or another. Accepts the base URL or the server root."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        self._root = f"{parts.scheme}://{parts.netloc}{CONTROL_PREFIX}"
        self._timeout = timeout

    def _call(self, action: str, body: dict[str, Any] | None = None,
              query: dict[str, str] | None = None) -> Any:
        url = self._root + action + ("?" + urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            detail = err.read().decode()
            raise ValueError(f"stand-in control {action}: HTTP {err.code} {detail}") from err

    def requests(self, method: str | None = None) -> list[RecordedRequest]:
        query = {"method": method} if method else None
        return [RecordedRequest(**r) for r in self._call("requests", query=query)["requests"]]

    def messages(self, channel: str) -> list[PostedMessage]:
        found = self._call("messages", query={"channel": channel})["messages"]
        return [PostedMessage(**m) for m in found]

    def recover(self) -> None:
        self._call("recover", {})

    def reset(self) -> None:
        self._call("reset", {})

    def fail(self, kind: str, count: int = 1, method: str | None = None,
             retry_after: int = 1, status: int = 500, delay: float = 5.0) -> None:
        self._call("fail", {"kind": kind, "count": count, "method": method,
                            "retry_after": retry_after, "status": status, "delay": delay})

    def add_user(self, email: str, user_id: str, name: str) -> None:
        self._call("users", {"email": email, "id": user_id, "name": name})

    def add_channel(self, channel_id: str, name: str, members: Iterable[str] = ()) -> None:
        self._call("channels", {"id": channel_id, "name": name, "members": list(members)})

    def ephemeral(self, user: str) -> list[PostedMessage]:
        return [PostedMessage(**m) for m in self._call("ephemeral", query={"user": user})["messages"]]

    def click(self, user_id: str, channel: str, ts: str, action_id: str, *, block_id: str | None = None,
              via: str = "socket", url: str = "", secret: str = interactive.SIGNING_SECRET,
              timestamp: int | None = None) -> dict[str, Any]:
        return dict(self._call("click", {"user": user_id, "channel": channel, "ts": ts, "action_id": action_id,
                                         "block_id": block_id, "via": via, "url": url, "secret": secret,
                                         "timestamp": timestamp}))

    def replay(self, url: str) -> dict[str, Any]:
        return dict(self._call("replay", {"url": url}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Slack Web API stand-in (binds 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", action="append", help=f"valid token (default {DEFAULT_TOKEN})")
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    with SlackStandIn(args.port, args.token or (DEFAULT_TOKEN,)) as standin:
        print(standin.base_url, flush=True)  # first line of stdout: how callers find the port
        while not stopping.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
