"""The fault proxy (devenv/faults.py) against real local servers and real clients.

Aspects covered:
- pass-through: bodies both ways, keep-alive (one client connection for many requests, also
  across fault switching), a chunked stream relayed chunk by chunk, an Upgrade tunnel, 502 when
  the upstream is down, an upstream closing an idle connection (no 502, a POST sent once);
- each fault as a client sees it: delay delays, reset is a RST (connection error), blackhole
  times out the client's read and is closed promptly on clear, status answers without
  forwarding (429 with Retry-After), malformed breaks JSON decoding or the body's length, lost
  forwards (the server acts) and then answers a RST or a status instead of the server's answer;
- matching by method, path prefix and regex over the query; limits by count and time span; the
  first matching rule wins, so pass_through exempts;
- the record of requests (method, path, status, fault) and the HTTP control endpoint;
- stop() returns with black-holed and streaming connections open;
- https: the proxy serves the sandbox CA's certificate and forwards the bearer token, so the
  kubernetes client (list, watch) and the janitor's own request path work through a repointed
  kubeconfig;
- slack_sdk against the Slack stand-in through the proxy, retrying an injected 429.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client as k8s
from kubernetes import watch
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from devenv import access, pki
from devenv.controlplane import write_kubeconfig
from devenv.faults import FaultControl, FaultProxy, ProxyTls, repoint_kubeconfig
from devenv.procs import free_port, wait_until
from devenv.slack_standin import DEFAULT_TOKEN, SlackStandIn
from janitor import errors, kubeapi

TOKEN = "sandbox-admin-token"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the apiserver, Prometheus and the stand-in

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: list[dict[str, Any]], hold: threading.Event | None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                if hold is not None:
                    hold.wait(15)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the proxy stopped mid-stream (the stop test)
            self.close_connection = True

    def do_GET(self) -> None:
        state: dict[str, Any] = self.server.state  # type: ignore[attr-defined]
        state["hits"].append((self.command, self.path, self.headers.get("Authorization")))
        if self.path.startswith("/stream"):
            # The second event only after the client saw the first (15 s at most).
            self._stream([{"type": "ADDED", "n": 1}, {"type": "MODIFIED", "n": 2}], state["go"])
        elif self.path.startswith(CONFIGMAPS) and "watch=true" in self.path:
            cm = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "one", "resourceVersion": "7"}}
            self._stream([{"type": "ADDED", "object": cm}, {"type": "DELETED", "object": cm}], None)
        elif self.path.startswith("/ws"):
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while data := self.rfile.read1(4096):
                self.wfile.write(data.upper())
                self.wfile.flush()
            self.close_connection = True
        elif self.path.startswith("/idle-close"):
            self._send(200, {"then": "closed without saying so, as an idle timeout does"})
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            state["closed"].set()
        elif self.path.startswith(CONFIGMAPS):
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._send(401, {"kind": "Status", "code": 401, "message": "Unauthorized"})
            self._send(200, {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {},
                             "items": [{"metadata": {"name": "one", "namespace": "default"}}]})
        else:
            self._send(200, {"path": self.path, "hits": len(state["hits"])})

    def do_POST(self) -> None:
        state: dict[str, Any] = self.server.state  # type: ignore[attr-defined]
        state["hits"].append((self.command, self.path, self.headers.get("Authorization")))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(200, {"got": body.decode()})


class Upstream:
    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
        self.server.daemon_threads = True
        self.hits: list[tuple[str, str, str | None]] = []
        self.go, self.closed = threading.Event(), threading.Event()
        self.server.state = {"hits": self.hits, "go": self.go, "closed": self.closed}  # type: ignore[attr-defined]
        if context is not None:
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.scheme = "https" if context else "http"
        threading.Thread(target=self.server.serve_forever, args=(0.1,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.go.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def sandbox_pki(tmp_path_factory: pytest.TempPathFactory) -> pki.Pki:
    return pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture
def proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    with FaultProxy(upstream.url) as running:
        yield running


@pytest.fixture
def tls_upstream(sandbox_pki: pki.Pki) -> Iterator[Upstream]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sandbox_pki.serving_cert, sandbox_pki.serving_key)
    server = Upstream(context)
    yield server
    server.stop()


def _raw_request(proxy: FaultProxy, path: str, timeout: float = 10) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def _taken(proxy: FaultProxy, path: str, count: int = 1) -> None:
    """Wait until the proxy has read the request (so clearing or stopping comes after it)."""
    wait_until(lambda: len(proxy.requests(path=path)) >= count, timeout=10, what=f"request {path} at the proxy")


# ----- pass-through ------------------------------------------------------------------------------

def test_pass_through_keeps_alive_and_records(proxy: FaultProxy, upstream: Upstream) -> None:
    with requests.Session() as http:
        assert http.get(proxy.url + "/json?x=1").json()["path"] == "/json?x=1"
        assert http.post(proxy.url + "/echo", data=b"payload").json() == {"got": "payload"}
        assert http.get(proxy.url + "/json").status_code == 200
    seen = proxy.requests()
    assert [(s.method, s.path, s.query, s.status, s.fault) for s in seen] == [
        ("GET", "/json", "x=1", 200, None), ("POST", "/echo", "", 200, None), ("GET", "/json", "", 200, None)]
    assert len({s.conn for s in seen}) == 1, "keep-alive: one client connection for all three"
    assert len(upstream.hits) == 3
    assert proxy.requests(method="post") == [seen[1]]


def test_upstream_closing_an_idle_connection_is_no_fault(proxy: FaultProxy, upstream: Upstream) -> None:
    with requests.Session() as http:
        assert http.get(proxy.url + "/idle-close", timeout=10).status_code == 200
        assert upstream.closed.wait(10)
        # The proxy notices before sending on the dead connection: no 502, and a POST is sent once.
        assert http.post(proxy.url + "/echo", data=b"once", timeout=10).json() == {"got": "once"}
        assert http.get(proxy.url + "/json", timeout=10).status_code == 200
    assert [s.status for s in proxy.requests()] == [200, 200, 200]
    assert len({s.conn for s in proxy.requests()}) == 1
    assert [hit[:2] for hit in upstream.hits].count(("POST", "/echo")) == 1


def test_chunked_stream_is_relayed_as_it_arrives(proxy: FaultProxy, upstream: Upstream) -> None:
    response = requests.get(proxy.url + "/stream", stream=True, timeout=5)
    lines = response.iter_lines()
    # The upstream holds the second event until the first has reached this client (15 s at most):
    # through a proxy that buffered the body, this read would time out first.
    assert json.loads(next(lines)) == {"type": "ADDED", "n": 1}
    assert proxy.requests(path="/stream")[0].status == 200, "recorded while still streaming"
    upstream.go.set()
    assert json.loads(next(lines)) == {"type": "MODIFIED", "n": 2}
    assert list(lines) == []


def test_upgrade_is_tunnelled(proxy: FaultProxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101")
        sock.sendall(b"hello frames")
        echoed = b""
        while len(echoed) < len(b"hello frames"):
            echoed += sock.recv(4096)
        assert echoed == b"HELLO FRAMES"


def test_upstream_down_is_a_502() -> None:
    with FaultProxy(f"http://127.0.0.1:{free_port()}") as proxy:
        assert requests.get(proxy.url + "/json", timeout=10).status_code == 502
        assert proxy.requests()[0].status == 502


# ----- each fault ------------------------------------------------------------------------------

def test_delay_delays_then_forwards(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.delay(0.6, path="/json")
    began = time.monotonic()
    assert requests.get(proxy.url + "/json", timeout=10).status_code == 200
    assert time.monotonic() - began >= 0.6
    assert [(s.status, s.fault) for s in proxy.requests()] == [(200, "delay")]
    assert len(upstream.hits) == 1


def test_reset_is_a_rst(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.reset(path="/json")
    with pytest.raises(requests.ConnectionError):
        requests.get(proxy.url + "/json", timeout=10)
    with _raw_request(proxy, "/json") as sock, pytest.raises(ConnectionResetError):
        sock.recv(1024)  # a FIN would read b"" here
    assert [(s.status, s.fault) for s in proxy.requests()] == [(None, "reset")] * 2
    assert upstream.hits == []


def test_blackhole_times_out_the_read_until_cleared(proxy: FaultProxy, upstream: Upstream) -> None:
    rule = proxy.blackhole(path="/json")
    with pytest.raises(requests.ReadTimeout):
        requests.get(proxy.url + "/json", timeout=(5, 0.5))
    with _raw_request(proxy, "/json?held") as sock:
        _taken(proxy, "/json", count=2)
        proxy.clear(rule)
        assert sock.recv(1024) == b"", "clearing closes the held connection (10 s timeout otherwise)"
    assert requests.get(proxy.url + "/json", timeout=10).status_code == 200
    assert [s.fault for s in proxy.requests()] == ["blackhole", "blackhole", None]
    assert len(upstream.hits) == 1


def test_status_answers_without_forwarding(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.status(429, path="/limited")
    proxy.status(503, body={"error": "down"}, headers={"Retry-After": "7", "X-Why": "test"}, path="/down")
    proxy.status(409, path="/conflict")
    limited = requests.get(proxy.url + "/limited", timeout=10)
    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "1")
    assert limited.json()["reason"] == "TooManyRequests"
    down = requests.get(proxy.url + "/down", timeout=10)
    assert (down.status_code, down.headers["Retry-After"], down.headers["X-Why"]) == (503, "7", "test")
    assert down.json() == {"error": "down"}
    assert requests.get(proxy.url + "/conflict", timeout=10).status_code == 409
    assert [(s.status, s.fault) for s in proxy.requests()] == [(429, "status"), (503, "status"), (409, "status")]
    assert upstream.hits == []


def test_lost_forwards_then_fails_the_answer(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.lost(path="/reset", method="POST")
    proxy.lost(503, path="/gateway", method="POST")
    with pytest.raises(requests.ConnectionError):
        requests.post(proxy.url + "/reset", data=b"one", timeout=10)
    answer = requests.post(proxy.url + "/gateway", data=b"two", timeout=10)
    assert answer.status_code == 503 and answer.json()["reason"] == "ServiceUnavailable"
    assert [(hit[0], hit[1]) for hit in upstream.hits] == [("POST", "/reset"), ("POST", "/gateway")]
    assert [(s.status, s.fault) for s in proxy.requests()] == [(None, "lost"), (503, "lost")]


def test_malformed_bodies_break_the_client(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.malformed(path="/truncated")
    proxy.malformed("invalid", path="/invalid")
    proxy.malformed("short-body", path="/short")
    for path in ("/truncated", "/invalid"):
        response = requests.get(proxy.url + path, timeout=10)
        assert response.status_code == 200
        with pytest.raises(requests.JSONDecodeError):
            response.json()
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.ConnectionError)):
        requests.get(proxy.url + "/short", timeout=10)
    assert [(s.status, s.fault) for s in proxy.requests()] == [(200, "malformed")] * 3
    assert upstream.hits == []


# ----- matching, limits, switching ------------------------------------------------------------

def test_matching_by_method_prefix_and_regex(proxy: FaultProxy) -> None:
    proxy.status(500, method="POST", path="/echo")
    proxy.status(502, regex=r"[?&]watch=true")
    assert requests.get(proxy.url + "/echo", timeout=10).status_code == 200
    assert requests.post(proxy.url + "/echo", data=b"x", timeout=10).status_code == 500
    assert requests.get(proxy.url + "/json?watch=true", timeout=10).status_code == 502
    assert requests.get(proxy.url + "/json?watch=false", timeout=10).status_code == 200
    with pytest.raises(ValueError):
        proxy.status(500, regex="(")


def test_limits_by_count_and_time_span(proxy: FaultProxy) -> None:
    proxy.status(503, path="/json", times=2)
    codes = [requests.get(proxy.url + "/json", timeout=10).status_code for _ in range(3)]
    assert codes == [503, 503, 200]
    proxy.status(500, path="/span", for_seconds=0.5)
    proxy.status(504, path="/long", for_seconds=60)
    assert requests.get(proxy.url + "/span", timeout=10).status_code == 500
    assert requests.get(proxy.url + "/long", timeout=10).status_code == 504
    time.sleep(0.6)  # only a lower bound: past its span the rule can only be over
    assert requests.get(proxy.url + "/span", timeout=10).status_code == 200


def test_first_rule_wins_so_pass_through_exempts(proxy: FaultProxy) -> None:
    proxy.pass_through(path="/json/healthy")
    everything = proxy.status(500)
    assert requests.get(proxy.url + "/json/healthy", timeout=10).status_code == 200
    assert requests.get(proxy.url + "/json/other", timeout=10).status_code == 500
    proxy.clear(everything)
    assert requests.get(proxy.url + "/json/other", timeout=10).status_code == 200
    assert [s.fault for s in proxy.requests()] == ["pass", "status", None]


def test_keep_alive_survives_fault_switching(proxy: FaultProxy) -> None:
    codes = []
    with requests.Session() as http:
        codes.append(http.get(proxy.url + "/json", timeout=10).status_code)
        proxy.status(503, path="/json")
        codes.append(http.get(proxy.url + "/json", timeout=10).status_code)
        proxy.clear()
        proxy.delay(0.1, path="/json")
        codes.append(http.get(proxy.url + "/json", timeout=10).status_code)
        proxy.clear()
        proxy.malformed(path="/json")
        codes.append(http.get(proxy.url + "/json", timeout=10).status_code)
        proxy.clear()
        codes.append(http.get(proxy.url + "/json", timeout=10).status_code)
    assert codes == [200, 503, 200, 200, 200]
    assert len({s.conn for s in proxy.requests()}) == 1


def test_stop_does_not_hang_on_held_connections(upstream: Upstream) -> None:
    proxy = FaultProxy(upstream.url).start()
    proxy.blackhole(path="/json")
    held = _raw_request(proxy, "/json")
    stream = requests.get(proxy.url + "/stream", stream=True, timeout=10)
    next(stream.iter_lines())
    _taken(proxy, "/json")
    began = time.monotonic()
    proxy.stop()
    assert time.monotonic() - began < 8, "stop() returned (generous bound for a loaded machine)"
    with held:
        assert held.recv(1024) == b""
    stream.close()


def test_control_endpoint_switches_faults(proxy: FaultProxy) -> None:
    control = FaultControl(proxy.control_url)
    rule = control.status(429, headers={"Retry-After": "3"}, method="GET", path="/json", times=5)
    response = requests.get(proxy.url + "/json", timeout=10)
    assert (response.status_code, response.headers["Retry-After"]) == (429, "3")
    control.clear(rule)
    assert requests.get(proxy.url + "/json", timeout=10).status_code == 200
    assert [(s.path, s.status, s.fault) for s in control.requests(path="/json")] == [
        ("/json", 429, "status"), ("/json", 200, None)]
    control.forget()
    assert control.requests() == []
    with pytest.raises(ValueError, match="HTTP 400"):
        control.status(500, regex="(")  # checked by the proxy, answered as a 400
    refused = requests.post(proxy.control_url + "/faults", json={"fault": {"kind": "nonsense"}}, timeout=10)
    assert refused.status_code == 400


# ----- https, the kubernetes client, Slack ----------------------------------------------------

@pytest.fixture
def kubeconfig_via_proxy(tmp_path: Path, sandbox_pki: pki.Pki, tls_upstream: Upstream) -> Iterator[
        tuple[Path, FaultProxy]]:
    direct = write_kubeconfig(tmp_path / "direct.kubeconfig", server=tls_upstream.url, ca=sandbox_pki.ca_cert,
                              token=TOKEN, user="admin")
    with FaultProxy(tls_upstream.url, tls=ProxyTls.from_pki(sandbox_pki)) as proxy:
        assert proxy.url.startswith("https://")
        yield repoint_kubeconfig(direct, tmp_path / "proxied.kubeconfig", proxy.url), proxy


def test_https_kubernetes_client_through_the_proxy(kubeconfig_via_proxy: tuple[Path, FaultProxy],
                                                   tls_upstream: Upstream) -> None:
    kubeconfig, proxy = kubeconfig_via_proxy
    api = access.api_client(kubeconfig)
    listed = k8s.CoreV1Api(api).list_namespaced_config_map("default")
    assert [cm.metadata.name for cm in listed.items] == ["one"]
    assert tls_upstream.hits[-1][2] == f"Bearer {TOKEN}", "the token reached the upstream unchanged"
    response = kubeapi.request(api, "GET", CONFIGMAPS, doing="list ConfigMaps")
    assert json.loads(response.data)["kind"] == "ConfigMapList"
    events = watch.Watch().stream(k8s.CoreV1Api(api).list_namespaced_config_map, "default", timeout_seconds=5)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "one"), ("DELETED", "one")]

    proxy.status(409, path=CONFIGMAPS, times=1)
    with pytest.raises(errors.Conflict):
        kubeapi.request(api, "GET", CONFIGMAPS, doing="list ConfigMaps")
    proxy.malformed(path=CONFIGMAPS, times=1)
    with pytest.raises(json.JSONDecodeError):
        json.loads(kubeapi.request(api, "GET", CONFIGMAPS, doing="list ConfigMaps").data)
    proxy.reset(path=CONFIGMAPS)
    with pytest.raises(errors.ServerError):
        kubeapi.request(api, "GET", CONFIGMAPS, doing="list ConfigMaps")
    assert proxy.requests()[-1].fault == "reset"


@pytest.mark.parametrize("fault", ["blackhole", "reset", "429"])
def test_the_janitors_client_asks_once_per_request(kubeconfig_via_proxy: tuple[Path, FaultProxy],
                                                   fault: str) -> None:
    """A request that timed out, was reset or throttled fails after one try: the client library's
    default of three more tries would make one unanswered read cost four times --kube-timeout."""
    kubeconfig, proxy = kubeconfig_via_proxy
    api = kubeapi.connect(str(kubeconfig), timeout=(2.0, 0.5))
    {"blackhole": lambda: proxy.blackhole(path=CONFIGMAPS), "reset": lambda: proxy.reset(path=CONFIGMAPS),
     "429": lambda: proxy.status(429, path=CONFIGMAPS)}[fault]()
    with pytest.raises(errors.KubeError):
        kubeapi.request(api, "GET", CONFIGMAPS, doing="list ConfigMaps")
    assert len(proxy.requests(path=CONFIGMAPS)) == 1


def test_https_proxy_presents_the_sandbox_ca_certificate(kubeconfig_via_proxy: tuple[Path, FaultProxy],
                                                         sandbox_pki: pki.Pki) -> None:
    _, proxy = kubeconfig_via_proxy
    trusted = requests.get(proxy.url + "/json", verify=str(sandbox_pki.ca_cert), timeout=10)
    assert trusted.status_code == 200
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(proxy.url + "/json", timeout=10)  # the system store does not know the sandbox CA
    proxy.blackhole(path="/json")
    with pytest.raises(requests.ReadTimeout):
        requests.get(proxy.url + "/json", verify=str(sandbox_pki.ca_cert), timeout=(5, 0.5))


def test_slack_client_retries_an_injected_429() -> None:
    with SlackStandIn(channels={"C0GPUADMINS": "gpu-admins"}) as standin:
        with FaultProxy(f"http://127.0.0.1:{standin.port}") as proxy:
            slack = WebClient(token=DEFAULT_TOKEN, base_url=proxy.url + "/api/",
                              retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=1)])
            proxy.status(429, body={"ok": False, "error": "ratelimited"}, path="/api/chat.postMessage", times=1)
            assert slack.chat_postMessage(channel="C0GPUADMINS", text="hello")["ok"]
            posts = proxy.requests(path="/api/chat.postMessage")
            assert [(s.method, s.status, s.fault) for s in posts] == [("POST", 429, "status"), ("POST", 200, None)]
            assert len(standin.requests("chat.postMessage")) == 1
