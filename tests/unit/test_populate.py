"""`python -m devenv populate`: the manifests it builds, and the order it creates them in.

Aspects covered:
- a default node: 20 pods bound to it using its 8 GPUs exactly, unique names, in one of the
  team-NN namespaces (spread over all 50), node and namespaces labelled for `--delete`;
- every owner (Job, ReplicaSet, StatefulSet) selects exactly the pods made for it, as many as it
  wants, so its controller adopts them and makes none; a Deployment's template is its
  ReplicaSet's but for pod-template-hash (so it adopts that ReplicaSet instead of rolling out);
  a StatefulSet's pod carries its identity; Job pods never restart;
- small `--pods-per-node` or odd `--gpus-per-node`: a workload whose pods would not all fit is
  left out whole, GPUs never exceed the node's;
- `janitor/ttl` (a year, as the janitor parses it) on the ConfigMaps and every other Job; pod
  start times 1-48 hours before `now`, deterministic for a given `now`;
- creation: 409 counts as existing (a re-run), other failures are counted with their reason; the
  phases run namespaces, nodes (then waiting until kwok made them Ready), pods, notebooks,
  adopters, deployments, and StatefulSets are owned by their Notebook's UID.
"""

from __future__ import annotations

import collections
import datetime
import json
from typing import Any

import pytest

from devenv import populate
from devenv.nodes import KWOK_ANNOTATION, STARTED_AT
from devenv.populate import POPULATED, Manifest, NodePlan, node_plan, path_of
from janitor.annotations import parse_ttl

NOW = datetime.datetime(2025, 11, 25, 12, 0, tzinfo=datetime.timezone.utc)


def gpus(pod: Manifest) -> int:
    return sum(int(c["resources"].get("limits", {}).get("nvidia.com/gpu", 0)) for c in pod["spec"]["containers"])


def selected(owner: Manifest, pods: list[Manifest]) -> list[Manifest]:
    wanted = owner["spec"]["selector"]["matchLabels"].items()
    return [p for p in pods if p["metadata"]["labels"].items() >= wanted]


def desired(owner: Manifest) -> int:
    return int(owner["spec"].get("replicas", owner["spec"].get("parallelism", 0)))


def test_a_default_node_has_twenty_bound_pods_on_its_eight_gpus() -> None:
    plan = node_plan(7, now=NOW)
    assert plan.node["metadata"]["name"] == "scale-node-00007"
    assert plan.node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    assert plan.node["metadata"]["labels"][POPULATED] == "true"
    assert plan.node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert len(plan.pods) == 20 and sum(map(gpus, plan.pods)) == 8
    assert {p["spec"]["nodeName"] for p in plan.pods} == {"scale-node-00007"}
    assert len({p["metadata"]["name"] for p in plan.pods}) == 20
    assert {p["metadata"]["namespace"] for p in plan.pods} == {plan.namespace} == {"team-07"}
    kinds = collections.Counter(o["kind"] for o in plan.adopters + plan.deployments + plan.notebooks)
    assert kinds == {"Job": 1, "StatefulSet": 1, "Notebook": 1, "ReplicaSet": 2, "Deployment": 2}
    assert sum(gpus(p) for p in plan.pods if p["metadata"]["name"].startswith("batch-")) == 0
    assert {node_plan(i, now=NOW).namespace for i in range(1, 101)} == {f"team-{i:02d}" for i in range(1, 51)}
    assert populate.namespace_manifest(3)["metadata"] == {"name": "team-03", "labels": {POPULATED: "true"}}


@pytest.mark.parametrize(("pods_per_node", "gpus_per_node"), [(20, 8), (40, 16), (3, 8), (1, 8), (6, 2), (20, 0)])
def test_owners_select_exactly_the_pods_made_for_them(pods_per_node: int, gpus_per_node: int) -> None:
    plan = node_plan(12, pods_per_node=pods_per_node, gpus_per_node=gpus_per_node, now=NOW)
    assert len(plan.pods) == pods_per_node
    assert sum(map(gpus, plan.pods)) <= gpus_per_node
    claimed: list[str] = []
    for owner in plan.adopters:
        mine = selected(owner, plan.pods)
        assert len(mine) == desired(owner) > 0, owner["metadata"]["name"]
        claimed += [p["metadata"]["name"] for p in mine]
        template = owner["spec"]["template"]
        assert template["metadata"]["labels"].items() >= owner["spec"]["selector"]["matchLabels"].items()
        for p in mine:  # the pods are the template's, bound to the node
            assert p["spec"]["containers"] == template["spec"]["containers"]
    assert len(claimed) == len(set(claimed))
    for deployment in plan.deployments:
        [rs] = selected(deployment, plan.adopters)  # the ReplicaSet it adopts
        labels = dict(rs["spec"]["template"]["metadata"]["labels"])
        assert rs["metadata"]["name"] == f"{deployment['metadata']['name']}-{labels.pop('pod-template-hash')}"
        assert {**rs["spec"]["template"], "metadata": {"labels": labels}} == deployment["spec"]["template"]
        assert desired(rs) == desired(deployment)


def test_job_and_statefulset_pods_look_like_their_controllers_made_them() -> None:
    plan = node_plan(4, now=NOW)
    job = next(o for o in plan.adopters if o["kind"] == "Job")
    assert job["spec"]["manualSelector"] is True and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert all(p["spec"]["restartPolicy"] == "Never" for p in selected(job, plan.pods))
    sts = next(o for o in plan.adopters if o["kind"] == "StatefulSet")
    [pod] = selected(sts, plan.pods)
    name = sts["metadata"]["name"]
    assert pod["metadata"]["name"] == f"{name}-0"
    assert pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == f"{name}-0"
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"{name}-0", sts["spec"]["serviceName"])
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert [n["metadata"]["name"] for n in plan.notebooks] == [name]


def test_ttls_are_a_year_and_start_times_are_hours_before_now() -> None:
    plans = [node_plan(i, now=NOW) for i in (1, 2)]
    for plan in plans:
        [cm] = plan.config_maps
        ttl = parse_ttl(cm["metadata"]["annotations"]["janitor/ttl"])
        assert ttl is not None and ttl >= datetime.timedelta(days=360)
    ttls = [next(o for o in p.adopters if o["kind"] == "Job")["metadata"].get("annotations", {}).get("janitor/ttl")
            for p in plans]
    assert ttls == [None, populate.TTL]
    for pod in plans[0].pods:
        started = datetime.datetime.fromisoformat(pod["metadata"]["annotations"][STARTED_AT])
        assert datetime.timedelta(hours=1) <= NOW - started <= datetime.timedelta(hours=48)
    assert node_plan(1, now=NOW) == plans[0]


def test_paths() -> None:
    plan = node_plan(1, now=NOW)
    assert path_of(plan.node) == "/api/v1/nodes"
    assert path_of(plan.pods[0]) == "/api/v1/namespaces/team-01/pods"
    assert path_of(plan.deployments[0]) == "/apis/apps/v1/namespaces/team-01/deployments"
    assert path_of(plan.notebooks[0]) == "/apis/kubeflow.org/v1/namespaces/team-01/notebooks"
    assert path_of(populate.namespace_manifest(1)) == "/api/v1/namespaces"


class Reply:
    def __init__(self, status: int, body: Manifest) -> None:
        self.status_code, self._body = status, body
        self.text = json.dumps(body)

    def json(self) -> Manifest:
        return self._body

    def raise_for_status(self) -> None:
        assert self.status_code < 400


class FakeApi:
    """Records POSTs; answers 409 for names listed in `existing` and 422 for those in `invalid`."""

    def __init__(self, existing: set[str] = frozenset(), invalid: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.posted: list[Manifest] = []
        self.existing, self.invalid = existing, invalid

    def request(self, method: str, path: str, body: Manifest | None = None, **kwargs: Any) -> Reply:
        if method == "GET" and path == "/api/v1/nodes":  # kwok made every node Ready at once
            ready = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
            nodes = [{**n, **ready} for n in self.posted if n["kind"] == "Node"]
            return Reply(200, {"items": nodes, "metadata": {}})
        if method == "GET":
            return Reply(200, {})
        assert method == "POST" and body is not None and path == path_of(body)
        name = body["metadata"]["name"]
        if name in self.existing:
            return Reply(409, {"reason": "AlreadyExists"})
        if name in self.invalid:
            return Reply(422, {"message": f"{name} is invalid"})
        self.posted.append(body)
        return Reply(201, {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}})


def test_create_all_counts_existing_and_failed_objects() -> None:
    plan = node_plan(1, now=NOW)
    api = FakeApi(existing={plan.pods[0]["metadata"]["name"]}, invalid={plan.pods[1]["metadata"]["name"]})
    seen: list[str] = []
    progress = populate.create_all(api, "pods", plan.pods, len(plan.pods), workers=4,  # type: ignore[arg-type]
                                   on_created=lambda sent, got: seen.append(got["metadata"]["uid"]))
    assert (progress.done, progress.existed, progress.failed) == (18, 1, 1)
    assert "is invalid" in progress.errors[0] and len(seen) == 18


def test_populate_creates_pods_before_their_owners_and_owns_statefulsets_by_notebook(
        monkeypatch: pytest.MonkeyPatch) -> None:
    plans: list[NodePlan] = [node_plan(i, now=NOW) for i in (1, 2)]
    api = FakeApi()
    monkeypatch.setattr(populate, "node_plan", lambda i, **kw: plans[i - 1])
    summary = populate.populate(api, nodes=2, workers=2, settle=0)  # type: ignore[arg-type]
    order = [m["kind"] for m in api.posted]
    phase = {"Namespace": 0, "Node": 1, "Pod": 2, "ConfigMap": 2, "Notebook": 3, "ReplicaSet": 4, "Job": 4,
             "StatefulSet": 4, "Deployment": 5}
    assert [phase[k] for k in order] == sorted(phase[k] for k in order)
    assert summary["pods"] == 40 and summary["failed"] == 0
    assert summary["objects"] == len(api.posted) == 2 + sum(p.objects() for p in plans)
    for sts in (m for m in api.posted if m["kind"] == "StatefulSet"):
        [ref] = sts["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("Notebook", f"uid-{sts['metadata']['name']}", True)


def test_owner_reference_shape() -> None:
    notebook: dict[str, Any] = node_plan(1, now=NOW).notebooks[0]
    assert populate._owned_by(notebook, "u") == {"apiVersion": "kubeflow.org/v1", "kind": "Notebook",
                                                 "name": "nb-1", "uid": "u", "controller": True,
                                                 "blockOwnerDeletion": True}
