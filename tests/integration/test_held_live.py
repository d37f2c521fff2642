"""Reclaims that hold, or are not tried, on the sandbox: a Deployment Argo CD keeps, with a small
controller in the test playing Argo CD's self-heal (it puts replicas back, as `argocd-controller`).

Aspects covered:
- labelled by Argo CD, under a scale-to-zero policy without `reclaimManaged`: marked and warned
  that it is only reported (and who keeps it); past the deadline it is left at its replicas;
- with `reclaimManaged: [argocd]`: scaled to zero; the self-heal puts it back; the next cycle tells
  the owner once that it did not hold, naming Argo CD, sends no "done", records janitor/undone;
  idle again, the policy does not mark it again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kubernetes import client
from test_lifecycle import (  # noqa: F401 (alice and prometheus are fixtures)
    ALICE,
    alice,
    gpu_template,
    history,
    janitor_for,
    notes_of,
    prometheus,
    until_due,
    write_policy,
)

from devenv.procs import wait_until
from janitor import annotations as a
from janitor.decide.reasons import Code

ARGO = {"argocd.argoproj.io/instance": "team-notebooks"}


def create_deployment(kube, namespace: str) -> None:  # noqa: ANN001
    client.AppsV1Api(kube).create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="notebook", labels=ARGO, annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "notebook"}),
                                     template=gpu_template("notebook", "Always"))))


@pytest.fixture
def self_heal(kube, namespace: str) -> Iterator[list[int]]:
    """Argo CD's self-heal, played: whenever the Deployment is at zero replicas, put it back at one,
    under Argo CD's field manager. Yields the list of times it did."""
    apps, stop, healed = client.AppsV1Api(kube), threading.Event(), []

    def loop() -> None:
        while not stop.wait(0.3):
            try:
                found = apps.read_namespaced_deployment("notebook", namespace)
            except client.ApiException:
                continue
            if found.spec.replicas == 0:
                apps.patch_namespaced_deployment("notebook", namespace, {"spec": {"replicas": 1}},
                                                 field_manager="argocd-controller")
                healed.append(1)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield healed
    stop.set()
    thread.join(5)


def texts(slack, channel: str) -> list[str]:  # noqa: ANN001
    return [m.text + str(m.blocks) for m in slack.messages(channel)]


def test_a_deployment_argo_cd_keeps_is_reported_not_scaled(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:  # noqa: F811
    create_deployment(kube, namespace)
    history(core, namespace, exporter_values, {"notebook": 0})
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s", action="scale-to-zero")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    notes = notes_of(kube, namespace, "notebook", kind="deployment")
    assert a.WARNED_VIA in notes and notes[a.WARNED_OF].startswith("report "), janitor.explain()
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    [warning] = texts(slack, channel)
    assert "*Managed by:* Argo CD, which would undo a reclaim" in warning
    until_due(notes)
    janitor.run_cycle()
    assert client.AppsV1Api(kube).read_namespaced_deployment("notebook", namespace).spec.replicas == 1
    [change] = [c for c in janitor.plan().plan.changes if c.workload.name == "notebook"]
    assert change.why.code is Code.MANAGED_REPORT_ONLY
    assert len(texts(slack, channel)) == 1  # nothing else said


def test_a_reclaim_argo_cd_undoes_is_said_once_never_done_and_not_tried_again(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus,  # noqa: F811
        self_heal) -> None:
    create_deployment(kube, namespace)
    history(core, namespace, exporter_values, {"notebook": 0})
    first = {p.metadata.name for p in core.list_namespaced_pod(namespace).items}
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s", action="scale-to-zero",
                          reclaimManaged="[argocd]")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    notes = notes_of(kube, namespace, "notebook", kind="deployment")
    assert notes[a.WARNED_OF].startswith("scale-to-zero "), janitor.explain()
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    until_due(notes)
    janitor.run_cycle()  # scaled to zero, with its record; no "done" yet
    wait_until(lambda: self_heal, timeout=30, what="the self-heal putting the replicas back")
    apps = client.AppsV1Api(kube)
    assert a.RECLAIMED in (apps.read_namespaced_deployment("notebook", namespace).metadata.annotations or {})
    assert len(texts(slack, channel)) == 1

    janitor.run_cycle()  # it did not hold
    found = apps.read_namespaced_deployment("notebook", namespace)
    undone = a.Undone.parse((found.metadata.annotations or {}).get(a.UNDONE, ""))
    assert undone is not None and undone.by == "argocd-controller" and undone.policy == "idle-gpu", janitor.explain()
    warning, not_held = texts(slack, channel)
    assert "Not held" in not_held and "Argo CD (argocd-controller) undid it" in not_held
    assert not any("Done" in t for t in texts(slack, channel))

    wait_until(lambda: [p.metadata.name for p in core.list_namespaced_pod(namespace).items
                        if p.status.phase == "Running" and p.metadata.name not in first] and not [
        p for p in core.list_namespaced_pod(namespace).items if p.metadata.name in first],
        timeout=60, what="the pod it put back, alone")
    history(core, namespace, exporter_values, {"notebook": 0})  # the pod it put back, idle too
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())  # a Prometheus with that history
    janitor.run_cycle()
    notes = notes_of(kube, namespace, "notebook", kind="deployment")
    assert a.POLICY not in notes and apps.read_namespaced_deployment("notebook", namespace).spec.replicas == 1
    changes = [c for c in janitor.plan().plan.changes if c.workload.name == "notebook"]
    assert [c.why.code for c in changes] == [Code.NOT_AGAIN_UNDONE], janitor.explain()
    assert len(texts(slack, channel)) == 2 and len(self_heal) == 1  # said once; reclaimed once
