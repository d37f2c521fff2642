"""A watch is fresh only while the apiserver's events or bookmarks keep coming (observe/watch.py),
against a small local server that speaks the list and watch protocol.

- a watch that bookmarks keeps the kind synced, listed once;
- a watch that goes silent (headers sent, then nothing, as through a proxy holding a dead
  connection) is given up after `fresh_seconds`, and the kind is listed again, whole;
- a kind silent past the bound and its margin reads as not synced (stale), saying so;
- a polled kind (nodes, `relist_seconds`) is listed again and again and never watched, stays
  synced while a list is under way, takes each list's objects whole (one gone is gone), and reads
  not synced when a list gets no answer in time or its last list is too old.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from devenv.procs import wait_until
from janitor.decide.model import ResourceKind
from janitor.observe import watch
from janitor.observe.kind_status import State
from janitor.observe.watch import KindWatch

CONFIG_MAPS = ResourceKind("", "v1", "ConfigMap", "configmaps")


class Server:
    """Answers a list of one ConfigMap; watches bookmark every 0.2 s, or say nothing while `silent`.
    While `list_held` or `head_held` is set a list, or a watch's head, waits (the client's timeout
    ends it); while `gone`, every watch is answered 410 (`gone_in_stream`: in its stream); while
    `barren`, a watch's head comes and its connection closes."""

    def __init__(self) -> None:
        self.silent = threading.Event()
        self.list_held, self.head_held, self.gone = threading.Event(), threading.Event(), threading.Event()
        self.barren = threading.Event()  # watches: the head, then the connection closes
        self.gone_in_stream = threading.Event()  # watches: a 200 whose one event is an ERROR 410
        self.lists = self.watches = 0
        self.names = ["a"]  # what a list holds
        self.lists_gone = 0  # this many lists are answered 410, as a page whose continue token expired
        self.closing = threading.Event()
        server = self

        def held(flag: threading.Event) -> None:
            while flag.is_set() and not server.closing.is_set():
                time.sleep(0.05)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                held(server.list_held if "watch=true" not in self.path else server.head_held)
                if "watch=true" in self.path:
                    server.watches += 1
                gone = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                   "reason": "Expired", "message": "too old resource version"}).encode()
                if "watch=true" in self.path and server.gone_in_stream.is_set():  # as the apiserver says it
                    event = b'{"type": "ERROR", "object": %s}\n' % gone
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
                    return
                list_gone = "watch=true" not in self.path and server.lists_gone > 0
                if list_gone:
                    server.lists_gone -= 1
                if ("watch=true" in self.path and server.gone.is_set()) or list_gone:
                    body = gone
                    self.send_response(410)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if "watch=true" not in self.path:
                    server.lists += 1
                    body = json.dumps({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {
                        "resourceVersion": "10"}, "items": [{"metadata": {
                            "name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": "9",
                            "creationTimestamp": "2026-11-27T00:00:00Z"}} for name in server.names]}).encode()
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if server.barren.is_set():
                    self.close_connection = True
                    return
                while not server.closing.is_set():
                    if not server.silent.is_set():
                        line = json.dumps({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {
                            "resourceVersion": "10"}}}).encode() + b"\n"
                        try:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                            self.wfile.flush()
                        except OSError:
                            return
                    time.sleep(0.2)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def stop(self) -> None:
        self.closing.set()
        self.http.shutdown()


@pytest.fixture
def server() -> Iterator[Server]:
    made = Server()
    yield made
    made.stop()


def watching(server: Server, fresh: float, timeout: float = 2.0, relist: float | None = None) -> KindWatch[str]:
    config = client.Configuration(host=server.url)
    api = client.ApiClient(config)
    return KindWatch(api, CONFIG_MAPS, lambda item: item["metadata"]["name"], namespace="ns",
                     timeout=(2.0, timeout), fresh_seconds=fresh, relist_seconds=relist).start()


def test_a_watch_that_bookmarks_stays_synced_listed_once(server: Server) -> None:
    kind = watching(server, fresh=1.0)
    try:
        wait_until(lambda: kind.status().synced, timeout=10, what="synced")
        time.sleep(2.5)  # more than twice fresh_seconds, with bookmarks coming
        assert kind.status().synced and server.lists == 1 and kind.values() == ["a"]
    finally:
        kind.stop()


def test_a_silent_watch_is_given_up_and_the_kind_listed_again(server: Server) -> None:
    kind = watching(server, fresh=1.0)
    try:
        wait_until(lambda: kind.status().synced, timeout=10, what="synced")
        server.silent.set()
        wait_until(lambda: server.lists >= 2, timeout=10, what="the kind listed again after the silence")
        assert kind.status().reopened >= 1
    finally:
        kind.stop()


def test_a_kind_silent_past_the_bound_reads_stale(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "STALE_MARGIN", 0.5)
    kind = watching(server, fresh=30.0)  # the read waits long; the status says stale before that
    try:
        wait_until(lambda: kind.status().synced, timeout=10, what="synced")
        server.silent.set()
        time.sleep(1.0)
        assert kind.status().synced  # within the bound
        kind.fresh_seconds = 0.5  # as if the bound had passed
        time.sleep(1.2)
        status = kind.status()
        assert not status.synced and status.error.startswith("stale: no event or bookmark for")
    finally:
        kind.stop()


def test_a_polled_kind_is_listed_again_never_watched_and_stays_synced(server: Server) -> None:
    kind = watching(server, fresh=30.0, relist=0.3)
    try:
        wait_until(lambda: kind.status().synced, timeout=10, what="synced")
        server.names = ["a", "b"]
        wait_until(lambda: sorted(kind.values()) == ["a", "b"], timeout=10, what="a new object seen by a list")
        server.names = ["b"]
        wait_until(lambda: kind.values() == ["b"], timeout=10, what="a gone object gone with the next list")
        seen = []
        for _ in range(20):  # lists keep coming; the kind never reads unsynced between or during them
            seen.append(kind.status().synced)
            time.sleep(0.05)
        status = kind.status()
        assert all(seen) and status.state is State.POLLING
        assert server.watches == 0 and status.reopened == 0
        assert status.lists == server.lists >= 3 and status.refreshed == status.lists - 1
        values, listed_at = kind.values_at()  # the values, and when their list began
        assert values == ["b"] and listed_at is not None
        wait_until(lambda: (kind.values_at()[1] or listed_at) > listed_at, timeout=10, what="a later list's time")
    finally:
        kind.stop()


def test_a_polled_kind_whose_list_gets_no_answer_reads_unsynced_until_listed(server: Server) -> None:
    kind = watching(server, fresh=30.0, timeout=0.5, relist=0.2)
    try:
        wait_until(lambda: kind.status().synced, timeout=10, what="synced")
        server.list_held.set()
        wait_until(lambda: not kind.status().synced, timeout=10, what="unsynced once a list is past its timeout")
        status = kind.status()
        assert status.failing and "did not answer the list within 0.5s" in status.error
        assert kind.values() == ["a"]  # kept, but not to be used while not synced
        server.list_held.clear()
        wait_until(lambda: kind.status().synced, timeout=10, what="synced again once a list is answered")
    finally:
        kind.stop()


def test_a_polled_kind_whose_last_list_is_too_old_reads_stale(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "STALE_MARGIN", 0.3)
    kind = watching(server, fresh=30.0, relist=60.0)  # the next list is a minute away
    try:
        wait_until(lambda: kind.status().synced, timeout=10, what="synced")
        kind.fresh_seconds = 0.2  # as if the minute had passed and no list had come
        time.sleep(0.8)
        status = kind.status()
        assert not status.synced and status.error.startswith("stale:")
    finally:
        kind.stop()


def test_a_lists_410_lists_again_at_once_each_time_it_happens(server: Server) -> None:
    """A list's page answered 410 (its continue token outlived a compaction) is listed again at
    once, however often it happens over a kind's life; only twice in a row is it a failure."""
    kind = watching(server, fresh=30.0, relist=0.2)
    try:
        wait_until(lambda: kind.status().synced, timeout=10, what="synced")
        for seen in (1, 2, 3):  # compactions far apart
            server.lists_gone = 1
            wait_until(lambda n=seen: kind.status().expired >= n, timeout=10, what=f"410 number {seen}")
            lists = kind.status().lists
            wait_until(lambda n=lists: kind.status().lists > n, timeout=10, what="listed again")
            assert kind.status().failures == 0 and kind.status().synced, kind.status()
        server.lists_gone = 2
        wait_until(lambda: kind.status().failures == 1, timeout=10, what="twice in a row: a failure")
        assert "410 Gone to a list's next page twice in a row" in kind.status().error
        wait_until(lambda: kind.status().synced, timeout=10, what="listed after the pause")
    finally:
        kind.stop()
