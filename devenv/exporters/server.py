"""One HTTP server for all synthetic exporters, plus the control API tests use to set values.

Prometheus scrapes `/dcgm/<node>/metrics`, `/cadvisor/<node>/metrics`,
`/node-exporter/<node>/metrics` and `/kube-state-metrics/metrics`; every scrape serves the
providers' current pods and nodes, so series follow the real pod objects, from a cache that
re-renders a target only when its inputs changed (`devenv.exporters.cache`). With `aggregate`
(big sandboxes) `/dcgm/metrics`, `/cadvisor/metrics` and `/node-exporter/metrics` serve all nodes
at once. Tests change usage through `/_values` (or `ValuesControl`, its client), which works the
same whether the server runs in the test process or in the sandbox supervisor; the same values
switch dcgm-exporter's `pod_uid` label on, per node or for all (`set_pod_uid`, off by default).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

from devenv.exporters.cache import RenderCache
from devenv.exporters.model import NodeView, PodView
from devenv.exporters.render import EXPORTERS, PER_NODE
from devenv.exporters.targets import AGGREGATE_PATHS, DcgmStyle
from devenv.exporters.values import Values, ValueSetters

log = logging.getLogger(__name__)

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class ExporterServer:
    """Serves the exporters on 127.0.0.1 (`port=0`: the kernel picks a free port).

    `hostname_label` selects the dcgm-exporter generation ("Hostname" or "hostname"). The
    providers are called on every scrape; make them cheap (see `devenv.podviews`). `aggregate`
    (a dcgm label style, as the Prometheus config uses) also serves one target per exporter.
    """

    def __init__(
        self,
        pods_provider: Callable[[], Sequence[PodView]],
        nodes_provider: Callable[[], Sequence[NodeView]],
        values: Values,
        clock: Callable[[], float] = time.time,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        hostname_label: str | None = "Hostname",
        aggregate: DcgmStyle | None = None,
    ) -> None:
        self.pods_provider = pods_provider
        self.nodes_provider = nodes_provider
        self.values = values
        self.clock = clock
        self.hostname_label = hostname_label
        self.cache = RenderCache(pods_provider, nodes_provider, values, hostname_label=hostname_label,
                                 aggregate=aggregate)
        self._address = (host, port)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> ExporterServer:
        if self._httpd is not None:
            return self
        handler = type("Handler", (_Handler,), {"exporters": self})
        self._httpd = ThreadingHTTPServer(self._address, handler)
        self._httpd.daemon_threads = True
        # A short poll interval makes stop() quick (shutdown waits for the next poll).
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="exporters", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd = self._thread = None

    def __enter__(self) -> ExporterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ExporterServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """`host:port` as a Prometheus static target."""
        return f"127.0.0.1:{self.port}"

    def control(self) -> ValuesControl:
        return ValuesControl(self.url)

    # -- rendering -----------------------------------------------------------------------------
    def render(self, exporter: str, node: str | None) -> str:
        """Exposition text of one target; KeyError if the exporter or node is unknown."""
        return self.body(exporter, node).decode()

    def body(self, exporter: str, node: str | None) -> bytes:
        """What a scrape of one target gets (`node` "*": the aggregate of a per-node exporter)."""
        if node == "*":
            return self.cache.aggregate_body(exporter, self.clock())
        return self.cache.body(exporter, node, self.clock())


_AGGREGATE_ROUTES = {path: exporter for exporter, path in AGGREGATE_PATHS.items()}


def _route(path: str, aggregate: bool = False) -> tuple[str, str | None] | None:
    """`/dcgm/<node>/metrics` -> ("dcgm", node); `/kube-state-metrics/metrics` -> (ksm, None);
    with `aggregate`, `/dcgm/metrics` -> ("dcgm", "*")."""
    if aggregate and path in _AGGREGATE_ROUTES:
        return _AGGREGATE_ROUTES[path], "*"
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts == ["kube-state-metrics", "metrics"]:
        return "kube-state-metrics", None
    if len(parts) == 3 and parts[0] in PER_NODE and parts[2] == "metrics":
        return parts[0], parts[1]
    return None


class _Handler(BaseHTTPRequestHandler):
    exporters: ExporterServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s " + format, self.address_string(), *args)

    def _reply(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the scraper gave up (timeout, shutdown)
            log.warning("%s went away before %s was sent (%d bytes)", self.address_string(), self.path, len(body))
            self.close_connection = True

    def _json(self, code: int, obj: Any) -> None:
        self._reply(code, json.dumps(obj).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path = urlparse(self.path).path
        if path == "/_values":
            return self._json(200, self.exporters.values.to_json())
        if path in ("/", "/healthz"):
            return self._json(200, {"exporters": list(EXPORTERS)})
        target = _route(path, aggregate=self.exporters.cache.aggregate is not None)
        if target is None:
            return self._json(404, {"error": f"no such path {path}"})
        if target[1] != "*" and self.exporters.values.target_down(*target, self.exporters.clock()):
            return self._reply(503, b"exporter down (sandbox control)\n", "text/plain")
        try:
            body = self.exporters.body(*target)
        except KeyError as e:
            return self._json(404, {"error": f"unknown node or exporter {e}"})
        except Exception as e:  # a broken provider shows as a failed scrape (up == 0), logged
            log.exception("rendering %s failed", path)
            return self._reply(500, f"render failed: {e}\n".encode(), "text/plain")
        self._reply(200, body, TEXT_FORMAT)

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        path = urlparse(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path == "/_values/reset":
            self.exporters.values.reset()
            return self._json(200, {"ok": True})
        if path != "/_values":
            return self._json(404, {"error": f"no such path {path}"})
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            self.exporters.values.apply(body)
        except (ValueError, KeyError, TypeError) as e:
            return self._json(400, {"error": f"{type(e).__name__}: {e}"})
        self._json(200, {"ok": True})


class ControlError(RuntimeError):
    """The control API refused an update; the message carries the server's reason."""


class ValuesControl(ValueSetters):
    """Client of `/_values` with the same typed setters as `Values` (stdlib urllib only)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _request(self, path: str, body: dict[str, Any] | None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method="GET" if body is None else "POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raise ControlError(f"{req.method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}") from e

    def _send(self, body: dict[str, Any]) -> None:
        if body.get("reset") and len(body) == 1:
            self._request("/_values/reset", {})
        else:
            self._request("/_values", body)

    def get(self) -> dict[str, Any]:
        """The server's full state, loadable with `Values.from_json` (e.g. for a backfill)."""
        return dict(self._request("/_values", None))
