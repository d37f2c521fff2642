"""A fault-injecting proxy in front of one sandbox service: the apiserver, Prometheus or Slack.

The janitor's promises must hold when its dependencies misbehave: slow answers, reset
connections, requests that are never answered, 429s and 5xx, bodies cut short. Putting this
proxy between the janitor and a real service makes each of those happen on demand, for chosen
requests only, while everything else passes through byte for byte (keep-alive, chunked watch
streams, Upgrade tunnels). Watches have faults of their own: a head and then silence, a 410 as
an ERROR event, a stream cut mid-event, BOOKMARKs dropped, events relayed slowly. Rules and the
record of requests live in `devenv/fault_rules.py`, HTTP framing and watch events in
`devenv/fault_wire.py`.

For an https upstream the proxy terminates TLS with a certificate from the sandbox CA and opens
its own TLS connection upstream. Every sandbox kubeconfig authenticates with a bearer token
(`devenv/controlplane.py`, `devenv/access.py`), which is a header and passes through unchanged,
so a kubeconfig needs only a new server URL (`repoint_kubeconfig`).
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from io import BufferedReader
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from devenv import fault_wire as wire
from devenv.fault_rules import (
    STREAM_FAULTS,
    Fault,
    FaultControl,
    Journal,
    Rule,
    RuleBook,
    Seen,
    Switches,
    Where,
    control_server,
)
from devenv.pki import Pki

__all__ = ["FaultControl", "FaultProxy", "ProxyTls", "Seen", "Switches", "repoint_kubeconfig"]

HOST = "127.0.0.1"
# A JSON document cut off mid-way, and one that was never JSON: what a broken proxy or a
# half-written response looks like to a client that parses the body.
_TRUNCATED = b'{"kind": "List", "apiVersion": "v1", "metadata": {}, "items": [{"metadata": {"name": "'
_INVALID = b'{"kind": "List", items: [}'
# Sent again on a fresh connection when a reused one turns out closed: safe only if repeating
# cannot do anything twice (a repeated POST would show up as a second Slack message).
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class ProxyTls:
    """TLS for an https upstream: serve `cert`/`key` (from the sandbox CA, valid for 127.0.0.1 and
    localhost; the apiserver's own serving pair fits) and verify the upstream against `ca`. A
    client certificate for the upstream is only needed if a kubeconfig ever stops using tokens."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path | None = None
    client_key: Path | None = None

    @classmethod
    def from_pki(cls, pki: Pki) -> ProxyTls:
        return cls(pki.ca_cert, pki.serving_cert, pki.serving_key)


class _Conn:
    """One client connection and the upstream connection paired with it (opened on demand)."""

    def __init__(self, number: int, sock: socket.socket) -> None:
        self.number = number
        self.sock = sock
        self.reader: BufferedReader | None = None
        self.up: socket.socket | None = None
        self.up_reader: BufferedReader | None = None

    def shut(self) -> None:
        """Wake every read blocked on this connection (safe from any thread, TLS or not)."""
        for s in (self.sock, self.up):
            if s is not None:
                try:
                    socket.socket.shutdown(s, socket.SHUT_RDWR)
                except OSError:
                    pass

    def drop_upstream(self) -> None:
        for closable in (self.up_reader, self.up):
            if closable is not None:
                closable.close()
        self.up = self.up_reader = None

    def close(self, *, reset: bool = False) -> None:
        if reset:  # SO_LINGER 0: close() sends a RST instead of a FIN
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.drop_upstream()
        if self.reader is not None:
            self.reader.close()
        self.sock.close()


class FaultProxy(Switches):
    """The proxy; `start()` binds 127.0.0.1 (a free port unless one is given), `stop()` never
    hangs, even with black-holed or streaming connections open. Usable as a context manager."""

    def __init__(self, upstream: str, *, tls: ProxyTls | None = None, port: int = 0,
                 control: bool = True) -> None:
        target = urlsplit(upstream)
        if target.scheme not in ("http", "https") or not target.hostname:
            raise ValueError(f"upstream must be an http(s) URL, not {upstream!r}")
        self._up_https = target.scheme == "https"
        self._up_addr = (target.hostname, target.port or (443 if self._up_https else 80))
        self._up_host = target.netloc
        self._up_ctx: ssl.SSLContext | None = None
        self._serve_ctx: ssl.SSLContext | None = None
        if self._up_https:
            if tls is None:
                raise ValueError("an https upstream needs ProxyTls (the sandbox CA and a serving pair)")
            self._up_ctx = ssl.create_default_context(cafile=str(tls.ca))
            if tls.client_cert is not None:
                self._up_ctx.load_cert_chain(str(tls.client_cert), str(tls.client_key or tls.client_cert))
            self._up_ctx.set_alpn_protocols(["http/1.1"])
            self._serve_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._serve_ctx.load_cert_chain(str(tls.cert), str(tls.key))
            self._serve_ctx.set_alpn_protocols(["http/1.1"])  # Go clients (kubectl) fall back from h2
        self._port, self._want_control = port, control
        self.rules, self.journal = RuleBook(), Journal()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}
        self._threads: list[threading.Thread] = []
        self._numbers = itertools.count(1)
        self._listener: socket.socket | None = None
        self._bound = 0
        self._control: ThreadingHTTPServer | None = None

    # ----- lifecycle ---------------------------------------------------------------------
    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, self._port))
        listener.listen(128)
        listener.settimeout(0.2)  # the accept loop notices stop() without relying on close()
        self._listener, self._bound = listener, int(listener.getsockname()[1])
        self._spawn(self._accept_loop, "fault-proxy-accept")
        if self._want_control:
            control = self._control = control_server(self, HOST)
            self._spawn(lambda: control.serve_forever(0.1), "fault-proxy-control")
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.rules.clear()  # lets black-holed and delayed requests go
        with self._lock:
            conns, threads = list(self._conns.values()), list(self._threads)
        for conn in conns:
            conn.shut()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() at once on Linux
            except OSError:
                pass
        if self._control is not None:
            self._control.shutdown()
            self._control.server_close()
        deadline = time.monotonic() + 3
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._bound, "proxy is not running"
        return self._bound

    @property
    def url(self) -> str:
        return f"{'https' if self._up_https else 'http'}://{HOST}:{self.port}"

    @property
    def control_url(self) -> str:
        assert self._control is not None, "proxy runs without a control endpoint"
        return f"http://{HOST}:{self._control.server_address[1]}"

    # ----- the switches ------------------------------------------------------------------
    def add(self, fault: Fault, where: Where) -> int:
        return self.rules.add(fault, where).id

    def clear(self, rule_id: int | None = None) -> None:
        self.rules.clear(rule_id)

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        return self.journal.seen(method, path)

    def forget(self) -> None:
        self.journal.forget()

    def drop_connections(self) -> int:
        """Cut every open client connection, watch streams included, as a restarting load balancer
        would; new connections are served as before. Returns how many were cut."""
        with self._lock:
            conns = list(self._conns.values())
        for conn in conns:
            conn.shut()
        return len(conns)

    # ----- serving -----------------------------------------------------------------------
    def _spawn(self, target: Callable[[], object], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn = _Conn(next(self._numbers), sock)
            with self._lock:
                self._conns[conn.number] = conn
            if self._stopping.is_set():  # stop() may have missed it
                conn.shut()
            self._spawn(lambda conn=conn: self._serve(conn), f"fault-proxy-{conn.number}")  # type: ignore[misc]

    def _serve(self, conn: _Conn) -> None:
        reset = False
        try:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._serve_ctx is not None:
                conn.sock.settimeout(10)  # a client that never finishes its handshake is let go
                conn.sock = self._serve_ctx.wrap_socket(conn.sock, server_side=True)
                conn.sock.settimeout(None)
            conn.reader = conn.sock.makefile("rb")
            while not self._stopping.is_set():
                keep, reset = self._one_request(conn)
                if not keep:
                    break
        except (OSError, ValueError):
            pass  # the client, the upstream or stop() ended the connection
        finally:
            with self._lock:
                self._conns.pop(conn.number, None)
            conn.close(reset=reset)

    def _one_request(self, conn: _Conn) -> tuple[bool, bool]:
        """Serve one request; returns (keep the connection, end it with a RST)."""
        assert conn.reader is not None
        lines = wire.read_head(conn.reader)
        if lines is None:
            return False, False
        method, target, version = lines[0].decode("latin-1").split(" ", 2)
        headers = wire.parse(lines[1:])
        if "100-continue" in wire.tokens(headers, "expect"):
            conn.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body: list[bytes] = []
        if "chunked" in wire.tokens(headers, "transfer-encoding"):
            wire.copy_chunked(conn.reader, body.append)
        else:
            wire.copy_exact(conn.reader, int(wire.header(headers, "content-length") or 0), body.append)
        connection = wire.tokens(headers, "connection")
        close = "close" in connection or (version.strip() == "HTTP/1.0" and "keep-alive" not in connection)
        rule = self.rules.take(method, target)
        fault = rule.fault if rule is not None else None
        entry = self.journal.arrived(conn.number, method, target, fault.kind if fault else None)
        if rule is not None and fault is not None:
            if fault.kind == "reset":
                return False, True
            if fault.kind == "blackhole":
                rule.hold()
                return False, False
            if fault.kind == "delay" and rule.released.wait(fault.seconds) and self._stopping.is_set():
                return False, False
            if fault.kind == "status":
                code, extra, data = fault.status_response()
                self.journal.answered(entry, code)  # before the client can see it and ask
                conn.sock.sendall(wire.response(code, extra, data, close=close))
                return not close, False
            if fault.kind == "silent":  # a watch's head, then nothing: not an event, not a bookmark, no end
                self.journal.answered(entry, 200)
                conn.sock.sendall(wire.stream_head())
                rule.hold()
                return False, False
            if fault.kind == "gone":  # as an apiserver answers a watch from a version it no longer has
                self.journal.answered(entry, 200)
                conn.sock.sendall(wire.stream_head() + wire.chunk(wire.gone_event()) + wire.END)
                return not close, False
            if fault.kind == "malformed":
                data = _INVALID if fault.malformed == "invalid" else _TRUNCATED
                short = fault.malformed == "short-body"
                self.journal.answered(entry, 200)
                conn.sock.sendall(wire.response(200, {"Content-Type": "application/json"}, data,
                                            length=len(data) + 100 if short else None, close=close))
                return not (close or short), False
        # A fault on the events of a stream reads them as JSON lines: the upstream must not compress.
        stream = rule if rule is not None and rule.fault.kind in STREAM_FAULTS else None
        dropped = {"expect", "accept-encoding"} if stream is not None else {"expect"}
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(
            f"{k}: {self._up_host if k.lower() == 'host' else v}\r\n"
            for k, v in headers if k.lower() not in dropped)
        if fault is not None and fault.kind == "lost":
            return self._deliver_and_lose(conn, head, b"".join(body), entry, fault, close)
        return self._forward(conn, method, (head + "\r\n").encode("latin-1") + b"".join(body), entry, close, stream)

    def _deliver_and_lose(self, conn: _Conn, head: str, body: bytes, entry: dict[str, Any], fault: Fault,
                          close: bool) -> tuple[bool, bool]:
        """Send the request upstream on a connection of its own, read the whole answer, then give
        the client a RST or the fault's status instead of it."""
        head = "".join(line + "\r\n" for line in head.split("\r\n")
                       if line and not line.lower().startswith("connection:"))
        up = socket.create_connection(self._up_addr, timeout=10)
        try:
            if self._up_ctx is not None:
                up = self._up_ctx.wrap_socket(up, server_hostname=self._up_addr[0])
            up.sendall((head + "Connection: close\r\n\r\n").encode("latin-1") + body)
            while up.recv(wire.PIECE):
                pass
        except OSError:
            pass  # the server may or may not have got it; the client is told nothing either way
        finally:
            up.close()
        if not fault.code:
            return False, True
        code, extra, data = Fault("status", code=fault.code).status_response()
        self.journal.answered(entry, code)
        conn.sock.sendall(wire.response(code, extra, data, close=close))
        return not close, False

    def _connect(self, conn: _Conn) -> None:
        sock = socket.create_connection(self._up_addr, timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._up_ctx is not None:
            sock = self._up_ctx.wrap_socket(sock, server_hostname=self._up_addr[0])
        sock.settimeout(None)  # a watch may stay quiet for minutes; stop() wakes it
        conn.up, conn.up_reader = sock, sock.makefile("rb")

    def _forward(self, conn: _Conn, method: str, request: bytes, entry: dict[str, Any],
                 close: bool, stream: Rule | None = None) -> tuple[bool, bool]:
        """Send the request upstream and relay its answer; `stream`, a rule whose fault acts on the
        events of a chunked answer (cut, no-bookmarks, slow), relays those event by event."""
        if conn.up is not None and select.select([conn.up], [], [], 0)[0]:
            conn.drop_upstream()  # readable while idle: the upstream closed it (as urllib3 checks)
        lines: list[bytes] | None = None
        for _attempt in range(2):
            fresh = conn.up is None
            try:
                if fresh:
                    self._connect(conn)
                assert conn.up is not None and conn.up_reader is not None
                conn.up.sendall(request)
                lines = wire.read_head(conn.up_reader)
                while lines is not None and 100 <= wire.code(lines[0]) < 200 and wire.code(lines[0]) != 101:
                    conn.sock.sendall(b"".join(lines) + b"\r\n")  # an interim answer, then the real one
                    lines = wire.read_head(conn.up_reader)
            except OSError:
                lines = None
            if lines is not None or fresh or method not in _IDEMPOTENT:
                break
            conn.drop_upstream()  # closed between the check and the send: once more, fresh
        if lines is None:
            conn.drop_upstream()
            data = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 502,
                               "message": "fault proxy: upstream unreachable"}).encode()
            self.journal.answered(entry, 502)
            conn.sock.sendall(wire.response(502, {"Content-Type": "application/json"}, data, close=close))
            return not close, False
        assert conn.up_reader is not None
        code, headers = wire.code(lines[0]), wire.parse(lines[1:])
        self.journal.answered(entry, code)
        conn.sock.sendall(b"".join(lines) + b"\r\n")
        if code == 101:
            self._tunnel(conn)
            return False, False
        connection = wire.tokens(headers, "connection")
        up_close = "close" in connection or (lines[0].startswith(b"HTTP/1.0") and "keep-alive" not in connection)
        length = wire.header(headers, "content-length")

        def send(data: bytes) -> None:
            conn.sock.sendall(data)
            entry["bytes"] += len(data)

        if method == "HEAD" or code in (204, 304):
            pass
        elif "chunked" in wire.tokens(headers, "transfer-encoding") and stream is not None and code == 200:
            f = stream.fault
            if not wire.relay_events(conn.up_reader, send, cut_after=f.events if f.kind == "cut" else None,
                                     bookmarks=f.kind != "no-bookmarks", pause=f.seconds if f.kind == "slow" else 0.0,
                                     released=stream.released):
                conn.drop_upstream()
                return False, True  # cut mid-event: the client's connection ends with a RST
        elif "chunked" in wire.tokens(headers, "transfer-encoding"):
            wire.copy_chunked(conn.up_reader, send)
        elif length is not None:
            wire.copy_exact(conn.up_reader, int(length), send)
        else:  # the body ends when the upstream closes; so must the client's connection
            while data := conn.up_reader.read1(wire.PIECE):
                send(data)
            up_close = True
        if up_close:
            conn.drop_upstream()
        return not (close or up_close), False

    def _tunnel(self, conn: _Conn) -> None:
        """After a 101 (WebSocket, exec): bytes both ways until either side closes."""
        assert conn.reader is not None and conn.up_reader is not None and conn.up is not None

        def pump(src: BufferedReader, dst: socket.socket) -> None:
            try:
                while data := src.read1(wire.PIECE):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                conn.shut()

        upward = threading.Thread(target=pump, args=(conn.reader, conn.up), daemon=True)
        upward.start()
        pump(conn.up_reader, conn.sock)
        upward.join(timeout=5)


def repoint_kubeconfig(source: Path, target: Path, server: str) -> Path:
    """A copy of a kubeconfig whose clusters all point at `server` (the proxy); the CA, the
    token and the rest stay, so the client authenticates exactly as before."""
    config = yaml.safe_load(source.read_text())
    for cluster in config.get("clusters") or []:
        cluster["cluster"]["server"] = server
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    target.chmod(0o600)
    return target
