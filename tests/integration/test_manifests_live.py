"""manifests/ on the sandbox's real kube-apiserver (and the recordings on its Prometheus).

(Named *_live like test_observe_prometheus_live.py: tests/unit/test_manifests.py holds the same
basename, and pytest's default import mode refuses two test modules of one basename.)

Aspects covered:
- every object of manifests/base, rendered in Python (tests/unit/test_manifests.render, checked
  against `kubectl kustomize` there), and the dashboard ConfigMap of manifests/monitoring pass
  server-side apply with dryRun=All; the two Namespaces are created for real (dry runs of
  namespaced objects need them); the monitoring.coreos.com objects only where their CRDs are served;
- the Helm chart's objects (defaults, and the admin guide's values with monitoring and HTTP clicks
  on) pass server-side apply with dryRun=All;
- Pod Security: a pod of the janitor's Deployment is admitted in its namespace at `restricted`;
  a pod of the node agent's DaemonSet is refused there and admitted in its own namespace;
- with the RBAC, ServiceAccounts, leader election Role and the admission policies applied for
  real, the janitor's ServiceAccount token:
  - deletes a Job whose janitor/expires has passed;
  - is denied deleting an unmarked Deployment, by kube-idle-janitor-guard, although RBAC allows
    it; may mark it (annotation-only), and then scale it to zero and delete it;
  - is denied suspending an unmarked Job, stopping an unmarked Notebook, and any change in a
    protected namespace (a ConfigMap in kube-system, the Namespace kube-public itself);
  - may force-delete a pod already Terminating, and delete its state ConfigMap;
  - cannot read Secrets (RBAC); may get/create/update its Lease and create ConfigMaps (its
    state), in its namespace only;
- the janitor daemon itself, with that token, expires what users annotated, marks and warns about
  a stuck Deployment and scales it to zero once marked, and nothing it does is refused;
- the node agent's ServiceAccount may list pods, patch nodes/status and create Events, and
  cannot delete pods or read Secrets;
- kube-idle-janitor-marks as shipped: a researcher's forward-dated janitor/marked-at on a Job the
  janitor's ServiceAccount marked is refused, a keep-until passes;
- `janitor/expires: tomorrow` on a new ConfigMap is rejected at apply time for any user (the
  admin, a researcher with `edit`), with the accepted forms; `janitor/ttl: 3000000d` with the
  bound (100 years), a time in the year 9999 with the years accepted, `janitor/time-zone` of 300
  characters as no zone; the apiserver admits exactly what janitor.annotations accepts (for the
  TTL, the times and the time zone, at and past their bounds), apart from the known looser
  values; an object annotated before
  the policy can still be updated unless the value changes to another bad one; pods a Job
  creates from a template carrying a bad value are not refused;
- the recording rules' expressions give per-pod, per-GPU series with the labels they name on
  the sandbox's Prometheus, and every alert expression parses there.

Cluster-scoped objects (ClusterRoles, bindings, the policies and their bindings) are deleted
afterwards whatever happens. The annotation policy's binding is narrowed to this module's
namespace (by a label), so tests running at the same time elsewhere in the sandbox, some of
which create malformed annotations on purpose, are never refused by it; the guard binding is
applied as shipped (it only ever applies to the janitor's ServiceAccount).
"""

from __future__ import annotations

import copy
import json
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from runner import Runner
from runner import settings as build
from test_manifests import (
    AGENT_NAMESPACE,
    BASE,
    CLUSTER_SCOPED,
    KNOWN_LOOSER,
    MONITORING,
    NAMESPACE,
    TIME_VALUES,
    TIME_ZONE_VALUES,
    TTL_VALUES,
    find,
    janitor_accepts,
    render,
)

from devenv import access
from devenv.nodes import HOLD_TERMINATING
from devenv.procs import wait_until

FIELD_MANAGER = "kube-idle-janitor-tests"
JANITOR_SA = "kube-idle-janitor"
AGENT_SA = "kube-idle-janitor-node-agent"
TEST_LABEL = "kube-idle-janitor.test/annotations"
FORMS = "use 2026-12-24T18:00:00Z, 2026-12-24T18:00 or 2026-12-24 (UTC, no offset), in the years 1000 to 8999"
PAST = {"janitor/expires": "2020-01-01"}


def _ssa(dyn: DynamicClient, obj: dict[str, Any], *, dry_run: bool) -> None:
    resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    dyn.server_side_apply(resource, body=obj, name=obj["metadata"]["name"],
                          namespace=obj["metadata"].get("namespace"), field_manager=FIELD_MANAGER,
                          force_conflicts=True, dry_run="All" if dry_run else None)


def _refused(call: Callable[[], object]) -> ApiException:
    with pytest.raises(ApiException) as refused:
        call()
    return refused.value


def _message(e: ApiException) -> str:
    return str(json.loads(e.body)["message"])


def _denied_by_guard(call: Callable[[], object], what: str) -> None:
    e = _refused(call)
    assert e.status == 403 and "kube-idle-janitor-guard" in _message(e) and what in _message(e), e.body


def _may(api: client.ApiClient, verb: str, resource: str, *, group: str = "", namespace: str = "",
         name: str = "", subresource: str = "") -> bool:
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(verb=verb, group=group, resource=resource,
                                                        namespace=namespace, name=name, subresource=subresource)))
    return bool(client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed)


def _config_map(name: str, annotations: dict[str, str] | None = None) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, annotations=annotations))


def _pod_spec(**extra: Any) -> client.V1PodSpec:
    return client.V1PodSpec(containers=[client.V1Container(name="main", image="registry.example/app:1")], **extra)


def _deployment(name: str) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels=labels),
                                     template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels),
                                                                       spec=_pod_spec())))


def _job(name: str, annotations: dict[str, str] | None = None,
         template_annotations: dict[str, str] | None = None) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1JobSpec(template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(annotations=template_annotations),
            spec=_pod_spec(restart_policy="Never"))))


# ---------------------------------------------------------------------------------------------


def test_base_and_monitoring_pass_server_side_dry_run(kube: client.ApiClient) -> None:
    dyn = DynamicClient(kube)
    base = render(BASE)
    for namespace in (o for o in base if o["kind"] == "Namespace"):
        _ssa(dyn, namespace, dry_run=False)  # dry runs of namespaced objects need it
    accepted = []
    for obj in base:
        _ssa(dyn, obj, dry_run=True)
        accepted.append(obj["kind"])
    skipped = []
    for obj in render(MONITORING):
        try:
            _ssa(dyn, obj, dry_run=True)
        except ResourceNotFoundError:  # no Prometheus operator in the sandbox
            skipped.append(obj["kind"])
    assert len(accepted) == len(base)
    assert set(skipped) <= {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


@pytest.mark.parametrize("values", ["defaults", "admin guide, monitoring on, http clicks"])
def test_the_charts_objects_pass_server_side_dry_run(kube: client.ApiClient, values: str, tmp_path) -> None:
    """`helm template | kubectl apply --dry-run=server`, object by object; the Prometheus
    operator's kinds only where their CRDs are served."""
    from test_chart import HELM, guide_values, template

    if HELM is None:
        pytest.fail("helm is not built: bash devenv/helm/ensure.sh (devenv/install.sh does)")
    args: list[str] = []
    if values != "defaults":
        (tmp_path / "values.yaml").write_text(guide_values())
        args = ["-f", str(tmp_path / "values.yaml"), "--set", "slack.clicks=http",
                *(f"--set=monitoring.{m}.enabled=true" for m in ("serviceMonitor", "prometheusRule", "dashboard"))]
    dyn = DynamicClient(kube)
    for namespace in (o for o in render(BASE) if o["kind"] == "Namespace"):
        _ssa(dyn, namespace, dry_run=False)
    skipped = []
    for obj in template(*args):
        try:
            _ssa(dyn, obj, dry_run=True)
        except ResourceNotFoundError:  # no Prometheus operator in the sandbox
            skipped.append(obj["kind"])
    assert set(skipped) <= {"ServiceMonitor", "PrometheusRule"}


def test_pod_security_admits_the_janitor_at_restricted_and_the_agent_only_in_its_namespace(
        kube: client.ApiClient, core: client.CoreV1Api) -> None:
    dyn = DynamicClient(kube)
    base = render(BASE)
    for namespace in (o for o in base if o["kind"] == "Namespace"):
        _ssa(dyn, namespace, dry_run=False)

    def pod(workload: str, namespace: str) -> dict[str, Any]:
        template = find(base, workload)["spec"]["template"]
        # Pod Security looks at the pod alone: not at its ServiceAccount or priority class (not created here)
        spec = {k: v for k, v in template["spec"].items() if k not in ("priorityClassName", "serviceAccountName")}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pss-{workload.lower()}",
                                                                "namespace": namespace}, "spec": spec}

    pods = client.CoreV1Api(kube)
    for workload, namespace in (("Deployment", NAMESPACE), ("DaemonSet", AGENT_NAMESPACE)):
        pods.create_namespaced_pod(namespace, pod(workload, namespace), dry_run="All")
    refused = _refused(lambda: pods.create_namespaced_pod(NAMESPACE, pod("DaemonSet", NAMESPACE), dry_run="All"))
    assert refused.status == 403 and 'violates PodSecurity "restricted:latest"' in _message(refused), refused.body


@dataclass(frozen=True)
class Installed:
    namespace: str  # this module's namespace: the annotation policy applies here only
    janitor: client.ApiClient  # as the janitor's ServiceAccount
    agent: client.ApiClient  # as the node agent's ServiceAccount
    researcher: client.ApiClient  # a ServiceAccount with `edit` in `namespace`


def _narrowed(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The annotation policy's binding, for this module's namespace only."""
    obj = copy.deepcopy(obj)
    obj["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {TEST_LABEL: namespace}}}
    return obj


@pytest.fixture(scope="module")
def installed(kube: client.ApiClient, core: client.CoreV1Api,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    dyn = DynamicClient(kube)
    base = render(BASE)
    wanted = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
              "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    objects = [o for o in base if o["kind"] in wanted]
    namespace = f"manifests-live-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    for ns in (o for o in base if o["kind"] == "Namespace"):
        _ssa(dyn, ns, dry_run=False)
    existing = {(ns, sa.metadata.name) for ns in (NAMESPACE, AGENT_NAMESPACE)
                for sa in core.list_namespaced_service_account(ns).items}
    created_namespaced: list[dict[str, Any]] = []
    tmp = tmp_path_factory.mktemp("manifests-live")
    apis: list[client.ApiClient] = []
    try:
        wait_until(lambda: any(sa.metadata.name == "default"
                               for sa in core.list_namespaced_service_account(namespace).items),
                   timeout=30, what="default ServiceAccount")
        # Annotated before the policy exists (the namespace is not labelled yet): see the ratchet test.
        core.create_namespaced_config_map(namespace, _config_map("legacy", {"janitor/ttl": "tomorrow"}))
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED and not (
                    obj["kind"] == "ServiceAccount"
                    and (obj["metadata"]["namespace"], obj["metadata"]["name"]) in existing):
                created_namespaced.append(obj)
            if obj["metadata"]["name"] == "kube-idle-janitor-annotations" and obj["kind"].endswith("Binding"):
                obj = _narrowed(obj, namespace)
            _ssa(dyn, obj, dry_run=False)
        core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
            metadata=client.V1ObjectMeta(name="researcher")))
        client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(namespace, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="researcher-edit"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="edit"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="researcher", namespace=namespace)]))
        for sa_namespace, sa in ((NAMESPACE, JANITOR_SA), (AGENT_NAMESPACE, AGENT_SA), (namespace, "researcher")):
            config = access.service_account_kubeconfig(kube, sa_namespace, sa, tmp / f"{sa}.kubeconfig")
            apis.append(access.api_client(config))
        janitor, agent, researcher = apis
        core.patch_namespace(namespace, {"metadata": {"labels": {TEST_LABEL: namespace}}})
        _wait_for_policies(core, client.CoreV1Api(janitor), namespace)
        yield Installed(namespace, janitor, agent, researcher)
    finally:
        for api in apis:
            api.close()
        for obj in reversed(objects):  # bindings before what they bind; cluster-scoped always
            if obj["kind"] in CLUSTER_SCOPED or obj in created_namespaced:
                resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
                try:
                    dyn.delete(resource, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
                except ApiException as e:
                    if e.status != 404:
                        raise
        core.delete_namespace(namespace)


def _wait_for_policies(core: client.CoreV1Api, as_janitor: client.CoreV1Api, namespace: str) -> None:
    """Policies, bindings and RBAC reach the apiserver's caches a moment after they are written."""
    core.create_namespaced_config_map(namespace, _config_map("unmarked"))

    def guard_denies() -> bool:
        try:
            as_janitor.delete_namespaced_config_map("unmarked", namespace, dry_run="All")
        except ApiException as e:
            return e.status == 403 and "kube-idle-janitor-guard" in e.body
        return False

    def annotations_checked() -> bool:
        try:
            core.create_namespaced_config_map(namespace, _config_map("probe", {"janitor/expires": "tomorrow"}),
                                              dry_run="All")
        except ApiException as e:
            return e.status == 422
        return False

    wait_until(guard_denies, timeout=30, what="kube-idle-janitor-guard enforced")
    wait_until(annotations_checked, timeout=30, what="kube-idle-janitor-annotations enforced")


# ---------------------------------------------------------------------------------------------
# The guard and RBAC, as the janitor's ServiceAccount


def test_janitor_deletes_a_job_whose_expiry_passed(installed: Installed, kube: client.ApiClient) -> None:
    ns = installed.namespace
    client.BatchV1Api(kube).create_namespaced_job(ns, _job("expired", PAST))
    as_janitor = client.BatchV1Api(installed.janitor)
    as_janitor.delete_namespaced_job("expired", ns, propagation_policy="Background")
    wait_until(
        lambda: "expired" not in {j.metadata.name for j in client.BatchV1Api(kube).list_namespaced_job(ns).items},
        timeout=30, what="the expired Job gone")


def test_guard_denies_deleting_an_unmarked_deployment_rbac_would_allow(installed: Installed,
                                                                       kube: client.ApiClient) -> None:
    ns, apps = installed.namespace, client.AppsV1Api(kube)
    apps.create_namespaced_deployment(ns, _deployment("web"))
    as_janitor = client.AppsV1Api(installed.janitor)
    assert _may(installed.janitor, "delete", "deployments", group="apps", namespace=ns, name="web")  # RBAC: yes

    _denied_by_guard(lambda: as_janitor.delete_namespaced_deployment("web", ns), "may not delete it")
    _denied_by_guard(lambda: as_janitor.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 0}}),
                     "may not scale it to zero")
    assert apps.read_namespaced_deployment("web", ns).spec.replicas == 1

    # Marking is an annotation-only update; once marked, the lifecycle's action and delete pass.
    as_janitor.patch_namespaced_deployment("web", ns, {"metadata": {"annotations": {
        "janitor/expires": "2030-01-01T00:00:00Z", "janitor/policy": "idle-gpu"}}})
    as_janitor.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 0}})
    as_janitor.delete_namespaced_deployment("web", ns, propagation_policy="Background")


def test_guard_denies_suspending_or_stopping_unmarked_workloads(installed: Installed, kube: client.ApiClient) -> None:
    ns = installed.namespace
    client.BatchV1Api(kube).create_namespaced_job(ns, _job("train"))
    _denied_by_guard(lambda: client.BatchV1Api(installed.janitor).patch_namespaced_job(
        "train", ns, {"spec": {"suspend": True}}), "may not suspend it")
    # A user's own deadline allows a delete, not a suspend: that is the lifecycle's, after a mark.
    client.BatchV1Api(kube).patch_namespaced_job("train", ns, {"metadata": {"annotations": PAST}})
    _denied_by_guard(lambda: client.BatchV1Api(installed.janitor).patch_namespaced_job(
        "train", ns, {"spec": {"suspend": True}}), "may not suspend it")

    notebooks = client.CustomObjectsApi(kube)
    notebooks.create_namespaced_custom_object("kubeflow.org", "v1", ns, "notebooks", {
        "apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": {"name": "nb"}, "spec": {}})
    _denied_by_guard(lambda: client.CustomObjectsApi(installed.janitor).patch_namespaced_custom_object(
        "kubeflow.org", "v1", ns, "notebooks", "nb",
        {"metadata": {"annotations": {"kubeflow-resource-stopped": "2026-01-01T00:00:00Z"}}}), "may not stop it")


def test_guard_protects_system_namespaces(installed: Installed, core: client.CoreV1Api) -> None:
    name = f"manifests-live-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_config_map("kube-system", _config_map(name, PAST))
    as_janitor = client.CoreV1Api(installed.janitor)
    try:
        _denied_by_guard(lambda: as_janitor.delete_namespaced_config_map(name, "kube-system", dry_run="All"),
                         "protected namespace")
        _denied_by_guard(lambda: as_janitor.patch_namespaced_config_map(
            name, "kube-system", {"metadata": {"annotations": {"janitor/policy": "x"}}}), "protected namespace")
        # The Namespace object itself (deleting kube-public the apiserver refuses anyway).
        _denied_by_guard(lambda: as_janitor.patch_namespace(
            "kube-public", {"metadata": {"annotations": {"janitor/policy": "x"}}}, dry_run="All"),
            "protected namespace")
    finally:
        core.delete_namespaced_config_map(name, "kube-system")


def test_guard_allows_force_deleting_a_terminating_pod(installed: Installed, core: client.CoreV1Api) -> None:
    ns = installed.namespace
    core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name="held", annotations={HOLD_TERMINATING: "true"}),
        spec=_pod_spec(node_name="cpu-node-1", termination_grace_period_seconds=1)))
    as_janitor = client.CoreV1Api(installed.janitor)
    _denied_by_guard(lambda: as_janitor.delete_namespaced_pod("held", ns), "may not delete it")
    core.delete_namespaced_pod("held", ns, grace_period_seconds=1)
    assert core.read_namespaced_pod("held", ns).metadata.deletion_timestamp  # Terminating, held there
    as_janitor.delete_namespaced_pod("held", ns, grace_period_seconds=0)
    wait_until(lambda: "held" not in {p.metadata.name for p in core.list_namespaced_pod(ns).items},
               timeout=30, what="the force-deleted pod gone")


def test_guard_allows_deleting_the_state_configmap(installed: Installed, core: client.CoreV1Api) -> None:
    try:
        core.create_namespaced_config_map(NAMESPACE, _config_map("janitor-state"))
        created = True
    except ApiException as e:
        if e.status != 409:
            raise
        created = False  # someone's janitor uses it: delete only as a dry run
    try:
        client.CoreV1Api(installed.janitor).delete_namespaced_config_map("janitor-state", NAMESPACE, dry_run="All")
    finally:
        if created:
            core.delete_namespaced_config_map("janitor-state", NAMESPACE)


def test_janitor_cannot_read_secrets_and_may_use_only_its_lease(installed: Installed, core: client.CoreV1Api) -> None:
    ns = installed.namespace
    core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="s")))
    as_janitor = client.CoreV1Api(installed.janitor)
    for call in (lambda: as_janitor.read_namespaced_secret("s", ns), lambda: as_janitor.list_namespaced_secret(ns)):
        e = _refused(call)
        assert e.status == 403 and 'resource "secrets"' in _message(e), e.body

    lease = {"group": "coordination.k8s.io", "namespace": NAMESPACE}
    for verb in ("get", "update"):
        assert _may(installed.janitor, verb, "leases", name="kube-idle-janitor", **lease)
        assert not _may(installed.janitor, verb, "leases", name="someone-elses", **lease)
    assert _may(installed.janitor, "create", "leases", **lease)
    # Its state ConfigMap is the one object it creates, and only in its own namespace.
    assert _may(installed.janitor, "create", "configmaps", namespace=NAMESPACE)
    assert not _may(installed.janitor, "create", "configmaps", namespace=ns)
    assert not _may(installed.janitor, "create", "configmaps", namespace="kube-system")
    assert not _may(installed.janitor, "delete", "leases", name="kube-idle-janitor", **lease)
    assert not _may(installed.janitor, "create", "leases", group="coordination.k8s.io", namespace="kube-system")


def test_node_agent_role_is_narrow(installed: Installed) -> None:
    agent = installed.agent
    assert _may(agent, "list", "pods")
    assert _may(agent, "get", "nodes", name="cpu-node-1")
    assert _may(agent, "patch", "nodes", name="cpu-node-1", subresource="status")
    assert _may(agent, "create", "events", namespace=installed.namespace)
    assert not _may(agent, "delete", "pods", namespace=installed.namespace)
    assert not _may(agent, "get", "secrets", namespace=installed.namespace)
    assert not _may(agent, "patch", "nodes", name="cpu-node-1")  # the status only


def test_marks_policy_leaves_the_janitors_annotations_to_its_service_account(installed: Installed,
                                                                            kube: client.ApiClient) -> None:
    """kube-idle-janitor-marks as shipped: the janitor's ServiceAccount marks, a researcher may not
    forward-date the mark (nor any other key of it), and may still set a keep-until."""
    ns = installed.namespace
    uid = client.BatchV1Api(kube).create_namespaced_job(ns, _job("marked")).metadata.uid
    mark = {"janitor/policy": "idle-gpu", "janitor/marked-at": "2026-11-20T10:00:00Z", "janitor/marked-uid": uid,
            "janitor/expires": "2026-11-21T10:00:00Z"}
    client.BatchV1Api(installed.janitor).patch_namespaced_job("marked", ns, {"metadata": {"annotations": mark}})
    as_researcher = client.BatchV1Api(installed.researcher)
    years, refusals = iter(range(2027, 9000)), []

    def refused() -> bool:  # a new value each time: one left as it was would pass
        try:
            as_researcher.patch_namespaced_job("marked", ns, {"metadata": {"annotations": {
                "janitor/marked-at": f"{next(years)}-01-01T00:00:00Z", "janitor/keep-until": "2030-01-01"}}})
        except ApiException as e:
            refusals.append(e)
            return True
        return False

    wait_until(refused, timeout=30, what="kube-idle-janitor-marks enforced")
    [e] = refusals
    assert e.status == 403 and "kube-idle-janitor-marks" in _message(e), e.body
    assert "janitor/marked-at: only the janitor writes this annotation" in _message(e)
    as_researcher.patch_namespaced_job("marked", ns, {"metadata": {"annotations": {
        "janitor/keep-until": "2030-01-01"}}})


# ---------------------------------------------------------------------------------------------
# Annotation formats, for everyone


def test_malformed_expiry_is_rejected_at_apply_time_with_the_accepted_forms(installed: Installed,
                                                                             core: client.CoreV1Api) -> None:
    ns = installed.namespace
    for api in (core, client.CoreV1Api(installed.researcher)):
        e = _refused(lambda api=api: api.create_namespaced_config_map(
            ns, _config_map("notes", {"janitor/expires": "tomorrow"})))
        assert e.status == 422, e.body
        message = _message(e)
        assert "janitor/expires: tomorrow is not a valid expiry time" in message and FORMS in message
    e = _refused(lambda: core.create_namespaced_config_map(ns, _config_map("notes", {"janitor/ttl": "a week"})))
    assert "use <integer><unit> with unit s, m, h, d or w (e.g. 30m, 8h, 7d), or forever" in _message(e)
    e = _refused(lambda: core.create_namespaced_config_map(ns, _config_map("notes", {"janitor/ttl": "3000000d"})))
    assert "janitor/ttl: 3000000d is not a valid TTL" in _message(e) and "at most 36500d (100 years)" in _message(e)
    e = _refused(lambda: core.create_namespaced_config_map(ns, _config_map("notes", {
        "janitor/keep-until": "9999-12-31T23:59:59Z"})))
    assert "janitor/keep-until: 9999-12-31T23:59:59Z is not a valid time" in _message(e) and FORMS in _message(e)
    e = _refused(lambda: core.create_namespaced_config_map(ns, _config_map("notes", {"janitor/time-zone": "a" * 300})))
    assert "is not an IANA time zone" in _message(e)
    client.CoreV1Api(installed.researcher).create_namespaced_config_map(
        ns, _config_map("notes", {"janitor/expires": "2026-12-24T18:00:00Z", "janitor/ttl": "7d"}))


@pytest.mark.parametrize("key, values", [("janitor/ttl", TTL_VALUES), ("janitor/expires", TIME_VALUES),
                                         ("janitor/keep-until", TIME_VALUES), ("janitor/time-zone", TIME_ZONE_VALUES)])
def test_apiserver_admits_what_the_janitor_accepts(installed: Installed, core: client.CoreV1Api, key: str,
                                                   values: list[str]) -> None:
    looser = KNOWN_LOOSER["janitor/expires" if key == "janitor/keep-until" else key]

    def admitted(value: str) -> bool:
        try:
            core.create_namespaced_config_map(installed.namespace, _config_map("table", {key: value}), dry_run="All")
        except ApiException as e:
            assert e.status == 422, e.body
            return False
        return True

    verdicts = {v: admitted(v) for v in values}
    expected = {v: janitor_accepts(key, v) or v in looser for v in values}
    assert verdicts == expected


def test_values_set_before_the_policy_and_controller_made_objects_are_left_alone(installed: Installed,
                                                                                  core: client.CoreV1Api,
                                                                                  kube: client.ApiClient) -> None:
    ns = installed.namespace
    core.patch_namespaced_config_map("legacy", ns, {"data": {"k": "v"}})  # the bad value unchanged: allowed
    e = _refused(lambda: core.patch_namespaced_config_map("legacy", ns, {"metadata": {"annotations": {
        "janitor/ttl": "next week"}}}))
    assert e.status == 422
    core.patch_namespaced_config_map("legacy", ns, {"metadata": {"annotations": {"janitor/ttl": "7d"}}})

    # A bad value in a pod template: the Job is not checked (the janitor reports it on the Job)
    # and its pods, made by the Job controller, are not refused.
    client.BatchV1Api(kube).create_namespaced_job(ns, _job("templated", template_annotations={"janitor/ttl": "soon"}))
    wait_until(lambda: core.list_namespaced_pod(ns, label_selector="job-name=templated").items, timeout=30,
               what="the Job's pod created")


# ---------------------------------------------------------------------------------------------
# Monitoring on the sandbox's Prometheus


def _query(prometheus_url: str, expr: str) -> dict[str, Any]:
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


def test_recording_rules_and_alerts_run_on_prometheus(installed: Installed, core: client.CoreV1Api, sandbox) -> None:
    ns = installed.namespace
    core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name="gpu"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="trainer", image="registry.example/train:1",
            resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))])))
    rules = [r for g in find(render(MONITORING), "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    for rule in rules:
        if "record" in rule:
            expr = rule["expr"].replace('{exported_pod!=""}', f'{{exported_namespace="{ns}", exported_pod="gpu"}}')
            assert expr != rule["expr"]
            wait_until(lambda expr=expr: _query(sandbox.prometheus_url, expr)["result"], timeout=60,
                       what=f"{rule['record']} for the GPU pod")
            [series] = _query(sandbox.prometheus_url, expr)["result"]
            assert set(series["metric"]) == {"exported_namespace", "exported_pod", "gpu", "Hostname"}
        else:
            _query(sandbox.prometheus_url, rule["expr"])  # parses and runs (empty is fine)


def test_the_janitor_runs_its_lifecycle_under_its_service_account_and_the_guard(
        installed: Installed, kube: client.ApiClient, sandbox, tmp_path, slack) -> None:
    """The daemon itself, with the token of the manifests' ServiceAccount: it expires what users
    annotated, marks a stuck Deployment (annotation writes pass the guard), warns its owner, and
    scales it to zero once marked; nothing it does is refused."""
    import datetime

    from janitor.decide.lifecycle import LifecycleSettings

    ns = installed.namespace
    slack.add_user("alice@lab.example", "U0ALICE1", "alice")
    client.BatchV1Api(kube).create_namespaced_job(ns, _job("old-sweep", PAST))
    client.AppsV1Api(kube).create_namespaced_deployment(ns, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="too-big", annotations={"janitor/owner": "alice@lab.example"}),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "too-big"}),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels={"app": "too-big"}),
                                         spec=client.V1PodSpec(containers=[client.V1Container(
                                             name="main", image="x", resources=client.V1ResourceRequirements(
                                                 limits={"nvidia.com/gpu": "16"}))])))))
    wait_until(lambda: [p.status.phase for p in client.CoreV1Api(kube).list_namespaced_pod(
        ns, label_selector="app=too-big").items] == ["Pending"], timeout=60, what="the too-big pod Pending")
    policy = tmp_path / "stuck.yaml"
    policy.write_text(f"""policies:
- name: never-fits
  mode: enforce
  match: {{namespaces: {{include: ["{ns}"]}}, kinds: [Deployment]}}
  triggers: {{pending: {{after: 1h}}}}
  lifecycle: {{warnBefore: 3s, remindEvery: 0s, action: scale-to-zero}}
""")
    janitor = Runner(installed.janitor, build(
        namespaces=(ns,), state_namespace=NAMESPACE, policy_paths=(str(policy),),
        prometheus_url=sandbox.prometheus_url, slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
        lifecycle=LifecycleSettings(pace=datetime.timedelta(0))))
    first = janitor.run_cycle()
    outcomes = {r.action.target.name: str(r.outcome) for r in first.results}
    assert outcomes["old-sweep"] == "done" and set(outcomes.values()) == {"done"}, outcomes  # nothing refused
    notes = client.AppsV1Api(kube).read_namespaced_deployment("too-big", ns).metadata.annotations
    assert notes["janitor/policy"] == "never-fits" and "janitor/warned-at" in notes
    assert janitor.last is not None and janitor.last.lifecycle is not None and janitor.last.lifecycle.failed == []
    deadline = datetime.datetime.strptime(notes["janitor/deadline"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc)
    import time

    time.sleep(max(0.0, deadline.timestamp() - time.time()) + 1.5)
    second = janitor.run_cycle()
    assert {r.action.target.name: str(r.outcome) for r in second.results} == {"too-big": "done"}
    assert client.AppsV1Api(kube).read_namespaced_deployment("too-big", ns).spec.replicas == 0
