"""`janitor run` against an apiserver that accepts connections and never answers (a partition).

Aspects covered:
- every request to the apiserver times out (--kube-timeout): the cycle fails and is counted as
  a Kubernetes error instead of waiting for ever;
- a cycle past its budget (--cycle-budget) is abandoned and counted, and /healthz says so (503);
- SIGTERM stops the daemon within its documented grace while a request hangs.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from devenv.procs import free_port, wait_until
from janitor.daemon import STOP_GRACE


class BlackHole:
    """A TCP server that takes every connection and every byte, and answers nothing."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(conn)

    def close(self) -> None:
        self.server.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    yield hole
    hole.close()


def kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: not-a-secret}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def metric(port: int, name: str) -> float:
    text = get(f"http://127.0.0.1:{port}/metrics")[1]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def janitor(config: Path, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "janitor.cli", "run", "--kubeconfig", str(config), "--interval", "1",
         "--metrics-port", str(port), "--namespaces", "team-a", "--state-namespace", "team-a",
         "--kinds", "ConfigMap", *extra],
        stdout=log.open("w"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=STOP_GRACE + 20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -1, time.monotonic() - began
    return code, time.monotonic() - began


def test_a_request_without_answer_times_out(black_hole: BlackHole, tmp_path: Path) -> None:
    port = free_port()
    proc = janitor(kubeconfig(tmp_path, black_hole.port), port, tmp_path / "log", "--kube-timeout", "2")
    try:
        wait_until(lambda: metric(port, 'janitor_errors_total{source="kubernetes"}') >= 1, timeout=40,
                   what="a cycle to fail on the request's timeout")
        assert black_hole.accepted >= 1
    finally:
        code, took = stop(proc)
    assert code == 0, (tmp_path / "log").read_text()[-3000:]


def test_a_cycle_past_its_budget_is_abandoned_and_healthz_says_so(black_hole: BlackHole, tmp_path: Path) -> None:
    port = free_port()
    proc = janitor(kubeconfig(tmp_path, black_hole.port), port, tmp_path / "log",
                   "--kube-timeout", "600", "--cycle-budget", "3")
    try:
        wait_until(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 503, timeout=40,
                   what="/healthz to report the abandoned cycle")
        assert "abandoned" in get(f"http://127.0.0.1:{port}/healthz")[1]
        assert metric(port, 'janitor_cycles_total{result="abandoned"}') >= 1
    finally:
        code, took = stop(proc)
    assert code == 0, (tmp_path / "log").read_text()[-3000:]
    assert took < STOP_GRACE + 15, f"SIGTERM took {took:.0f}s with a request hanging"
