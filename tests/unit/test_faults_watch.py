"""The fault proxy's faults on watches (devenv/faults.py, devenv/fault_wire.py), as a client sees them.

Aspects covered:
- rules single out watches (`watch=True`: `watch=true` or `1` in the query) or everything else,
  and a Kubernetes resource by its plural whatever the group, namespace or name;
- silent: a 200 with a chunked head, then nothing until the rule is cleared;
- gone: 410 as an HTTP status, or as the apiserver says it to a watch (an ERROR event in a 200);
- cut: the whole events before it relayed, then half an event and a reset;
- no-bookmarks: every BOOKMARK dropped, every other event relayed as it came;
- slow: every event relayed, in order, each one late; clearing the rule ends the waits;
- a stream fault on an answer that is not a chunked stream passes it unchanged.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from devenv.fault_rules import resource_of
from devenv.faults import FaultProxy

EVENTS = [{"type": "ADDED", "n": 1}, {"type": "BOOKMARK", "n": 2}, {"type": "MODIFIED", "n": 3},
          {"type": "BOOKMARK", "n": 4}, {"type": "DELETED", "n": 5}]
WATCH = "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=7"


class _Watches(BaseHTTPRequestHandler):
    """Answers a watch with EVENTS, one chunk each, then the end; anything else with JSON."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.server.seen.append(self.headers.get("Accept-Encoding"))  # type: ignore[attr-defined]
        if "watch=" not in self.path:
            data = json.dumps({"path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in EVENTS:
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Watches)
    server.daemon_threads = True
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
    try:
        with FaultProxy(f"http://127.0.0.1:{server.server_address[1]}") as running:
            running.upstream_seen = server.seen  # type: ignore[attr-defined]
            yield running
    finally:
        server.shutdown()
        server.server_close()


def events(response: requests.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.iter_lines() if line]


def test_rules_single_out_watches_and_resources(proxy: FaultProxy) -> None:
    proxy.status(503, watch=True, resource="pods")
    proxy.status(429, watch=False, resource="configmaps")
    assert requests.get(proxy.url + WATCH, timeout=10).status_code == 503
    assert requests.get(proxy.url + "/api/v1/pods?watch=1", timeout=10).status_code == 503
    assert requests.get(proxy.url + "/api/v1/namespaces/ns/pods", timeout=10).status_code == 200
    assert requests.get(proxy.url + "/api/v1/namespaces/ns/configmaps?limit=5", timeout=10).status_code == 429
    assert requests.get(proxy.url + "/api/v1/namespaces/ns/configmaps?watch=true", timeout=10).status_code == 200
    assert requests.get(proxy.url + "/apis/batch/v1/jobs?watch=false", timeout=10).status_code == 200


def test_the_resource_of_a_path() -> None:
    assert resource_of("/api/v1/namespaces/ns/pods/p") == "pods"
    assert resource_of("/api/v1/namespaces/ns") == "namespaces"
    assert resource_of("/api/v1/nodes") == "nodes"
    assert resource_of("/apis/batch/v1/namespaces/ns/jobs") == "jobs"
    assert resource_of("/apis/kueue.x-k8s.io/v1beta1/workloads") == "workloads"
    assert resource_of("/api/chat.postMessage") is None and resource_of("/healthz") is None


def test_silent_sends_a_head_then_nothing_until_cleared(proxy: FaultProxy) -> None:
    rule = proxy.silent(watch=True)
    response = requests.get(proxy.url + WATCH, stream=True, timeout=(5, 0.5))
    assert response.status_code == 200 and response.headers["Transfer-Encoding"] == "chunked"
    with pytest.raises(requests.exceptions.ConnectionError):  # the read timeout, as requests reports it
        next(response.iter_content(1))
    held = requests.get(proxy.url + WATCH, stream=True, timeout=(5, 10))
    proxy.clear(rule)
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError)):
        list(held.iter_content(1))  # closed promptly, without an end: no event ever came
    assert events(requests.get(proxy.url + WATCH, stream=True, timeout=10)) == EVENTS


def test_gone_as_a_status_and_as_an_error_event(proxy: FaultProxy) -> None:
    proxy.gone(watch=True, times=1)
    proxy.gone(in_stream=True, watch=True, times=1)
    answer = requests.get(proxy.url + WATCH, timeout=10)
    assert answer.status_code == 410 and answer.json()["reason"] == "Expired"
    streamed = requests.get(proxy.url + WATCH, stream=True, timeout=10)
    assert streamed.status_code == 200
    [error] = events(streamed)
    assert error["type"] == "ERROR" and error["object"]["code"] == 410
    assert [s.fault for s in proxy.requests()] == ["status", "gone"]
    assert proxy.upstream_seen == []  # type: ignore[attr-defined]


def test_cut_relays_whole_events_then_half_of_one_and_a_reset(proxy: FaultProxy) -> None:
    proxy.cut(events=2, watch=True)
    response = requests.get(proxy.url + WATCH, stream=True, timeout=10)
    received = b""
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError)):
        for piece in response.iter_content(None):
            received += piece
    *whole, half = received.split(b"\n")
    assert [json.loads(line) for line in whole] == EVENTS[:2]
    assert half and json.dumps(EVENTS[2]).encode().startswith(half) and half != json.dumps(EVENTS[2]).encode()


def test_no_bookmarks_drops_them_and_nothing_else(proxy: FaultProxy) -> None:
    proxy.no_bookmarks(watch=True)
    assert events(requests.get(proxy.url + WATCH, stream=True, timeout=10)) == [
        e for e in EVENTS if e["type"] != "BOOKMARK"]
    assert proxy.upstream_seen == [None]  # type: ignore[attr-defined]  # asked uncompressed, to read events


def test_slow_relays_every_event_late_and_clearing_ends_the_waits(proxy: FaultProxy) -> None:
    rule = proxy.slow(0.2, watch=True)
    began = time.monotonic()
    assert events(requests.get(proxy.url + WATCH, stream=True, timeout=10)) == EVENTS
    assert time.monotonic() - began >= 0.2 * len(EVENTS)  # a lower bound: each event waited
    proxy.clear(rule)
    proxy.slow(60, watch=True)
    response = requests.get(proxy.url + WATCH, stream=True, timeout=10)
    lines = response.iter_lines()
    threading.Timer(0.3, proxy.clear).start()
    assert json.loads(next(lines)) == EVENTS[0]  # released by the clear, not after 60 s


def test_a_stream_fault_leaves_an_answer_that_is_no_stream_alone(proxy: FaultProxy) -> None:
    proxy.cut(path="/api")
    assert requests.get(proxy.url + "/api/v1/namespaces/ns/pods", timeout=10).json() == {
        "path": "/api/v1/namespaces/ns/pods"}
