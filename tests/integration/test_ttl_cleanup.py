"""TTL/expiry cleanup end to end: the janitor against the sandbox's real control plane.

Aspects covered:
- expired objects of several kinds go: Pod, Job with its pods, Deployment with its ReplicaSet
  and pods, ConfigMap, a custom resource, a Namespace; unexpired and `forever` stay;
- a malformed value keeps the object and gives exactly one Event over several cycles;
- a protected namespace and an opted-out object are kept;
- dry-run and `janitor plan` delete nothing;
- an object recreated under the same name between plan and action is not deleted;
- a burst of expiring objects trips the tripwire until an admin acknowledges, then the caps stop
  the deletions at the cap;
- `janitor explain` names the rule and the deadline for a kept and for a deleted object;
- every deletion leaves an Event and an audit log line.
"""

from __future__ import annotations

import datetime
import logging
import subprocess
import sys
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from runner import Runner
from runner import settings as build

from devenv.procs import wait_until
from janitor import annotations as a
from janitor.decide.model import ResourceKind
from janitor.decide.rails import Caps, Rails, Tripwire
from janitor.settings import DEFAULT_KINDS, Settings

GADGETS = ResourceKind("example.com", "v1", "Gadget", "gadgets")
OPEN = Caps(1000, 1000, 1000, 1000)


def settings(namespace: str, *, kinds=DEFAULT_KINDS, caps: Caps = OPEN, dry_run: bool = False,
             protected: tuple[str, ...] = ("kube-system",), extra_namespaces: tuple[str, ...] = (),
             tripwire: Tripwire = Tripwire()) -> Settings:
    return build(
        kinds=kinds, namespaces=(namespace, *extra_namespaces), state_namespace=namespace,
        rails=Rails(protected_namespaces=protected, caps=caps, dry_run=dry_run, tripwire=tripwire),
    )


def configmap(core: client.CoreV1Api, namespace: str, name: str, annotations: dict[str, str]) -> client.V1ConfigMap:
    return core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, annotations=annotations))
    )


def exists(read, *args) -> bool:  # noqa: ANN001
    try:
        read(*args)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def events_for(core: client.CoreV1Api, namespace: str, name: str) -> list[client.CoreV1Event]:
    return [e for e in core.list_namespaced_event(namespace).items if e.involved_object.name == name]


EXPIRED = {a.EXPIRES: "2020-01-01"}


@pytest.fixture(scope="module")
def gadget_crd(kube: client.ApiClient):
    ext = client.ApiextensionsV1Api(kube)
    name = "gadgets.example.com"
    if not exists(ext.read_custom_resource_definition, name):
        ext.create_custom_resource_definition(client.V1CustomResourceDefinition(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1CustomResourceDefinitionSpec(
                group="example.com", scope="Namespaced",
                names=client.V1CustomResourceDefinitionNames(plural="gadgets", singular="gadget", kind="Gadget"),
                versions=[client.V1CustomResourceDefinitionVersion(
                    name="v1", served=True, storage=True,
                    schema=client.V1CustomResourceValidation(open_apiv3_schema=client.V1JSONSchemaProps(
                        type="object", x_kubernetes_preserve_unknown_fields=True)))],
            ),
        ))

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_until(established, timeout=30, what="CRD established")
    return GADGETS


def test_expired_objects_of_many_kinds_are_deleted_and_the_rest_kept(
    kube: client.ApiClient, core: client.CoreV1Api, namespace: str, gadget_crd: ResourceKind, caplog
) -> None:
    apps, batch = client.AppsV1Api(kube), client.BatchV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    container = client.V1Container(name="c", image="x", resources=client.V1ResourceRequirements(
        limits={"nvidia.com/gpu": "1"}))
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="bare", annotations={a.TTL: "1s"}),
        spec=client.V1PodSpec(containers=[container])))
    batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="train", annotations=EXPIRED),
        spec=client.V1JobSpec(template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "train"}),
            spec=client.V1PodSpec(restart_policy="Never", containers=[container])))))
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="nb", annotations=EXPIRED),
        spec=client.V1DeploymentSpec(
            replicas=1, selector=client.V1LabelSelector(match_labels={"app": "nb"}),
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": "nb"}),
                                              spec=client.V1PodSpec(containers=[container])))))
    configmap(core, namespace, "old", {a.TTL: "1s"})
    configmap(core, namespace, "young", {a.TTL: "7d"})
    configmap(core, namespace, "eternal", {a.TTL: "forever"})
    configmap(core, namespace, "plain", {})
    custom.create_namespaced_custom_object("example.com", "v1", namespace, "gadgets", {
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g1", "annotations": EXPIRED}})
    doomed_ns = f"{namespace}-x"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=doomed_ns, annotations=EXPIRED)))
    wait_until(lambda: len(core.list_namespaced_pod(namespace).items) == 3, timeout=60, what="3 pods")
    wait_until(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items),
               timeout=60, what="pods Running")
    time.sleep(2)  # janitor/ttl 1s has passed even by the apiserver's whole-second clock (age > ttl, strictly)

    janitor = Runner(kube, settings(namespace, kinds=DEFAULT_KINDS + (gadget_crd,), extra_namespaces=(doomed_ns,)))
    with caplog.at_level(logging.INFO, logger="janitor.audit"):
        result = janitor.run_cycle()

    deleted = sorted(str(act.target).split("/", 1)[0] + "/" + act.target.name for act in result.deleted())
    assert deleted == sorted([
        "Pod/bare", "Job/train", "Deployment/nb", "ConfigMap/old", "Gadget/g1", f"Namespace/{doomed_ns}",
    ])
    wait_until(lambda: not core.list_namespaced_pod(namespace).items, timeout=60,
               what="every pod gone (Job's and Deployment's by garbage collection)")
    wait_until(lambda: not apps.list_namespaced_replica_set(namespace).items, timeout=60, what="ReplicaSet gone")
    assert not exists(custom.get_namespaced_custom_object, "example.com", "v1", namespace, "gadgets", "g1")
    kept = {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}
    assert {"young", "eternal", "plain"} <= kept and "old" not in kept
    wait_until(lambda: not exists(core.read_namespace, doomed_ns), timeout=120, what="namespace deleted")

    reasons = {e.involved_object.name: e.reason for e in core.list_namespaced_event(namespace).items
               if e.source and e.source.component == "kube-idle-janitor"}
    assert reasons["old"] == "TTLExpired" and reasons["train"] == "Expired"
    audit = [r for r in caplog.records if getattr(r, "audit", False)]
    assert {(r.object, r.outcome, r.dry_run) for r in audit} >= {
        (f"ConfigMap/{namespace}/old", "done", False), (f"Job/{namespace}/train", "done", False)}


def test_malformed_value_kept_with_exactly_one_event(kube, core: client.CoreV1Api, namespace: str) -> None:
    configmap(core, namespace, "typo", {a.TTL: "30 minutes"})
    janitor = Runner(kube, settings(namespace))
    for _ in range(3):
        janitor.run_cycle()
    assert exists(core.read_namespaced_config_map, "typo", namespace)
    events = [e for e in events_for(core, namespace, "typo") if e.reason == "InvalidAnnotation"]
    assert len(events) == 1 and events[0].count in (None, 1)
    assert "30m" in events[0].message and events[0].type == "Warning"


def test_protected_namespace_and_opt_out_are_kept(kube, core: client.CoreV1Api, namespace: str) -> None:
    configmap(core, namespace, "protected", EXPIRED)
    janitor = Runner(kube, settings(namespace, protected=(namespace,)))
    assert janitor.run_cycle().deleted() == []
    assert exists(core.read_namespaced_config_map, "protected", namespace)

    configmap(core, namespace, "opted-out", {**EXPIRED, a.OPT_OUT: "true"})
    unprotected = Runner(kube, settings(namespace)).run_cycle()
    assert [act.target.name for act in unprotected.deleted()] == ["protected"]
    assert exists(core.read_namespaced_config_map, "opted-out", namespace)


def test_dry_run_and_plan_delete_nothing(kube, core: client.CoreV1Api, namespace: str, sandbox) -> None:
    configmap(core, namespace, "old", EXPIRED)
    result = Runner(kube, settings(namespace, dry_run=True)).run_cycle()
    assert result.deleted() == [] and [h.action.target.name for h in result.plan.held] == ["old"]

    out = subprocess.run(
        [sys.executable, "-m", "janitor.cli", "plan", "--kubeconfig", str(sandbox.kubeconfig),
         "--namespaces", namespace, "--state-namespace", namespace, "--kinds", "ConfigMap"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    [heading] = [i for i, line in enumerate(lines) if line.startswith("DELETE")]
    assert lines[heading] == "DELETE  1 object  rule expires"
    row = lines[heading + 2]  # after the OBJECT / WHY header
    assert row.startswith(f"  ConfigMap/{namespace}/old ") and "janitor/expires 2020-01-01 passed" in row
    assert exists(core.read_namespaced_config_map, "old", namespace)
    assert [e for e in events_for(core, namespace, "old") if e.source.component == "kube-idle-janitor"] == []


def test_object_recreated_before_action_is_not_deleted(kube, core: client.CoreV1Api, namespace: str) -> None:
    configmap(core, namespace, "reborn", EXPIRED)
    janitor = Runner(kube, settings(namespace))
    fresh = None

    def recreate() -> None:
        nonlocal fresh
        core.delete_namespaced_config_map("reborn", namespace)
        fresh = configmap(core, namespace, "reborn", EXPIRED)  # same name, new UID

    result = janitor.plan_then_act(recreate)
    assert [act.target.name for act in result.plan.deletions()] == ["reborn"]
    assert result.deleted() == [] and [str(r.outcome) for r in result.results] == ["gone"]
    assert fresh is not None
    assert core.read_namespaced_config_map("reborn", namespace).metadata.uid == fresh.metadata.uid


def test_burst_trips_the_wire_until_acknowledged_then_stops_at_the_cap(
    kube, core: client.CoreV1Api, namespace: str
) -> None:
    rails = dict(caps=Caps(per_hour=50, per_day=100, per_namespace_per_hour=50, per_namespace_per_day=100),
                 tripwire=Tripwire(fraction=0.5, min_jump=20))
    kinds = (ResourceKind("", "v1", "ConfigMap", "configmaps"),)
    janitor = Runner(kube, settings(namespace, kinds=kinds, **rails))
    for i in range(2):
        configmap(core, namespace, f"baseline-{i}", EXPIRED)
    assert len(janitor.run_cycle().deleted()) == 2

    for i in range(200):
        configmap(core, namespace, f"burst-{i:03d}", EXPIRED)
    tripped = janitor.run_cycle()
    assert tripped.deleted() == [] and len(tripped.plan.held) == 200
    assert any("tripwire" in n for n in tripped.plan.notices)
    [told] = [e for e in events_for(core, namespace, "janitor-state") if e.reason == "TripwireTripped"]
    assert told.type == "Warning" and "200 deletion candidates against 2" in told.message
    assert janitor.run_cycle().deleted() == []  # still tripped: nothing until an admin says so

    ack = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_namespaced_config_map("janitor-state", namespace,
                                     {"metadata": {"annotations": {a.ACKNOWLEDGE_TRIPWIRE: ack}}})
    wait_until(lambda: datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") > ack,
               timeout=5, what="acknowledgment time reached")
    resumed = janitor.run_cycle()
    assert len(resumed.deleted()) == 48  # 50 per hour, 2 used by the baseline
    assert len(resumed.plan.held) == 152 and {str(h.reason) for h in resumed.plan.held} == {"cap"}
    remaining = [cm for cm in core.list_namespaced_config_map(namespace).items if cm.metadata.name.startswith("burst")]
    assert len(remaining) == 152


def test_explain_names_rule_and_deadline(kube, core: client.CoreV1Api, namespace: str, sandbox) -> None:
    configmap(core, namespace, "young", {a.TTL: "7d"})
    configmap(core, namespace, "old", {a.EXPIRES: "2020-01-01T00:00:00Z"})

    def explain(name: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "janitor.cli", "explain", f"ConfigMap/{namespace}/{name}",
             "--kubeconfig", str(sandbox.kubeconfig), "--namespaces", namespace, "--state-namespace", namespace],
            capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    young = explain("young")
    assert "ttl" in young and "KEEP" in young and "deadline" in young
    old = explain("old")
    assert "expires  DELETE" in old and "[deadline 2020-01-01T00:00:00Z]" in old and "=> DELETE now" in old
    assert exists(core.read_namespaced_config_map, "old", namespace)  # explain changes nothing



def test_ttl_in_a_pod_template_is_reported_on_the_deployment_and_pods_kept(
    kube, core: client.CoreV1Api, namespace: str
) -> None:
    apps = client.AppsV1Api(kube)
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=2, selector=client.V1LabelSelector(match_labels={"app": "web"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "web"}, annotations={a.TTL: "1s"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x")])))))
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == 2,
               timeout=60, what="2 web pods Running")
    wait_until(lambda: all(
        (datetime.datetime.now(datetime.timezone.utc) - p.metadata.creation_timestamp).total_seconds() > 2
        for p in core.list_namespaced_pod(namespace).items), timeout=10, what="pods older than their TTL")

    result = Runner(kube, settings(namespace)).run_cycle()

    assert result.deleted() == []
    [report] = result.results
    assert (report.action.target.kind, report.action.target.name, str(report.outcome)) == ("Deployment", "web", "done")
    pods = core.list_namespaced_pod(namespace).items
    assert len(pods) == 2 and all(p.metadata.deletion_timestamp is None for p in pods)
    [event] = [e for e in events_for(core, namespace, "web") if e.reason == "InheritedTTL"]
    assert "pod template" in event.message
    web = apps.read_namespaced_deployment("web", namespace)
    assert web.metadata.annotations[a.REPORTED] == "inherited:janitor/ttl=1s"


def test_clock_skew_against_the_apiserver_pauses_deletions(kube, core: client.CoreV1Api, namespace: str) -> None:
    configmap(core, namespace, "old", EXPIRED)
    fast_clock = lambda: datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=10)  # noqa: E731
    result = Runner(kube, settings(namespace), clock=fast_clock).run_cycle()
    assert result.deleted() == []
    assert [str(h.reason) for h in result.plan.held] == ["clock-skew"]
    assert exists(core.read_namespaced_config_map, "old", namespace)
    assert len(Runner(kube, settings(namespace)).run_cycle().deleted()) == 1  # a right clock deletes it


def test_unreadable_ledger_stops_deletions_and_is_left_for_an_admin(
        kube, core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="janitor-state"), data={"ledger.json": "{not json"}))
    configmap(core, namespace, "old", EXPIRED)
    result = Runner(kube, settings(namespace)).run_cycle()
    assert result.deleted() == [] and [str(h.reason) for h in result.plan.held] == ["ledger-unreadable"]
    assert core.read_namespaced_config_map("janitor-state", namespace).data["ledger.json"] == "{not json"

    core.delete_namespaced_config_map("janitor-state", namespace)  # the documented way to resume
    assert [act.target.name for act in Runner(kube, settings(namespace)).run_cycle().deleted()] == ["old"]


def test_an_unwritable_ledger_means_no_deletion(kube, core: client.CoreV1Api, namespace: str) -> None:
    """The caps count what the ledger holds: a deletion it could not record first would not count,
    and the next cycle would delete as many again."""
    from janitor import errors, ledger
    from janitor.decide.model import SafetyLedger

    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="janitor-state"), immutable=True,
        data={ledger.DATA_KEY: ledger.dumps(SafetyLedger())}))
    for i in range(5):
        configmap(core, namespace, f"old-{i}", EXPIRED)
    runner = Runner(kube, settings(namespace, caps=Caps(per_hour=2, per_day=100, per_namespace_per_hour=2,
                                                        per_namespace_per_day=100)))
    outcomes = []
    for _ in range(3):
        try:
            outcomes += [(str(r.outcome), r.detail) for r in runner.run_cycle().results]
        except errors.KubeError:
            outcomes.append(("cycle failed", ""))
    left = {c.metadata.name for c in core.list_namespaced_config_map(namespace).items
            if c.metadata.name.startswith("old")}
    assert left == {f"old-{i}" for i in range(5)}, f"deleted without a ledger entry: {outcomes}"
    assert outcomes and all(o == "failed" and "ledger" in d for o, d in outcomes), outcomes


def test_a_janitor_that_never_read_its_policies_acts_on_nothing(
        kube, core: client.CoreV1Api, namespace: str, tmp_path) -> None:
    """A fresh replica (a restart, a standby taking over) whose policy file is broken: it must not
    delete, and must not take every policy's marks for marks no policy covers any more."""
    broken = tmp_path / "policies.yaml"
    broken.write_text("policies:\n  - name: idle-gpu\n    mode: enforce\n    triggers: [idleGpu: {window: 2h}\n")
    configmap(core, namespace, "old", EXPIRED)
    marked_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(days=2)
    mark = {a.POLICY: "idle-gpu", a.DEADLINE: a.format_expires(marked_at + datetime.timedelta(days=1)),
            a.MARKED_AT: a.format_expires(marked_at), a.REASON: "idle", a.WARNED_AT: a.format_expires(marked_at),
            a.WARNED_VIA: f"owner D0ALICE/{marked_at.timestamp():.6f}"}
    client.AppsV1Api(kube).create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="trainer", annotations=mark),
        spec=client.V1DeploymentSpec(
            replicas=0, selector=client.V1LabelSelector(match_labels={"app": "trainer"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "trainer"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="main", image="busybox")])))))
    runner = Runner(kube, build(namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(broken),),
                                rails=Rails(protected_namespaces=(), caps=OPEN)))
    result = runner.run_cycle()
    assert result.results == [] and exists(core.read_namespaced_config_map, "old", namespace)
    notes = client.AppsV1Api(kube).read_namespaced_deployment("trainer", namespace).metadata.annotations or {}
    assert {k: notes.get(k) for k in mark} == mark
    assert runner.telemetry.registry.get_sample_value("janitor_policies_loaded") == 0
