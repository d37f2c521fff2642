"""Who talks to the sandbox: the admin, and ServiceAccounts under their own RBAC.

The janitor must be proven to work with exactly the permissions its ClusterRole grants, so tests
and the demo can mint a real token for any ServiceAccount (TokenRequest API, as kubectl
`create token` does) and get a kubeconfig or an ApiClient that carries it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from devenv.controlplane import write_kubeconfig


def api_client(kubeconfig: Path) -> client.ApiClient:
    """An ApiClient for one kubeconfig, independent of the process-wide default config."""
    return config.new_client_from_config(config_file=str(kubeconfig))


def service_account_token(
    core: client.CoreV1Api, namespace: str, name: str, *, seconds: int = 3600
) -> str:
    """A bound token for ServiceAccount namespace/name, valid for `seconds`."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
    )
    response = core.create_namespaced_service_account_token(name, namespace, request)
    return str(response.status.token)


def service_account_kubeconfig(
    admin: client.ApiClient, namespace: str, name: str, path: Path, *, seconds: int = 3600
) -> Path:
    """Write a kubeconfig that authenticates as ServiceAccount namespace/name."""
    token = service_account_token(client.CoreV1Api(admin), namespace, name, seconds=seconds)
    cfg = admin.configuration
    return write_kubeconfig(
        path, server=cfg.host, ca=Path(cfg.ssl_ca_cert), token=token,
        user=f"system:serviceaccount:{namespace}:{name}",
    )


def namespaced_account(admin: client.ApiClient, namespace: str, name: str, role: str, path: Path) -> Path:
    """A kubeconfig of a new ServiceAccount `name` holding the ClusterRole `role` (view, edit) in
    `namespace` only, its context set to that namespace: a researcher's rights, as tests need them."""
    client.CoreV1Api(admin).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(namespace, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=f"{name}-{role}"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)]))
    service_account_kubeconfig(admin, namespace, name, path)
    written = yaml.safe_load(path.read_text())
    written["contexts"][0]["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(written))
    return path


@contextlib.contextmanager
def bound_account(admin: client.ApiClient, namespace: str, account: str, role: dict[str, Any],
                  kubeconfig: Path) -> Iterator[client.ApiClient]:
    """An ApiClient as ServiceAccount `account` of `namespace`, bound to the ClusterRole `role`
    (created here under its own name, and deleted with its binding afterwards: they outlive namespaces),
    and to the janitor's state Role in `namespace` (its state ConfigMap's first create), as the
    manifests bind them."""
    from janitor import rbac

    rbac_api = client.RbacAuthorizationV1Api(admin)
    name = role["metadata"]["name"]
    client.CoreV1Api(admin).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=account)))
    rbac_api.create_cluster_role(role)
    rbac_api.create_cluster_role_binding({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    state = f"{name}-state"
    rbac_api.create_namespaced_role(namespace, rbac.state_role(namespace=namespace, name=state))
    rbac_api.create_namespaced_role_binding(namespace, rbac.role_binding(name=state, role=state, namespace=namespace,
                                                                         service_account=account))
    api = api_client(service_account_kubeconfig(admin, namespace, account, kubeconfig))
    try:
        yield api
    finally:
        api.close()
        rbac_api.delete_cluster_role_binding(name)
        rbac_api.delete_cluster_role(name)
