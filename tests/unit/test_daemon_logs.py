"""What the daemon's log says about its own state, as an admin on call reads it.

Aspects covered:
- leader election: taking the lease is news, not a problem (INFO); losing it while running is a
  WARNING; letting it go on a clean stop is INFO again;
- at start the settings are logged as short key=value lines, durations in words, and no secret
  (Slack tokens, a Prometheus password) ever: a secret only shows as set or not;
- an apiserver that does not answer is one line in the project's words when it starts, a "still"
  line with the count at most every 5 minutes while it lasts, and one when it answers again; no
  client library's text (urllib3's "Retrying ..."), no traceback, and the daemon's own parts (the
  lease, the watches, the cycles) do not say it again each time.
"""

from __future__ import annotations

import datetime
import http.server
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devenv import pki
from janitor import cli, errors, settings
from janitor.leader import LeaseElector, LeaseSettings
from janitor.outage import Outage

SECRETS = ("xoxb-bot-secret", "xapp-app-secret", "pw-secret")
WITH_SECRETS = ["--slack-token", SECRETS[0], "--slack-app-token", SECRETS[1],
                "--prometheus-url", f"http://reader:{SECRETS[2]}@prometheus:9090", "--admin-channel", "#gpu-admins",
                "--slack-signing-secret-file", "/etc/janitor/signing-secret"]

S = datetime.timedelta(seconds=1)


class Leases:
    """A Lease API that has no lease until one is created, then keeps it."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> client.V1Lease:
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
        return self.lease

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease, **_: Any) -> client.V1Lease:
        body.metadata.resource_version = "1"
        self.lease = body
        return body

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease, **_: Any) -> client.V1Lease:
        self.lease = body
        return body


def elector(clock: list[float]) -> LeaseElector:
    settings = LeaseSettings("kube-idle-janitor", identity="pod-a", lease_duration=15 * S, renew_deadline=10 * S,
                             retry_period=2 * S)
    found = LeaseElector(client.ApiClient(), settings, monotonic=lambda: clock[0])
    found.leases = Leases()  # type: ignore[assignment]
    return found


def levels(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    return [r.levelname for r in caplog.records if word in r.getMessage()]


def test_taking_the_lease_is_info_and_losing_it_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="janitor")
    clock = [100.0]
    leader = elector(clock)
    assert leader.try_acquire_or_renew()
    assert levels(caplog, "acquired") == ["INFO"]
    clock[0] += 11  # no renewal within the renew deadline: the fence closes
    assert not leader.is_leader()
    assert levels(caplog, "lost") == ["WARNING"]


def test_a_lease_write_refused_again_and_again_is_said_once_until_it_changes(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="janitor")
    leader = elector([100.0])
    leases = leader.leases

    def refused(namespace: str, body: client.V1Lease, **_: Any) -> client.V1Lease:
        raise ApiException(status=404, reason="Not Found")  # the state namespace does not exist

    leases.create_namespaced_lease = refused  # type: ignore[method-assign]
    for _ in range(30):
        assert not leader.try_acquire_or_renew()
    assert levels(caplog, "could not create lease") == ["WARNING"] + ["DEBUG"] * 29
    del leases.create_namespaced_lease  # the namespace is there now
    assert leader.try_acquire_or_renew()
    leases.create_namespaced_lease = refused  # type: ignore[method-assign]
    leases.lease = None
    caplog.clear()
    leader.try_acquire_or_renew()
    assert levels(caplog, "could not create lease") == ["WARNING"]  # after a success, said again


def test_letting_the_lease_go_on_a_clean_stop_is_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="janitor")
    leader = elector([100.0])
    assert leader.try_acquire_or_renew()
    leader.stop(release=True)
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert levels(caplog, "released") == ["INFO"]


def test_settings_are_short_key_value_lines_without_secrets() -> None:
    shown = settings.logged(settings.from_args(cli.build_parser().parse_args(["run", *WITH_SECRETS])))
    assert all("=" in line and len(line) <= 200 for line in shown), [line for line in shown if len(line) > 200]
    for expected in ("slack.token=(set)", "slack.app_token=(set)", "prometheus.password=(set)",
                     "prometheus.url=http://prometheus:9090", "prometheus.username=reader",
                     "slack.admin_channel=#gpu-admins", "slack.signing_secret_file=/etc/janitor/signing-secret",
                     "interval=1 min", "cycle_budget=10 min", "lifecycle.pace=1 h", "rails.dry_run=false",
                     "rails.protected_namespaces=kube-system,kube-public,kube-node-lease", "cluster.namespaces=all",
                     "rails.caps.per_hour=30", "cluster.kinds=Deployment,StatefulSet,DaemonSet,ReplicaSet,Job,CronJob,"
                     "Pod,ConfigMap,Service,PersistentVolumeClaim,Namespace,notebooks.kubeflow.org"):
        assert expected in shown, expected
    assert not [line for line in shown if any(secret in line for secret in SECRETS)]
    bare = settings.logged(settings.Settings())
    assert "slack.token=none" in bare and "prometheus.url=none" in bare


def dead_kubeconfig(tmp_path: Path) -> Path:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "down",
        "clusters": [{"name": "down", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                  "insecure-skip-tls-verify": True}}],
        "users": [{"name": "me", "user": {"token": "kube-token-secret"}}],
        "contexts": [{"name": "down", "context": {"cluster": "down", "user": "me"}}]}))
    return path


def janitor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "PROMETHEUS_URL")}
    return subprocess.run([sys.executable, "-m", "janitor.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_the_first_lines_of_a_run_are_its_version_and_settings(tmp_path: Path) -> None:
    out = janitor("run", "--once", "--kubeconfig", str(dead_kubeconfig(tmp_path)), "--kube-timeout", "2",
                  "--slack-api-url", "http://127.0.0.1:9/api/", *WITH_SECRETS)
    lines = out.stderr.splitlines()
    assert lines[0].startswith("INFO janitor: kube-idle-janitor ") and lines[0].endswith(" starting")
    assert "INFO janitor.settings: slack.token=(set)" in lines
    assert "Settings(" not in out.stderr
    assert not [line for line in lines if any(s in line for s in (*SECRETS, "kube-token-secret"))]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refused(tmp_path: Path) -> BaseException:
    """The error a real request to a port nobody listens on raises, with its whole chain."""
    from janitor import kubeapi

    api = kubeapi.connect(str(dead_kubeconfig(tmp_path)), (2.0, 2.0))
    try:
        kubeapi.request(api, "GET", "/version", doing="read the version")
    except errors.KubeError as e:
        return e
    raise AssertionError("a dead port answered")


def test_an_outage_is_said_once_then_every_five_minutes_and_when_it_ends(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    outage = Outage("the apiserver", clock=clock)
    error = refused(tmp_path)
    for _ in range(12 * 60):  # one failed request a second for 12 minutes
        outage.failed(error)
        clock.now += 1
    outage.answered()
    outage.answered()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "janitor.outage"]
    assert [level for level, _ in said] == ["ERROR", "WARNING", "WARNING", "INFO"], said
    first, still, again, back = (message for _, message in said)
    assert first.startswith("the apiserver does not answer (127.0.0.1:") and "connection refused" in first
    assert "nothing is read or changed until it answers" in first
    assert still.startswith("the apiserver still does not answer: 300 failed requests in the last 5 min (last: "
                            "127.0.0.1:")
    assert again.startswith("the apiserver still does not answer: 300 failed requests in the last 5 min")
    assert back == "the apiserver answers again, after 12 min without (720 failed requests)"
    assert not [m for _, m in said if "urllib3" in m or "HTTPSConnectionPool" in m or "Errno" in m]
    assert not outage.ongoing


class Answers(http.server.BaseHTTPRequestHandler):
    """An apiserver that knows nothing: every request is a 404 Status."""

    def log_message(self, *args: object) -> None:
        pass

    def _not_found(self) -> None:
        body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = _not_found  # noqa: N815


def test_the_daemon_says_an_outage_once_in_its_words_and_when_it_ends(tmp_path: Path) -> None:
    path = dead_kubeconfig(tmp_path)
    port = int(yaml.safe_load(path.read_text())["clusters"][0]["cluster"]["server"].rsplit(":", 1)[1])
    env = {k: v for k, v in os.environ.items() if k not in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "PROMETHEUS_URL")}
    daemon = subprocess.Popen([sys.executable, "-m", "janitor.cli", "run", "--kubeconfig", str(path), "--kube-timeout",
                               "2", "--interval", "1", "--leader-elect", "--lease-duration", "3.5", "--metrics-port",
                               "0"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        time.sleep(8)  # some 15 lease attempts, and the watches' first tries
        own = pki.create(tmp_path / "pki")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(own.serving_cert, own.serving_key)
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Answers)
        httpd.daemon_threads = True
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        time.sleep(3)
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    httpd.shutdown()
    records = [json.loads(line) for line in err.splitlines()]  # JSON lines, as the daemon always logged
    said = [r for r in records if "setting" not in r]
    for raw in ("urllib3", "Retrying", "HTTPSConnectionPool", "Max retries", "Errno", "Traceback"):
        assert not [r for r in said if raw in json.dumps(r)], raw
    outage = [r["message"] for r in said if r["logger"] == "janitor.outage"]
    assert len(outage) == 2, outage
    assert outage[0].startswith(f"the apiserver does not answer (127.0.0.1:{port}: connection refused)")
    assert outage[1].startswith("the apiserver answers again, after ")
    dead = said[:[r["message"] for r in said].index(outage[1])]
    loud = [r["message"] for r in dead if r["level"] in ("WARNING", "ERROR") and r["logger"] != "janitor.outage"]
    assert len(loud) <= 2, loud  # the lease not held, said once, is all the rest may say
