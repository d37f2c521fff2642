"""The sandbox's control plane behaves like a cluster where the janitor depends on it.

Aspects covered:
- a Deployment gets a ReplicaSet and pods that reach Running on a fake GPU node, holding GPUs;
- a pod asking for more GPUs than any node has stays Pending and Unschedulable;
- deleting a Job with Background propagation removes its pods (garbage collection runs),
  and a plain DELETE of a batch/v1 Job orphans them (why the janitor always passes Background);
- deleting a Deployment cascades to its ReplicaSet and pods;
- a pod can be held Terminating on purpose, and is removed once released;
- a namespace with pods in it finishes deleting;
- a ServiceAccount token may do what its Role grants and is denied everything else;
- a delete with a stale UID precondition is refused (409), as the janitor's deletes rely on.
"""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devenv import access
from devenv.nodes import HOLD_TERMINATING
from devenv.procs import wait_until

GPU_NODES = {"gpu-node-1", "gpu-node-2"}


def gpu_container(gpus: int = 1, name: str = "main") -> client.V1Container:
    return client.V1Container(
        name=name,
        image="registry.example/train:1",
        resources=client.V1ResourceRequirements(
            requests={"cpu": "1"}, limits={"nvidia.com/gpu": str(gpus)}
        ),
    )


def pods_of(core: client.CoreV1Api, namespace: str, selector: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def make_job(batch: client.BatchV1Api, namespace: str, name: str, parallelism: int) -> client.V1Job:
    return batch.create_namespaced_job(
        namespace,
        client.V1Job(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1JobSpec(
                parallelism=parallelism,
                completions=parallelism,
                backoff_limit=0,
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"job": name}),
                    spec=client.V1PodSpec(restart_policy="Never", containers=[gpu_container()]),
                ),
            ),
        ),
    )


def make_deployment(
    apps: client.AppsV1Api, namespace: str, name: str, replicas: int, container: client.V1Container
) -> None:
    apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1DeploymentSpec(
                replicas=replicas,
                selector=client.V1LabelSelector(match_labels={"app": name}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"app": name}),
                    spec=client.V1PodSpec(containers=[container]),
                ),
            ),
        ),
    )


def test_deployment_pods_run_on_fake_gpu_nodes(kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    apps = client.AppsV1Api(kube)
    make_deployment(apps, namespace, "notebook", 2, gpu_container(gpus=2))
    wait_until(
        lambda: sum(p.status.phase == "Running" for p in pods_of(core, namespace, "app=notebook")) == 2,
        timeout=60, what="2 notebook pods Running",
    )
    pods = pods_of(core, namespace, "app=notebook")
    assert {p.spec.node_name for p in pods} <= GPU_NODES
    replica_sets = apps.list_namespaced_replica_set(namespace).items
    assert len(replica_sets) == 1
    assert replica_sets[0].metadata.owner_references[0].kind == "Deployment"
    for pod in pods:
        assert pod.metadata.owner_references[0].name == replica_sets[0].metadata.name
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
        assert pod.status.pod_ip


def test_pod_wanting_too_many_gpus_stays_pending_unschedulable(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="greedy"),
            spec=client.V1PodSpec(containers=[gpu_container(gpus=16)]),
        ),
    )

    def unschedulable() -> bool:
        pod = core.read_namespaced_pod("greedy", namespace)
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for c in pod.status.conditions or []
        )

    wait_until(unschedulable, timeout=60, what="greedy pod marked Unschedulable")
    pod = core.read_namespaced_pod("greedy", namespace)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


def test_job_delete_with_background_propagation_removes_pods(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    batch = client.BatchV1Api(kube)
    make_job(batch, namespace, "train", parallelism=2)
    wait_until(lambda: len(pods_of(core, namespace, "job=train")) == 2, timeout=60, what="2 job pods")

    batch.delete_namespaced_job("train", namespace, propagation_policy="Background")

    wait_until(lambda: not pods_of(core, namespace, "job=train"), timeout=60, what="job pods garbage-collected")
    with pytest.raises(ApiException) as gone:
        batch.read_namespaced_job("train", namespace)
    assert gone.value.status == 404


def test_plain_job_delete_orphans_its_pods(kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    batch = client.BatchV1Api(kube)
    make_job(batch, namespace, "orphaned", parallelism=1)
    wait_until(lambda: len(pods_of(core, namespace, "job=orphaned")) == 1, timeout=60, what="job pod")

    batch.delete_namespaced_job("orphaned", namespace)  # batch/v1 defaults to orphan

    def orphaned() -> bool:
        pods = pods_of(core, namespace, "job=orphaned")
        return len(pods) == 1 and not pods[0].metadata.owner_references

    wait_until(orphaned, timeout=60, what="job pod orphaned (ownerReference removed)")


def test_deployment_delete_cascades(kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    apps = client.AppsV1Api(kube)
    make_deployment(apps, namespace, "web", 1, client.V1Container(name="web", image="nginx"))
    wait_until(lambda: len(pods_of(core, namespace, "app=web")) == 1, timeout=60, what="web pod")
    apps.delete_namespaced_deployment("web", namespace, propagation_policy="Background")
    wait_until(
        lambda: not apps.list_namespaced_replica_set(namespace).items and not pods_of(core, namespace, "app=web"),
        timeout=60, what="ReplicaSet and pods gone",
    )


def test_pod_can_be_held_terminating(core: client.CoreV1Api, namespace: str) -> None:
    for name, notes in (("stuck", {HOLD_TERMINATING: "true"}), ("normal", {})):
        core.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=name, annotations=notes, labels={"t": "hold"}),
                spec=client.V1PodSpec(containers=[gpu_container()]),
            ),
        )
    wait_until(
        lambda: sum(p.status.phase == "Running" for p in pods_of(core, namespace, "t=hold")) == 2,
        timeout=60, what="both pods Running",
    )
    core.delete_namespaced_pod("stuck", namespace)
    core.delete_namespaced_pod("normal", namespace)

    # kwok finishes the ordinary deletion; once it has, it has also passed over the held pod.
    wait_until(lambda: [p.metadata.name for p in pods_of(core, namespace, "t=hold")] == ["stuck"],
               timeout=60, what="only the held pod left")
    stuck = core.read_namespaced_pod("stuck", namespace)
    assert stuck.metadata.deletion_timestamp is not None
    assert stuck.status.phase == "Running"

    core.patch_namespaced_pod("stuck", namespace, {"metadata": {"annotations": {HOLD_TERMINATING: None}}})
    wait_until(lambda: not pods_of(core, namespace, "t=hold"), timeout=60, what="released pod deleted")


def test_namespace_with_pods_finishes_deleting(core: client.CoreV1Api) -> None:
    name = f"doomed-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_until(lambda: bool(core.list_namespaced_service_account(name).items), timeout=30, what="default SA")
    core.create_namespaced_pod(
        name, client.V1Pod(metadata=client.V1ObjectMeta(name="p"), spec=client.V1PodSpec(containers=[gpu_container()]))
    )
    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as e:
            return e.status == 404
        return False

    wait_until(gone, timeout=120, what=f"namespace {name} deleted")


def test_service_account_token_is_held_to_its_rbac(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path
) -> None:
    rbac = client.RbacAuthorizationV1Api(kube)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="reader"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
        ),
    )
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(metadata=client.V1ObjectMeta(name="victim"), spec=client.V1PodSpec(containers=[gpu_container()])),
    )
    config = access.service_account_kubeconfig(kube, namespace, "reader", tmp_path / "reader.kubeconfig")
    with access.api_client(config) as as_reader:
        reader = client.CoreV1Api(as_reader)
        assert [p.metadata.name for p in reader.list_namespaced_pod(namespace).items] == ["victim"]
        denied = []
        for attempt in (
            lambda: reader.delete_namespaced_pod("victim", namespace),
            lambda: reader.list_pod_for_all_namespaces(),
            lambda: reader.list_namespaced_config_map(namespace),
            lambda: reader.list_node(),
        ):
            with pytest.raises(ApiException) as refused:
                attempt()
            denied.append(refused.value.status)
        assert denied == [403, 403, 403, 403]
    assert core.read_namespaced_pod("victim", namespace).metadata.deletion_timestamp is None


def test_delete_with_stale_uid_precondition_is_refused(core: client.CoreV1Api, namespace: str) -> None:
    pod = core.create_namespaced_pod(
        namespace,
        client.V1Pod(metadata=client.V1ObjectMeta(name="p"), spec=client.V1PodSpec(containers=[gpu_container()])),
    )
    stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=str(uuid.uuid4())))
    with pytest.raises(ApiException) as conflict:
        core.delete_namespaced_pod("p", namespace, body=stale)
    assert conflict.value.status == 409
    fresh = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=pod.metadata.uid))
    core.delete_namespaced_pod("p", namespace, body=fresh)
