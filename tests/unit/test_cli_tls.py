"""A kubeconfig whose CA is not the apiserver's, against a real TLS server on this machine.

Aspects covered:
- `janitor` and `kubectl janitor` name the failure as TLS (the certificate is not trusted, and
  OpenSSL's reason whole), say what to check (the kubeconfig's certificate-authority-data, the
  cluster's CA, --context), and exit 3 like any other kubeconfig problem, not 5 ("did not
  answer"): the server answered, with a certificate the kubeconfig does not trust;
- with the right CA the same server is reached (so the failure above is the CA's);
- `--help` of both commands says so with the exit codes.
"""

from __future__ import annotations

import base64
import http.server
import os
import re
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devenv import pki

JANITOR = [sys.executable, "-m", "janitor.cli"]
PLUGIN = [sys.executable, "-m", "janitor.plugin.main"]


class Answers(http.server.BaseHTTPRequestHandler):
    """An apiserver that knows nothing: every GET is a 404 Status."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,' \
               b'"message":"not found"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, pki.Pki]]:
    """A TLS server with the certificate of its own CA; its address and that CA."""
    own = pki.create(tmp_path / "server-pki")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(own.serving_cert, own.serving_key)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    httpd.daemon_threads = True
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}", own
    httpd.shutdown()
    httpd.server_close()


def kubeconfig(path: Path, server: str, ca: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me", "namespace": "team-a"}}]}))
    return path


def run(command: list[str], *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    out = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, env={**env, "HOME": str(home)})
    assert "Traceback" not in out.stderr, out.stderr
    return out


@pytest.mark.parametrize("command", [[*JANITOR, "plan"], [*JANITOR, "explain", "Job/team-a/train"],
                                     [*JANITOR, "keep", "Job/team-a/train", "2d"], [*PLUGIN, "status"],
                                     [*PLUGIN, "explain", "job/train"]],
                         ids=["plan", "explain", "keep", "kubectl-status", "kubectl-explain"])
def test_a_cluster_ca_that_does_not_match_is_named_and_exits_3(server: tuple[str, pki.Pki], tmp_path: Path,
                                                               command: list[str]) -> None:
    address, _ = server
    other = pki.create(tmp_path / "another-ca")
    path = kubeconfig(tmp_path / "wrong-ca.yaml", address, other.ca_cert)
    out = run(command, "--kubeconfig", str(path), home=tmp_path)
    assert out.returncode == 3, out.stderr
    [line] = out.stderr.splitlines()
    host = address.removeprefix("https://")
    assert f"{host}: TLS: the apiserver's certificate is not trusted" in line
    assert re.search(r"\(certificate verify failed: [a-z ]+\) -- ", line)  # OpenSSL's reason, whole
    for what_to_check in ("certificate-authority-data", "the cluster's CA", "--context"):
        assert what_to_check in line
    assert "did not answer" not in line and "VPN" not in line


def test_with_the_right_ca_the_same_server_is_reached(server: tuple[str, pki.Pki], tmp_path: Path) -> None:
    address, own = server
    out = run([*PLUGIN, "explain", "job/train"], "--kubeconfig", str(kubeconfig(tmp_path / "k.yaml", address,
                                                                                  own.ca_cert)), home=tmp_path)
    assert out.returncode == 1 and "not found" in out.stderr and "TLS" not in out.stderr


@pytest.mark.parametrize("command", [JANITOR, PLUGIN], ids=["janitor", "kubectl-janitor"])
def test_help_says_a_cluster_ca_that_does_not_match_exits_3(command: list[str], tmp_path: Path) -> None:
    shown = run(command, "--help", home=tmp_path).stdout
    codes = shown[shown.index("exit codes:"):]
    assert "3  no kubeconfig, a broken one, an unknown context," in codes
    assert "a cluster CA that does not match (TLS)" in codes
