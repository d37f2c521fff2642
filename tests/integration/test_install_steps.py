"""The install steps of manifests/README.md and docs/admin-guide.md, typed as an admin types them.

Each document's install block runs line by line with kubectl (built with the sandbox's control
plane) against the sandbox's apiserver, from a directory laid out as the document says (the
admin guide's overlay written from its own YAML block, its policies from policies/). Lines that
need what the sandbox does not have are skipped, each for a stated reason; every other line runs
verbatim and must succeed.

Aspects covered:
- when `kubectl apply -k ...` runs, the namespace and the Slack Secret already exist, with the
  name and key the Deployment reads the token from: a fresh install's pods start with the token
  (they read it once, at start);
- the rollout completes (the pods are scheduled and Ready on the sandbox's nodes);
- `kubectl delete -k ...` (the uninstall) removes what was applied, namespace included.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devenv.procs import wait_until
from devenv.testbin import ensure_binaries

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "kube-idle-janitor"
SECRET = "kube-idle-janitor-slack"
# What the sandbox lacks, by the start of the line: kwok nodes run no containers (no logs), and
# no Prometheus operator CRDs are served (manifests/monitoring); a pager waits for a person.
SKIPPED = {
    "kubectl apply -k manifests/monitoring": "the sandbox serves no Prometheus operator CRDs",
    "kubectl -n kube-idle-janitor logs": "kwok nodes run no containers, so there are no logs",
}


def install_block(doc: Path) -> list[str]:
    """The shell block that applies the manifests, as lines without their comments."""
    for block in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.S):
        lines = [line.split(" #")[0].strip() for line in block.splitlines()]
        if any(re.match(r"kubectl apply -k ", line) for line in lines):
            return [line for line in lines if line]
    raise AssertionError(f"{doc} has no install block")


def overlay_from_guide(work: Path) -> None:
    """The admin guide's overlay, written where its own first line says, next to manifests/."""
    text = (ROOT / "docs/admin-guide.md").read_text()
    yaml_block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S)
                      if b.startswith("# clusters/prod/kube-idle-janitor/kustomization.yaml"))
    target = work / yaml_block.splitlines()[0].removeprefix("# ")
    target.parent.mkdir(parents=True)
    target.write_text(yaml_block)
    policies = target.parent / "my-policies"
    policies.mkdir()
    shutil.copy(ROOT / "policies/idle-gpu.yaml", policies / "10-idle-gpu.yaml")
    shutil.copy(ROOT / "policies/pending.yaml", policies / "20-pending.yaml")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    return tmp_path


def secret_exists(core: client.CoreV1Api) -> bool:
    try:
        core.read_namespaced_secret(SECRET, NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def namespace_gone(core: client.CoreV1Api) -> bool:
    try:
        core.read_namespace(NAMESPACE)
    except ApiException as e:
        return e.status == 404
    return False


@pytest.fixture
def kubectl_env(sandbox) -> Iterator[dict[str, str]]:  # noqa: ANN001
    binaries = ensure_binaries()
    yield {**os.environ, "PATH": f"{binaries}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": str(sandbox.kubeconfig)}


@pytest.mark.parametrize("doc", ["manifests/README.md", "docs/admin-guide.md"])
def test_the_install_steps_give_a_fresh_install_its_token(
        doc: str, core: client.CoreV1Api, kubectl_env: dict[str, str], workdir: Path) -> None:
    if doc == "docs/admin-guide.md":
        overlay_from_guide(workdir)
    steps = install_block(ROOT / doc)
    applied: list[str] = []
    if not namespace_gone(core):  # a fresh install: another test's leftovers go first
        core.delete_namespace(NAMESPACE)
        wait_until(lambda: namespace_gone(core), timeout=120, what=f"namespace {NAMESPACE} from an earlier test to go")
    try:
        for line in steps:
            reason = next((why for start, why in SKIPPED.items() if line.startswith(start)), None)
            if reason is not None or "| less" in line:
                continue
            if line.startswith("kubectl apply -k "):
                assert secret_exists(core), f"{doc}: `{line}` runs before the Slack Secret exists"
                applied.append(line.removeprefix("kubectl apply -k ").split()[0])
            done = subprocess.run(line, shell=True, cwd=workdir, env=kubectl_env, capture_output=True, text=True,
                                  timeout=180)
            assert done.returncode == 0, f"{doc}: `{line}` failed: {done.stderr[-2000:]}"
        assert applied, f"{doc}: nothing applied"
        apps = client.AppsV1Api(core.api_client)
        [container] = apps.read_namespaced_deployment(NAMESPACE, NAMESPACE).spec.template.spec.containers
        [token] = [e for e in container.env or () if e.name == "SLACK_BOT_TOKEN"]
        ref = token.value_from.secret_key_ref
        secret = core.read_namespaced_secret(SECRET, NAMESPACE)
        assert ref.name == SECRET and ref.key in (secret.data or {}), (ref, sorted(secret.data or {}))
    finally:
        for directory in reversed(applied):
            subprocess.run(["kubectl", "delete", "-k", directory, "--ignore-not-found", "--wait=false"],
                           cwd=workdir, env=kubectl_env, capture_output=True, timeout=180)
        subprocess.run(["kubectl", "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false"],
                       env=kubectl_env, capture_output=True, timeout=60)
        wait_until(lambda: namespace_gone(core), timeout=180, what=f"namespace {NAMESPACE} to go")
