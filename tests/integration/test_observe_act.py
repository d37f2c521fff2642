"""observe/cluster.py and act/kube.py against the sandbox's real kube-apiserver.

Aspects covered:
- snapshot: a Deployment's template annotation shows in the template_annotations of the
  Deployment and of its ReplicaSet, a CronJob's in its jobTemplate; pods have the ReplicaSet as
  controller owner; ConfigMap annotations and labels; times are aware UTC; progress is reported;
- a custom resource (a CRD made in the test) is listed and re-read like a built-in kind;
- paging: page_size=1 over more than 5 ConfigMaps (metadata, four times the page size a page) still
  yields all of them, page by page;
- a kind RBAC does not let us list, and kinds the apiserver does not serve (an absent CRD, an
  unknown plural in a served group), become SkippedKinds, not errors;
- bad credentials and an apiserver that does not answer raise typed errors instead;
- apiserver_time is the apiserver's clock, within seconds of ours;
- read_object: a fresh view, None when gone, None when recreated under the same name (new UID);
- DELETE of a Job: Normal Event on the object before the delete, Background propagation removes
  its pods; DELETE of a Namespace (Event in `default`);
- DELETE with a stale resourceVersion or of a recreated object -> CONFLICT, the object stays and
  no Event is posted; DELETE of a gone object -> GONE; no RBAC -> FORBIDDEN;
- dry-run DELETE and REPORT: validated by the apiserver (a stale one still conflicts), leave
  the object as it was, post no Event;
- REPORT: one Warning Event and the janitor/reported annotation; a second, stale REPORT finds it
  reported and posts nothing; a REPORT on an object changed since (a controller's write) still lands
  once; a REPORT on an object recreated under the name conflicts;
- ledger: missing -> empty, write/read round trip, acknowledged_at from the annotation (and an
  unparseable one ignored), rewriting keeps the annotation, a malformed ledger reads as unreadable
  with an ERROR logged, a missing state namespace is named in the error.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from runner import settings as build

from devenv import access
from devenv.procs import free_port, wait_until
from janitor import annotations, errors
from janitor.act import kube as act
from janitor.decide.model import (
    Action,
    ActionType,
    Deletion,
    ObjectView,
    Observation,
    OwnerRef,
    ResourceKind,
    SafetyLedger,
    TriggerKind,
)
from janitor.decide.reasons import text
from janitor.observe import cluster, observation

DEPLOYMENT = ResourceKind("apps", "v1", "Deployment", "deployments")
REPLICASET = ResourceKind("apps", "v1", "ReplicaSet", "replicasets")
JOB = ResourceKind("batch", "v1", "Job", "jobs")
CRONJOB = ResourceKind("batch", "v1", "CronJob", "cronjobs")
POD = ResourceKind("", "v1", "Pod", "pods")
CONFIGMAP = ResourceKind("", "v1", "ConfigMap", "configmaps")
NAMESPACE = ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False)
GIZMO = ResourceKind("example.org", "v1", "Gizmo", "gizmos")  # a custom resource nobody registered
UTC = datetime.timezone.utc


# ---------------------------------------------------------------- helpers


def in_namespace(views: tuple[ObjectView, ...], namespace: str, kind: str) -> dict[str, ObjectView]:
    return {v.ref.name: v for v in views if v.ref.namespace == namespace and v.ref.kind == kind}


def make_config_map(core: client.CoreV1Api, namespace: str, name: str, **meta: dict[str, str]) -> None:
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, **meta), data={"k": "v"})
    )


def config_map_view(kube_api: client.ApiClient, namespace: str, name: str) -> ObjectView:
    item = client.CoreV1Api(kube_api).read_namespaced_config_map(name, namespace)
    return cluster.to_view(CONFIGMAP, kube_api.sanitize_for_serialization(item))


def action_for(view: ObjectView, type_: ActionType = ActionType.DELETE, **fields: str) -> Action:
    defaults: dict[str, object] = {"rule": "ttl", "reason": "TTLExpired",
                                   "why": f"{view.ref} is older than its janitor/ttl of 1h (age 2h)"}
    values = {**defaults, **fields}
    values["why"] = text(str(values["why"]))
    return Action(type=type_, target=view.ref, resource_version=view.resource_version, policy="ttl-expiry",
                  trigger=TriggerKind.EXPIRY, **values)  # type: ignore[arg-type]


def read_snapshot(api: client.ApiClient, kinds: list[ResourceKind], *, page_size: int = 500,
                  progress=None) -> Observation:  # noqa: ANN001
    """One cycle's read of these kinds (and, as every cycle, the namespaces)."""
    settings = build(kinds=tuple(kinds), page_size=page_size)
    return observation.read(api, settings, (), datetime.datetime.now(UTC), progress=progress)


def events_about(core: client.CoreV1Api, namespace: str, uid: str) -> list[client.CoreV1Event]:
    """The janitor's Events about one object (controllers post their own, e.g. the job-controller)."""
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}").items
    return [e for e in events if e.source.component == "kube-idle-janitor"]


def apply_fresh(kube_api: client.ApiClient, view: ObjectView, kind: ResourceKind) -> act.ActionResult:
    """What the daemon does: on CONFLICT (a controller updated the status), re-read and retry."""
    results: list[act.ActionResult] = []

    def applied() -> bool:
        fresh = cluster.read_object(kube_api, view.ref, kind)
        assert fresh is not None, f"{view.ref} vanished"
        results.append(act.apply(kube_api, action_for(fresh), kind=kind))
        return results[-1].outcome is not act.Outcome.CONFLICT

    wait_until(applied, timeout=30, what=f"delete of {view.ref} not conflicting")
    return results[-1]


def gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as e:
        return e.status == 404
    return False


@pytest.fixture
def reader_kube(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> Iterator[client.ApiClient]:
    """A ServiceAccount that may list and get ConfigMaps (and Namespaces, which every cycle reads)
    cluster-wide, and nothing else."""
    rbac = client.RbacAuthorizationV1Api(kube)
    name = f"configmap-reader-{uuid.uuid4().hex[:6]}"
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    core.create_namespaced_service_account(namespace, account)
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=name),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps", "namespaces"], verbs=["get", "list"])],
    ))
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=name),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
    ))
    try:
        config = access.service_account_kubeconfig(kube, namespace, "reader", tmp_path / "reader")
        with access.api_client(config) as api:
            yield api
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


@pytest.fixture
def gadget_kind(kube: client.ApiClient) -> Iterator[ResourceKind]:
    """A namespaced CRD `gadgets.<unique>.example.com`, established, deleted afterwards."""
    extensions = client.ApiextensionsV1Api(kube)
    group = f"t{uuid.uuid4().hex[:6]}.example.com"
    schema = client.V1CustomResourceValidation(
        open_apiv3_schema=client.V1JSONSchemaProps(type="object", x_kubernetes_preserve_unknown_fields=True)
    )
    extensions.create_custom_resource_definition(client.V1CustomResourceDefinition(
        metadata=client.V1ObjectMeta(name=f"gadgets.{group}"),
        spec=client.V1CustomResourceDefinitionSpec(
            group=group, scope="Namespaced",
            names=client.V1CustomResourceDefinitionNames(kind="Gadget", plural="gadgets", singular="gadget"),
            versions=[client.V1CustomResourceDefinitionVersion(name="v1", served=True, storage=True, schema=schema)],
        ),
    ))

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(f"gadgets.{group}")
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    try:
        wait_until(established, timeout=30, what="gadgets CRD established")
        yield ResourceKind(group, "v1", "Gadget", "gadgets")
    finally:
        extensions.delete_custom_resource_definition(f"gadgets.{group}")


def make_job(kube_api: client.ApiClient, namespace: str, name: str, parallelism: int) -> None:
    client.BatchV1Api(kube_api).create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            parallelism=parallelism, completions=parallelism, backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"job": name}),
                spec=client.V1PodSpec(
                    restart_policy="Never", containers=[client.V1Container(name="main", image="train:1")]
                ),
            ),
        ),
    ))


# ---------------------------------------------------------------- observe


def test_snapshot_reads_workloads_pods_and_annotations(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    apps, batch = client.AppsV1Api(kube), client.BatchV1Api(kube)
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": "nb"}, annotations={annotations.TTL: "2h"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="nb", image="nb:1")]),
    )
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="nb", annotations={annotations.EXPIRES: "2030-01-01"}),
        spec=client.V1DeploymentSpec(
            replicas=2, selector=client.V1LabelSelector(match_labels={"app": "nb"}), template=template
        ),
    ))
    batch.create_namespaced_cron_job(namespace, client.V1CronJob(
        metadata=client.V1ObjectMeta(name="nightly"),
        spec=client.V1CronJobSpec(schedule="0 3 * * *", suspend=True, job_template=client.V1JobTemplateSpec(
            spec=client.V1JobSpec(template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(annotations={annotations.TTL: "30m"}),
                spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(name="j", image="j:1")]),
            )),
        )),
    ))
    make_config_map(core, namespace, "settings", annotations={annotations.TTL: "7d", "other": "x"},
                    labels={"team": "a"})
    wait_until(lambda: len(core.list_namespaced_pod(namespace).items) == 2, timeout=60, what="2 nb pods")
    calls: list[tuple[str, int]] = []

    snapshot = read_snapshot(
        kube, [DEPLOYMENT, REPLICASET, CRONJOB, POD, CONFIGMAP], progress=lambda key, n: calls.append((key, n))
    )

    assert snapshot.skipped_kinds == ()
    deployment = in_namespace(snapshot.objects, namespace, "Deployment")["nb"]
    assert deployment.template_annotations == {annotations.TTL: "2h"}
    assert deployment.annotations[annotations.EXPIRES] == "2030-01-01"
    assert deployment.ref.api_version == "apps/v1" and deployment.controller is None and not deployment.deleting
    assert deployment.created.tzinfo is not None and deployment.created.utcoffset() == datetime.timedelta(0)
    assert abs(datetime.datetime.now(UTC) - deployment.created) < datetime.timedelta(minutes=5)
    [replica_set] = in_namespace(snapshot.objects, namespace, "ReplicaSet").values()
    assert replica_set.template_annotations[annotations.TTL] == "2h"
    assert replica_set.controller == OwnerRef("Deployment", "apps/v1", "nb", deployment.ref.uid)
    pods = in_namespace(snapshot.objects, namespace, "Pod").values()
    assert len(pods) == 2
    assert {(p.controller.kind, p.controller.uid) for p in pods} == {("ReplicaSet", replica_set.ref.uid)}
    assert all(p.annotations.get(annotations.TTL) == "2h" and p.template_annotations == {} for p in pods)
    cron_job = in_namespace(snapshot.objects, namespace, "CronJob")["nightly"]
    assert cron_job.template_annotations == {annotations.TTL: "30m"}
    settings = in_namespace(snapshot.objects, namespace, "ConfigMap")["settings"]
    assert settings.annotations == {annotations.TTL: "7d", "other": "x"} and settings.labels == {"team": "a"}
    assert settings.resource_version == core.read_namespaced_config_map("settings", namespace).metadata.resource_version
    assert list(dict.fromkeys(key for key, _ in calls)) == ["Deployment", "ReplicaSet", "CronJob", "Pod", "ConfigMap",
                                                            "Namespace"]  # namespaces last: every cycle reads them


def test_custom_resource_is_listed_and_read_like_a_builtin(
    kube: client.ApiClient, namespace: str, gadget_kind: ResourceKind
) -> None:
    client.CustomObjectsApi(kube).create_namespaced_custom_object(
        gadget_kind.group, "v1", namespace, "gadgets",
        {"apiVersion": gadget_kind.api_version, "kind": "Gadget",
         "metadata": {"name": "g1", "annotations": {annotations.TTL: "1h"}}, "spec": {"size": 3}},
    )

    snapshot = read_snapshot(kube, [gadget_kind])

    gadget = in_namespace(snapshot.objects, namespace, "Gadget")["g1"]
    assert gadget.ref.api_version == gadget_kind.api_version
    assert gadget.annotations == {annotations.TTL: "1h"}
    assert cluster.read_object(kube, gadget.ref, gadget_kind) == gadget


def test_paging_yields_every_object(kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    names = {f"cm-{i}" for i in range(7)}
    for name in names:
        make_config_map(core, namespace, name)
    counts: list[int] = []

    snapshot = read_snapshot(kube, [CONFIGMAP], page_size=1,
                             progress=lambda key, n: counts.append(n) if key == "ConfigMap" else None)

    # ConfigMaps are read as metadata, in pages of METADATA_PAGES x --page-size (compressed above 128 KiB)
    page = cluster.page_size_of(CONFIGMAP, 1)
    assert page == 4
    assert names <= set(in_namespace(snapshot.objects, namespace, "ConfigMap"))
    assert len(counts) >= 2  # 7 of ours alone need 2 pages of 4
    assert counts == sorted(counts) and all(b - a <= page for a, b in zip([0, *counts], counts, strict=False))
    assert counts[-1] == sum(v.ref.kind == "ConfigMap" for v in snapshot.objects)


def test_kinds_not_listable_are_skipped_not_errors(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str, reader_kube: client.ApiClient
) -> None:
    make_config_map(core, namespace, "visible")
    unknown_plural = ResourceKind("apps", "v1", "Widget", "widgets")

    snapshot = read_snapshot(reader_kube, [CONFIGMAP, DEPLOYMENT])
    # Authorization comes before routing: only a client allowed to list a kind can learn that
    # it is not served (the janitor's ClusterRole is generated from its kinds, so it can).
    unserved = read_snapshot(kube, [GIZMO, unknown_plural])

    assert "visible" in in_namespace(snapshot.objects, namespace, "ConfigMap")
    assert {v.ref.kind for v in snapshot.objects} == {"ConfigMap"}
    [forbidden] = snapshot.skipped_kinds
    assert forbidden.kind == "Deployment" and forbidden.reason.startswith("forbidden")
    assert unserved.objects == ()
    assert [s.kind for s in unserved.skipped_kinds] == ["gizmos.example.org", "Widget"]
    assert all(s.reason.startswith("not served") for s in unserved.skipped_kinds)


def test_bad_credentials_and_no_apiserver_raise_typed_errors(kube: client.ApiClient) -> None:
    config = client.Configuration()
    config.host, config.ssl_ca_cert = kube.configuration.host, kube.configuration.ssl_ca_cert
    config.api_key = {"BearerToken": "not-a-token"}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    with client.ApiClient(config) as stranger:
        with pytest.raises(errors.Unauthorized) as refused:
            read_snapshot(stranger, [CONFIGMAP])
    assert refused.value.status == 401 and "list ConfigMap" in str(refused.value)

    config.host, config.retries = f"https://127.0.0.1:{free_port()}", 0
    with client.ApiClient(config) as nobody:
        with pytest.raises(errors.ServerError) as unreachable:
            read_snapshot(nobody, [CONFIGMAP])
    assert unreachable.value.temporary and len(str(unreachable.value)) < 400


def test_apiserver_time_comes_from_the_apiserver(kube: client.ApiClient) -> None:
    before = datetime.datetime.now(UTC).replace(microsecond=0)
    snapshot = read_snapshot(kube, [NAMESPACE])
    after = datetime.datetime.now(UTC)

    assert snapshot.at is not None and snapshot.at.utcoffset() == datetime.timedelta(0)
    assert before - datetime.timedelta(seconds=2) <= snapshot.at <= after + datetime.timedelta(seconds=2)
    unserved = read_snapshot(kube, [GIZMO])
    assert unserved.skipped_kinds and unserved.at is not None  # the namespaces, read every cycle, give the clock


def test_read_object_tells_gone_and_recreated_apart(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    make_config_map(core, namespace, "cfg", annotations={"a": "1"})
    view = config_map_view(kube, namespace, "cfg")
    assert cluster.read_object(kube, view.ref, CONFIGMAP) == view

    core.delete_namespaced_config_map("cfg", namespace)
    assert cluster.read_object(kube, view.ref, CONFIGMAP) is None
    make_config_map(core, namespace, "cfg")
    assert cluster.read_object(kube, view.ref, CONFIGMAP) is None
    assert config_map_view(kube, namespace, "cfg").ref.uid != view.ref.uid


# ---------------------------------------------------------------- act


def test_delete_job_posts_event_then_removes_job_and_pods(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    make_job(kube, namespace, "train", parallelism=2)
    wait_until(lambda: len(core.list_namespaced_pod(namespace, label_selector="job=train").items) == 2,
               timeout=60, what="2 job pods")
    job = in_namespace(read_snapshot(kube, [JOB]).objects, namespace, "Job")["train"]
    assert events_about(core, namespace, job.ref.uid) == []

    result = apply_fresh(kube, job, JOB)

    assert result.outcome is act.Outcome.DONE, result.detail
    [event] = events_about(core, namespace, job.ref.uid)
    assert (event.type, event.reason, event.message) == ("Normal", "TTLExpired", str(result.action.why))
    assert event.source.component == "kube-idle-janitor" and event.reporting_component == "kube-idle-janitor"
    involved = event.involved_object
    assert (involved.kind, involved.api_version, involved.name) == ("Job", "batch/v1", "train")
    assert involved.resource_version == result.action.resource_version
    wait_until(lambda: not core.list_namespaced_pod(namespace, label_selector="job=train").items,
               timeout=60, what="job pods garbage-collected (Background propagation)")
    assert gone(lambda: client.BatchV1Api(kube).read_namespaced_job("train", namespace))


def test_delete_namespace(kube: client.ApiClient, core: client.CoreV1Api) -> None:
    name = f"doomed-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    view = next(v for v in read_snapshot(kube, [NAMESPACE]).objects if v.ref.name == name)
    assert view.ref.namespace is None

    result = apply_fresh(kube, view, NAMESPACE)

    assert result.outcome is act.Outcome.DONE, result.detail
    assert [e.reason for e in events_about(core, "default", view.ref.uid)] == ["TTLExpired"]
    wait_until(lambda: gone(lambda: core.read_namespace(name)), timeout=120, what=f"namespace {name} deleted")


def test_delete_of_changed_or_recreated_object_conflicts(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    make_config_map(core, namespace, "edited")
    stale = config_map_view(kube, namespace, "edited")
    core.patch_namespaced_config_map("edited", namespace, {"data": {"k": "changed"}})
    make_config_map(core, namespace, "reborn")
    old = config_map_view(kube, namespace, "reborn")
    core.delete_namespaced_config_map("reborn", namespace)
    make_config_map(core, namespace, "reborn")

    for view in (stale, old):
        for dry_run in (True, False):
            result = act.apply(kube, action_for(view), kind=CONFIGMAP, dry_run=dry_run)
            assert result.outcome is act.Outcome.CONFLICT, (view.ref, dry_run, result.detail)
        assert core.read_namespaced_config_map(view.ref.name, namespace).metadata.deletion_timestamp is None
        assert events_about(core, namespace, view.ref.uid) == []


def test_delete_of_gone_object_is_gone(kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    make_config_map(core, namespace, "brief")
    view = config_map_view(kube, namespace, "brief")
    core.delete_namespaced_config_map("brief", namespace)

    result = act.apply(kube, action_for(view), kind=CONFIGMAP)

    assert result.outcome is act.Outcome.GONE
    assert events_about(core, namespace, view.ref.uid) == []


def test_dry_run_delete_and_report_change_nothing_and_post_no_event(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    make_config_map(core, namespace, "kept")
    view = config_map_view(kube, namespace, "kept")

    report = action_for(view, ActionType.REPORT, reason="InvalidTTL", report_key="ttl:x")

    results = [act.apply(kube, a, kind=CONFIGMAP, dry_run=True) for a in (action_for(view), report)]

    assert [r.outcome for r in results] == [act.Outcome.DONE] * 2
    assert all("dry run" in r.detail for r in results)
    assert config_map_view(kube, namespace, "kept") == view
    assert events_about(core, namespace, view.ref.uid) == []


def test_delete_without_rbac_is_forbidden(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str, reader_kube: client.ApiClient
) -> None:
    make_config_map(core, namespace, "protected")
    view = config_map_view(kube, namespace, "protected")

    result = act.apply(reader_kube, action_for(view), kind=CONFIGMAP)

    assert result.outcome is act.Outcome.FORBIDDEN and "forbidden" in result.detail
    assert config_map_view(kube, namespace, "protected") == view


def test_report_posts_one_warning_event_and_marks_the_object(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    make_config_map(core, namespace, "typo", annotations={annotations.TTL: "7 days"})
    view = config_map_view(kube, namespace, "typo")
    report = action_for(view, ActionType.REPORT, rule="malformed", reason="InvalidTTL",
                        why="janitor/ttl '7 days' is not a valid TTL", report_key="ttl:7 days")

    result = act.apply(kube, report, kind=CONFIGMAP)
    again = act.apply(kube, report, kind=CONFIGMAP)  # same, now stale, resourceVersion

    assert result.outcome is act.Outcome.DONE, result.detail
    assert (again.outcome, again.detail) == (act.Outcome.DONE, "already reported")
    marked = config_map_view(kube, namespace, "typo")
    assert marked.annotations == {annotations.TTL: "7 days", annotations.REPORTED: "ttl:7 days"}
    [event] = events_about(core, namespace, view.ref.uid)
    assert (event.type, event.reason, event.message) == ("Warning", "InvalidTTL", str(report.why))


def test_a_report_on_an_object_changed_since_the_read_lands_once(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    """A busy Job's controller moves its resourceVersion all the time; the report still lands."""
    make_config_map(core, namespace, "busy", annotations={annotations.TTL: "7 days"})
    view = config_map_view(kube, namespace, "busy")
    core.patch_namespaced_config_map("busy", namespace, {"data": {"progress": "42"}})  # after the read
    report = action_for(view, ActionType.REPORT, rule="malformed", reason="InvalidTTL",
                        why="janitor/ttl '7 days' is not a valid TTL", report_key="ttl:7 days")

    result = act.apply(kube, report, kind=CONFIGMAP)

    assert (result.outcome, result.detail) == (act.Outcome.DONE, "reported"), result.detail
    assert config_map_view(kube, namespace, "busy").annotations[annotations.REPORTED] == "ttl:7 days"
    assert len(events_about(core, namespace, view.ref.uid)) == 1


def test_a_report_on_an_object_recreated_under_the_name_conflicts(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    make_config_map(core, namespace, "again", annotations={annotations.TTL: "7 days"})
    view = config_map_view(kube, namespace, "again")
    core.delete_namespaced_config_map("again", namespace)
    make_config_map(core, namespace, "again", annotations={annotations.TTL: "7 days"})
    report = action_for(view, ActionType.REPORT, rule="malformed", reason="InvalidTTL",
                        why="janitor/ttl '7 days' is not a valid TTL", report_key="ttl:7 days")

    result = act.apply(kube, report, kind=CONFIGMAP)

    assert result.outcome is act.Outcome.CONFLICT
    assert annotations.REPORTED not in config_map_view(kube, namespace, "again").annotations
    assert events_about(core, namespace, view.ref.uid) == []


# ---------------------------------------------------------------- ledger


def test_ledger_round_trip_with_acknowledgement(kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    assert cluster.read_ledger(kube, namespace, "state") == SafetyLedger()
    assert cluster.read_ledger(kube, f"missing-{uuid.uuid4().hex[:6]}", "state") == SafetyLedger()
    at = datetime.datetime(2026, 5, 1, 9, 30, 15, 123456, tzinfo=UTC)
    stored = SafetyLedger(
        deletions=(Deletion(at, namespace="team-a"), Deletion(at + datetime.timedelta(minutes=1), namespace=None)),
        previous_candidates=12,
        tripped_at=at,
    )

    act.write_ledger(kube, namespace, "state", stored)
    assert cluster.read_ledger(kube, namespace, "state") == stored

    acknowledge = {"metadata": {"annotations": {annotations.ACKNOWLEDGE_TRIPWIRE: "2026-05-01T11:45:00+02:00"}}}
    core.patch_namespaced_config_map("state", namespace, acknowledge)
    act.write_ledger(kube, namespace, "state", SafetyLedger(previous_candidates=3))  # keeps the admin's note
    assert cluster.read_ledger(kube, namespace, "state") == SafetyLedger(
        previous_candidates=3, acknowledged_at=datetime.datetime(2026, 5, 1, 9, 45, tzinfo=UTC)
    )

    garbled = {"metadata": {"annotations": {annotations.ACKNOWLEDGE_TRIPWIRE: "yes"}}}
    core.patch_namespaced_config_map("state", namespace, garbled)
    assert cluster.read_ledger(kube, namespace, "state").acknowledged_at is None


def test_malformed_ledger_reads_as_unreadable_and_logs_an_error(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="state"), data={"ledger.json": '{"version": 1, "deletions": "lots"}'}
    ))

    with caplog.at_level(logging.ERROR, logger="janitor.observe.cluster"):
        assert cluster.read_ledger(kube, namespace, "state") == SafetyLedger(unreadable=True)

    assert any(r.levelno == logging.ERROR and "malformed" in r.getMessage() for r in caplog.records)


def test_write_ledger_names_a_missing_namespace(kube: client.ApiClient) -> None:
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    with pytest.raises(errors.NotFound, match=missing):
        act.write_ledger(kube, missing, "state", SafetyLedger())
