"""DRA ResourceClaims, read at the `resource.k8s.io` version the cluster serves, as plain values.

DRA went GA in 1.34 (`v1`); clusters of 1.32 and 1.33 serve `v1beta1` and `v1beta2` (where
enabled), so the version is discovered, not assumed: the first of `VERSIONS` the group serves.
`read` lists the version the daemon kept from discovery's last answer (for a few minutes,
`Discovery`), else v1, without asking (one request a cycle where DRA is GA), and asks discovery
only when neither is served. The status fields read here (`allocation.devices.results`,
`reservedFor`) have the same shape in all three.

Nothing here raises: a group that is not served is a `ClaimsRead` with `served=False` (no claims
can exist), and a discovery or list that fails is one with its problem and no claims, so nothing
can be called orphaned on a read that did not happen. A claim whose status has an unexpected
shape carries its problem, which makes its verdict UNKNOWN (`decide.claims`).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from janitor import errors
from janitor.decide.claims import Claim, ClaimRef, ClaimsRead, Consumer, Device, PodsSeen, State
from janitor.decide.model import ObjectView, OwnerRef, PodView, ResourceKind
from janitor.observe import cluster
from janitor.policy.model import OrphanedClaim, Policy

logger = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1beta1")  # read the first one served
PODS = ResourceKind("", "v1", "Pod", "pods")


def resource_claims(version: str) -> ResourceKind:
    return ResourceKind(GROUP, version, "ResourceClaim", "resourceclaims")


def version(group: Mapping[str, Any]) -> str | None:
    """The version to read: the first of `VERSIONS` the group serves (v1alpha3 alone: none, its
    fields are not read here)."""
    return cluster.first_version(group, VERSIONS)


def served(api: ApiClient) -> tuple[str | None, str]:
    """(the version to read, "") or (None, why not); ("", "") when `resource.k8s.io` is not served."""
    return cluster.served_version(api, GROUP, VERSIONS, name=GROUP)


DISCOVER_EVERY = datetime.timedelta(minutes=5)


class Discovery:
    """What discovery said of a cluster that does not serve v1, kept `DISCOVER_EVERY` between the
    daemon's cycles. Why: without DRA (before 1.32, or not enabled) every cycle spent two requests
    learning that there are no claims (v1's 404, then discovery), and one more where a beta version
    is served. Only an answer is kept, never a look that failed; a cluster that starts serving
    claims, or v1, is seen within minutes (claims seen later only start their count later)."""

    def __init__(self, every: datetime.timedelta = DISCOVER_EVERY, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.clock = every.total_seconds(), clock
        self._lock = threading.Lock()
        self._said: tuple[str, float] | None = None  # (the version served, "" for none; when it was said)

    def kept(self) -> str | None:
        """The version discovery said ("" for none), while fresh; None: ask."""
        with self._lock:
            if self._said is None or self.clock() - self._said[1] >= self.every:
                return None
            return self._said[0]

    def keep(self, version: str | None) -> None:
        with self._lock:
            self._said = (version, self.clock()) if version is not None else None


def read(api: ApiClient, namespaces: Sequence[str] | None = None, *, page_size: int = 250,
         discovery: Discovery | None = None) -> ClaimsRead:
    """The ResourceClaims in `namespaces` (None: in all), at the version discovery picks (what
    `discovery` keeps, while it is fresh)."""
    scope = frozenset(namespaces) if namespaces is not None else None
    kept = discovery.kept() if discovery is not None else None
    if kept == "":
        return ClaimsRead(served=False, namespaces=scope)
    # The version kept, else (or once it answers 404) v1, without asking discovery: one request a
    # cycle where DRA is GA (1.34 on), or where discovery's answer is kept.
    for at in dict.fromkeys((kept or VERSIONS[0], VERSIONS[0])):
        try:
            return _listed(api, at, namespaces, page_size, scope)
        except errors.NotFound:
            if discovery is not None:
                discovery.keep(None)
        except errors.KubeError as e:
            return _unlisted(at, e, scope)
    found, problem = served(api)
    if discovery is not None:
        discovery.keep(found)
    if found == "":
        return ClaimsRead(served=False, namespaces=scope)
    if found is None:
        logger.warning("ResourceClaims not read: %s", problem)
        return ClaimsRead(problem=problem, namespaces=scope)
    try:
        return _listed(api, found, namespaces, page_size, scope)
    except errors.KubeError as e:
        return _unlisted(found, e, scope)


def _unlisted(at: str, error: errors.KubeError, scope: frozenset[str] | None) -> ClaimsRead:
    logger.warning("cannot list ResourceClaims: %s", error)
    return ClaimsRead(version=at, problem=f"ResourceClaims could not be listed ({_said(error)})", namespaces=scope)


def _listed(api: ApiClient, at: str, namespaces: Sequence[str] | None, page_size: int,
            scope: frozenset[str] | None) -> ClaimsRead:
    claims: list[Claim] = []
    for page, _ in cluster.list_items(api, resource_claims(at), page_size=page_size, namespaces=namespaces):
        claims.extend(to_claim(item, f"{GROUP}/{at}") for item in page)
    return ClaimsRead(tuple(claims), at, namespaces=scope)


def for_cycle(api: ApiClient, namespaces: Sequence[str] | None, after: datetime.timedelta, page_size: int,
              pods_read: Sequence[PodView] | None, *, judged: bool = False,
              discovery: Discovery | None = None) -> ClaimsRead | None:
    """A cycle's claims, with the pods it read beside them (None: none were, so no reservation is
    called stale); None where `after` is zero (`--orphaned-claims-after 0`: not read for the admin
    report), no policy judges them (`judged`: an orphanedClaim policy is loaded) and no pod read
    names one (a pod's GPU may be held through its claim: unread, it is of unknown use). Read only
    for those pods, the claims are `for_pods`: no claim is reported, judged or unmarked from it."""
    for_pods = not after and not judged
    if for_pods and not any(p.resource_claims for p in pods_read or ()):
        return None
    found = dataclasses.replace(read(api, namespaces, page_size=page_size, discovery=discovery), for_pods=for_pods)
    if pods_read is None:
        return found
    scope = frozenset(namespaces) if namespaces is not None else None
    return dataclasses.replace(found, pods=PodsSeen(frozenset(p.ref.uid for p in pods_read), scope))


def pods(api: ApiClient, namespaces: Sequence[str] | None = None, *, page_size: int = 250) -> PodsSeen:
    """The UIDs of the pods in `namespaces` (None: in all), for a look at claims outside a cycle (a
    cycle has its pods already: `PodsSeen(frozenset(uids), namespaces)`). A failure is its problem."""
    scope = frozenset(namespaces) if namespaces is not None else None
    uids: set[str] = set()
    try:
        for page, _ in cluster.list_items(api, PODS, page_size=page_size, namespaces=namespaces):
            uids.update(str(uid) for item in page if (uid := (item.get("metadata") or {}).get("uid")))
    except errors.KubeError as e:
        logger.warning("cannot list pods: %s", e)
        return PodsSeen(namespaces=scope, problem=f"pods could not be listed ({_said(e)})")
    return PodsSeen(frozenset(uids), scope)


def judged(policies: Iterable[Policy]) -> bool:
    """Whether a policy judges claims (orphanedClaim): then they are read whatever the admin report's
    `--orphaned-claims-after` says."""
    return any(p.trigger(OrphanedClaim) is not None for p in policies)


def scoped(api: ApiClient, item: Mapping[str, Any], api_version: str, pods_read: Sequence[PodView],
           seen: Mapping[str, tuple[State, datetime.datetime]]) -> ClaimsRead:
    """One claim read again by name for the re-check, with every pod of its namespace read beside it
    and what the daemon has seen of it so far (`seen`: the cycle's memory, by claim uid)."""
    claim = to_claim(item, api_version)
    namespace = frozenset({claim.ref.namespace})
    mine = {claim.ref.uid: seen[claim.ref.uid]} if claim.ref.uid in seen else {}
    return ClaimsRead((claim,), api_version.rpartition("/")[2], namespaces=namespace,
                      pods=PodsSeen(frozenset(p.ref.uid for p in pods_read), namespace), seen=mine)


def to_claim(item: Mapping[str, Any], api_version: str) -> Claim:
    """One claim's raw JSON as a `Claim`; whatever is not of the shape expected goes into its problem."""
    problems: list[str] = []
    meta = _mapping(item.get("metadata"), "metadata", problems)
    ref = ClaimRef(_text(meta.get("namespace")), _text(meta.get("name")), _text(meta.get("uid")))
    if not (ref.namespace and ref.name and ref.uid):
        problems.append("metadata lacks its namespace, name or uid")
    view = _view(item) if api_version == f"{GROUP}/{VERSIONS[0]}" and not problems else None
    status = _mapping(item.get("status"), "status", problems)
    allocation = status.get("allocation")
    allocated = allocation is not None
    devices: tuple[Device, ...] = ()
    if allocated:
        devices = _devices(_mapping(allocation, "status.allocation", problems), problems)
    return Claim(
        ref=ref,
        resource_version=_text(meta.get("resourceVersion")),
        api_version=api_version,
        created=_time(meta.get("creationTimestamp"), problems),
        allocated=allocated,
        consumers=_consumers(status.get("reservedFor"), problems),
        devices=devices,
        annotations=_strings(meta.get("annotations")),
        labels=_strings(meta.get("labels")),
        finalizers=tuple(str(f) for f in meta.get("finalizers") or () if isinstance(f, str)),
        deleting=meta.get("deletionTimestamp") is not None,
        controller=_controller(meta.get("ownerReferences")),
        owners=_owners(meta.get("ownerReferences")),
        problem="; ".join(problems),
        status_written=_status_written(meta.get("managedFields")),
        view=view,
    )


CLAIMS = resource_claims(VERSIONS[0])  # the one version claims are marked and deleted at


def _view(item: Mapping[str, Any]) -> ObjectView | None:
    """The claim as an object; None when its metadata lacks what every object has."""
    meta = item.get("metadata")
    if not isinstance(meta, Mapping) or not all(isinstance(meta.get(k), str) and meta.get(k)
                                                 for k in ("resourceVersion", "creationTimestamp")):
        return None
    try:
        return cluster.to_view(CLAIMS, item)
    except (KeyError, TypeError, ValueError):
        return None


def _status_written(entries: Any) -> datetime.datetime | None:
    """The latest `time` of the managedFields entries that wrote the status subresource. Each write
    that changes a manager's fields (a reservation added or dropped, an allocation) moves its time."""
    times: list[datetime.datetime] = []
    for e in entries if isinstance(entries, list) else ():
        if isinstance(e, Mapping) and e.get("subresource") == "status":
            at = cluster.api_time(e.get("time"))
            if at is not None:
                times.append(at)
    return max(times) if times else None


def _devices(allocation: Mapping[str, Any], problems: list[str]) -> tuple[Device, ...]:
    devices = allocation.get("devices")
    if devices is None:
        return ()
    results = _mapping(devices, "status.allocation.devices", problems).get("results")
    if results is None:
        return ()
    if not isinstance(results, list):  # an empty `{}` or `""` too: never taken for "no devices"
        problems.append("status.allocation.devices.results is not a list")
        return ()
    out: list[Device] = []
    for r in results:
        if not isinstance(r, Mapping):
            problems.append("a status.allocation.devices.results entry is not an object")
            continue
        if not _strings_at(r, "driver", "pool", "device"):
            problems.append("a status.allocation.devices.results entry lacks its driver, pool or device")
        out.append(Device(_text(r.get("request")), _text(r.get("driver")), _text(r.get("pool")),
                          _text(r.get("device"))))
    return tuple(out)


def _consumers(reserved: Any, problems: list[str]) -> tuple[Consumer, ...]:
    if reserved is None:
        return ()
    if not isinstance(reserved, list):
        problems.append("status.reservedFor is not a list")
        return ()
    out: list[Consumer] = []
    for entry in reserved:
        if not isinstance(entry, Mapping):
            problems.append("a status.reservedFor entry is not an object")
            continue
        group = entry.get("apiGroup")  # absent for the core group
        if not _strings_at(entry, "resource", "name", "uid") or not (group is None or isinstance(group, str)):
            problems.append("a status.reservedFor entry lacks its resource, name or uid, or has an odd apiGroup")
        out.append(Consumer(_text(entry.get("apiGroup")), _text(entry.get("resource")), _text(entry.get("name")),
                            _text(entry.get("uid"))))
    return tuple(out)


def _owners(owners: Any) -> tuple[OwnerRef, ...]:
    return tuple(OwnerRef(_text(o.get("kind")), _text(o.get("apiVersion")), _text(o.get("name")), _text(o.get("uid")))
                 for o in (owners if isinstance(owners, list) else ()) if isinstance(o, Mapping))


def _controller(owners: Any) -> OwnerRef | None:
    for o in owners if isinstance(owners, list) else ():
        if isinstance(o, Mapping) and o.get("controller") is True:
            return OwnerRef(_text(o.get("kind")), _text(o.get("apiVersion")), _text(o.get("name")),
                            _text(o.get("uid")))
    return None


def _mapping(value: Any, where: str, problems: list[str]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"{where} is not an object")
        return {}
    return value


def _strings_at(entry: Mapping[str, Any], *keys: str) -> bool:
    """Whether each of `keys` is a non-empty string in `entry`."""
    return all(isinstance(entry.get(k), str) and entry.get(k) for k in keys)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _time(value: Any, problems: list[str]) -> datetime.datetime | None:
    if value is None:
        return None
    at = cluster.api_time(value)
    if at is None:
        problems.append(f"metadata.creationTimestamp {value!r} is not a time")
    return at


def _said(error: errors.KubeError) -> str:
    return error.server_message or str(error)
