"""The HTTP endpoints both processes serve (/healthz, /readyz, /metrics), on a threaded server.

A probe is only as good as the server behind it: the standard library's WSGI server answers one
connection at a time, so one client that connects and sends nothing would block the liveness
probe until the kubelet restarts a healthy process. Each connection gets its own thread, and a
connection that sends nothing for a while is dropped.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

Check = Callable[[], tuple[bool, str]]
IDLE_SECONDS = 10.0  # a connection that sends nothing this long is closed


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck client never holds the process open at exit


class _Handler(WSGIRequestHandler):
    timeout = IDLE_SECONDS

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


def serve(registry: CollectorRegistry, port: int, checks: dict[str, Check]) -> threading.Thread:
    """/metrics from `registry`, and each path of `checks` as 200 or 503 with the check's text."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        check = checks.get(str(environ.get("PATH_INFO")))
        if check is not None:
            ok, text = check()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [text.encode()]
        answer: Iterable[bytes] = metrics_app(environ, start_response)
        return answer

    server = make_server("0.0.0.0", port, app, server_class=_Server, handler_class=_Handler)
    thread = threading.Thread(target=server.serve_forever, name="endpoints", daemon=True)
    thread.start()
    return thread
