"""Which fault a request gets, the record of what the fault proxy saw, and how tests switch them.

Kept apart from the socket code in `devenv/faults.py` so that matching, limits and the record are
plain data with a lock around them, and so that the in-process proxy and `FaultControl` (its
control endpoint, for a test in another process) offer one and the same `Switches` to a test.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypedDict, Unpack, get_args
from urllib.parse import parse_qsl, urlencode, urlsplit

FaultKind = Literal["delay", "reset", "blackhole", "status", "malformed", "pass", "lost",
                    "silent", "gone", "cut", "no-bookmarks", "slow"]
MalformedKind = Literal["truncated", "invalid", "short-body"]
# Faults on the events of a forwarded stream (a watch), not on the request: `fault_wire.relay_events`.
STREAM_FAULTS = frozenset({"cut", "no-bookmarks", "slow"})

GONE = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired",
        "message": "too old resource version (fault injected)", "code": 410}
# Kubernetes clients turn this into a readable ApiException; any other client sees JSON.
_STATUS_REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError",
                   502: "BadGateway", 503: "ServiceUnavailable", 504: "Timeout"}


class Where(TypedDict, total=False):
    """Which requests a rule applies to, and for how long.

    `path` is a prefix of the path (query excluded); `regex` is searched in the whole request
    target, query included. `watch` True matches watches only (`watch=true` or `1` in the query),
    False everything but watches; `resource` is a Kubernetes resource's plural (`pods`,
    `configmaps`), whichever the group, namespace or name. `times` and `for_seconds` limit the
    rule to its first N matching requests or a span after it was added."""

    method: str
    path: str
    regex: str
    watch: bool
    resource: str
    times: int
    for_seconds: float


@dataclass(frozen=True)
class Fault:
    """What happens to a matching request; JSON-friendly so the control endpoint can carry it."""

    kind: FaultKind
    seconds: float = 0.0
    code: int = 0
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    malformed: MalformedKind = "truncated"
    events: int = 0  # cut: the whole events relayed before the one cut in half

    def __post_init__(self) -> None:
        # Checked here so a typo sent over the control endpoint fails the switch, not a request.
        if self.kind not in get_args(FaultKind) or self.malformed not in get_args(MalformedKind):
            raise ValueError(f"unknown fault {self.kind!r}/{self.malformed!r}")
        if self.kind == "lost" and self.code and not 100 <= self.code <= 599:
            raise ValueError(f"a lost answer is replaced by a reset or an HTTP status, not {self.code}")
        if self.kind == "status" and not 100 <= self.code <= 599:
            raise ValueError(f"status fault needs an HTTP status, not {self.code}")
        if self.events < 0 or self.seconds < 0:
            raise ValueError(f"a fault's events and seconds are not negative ({self.events}, {self.seconds})")

    def status_response(self) -> tuple[int, dict[str, str], bytes]:
        """The proxy's own answer for a `status` fault: a Kubernetes Status unless a body is given."""
        headers = {"Content-Type": "application/json", **self.headers}
        if self.code in (429, 503) and not any(k.lower() == "retry-after" for k in headers):
            headers["Retry-After"] = "1"
        if self.body is not None:
            return self.code, headers, self.body.encode()
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": f"fault injected: HTTP {self.code}",
                  "reason": _STATUS_REASONS.get(self.code, "Unknown"), "code": self.code}
        return self.code, headers, json.dumps(status).encode()


@dataclass
class Rule:
    """One active fault with its match; `released` lets held requests go when it is cleared."""

    id: int
    fault: Fault
    where: Where
    deadline: float | None = None
    taken: int = 0
    released: threading.Event = field(default_factory=threading.Event)

    def live(self, now: float) -> bool:
        times = self.where.get("times")
        if times is not None and self.taken >= times:
            return False
        return self.deadline is None or now < self.deadline

    def matches(self, method: str, target: str) -> bool:
        want = self.where.get("method")
        if want is not None and want.upper() != method.upper():
            return False
        if not target.split("?", 1)[0].startswith(self.where.get("path", "")):
            return False
        path, _, query = target.partition("?")
        watch = self.where.get("watch")
        if watch is not None and watch != is_watch(query):
            return False
        resource = self.where.get("resource")
        if resource is not None and resource != resource_of(path):
            return False
        regex = self.where.get("regex")
        return regex is None or re.search(regex, target) is not None

    def hold(self) -> None:
        """Wait until the rule is cleared (the proxy clears all when it stops) or its span ends."""
        self.released.wait(None if self.deadline is None else max(0.0, self.deadline - time.monotonic()))


def is_watch(query: str) -> bool:
    return any(k == "watch" and v.lower() in ("true", "1") for k, v in parse_qsl(query))


def resource_of(path: str) -> str | None:
    """The resource a Kubernetes API path names (`/api/v1/namespaces/ns/pods/x` -> `pods`), if any."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    else:
        return None
    if len(parts) >= 3 and parts[0] == "namespaces":
        return parts[2]
    return parts[0] if parts else None


class RuleBook:
    """The active rules in the order they were added; the first live match wins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._next_id = 1

    def add(self, fault: Fault, where: Where) -> Rule:
        try:
            re.compile(where.get("regex") or "")  # a bad pattern fails the caller, not a later request
        except re.error as err:
            raise ValueError(f"bad regex {where.get('regex')!r}: {err}") from err
        with self._lock:
            span = where.get("for_seconds")
            rule = Rule(self._next_id, fault, dict(where),  # type: ignore[arg-type]
                        None if span is None else time.monotonic() + span)
            self._next_id += 1
            self._rules.append(rule)
            return rule

    def take(self, method: str, target: str) -> Rule | None:
        now = time.monotonic()
        with self._lock:
            for rule in self._rules:
                if rule.live(now) and rule.matches(method, target):
                    rule.taken += 1
                    return rule
        return None

    def clear(self, rule_id: int | None = None) -> None:
        """Remove one rule or all, releasing whatever they hold (black-holed requests, delays)."""
        with self._lock:
            gone = [r for r in self._rules if rule_id is None or r.id == rule_id]
            self._rules = [r for r in self._rules if r not in gone]
        for rule in gone:
            rule.released.set()


@dataclass(frozen=True)
class Seen:
    """One request as the proxy saw it. `status` is None when no answer was sent (reset,
    blackhole, client gone); `fault` is None when no rule matched. `conn` numbers the client
    connection, so a test can tell that keep-alive reused one."""

    conn: int
    method: str
    path: str
    query: str
    status: int | None
    fault: FaultKind | None
    bytes: int = 0  # the response body's bytes as sent on the wire (compressed, when it was)


class Journal:
    """The requests seen, in arrival order; statuses filled in as answers go out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[dict[str, Any]] = []

    def arrived(self, conn: int, method: str, target: str, fault: FaultKind | None) -> dict[str, Any]:
        path, _, query = target.partition("?")
        entry = {"conn": conn, "method": method, "path": path, "query": query, "status": None,
                 "fault": fault, "bytes": 0}
        with self._lock:
            self._entries.append(entry)
        return entry

    def answered(self, entry: dict[str, Any], status: int) -> None:
        with self._lock:
            entry["status"] = status

    def seen(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        with self._lock:
            entries = [dict(e) for e in self._entries]
        return [Seen(**e) for e in entries
                if (method is None or e["method"] == method.upper())
                and (path is None or e["path"].startswith(path))]

    def forget(self) -> None:
        with self._lock:
            self._entries = []


def _body_text(body: bytes | str | dict[str, Any] | list[Any] | None) -> str | None:
    """Bodies are kept as text so a fault travels over the control endpoint as JSON."""
    if body is None or isinstance(body, str):
        return body
    if isinstance(body, bytes):
        return body.decode()
    return json.dumps(body)


class Switches(ABC):
    """The faults a test can switch on, the same whether the proxy runs here or elsewhere.

    Every switch returns the rule's id for `clear(id)`; `clear()` removes all."""

    @abstractmethod
    def add(self, fault: Fault, where: Where) -> int: ...

    @abstractmethod
    def clear(self, rule_id: int | None = None) -> None: ...

    @abstractmethod
    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]: ...

    @abstractmethod
    def forget(self) -> None:
        """Drop the record of requests seen so far (a test's own start line)."""

    def delay(self, seconds: float, **where: Unpack[Where]) -> int:
        """Forward after `seconds` (cut short when the rule is cleared)."""
        return self.add(Fault("delay", seconds=seconds), where)

    def reset(self, **where: Unpack[Where]) -> int:
        """A RST, as from a server that crashed mid-request: the client gets a connection error."""
        return self.add(Fault("reset"), where)

    def blackhole(self, **where: Unpack[Where]) -> int:
        """No answer, as from a hung server or a lost network: only the client's own timeout ends
        the wait, until the rule is cleared (or its span ends) and the connection is closed."""
        return self.add(Fault("blackhole"), where)

    def status(self, code: int, body: bytes | str | dict[str, Any] | list[Any] | None = None,
               headers: dict[str, str] | None = None, **where: Unpack[Where]) -> int:
        """The proxy answers `code` itself, nothing is forwarded; the default body is a Kubernetes
        Status, and 429 and 503 carry `Retry-After: 1` unless `headers` say otherwise."""
        return self.add(Fault("status", code=code, body=_body_text(body), headers=dict(headers or {})), where)

    def malformed(self, kind: MalformedKind = "truncated", **where: Unpack[Where]) -> int:
        """A 200 the client cannot use, not forwarded: JSON cut off (`truncated`), not JSON
        (`invalid`), or a Content-Length 100 bytes longer than the body, then a close (`short-body`)."""
        return self.add(Fault("malformed", malformed=kind), where)

    def lost(self, code: int = 0, **where: Unpack[Where]) -> int:
        """Forwarded, and the server acts on it, but its answer never reaches the client: a RST
        (`code` 0) or the proxy's own `code` instead, as from a gateway that failed after the
        server had done the work. The case no client may blindly retry a non-idempotent call on."""
        return self.add(Fault("lost", code=code), where)

    # -- a watch's own faults (`watch=True` in `where` singles watches out) -----------------------

    def silent(self, **where: Unpack[Where]) -> int:
        """Not forwarded: a 200 and a chunked head come, then nothing at all (no event, no
        bookmark, no end) until the rule is cleared, as from a proxy holding a dead watch."""
        return self.add(Fault("silent"), where)

    def gone(self, *, in_stream: bool = False, **where: Unpack[Where]) -> int:
        """Not forwarded: 410 Gone, the resourceVersion too old, as an HTTP status or (`in_stream`)
        as the apiserver says it to a watch: a 200 whose one event is an ERROR holding the Status."""
        if in_stream:
            return self.add(Fault("gone"), where)
        return self.add(Fault("status", code=410, body=json.dumps(GONE)), where)

    def cut(self, events: int = 0, **where: Unpack[Where]) -> int:
        """Forwarded; after `events` whole events, half of the next is relayed and the connection
        ends with a RST, as when a node or a proxy dies mid-event."""
        return self.add(Fault("cut", events=events), where)

    def no_bookmarks(self, **where: Unpack[Where]) -> int:
        """Forwarded, every BOOKMARK event dropped: a quiet kind's watch then says nothing at all."""
        return self.add(Fault("no-bookmarks"), where)

    def slow(self, seconds: float, **where: Unpack[Where]) -> int:
        """Forwarded; each event waits `seconds` before it is relayed, and is read from the upstream
        only then: a slow consumer, whose buffer on the apiserver fills (cut short when cleared)."""
        return self.add(Fault("slow", seconds=seconds), where)

    def pass_through(self, **where: Unpack[Where]) -> int:
        """Forward unchanged; added before a broader fault, it exempts what it matches."""
        return self.add(Fault("pass"), where)


def _where_from(data: dict[str, Any]) -> Where:
    return {k: v for k, v in data.items() if k in Where.__optional_keys__ and v is not None}  # type: ignore[return-value]


class _ControlHandler(BaseHTTPRequestHandler):
    """The switches over HTTP, for a test in another process: POST /faults, DELETE
    /faults[/<id>], GET /requests?method=&path=, DELETE /requests."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        switches: Switches = self.server.switches  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        parts, query = url.path.strip("/").split("/"), dict(parse_qsl(url.query))
        try:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            payload: Any = {"ok": True}
            if self.command == "POST" and parts == ["faults"]:
                data = json.loads(raw)
                payload = {"id": switches.add(Fault(**data["fault"]), _where_from(data.get("where") or {}))}
            elif self.command == "DELETE" and parts[0] == "faults" and len(parts) <= 2:
                switches.clear(int(parts[1]) if len(parts) == 2 else None)
            elif self.command == "GET" and parts == ["requests"]:
                payload = {"requests": [asdict(s) for s in switches.requests(query.get("method"), query.get("path"))]}
            elif self.command == "DELETE" and parts == ["requests"]:
                switches.forget()
            else:
                return self._reply(404, {"error": f"no control {self.command} {url.path}"})
        except (KeyError, TypeError, ValueError) as err:
            return self._reply(400, {"error": repr(err)})
        self._reply(200, payload)

    do_GET = do_POST = do_DELETE = _handle

    def _reply(self, code: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def control_server(switches: Switches, host: str) -> ThreadingHTTPServer:
    """A control endpoint on a free port of `host`, not yet serving (call serve_forever)."""
    server = ThreadingHTTPServer((host, 0), _ControlHandler)
    server.daemon_threads = True
    server.switches = switches  # type: ignore[attr-defined]
    return server


class FaultControl(Switches):
    """The switches of a proxy in another process, through its `control_url`."""

    def __init__(self, control_url: str, timeout: float = 10.0) -> None:
        self._root, self._timeout = control_url.rstrip("/"), timeout

    def _call(self, verb: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self._root + path, data=data, method=verb,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            raise ValueError(f"fault control {verb} {path}: HTTP {err.code} {err.read().decode()}") from err

    def add(self, fault: Fault, where: Where) -> int:
        return int(self._call("POST", "/faults", {"fault": asdict(fault), "where": dict(where)})["id"])

    def clear(self, rule_id: int | None = None) -> None:
        self._call("DELETE", "/faults" + ("" if rule_id is None else f"/{rule_id}"))

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        query = urlencode({k: v for k, v in (("method", method), ("path", path)) if v is not None})
        return [Seen(**s) for s in self._call("GET", "/requests" + ("?" + query if query else ""))["requests"]]

    def forget(self) -> None:
        self._call("DELETE", "/requests")
