"""Deleting what comes back, on the sandbox (a real apiserver): a sync that creates an expired object
again under the same name, and an object Flux keeps.

Aspects covered:
- a ConfigMap whose janitor/expires passed is deleted; created again with the same annotation (a
  sync), it is reported once (`RecreatedAfterExpiry`, janitor/reported) and not deleted again, over
  several cycles, and the ledger counts one deletion;
- a ConfigMap labelled by Flux with a passed janitor/expires is reported, never deleted.
"""

from __future__ import annotations

import json

from kubernetes import client
from runner import Runner
from test_ttl_cleanup import EXPIRED, configmap, events_for, settings

from janitor import annotations as a


def ledger_deletions(core: client.CoreV1Api, namespace: str) -> list[dict[str, str]]:
    data = core.read_namespaced_config_map("janitor-state", namespace).data or {}
    return json.loads(data["ledger.json"])["deletions"]


def names(core: client.CoreV1Api, namespace: str) -> set[str]:
    return {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}


def test_an_expired_object_a_sync_creates_again_is_reported_once_not_deleted_on_every_sync(
        kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    janitor = Runner(kube, settings(namespace))
    configmap(core, namespace, "scratch", EXPIRED)
    result = janitor.run_cycle()
    assert [act.target.name for act in result.deleted()] == ["scratch"]
    [deleted] = ledger_deletions(core, namespace)
    assert deleted["target"] == f"ConfigMap/{namespace}/scratch" and deleted["rule"] == "expires=2020-01-01"

    for _ in range(3):  # the sync creates it again after every cycle (it comes back while it lasts)
        if "scratch" not in names(core, namespace):
            configmap(core, namespace, "scratch", EXPIRED)
        result = janitor.run_cycle()
        assert result.deleted() == [], janitor.explain()
    assert "scratch" in names(core, namespace)
    assert len(ledger_deletions(core, namespace)) == 1  # the caps spent nothing on the loop
    notes = core.read_namespaced_config_map("scratch", namespace).metadata.annotations
    assert a.REPORTED in notes
    said = [e for e in events_for(core, namespace, "scratch") if e.reason == "RecreatedAfterExpiry"]
    assert len(said) == 1 and "not deleted again" in said[0].message


def test_an_expired_object_flux_keeps_is_reported_never_deleted(
        kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(
        name="settings", annotations=EXPIRED, labels={"kustomize.toolkit.fluxcd.io/name": "apps"})))
    janitor = Runner(kube, settings(namespace))
    for _ in range(2):
        assert janitor.run_cycle().deleted() == []
    assert "settings" in names(core, namespace)
    said = [e for e in events_for(core, namespace, "settings") if e.reason == "RecreatedAfterExpiry"]
    assert len(said) == 1 and "Flux keeps this object" in said[0].message
