"""One ledger, two writers, on the sandbox: a second janitor's deletions are never written over.

Aspects covered:
- janitor A reads the ledger; janitor B (a second replica without leader election, or a second install
  on the same state ConfigMap) records a deletion in it before A acts: A merges B's record with its own,
  deletes nothing more in that cycle, says so (the action's detail), and the ledger keeps B's deletion;
- with no other writer, A's notes to send (which share the ConfigMap) do not count as one: A deletes.
"""

from __future__ import annotations

import datetime

from kubernetes import client
from runner import Runner
from runner import settings as build

from janitor import annotations as a
from janitor.act import kube as act_kube
from janitor.decide.model import Deletion
from janitor.decide.rails import Rails
from janitor.observe import cluster

EXPIRED = {a.EXPIRES: "2020-01-01T00:00:00Z"}


def expired(core: client.CoreV1Api, namespace: str, name: str) -> None:
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, annotations=EXPIRED)))


def test_a_second_writers_deletions_are_merged_and_nothing_more_is_deleted(
        kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    expired(core, namespace, "first")
    janitor = Runner(kube, build(namespaces=(namespace,), state_namespace=namespace, rails=Rails()))
    assert [x.target.name for x in janitor.run_cycle().deleted()] == ["first"]  # alone: it deletes
    expired(core, namespace, "second")
    theirs = Deletion(datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0), "elsewhere")

    def second_janitor() -> None:
        stored = cluster.read_ledger(kube, namespace, "janitor-state")
        act_kube.write_ledger(kube, namespace, "janitor-state",
                              type(stored)((*stored.deletions, theirs), stored.previous_candidates))

    result = janitor.plan_then_act(second_janitor)
    assert result.deleted() == [] and result.ledger_contended
    [refused] = result.results
    assert "another janitor wrote the ledger" in refused.detail
    assert "second" in {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
    deletions = cluster.read_ledger(kube, namespace, "janitor-state").deletions
    assert theirs in deletions and sum(d.namespace == namespace for d in deletions) == 1  # "first" only

    assert [x.target.name for x in janitor.run_cycle().deleted()] == ["second"]  # the next cycle, alone again
