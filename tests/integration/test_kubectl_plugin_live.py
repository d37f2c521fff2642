"""`kubectl janitor` on the sandbox, as researchers with only `view` or `edit` in their namespace use it.

A real janitor cycle marks an idle GPU Job (and warns its owner on the Slack stand-in); a Job with
its own janitor/ttl sits beside it. Then, as ServiceAccounts bound to the built-in ClusterRoles in
that one namespace:

Aspects covered:
- `view`: `status` lists both (policy, action, deadline in UTC and from now, plain words) in the
  kubeconfig context's namespace without -n; `-o json` is a janitor/v1 Status whose deadline, cap
  and words are the ones the janitor wrote; `explain` shows the numbers, the cap, the command and
  the janitor's IdleMarked Event; `keep` is one line and exit 4; `status -A` is one line and exit 4;
- `edit`: `keep` past the policy's cap is refused with the cap (exit 1, nothing written), `keep
  job/train 2d` writes janitor/keep-until, and the janitor's next cycle moves janitor/deadline and
  janitor/why to it, which `status` then shows;
- run through kubectl itself (`kubectl janitor ...` with the plugin on the PATH), the same output:
  kubectl finds the plugin. No output has a traceback.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from test_lifecycle import ALICE, create_job, history, janitor_for, notes_of, write_policy

from devenv import access
from devenv.history import prometheus_with_history
from devenv.testbin import cached_binaries
from janitor import annotations as a
from janitor.why_note import WhyNote

BIN = Path(sys.executable).parent
PLUGIN = BIN / "kubectl-janitor"


def bound(kube: client.ApiClient, namespace: str, name: str, role: str,
          path: Path) -> str:
    """A kubeconfig of ServiceAccount `name` with ClusterRole `role` in `namespace` only, whose
    context names that namespace (as a researcher's would)."""
    return str(access.namespaced_account(kube, namespace, name, role, path))


def plugin(*args: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "KUBECONFIG")}
    out = subprocess.run([str(PLUGIN), *args, "--kubeconfig", kubeconfig], capture_output=True, text=True,
                         timeout=60, env=env)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def kubectl() -> str | None:
    """The sandbox's kubectl (built with the control plane), else one on the PATH."""
    built = cached_binaries()
    if built is not None and (built / "kubectl").exists():
        return str(built / "kubectl")
    return shutil.which("kubectl")


@pytest.fixture
def marked(kube, core, namespace, sandbox, tmp_path, exporter_values, slack) -> Iterator[callable]:
    """An idle GPU Job `train` marked and warned by a real cycle (warnBefore 1h, maxExtension 7d),
    and a busy Job `scratch` with its own janitor/ttl; yields the janitor's next cycle."""
    slack.add_user(*ALICE)
    create_job(kube, namespace, "train")
    create_job(kube, namespace, "scratch", notes={a.TTL: "7d"})
    history(core, namespace, exporter_values, {"train": 0, "scratch": 90})
    server, _ = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir)
    try:
        janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace, warnBefore="1h"),
                              server.url)
        janitor.run_cycle()
        notes = notes_of(kube, namespace, "train")
        assert a.WARNED_AT in notes and a.WHY in notes, notes
        yield janitor.run_cycle
    finally:
        server.stop()


def test_view_sees_and_explains_edit_keeps_within_the_cap(kube, core, namespace, tmp_path, marked) -> None:
    viewer = bound(kube, namespace, "viewer", "view", tmp_path / "viewer.kubeconfig")
    editor = bound(kube, namespace, "editor", "edit", tmp_path / "editor.kubeconfig")
    notes = notes_of(kube, namespace, "train")
    deadline, marked_at = a.parse_expires(notes[a.DEADLINE]), a.parse_expires(notes[a.MARKED_AT])
    cap = marked_at + datetime.timedelta(days=7)

    # view: status in the context's namespace, no -n
    out = plugin("status", kubeconfig=viewer)
    # The sandbox serves Kubeflow's Notebooks, which the built-in view role does not cover: said, not fatal.
    assert out.returncode == 0 and out.stderr in (
        "", f"kubectl janitor status: notebooks not shown: you may not list them in {namespace}\n"), out.stderr
    header, train, scratch, _, footer = out.stdout.splitlines()
    assert header.split() == ["WORKLOAD", "POLICY", "ACTION", "DEADLINE", "KEPT-UNTIL", "WHY"]
    assert train.split()[:3] == ["job/train", "idle-gpu", "delete"]
    assert f"{deadline:%Y-%m-%d %H:%M}Z (in 59 min" in train or f"{deadline:%Y-%m-%d %H:%M}Z (in 1 h" in train
    assert train.endswith("peaked at 0 % over the last 2 h")  # GPU 0 or 1: the one the node gave it
    assert scratch.split()[:3] == ["job/scratch", "-", "delete"] and "its own janitor/ttl (7d after" in scratch
    assert footer.startswith("To keep one: kubectl janitor keep job/train 2d")

    document = json.loads(plugin("status", "-n", namespace, "-o", "json", kubeconfig=viewer).stdout)
    assert (document["apiVersion"], document["kind"], document["namespace"]) == ("janitor/v1", "Status", namespace)
    item = next(i for i in document["items"] if i["target"] == "job/train")
    assert item["state"] == "warned" and item["deadline"] == a.format_expires(deadline)
    assert item["keepCap"] == a.format_expires(cap) and item["why"]["facts"]["window"] == "2h"
    assert item["why"]["words"].endswith("peaked at 0 % over the last 2 h") and item["trigger"] == "idleGpu"

    out = plugin("explain", "job/train", kubeconfig=viewer)
    assert out.returncode == 0, out.stderr
    for shown in ("job/train in namespace " + namespace + ": warned", "judged by       policy idle-gpu, trigger "
                  "idleGpu: window 2h, threshold 5", f"keep cap        {cap:%Y-%m-%d %H:%M}Z",
                  "to keep it      kubectl janitor keep job/train 2d", "IdleMarked", "on Slack, to its owner"):
        assert shown in out.stdout, (shown, out.stdout)

    out = plugin("keep", "job/train", "2d", kubeconfig=viewer)
    assert out.returncode == 4 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("kubectl janitor keep: ") and "HTTP 403" in line and "keep needs edit" in line
    out = plugin("status", "-A", kubeconfig=viewer)
    assert out.returncode == 4 and len(out.stderr.splitlines()) == 1 and "HTTP 403" in out.stderr

    # edit: past the cap is refused, within it is written
    out = plugin("keep", "job/train", "30d", kubeconfig=editor)
    assert out.returncode == 1 and out.stderr.splitlines() == [
        f"kubectl janitor keep: job/train: {out.stderr.split(': ')[2].split()[0]} is past the cap of policy "
        f"idle-gpu, {a.format_expires(cap)} (maxExtension 1w after it was first marked); keep it until then at "
        f"most: kubectl janitor keep job/train {a.format_expires(cap)}"]
    assert a.KEEP_UNTIL not in notes_of(kube, namespace, "train")
    out = plugin("keep", "job/train", "2d", kubeconfig=editor)
    assert out.returncode == 0, out.stderr
    kept = a.parse_expires(notes_of(kube, namespace, "train")[a.KEEP_UNTIL])
    assert abs(kept.timestamp() - (time.time() + 2 * 86400)) < 120
    assert out.stdout.startswith(f"job/train in {namespace}: janitor/keep-until={a.format_expires(kept)} (in 1 d 23 h")

    marked()  # the janitor's next cycle writes the deadline in force, and the note with it
    notes = notes_of(kube, namespace, "train")
    assert a.parse_expires(notes[a.DEADLINE]) == kept
    note = WhyNote.parse(notes[a.WHY])
    assert note is not None and note.deadline == kept and note.marked_at == marked_at
    out = plugin("status", "-o", "wide", kubeconfig=viewer)
    train = next(line for line in out.stdout.splitlines() if line.startswith("job/train"))
    assert train.count(f"{kept:%Y-%m-%d %H:%M}Z (in 1 d 23 h") == 2  # the deadline and the keep-until
    assert "warned" in train and "kubectl janitor keep job/train 2d" in train


def test_kubectl_finds_the_plugin(kube, core, namespace, tmp_path) -> None:
    found = kubectl()
    if found is None:
        pytest.skip("no kubectl: neither the sandbox's build nor one on the PATH")
    viewer = bound(kube, namespace, "viewer", "view", tmp_path / "viewer.kubeconfig")
    client.BatchV1Api(kube).create_namespaced_job(namespace, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "scratch", "annotations": {a.TTL: "3d"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}})
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, "KUBECONFIG": viewer,
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    listed = subprocess.run([found, "plugin", "list"], capture_output=True, text=True, timeout=60, env=env)
    assert str(PLUGIN) in listed.stdout, listed.stdout + listed.stderr
    through = subprocess.run([found, "janitor", "status"], capture_output=True, text=True, timeout=60, env=env)
    direct = plugin("status", kubeconfig=viewer)
    assert through.returncode == 0, through.stderr
    assert through.stdout.split("\n")[1].split()[:3] == ["job/scratch", "-", "delete"]
    assert through.stdout.split("\n")[1].split("(")[0] == direct.stdout.split("\n")[1].split("(")[0]
    denied = subprocess.run([found, "janitor", "keep", "job/scratch", "2d"], capture_output=True, text=True,
                            timeout=60, env=env)
    assert denied.returncode == 4 and len(denied.stderr.splitlines()) == 1, denied.stderr
