"""`janitor run` as a daemon process against the sandbox.

Aspects covered:
- cycles repeat on the interval: an object that expires while the daemon runs is deleted
  without a restart;
- /healthz answers 200 and /metrics counts the deletion by outcome, with the held-reason
  series present at zero; what it serves passes `promtool check metrics`, without `_created` series;
- SIGTERM stops it cleanly (exit 0);
- `janitor run --once --dry-run` prints the plan, deletes nothing and exits 0;
- with an app token the daemon holds a Socket Mode connection for the buttons (metric
  `janitor_slack_socket_connected`), and the token never reaches the log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request

from kubernetes import client

from devenv.procs import free_port, wait_until
from devenv.prometheus_release import release
from devenv.slack_interactive import APP_TOKEN
from janitor import annotations as a


def cli(sandbox, namespace: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "janitor.cli", "run", "--kubeconfig", str(sandbox.kubeconfig),
            "--namespaces", namespace, "--state-namespace", namespace, "--kinds", "ConfigMap", *extra]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_daemon_deletes_on_schedule_and_serves_health_and_metrics(sandbox, core: client.CoreV1Api, namespace: str,
                                                                  tmp_path) -> None:
    port = free_port()
    log = open(tmp_path / "janitor.log", "w")
    proc = subprocess.Popen(cli(sandbox, namespace, "--interval", "2", "--metrics-port", str(port)),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=30, what="healthz")
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="later", annotations={a.EXPIRES: "2020-01-01"})))

        def deleted() -> bool:
            return "later" not in {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}

        wait_until(deleted, timeout=30, what="the daemon to delete the expired ConfigMap")
        # The cycle's outcomes are counted when the cycle ends, a moment after the delete itself.
        done = 'janitor_actions_total{action="delete",outcome="done",policy="ttl-expiry",rule="expires"} 1.0'
        wait_until(lambda: done in get(f"http://127.0.0.1:{port}/metrics")[1], timeout=30,
                   what="the deletion to be counted in /metrics")
        status, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert done in metrics
        assert 'janitor_deletions_held_total{reason="cap"} 0.0' in metrics
        assert 'janitor_cycles_total{result="success"}' in metrics
        for phase in ("observe", "decide", "act"):  # where each cycle's time went
            counted = re.search(rf'janitor_cycle_phase_seconds_count{{phase="{phase}"}} (\S+)', metrics)
            assert counted is not None and float(counted.group(1)) >= 1, phase
        assert re.search(r"janitor_decide_cpu_seconds_total [0-9.e-]+", metrics)
        # What Prometheus scrapes passes promtool's lint (base units, _total) and has no _created series.
        checked = subprocess.run([release().promtool, "check", "metrics"], input=metrics.encode(), capture_output=True,
                                 timeout=60)
        assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
        assert "_created" not in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        log.close()
    assert code == 0, (tmp_path / "janitor.log").read_text()[-2000:]
    audit = [line for line in (tmp_path / "janitor.log").read_text().splitlines() if '"audit": true' in line]
    assert len(audit) == 1 and '"outcome": "done"' in audit[0] and f'ConfigMap/{namespace}/later' in audit[0]


def test_run_once_dry_run_deletes_nothing(sandbox, core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="old", annotations={a.EXPIRES: "2020-01-01"})))
    out = subprocess.run(cli(sandbox, namespace, "--once", "--dry-run"), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"HOLD (dry-run)  ConfigMap/{namespace}/old" in out.stdout
    assert "old" in {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}


def test_a_wrong_slack_token_shows_at_start(sandbox, namespace: str, tmp_path) -> None:
    """Not when the first warning is due, days later: /readyz, a metric (and its alert) at once."""
    port = free_port()
    log = open(tmp_path / "janitor.log", "w")
    proc = subprocess.Popen(cli(sandbox, namespace, "--interval", "2", "--metrics-port", str(port),
                                "--slack-token", "xoxb-wrong", "--slack-api-url", sandbox.slack_api_url),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: get(f"http://127.0.0.1:{port}/metrics")[0] == 200, timeout=30, what="/metrics")
        wait_until(lambda: "janitor_slack_token_valid 0.0" in get(f"http://127.0.0.1:{port}/metrics")[1],
                   timeout=30, what="the token check")
        status, text = get(f"http://127.0.0.1:{port}/readyz")
        assert status == 503 and "Slack does not accept the bot token: invalid_auth" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        log.close()
    assert code == 0
    assert "xoxb-wrong" not in (tmp_path / "janitor.log").read_text()


def test_the_daemon_takes_clicks_over_socket_mode(sandbox, slack, namespace: str, tmp_path) -> None:
    """With an app token the daemon opens Socket Mode at start, says so in a metric, and closes it on SIGTERM."""
    port = free_port()
    log = open(tmp_path / "janitor.log", "w")
    env = {**os.environ, "SLACK_APP_TOKEN": APP_TOKEN}
    proc = subprocess.Popen(cli(sandbox, namespace, "--interval", "5", "--metrics-port", str(port),
                                "--slack-token", sandbox.slack_token, "--slack-api-url", sandbox.slack_api_url),
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: "janitor_slack_socket_connected 1.0" in get(f"http://127.0.0.1:{port}/metrics")[1],
                   timeout=30, what="the Socket Mode connection")
        [opened] = slack.requests("apps.connections.open")
        assert opened.token == APP_TOKEN and opened.error is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        log.close()
    assert code == 0
    text = (tmp_path / "janitor.log").read_text()
    assert "Slack buttons: SocketReceiver" in text and APP_TOKEN not in text
