"""DRA ResourceClaims as read, and which of them hold devices with no consumer.

A claim whose `status.allocation` is set holds its devices: the scheduler allocates no other claim
to them. Its `status.reservedFor` names who uses it. The resourceclaim controller deallocates a
claim when its last reservation goes, but only on that transition and only on a claim with its
finalizer (`resource.kubernetes.io/delete-protection`); a claim that is allocated with nothing
reserved (by a driver, by hand, or whose finalizer was removed) stays allocated for good, and so
does one reserved for a pod that never named it in `spec.resourceClaims` after that pod is gone
(the controller looks at a claim again only when the claim or a pod naming it changes). Both were
seen on a 1.34 control plane; cluster-facts.md section 5 has the rest.

So the verdicts, from the claim alone and the pods read beside it:
- ORPHANED: allocated, nothing reserved.
- STALE_CONSUMER: allocated, every reservation a pod whose UID is not among the pods read (only
  when the pods of its namespace were read; a replaced pod has a new UID, so it counts as gone).
- UNKNOWN: a reservation that is not a pod (a PodGroup with `DRAWorkloadResourceClaims`: whether
  it still runs is not known here), or a status of a shape not expected. Never acted on.
- IN_USE: allocated, and reserved for a pod that is there (or, pods unread, for pods at all).
- NOT_ALLOCATED: nothing held.

Pure: values in, values out, no clock. `observe.claims` turns the API's JSON into `Claim`s.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from janitor.decide.model import ObjectView, OwnerRef, PodView

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"  # on claims generated from a pod's template
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"  # on claims the scheduler makes
FINALIZER = "resource.kubernetes.io/delete-protection"  # without it the controller never deallocates


class State(enum.StrEnum):
    ORPHANED = "orphaned"
    STALE_CONSUMER = "stale-consumer"
    IN_USE = "in-use"
    NOT_ALLOCATED = "not-allocated"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"ResourceClaim/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Consumer:
    """One `status.reservedFor` entry: who the claim is reserved for."""

    api_group: str  # "" for the core group
    resource: str  # "pods", or a workload kind's plural
    name: str
    uid: str

    @property
    def is_pod(self) -> bool:
        return self.api_group == "" and self.resource == "pods"

    def __str__(self) -> str:
        return f"{self.resource}.{self.api_group}/{self.name}" if self.api_group else f"{self.resource}/{self.name}"


@dataclass(frozen=True, slots=True)
class Device:
    """One `status.allocation.devices.results` entry: a device the claim holds."""

    request: str
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class Claim:
    """The fields of one ResourceClaim the verdict and its reporting read, as of `resource_version`.

    `problem` is non-empty when its metadata or status did not have the shape expected: then the
    other fields are what could be made of it, and the verdict is UNKNOWN whatever they say."""

    ref: ClaimRef
    resource_version: str
    api_version: str  # the version it was read at, e.g. "resource.k8s.io/v1"
    created: datetime.datetime | None
    allocated: bool
    consumers: tuple[Consumer, ...] = ()
    devices: tuple[Device, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    deleting: bool = False
    controller: OwnerRef | None = None  # a Pod for a claim generated from its template
    owners: tuple[OwnerRef, ...] = ()  # every ownerReference, controller or not
    problem: str = ""
    # When its status was last written (metadata.managedFields, subresource status): what it says
    # has been so at least since then. None when no entry says.
    status_written: datetime.datetime | None = None
    # The claim as an object the lifecycle marks, warns of and may delete (the orphanedClaim trigger):
    # only for one read at resource.k8s.io/v1 whose metadata has its shape; None otherwise.
    view: ObjectView | None = None

    @property
    def generated(self) -> bool:
        """Made for one pod from its ResourceClaimTemplate: goes when that pod goes (garbage collector)."""
        return self.controller is not None and self.controller.kind == "Pod" and self.controller.api_version == "v1"

    @property
    def protected(self) -> bool:
        """Carries the controller's finalizer: the controller deallocates it once its last reservation goes."""
        return FINALIZER in self.finalizers


@dataclass(frozen=True, slots=True)
class PodsSeen:
    """The pods read beside the claims: their UIDs, which namespaces that read covered (None: all),
    and why it failed (then it covers nothing, and no consumer is called stale)."""

    uids: frozenset[str] = frozenset()
    namespaces: frozenset[str] | None = None
    problem: str = ""

    def covers(self, namespace: str) -> bool:
        return not self.problem and (self.namespaces is None or namespace in self.namespaces)


@dataclass(frozen=True, slots=True)
class ClaimsRead:
    """One read of the ResourceClaims: the claims, the version read, and why nothing could be read.

    `problem` non-empty means the claims are not known (an empty `claims` then says nothing);
    `served` False means the apiserver has no `resource.k8s.io` at all: there are no claims."""

    claims: tuple[Claim, ...] = ()
    version: str = ""
    served: bool = True
    problem: str = ""
    namespaces: frozenset[str] | None = None  # None: all namespaces were read
    pods: PodsSeen | None = None  # the pods read beside them in the same cycle; None: none were
    # Per claim uid, since when the daemon has seen it hold devices with no live consumer, cycle after
    # cycle, in the same state (`seen_since`): the grace counts from there, not from a status write
    # that may be older than the change (a reservation dropped, a pod gone).
    seen: Mapping[str, tuple[State, datetime.datetime]] = field(default_factory=dict)
    # Read only for the pods that name claims (`--orphaned-claims-after 0`, no orphanedClaim policy):
    # what their claims hold, never a claim reported, judged, unmarked or remembered (`seen_since`).
    for_pods: bool = False


class Why(enum.StrEnum):
    """What a verdict rests on, as data (the words are `Verdict.words`)."""

    NO_ALLOCATION = "no-allocation"
    NO_RESERVATION = "no-reservation"
    PODS_GONE = "pods-gone"
    POD_THERE = "pod-there"
    PODS_UNREAD = "pods-unread"
    NOT_A_POD = "not-a-pod"
    SHAPE = "shape"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one claim is found to be, and on what grounds.

    `pods_read` says whether the pods of its namespace were read: IN_USE without them means
    "reserved for pods", not "reserved for pods that are there". `gone` lists the pod consumers not
    among the pods read; `others` the consumers that are not pods."""

    claim: Claim
    state: State
    why: Why
    pods_read: bool
    gone: tuple[Consumer, ...] = ()
    others: tuple[Consumer, ...] = ()

    @property
    def words(self) -> str:
        """The verdict in plain words, for a report or a log line (never parsed back)."""
        held = ", ".join(str(d) for d in self.claim.devices) or "no device listed"
        match self.why:
            case Why.NO_ALLOCATION:
                return "not allocated"
            case Why.NO_RESERVATION:
                return f"allocated ({held}) and reserved for nobody"
            case Why.PODS_GONE:
                return f"allocated ({held}) and reserved only for pods that are gone: {_names(self.gone)}"
            case Why.POD_THERE:
                return f"allocated ({held}) and reserved for a pod that is there"
            case Why.PODS_UNREAD:
                return f"allocated ({held}) and reserved for pods (not checked: its namespace's pods were not read)"
            case Why.NOT_A_POD:
                return f"reserved for {_names(self.others)}, which is not a pod: whether it is in use is not known"
            case Why.SHAPE:
                return f"its status could not be read: {self.claim.problem}"


def verdict(claim: Claim, pods: PodsSeen | None) -> Verdict:
    """The verdict of one claim (see the module's words); `pods` None when no pods were read."""
    read = pods is not None and pods.covers(claim.ref.namespace)
    if claim.problem:
        return Verdict(claim, State.UNKNOWN, Why.SHAPE, read)
    others = tuple(c for c in claim.consumers if not c.is_pod)
    if others:  # even beside pods, and even unallocated: a workload consumer is never judged here
        return Verdict(claim, State.UNKNOWN, Why.NOT_A_POD, read, others=others)
    if not claim.allocated:
        return Verdict(claim, State.NOT_ALLOCATED, Why.NO_ALLOCATION, read)
    if not claim.consumers:
        return Verdict(claim, State.ORPHANED, Why.NO_RESERVATION, read)
    if pods is None or not read:
        return Verdict(claim, State.IN_USE, Why.PODS_UNREAD, False)
    gone = tuple(c for c in claim.consumers if c.uid not in pods.uids)
    if len(gone) == len(claim.consumers):
        return Verdict(claim, State.STALE_CONSUMER, Why.PODS_GONE, True, gone=gone)
    return Verdict(claim, State.IN_USE, Why.POD_THERE, True, gone=gone)


def orphaned(claims: Iterable[Claim], pods: PodsSeen | None) -> tuple[Verdict, ...]:
    """The verdict of each claim, in the order given; `pods` None when no pods were read (then no
    claim reserved for pods is called stale)."""
    return tuple(verdict(c, pods) for c in claims)


def holding(verdicts: Iterable[Verdict], states: Collection[State] = (State.ORPHANED, State.STALE_CONSUMER)
            ) -> tuple[Verdict, ...]:
    """The verdicts of claims that hold devices no live consumer uses (by default)."""
    return tuple(v for v in verdicts if v.state in states)


def seen_since(read: ClaimsRead | None, before: Mapping[str, tuple[State, datetime.datetime]],
               now: datetime.datetime, *, named: Collection[tuple[str, str]] = ()
               ) -> dict[str, tuple[State, datetime.datetime]]:
    """Per claim holding devices with no live consumer now, since when it has been seen so (in the
    same state) by the cycles before (`before`, the last cycle's answer), else now. Time not seen
    never counts: claims not read (None), read only for the pods naming them (`for_pods`: a policy
    loaded later counts from its own first look, as where none were read), or whose read failed,
    start again; one without sight of pods says nothing of stale reservations. A claim a pod that
    runs or waits names (`named`: namespace and name) is in use, so its count starts again once
    that pod is gone."""
    if read is None or read.problem or read.for_pods:
        return {}
    out: dict[str, tuple[State, datetime.datetime]] = {}
    for v in holding(orphaned(read.claims, read.pods)):
        if (v.claim.ref.namespace, v.claim.ref.name) in named:
            continue
        kept = before.get(v.claim.ref.uid)
        out[v.claim.ref.uid] = kept if kept is not None and kept[0] is v.state else (v.state, now)
    return out


def lingering(read: ClaimsRead | None, now: datetime.datetime, after: datetime.timedelta) -> tuple[Verdict, ...]:
    """The claims holding devices no live consumer uses (`holding`) that have been seen so for at
    least `after` (`ClaimsRead.seen`, cycle after cycle) and whose status was last written at least
    that long ago: a deallocation on its way takes seconds. A claim being deleted, or whose last
    write is not known, is not among them; nor is any claim on the first look of a run. `after`
    zero (`--orphaned-claims-after 0`) reports none: the claims are then read only for the pods
    that name them."""
    if not after or read is None or read.problem or not read.claims:
        return ()
    out = []
    for v in holding(orphaned(read.claims, read.pods)):
        first = read.seen.get(v.claim.ref.uid)
        written = v.claim.status_written
        if v.claim.deleting or written is None or first is None or first[0] is not v.state:
            continue
        if now - max(written, first[1]) >= after:
            out.append(v)
    return tuple(out)


def named_by(pods: Iterable[PodView]) -> frozenset[tuple[str, str]]:
    """The claims (namespace, name) that pods which run or wait name: in use, reserved or not."""
    return frozenset((p.ref.namespace or "", name) for p in pods if p.phase not in ("Succeeded", "Failed")
                     for name in p.resource_claims)


def _names(consumers: Iterable[Consumer]) -> str:
    return ", ".join(str(c) for c in consumers)
