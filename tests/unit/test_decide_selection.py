"""Selection: which workload a pod belongs to, which policy governs it, and what is left alone.

Aspects covered:
- Pod -> ReplicaSet -> Deployment resolves to the Deployment, with the chain;
- Pod -> Job -> CronJob resolves to the Job, or to the CronJob when configured;
- StatefulSet, and a custom resource on top (Notebook -> StatefulSet -> Pod);
- a bare pod is its own workload; pods of one workload group together;
- DaemonSet pods are never candidates (grouped, for stuck-pod reports only); pods in protected
  namespaces are not grouped at all;
- an owner missing from the observation or being deleted makes the workload unknown (one per pod),
  matched by its pod's controller kind;
- Helm, Argo CD and Flux markers anywhere on the chain are flagged;
- opt-out on the workload or on its namespace, honoured per policy; the first matching policy per
  trigger governs, and must match every judged pod;
- a ReplicaSet's annotations are its Deployment's copies.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from factories import NOW, obj

from janitor import annotations as a
from janitor.decide import governance, selection
from janitor.decide.model import (
    NamespaceView,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodView,
)
from janitor.decide.rails import Rails
from janitor.decide.selection import CronJobMode, Workload
from janitor.policy.model import IdleGpu, Lifecycle, Match, Namespaces, Pending, Policy


def pod(name: str, owner: ObjectView | None, *, ns: str = "team-a", phase: str = "Running",
        labels: dict[str, str] | None = None, deleting: bool = False) -> PodView:
    controller = OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid) if owner else None
    return PodView(ObjectRef("Pod", "v1", ns, name, str(uuid.uuid4())), "1", labels or {}, controller, "n1", phase,
                   NOW, 1, deleting=deleting)


def group(objects: tuple[ObjectView, ...], pods: tuple[PodView, ...], *, rails: Rails = Rails(),
          namespaces: dict[str, NamespaceView] | None = None, mode: CronJobMode = CronJobMode.JOB) -> list[Workload]:
    return list(selection.workloads(Observation(NOW, objects, pods, namespaces or {}), rails, cronjob_mode=mode))


def test_deployment_chain_and_pods_grouped() -> None:
    deploy = obj("web", kind="Deployment")
    rs = obj("web-1", kind="ReplicaSet", owner=deploy)
    [workload] = group((deploy, rs), (pod("web-1-x", rs), pod("web-1-y", rs)))
    assert workload.ref == deploy.ref and workload.known and workload.kind == "Deployment"
    assert [r.kind for r in workload.chain] == ["Pod", "ReplicaSet", "Deployment"]
    assert len(workload.pods) == 2


@pytest.mark.parametrize(("mode", "expected"), [(CronJobMode.JOB, "Job"), (CronJobMode.CRONJOB, "CronJob")],
                         ids=["job", "cronjob"])
def test_cronjob_mode(mode: CronJobMode, expected: str) -> None:
    cron = obj("nightly", kind="CronJob")
    job = obj("nightly-123", kind="Job", owner=cron)
    [workload] = group((cron, job), (pod("nightly-123-x", job),), mode=mode)
    assert workload.ref.kind == expected


def test_custom_resource_on_top() -> None:
    notebook = obj("alice-nb", kind="Notebook")
    sts = obj("alice-nb", kind="StatefulSet", owner=notebook)
    [workload] = group((notebook, sts), (pod("alice-nb-0", sts),))
    assert workload.ref == notebook.ref


def test_bare_pod_is_its_own_workload() -> None:
    bare = pod("debug", None)
    [workload] = group((), (bare,))
    assert workload.ref == bare.ref and workload.chain == (bare.ref,) and workload.view is not None


def test_daemonset_pods_are_never_candidates_and_protected_namespaces_never_grouped() -> None:
    ds = obj("dcgm", kind="DaemonSet")
    [workload] = group((ds,), (pod("dcgm-x", ds),))
    assert workload.ref == ds.ref and not workload.candidate  # only its stuck Terminating pods are reported
    assert group((), (pod("coredns", None, ns="kube-system"),)) == []


@pytest.mark.parametrize("case", ["missing-owner", "owner-deleting", "pod-deleting"])
def test_unreadable_links_make_it_unknown(case: str) -> None:
    deploy = obj("web", kind="Deployment", deleting=case == "owner-deleting")
    rs = obj("web-1", kind="ReplicaSet", owner=deploy)
    if case == "pod-deleting":
        [workload] = group((), (pod("gone", None, deleting=True),))
        assert not workload.known and workload.kind == "Pod"
        return
    objects = (rs,) if case == "missing-owner" else (deploy, rs)
    pods = (pod("web-1-x", rs), pod("web-1-y", rs))
    workloads = group(objects, pods)
    assert len(workloads) == 2 and not any(w.known for w in workloads)  # one unknown workload per pod
    assert {w.ref for w in workloads} == {p.ref for p in pods}
    assert all(w.kind == "ReplicaSet" for w in workloads)  # matched by the pod's controller kind
    words = str(workloads[0].unknown)
    assert ("cannot be read" if case == "missing-owner" else "being deleted") in words


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
def test_managed_by_markers(labels: dict[str, str], annotations: dict[str, str], expected: str | None) -> None:
    deploy = replace(obj("web", kind="Deployment"), labels=labels, annotations=annotations)
    rs = obj("web-1", kind="ReplicaSet", owner=deploy)
    [workload] = group((deploy, rs), (pod("web-1-x", rs),))
    assert workload.managed_by == expected


@pytest.mark.parametrize(
    ("own", "namespace", "opted"),
    [({a.OPT_OUT: "true"}, {}, "the object"), ({a.OPT_OUT: " TRUE "}, {}, "the object"),
     ({}, {a.OPT_OUT: "true"}, "namespace team-a"), ({a.OPT_OUT: "false"}, {a.OPT_OUT: "no"}, None), ({}, {}, None)],
    ids=["own", "own-any-case", "namespace", "not-true", "none"])
def test_opt_out_on_the_workload_or_its_namespace(own: dict[str, str], namespace: dict[str, str],
                                                   opted: str | None) -> None:
    job = replace(obj("train", kind="Job"), annotations=own)
    [workload] = group((job,), (pod("train-x", job),), namespaces={"team-a": NamespaceView("team-a", {}, namespace)})
    assert (workload.opted_out is not None) is (opted is not None)
    if opted:
        assert opted in str(workload.opted_out)
    honouring = Policy("p", (IdleGpu(),))
    ignoring = Policy("q", (IdleGpu(),), lifecycle=Lifecycle(honour_opt_out=False))
    assert (governance.governing([honouring], IdleGpu, workload, workload.pods) is None) is bool(opted)
    assert governance.governing([ignoring], IdleGpu, workload, workload.pods) is ignoring


def test_first_matching_policy_governs_and_must_match_every_pod() -> None:
    job = obj("train", kind="Job")
    pods = (pod("w0", job, labels={"team": "a"}), pod("w1", job, labels={"team": "b"}))
    [workload] = group((job,), pods)
    from janitor.policy.model import LabelSelector

    only_a = Policy("only-a", (IdleGpu(),), match=Match(pod_selector=LabelSelector((("team", "a"),))))
    other_ns = Policy("other", (IdleGpu(),), match=Match(namespaces=Namespaces(include=("team-b",))))
    broad, later = Policy("broad", (IdleGpu(),)), Policy("later", (IdleGpu(),))
    assert governance.governing([only_a, other_ns, broad, later], IdleGpu, workload, pods) is broad
    assert governance.governing([only_a], IdleGpu, workload, pods[:1]) is only_a
    assert governance.governing([broad], Pending, workload, pods) is None  # defines no pending trigger


def test_a_replicasets_annotations_are_copies_of_its_deployments() -> None:
    deploy = obj("web", kind="Deployment")
    rs = obj("web-1", kind="ReplicaSet", owner=deploy)
    own = obj("solo", kind="ReplicaSet")
    job_pod = obj("x", kind="Pod", owner=obj("j", kind="Job"))
    assert selection.copied_from(rs) == rs.controller
    assert selection.copied_from(own) is None and selection.copied_from(job_pod) is None


def test_gate_for_the_plain_path() -> None:
    observation = Observation(NOW, namespaces={"quiet": NamespaceView("quiet", {}, {a.OPT_OUT: "true"})})
    rails = Rails(protected_namespaces=("kube-system",))
    assert "already being deleted" in str(selection.gate(obj("x", deleting=True), observation, rails))
    assert "protected" in str(selection.gate(obj("x", namespace="kube-system"), observation, rails))
    assert "namespace quiet" in str(selection.gate(obj("x", namespace="quiet"), observation, rails))
    assert selection.gate(obj("x", namespace="quiet"), observation, Rails(honour_opt_out=False)) is None
    assert selection.gate(obj("x"), observation, rails) is None


def test_owner_references_in_a_cycle_make_the_workload_unknown_and_end() -> None:
    """The apiserver accepts A -> B -> A controller references; the walk must end, not loop."""
    a_uid, b_uid = str(uuid.uuid4()), str(uuid.uuid4())
    first = replace(obj("loop-a", kind="ReplicaSet", uid=a_uid),
                    controller=OwnerRef("Deployment", "apps/v1", "loop-b", b_uid))
    second = replace(obj("loop-b", kind="Deployment", uid=b_uid),
                     controller=OwnerRef("ReplicaSet", "apps/v1", "loop-a", a_uid))
    [workload] = group((first, second), (pod("loop-a-x", first),))
    assert not workload.known and "cycle" in str(workload.unknown)


def test_a_template_annotation_inherited_through_a_cycle_ends() -> None:
    from janitor.decide.triggers.expiry import inherited_from

    a_uid, b_uid = str(uuid.uuid4()), str(uuid.uuid4())
    same = {a.TTL: "1d"}
    first = replace(obj("loop-a", kind="ReplicaSet", uid=a_uid, annotations=same, template=same),
                    controller=OwnerRef("Deployment", "apps/v1", "loop-b", b_uid))
    second = replace(obj("loop-b", kind="Deployment", uid=b_uid, annotations=same, template=same),
                     controller=OwnerRef("ReplicaSet", "apps/v1", "loop-a", a_uid))
    found = inherited_from(first, {a_uid: first, b_uid: second}, a.TTL)
    assert found is not None
