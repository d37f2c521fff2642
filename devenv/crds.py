"""Custom resources a research cluster has, served by the sandbox's real apiserver.

Kubeflow's Notebook is what most labs' interactive GPU workloads are: Notebook -> StatefulSet ->
Pod. The sandbox registers its CRD (schema left open, as the janitor reads only metadata) so the
janitor's dynamic-client paths, owner resolution through a custom resource and the `stop` action
run against the apiserver, without a Kubeflow controller acting on them.
"""

from __future__ import annotations

from kubernetes import client

from devenv.procs import wait_until

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


def install(api: client.ApiClient, timeout: float = 30.0) -> None:
    """Register the CRDs and wait until the apiserver serves them."""
    crds = client.ApiextensionsV1Api(api)
    crds.create_custom_resource_definition(NOTEBOOK_CRD)

    def established() -> bool:
        status = crds.read_custom_resource_definition(NOTEBOOK_CRD["metadata"]["name"]).status
        return any(c.type == "Established" and c.status == "True" for c in (status.conditions or []))

    wait_until(established, timeout=timeout, what="the Notebook CRD to be established")
