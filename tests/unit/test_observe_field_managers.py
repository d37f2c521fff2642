"""Who wrote the janitor's keys, read from the apiserver's own record, and every write signed.

The apiserver records, per field manager, which fields each writer set last (metadata.managedFields;
docs/policies.md, "Who wrote it"; the shapes below are copied from kube-apiserver v1.34 answers).
The janitor names itself on every write and reads back which of its keys someone else wrote.

Aspects covered:
- a janitor-only key (or the janitor/expires beside a mark) last written by another manager
  (kubectl annotate, the Deployment controller) is foreign; one the janitor wrote (under its field
  manager, or its old default, OpenAPI-Generator) is not; a key without any record is foreign;
- the user's own keys (keep-until, ttl) are never foreign, and an object without a mark costs no
  reading of managedFields;
- a full object, a PartialObjectMetadata item and the watch cache's slim value read the same;
- every write of the janitor (annotate, reclaim, delete's probe, Events, the state ConfigMap) names
  its field manager; `kubectl janitor keep` names its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from janitor import annotations as a
from janitor.act import kube
from janitor.decide.model import Action, ActionType, ObjectRef, ResourceKind, TriggerKind
from janitor.decide.reasons import text
from janitor.observe import cluster
from janitor.observe.cache import ClusterCache
from janitor.settings import ClusterSettings, Settings

JOBS = ResourceKind("batch", "v1", "Job", "jobs")
CONFIG_MAPS = ResourceKind("", "v1", "ConfigMap", "configmaps")


def entry(manager: str, *keys: str, operation: str = "Update") -> dict[str, Any]:
    """One managedFields entry owning these annotations, as the apiserver writes it."""
    return {"apiVersion": "batch/v1", "fieldsType": "FieldsV1", "manager": manager, "operation": operation,
            "time": "2026-11-27T01:12:36Z",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, **{f"f:{k}": {} for k in keys}}}}}


def item(notes: Mapping[str, str], managed: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "team-a", "uid": "uid-train", "resourceVersion": "7",
                            "creationTimestamp": "2026-11-27T00:00:00Z", "annotations": dict(notes)}
    if managed is not None:
        meta["managedFields"] = list(managed)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {}}


MARK = {a.POLICY: "idle-gpu", a.MARKED_AT: "2026-11-20T10:00:00Z", a.MARKED_UID: "uid-train",
        a.EXPIRES: "2026-11-21T10:00:00Z", a.REASON: "idle"}


def test_a_key_someone_else_wrote_last_is_foreign() -> None:
    notes = MARK | {a.KEEP_UNTIL: "2026-12-30", a.MARKED_AT: "2027-01-01T00:00:00Z"}
    managed = [entry(a.FIELD_MANAGER, a.POLICY, a.MARKED_UID, a.EXPIRES, a.REASON),
               entry("kubectl-annotate", a.MARKED_AT, a.KEEP_UNTIL)]
    assert cluster.to_view(JOBS, item(notes, managed)).foreign_marks == {a.MARKED_AT}


def test_the_janitors_own_keys_under_either_of_its_names_are_not_foreign() -> None:
    managed = [entry(a.FIELD_MANAGER, a.POLICY, a.MARKED_UID), entry("OpenAPI-Generator", a.EXPIRES, a.MARKED_AT),
               entry("kubectl-annotate", a.REASON, operation="Apply")]
    assert cluster.to_view(JOBS, item(MARK, managed)).foreign_marks == {a.REASON}
    shared = [*managed, entry(a.FIELD_MANAGER, a.REASON, operation="Apply")]  # applied by both: the janitor's too
    assert cluster.to_view(JOBS, item(MARK, shared)).foreign_marks == frozenset()


def test_without_any_record_every_key_of_the_mark_is_foreign() -> None:
    """managedFields can be emptied by anyone who may update the object; then nothing is the janitor's."""
    assert cluster.to_view(JOBS, item(MARK, None)).foreign_marks == frozenset(MARK)
    assert cluster.to_view(JOBS, item(MARK, [])).foreign_marks == frozenset(MARK)


def test_the_users_own_keys_are_never_foreign_and_an_unmarked_object_costs_nothing() -> None:
    users = {a.KEEP_UNTIL: "2026-12-30", a.TTL: "7d", "team": "ml"}
    view = cluster.to_view(JOBS, item(users, [entry("kubectl-annotate", *users)]))
    assert view.foreign_marks == frozenset()
    broken: list[Any] = [object()]  # not read at all when no key of a mark is there
    assert cluster.to_view(JOBS, item(users, broken)).foreign_marks == frozenset()
    assert cluster.to_view(JOBS, item({a.EXPIRES: "2030-01-01"}, [])).foreign_marks == frozenset()  # no mark


def test_a_controllers_copy_is_foreign_whole() -> None:
    copy = MARK | {a.MARKED_UID: "uid-deployment", "deployment.kubernetes.io/revision": "1"}
    managed = [entry("kube-controller-manager", *copy)]
    assert cluster.to_view(JOBS, item(copy, managed)).foreign_marks == frozenset(MARK)


def test_metadata_only_items_and_the_watch_caches_values_read_the_same() -> None:
    managed = [entry(a.FIELD_MANAGER, a.POLICY, a.MARKED_UID, a.EXPIRES, a.REASON),
               entry("kubectl-edit", a.MARKED_AT)]
    partial = item(MARK, managed)
    partial.update(kind="PartialObjectMetadata", apiVersion="meta.k8s.io/v1")
    del partial["spec"]
    assert cluster.to_view(CONFIG_MAPS, partial).foreign_marks == {a.MARKED_AT}
    cache = ClusterCache(None, Settings(cluster=ClusterSettings(kinds=(JOBS,))))  # type: ignore[arg-type]
    kept = cache._slim(JOBS, as_object=True)(item(MARK, managed)).object
    assert kept is not None and kept.foreign_marks == {a.MARKED_AT}
    assert not hasattr(kept, "managed_fields") and "managedFields" not in repr(kept)


# -- every write names the janitor ------------------------------------------------------------------------

class _Answer:
    status = 200
    headers: dict[str, str] = {}

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()

    def read(self) -> bytes:
        return self.data


class _Recorder:
    """An ApiClient that answers every request with an object and records what was asked."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, Any]]] = []

    def param_serialize(self, method: str, path: str, query_params: Sequence[tuple[str, Any]] = (),
                        **_: Any) -> tuple[str, str, dict[str, Any]]:
        return method, path, dict(query_params)

    def call_api(self, method: str, path: str, query: dict[str, Any], *_: Any, **__: Any) -> _Answer:
        self.requests.append((method, path, query))
        return _Answer({"metadata": {"uid": "uid-train", "resourceVersion": "8"}})


REF = ObjectRef("Job", "batch/v1", "team-a", "train", "uid-train")


@pytest.mark.parametrize("write", ["annotate", "reclaim", "delete", "state"])
def test_every_write_names_the_janitors_field_manager(write: str) -> None:
    api = _Recorder()
    if write == "annotate":
        kube.annotate(api, REF, "7", {a.POLICY: None}, kind=JOBS, event=("IdleUnmarked", "unmarked"))  # type: ignore[arg-type]
    elif write == "state":
        kube.write_state(api, "janitor", "janitor-state", {"ledger": "{}"}, what="ledger")  # type: ignore[arg-type]
    else:
        kind = ActionType.SUSPEND if write == "reclaim" else ActionType.DELETE
        kube.apply(api, Action(kind, REF, "7", "idle-gpu", TriggerKind.IDLE_GPU, "lifecycle", "IdleReclaimed",  # type: ignore[arg-type]
                               text("due")), kind=JOBS)
    writes = [(m, p, q) for m, p, q in api.requests if m in ("PATCH", "POST", "PUT")]
    assert writes, api.requests
    assert all(q.get("fieldManager") == a.FIELD_MANAGER for _, _, q in writes), writes


def test_kubectl_janitor_keep_writes_under_its_own_name() -> None:
    api = _Recorder()
    kube.annotate(api, REF, "7", {a.KEEP_UNTIL: "2026-12-01"}, kind=JOBS, field_manager="kubectl-janitor")  # type: ignore[arg-type]
    [(method, _, query)] = api.requests
    assert method == "PATCH" and query["fieldManager"] == "kubectl-janitor"


def test_a_bare_pods_mark_is_read_the_same() -> None:
    """A bare pod is its own workload and can carry a mark: who wrote its keys is read too."""
    from janitor.observe import views

    raw = item(MARK, [entry(a.FIELD_MANAGER, a.POLICY, a.MARKED_UID, a.EXPIRES, a.REASON),
                      entry("kubectl-annotate", a.MARKED_AT)])
    raw = {**raw, "apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}, "status": {"phase": "Running"}}
    assert views.pod_view(raw).foreign_marks == {a.MARKED_AT}


def spec_entry(manager: str, field: str, at: str, subresource: str | None = None) -> dict[str, Any]:
    made = {"apiVersion": "apps/v1", "fieldsType": "FieldsV1", "manager": manager, "operation": "Update", "time": at,
            "fieldsV1": {"f:spec": {f"f:{field}": {}}}}
    return made | ({"subresource": subresource} if subresource else {})


def test_who_last_wrote_replicas_or_suspend_other_than_the_janitor_is_read() -> None:
    """KEDA scales through the scale subresource; GitOps writes the spec; the janitor's own write never counts."""
    managed = [spec_entry("kubectl-client-side-apply", "replicas", "2026-11-20T10:00:00Z"),
               spec_entry("keda-operator", "replicas", "2026-11-26T10:00:00Z", subresource="scale"),
               spec_entry(a.FIELD_MANAGER, "replicas", "2026-11-27T10:00:00Z")]
    assert cluster.to_view(JOBS, item({}, managed)).restored_by == "keda-operator"
    assert cluster.to_view(JOBS, item({}, [spec_entry("argocd-controller", "suspend", "2026-11-26T10:00:00Z")])
                           ).restored_by == "argocd-controller"
    assert cluster.to_view(JOBS, item({}, [spec_entry(a.FIELD_MANAGER, "replicas", "2026-11-26T10:00:00Z")])
                           ).restored_by is None
    assert cluster.to_view(JOBS, item({}, None)).restored_by is None
