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
- `kubectl delete -k ...` (the uninstall) removes what was applied, namespace included;
- no step warns that an object lacks kubectl's last-applied-configuration;
- the admin guide's Helm steps, verbatim, install the chart with the guide's values file, and a
  janitor run with the installed Deployment's flags, policies ConfigMap, Prometheus credential
  file and Slack Secret completes a cycle.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
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
            assert "last-applied-configuration" not in done.stderr, f"{doc}: `{line}` warns: {done.stderr}"
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


# ---------------------------------------------------------------------------------------------
# The Helm install of docs/admin-guide.md


def helm_block(doc: Path) -> list[str]:
    for block in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines = [line.split(" #")[0].strip() for line in joined.splitlines()]
        if any(line.startswith("helm install ") for line in lines):
            return [line for line in lines if line]
    raise AssertionError(f"{doc} has no helm install block")


def _absent(read: Any) -> bool:
    try:
        read()
    except ApiException as e:
        return e.status == 404
    return False


def test_the_helm_install_steps_run_a_janitor_with_what_the_chart_rendered(
        core: client.CoreV1Api, kubectl_env: dict[str, str], workdir: Path, sandbox, tmp_path: Path) -> None:  # noqa: ANN001
    """The guide's values file and commands, verbatim: then the janitor runs one cycle with the
    installed Deployment's flags, the installed policies ConfigMap, the Prometheus token of the
    Secret the chart mounts and the Slack Secret its env names, as its ServiceAccount."""
    from test_chart import guide_values, template

    from devenv import access
    from devenv.helm import ensure_helm

    env = {**kubectl_env, "PATH": f"{ensure_helm().parent}{os.pathsep}{kubectl_env['PATH']}"}
    shutil.copytree(ROOT / "charts", workdir / "charts")
    (workdir / "my-values.yaml").write_text(guide_values())
    (workdir / "reader.token").write_text("reader-token-from-the-admins-file\n")  # the admin's own file
    agent_namespace = "kube-idle-janitor-node-agent"
    for name in (NAMESPACE, agent_namespace):  # a fresh install: another test's leftovers go first
        if not _absent(lambda n=name: core.read_namespace(n)):
            core.delete_namespace(name)
            wait_until(lambda n=name: _absent(lambda: core.read_namespace(n)), timeout=120, what=f"namespace {name}")
    # Cluster-scoped leftovers of the kustomize installs (same names) are not Helm's to adopt.
    leftovers = tmp_path / "cluster-scoped.yaml"
    leftovers.write_text(yaml.safe_dump_all([o for o in template() if "namespace" not in o["metadata"]]))
    subprocess.run(["kubectl", "delete", "-f", str(leftovers), "--ignore-not-found"], env=env, capture_output=True,
                   timeout=120, check=True)
    installed = False
    try:
        for line in helm_block(ROOT / "docs/admin-guide.md"):
            if "| less" in line:
                continue
            done = subprocess.run(line, shell=True, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"`{line}` failed: {done.stderr[-2000:]}"
            installed = installed or line.startswith("helm install ")
        assert installed
        assert core.read_namespace(agent_namespace).metadata.labels["pod-security.kubernetes.io/enforce"] == \
            "privileged"

        # What the janitor runs with, read back from the apiserver.
        apps = client.AppsV1Api(core.api_client)
        spec = apps.read_namespaced_deployment(NAMESPACE, NAMESPACE).spec.template.spec
        [container] = spec.containers
        volumes = {v.name: v for v in spec.volumes}
        mounts = {m.mount_path: m.name for m in container.volume_mounts}
        local: dict[str, Path] = {}
        for path, volume in ((p, volumes[n]) for p, n in mounts.items() if n in ("policies", "prometheus-auth")):
            target = tmp_path / volume.name
            target.mkdir()
            if volume.config_map is not None:
                data = core.read_namespaced_config_map(volume.config_map.name, NAMESPACE).data
            else:
                import base64

                secret = core.read_namespaced_secret(volume.secret.secret_name, NAMESPACE).data
                data = {k: base64.b64decode(v).decode() for k, v in secret.items()}
            for key, text in data.items():
                (target / key).write_text(text)
            local[path] = target
        args = []
        for arg in container.args:
            for path, target in local.items():
                arg = arg.replace(path, str(target))
            if arg.startswith("--prometheus-url="):
                arg = f"--prometheus-url={sandbox.prometheus_url}"
            args.append(arg)
        [bot] = [e for e in container.env if e.name == "SLACK_BOT_TOKEN"]
        ref = bot.value_from.secret_key_ref
        assert ref.key in core.read_namespaced_secret(ref.name, NAMESPACE).data
        kubeconfig = access.service_account_kubeconfig(core.api_client, NAMESPACE, spec.service_account_name,
                                                       tmp_path / "janitor.kubeconfig")
        janitor = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "janitor"
        if not janitor.exists():
            janitor = ROOT / ".venv" / "bin" / "janitor"
        run = subprocess.run([str(janitor), *args, "--once", "--kubeconfig", str(kubeconfig)],
                             env={**env, "SLACK_BOT_TOKEN": sandbox.slack_token,
                                  "SLACK_API_URL": sandbox.slack_api_url},
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        assert "no valid policy set" not in run.stderr
        assert "--dry-run" in args and str(local["/etc/kube-idle-janitor/prometheus"] / "token") in " ".join(args)
    finally:
        subprocess.run(["helm", "uninstall", "kube-idle-janitor", "-n", NAMESPACE, "--wait"], env=env,
                       capture_output=True, timeout=300)
        for name in (NAMESPACE, agent_namespace):
            subprocess.run(["kubectl", "delete", "namespace", name, "--ignore-not-found", "--wait=false"], env=env,
                           capture_output=True, timeout=60)
        for name in (NAMESPACE, agent_namespace):
            wait_until(lambda n=name: _absent(lambda: core.read_namespace(n)), timeout=180, what=f"namespace {name}")
