"""Owner resolution: the workload behind a pod, or why it cannot be told.

Aspects covered:
- Pod -> ReplicaSet -> Deployment resolves to the Deployment, with the chain;
- Pod -> Job -> CronJob resolves to the Job, or to the CronJob when configured;
- StatefulSet, and a custom resource on top (Notebook -> StatefulSet -> Pod);
- a bare pod is its own workload;
- DaemonSet pods are never candidates;
- an owner missing from the snapshot or being deleted makes the workload unknown;
- Helm, Argo CD and Flux markers anywhere on the chain are flagged.
"""

from __future__ import annotations

import pytest
from factories import obj

from janitor.decide.workloads import CronJobMode, NotACandidate, Unknown, Workload, resolve


def index(*objects):
    return {o.ref.uid: o for o in objects}


def test_deployment_chain() -> None:
    deploy = obj("web", kind="Deployment")
    rs = obj("web-1", kind="ReplicaSet", owner=deploy)
    pod = obj("web-1-x", kind="Pod", owner=rs)
    result = resolve(pod, index(deploy, rs, pod))
    assert isinstance(result, Workload)
    assert result.ref == deploy.ref
    assert [r.kind for r in result.chain] == ["Pod", "ReplicaSet", "Deployment"]


@pytest.mark.parametrize(("mode", "expected"), [(CronJobMode.JOB, "Job"), (CronJobMode.CRONJOB, "CronJob")],
                         ids=["job", "cronjob"])
def test_cronjob_mode(mode: CronJobMode, expected: str) -> None:
    cron = obj("nightly", kind="CronJob")
    job = obj("nightly-123", kind="Job", owner=cron)
    pod = obj("nightly-123-x", kind="Pod", owner=job)
    result = resolve(pod, index(cron, job, pod), cronjob_mode=mode)
    assert isinstance(result, Workload) and result.ref.kind == expected


def test_custom_resource_on_top() -> None:
    notebook = obj("alice-nb", kind="Notebook")
    sts = obj("alice-nb", kind="StatefulSet", owner=notebook)
    pod = obj("alice-nb-0", kind="Pod", owner=sts)
    result = resolve(pod, index(notebook, sts, pod))
    assert isinstance(result, Workload) and result.ref == notebook.ref


def test_bare_pod_is_its_own_workload() -> None:
    pod = obj("debug", kind="Pod")
    result = resolve(pod, index(pod))
    assert isinstance(result, Workload) and result.ref == pod.ref and result.chain == (pod.ref,)


def test_daemonset_pods_are_never_candidates() -> None:
    ds = obj("dcgm", kind="DaemonSet")
    pod = obj("dcgm-x", kind="Pod", owner=ds)
    assert isinstance(resolve(pod, index(ds, pod)), NotACandidate)


@pytest.mark.parametrize("case", ["missing-owner", "owner-deleting", "pod-deleting"])
def test_unreadable_links_make_it_unknown(case: str) -> None:
    deploy = obj("web", kind="Deployment", deleting=case == "owner-deleting")
    rs = obj("web-1", kind="ReplicaSet", owner=deploy)
    pod = obj("web-1-x", kind="Pod", owner=rs)
    if case == "missing-owner":
        result = resolve(pod, index(rs, pod))
        assert isinstance(result, Unknown) and "cannot be read" in result.why
    elif case == "owner-deleting":
        result = resolve(pod, index(deploy, rs, pod))
        assert isinstance(result, Unknown) and "being deleted" in result.why
    else:
        bare = obj("gone", kind="Pod", deleting=True)
        assert isinstance(resolve(bare, index(bare)), Unknown)


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({"app.kubernetes.io/managed-by": "Helm"}, {}, "Helm"),
        ({"argocd.argoproj.io/instance": "ml"}, {}, "Argo CD"),
        ({}, {"argocd.argoproj.io/tracking-id": "ml:apps/Deployment:x/web"}, "Argo CD"),
        ({"kustomize.toolkit.fluxcd.io/name": "apps"}, {}, "Flux"),
        ({"app.kubernetes.io/managed-by": "kubectl"}, {}, None),
    ],
    ids=["helm", "argocd-label", "argocd-annotation", "flux", "not-managed"],
)
def test_managed_by_markers(labels, annotations, expected) -> None:
    from dataclasses import replace

    deploy = replace(obj("web", kind="Deployment"), labels=labels, annotations=annotations)
    rs = obj("web-1", kind="ReplicaSet", owner=deploy)
    pod = obj("web-1-x", kind="Pod", owner=rs)
    result = resolve(pod, index(deploy, rs, pod))
    assert isinstance(result, Workload) and result.managed_by == expected


def test_a_starting_pod_of_the_workload_is_found_and_others_are_not() -> None:
    import uuid

    from janitor.decide.model import ObjectRef, OwnerRef, PodView
    from janitor.decide.workloads import starting_pod

    deployment = obj("nb", kind="Deployment")
    replicas = obj("nb-1", kind="ReplicaSet", owner=deployment)
    other = obj("web", kind="Deployment")

    def pod(owner, phase: str, deleting: bool = False) -> PodView:
        return PodView(ObjectRef("Pod", "v1", "team-a", f"p-{uuid.uuid4().hex[:4]}", str(uuid.uuid4())), "1", {},
                       OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid), None, phase,
                       None, 1, deleting=deleting)

    objects = index(deployment, replicas, other)
    starting = pod(replicas, "Pending")
    assert starting_pod([pod(replicas, "Running"), starting], deployment, objects) == starting
    assert starting_pod([pod(replicas, "Running"), pod(replicas, "Pending", deleting=True)], deployment,
                        objects) is None
    assert starting_pod([pod(other, "Pending")], deployment, objects) is None
