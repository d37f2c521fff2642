"""Reading the cluster: paginated lists of raw items, single objects, the safety ledger.

Every kind, built-in or custom, is read the same way: raw JSON through the client's generic
`param_serialize`/`call_api`, not the generated typed models. That way a Notebook CRD needs no
generated class, deserialising 500 pods a page into models costs nothing, and each raw page is
turned into small `ObjectView`s and dropped, so memory grows with the number of objects, not with
their size.

What could not be read is a value, not an exception, wherever the planner can live without it:
a kind the apiserver does not serve (404) or RBAC does not let us list (403) becomes a
`SkippedKind`; a missing ledger is an empty ledger. Everything else raises a `janitor.errors`
`KubeError`, so the daemon can tell "retry later" from "an admin must act".
"""

from __future__ import annotations

import datetime
import email.utils
import json
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient

from janitor import annotations as ann
from janitor import errors, kubeapi, ledger
from janitor.decide import volumes
from janitor.decide.model import (
    ObjectRef,
    ObjectView,
    OwnerRef,
    ResourceKind,
    SafetyLedger,
    SkipCause,
    SkippedKind,
)
from janitor.decide.volumes import ClaimTemplates
from janitor.observe import views, watch

logger = logging.getLogger(__name__)


# Where each workload keeps the annotations of the pods it creates.
_POD_TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    **{("apps", k): ("spec", "template") for k in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")},
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}


# Kinds whose view is made of metadata alone (no pod template, no replicas): listed and watched as
# PartialObjectMetadata, so the apiserver sends neither their data (a Secret's, a ConfigMap's) nor
# their spec and status. Custom resources are read whole: a Notebook's replicas matter.
_METADATA_ONLY = frozenset({
    ("", "ConfigMap"), ("", "Secret"), ("", "Service"), ("", "PersistentVolumeClaim"), ("", "PersistentVolume"),
    ("", "ServiceAccount"), ("", "Namespace"), ("", "Endpoints"), ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"), ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"), ("policy", "PodDisruptionBudget"),
})


def metadata_only(kind: ResourceKind) -> bool:
    """Whether everything read of `kind` is in its metadata."""
    return (kind.group, kind.kind) in _METADATA_ONLY


METADATA_PAGES = 4
"""Metadata-only lists take this many times `--page-size` a page. The apiserver compresses an
answer only above 128 KiB: 250 ConfigMaps' metadata is about 124 KB, so every such page travelled
uncompressed (three quarters of a first cycle's bytes at 4,000 pods); a thousand are compressed,
and their metadata is a small part of what a page of pods holds."""


NODE_PAGES = 2
"""Nodes take this many times `--page-size` a page: the watch cache lists them again every
--node-refresh, and each page is a request (2,500 nodes: 5 requests a refresh, not 10)."""


def page_size_of(kind: ResourceKind, page_size: int) -> int:
    """The page size a list of `kind` asks for (`METADATA_PAGES`, `NODE_PAGES`)."""
    if metadata_only(kind):
        return page_size * METADATA_PAGES
    return page_size * NODE_PAGES if (kind.group, kind.kind) == ("", "Node") else page_size


@dataclass(frozen=True, slots=True)
class _Page:
    body: dict[str, Any]
    date: datetime.datetime | None  # the apiserver's Date header


def list_items(
    api: ApiClient, kind: ResourceKind, *, page_size: int = 500, namespaces: Sequence[str] | None = None,
    label_selector: str | None = None, field_selector: str | None = None,
) -> Iterator[tuple[list[dict[str, Any]], datetime.datetime | None]]:
    """Pages of one kind's raw items in all namespaces (or only in `namespaces`), following
    `continue` tokens, with each page's Date header. A cluster-scoped kind with `namespaces` keeps
    only the Namespace objects of that name (other cluster-scoped kinds are listed whole)."""
    scopes: Sequence[str | None] = namespaces if (namespaces is not None and kind.namespaced) else [None]
    for scope in scopes:
        for items, date in _pages(api, kind, page_size=page_size, namespace=scope, label_selector=label_selector,
                                  field_selector=field_selector):
            if namespaces is not None and kind.kind == "Namespace":
                items = [i for i in items if (i.get("metadata") or {}).get("name") in namespaces]
            yield items, date


def skipped(kind: ResourceKind, error: errors.KubeError) -> SkippedKind:
    """A kind that cannot be listed (404: not served; 403: RBAC), as a value the plan shows."""
    return _skip(kind, error)


def read_item(api: ApiClient, kind: ResourceKind, namespace: str | None, name: str) -> tuple[dict[str, Any] | None,
                                                                                            datetime.datetime | None]:
    """One object's raw JSON by name (None if not found) and the apiserver's Date."""
    try:
        page = _get(api, kubeapi.path(kind, namespace, name), doing=f"read {kind.kind} {namespace or ''}/{name}")
    except errors.NotFound:
        return None, None
    return page.body, page.date


def read_object(api: ApiClient, ref: ObjectRef, kind: ResourceKind) -> ObjectView | None:
    """The object as it is now, or None when it is gone or is another object of the same name.

    The re-read right before acting: a recreated object has a new UID and none of the history
    that made the janitor decide to act on the old one.
    """
    path = kubeapi.path(kind, ref.namespace, ref.name)
    try:
        page = _get(api, path, doing=f"read {ref}")
    except errors.NotFound:
        return None
    view = to_view(kind, page.body)
    if view.ref.uid != ref.uid:
        logger.info("%s was recreated (uid %s, expected %s): the old one is gone", ref, view.ref.uid, ref.uid)
        return None
    return view


def read_by_name(api: ApiClient, kind: ResourceKind, namespace: str | None, name: str) -> ObjectView | None:
    """The object of that name now, whatever its uid (for commands people type), or None."""
    try:
        return to_view(kind, _get(api, kubeapi.path(kind, namespace, name), doing=f"read {kind.kind} {name}").body)
    except errors.NotFound:
        return None


def read_state_versioned(api: ApiClient, namespace: str, name: str, key: str) -> tuple[str | None, str | None]:
    """One data key of the state ConfigMap and the ConfigMap's resourceVersion (None, None: no
    ConfigMap yet), for a write that must not go over another writer's. Raises `KubeError`."""
    try:
        page = _get(api, kubeapi.path(_CONFIG_MAPS, namespace, name), doing=f"read {key} in {namespace}/{name}")
    except errors.NotFound:
        return None, None
    value = (page.body.get("data") or {}).get(key)
    version = (page.body.get("metadata") or {}).get("resourceVersion")
    return (value if isinstance(value, str) else None), (str(version) if version else None)


def server_date(api: ApiClient) -> datetime.datetime | None:
    """The apiserver's clock (its Date header), from `/version`, which every client may read."""
    return _get(api, "/version", doing="read the apiserver's version").date


def read_ledger(api: ApiClient, namespace: str, name: str) -> SafetyLedger:
    return read_ledger_at(api, namespace, name)[0]


def read_ledger_at(api: ApiClient, namespace: str, name: str) -> tuple[SafetyLedger, datetime.datetime | None]:
    """The rails' memory from ConfigMap namespace/name (format: `janitor.ledger`).

    A missing ConfigMap or namespace is an empty ledger: the first cycle ever. A malformed ledger
    is logged at ERROR and comes back marked `unreadable`: the rails then stop deletions, since
    counting the caps from zero could let a bad day through; deleting the ConfigMap resumes.
    An unparseable acknowledgement counts as not acknowledged.
    """
    found, date, _ = _read_ledger(api, namespace, name)
    return found, date


def read_ledger_versioned(api: ApiClient, namespace: str, name: str) -> tuple[SafetyLedger, str | None]:
    """The ledger and the ConfigMap's resourceVersion (None: no ConfigMap yet), for a write that
    must not go over another writer's."""
    found, _, version = _read_ledger(api, namespace, name)
    return found, version


def _read_ledger(api: ApiClient, namespace: str, name: str
                 ) -> tuple[SafetyLedger, datetime.datetime | None, str | None]:
    try:
        path = kubeapi.path(_CONFIG_MAPS, namespace, name)
        page = _get(api, path, doing=f"read ledger {namespace}/{name}")
    except errors.NotFound as e:  # its answer still tells the apiserver's clock (no /version asked for it)
        logger.info("no safety ledger at ConfigMap %s/%s yet; starting empty", namespace, name)
        return SafetyLedger(), _parse_date(e.date), None
    metadata = page.body.get("metadata") or {}
    version = metadata.get("resourceVersion")
    acknowledged_at = _acknowledged_at(metadata.get("annotations") or {}, where=f"{namespace}/{name}")
    text = (page.body.get("data") or {}).get(ledger.DATA_KEY)
    if text is None:
        return SafetyLedger(acknowledged_at=acknowledged_at), page.date, version
    try:
        return ledger.loads(text, acknowledged_at=acknowledged_at), page.date, version
    except ledger.LedgerFormatError as e:
        logger.error("safety ledger in ConfigMap %s/%s is malformed; deletions stop until it is repaired "
                     "or deleted: %s", namespace, name, e)
        return SafetyLedger(acknowledged_at=acknowledged_at, unreadable=True), page.date, version


def to_view(kind: ResourceKind, item: Mapping[str, Any]) -> ObjectView:
    """The fields deciding reads, from one object's JSON (a list item or a GET answer)."""
    meta = item["metadata"]
    return ObjectView(
        # Kinds, API versions and namespaces held once however many objects name them (`api_version`
        # is made anew at each call): they were a tenth of the views' strings at 12,500 pods.
        ref=ObjectRef(
            kind=kind.kind,
            api_version=sys.intern(kind.api_version),
            namespace=_interned(meta.get("namespace")) if kind.namespaced else None,
            name=meta["name"],
            uid=meta["uid"],
        ),
        resource_version=meta["resourceVersion"],
        created=_parse_time(meta["creationTimestamp"]),
        annotations=views.kept_annotations(meta.get("annotations")),
        labels=views.strings(meta.get("labels")),
        deleting=meta.get("deletionTimestamp") is not None,
        controller=_controller(meta.get("ownerReferences") or []),
        template_annotations=_template_annotations(kind, item),
        replicas=_replicas(item),
        suspended=_suspended(item),
        claims=_claims(kind, item),
        foreign_marks=views.foreign_marks(meta),
        restored_by=views.restored_by(meta),
    )


def _interned(text: str | None) -> str | None:
    return sys.intern(text) if isinstance(text, str) else text


def _replicas(item: Mapping[str, Any]) -> int | None:
    value = (item.get("spec") or {}).get("replicas") if isinstance(item.get("spec"), dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _claims(kind: ResourceKind, item: Mapping[str, Any]) -> ClaimTemplates | None:
    spec = item.get("spec")
    if kind.kind != "StatefulSet" or not isinstance(spec, dict):
        return None
    names = tuple(str((t.get("metadata") or {}).get("name", "")) for t in spec.get("volumeClaimTemplates") or ()
                  if isinstance(t, dict))
    policy = spec.get("persistentVolumeClaimRetentionPolicy")
    policy = policy if isinstance(policy, dict) else {}
    return ClaimTemplates(names, when_scaled=str(policy.get("whenScaled") or volumes.RETAIN),
                          when_deleted=str(policy.get("whenDeleted") or volumes.RETAIN))


def _suspended(item: Mapping[str, Any]) -> bool:
    spec = item.get("spec")
    return isinstance(spec, dict) and spec.get("suspend") is True



_CONFIG_MAPS = ResourceKind("", "v1", "ConfigMap", "configmaps")


def _pages(
    api: ApiClient, kind: ResourceKind, *, page_size: int, namespace: str | None = None,
    label_selector: str | None = None, field_selector: str | None = None,
) -> Iterator[tuple[list[dict[str, Any]], datetime.datetime | None]]:
    """Pages of one kind's raw items, following `continue` tokens until the list is complete."""
    token: str | None = None
    path = kubeapi.path(kind, namespace)
    while True:
        query: list[tuple[str, str | int]] = [("limit", page_size_of(kind, page_size))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if token:
            query.append(("continue", token))
        page = _get(api, path, query=query, doing=f"list {kind.key}",
                    accept=watch.metadata_accept(as_list=True) if metadata_only(kind) else "application/json")
        yield list(page.body.get("items") or []), page.date
        token = (page.body.get("metadata") or {}).get("continue")
        if not token:
            return


def _get(api: ApiClient, path: str, *, query: Sequence[tuple[str, str | int]] = (), doing: str,
         accept: str = "application/json") -> _Page:
    """One GET, as JSON plus the Date header; any failure becomes a `janitor.errors.KubeError`."""
    response = kubeapi.request(api, "GET", path, query=query, doing=doing, accept=accept)
    data = response.data
    try:
        body = json.loads(data)
    except ValueError as e:
        raise errors.ServerError(f"answer is not JSON: {data[:100]!r}", status=response.status, doing=doing) from e
    return _Page(body=body, date=_parse_date(response.headers.get("Date")))


def _skip(kind: ResourceKind, error: errors.KubeError) -> SkippedKind:
    if isinstance(error, errors.Forbidden):
        logger.warning("cannot list %s (RBAC): %s; skipping it", kind.key, error.server_message)
        return SkippedKind(kind.key, f"forbidden: {error.server_message}", SkipCause.FORBIDDEN)
    logger.info("%s is not served by this apiserver; skipping it", kind.key)
    return SkippedKind(kind.key, f"not served ({kind.api_version} {kind.plural}): {error.server_message}")


def _controller(owner_references: Sequence[Mapping[str, Any]]) -> OwnerRef | None:
    for owner in owner_references:
        if owner.get("controller"):
            return OwnerRef(
                kind=sys.intern(owner["kind"]), api_version=sys.intern(owner["apiVersion"]), name=owner["name"],
                uid=owner["uid"],
            )
    return None


def _template_annotations(kind: ResourceKind, item: Mapping[str, Any]) -> dict[str, str]:
    path = _POD_TEMPLATE_PATHS.get((kind.group, kind.kind))
    if path is None:
        return {}
    node: Any = item
    for key in (*path, "metadata", "annotations"):
        node = node.get(key) if isinstance(node, Mapping) else None
    return dict(node) if isinstance(node, Mapping) else {}


def _acknowledged_at(object_annotations: Mapping[str, str], *, where: str) -> datetime.datetime | None:
    text = object_annotations.get(ann.ACKNOWLEDGE_TRIPWIRE)
    if text is None:
        return None
    try:
        return ledger.parse_acknowledged(text)
    except ValueError as e:
        logger.error(
            "%s on ConfigMap %s is ignored (not acknowledged): %s", ann.ACKNOWLEDGE_TRIPWIRE, where, e
        )
        return None


def _parse_time(text: str) -> datetime.datetime:
    """A Kubernetes timestamp (RFC 3339, `Z`) as an aware UTC datetime."""
    return datetime.datetime.fromisoformat(text).astimezone(datetime.timezone.utc)


def _parse_date(header: str | None) -> datetime.datetime | None:
    """The HTTP Date header (RFC 7231) as an aware UTC datetime; None when absent or garbled."""
    if not header:
        return None
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        logger.warning("apiserver sent an unreadable Date header %r", header[:60])
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322, but parsed as naive
        return when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


def api_time(text: Any) -> datetime.datetime | None:
    """A time as the apiserver writes one (RFC 3339, in UTC); None when absent, not a time, or
    without a zone (nothing to compare it with)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        at = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def first_version(group: Mapping[str, Any], versions: Sequence[str]) -> str | None:
    """The first of `versions` an API group's discovery document says it serves; None for none."""
    served = {str(v.get("version")) for v in group.get("versions") or () if isinstance(v, Mapping)}
    return next((v for v in versions if v in served), None)


def served_version(api: ApiClient, group: str, versions: Sequence[str], *, name: str) -> tuple[str | None, str]:
    """(the first of `versions` `group` serves, "") or (None, why not, in words naming it `name`);
    ("", "") when the group is not served at all. Never raises."""
    try:
        answer = kubeapi.request(api, "GET", f"/apis/{group}", doing=f"discover {group}")
        body = json.loads(answer.data)
    except errors.NotFound:
        return "", ""
    except errors.KubeError as e:
        return None, f"{name} could not be discovered ({e.server_message})"
    except ValueError:
        return None, f"the discovery answer of {name} is not JSON"
    found = first_version(body, versions) if isinstance(body, Mapping) else None
    return (found, "") if found else (None, f"{name} serves none of {', '.join(versions)}")
