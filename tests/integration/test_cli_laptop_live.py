"""The `janitor` command against the sandbox's apiserver, as a researcher or an admin on a laptop.

Aspects covered:
- with only ~/.kube/config (no $KUBECONFIG, no --kubeconfig) the CLI reads the cluster;
- a ServiceAccount with only `edit` in one namespace gets one line and exit 4 from `plan` and
  `explain` (they read the whole cluster), while `janitor keep` on its own workload works;
- a wrong Slack token is one line and exit 4 from `run --once`, after the cycle that needs no
  Slack ran; an unreachable Prometheus leaves the plan standing (evidence unavailable), exit 0;
- `-o json` and `-o yaml` carry every action with its object's UID and its reason's code and
  facts; the default table groups the same reason under one heading and keeps every line within
  $COLUMNS, `-o wide` keeps lines whole.
No output has a traceback.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import yaml
from kubernetes import client

from devenv import access
from janitor import annotations as a

JANITOR = [sys.executable, "-m", "janitor.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([*JANITOR, *args], capture_output=True, text=True, timeout=180,
                         env=env if env is not None else {k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert "Traceback" not in out.stderr, out.stderr
    return out


def on_a_terminal(*args: str, columns: int) -> list[str]:
    """The lines a person sees with a terminal `columns` wide (a pseudo-terminal as stdout)."""
    main, side = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.Popen([*JANITOR, *args], stdout=side, stderr=subprocess.PIPE, env=env)
    os.close(side)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.wait(timeout=180) == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode().replace("\r\n", "\n").splitlines()


def expired(core: client.CoreV1Api, namespace: str, name: str) -> str:
    made = core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, annotations={a.EXPIRES: "2020-01-01"})))
    return str(made.metadata.uid)


def scope(sandbox, namespace: str) -> list[str]:
    return ["--kubeconfig", str(sandbox.kubeconfig), "--namespaces", namespace, "--state-namespace", namespace,
            "--kinds", "ConfigMap"]


def test_only_a_home_kubeconfig_is_enough(sandbox, core: client.CoreV1Api, namespace: str, tmp_path: Path) -> None:
    expired(core, namespace, "old")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    shutil.copy(sandbox.kubeconfig, home / ".kube" / "config")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "COLUMNS")}
    env["HOME"] = str(home)
    out = run("plan", "--namespaces", namespace, "--state-namespace", namespace, "--kinds", "ConfigMap", env=env)
    assert out.returncode == 0, out.stderr
    assert f"ConfigMap/{namespace}/old" in out.stdout


def test_edit_in_one_namespace_keeps_but_cannot_plan(kube, core: client.CoreV1Api, namespace: str,
                                                     tmp_path: Path) -> None:
    alice = str(access.namespaced_account(kube, namespace, "alice", "edit", tmp_path / "alice.kubeconfig"))
    client.BatchV1Api(kube).create_namespaced_job(namespace, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}})

    for command in (["plan"], ["explain", f"Job/{namespace}/train"]):
        out = run(*command, "--kubeconfig", alice)
        assert out.returncode == 4, out.stderr
        [line] = out.stderr.splitlines()
        assert "HTTP 403" in line and f"system:serviceaccount:{namespace}:alice" in line
        assert "ask your cluster admins" in line

    out = run("keep", f"Job/{namespace}/train", "2d", "--kubeconfig", alice)
    assert out.returncode == 0, out.stderr
    job = client.BatchV1Api(kube).read_namespaced_job("train", namespace)
    assert a.KEEP_UNTIL in job.metadata.annotations


def test_a_wrong_slack_token_and_no_prometheus_are_one_line(sandbox, core: client.CoreV1Api, namespace: str,
                                                            tmp_path: Path) -> None:
    expired(core, namespace, "old")
    out = run("run", "--once", "--dry-run", *scope(sandbox, namespace), "--slack-token", "xoxb-wrong",
              "--slack-api-url", sandbox.slack_api_url)
    assert out.returncode == 4, out.stderr
    assert "Slack does not accept the bot token (" in out.stderr and "invalid_auth" in out.stderr
    assert f"HOLD (dry-run)  ConfigMap/{namespace}/old" in out.stdout  # the cycle ran

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = tmp_path / "idle.yaml"
    policy.write_text(yaml.safe_dump({"policies": [{
        "name": "idle-gpu", "match": {"namespaces": {"include": [namespace]}},
        "triggers": {"idleGpu": {"window": "1h"}}, "lifecycle": {"action": "report"}}]}))
    out = run("plan", *scope(sandbox, namespace), "--policies", str(policy), "--prometheus-url",
              f"http://127.0.0.1:{port}", "--prometheus-timeout", "5")
    assert out.returncode == 0, out.stderr
    assert "evidence unavailable (nothing judged idle on it): Prometheus" in out.stdout


def test_output_as_data_and_as_a_grouped_table(sandbox, core: client.CoreV1Api, namespace: str) -> None:
    uids = {f"old-{i:02d}-{uuid.uuid4().hex}": "" for i in range(12)}
    for name in uids:
        uids[name] = expired(core, namespace, name)

    out = run("plan", *scope(sandbox, namespace), "-o", "json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["apiVersion"] == "janitor/v1" and plan["kind"] == "Plan"
    acted = plan["actions"] + plan["held"]  # the caps may hold some
    assert {x["object"]["name"]: x["object"]["uid"] for x in acted} == uids
    first = acted[0]
    assert first["action"] == "delete" and first["rule"] == "expires"
    assert first["why"]["code"] == "expires-passed" and "2020-01-01" in first["why"]["text"]

    name = next(iter(uids))
    out = run("explain", f"ConfigMap/{namespace}/{name}", *scope(sandbox, namespace), "-o", "yaml")
    assert out.returncode == 0, out.stderr
    explained = yaml.safe_load(out.stdout)
    assert explained["object"]["uid"] == uids[name]
    assert [f["verdict"] for f in explained["findings"]] == ["delete"]

    lines = on_a_terminal("plan", *scope(sandbox, namespace), columns=80)
    assert max(len(line) for line in lines) <= 80
    headings = [line for line in lines if line.startswith(("DELETE", "HOLD"))]
    counts = [re.search(r"  (\d+) objects?  rule expires", h) for h in headings]
    assert sum(int(c.group(1)) for c in counts if c) == 12 and len(headings) <= 3
    assert sum(line.startswith(f"  ConfigMap/{namespace}/old-") for line in lines) == 12

    assert max(len(line) for line in on_a_terminal("plan", *scope(sandbox, namespace), "-o", "wide", columns=80)) > 80
    piped = run("plan", *scope(sandbox, namespace), env={**os.environ, "COLUMNS": "80"})
    assert max(len(line) for line in piped.stdout.splitlines()) > 80  # a script reads whole lines
