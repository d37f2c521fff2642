"""Custom resources a research cluster has, served by the sandbox's real apiserver.

Kubeflow's Notebook is what most labs' interactive GPU workloads are: Notebook -> StatefulSet ->
Pod. The sandbox registers its CRD (schema left open, as the janitor reads only metadata) so the
janitor's dynamic-client paths, owner resolution through a custom resource and the `stop` action
run against the apiserver, without a Kubeflow controller acting on them.

Kueue's Workload and KubeRay's RayCluster are served from their projects' own definitions, as the
projects release them (schemas, versions, Kueue's v1beta1 and v1beta2 both served): the CRD files
come from the projects' Go modules through the module proxy (`go mod download`), once per version,
and are kept in ${XDG_CACHE_HOME:-~/.cache}/janitor-crds/<module>@<version>/. No Kueue or KubeRay
controller runs: a test plays their part where it needs one.

node-operation-controller's five CRDs (NodeOperation, NodeOperationTemplate, NodeRemediation,
NodeRemediationTemplate, NodeDisruptionBudget) come the same way, but only where a test asks for
them (`install(api, NODE_OPERATIONS)`): the remediation example in manifests/examples/ is
validated against them.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from devenv.procs import wait_until

# (module, version, file in the module): Kueue v0.17 serves v1beta2 (stored) and v1beta1 (deprecated).
UPSTREAM = {
    "workloads.kueue.x-k8s.io": ("sigs.k8s.io/kueue", "v0.17.0",
                                 "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml"),
    "rayclusters.ray.io": ("github.com/ray-project/kuberay/ray-operator", "v1.5.0",
                           "config/crd/bases/ray.io_rayclusters.yaml"),
}
NODE_OPERATIONS = {
    f"{plural}.nodeops.k8s.preferred.jp": ("github.com/pfnet-research/node-operation-controller", "v0.2.2",
                                           f"config/crd/bases/nodeops.k8s.preferred.jp_{plural}.yaml")
    for plural in ("nodeoperations", "nodeoperationtemplates", "noderemediations", "noderemediationtemplates",
                   "nodedisruptionbudgets")
}


class Unavailable(RuntimeError):
    """The Go module proxy says it does not serve that module version (not a network failure): a
    test that needs the CRD cannot run here until it does, or the CRD is in the cache."""


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "janitor-crds"


def upstream(name: str) -> dict[str, Any]:
    """The CRD `name` as its project ships it, from the cache or else fetched from its Go module once."""
    module, version, path = {**UPSTREAM, **NODE_OPERATIONS}[name]
    cached = cache_root() / f"{module.replace('/', '_')}@{version}" / Path(path).name
    if not cached.exists():
        env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
        with tempfile.TemporaryDirectory() as outside:  # outside any module: a plain download
            answer = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=outside, env=env,
                                    capture_output=True, text=True, check=False, timeout=600)
        found = json.loads(answer.stdout or "{}")
        if answer.returncode != 0 or "Dir" not in found:
            said = found.get("Error") or answer.stderr.strip()
            refused = "This module version is not available" in said or "404 Not Found" in said
            raise (Unavailable if refused else RuntimeError)(f"cannot fetch {module}@{version}: {said}")
        text = (Path(found["Dir"]) / path).read_text()
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial")
        partial.write_text(text)
        partial.replace(cached)  # whole or not at all
    body: dict[str, Any] = yaml.load(cached.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return body

NOTEBOOK_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "notebooks.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "scope": "Namespaced",
        "names": {"plural": "notebooks", "singular": "notebook", "kind": "Notebook", "listKind": "NotebookList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}


def install(api: client.ApiClient, upstreams: Iterable[str] = UPSTREAM, timeout: float = 60.0) -> None:
    """Register the Notebook CRD and the `upstreams` ones (those registered already are left) and wait
    until the apiserver serves them."""
    crds = client.ApiextensionsV1Api(api)
    names = list(upstreams)
    for body in (NOTEBOOK_CRD, *(upstream(name) for name in names)):
        try:
            crds.create_custom_resource_definition(body)
        except client.ApiException as e:
            if e.status != 409:
                raise

    def established(name: str) -> bool:
        status = crds.read_custom_resource_definition(name).status
        return any(c.type == "Established" and c.status == "True" for c in (status.conditions or []))

    for name in (NOTEBOOK_CRD["metadata"]["name"], *names):
        wait_until(lambda n=name: established(n), timeout=timeout, what=f"the {name} CRD to be established")
