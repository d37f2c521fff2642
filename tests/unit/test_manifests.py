"""The deployment (manifests/, Dockerfile, requirements.lock) agrees with the code it runs.

Aspects covered:
- generated files are what the code generates: the janitor's ClusterRole and binding
  (`janitor.rbac.cluster_role` with the default kinds, as `janitor rbac` prints them), the node
  agent's (`janitor.rbac.node_agent_role`), the policy copies in manifests/base/policies (equal to
  policies/*.yaml, all listed in the ConfigMap generator); the shipped policies load, are in
  shadow mode and match no namespace;
- the pure-Python rendering of the kustomizations (which the integration test applies) is what
  `kubectl kustomize` renders, where kubectl is installed;
- the base: every object labelled and in the janitor's namespace, no Secret committed;
- the Deployment and DaemonSet args parse with `janitor.cli.build_parser()` and every flag is
  spelled out in full; ports, probes, volumes, env and identities agree with the flags, the
  Services, the RBAC bindings, the leader election Role, the state ConfigMap and the daemon's
  endpoints; their security contexts are as documented; the images carry the package version;
- the admission policies cover exactly the kinds of the generated role, apply the guard to the
  janitor's ServiceAccount only, name the protected namespaces and state ConfigMap the janitor
  uses, and accept the same annotation values as `janitor.annotations` (known differences listed),
  to the same bounds: a TTL of at most 100 years (36500d, evaluated here as the CEL does: the
  pattern, the number times its unit, the limit), times in the years 1000 to 8999, time zones of
  IANA characters and at most 64 of them (zoneinfo itself is the janitor's part);
- the Dockerfile: non-root USER, ENTRYPOINT janitor, no tests/devenv/test extra copied or
  installed; requirements.lock pins every runtime dependency of pyproject.toml within its range;
- monitoring: the alerts and recordings asked for exist, every janitor_* series they and the
  dashboard use is one the code exports (promtool's checks, runbooks and the dashboard's queries:
  tests/unit/test_monitoring.py).

`JANITOR_UPDATE_MANIFESTS=1 .venv/bin/python -m pytest tests/unit/test_manifests.py` rewrites
the generated files (rbac YAML, policy copies, requirements.lock) instead of failing.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from devenv import release
from devenv.testbin import cached_binaries
from janitor import admission, annotations, rbac
from janitor.cli import build_parser
from janitor.decide.rails import DEFAULT_PROTECTED_NAMESPACES
from janitor.policy import load
from janitor.policy.model import Mode
from janitor.settings import DEFAULT_KINDS, Settings

ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "manifests"
BASE = MANIFESTS / "base"
MONITORING = MANIFESTS / "monitoring"
UPDATE = os.environ.get("JANITOR_UPDATE_MANIFESTS") == "1"

NAMESPACE = "kube-idle-janitor"
AGENT_NAMESPACE = "kube-idle-janitor-node-agent"  # Pod Security `privileged`, for the node agent only
PART_OF = {"app.kubernetes.io/name": "kube-idle-janitor"}
# The recommended labels (kubernetes.io/docs/concepts/overview/working-with-objects/common-labels)
RECOMMENDED = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
               "app.kubernetes.io/component", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by")
GENERATED = """\
# GENERATED from {source}; do not edit.
# Regenerate: JANITOR_UPDATE_MANIFESTS=1 .venv/bin/python -m pytest tests/unit/test_manifests.py
# tests/unit/test_manifests.py fails when this file and the code disagree.
"""

# ---------------------------------------------------------------------------------------------
# Rendering: the subset of kustomize the manifests use, so tests need no kustomize binary.

# Kinds without a namespace; everything else gets the kustomization's namespace.
CLUSTER_SCOPED = frozenset({
    "Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition", "PriorityClass",
})
_KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "labels", "resources", "configMapGenerator",
                       "generatorOptions"}


def render(directory: Path) -> list[dict[str, Any]]:
    """What `kubectl kustomize directory` gives for the features used here: resources (files),
    namespace, labels (metadata only), configMapGenerator from files without hash suffixes.
    Anything else in the kustomization is refused rather than silently ignored."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    if set(k) - _KUSTOMIZATION_KEYS:
        raise ValueError(f"render() does not support {sorted(set(k) - _KUSTOMIZATION_KEYS)}")
    if k.get("configMapGenerator") and k.get("generatorOptions") != {"disableNameSuffixHash": True}:
        raise ValueError("render() supports generated ConfigMaps without hash suffixes only")
    objects: list[dict[str, Any]] = []
    for resource in k.get("resources", []):
        objects.extend(doc for doc in yaml.safe_load_all((directory / resource).read_text()) if doc)
    for gen in k.get("configMapGenerator", []):
        if set(gen) - {"name", "namespace", "files", "options"} or set(gen.get("options", {})) - {"labels"}:
            raise ValueError(f"render() does not support configMapGenerator {gen}")
        data = {}
        for entry in gen["files"]:
            key, _, path = entry.rpartition("=")
            data[key or Path(path).name] = (directory / path).read_text()
        meta = {"name": gen["name"], "labels": dict(gen.get("options", {}).get("labels", {}))}
        if gen.get("namespace"):
            meta["namespace"] = gen["namespace"]
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if k.get("namespace") and obj["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = k["namespace"]
        for group in k.get("labels", []):
            if set(group) != {"pairs"}:
                raise ValueError(f"render() supports labels with pairs only, not {group}")
            meta["labels"] = {**meta.get("labels", {}), **group["pairs"]}
    return objects


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    [only] = workload["spec"]["template"]["spec"]["containers"]
    return only


def generated_or_check(path: Path, expected: str, *, compare: Any = None) -> None:
    """Compare a checked-in generated file with what the code generates now (as data when
    `compare` parses it), or rewrite it under JANITOR_UPDATE_MANIFESTS=1."""
    if UPDATE:
        path.write_text(expected)
        return
    parse = compare or (lambda text: text)
    assert path.exists(), f"{path.relative_to(ROOT)} is missing; generate it with JANITOR_UPDATE_MANIFESTS=1"
    assert parse(path.read_text()) == parse(expected), (
        f"{path.relative_to(ROOT)} differs from what the code generates; regenerate with "
        "JANITOR_UPDATE_MANIFESTS=1 .venv/bin/python -m pytest tests/unit/test_manifests.py")


def _yaml_docs(text: str) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def _dump(docs: list[dict[str, Any]]) -> str:
    return "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in docs)


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(BASE)


@pytest.fixture(scope="module")
def monitoring() -> list[dict[str, Any]]:
    return render(MONITORING)


# ---------------------------------------------------------------------------------------------
# Generated files


def test_janitor_cluster_role_is_the_generated_one() -> None:
    docs = [rbac.cluster_role(DEFAULT_KINDS, name="kube-idle-janitor"),
            rbac.cluster_role_binding(name="kube-idle-janitor", role="kube-idle-janitor", namespace=NAMESPACE,
                                      service_account="kube-idle-janitor"),
            rbac.state_role(namespace=NAMESPACE, name="kube-idle-janitor-state"),
            rbac.role_binding(name="kube-idle-janitor-state", role="kube-idle-janitor-state", namespace=NAMESPACE,
                              service_account="kube-idle-janitor")]
    source = "janitor.rbac.cluster_role(DEFAULT_KINDS), as `janitor rbac` prints it"
    text = GENERATED.format(source=source) + _dump(docs)
    generated_or_check(BASE / "rbac.yaml", text, compare=_yaml_docs)


def test_node_agent_cluster_role_is_the_generated_one() -> None:
    name = "kube-idle-janitor-node-agent"
    docs = [rbac.node_agent_role(name=name),
            rbac.cluster_role_binding(name=name, role=name, namespace=AGENT_NAMESPACE, service_account=name,
                                      component="node-agent")]
    text = GENERATED.format(source="janitor.rbac.node_agent_role()") + _dump(docs)
    generated_or_check(BASE / "rbac-node-agent.yaml", text, compare=_yaml_docs)


def test_marks_admission_policy_is_the_generated_one() -> None:
    docs = admission.marks_policy(DEFAULT_KINDS)
    source = "janitor.admission.marks_policy(DEFAULT_KINDS), as `janitor admission` prints it"
    text = GENERATED.format(source=source) + _dump(docs)
    generated_or_check(BASE / "admission-marks.yaml", text, compare=_yaml_docs)


def test_policy_copies_equal_policies_dir_and_are_all_in_the_configmap() -> None:
    sources = sorted((ROOT / "policies").glob("*.yaml"))
    copies = BASE / "policies"
    if UPDATE:
        for stale in set(copies.glob("*.yaml")) - {copies / s.name for s in sources}:
            stale.unlink()
        for source in sources:
            shutil.copyfile(source, copies / source.name)
    assert sorted(p.name for p in copies.glob("*.y*ml")) == [s.name for s in sources]
    for source in sources:
        assert (copies / source.name).read_bytes() == source.read_bytes(), (
            f"manifests/base/policies/{source.name} differs from policies/{source.name}; regenerate with "
            "JANITOR_UPDATE_MANIFESTS=1 .venv/bin/python -m pytest tests/unit/test_manifests.py")
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    [generator] = kustomization["configMapGenerator"]
    assert sorted(generator["files"]) == [f"policies/{s.name}" for s in sources]


def test_shipped_policies_load_in_shadow_mode_and_match_nothing() -> None:
    loaded = load.from_paths([BASE / "policies"])
    assert not loaded.errors, [str(e) for e in loaded.errors]
    assert loaded.policies
    for policy in loaded.policies:
        assert policy.mode is Mode.SHADOW, policy.name
        assert policy.match.namespaces.include == (), policy.name


def test_requirements_lock_pins_every_runtime_dependency() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    direct = [Requirement(d) for d in pyproject["project"]["dependencies"]]
    lock = ROOT / "requirements.lock"
    if UPDATE:
        lock.write_text(_lock_from_venv(direct))
    pins = {}
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"requirements.lock: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    for req in direct:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} (pyproject.toml) is not pinned in requirements.lock"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} is outside {req}"
    test_extra = {canonicalize_name(Requirement(d).name) for d in pyproject["project"]["optional-dependencies"]["test"]}
    assert not test_extra & set(pins), "test dependencies do not belong in the image"
    assert not set(LEFT_OUT) & set(pins), "the janitor never imports these: they do not belong in the image"
    for name in pins:  # complete: every requirement of a pinned package is pinned or left out on purpose
        for r in importlib.metadata.distribution(name).requires or []:
            req = Requirement(r)
            if not (req.marker and not req.marker.evaluate({"extra": ""})):
                assert canonicalize_name(req.name) in set(pins) | set(LEFT_OUT), f"{name} needs {req.name}"


# Required by a dependency for a part of it the janitor never imports, so left out of the image:
# prometheus-api-client's date parsing (the janitor uses only its HTTP session; the client imports
# them lazily) and the kubernetes client's asyncio API (kubernetes.aio). test_packaging.py builds
# the image's runtime from the lock and imports every janitor module in it.
LEFT_OUT = {
    "dateparser": "prometheus-api-client's date parsing", "regex": "dateparser", "pytz": "dateparser",
    "aiohttp": "kubernetes.aio", "aiohttp-retry": "kubernetes.aio", "aiohappyeyeballs": "aiohttp",
    "aiosignal": "aiohttp", "attrs": "aiohttp", "frozenlist": "aiohttp", "multidict": "aiohttp",
    "propcache": "aiohttp", "yarl": "aiohttp",
}


def _lock_from_venv(direct: list[Requirement]) -> str:
    """The runtime dependencies and theirs, at the versions installed in this environment."""
    versions: dict[str, str] = {}
    todo = list(direct)
    while todo:
        req = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in LEFT_OUT:
            continue
        if name not in versions:
            dist = importlib.metadata.distribution(req.name)
            versions[name] = dist.version
            todo.extend(Requirement(r) for r in dist.requires or [])
    header = ("# The janitor's runtime dependencies and theirs, pinned (the Dockerfile installs exactly these).\n"
              "# Left out, never imported by the janitor: " + ", ".join(sorted(LEFT_OUT)) + ".\n"
              "# Regenerate from a venv with the project installed:\n"
              "#   JANITOR_UPDATE_MANIFESTS=1 .venv/bin/python -m pytest tests/unit/test_manifests.py\n")
    return header + "".join(f"{name}=={versions[name]}\n" for name in sorted(versions))


# ---------------------------------------------------------------------------------------------
# Rendering and the base


def _kubectl() -> str | None:
    """kubectl on PATH, else the sandbox's own build (devenv/testbin) once it is built."""
    built = cached_binaries()
    return shutil.which("kubectl") or (str(built / "kubectl") if built is not None else None)


KUBECTL = _kubectl()


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl: neither on PATH nor built with the sandbox yet")
@pytest.mark.parametrize("directory", [BASE, MONITORING], ids=["base", "monitoring"])
def test_render_agrees_with_kubectl_kustomize(directory: Path) -> None:
    out = subprocess.run([str(KUBECTL), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr

    def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        return {(o["kind"], o["metadata"]["name"]): o for o in objects}

    rendered = _yaml_docs(out.stdout)
    for obj in rendered:
        # kustomize before kubernetes-sigs/kustomize#6056 takes ValidatingAdmissionPolicy(Binding)
        # for namespaced and gives them the namespace (#6051); the apiserver drops it.
        if obj["kind"].startswith("ValidatingAdmissionPolicy"):
            obj["metadata"].pop("namespace", None)
    assert keyed(render(directory)) == keyed(rendered)


def test_base_objects_are_labelled_namespaced_and_hold_no_secret(base) -> None:
    kinds = sorted(o["kind"] for o in base)
    assert kinds == sorted([
        "Namespace", "Namespace", "ServiceAccount", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Role", "RoleBinding", "ConfigMap",
        "Deployment", "PodDisruptionBudget", "DaemonSet", "Service", "Service", "PriorityClass",
        "NetworkPolicy", "NetworkPolicy",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",  # guard, annotations, marks
    ])
    namespaces = {n["metadata"]["name"]: n["metadata"]["labels"] for n in base if n["kind"] == "Namespace"}
    # The janitor's pods meet `restricted`; only the node agent's namespace admits what it needs.
    assert namespaces[NAMESPACE]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert namespaces[AGENT_NAMESPACE]["pod-security.kubernetes.io/enforce"] == "privileged"
    agent = {("DaemonSet", "kube-idle-janitor-node-agent"), ("ServiceAccount", "kube-idle-janitor-node-agent"),
             ("Service", "kube-idle-janitor-node-agent"), ("NetworkPolicy", "kube-idle-janitor-node-agent")}
    for obj in base:
        meta = obj["metadata"]
        assert all(meta["labels"].get(label) for label in RECOMMENDED), (meta["name"], meta["labels"])
        assert meta["labels"].items() >= PART_OF.items(), meta["name"]
        expected = None if obj["kind"] in CLUSTER_SCOPED else (
            AGENT_NAMESPACE if (obj["kind"], meta["name"]) in agent else NAMESPACE)
        assert meta.get("namespace") == expected, (obj["kind"], meta["name"])
    # The Slack token is created by the admin (docs/admin-guide.md), never committed.
    for path in MANIFESTS.rglob("*.yaml"):
        assert not any(d.get("kind") == "Secret" for d in _yaml_docs(path.read_text())), path


def _flags(subcommand: str) -> dict[str, argparse.Action]:
    parser = build_parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {flag: action for action in subparsers.choices[subcommand]._actions for flag in action.option_strings}


def _parse(args: list[str]) -> argparse.Namespace:
    """Parse a container's args as the CLI does, insisting on full flag names (argparse would
    take a prefix such as `--leader` for `--leader-elect`)."""
    known = _flags(args[0])
    for arg in args[1:]:
        if arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            assert flag in known, f"`janitor {args[0]}` has no flag {flag}"
    try:
        return build_parser().parse_args(args)
    except SystemExit as e:  # argparse reports on stderr and exits 2
        raise AssertionError(f"`janitor {' '.join(args)}` does not parse") from e


def _env(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


def test_deployment_runs_the_daemon_as_the_cli_defines_it(base) -> None:
    deployment = find(base, "Deployment", "kube-idle-janitor")
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    args = _parse(c["args"])
    assert args.command == "run"
    assert not args.dry_run and not args.once  # ships enforcing TTL/expiry; the policies are shadow and inert
    assert args.leader_elect is True
    assert args.slack_token is None  # the token comes from the Secret, never from args
    assert args.prometheus_url and args.admin_channel == "#gpu-admins"  # not a YAML comment
    assert deployment["spec"]["replicas"] == 2

    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    [policies_mount] = [m for m in mounts.values() if m["mountPath"] == "/etc/kube-idle-janitor/policies"]
    assert args.policies == [policies_mount["mountPath"]] and policies_mount["readOnly"]
    assert "subPath" not in policies_mount  # a subPath mount never sees ConfigMap updates
    assert volumes[policies_mount["name"]]["configMap"]["name"] == find(base, "ConfigMap")["metadata"]["name"]

    assert args.state_namespace == NAMESPACE == Settings().cluster.state_namespace
    role = find(base, "Role", "kube-idle-janitor-leader-election")
    verbs = {(tuple(r.get("resourceNames", ())), v) for r in role["rules"] for v in r["verbs"]
             if r["apiGroups"] == ["coordination.k8s.io"] and r["resources"] == ["leases"]}
    assert verbs == {((), "create"), ((args.lease_name,), "get"), ((args.lease_name,), "update")}

    env = _env(c)
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    token = env["SLACK_BOT_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": "kube-idle-janitor-slack", "key": "token", "optional": True}

    [port] = c["ports"]
    assert port["containerPort"] == args.metrics_port
    probes = {c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"]}
    assert probes == {"/healthz", "/readyz"}
    assert {c["livenessProbe"]["httpGet"]["port"], c["readinessProbe"]["httpGet"]["port"]} == {port["name"]}
    daemon_source = (ROOT / "janitor" / "daemon.py").read_text()
    assert all(f'"{path}"' in daemon_source for path in probes), "the daemon does not serve these probe paths"
    service = find(base, "Service", "kube-idle-janitor")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]

    assert pod["serviceAccountName"] == "kube-idle-janitor"
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    [spread] = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


def test_daemonset_runs_the_node_agent_as_the_cli_defines_it(base) -> None:
    daemonset = find(base, "DaemonSet", "kube-idle-janitor-node-agent")
    pod = daemonset["spec"]["template"]["spec"]
    c = container(daemonset)
    args = _parse(c["args"])
    assert args.command == "node-agent" and not args.once
    assert args.node_name == "$(NODE_NAME)"
    assert _env(c)["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert args.pod_uid == "$(POD_UID)"  # its own pod's processes prove nothing about what it sees
    assert _env(c)["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert pod["hostPID"] is True

    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for root, host in ((args.proc_root, "/proc"), (args.cgroup_root, "/sys/fs/cgroup")):
        assert mounts[root]["readOnly"] is True
        assert volumes[mounts[root]["name"]]["hostPath"]["path"] == host

    security = c["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"operator": "Exists"} in pod["tolerations"]
    assert c["resources"] == {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}

    [port] = c["ports"]
    assert port["containerPort"] == args.metrics_port
    service = find(base, "Service", "kube-idle-janitor-node-agent")
    assert service["spec"]["selector"] == daemonset["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]


def test_images_are_one_image_at_the_release_the_tree_prepares(base) -> None:
    version = release.prepared_version()
    images = {container(find(base, kind))["image"] for kind in ("Deployment", "DaemonSet")}
    assert images == {f"kube-idle-janitor:{version}"}
    assert {o["metadata"]["labels"]["app.kubernetes.io/version"] for o in base} == {version}
    assert release.problems(version) == []


def test_bindings_give_each_workload_its_role(base) -> None:
    def subjects(kind: str, name: str) -> list[dict[str, str]]:
        return find(base, kind, name)["subjects"]

    janitor_sa = find(base, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    agent_sa = find(base, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    assert {o["metadata"]["name"] for o in base if o["kind"] == "ServiceAccount"} == {janitor_sa, agent_sa}
    for kind, name, sa, namespace in (("ClusterRoleBinding", "kube-idle-janitor", janitor_sa, NAMESPACE),
                                      ("RoleBinding", "kube-idle-janitor-leader-election", janitor_sa, NAMESPACE),
                                      ("RoleBinding", "kube-idle-janitor-state", janitor_sa, NAMESPACE),
                                      ("ClusterRoleBinding", "kube-idle-janitor-node-agent", agent_sa,
                                       AGENT_NAMESPACE)):
        assert subjects(kind, name) == [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]
        role = find(base, kind, name)["roleRef"]["name"]
        find(base, "Role" if kind == "RoleBinding" else "ClusterRole", role)


# ---------------------------------------------------------------------------------------------
# Admission policies


def _role_kinds() -> set[tuple[str, str]]:
    return {(k.group, k.plural) for k in DEFAULT_KINDS}


@pytest.mark.parametrize("name, operations", [
    ("kube-idle-janitor-guard", ["DELETE", "UPDATE"]),
    ("kube-idle-janitor-annotations", ["CREATE", "UPDATE"]),
    ("kube-idle-janitor-marks", ["CREATE", "UPDATE"]),
])
def test_admission_policies_cover_the_generated_role_kinds(base, name: str, operations: list[str]) -> None:
    policy = find(base, "ValidatingAdmissionPolicy", name)
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    # The guard covers the Kueue Workloads too: the janitor patches them (a suspend goes through them).
    also = {("kueue.x-k8s.io", "workloads")} if name == "kube-idle-janitor-guard" else set()
    assert {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]} == _role_kinds() | also
    assert all(rule["operations"] == operations and rule["apiVersions"] == ["*"] for rule in rules)
    binding = find(base, "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}


def test_guard_is_for_the_janitor_and_knows_its_namespaces_and_state(base) -> None:
    spec = find(base, "ValidatingAdmissionPolicy", "kube-idle-janitor-guard")["spec"]
    assert spec["failurePolicy"] == "Fail"
    sa = find(base, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{sa}'"
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    protected = "[" + ", ".join(f"'{n}'" for n in DEFAULT_PROTECTED_NAMESPACES) + "]"
    assert variables["protected"].count(protected) == 2
    settings = Settings().cluster
    assert (f"request.namespace == '{settings.state_namespace}' && request.name == '{settings.state_name}'"
            in variables["stateConfigMap"])
    assert all(v["reason"] == "Forbidden" for v in spec["validations"])


def test_the_janitors_annotations_are_left_to_the_identity_the_base_runs_it_as(base) -> None:
    """`janitor admission`'s default --janitor-user, the marks policy in the base and the guard all
    name the ServiceAccount the Deployment runs as, in the base's namespace."""
    sa = find(base, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    find(base, "ServiceAccount", sa)
    assert admission.JANITOR_USER == f"system:serviceaccount:{NAMESPACE}:{sa}"
    spec = find(base, "ValidatingAdmissionPolicy", admission.MARKS_NAME)["spec"]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert conditions["not-the-janitor"] == f'request.userInfo.username != "{admission.JANITOR_USER}"'
    assert build_parser().parse_args(["admission"]).janitor_user == admission.JANITOR_USER


# (value, accepted by janitor.annotations) pairs; the integration test sends the same values to
# the apiserver. Values the admission pattern lets through although the janitor rejects them
# (then reports them) are in KNOWN_LOOSER.
TTL_VALUES = ["0s", "08s", "30m", "8h", "7d", "2w", "forever", "FOREVER", "Forever", "tomorrow", "5", "5 m",
              "5M", "1.5h", "-1h", "+1h", "5m\n", " 5m", "\u0665m", "", "forevermore", "1y", "9" * 30 + "w",
              # the bound, 100 years, in every unit, and just past it
              "36500d", "36501d", "5214w", "5215w", "876000h", "876001h", "52560000m", "52560001m", "3153600000s",
              "3153600001s", "3000000d", "0" * 40 + "36500d", "0" * 40 + "36501d", "9999999999s", "10000000000s",
              "99999999999999999999d"]
TIME_VALUES = ["2026-12-24", "2026-12-24T18:00", "2026-12-24T18:00:00Z", "2024-02-29", "tomorrow",
               "2026-12-24T18:00:00", "2026-12-24 18:00", "2026-12-24T18:00:00+01:00", "2026-12-24t18:00",
               "2026-12-24T18:00:00z", "2026-2-5", "2026-13-01", "2026-12-32", "2026-12-24T24:00", "2026-12-24T18:60",
               "2026-12-24T18:00:60Z", "2026-12-24T18:00:00.5Z", "2026-12-24\n", "", "2026-02-30", "0000-01-01",
               # the years 1000 to 8999
               "1000-01-01", "0999-12-31T23:59", "8999-12-31T23:59:59Z", "9000-01-01", "9999-12-31T23:59:59Z",
               "0001-01-01"]
TIME_ZONE_VALUES = ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "America/Port-au-Prince",
                    "Europe", "Europe/Berlinn", "a" * 300, "Europe/" + "B" * 57, "Europe/" + "B" * 58, "",
                    "../etc/passwd", "/etc/localtime", "Europe/Berlin ", "zone.tab", "Europe//Berlin", "UTC/"]
# Values the admission policy lets through although the janitor rejects them (then reports them):
# a day the calendar does not have, and names of the right form that are no zone (zoneinfo is not CEL's).
KNOWN_LOOSER = {"janitor/ttl": set(), "janitor/expires": {"2026-02-30"},
                "janitor/time-zone": {"Europe", "Europe/Berlinn", "Europe/" + "B" * 57}}
PARSERS: dict[str, Callable[[str], object]] = {
    "janitor/ttl": annotations.parse_ttl, "janitor/expires": annotations.parse_expires,
    "janitor/keep-until": annotations.parse_expires, "janitor/time-zone": annotations.parse_time_zone}


def janitor_accepts(key: str, value: str) -> bool:
    try:
        PARSERS[key](value)
    except ValueError:
        return False
    return True


def _re2(text: str) -> re.Pattern[str]:
    """An RE2 pattern of the policy as a Python pattern ($ = end of text, as in RE2)."""
    assert text.startswith("^") and text.endswith("$")
    return re.compile(text[:-1] + r"\Z")


def _admission(spec: dict[str, Any]) -> dict[str, Callable[[str], bool]]:
    """Each annotation's check of the policy, evaluated the way its CEL does. The expressions
    are read from the policy and asserted to be the ones emulated here, so editing one without
    the other fails; tests/integration/test_manifests_live.py runs the real CEL on the apiserver."""
    variables = {v["name"]: v["expression"].strip() for v in spec["variables"]}
    checks = " ".join(v["expression"] for v in spec["validations"])
    # janitor/ttl: in range when the pattern holds and the number times its unit is at most the limit.
    in_range = " ".join(variables["ttlInRange"].split())
    [ttl_pattern] = re.findall(r"matches\('([^']+)'\)", in_range)
    [units_text] = re.findall(r"\{'[^}]*\}", in_range)
    units = ast.literal_eval(units_text)
    assert units == {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    assert in_range == (f"variables.ttl.matches('{ttl_pattern}') && int(variables.ttl.substring(0, "
                        f"variables.ttl.size() - 1)) * {units_text}[variables.ttl.substring(variables.ttl.size() - 1)]"
                        " <= variables.maxTtlSeconds")
    limit = int(variables["maxTtlSeconds"])
    assert "!('janitor/ttl' in variables.annotations) || variables.ttlInRange || " \
           "variables.ttl.lowerAscii() == 'forever'" in " ".join(checks.split())

    def ttl(value: str) -> bool:
        if _re2(ttl_pattern).match(value):
            return int(value[:-1]) * units[value[-1]] <= limit
        return value.lower() == "forever"

    # janitor/expires and janitor/keep-until: one pattern.
    time_pattern = _re2(variables["timePattern"].strip("'"))
    for name, variable in (("expires", "expires"), ("keep-until", "keepUntil")):
        assert f"!('janitor/{name}' in variables.annotations) || variables.{variable}.matches(variables.timePattern)" \
            in checks
    # janitor/time-zone: the characters of IANA names, and a length.
    zone_pattern = _re2(variables["timeZonePattern"].strip("'"))
    zone_length = int(variables["maxTimeZoneLength"])
    assert "(variables.timeZone.size() <= variables.maxTimeZoneLength && " \
           "variables.timeZone.matches(variables.timeZonePattern))" in checks
    return {
        "janitor/ttl": ttl,
        "janitor/expires": lambda value: bool(time_pattern.match(value)),
        "janitor/keep-until": lambda value: bool(time_pattern.match(value)),
        "janitor/time-zone": lambda value: len(value) <= zone_length and bool(zone_pattern.match(value)),
    }


@pytest.mark.parametrize("key, values", [("janitor/ttl", TTL_VALUES), ("janitor/expires", TIME_VALUES),
                                         ("janitor/keep-until", TIME_VALUES), ("janitor/time-zone", TIME_ZONE_VALUES)])
def test_annotation_policy_accepts_what_the_janitor_accepts(base, key: str, values: list[str]) -> None:
    spec = find(base, "ValidatingAdmissionPolicy", "kube-idle-janitor-annotations")["spec"]
    admitted = _admission(spec)[key]
    differ = {v for v in values if admitted(v) != janitor_accepts(key, v)}
    assert differ == KNOWN_LOOSER["janitor/expires" if key == "janitor/keep-until" else key]
    assert all(admitted(v) and not janitor_accepts(key, v) for v in differ)


def test_annotation_policy_has_the_janitors_bounds(base) -> None:
    """The same limits as janitor.annotations: 100 years, the years 1000 to 8999 (every year
    tried), 64 characters of a zone name; and its messages say them."""
    spec = find(base, "ValidatingAdmissionPolicy", "kube-idle-janitor-annotations")["spec"]
    checks = _admission(spec)
    variables = {v["name"]: v["expression"].strip() for v in spec["variables"]}
    assert int(variables["maxTtlSeconds"]) == annotations.MAX_DURATION.total_seconds()
    assert int(variables["maxTimeZoneLength"]) == annotations.MAX_TIME_ZONE_LENGTH
    for year in range(0, 10_000):
        value = f"{year:04d}-06-15T12:00:00Z"
        assert checks["janitor/expires"](value) == janitor_accepts("janitor/expires", value), value
    for unit, seconds in (("s", 1), ("m", 60), ("h", 3600), ("d", 86400), ("w", 604800)):
        most = int(annotations.MAX_DURATION.total_seconds()) // seconds
        for number in (most - 1, most, most + 1, 10 ** 10 - 1, 10 ** 10):
            value = f"{number}{unit}"
            assert checks["janitor/ttl"](value) == janitor_accepts("janitor/ttl", value), value
    messages = " ".join(v["messageExpression"] for v in spec["validations"]) + \
        " ".join(v["expression"] for v in spec["variables"])
    assert "at most 36500d (100 years)" in messages and "years 1000 to 8999" in messages
    assert "is not an IANA time zone" in messages


# ---------------------------------------------------------------------------------------------
# Dockerfile


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text()
    logical = re.sub(r"\\\n", " ", text)
    out = []
    for line in logical.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_runs_janitor_as_non_root_without_tests_or_devenv() -> None:
    steps = _instructions()
    final = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    [user] = [rest for word, rest in steps[final:] if word == "USER"]
    assert user.split(":")[0] not in ("0", "root") and int(user.split(":")[0]) > 0
    [entrypoint] = [rest for word, rest in steps[final:] if word == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["janitor"]
    [image] = [rest.split("=", 1)[1] for word, rest in steps if word == "ARG" and rest.startswith("PYTHON_IMAGE=")]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image)
    copied = [src for word, rest in steps if word == "COPY" and not rest.startswith("--from")
              for src in rest.split()[:-1]]
    assert copied, "nothing copied?"
    for src in copied:
        assert src not in (".", "./", "*") and not src.startswith(("devenv", "tests", "bench", ".")), src
    # Installed by the one script the packaging tests run too (the lock, the janitor, no pip).
    [install] = [rest for word, rest in steps[:final] if word == "RUN"]
    assert "sh packaging/runtime-venv.sh /opt/janitor" in install and "[test]" not in install
    assert "requirements.lock" in copied and "packaging" in copied
    labels = " ".join(rest for word, rest in steps[final:] if word == "LABEL")
    for key in ("title", "version", "revision", "source", "licenses", "created"):
        assert f"org.opencontainers.image.{key}=" in labels, key


# ---------------------------------------------------------------------------------------------
# Monitoring


def _exported_series() -> set[str]:
    """Every series name the janitor and the node agent export (client_python's suffixes)."""
    series = set()
    for path in (ROOT / "janitor").rglob("*.py"):
        found = re.findall(r'\b(Counter|Gauge|Histogram)(?:MetricFamily)?\(\s*"(janitor_[a-z_]+)"', path.read_text())
        for kind, name in found:
            if kind == "Counter":
                series |= {name.removesuffix("_total") + "_total"}
            elif kind == "Histogram":
                series |= {name + suffix for suffix in ("_bucket", "_sum", "_count")}
            else:
                series.add(name)
    return series


def _rule(monitoring: list[dict[str, Any]], name: str) -> dict[str, Any]:
    rules = [r for g in find(monitoring, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    [rule] = [r for r in rules if r.get("alert") == name or r.get("record") == name]
    return rule


@pytest.mark.parametrize("alert, needles, duration", [
    ("KubeIdleJanitorNotCycling", ["time() - max(janitor_last_success_timestamp_seconds) > 600", "absent("], "5m"),
    ("KubeIdleJanitorEvidenceUnavailable", ["sum(increase(janitor_evidence_failures_total[15m])) > 0"], "15m"),
    ("KubeIdleJanitorDeletionSpike",
     ['sum(increase(janitor_actions_total{action=~"delete|force-delete"}[1h])) > 25'], "5m"),
    ("KubeIdleJanitorTripwireTripped", ["max(janitor_tripwire_tripped) == 1"], "1m"),
    ("KubeIdleJanitorStuckLeftovers", ["janitor_node_leftover_tasks > 0"], "15m"),
    ("KubeIdleJanitorSlackButtonsDisconnected", ["max(janitor_slack_socket_connected) == 0"], "15m"),
    ("KubeIdleJanitorGPUPodsWithoutTelemetry", ["sum(janitor_gpu_pods_without_telemetry) > 0"], "30m"),
    ("KubeIdleJanitorNodeAgentSilent", ["time() - janitor_node_agent_last_scan_timestamp_seconds > 300"], "5m"),
    ("KubeIdleJanitorNodeAgentCannotSee", ["janitor_node_agent_pods_visible == 0"], "15m"),
    ("KubeIdleJanitorSightLost", ["max(janitor_sight_lost) == 1"], "10m"),
    ("KubeIdleJanitorLedgerContended", ["sum(increase(janitor_ledger_contended_total[1h])) > 0"], "5m"),
    ("KubeIdleJanitorBesideKubeJanitor", ["max(janitor_kube_janitor_beside) > 0"], "1h"),
    ("KubeIdleJanitorGpuSignalMissing", ["min by (policy, signal) (janitor_gpu_signal_coverage_ratio) < 1"], "1h"),
    ("KubeIdleJanitorKindForbidden", ['max by (kind) (janitor_kinds_skipped{reason="forbidden"}) == 1'], "15m"),
    ("KubeIdleJanitorClockSkew", ['max(janitor_deletions_paused{reason="clock-skew"}) == 1'], "10m"),
    ("KubeIdleJanitorLedgerUnreadable", ['max(janitor_deletions_paused{reason="ledger-unreadable"}) == 1'], "10m"),
    ("KubeIdleJanitorScrapeIntervalsUnknown", ["max(janitor_scrape_intervals_unknown) == 1"], "15m"),
    ("KubeIdleJanitorLifecycleWritesFailing", ["sum(increase(janitor_lifecycle_write_failures_total[15m])) > 0"],
     "15m"),
    ("KubeIdleJanitorMessagesFailing",
     ['sum by (to) (increase(janitor_slack_messages_total{result="failed"}[15m])) > 0'], "15m"),
])
def test_alerts(monitoring, alert: str, needles: list[str], duration: str | None) -> None:
    rule = _rule(monitoring, alert)
    for needle in needles:
        assert needle in rule["expr"]
    assert rule.get("for") == duration
    assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["description"]


@pytest.mark.parametrize("record, function", [
    ("exported_pod_gpu:DCGM_FI_DEV_GPU_UTIL:max_over_time2h", "max_over_time(DCGM_FI_DEV_GPU_UTIL"),
])
def test_recording_rules_per_pod_and_gpu_over_2h(monitoring, record: str, function: str) -> None:
    expr = _rule(monitoring, record)["expr"]
    assert "by (exported_namespace, exported_pod, gpu, Hostname)" in expr and function in expr and "[2h]" in expr


def test_rules_and_dashboard_use_only_exported_series(monitoring) -> None:
    exported = _exported_series()
    rules = json.dumps(find(monitoring, "PrometheusRule")["spec"])
    dashboard = find(monitoring, "ConfigMap", "kube-idle-janitor-dashboard")["data"]["kube-idle-janitor.json"]
    used = set(re.findall(r"\bjanitor_[a-z_]+", rules + dashboard))
    assert used and used <= exported, sorted(used - exported)


def test_dashboard_panels(monitoring) -> None:
    cm = find(monitoring, "ConfigMap", "kube-idle-janitor-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["kube-idle-janitor.json"])
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in dashboard["panels"]}
    for series in ("janitor_cycles_total", "janitor_cycle_duration_seconds_bucket", "janitor_actions_total",
                   "janitor_marked_workloads", "janitor_would_reclaim_gpu_seconds", "janitor_slack_messages_total",
                   "janitor_tripwire_tripped", "janitor_node_leftover_tasks", "janitor_node_oom_kills_total"):
        assert any(series in e for e in exprs.values()), series
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_servicemonitors_select_the_metrics_services(base, monitoring) -> None:
    for monitor in (o for o in monitoring if o["kind"] == "ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        [service] = [s for s in base if s["kind"] == "Service" and s["metadata"]["labels"].items() >= selector.items()]
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]


def test_admin_guide_documents_the_secret_and_every_flag() -> None:
    guide = (ROOT / "docs" / "admin-guide.md").read_text()
    assert "kubectl -n kube-idle-janitor create secret generic kube-idle-janitor-slack --from-literal=token=" in guide
    for command in ("run", "node-agent"):
        for flag in _flags(command):
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in guide, f"docs/admin-guide.md does not mention janitor {command} {flag}"
