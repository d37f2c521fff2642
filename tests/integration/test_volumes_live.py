"""A StatefulSet's volumes on the sandbox: the janitor never scales one to zero whose retention policy
would have the StatefulSet controller delete its claims, unless the policy allows it.

Aspects covered:
- `whenScaled: Delete` under a scale-to-zero policy: not marked, not scaled, its claim stays;
- under Retain it is marked and the warning says its volumes stay; when a chart switches it to
  `whenScaled: Delete` before the deadline, the mark is removed instead of acting, the owner is told,
  and the claim is still there;
- with `deleteVolumes: true` it is scaled to zero and the warning said the volumes go.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from test_lifecycle import (  # noqa: F401 (alice and prometheus are fixtures)
    ALICE,
    alice,
    gpu_template,
    history,
    janitor_for,
    prometheus,
    until_due,
    write_policy,
)

from devenv.procs import wait_until
from janitor import annotations as a


@pytest.fixture
def volume(kube, namespace: str) -> Iterator[None]:
    """A volume for the StatefulSet's one claim (the sandbox has no provisioner, and the scheduler runs
    no pod whose claim is unbound); deleted afterwards, since volumes outlive namespaces."""
    name = f"{namespace}-data-db-0"
    core = client.CoreV1Api(kube)
    core.create_persistent_volume(client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeSpec(
            capacity={"storage": "1Gi"}, access_modes=["ReadWriteOnce"], storage_class_name="",
            host_path=client.V1HostPathVolumeSource(path=f"/tmp/{namespace}"),
            persistent_volume_reclaim_policy="Retain",
            claim_ref=client.V1ObjectReference(namespace=namespace, name="data-db-0"))))
    yield
    core.delete_persistent_volume(name)


def create_statefulset(kube, namespace: str, when_scaled: str) -> None:
    client.AppsV1Api(kube).create_namespaced_stateful_set(namespace, client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name="db", annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1StatefulSetSpec(
            service_name="db", replicas=1, selector=client.V1LabelSelector(match_labels={"app": "db"}),
            template=gpu_template("db", "Always"),
            volume_claim_templates=[client.V1PersistentVolumeClaim(
                metadata=client.V1ObjectMeta(name="data"),
                spec=client.V1PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"], storage_class_name="",
                    resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"})))],
            persistent_volume_claim_retention_policy=client.V1StatefulSetPersistentVolumeClaimRetentionPolicy(
                when_scaled=when_scaled, when_deleted="Retain"))))


def idle_statefulset(kube, core: client.CoreV1Api, namespace: str, exporter_values, *, when_scaled: str) -> None:  # noqa: ANN001
    """The StatefulSet `db` with its claim bound and its one pod idle on the GPU for three hours."""
    create_statefulset(kube, namespace, when_scaled)
    wait_until(lambda: claims(core, namespace) == {"data-db-0"}, timeout=60, what="the claim data-db-0")
    history(core, namespace, exporter_values, {"db": 0})


def statefulset(kube, namespace: str) -> client.V1StatefulSet:
    return client.AppsV1Api(kube).read_namespaced_stateful_set("db", namespace)


def claims(core: client.CoreV1Api, namespace: str) -> set[str]:
    return {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(namespace).items
            if c.metadata.deletion_timestamp is None}


def texts(slack, channel: str) -> str:
    return "\n".join(m.text + str(m.blocks) for m in slack.messages(channel))


def test_a_statefulset_whose_claims_would_go_is_never_scaled_to_zero(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus, volume) -> None:  # noqa: F811
    idle_statefulset(kube, core, namespace, exporter_values, when_scaled="Delete")
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s", action="scale-to-zero")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    found = statefulset(kube, namespace)
    assert a.POLICY not in (found.metadata.annotations or {}), janitor.explain()
    assert found.spec.replicas == 1 and claims(core, namespace) == {"data-db-0"}
    assert "whenScaled: Delete" in janitor.explain()  # the plan says why: its volumes would go


def test_a_chart_that_turns_retention_to_delete_cancels_the_mark(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus, volume) -> None:  # noqa: F811
    idle_statefulset(kube, core, namespace, exporter_values, when_scaled="Retain")
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s", action="scale-to-zero")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    notes = dict(statefulset(kube, namespace).metadata.annotations or {})
    assert notes.get(a.POLICY) == "idle-gpu" and a.WARNED_VIA in notes, janitor.explain()
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    assert "its volumes (claims from templates data) stay (whenScaled: Retain)" in texts(slack, channel)

    client.AppsV1Api(kube).patch_namespaced_stateful_set("db", namespace, {"spec": {
        "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete", "whenDeleted": "Retain"}}})
    until_due(notes)
    janitor.run_cycle()
    found = statefulset(kube, namespace)
    assert found.spec.replicas == 1 and a.POLICY not in (found.metadata.annotations or {})
    assert claims(core, namespace) == {"data-db-0"}
    last = slack.messages(channel)[-1]
    assert "no longer marked" in last.text + str(last.blocks)


def test_a_policy_that_allows_it_scales_to_zero_and_said_the_volumes_go(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus, volume) -> None:  # noqa: F811
    idle_statefulset(kube, core, namespace, exporter_values, when_scaled="Delete")
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s", action="scale-to-zero",
                          deleteVolumes="true")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    notes = dict(statefulset(kube, namespace).metadata.annotations or {})
    assert a.WARNED_VIA in notes, janitor.explain()
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    assert "are deleted with it (whenScaled: Delete)" in texts(slack, channel)
    until_due(notes)
    janitor.run_cycle()
    assert statefulset(kube, namespace).spec.replicas == 0
    # The StatefulSet controller deletes the claims of the replicas scaled away, as its policy says.
    wait_until(lambda: not claims(core, namespace), timeout=60, what="the claim deleted by the controller")
