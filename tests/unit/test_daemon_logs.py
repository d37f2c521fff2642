"""What the daemon's log says about its own state, as an admin on call reads it.

Aspects covered:
- leader election: taking the lease is news, not a problem (INFO); losing it while running is a
  WARNING; letting it go on a clean stop is INFO again;
- at start the settings are logged as short key=value lines, durations in words, and no secret
  (Slack tokens, a Prometheus password) ever: a secret only shows as set or not.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from janitor import cli, settings
from janitor.leader import LeaseElector, LeaseSettings

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
