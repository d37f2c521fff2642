"""The janitor runs under the ClusterRole generated from its kinds, and no more.

Aspects covered:
- with the generated ClusterRole (and the state Role in its namespace) bound to its ServiceAccount,
  a cycle deletes an expired
  ConfigMap and an expired Job (whose pods then go by garbage collection), posts its Events and
  writes its ledger;
- a configured kind the role does not cover is skipped and counted (metric), not an error;
- the ServiceAccount cannot delete what is outside the role (e.g. Secrets).
"""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from runner import Runner
from runner import settings as build

from devenv import access
from devenv.procs import wait_until
from janitor import annotations as a
from janitor import rbac
from janitor.decide.rails import Rails
from janitor.settings import DEFAULT_KINDS


@pytest.fixture
def janitor_api(kube: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path):
    """An ApiClient authenticated as a janitor ServiceAccount bound to the generated role,
    generated from every default kind except Services."""
    kinds = tuple(k for k in DEFAULT_KINDS if k.kind != "Service")
    role = rbac.cluster_role(kinds, name=f"janitor-{uuid.uuid4().hex[:6]}")
    with access.bound_account(kube, namespace, "janitor", role, tmp_path / "janitor.kubeconfig") as api:
        yield api


def test_cycle_under_generated_role(janitor_api, kube, core: client.CoreV1Api, namespace: str) -> None:
    batch = client.BatchV1Api(kube)
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="old", annotations={a.EXPIRES: "2020-01-01"})))
    batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="sweep", annotations={a.EXPIRES: "2020-01-01"}),
        spec=client.V1JobSpec(template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"job": "sweep"}),
            spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(name="c", image="x")])))))
    wait_until(lambda: len(core.list_namespaced_pod(namespace, label_selector="job=sweep").items) == 1,
               timeout=60, what="job pod")

    janitor = Runner(janitor_api, build(namespaces=(namespace,), state_namespace=namespace, rails=Rails()))
    result = janitor.run_cycle()

    assert sorted(act.target.name for act in result.deleted()) == ["old", "sweep"]
    assert all(str(r.outcome) == "done" for r in result.results)
    [skipped] = [n for n in result.plan.notices if n.startswith("not listed")]
    assert "Service (" in skipped and "notebooks.kubeflow.org" not in skipped  # Notebooks: served and allowed
    assert janitor.telemetry.registry.get_sample_value("janitor_kinds_skipped",
                                                        {"kind": "Service", "reason": "forbidden"}) == 1  # 403
    wait_until(lambda: not core.list_namespaced_pod(namespace, label_selector="job=sweep").items, timeout=60,
               what="job pod garbage-collected")
    assert "ledger.json" in core.read_namespaced_config_map("janitor-state", namespace).data

    secrets = client.CoreV1Api(janitor_api)
    core.create_namespaced_secret(namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="s")))
    with pytest.raises(ApiException) as denied:
        secrets.delete_namespaced_secret("s", namespace)
    assert denied.value.status == 403
