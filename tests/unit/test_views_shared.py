"""The watch cache holds every object's view for as long as the daemon runs: the strings that
repeat across objects (kinds, API versions, namespaces, container names, node labels, and the
namespaces, nodes and models of the usage evidence) are held once however many objects name
them, not once per object decoded (two pages are decoded apart here, as the apiserver's pages
are), and what `kubectl apply` records of an object is not kept at all."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from janitor.decide.evidence import EvidenceWindow
from janitor.observe import cluster, evidence, views
from janitor.observe.answers import parse_answer
from janitor.observe.prometheus import HONOR_LABELS

REPLICA_SETS = cluster.ResourceKind("apps", "v1", "ReplicaSet", "replicasets")


def _page(text: str) -> dict:
    return json.loads(text)  # a string each time: nothing shared with another page


def _replica_set(i: int) -> str:
    return json.dumps({"metadata": {"name": f"train-{i}", "namespace": "team-a", "uid": f"u{i}",
                                    "resourceVersion": "1", "creationTimestamp": "2026-11-01T00:00:00Z",
                                    "ownerReferences": [{"kind": "Deployment", "apiVersion": "apps/v1",
                                                         "name": "train", "uid": "d1", "controller": True}]}})


def _pod(i: int) -> str:
    return json.dumps({"metadata": {"name": f"train-{i}", "namespace": "team-a", "uid": f"p{i}",
                                    "resourceVersion": "1", "creationTimestamp": "2026-11-01T00:00:00Z"},
                       "spec": {"nodeName": "gpu-1", "containers": [{"name": "worker"}]},
                       "status": {"phase": "Running", "containerStatuses": [
                           {"name": "worker", "restartCount": 0, "state": {"running": {}}}]}})


def _node(i: int) -> str:
    return json.dumps({"metadata": {"name": f"gpu-{i}", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100"}},
                       "status": {}})


def test_two_objects_read_apart_share_their_kind_version_namespace_and_owner_kind() -> None:
    a, b = (cluster.to_view(REPLICA_SETS, _page(_replica_set(i))) for i in (1, 2))
    assert a.ref.api_version == "apps/v1" and a.ref.api_version is b.ref.api_version
    assert a.ref.namespace == "team-a" and a.ref.namespace is b.ref.namespace
    assert a.controller is not None and b.controller is not None
    assert a.controller.kind is b.controller.kind and a.controller.api_version is b.controller.api_version


def test_two_pods_read_apart_share_their_container_names_and_two_nodes_their_labels() -> None:
    a, b = (views.pod_view(_page(_pod(i))) for i in (1, 2))
    assert a.state.containers[0].name == "worker" and a.state.containers[0].name is b.state.containers[0].name
    x, y = (views.node_info(_page(_node(i))) for i in (1, 2))
    product = "nvidia.com/gpu.product"
    assert x.labels[product] == "NVIDIA-A100" and x.labels[product] is y.labels[product]
    assert views.node_info(_page(_node(1))).name is x.name  # the name a pod's `node` holds, once


def test_the_evidence_holds_a_namespace_node_and_model_once_for_every_gpu() -> None:
    rows = [{"metric": {"namespace": "team-a", "pod": f"train-{i}", "gpu": "0", "Hostname": "gpu-1",
                        "modelName": "NVIDIA-A100", "stat": "peak"}, "value": [1795313821, "90"]} for i in (1, 2)]
    groups = evidence.gpu_groups(HONOR_LABELS)
    for row in rows:  # each answer decoded apart
        parse_answer(200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [row]}})
                     .encode(), "q", groups)
    window = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", timedelta(hours=1), timedelta(seconds=15),
                            datetime(2026, 11, 29, tzinfo=timezone.utc))
    found = evidence.fold_gpu(parse_answer(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}',
                                           "q"), window, HONOR_LABELS, groups=groups)
    (k1, (s1,)), (k2, (s2,)) = sorted(found.pods.items())
    assert (k1.namespace, s1.node, s1.peak) == ("team-a", "gpu-1", 90.0)
    assert k1.namespace is k2.namespace and s1.node is s2.node and s1.model is s2.model


def test_what_kubectl_apply_records_of_an_object_is_not_kept_in_its_view() -> None:
    """`kubectl apply` writes the whole object into an annotation, a ConfigMap's data included:
    the cache does not keep that copy of every applied object. Every other annotation stays."""
    applied = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "data": {"model.json": "x" * 50_000}})
    meta = {"name": "weights", "namespace": "team-a", "uid": "c1", "resourceVersion": "1",
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied, "janitor/ttl": "7d",
                            "owner": "ada"}}
    config_map = cluster.to_view(cluster.ResourceKind("", "v1", "ConfigMap", "configmaps"), {"metadata": meta})
    assert config_map.annotations == {"janitor/ttl": "7d", "owner": "ada"}
    assert config_map.readings.rules  # its janitor/ttl is read as before
    pod = views.pod_view({"metadata": {**meta, "uid": "p1"}, "spec": {}, "status": {}})
    assert pod.annotations == {"janitor/ttl": "7d", "owner": "ada"}
    assert meta["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] == applied  # the item untouched


def test_a_pod_names_the_claims_of_its_spec_its_templates_and_its_extended_resources() -> None:
    """A pod names a DRA claim in `spec.resourceClaims`, in `status.resourceClaimStatuses` (one
    generated from a template) and in `status.extendedResourceClaimStatus` (the claim the scheduler
    made for an extended resource a DRA driver backs, such as a GPU requested by its resource name):
    a claim any of them names is in use while the pod runs, and its devices are the pod's."""
    pod = views.pod_view({
        "metadata": {"name": "train-0", "namespace": "team-a", "uid": "p1", "resourceVersion": "1"},
        "spec": {"resourceClaims": [{"name": "nic", "resourceClaimName": "shared-nic"}]},
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-0-gpu-x7k2p"}],
                   "extendedResourceClaimStatus": {"resourceClaimName": "train-0-extended-resources-4mq7b",
                                                   "requestMappings": [{"containerName": "main",
                                                                        "resourceName": "example.com/gpu",
                                                                        "requestName": "container-0-request-0"}]}},
    })
    assert pod.resource_claims == ("shared-nic", "train-0-gpu-x7k2p", "train-0-extended-resources-4mq7b")
