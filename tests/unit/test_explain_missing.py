"""`janitor explain` and `kubectl janitor explain` on an object that is not there.

Against a small apiserver on this machine that serves one Job (team-a/train) and empty lists of
everything else.

Aspects covered:
- `janitor explain KIND/NAMESPACE/NAME` on an object that does not exist says so, naming the
  kind, the namespace and the name, on stderr, and exits 1 (as -o json does): not "no janitor
  rule applies" and exit 0, which reads as "it is there and safe";
- on an object that exists and no rule applies to, it still says that, and exits 0;
- `kubectl janitor explain` says the same of a workload that is not there, and exits 1.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

JANITOR = [sys.executable, "-m", "janitor.cli"]
PLUGIN = [sys.executable, "-m", "janitor.plugin.main"]
JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-train", "resourceVersion": "7",
                    "creationTimestamp": "2026-11-20T09:00:00Z"},
       "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}, "status": {}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "team-a", "uid": "uid-ns", "resourceVersion": "3",
                          "creationTimestamp": "2026-11-01T09:00:00Z"}}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        text = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.send_header("Date", email.utils.format_datetime(datetime.datetime.now(datetime.timezone.utc), usegmt=True))
        self.end_headers()
        self.wfile.write(text)

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        if path == "/version":
            self._answer(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0"})
            return
        parts = path.strip("/").split("/")
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        if parts[0] not in ("api", "apis") or (parts[0] == "apis" and len(parts) < 3):
            return self._not_found()
        if rest == ["namespaces"]:
            return self._answer(200, {"kind": "NamespaceList", "items": [NAMESPACE], "metadata": {}})
        if rest[:1] == ["namespaces"] and len(rest) == 2:
            return self._answer(200, NAMESPACE) if rest[1] == "team-a" else self._not_found()
        if rest[:1] == ["namespaces"]:
            rest = rest[2:]
        items = [JOB] if rest[:1] == ["jobs"] else []
        if len(rest) == 1:
            return self._answer(200, {"kind": "List", "items": items, "metadata": {"resourceVersion": "9"}})
        found = [i for i in items if i["metadata"]["name"] == rest[1]]
        return self._answer(200, found[0]) if found else self._not_found()

    def _not_found(self) -> None:
        self._answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                           "code": 404, "message": f"{self.path} not found"})


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": f"http://127.0.0.1:{httpd.server_address[1]}"}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me", "namespace": "team-a"}}]}))
    yield path
    httpd.shutdown()
    httpd.server_close()


def run(command: list[str], *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "COLUMNS")}
    out = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, env={**env, "HOME": str(home)})
    assert "Traceback" not in out.stderr, out.stderr
    return out


@pytest.mark.parametrize("output", ["table", "json"])
def test_explain_says_an_object_that_does_not_exist_does_not(kubeconfig: Path, tmp_path: Path, output: str) -> None:
    out = run(JANITOR, "explain", "Job/team-a/train-7", "--kubeconfig", str(kubeconfig), "-o", output, home=tmp_path)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stderr.splitlines() == ["janitor explain: Job/team-a/train-7: there is no Job named train-7 in "
                                       "namespace team-a"]
    assert "no janitor rule applies" not in out.stdout
    lower = run(JANITOR, "explain", "job/team-a/train-7", "--kubeconfig", str(kubeconfig), home=tmp_path)
    assert lower.returncode == 1 and "there is no Job named train-7 in namespace team-a" in lower.stderr


def test_explain_of_an_object_no_rule_applies_to_says_that(kubeconfig: Path, tmp_path: Path) -> None:
    out = run(JANITOR, "explain", "Job/team-a/train", "--kubeconfig", str(kubeconfig), home=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Job/team-a/train: no janitor rule applies" in out.stdout


def test_kubectl_janitor_explain_says_a_workload_that_does_not_exist_does_not(kubeconfig: Path,
                                                                              tmp_path: Path) -> None:
    out = run(PLUGIN, "explain", "job/train-7", "--kubeconfig", str(kubeconfig), home=tmp_path)
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines() == ["kubectl janitor explain: job/train-7 not found in namespace team-a"]
    assert run(PLUGIN, "explain", "job/train", "--kubeconfig", str(kubeconfig), home=tmp_path).returncode == 0
