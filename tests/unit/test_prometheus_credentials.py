"""Prometheus credentials: from files, sent to Prometheus, never logged.

Aspects covered:
- a URL given with `user:password@` is used with basic auth, and neither the password nor the
  userinfo reaches the settings' repr (the start-up log line) or any log line of a cycle;
- --prometheus-bearer-token-file, --prometheus-username with --prometheus-password-file and
  --prometheus-ca-file are read when the connection is made (a rotated Secret is picked up), and
  the queries carry them (a real local HTTP server records what arrives);
- a missing credentials file is a one-line error naming the file.
"""

from __future__ import annotations

import base64
import http.server
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from janitor.cli import build_parser
from janitor.observe.observation import prometheus_source
from janitor.settings import from_args

SECRET = "s3cret-Pa55"


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Recorder.seen.append(dict(self.headers))
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def settings_of(*argv: str):  # noqa: ANN201
    return from_args(build_parser().parse_args(["run", *argv]))


def query(settings) -> dict[str, str]:  # noqa: ANN001
    import datetime

    with prometheus_source(settings) as source:
        source.instant("up", datetime.datetime.now(datetime.timezone.utc))
    return Recorder.seen[-1]


def test_userinfo_in_the_url_is_used_and_never_shown(prometheus: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = settings_of("--prometheus-url", f"http://bob:{SECRET}@{prometheus}")
    assert SECRET not in repr(settings) and "bob:" not in repr(settings)
    headers = query(settings)
    assert headers["Authorization"] == "Basic " + base64.b64encode(f"bob:{SECRET}".encode()).decode()
    assert SECRET not in caplog.text


def test_credentials_come_from_files_read_at_connection(prometheus: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    settings = settings_of("--prometheus-url", f"http://{prometheus}", "--prometheus-bearer-token-file", str(token))
    assert query(settings)["Authorization"] == "Bearer tok-1"
    token.write_text("tok-2\n")  # the Secret was rotated
    assert query(settings)["Authorization"] == "Bearer tok-2"
    assert "tok-" not in repr(settings)

    password = tmp_path / "password"
    password.write_text(SECRET)
    settings = settings_of("--prometheus-url", f"http://{prometheus}", "--prometheus-username", "bob",
                           "--prometheus-password-file", str(password))
    assert query(settings)["Authorization"] == "Basic " + base64.b64encode(f"bob:{SECRET}".encode()).decode()
    assert SECRET not in repr(settings)


def test_a_missing_credentials_file_names_the_file(prometheus: str, tmp_path: Path) -> None:
    settings = settings_of("--prometheus-url", f"http://{prometheus}", "--prometheus-bearer-token-file",
                           str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="nope"):
        query(settings)


def test_an_unreadable_credentials_file_makes_the_evidence_unknown_not_the_cycle_fail(
        prometheus: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from janitor import cycle
    from janitor.policy.model import IdleGpu, Mode, Policy

    settings = settings_of("--prometheus-url", f"http://{prometheus}", "--prometheus-bearer-token-file",
                           str(tmp_path / "nope"))
    with cycle.prometheus(settings, [Policy("idle-gpu", (IdleGpu(),), mode=Mode.ENFORCE)]) as source:
        assert source is None
    assert "nothing is judged idle" in caplog.text and "nope" in caplog.text
