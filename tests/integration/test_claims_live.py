"""DRA ResourceClaims on the sandbox's apiserver (1.34: `resource.k8s.io/v1`, and only v1), read by
`observe.claims` and judged by `decide.claims`. No DRA driver and no ResourceSlice exist, so the test
writes each claim's `status.allocation` (and `reservedFor`) through the status subresource, where the
scheduler would; the controller-manager's resourceclaim controller runs and does its part.

Aspects covered:
- discovery picks v1, the one version served;
- a claim allocated with nothing reserved is ORPHANED, and the controller leaves it allocated even
  with its finalizer: it deallocates only when a claim's last reservation goes;
- a claim reserved for a live pod that names it is IN_USE; once that pod is deleted the controller
  deallocates it (NOT_ALLOCATED);
- a claim reserved for a pod that did not name it stays reserved after that pod is gone (the
  controller looks at a claim again only when it or a pod naming it changes): STALE_CONSUMER with
  the pods read, IN_USE "not checked" without;
- a claim reserved for a pod that never existed is cleared by the controller at once: the test
  waits for that before reading, so the controller is seen at work on the namespace's claims;
- a deleted orphaned claim goes: its finalizer does not hold it;
- the janitor's cycle lists the orphaned and the stale claim in the admin report, once their status
  has said so for `--orphaned-claims-after`, with the command that frees them, and never the claim in
  use; it changes none of them; with 0 it reports none, though the claims a pod names are read;
- a claim a pod names is read under an idle policy whatever `--orphaned-claims-after` says, by the
  cycle and by the re-check right before acting on that pod (its GPU may be held through it);
- under an enforcing orphanedClaim policy with `action: delete`, the orphaned claim is marked and its
  owner warned once the daemon has seen it so for `after`, and deleted after the deadline (its
  finalizer does not hold it); the claim a running pod names and the one reserved for a live pod
  are never marked, and a claim a pod came to name before the deadline is unmarked, not deleted.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from runner import Runner
from runner import settings as build
from test_kueue_live import texts
from test_lifecycle import ALICE, alice, janitor_for, until_due  # noqa: F401 (alice is a fixture)

from devenv.procs import wait_until
from janitor import annotations as a
from janitor.decide import claims as dc
from janitor.decide.claims import PodsSeen, State, Why
from janitor.observe import claims as oc

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaims"
DRIVER = "gpu.example.com"
SECTION = "Device claims held with no consumer"


@pytest.fixture
def device_class(kube, namespace: str) -> Iterator[str]:  # noqa: ANN001
    """A DeviceClass of its own (cluster-scoped, so deleted afterwards); its name."""
    custom = client.CustomObjectsApi(kube)
    name = f"gpu.{namespace}.example.com"
    custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "DeviceClass", "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    yield name
    custom.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", name)


def create_claim(kube, namespace: str, name: str, device_class: str,  # noqa: ANN001
                 annotations: dict[str, str] | None = None) -> None:
    """A claim for one device, with the finalizer the scheduler puts on a claim it allocates."""
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
        "metadata": {"name": name, "finalizers": [dc.FINALIZER], "annotations": annotations or {}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}})


def allocate(kube, namespace: str, name: str, device: str, *reserved_for: Any) -> None:  # noqa: ANN001
    """Write the claim's allocation (and reservations), as the scheduler does once a driver's slice fits."""
    status: dict[str, Any] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "gpu-node-1", "device": device}]}}}
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": p.metadata.name, "uid": p.metadata.uid}
                                 for p in reserved_for]
    client.CustomObjectsApi(kube).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name,
                                                                         {"status": status})


def claim_status(kube, namespace: str, name: str) -> dict[str, Any]:  # noqa: ANN001
    got = client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return dict(got.get("status") or {})


def create_pod(core: client.CoreV1Api, namespace: str, name: str, *, claim: str | None = None) -> client.V1Pod:
    """A pod bound to a node (the scheduler would not place a pod whose claim no driver can serve);
    naming `claim` in its spec.resourceClaims, as a pod using it does."""
    container: dict[str, Any] = {"name": "main", "image": "x"}
    spec: dict[str, Any] = {"nodeName": "cpu-node-1", "terminationGracePeriodSeconds": 0, "containers": [container]}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    return core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                                  "spec": spec})


def gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    return not any(p.metadata.name == name for p in core.list_namespaced_pod(namespace).items)


def test_claims_holding_devices_with_no_consumer_are_found(kube, core, namespace, device_class) -> None:  # noqa: ANN001
    assert oc.served(kube) == ("v1", "")
    for name in ("orphan", "in-use", "stale", "never"):
        create_claim(kube, namespace, name, device_class)
    user = create_pod(core, namespace, "user", claim="in-use")
    passer = create_pod(core, namespace, "passer")  # reserved a claim without naming it
    allocate(kube, namespace, "orphan", "gpu-0")
    allocate(kube, namespace, "in-use", "gpu-1", user)
    allocate(kube, namespace, "stale", "gpu-2", passer)
    time.sleep(1)  # the controller keeps the reservation while the pod is there
    assert claim_status(kube, namespace, "stale").get("reservedFor")
    core.delete_namespaced_pod("passer", namespace, grace_period_seconds=0)
    wait_until(lambda: gone(core, namespace, "passer"), timeout=30, what="pod passer gone")
    allocate(kube, namespace, "never", "gpu-3", client.V1Pod(metadata=client.V1ObjectMeta(
        name="never", uid="00000000-0000-4000-8000-000000000000")))
    wait_until(lambda: "allocation" not in claim_status(kube, namespace, "never"), timeout=30,
               what="the controller dropping a reservation for a pod that never was, and deallocating")
    time.sleep(2)

    read = oc.read(kube, [namespace])
    assert (read.version, read.served, read.problem) == ("v1", True, ""), read
    pods = oc.pods(kube, [namespace])
    assert pods == PodsSeen(frozenset({user.metadata.uid}), frozenset({namespace}))
    found = {v.claim.ref.name: v for v in dc.orphaned(read.claims, pods)}
    assert {n: v.state for n, v in found.items()} == {
        "orphan": State.ORPHANED, "in-use": State.IN_USE, "stale": State.STALE_CONSUMER,
        "never": State.NOT_ALLOCATED}, {n: v.words for n, v in found.items()}
    assert found["orphan"].claim.protected and [str(d) for d in found["orphan"].claim.devices] == [
        f"{DRIVER}/gpu-node-1/gpu-0"]
    assert found["in-use"].why is Why.POD_THERE
    assert [c.uid for c in found["stale"].gone] == [passer.metadata.uid]
    unread = {v.claim.ref.name: v for v in dc.orphaned(read.claims, None)}
    assert (unread["stale"].state, unread["stale"].why) == (State.IN_USE, Why.PODS_UNREAD)

    core.delete_namespaced_pod("user", namespace, grace_period_seconds=0)
    wait_until(lambda: "allocation" not in claim_status(kube, namespace, "in-use"), timeout=30,
               what="the controller deallocating a claim whose pod was deleted")
    assert dc.verdict(oc.to_claim(_claim(kube, namespace, "in-use"), f"{GROUP}/{VERSION}"),
                      oc.pods(kube, [namespace])).state is State.NOT_ALLOCATED
    assert "allocation" in claim_status(kube, namespace, "orphan")  # still held: no reservation ever went

    client.CustomObjectsApi(kube).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "orphan")
    wait_until(lambda: all(c.ref.name != "orphan" for c in oc.read(kube, [namespace]).claims), timeout=30,
               what="the deleted orphaned claim gone, its finalizer removed")


def _claim(kube, namespace: str, name: str) -> dict[str, Any]:  # noqa: ANN001
    return dict(client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))


def test_the_admin_report_lists_claims_holding_devices_with_no_consumer(kube, core, namespace,  # noqa: ANN001
                                                                      device_class) -> None:
    for name in ("orphan", "in-use", "stale"):
        create_claim(kube, namespace, name, device_class)
    user = create_pod(core, namespace, "user", claim="in-use")
    passer = create_pod(core, namespace, "passer")
    allocate(kube, namespace, "orphan", "gpu-0")
    allocate(kube, namespace, "in-use", "gpu-1", user)
    allocate(kube, namespace, "stale", "gpu-2", passer)
    core.delete_namespaced_pod("passer", namespace, grace_period_seconds=0)
    wait_until(lambda: gone(core, namespace, "passer"), timeout=30, what="pod passer gone")
    before = {n: _claim(kube, namespace, n)["metadata"]["resourceVersion"] for n in ("orphan", "in-use", "stale")}

    def janitor(after: float) -> Runner:
        return Runner(kube, build(namespaces=(namespace,), state_namespace=namespace, policy_paths=(),
                                  claims_after=datetime.timedelta(seconds=after)))

    def report(runner: Runner) -> dict[str, tuple[str, ...]]:
        return dict(runner.run_cycle().plan.admin_report.sections)

    patient, quick = janitor(3600), janitor(1)
    assert SECTION not in report(patient) and SECTION not in report(quick)  # a first look knows no "since"
    time.sleep(2)
    assert SECTION not in report(patient)  # not seen so for an hour yet
    lines = report(quick)[SECTION]
    assert len(lines) == 2, lines
    orphan, stale = sorted(lines)
    assert orphan.startswith(f"ResourceClaim/{namespace}/orphan: allocated ({DRIVER}/gpu-node-1/gpu-0) and "
                             "reserved for nobody, unchanged since ")
    assert orphan.endswith(f"If nothing uses it: kubectl -n {namespace} delete resourceclaim orphan")
    assert "reserved only for pods that are gone: pods/passer" in stale and "resourceclaim controller" in stale
    off = janitor(0)
    assert SECTION not in report(off) and SECTION not in report(off)  # claims not read at all
    after = {n: _claim(kube, namespace, n)["metadata"]["resourceVersion"] for n in ("orphan", "in-use", "stale")}
    assert after == before  # reported, never changed


def test_claims_a_pod_names_are_read_by_the_cycle_and_the_recheck(kube, core, namespace,  # noqa: ANN001
                                                                   device_class, tmp_path) -> None:
    """Without the claim a pod names, a pod whose GPU series are missing (its node's exporter down) is
    judged as holding no GPU: so the claims are read wherever a pod names one, by the cycle with
    `--orphaned-claims-after 0` and no orphanedClaim policy, and by the re-check before acting."""
    from janitor.decide.model import Action, ActionType, ObjectRef, TriggerKind
    from janitor.decide.reasons import Code, Reason
    from janitor.observe import observation, scoped
    from janitor.policy.load import from_paths

    create_claim(kube, namespace, "held", device_class)
    create_claim(kube, namespace, "orphan", device_class)
    user = create_pod(core, namespace, "user", claim="held")
    allocate(kube, namespace, "held", "gpu-0", user)
    allocate(kube, namespace, "orphan", "gpu-1")
    path = tmp_path / "p.yaml"
    path.write_text(f"""policies:
- name: idle-cpu
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    idleCpu: {{cores: 0.1, window: 1h}}
""")
    loaded = from_paths([path])
    assert not loaded.errors, loaded.errors
    settings = build(namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(path),),
                     claims_after=datetime.timedelta(0))
    now = datetime.datetime.now(datetime.UTC)
    seen = observation.read(kube, settings, loaded.policies, now)
    assert seen.claims is not None and not seen.claims.problem
    assert {c.ref.name for c in seen.claims.claims} >= {"held"}
    target = ObjectRef("Pod", "v1", namespace, "user", user.metadata.uid)
    action = Action(ActionType.DELETE, target, user.metadata.resource_version, "idle-cpu", TriggerKind.IDLE_CPU,
                    "lifecycle", "IdlePod", Reason(Code.CPU_IDLE))
    fresh = scoped.read_scoped(kube, settings, loaded.policies, action, now)
    assert fresh is not None and fresh.claims is not None and not fresh.claims.problem
    assert "held" in {c.ref.name for c in fresh.claims.claims}
    # Read, the claims are not reported with 0: an orphaned one seen on two cycles stays out of it.
    runner = Runner(kube, settings)
    runner.run_cycle()
    time.sleep(1)
    assert SECTION not in dict(runner.run_cycle().plan.admin_report.sections)


def test_an_enforcing_policy_warns_of_an_orphaned_claim_then_deletes_it(  # noqa: PLR0913
        kube, core, namespace, device_class, sandbox, tmp_path, slack, alice) -> None:  # noqa: ANN001, F811
    owner = {"janitor/owner": ALICE[0]}
    for name in ("orphan", "in-use", "named", "late"):
        create_claim(kube, namespace, name, device_class, owner)
    user = create_pod(core, namespace, "user", claim="in-use")
    create_pod(core, namespace, "namer", claim="named")  # names it, reserved or not: in use
    for i, (name, pods) in enumerate((("orphan", ()), ("in-use", (user,)), ("named", ()), ("late", ())), 0):
        allocate(kube, namespace, name, f"gpu-{i}", *pods)
    policy = tmp_path / "p.yaml"
    policy.write_text(f"""policies:
- name: orphaned-claims
  mode: enforce
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    orphanedClaim: {{after: 2s}}
  lifecycle: {{warnBefore: 6s, remindEvery: 0s, action: delete}}
""")
    janitor = janitor_for(kube, sandbox, namespace, policy, sandbox.prometheus_url)
    janitor.run_cycle()  # the first look: since when they are held is not known yet
    assert not any(a.POLICY in _notes(kube, namespace, n) for n in ("orphan", "late")), janitor.explain()
    time.sleep(3)
    janitor.run_cycle()
    notes = _notes(kube, namespace, "orphan")
    assert notes.get(a.POLICY) == "orphaned-claims" and notes[a.WARNED_OF].startswith("delete "), janitor.explain()
    assert "reserved for nobody" in notes[a.REASON]
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    [warning] = [m for m in texts(slack, channel) if "orphan" in m]
    assert "holding devices no pod uses" in warning, warning
    assert a.POLICY in _notes(kube, namespace, "late")
    for name in ("in-use", "named"):
        assert a.POLICY not in _notes(kube, namespace, name), janitor.explain()

    create_pod(core, namespace, "late-user", claim="late")  # a pod came to use it before the deadline
    until_due(notes)
    janitor.run_cycle()  # re-checked fresh: still held by nobody, then deleted
    wait_until(lambda: all(c.ref.name != "orphan" for c in oc.read(kube, [namespace]).claims), timeout=30,
               what="the orphaned claim deleted, its finalizer removed")
    assert {c.ref.name for c in oc.read(kube, [namespace]).claims} == {"in-use", "named", "late"}
    assert a.POLICY not in _notes(kube, namespace, "late"), janitor.explain()


def _notes(kube, namespace: str, name: str) -> dict[str, str]:  # noqa: ANN001
    return dict(_claim(kube, namespace, name)["metadata"].get("annotations") or {})

