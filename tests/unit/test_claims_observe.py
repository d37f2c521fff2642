"""DRA ResourceClaims that hold devices with no consumer (cluster-facts.md section 5).

Aspects covered:
- the verdict of one claim: ORPHANED (allocated, nothing reserved), STALE_CONSUMER (every
  reservation a pod not among the pods read, by UID: a replaced pod counts as gone), IN_USE (a pod
  consumer there; or pods not read, said so in the value), UNKNOWN (a consumer that is not a pod,
  even beside pods; a status of an unexpected shape), NOT_ALLOCATED;
- the pods read: none, read elsewhere (another namespace) or failed means no consumer is stale;
- a claim read from its JSON: ref, version, times, annotations, labels, finalizers, deletion, the
  controller owner (a Pod for a generated claim), consumers and devices; every odd shape becomes its
  problem, never an exception;
- properties: a non-pod consumer is never ORPHANED or STALE; no allocation is never ORPHANED; a
  partial or malformed status is UNKNOWN; any JSON at all never raises and is ORPHANED only when its
  allocation is an object and nothing is reserved;
- discovery and listing, with the apiserver played at `kubeapi.request` as test_kueue does: v1,
  else v1beta2, else v1beta1; not served, forbidden, garbled or failing lists are a `ClaimsRead`
  with its problem and no claims; pages followed; namespaces listed one by one.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from janitor import errors, kubeapi
from janitor.decide import claims as dc
from janitor.decide.claims import Claim, ClaimRef, Consumer, Device, PodsSeen, State, Why
from janitor.decide.model import ObjectRef, OwnerRef
from janitor.observe import claims as oc

V1 = "resource.k8s.io/v1"
UTC = datetime.timezone.utc
_FUZZ = settings(deadline=None, database=None, max_examples=300)


def pod(name: str = "train-0", uid: str = "uid-pod") -> dict[str, Any]:
    return {"resource": "pods", "name": name, "uid": uid}


def raw(name: str = "gpu", *, namespace: str = "team-a", allocated: bool = True, reserved: Any = (),
        status: Any = "build", meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ResourceClaim as the apiserver sends it (v1), allocated one device on gpu-node-1."""
    if status == "build":
        status = {}
        if allocated:
            status["allocation"] = {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "gpu-node-1", "device": "gpu-0"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]}]}}
        if reserved:
            status["reservedFor"] = list(reserved)
    item: dict[str, Any] = {
        "apiVersion": V1, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "42",
                     "creationTimestamp": "2026-11-23T10:00:00Z", **(meta or {})},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    }
    if status is not None:
        item["status"] = status
    return item


def judged(item: Mapping[str, Any], pods: PodsSeen | None = PodsSeen(frozenset({"uid-pod"}))) -> dc.Verdict:
    return dc.verdict(oc.to_claim(item, V1), pods)


# -- the verdict --------------------------------------------------------------------------------------

WORKLOAD = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "uid-pg"}


@pytest.mark.parametrize(("item", "state", "why"), [
    pytest.param(raw(), State.ORPHANED, Why.NO_RESERVATION, id="allocated-reserved-for-nobody"),
    pytest.param(raw(reserved=[pod()]), State.IN_USE, Why.POD_THERE, id="reserved-for-a-pod-there"),
    pytest.param(raw(reserved=[pod(uid="uid-gone")]), State.STALE_CONSUMER, Why.PODS_GONE, id="pod-gone"),
    pytest.param(raw(reserved=[pod(), pod("b", "uid-gone")]), State.IN_USE, Why.POD_THERE, id="one-of-two-gone"),
    pytest.param(raw(reserved=[WORKLOAD]), State.UNKNOWN, Why.NOT_A_POD, id="a-podgroup"),
    pytest.param(raw(reserved=[pod(uid="uid-gone"), WORKLOAD]), State.UNKNOWN, Why.NOT_A_POD,
                 id="a-gone-pod-beside-a-podgroup"),
    pytest.param(raw(reserved=[{**pod(), "apiGroup": "example.com"}]), State.UNKNOWN, Why.NOT_A_POD,
                 id="pods-of-another-group"),
    pytest.param(raw(allocated=False), State.NOT_ALLOCATED, Why.NO_ALLOCATION, id="not-allocated"),
    pytest.param(raw(status=None), State.NOT_ALLOCATED, Why.NO_ALLOCATION, id="no-status-yet"),
    pytest.param(raw(status={"allocation": None, "reservedFor": None}), State.NOT_ALLOCATED, Why.NO_ALLOCATION,
                 id="nulls"),
    pytest.param(raw(status={"allocation": "yes"}), State.UNKNOWN, Why.SHAPE, id="allocation-not-an-object"),
    pytest.param(raw(status={"allocation": {}, "reservedFor": {}}), State.UNKNOWN, Why.SHAPE,
                 id="reservedFor-not-a-list"),
    pytest.param(raw(reserved=[{"resource": "pods", "name": "x"}]), State.UNKNOWN, Why.SHAPE, id="entry-no-uid"),
    pytest.param(raw(reserved=["pods/x"]), State.UNKNOWN, Why.SHAPE, id="entry-not-an-object"),
])
def test_the_verdict_of_one_claim(item: dict[str, Any], state: State, why: Why) -> None:
    found = judged(item)
    assert (found.state, found.why) == (state, why), found.words
    assert found.words


def test_a_replaced_pod_is_gone_even_under_the_same_name() -> None:
    found = judged(raw(reserved=[pod("train-0", "uid-old")]), PodsSeen(frozenset({"uid-new"})))
    assert found.state is State.STALE_CONSUMER and found.gone == (Consumer("", "pods", "train-0", "uid-old"),)
    assert "pods/train-0" in found.words and found.pods_read


def test_without_the_pods_of_its_namespace_no_consumer_is_stale() -> None:
    item = raw(reserved=[pod(uid="uid-gone")])
    for pods, why in ((None, "none read"), (PodsSeen(frozenset(), frozenset({"team-b"})), "another namespace"),
                      (PodsSeen(problem="pods could not be listed (forbidden)"), "failed")):
        found = judged(item, pods)
        assert (found.state, found.why, found.pods_read) == (State.IN_USE, Why.PODS_UNREAD, False), why
        assert "not checked" in found.words
    read_here = judged(item, PodsSeen(frozenset(), frozenset({"team-a"})))
    assert read_here.state is State.STALE_CONSUMER and read_here.pods_read


def test_orphaned_judges_each_claim_in_order_and_holding_keeps_the_ones_holding_devices() -> None:
    items = [raw("a"), raw("b", reserved=[pod()]), raw("c", allocated=False), raw("d", reserved=[pod(uid="x")])]
    verdicts = dc.orphaned([oc.to_claim(i, V1) for i in items], PodsSeen(frozenset({"uid-pod"})))
    assert [(v.claim.ref.name, v.state) for v in verdicts] == [
        ("a", State.ORPHANED), ("b", State.IN_USE), ("c", State.NOT_ALLOCATED), ("d", State.STALE_CONSUMER)]
    assert [v.claim.ref.name for v in dc.holding(verdicts)] == ["a", "d"]
    assert [v.claim.ref.name for v in dc.holding(verdicts, {State.ORPHANED})] == ["a"]


# -- a claim read from its JSON -----------------------------------------------------------------------

def test_a_claim_is_read_into_its_fields() -> None:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": "uid-pod", "controller": True,
             "blockOwnerDeletion": True}
    meta = {"annotations": {dc.POD_CLAIM_NAME: "gpu"}, "labels": {"team": "a"}, "ownerReferences": [owner],
            "finalizers": [dc.FINALIZER], "deletionTimestamp": "2026-11-23T11:00:00Z"}
    read = oc.to_claim(raw("train-0-gpu-x7k2p", reserved=[pod()], meta=meta), V1)
    # Read at v1, it is also an object the lifecycle can mark (an orphanedClaim policy's subject).
    assert read.view is not None and read.view.ref == ObjectRef("ResourceClaim", V1, "team-a", "train-0-gpu-x7k2p",
                                                                "uid-train-0-gpu-x7k2p")
    assert read.view.deleting and read.view.resource_version == "42"
    assert oc.to_claim(raw(), "resource.k8s.io/v1beta2").view is None  # beta claims: the admin report only
    claim = dataclasses.replace(read, view=None)
    assert claim == Claim(
        ref=ClaimRef("team-a", "train-0-gpu-x7k2p", "uid-train-0-gpu-x7k2p"), resource_version="42", api_version=V1,
        created=datetime.datetime(2026, 11, 23, 10, tzinfo=UTC), allocated=True,
        consumers=(Consumer("", "pods", "train-0", "uid-pod"),),
        devices=(Device("gpu", "gpu.example.com", "gpu-node-1", "gpu-0"),),
        annotations={dc.POD_CLAIM_NAME: "gpu"}, labels={"team": "a"}, finalizers=(dc.FINALIZER,), deleting=True,
        controller=OwnerRef("Pod", "v1", "train-0", "uid-pod"), owners=(OwnerRef("Pod", "v1", "train-0", "uid-pod"),))
    assert claim.generated and claim.protected and not claim.problem
    plain = oc.to_claim(raw(), V1)
    assert not plain.generated and not plain.protected and plain.controller is None and not plain.deleting
    assert str(plain.ref) == "ResourceClaim/team-a/gpu" and str(plain.devices[0]) == "gpu.example.com/gpu-node-1/gpu-0"


@pytest.mark.parametrize(("item", "says"), [
    pytest.param({"metadata": "x"}, "metadata is not an object", id="metadata"),
    pytest.param(raw(meta={"uid": None}), "namespace, name or uid", id="no-uid"),
    pytest.param(raw(meta={"creationTimestamp": "yesterday"}), "is not a time", id="created"),
    pytest.param(raw(status=[]), "status is not an object", id="status"),
    pytest.param(raw(status={"allocation": {"devices": []}}), "devices is not an object", id="devices"),
    pytest.param(raw(status={"allocation": {"devices": {"results": {}}}}), "results is not a list", id="results"),
    pytest.param(raw(status={"allocation": {"devices": {"results": [3]}}}), "entry is not an object", id="result"),
    pytest.param(raw(status={"allocation": {"devices": {"results": [{"driver": "d"}]}}}), "driver, pool or device",
                 id="result-partial"),
    pytest.param(raw(reserved=[{**pod(), "apiGroup": 7}]), "odd apiGroup", id="group"),
    pytest.param(raw(reserved=[{**pod(), "uid": 7}]), "resource, name or uid", id="uid-not-text"),
])
def test_every_odd_shape_is_its_problem(item: dict[str, Any], says: str) -> None:
    claim = oc.to_claim(item, V1)
    assert says in claim.problem
    assert dc.verdict(claim, PodsSeen()).state is State.UNKNOWN


# -- properties ---------------------------------------------------------------------------------------

_names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)
_pods = st.builds(lambda n, u: Consumer("", "pods", n, u), _names, _names)
_others = st.builds(Consumer, st.sampled_from(["", "scheduling.k8s.io", "example.com"]),
                    st.sampled_from(["podgroups", "workloads", "jobs"]), _names, _names)
_devices = st.lists(st.builds(Device, _names, _names, _names, _names), max_size=3).map(tuple)
_seen = st.one_of(st.none(), st.builds(PodsSeen, st.frozensets(_names, max_size=4),
                                       st.one_of(st.none(), st.frozensets(st.sampled_from(["team-a", "team-b"]))),
                                       st.sampled_from(["", "forbidden"])))


def _claim(allocated: bool, consumers: tuple[Consumer, ...], devices: tuple[Device, ...]) -> Claim:
    return Claim(ClaimRef("team-a", "c", "uid-c"), "1", V1, None, allocated, consumers, devices)


@_FUZZ
@given(st.booleans(), st.lists(_pods, max_size=3), st.lists(_others, min_size=1, max_size=3), _devices, _seen,
       st.randoms())
def test_a_claim_with_any_consumer_not_a_pod_is_never_orphaned_or_stale(
        allocated: bool, pods: list[Consumer], others: list[Consumer], devices: tuple[Device, ...],
        seen: PodsSeen | None, rnd: Any) -> None:
    consumers = pods + others
    rnd.shuffle(consumers)
    found = dc.verdict(_claim(allocated, tuple(consumers), devices), seen)
    assert found.state is State.UNKNOWN and set(found.others) == set(others)


@_FUZZ
@given(st.lists(_pods, max_size=3).map(tuple), _devices, _seen)
def test_a_claim_without_allocation_is_never_orphaned(pods: tuple[Consumer, ...], devices: tuple[Device, ...],
                                                      seen: PodsSeen | None) -> None:
    assert dc.verdict(_claim(False, pods, devices), seen).state not in (State.ORPHANED, State.STALE_CONSUMER)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=3), max_leaves=8)
_PATHS = [("allocation",), ("allocation", "devices"), ("allocation", "devices", "results"),
          ("allocation", "devices", "results", 0), ("allocation", "devices", "results", 0, "device"),
          ("reservedFor",), ("reservedFor", 0), ("reservedFor", 0, "uid"), ("reservedFor", 0, "name"),
          ("reservedFor", 0, "resource"), ("reservedFor", 0, "apiGroup")]
_BROKEN = {"allocation": st.one_of(st.text(), st.integers(), st.lists(st.integers(), max_size=2)),
           "devices": st.one_of(st.text(), st.lists(st.integers(), max_size=2)),
           "results": st.one_of(st.text(), st.integers(), st.dictionaries(st.text(max_size=3), st.integers())),
           "entry": st.one_of(st.text(), st.integers(), st.none(), st.lists(st.integers(), max_size=2)),
           "field": st.one_of(st.integers(), st.none(), st.just(""), st.lists(st.text(), max_size=1)),
           "group": st.one_of(st.integers(min_value=1), st.lists(st.text(), min_size=1, max_size=1))}


def _broken_at(path: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    if path[-1] == "apiGroup":
        return _BROKEN["group"]
    if isinstance(path[-1], int):
        return _BROKEN["entry"]
    if len(path) > 2 and isinstance(path[-2], int):
        return _BROKEN["field"]
    return _BROKEN.get(str(path[-1]) if path[-1] != "reservedFor" else "results", _BROKEN["allocation"])


@st.composite
def _malformed(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed status (any verdict) with one part of it replaced by something of the wrong shape."""
    status: dict[str, Any] = copy.deepcopy(raw(reserved=draw(st.sampled_from([[], [pod()], [pod(uid="x")]])))["status"])
    status.setdefault("reservedFor", [pod("spare", "uid-spare")])
    path = draw(st.sampled_from(_PATHS))
    node: Any = status
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = draw(_broken_at(path))
    return status


@_FUZZ
@given(_malformed(), _seen)
def test_a_partial_or_malformed_status_is_unknown(status: dict[str, Any], seen: PodsSeen | None) -> None:
    claim = oc.to_claim(raw(status=status), V1)
    assert claim.problem, status
    assert dc.verdict(claim, seen).state is State.UNKNOWN


@_FUZZ
@given(st.one_of(_json, st.dictionaries(st.sampled_from(["allocation", "reservedFor", "devices"]), _json)), _seen)
def test_any_status_at_all_is_read_without_raising_and_orphaned_only_when_well_formed(
        status: Any, seen: PodsSeen | None) -> None:
    found = dc.verdict(oc.to_claim(raw(status=status), V1), seen)
    if found.state is State.ORPHANED:
        assert isinstance(status, dict) and isinstance(status.get("allocation"), dict)
        assert not status.get("reservedFor")


# -- discovery and listing ----------------------------------------------------------------------------

class FakeApi:
    """The apiserver as `kubeapi.request` sees it: answers by path and `continue` token, errors by
    path prefix, requests recorded."""

    def __init__(self, answers: Mapping[Any, Any], failing: Mapping[str, errors.KubeError] | None = None) -> None:
        self.answers, self.failing = dict(answers), dict(failing or {})
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def request(self, api: object, method: str, path: str, *, query: Any = (), **_: Any) -> SimpleNamespace:
        params = dict(query)
        self.sent.append((path, params))
        for prefix, error in self.failing.items():
            if path.startswith(prefix):
                raise error
        answer = self.answers.get((path, params.get("continue")), self.answers.get(path, {}))
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        return SimpleNamespace(data=data, status=200, headers={})


def _group(*versions: str) -> dict[str, Any]:
    return {"versions": [{"groupVersion": f"resource.k8s.io/{v}", "version": v} for v in versions]}


DISCOVERY = "/apis/resource.k8s.io"
ALL = "/apis/resource.k8s.io/v1/resourceclaims"


def test_the_version_read_is_v1_else_v1beta2_else_v1beta1() -> None:
    assert oc.version(_group("v1beta1", "v1beta2", "v1")) == "v1"
    assert oc.version(_group("v1beta1", "v1beta2")) == "v1beta2"
    assert oc.version(_group("v1beta1")) == "v1beta1"
    assert oc.version(_group("v1alpha3")) is None and oc.version({}) is None
    assert oc.version({"versions": ["v1"]}) is None


def test_claims_are_listed_at_the_version_served_page_by_page(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi({DISCOVERY: _group("v1", "v1beta2"),
                    (ALL, None): {"items": [raw("a")], "metadata": {"continue": "p2"}},
                    (ALL, "p2"): {"items": [raw("b", namespace="team-b", reserved=[pod()])]}})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    read = oc.read(None)  # type: ignore[arg-type]
    assert (read.version, read.served, read.problem, read.namespaces) == ("v1", True, "", None)
    assert [(c.ref.namespace, c.ref.name, c.api_version) for c in read.claims] == [("team-a", "a", V1),
                                                                                     ("team-b", "b", V1)]
    assert [p for p, _ in fake.sent] == [ALL, ALL]  # v1 first, without asking discovery
    assert fake.sent[1][1]["continue"] == "p2"


def test_given_namespaces_are_listed_one_by_one_at_an_older_version(monkeypatch: pytest.MonkeyPatch) -> None:
    path = "/apis/resource.k8s.io/v1beta1/namespaces/{}/resourceclaims"
    v1 = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims"
    fake = FakeApi({DISCOVERY: _group("v1beta1"), path.format("team-a"): {"items": [raw("a")]},
                    path.format("team-b"): {"items": [raw("b", namespace="team-b")]}},
                   {v1: errors.NotFound("not found", status=404)})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    read = oc.read(None, ["team-a", "team-b"])  # type: ignore[arg-type]
    assert read.version == "v1beta1" and read.namespaces == frozenset({"team-a", "team-b"})
    assert [c.api_version for c in read.claims] == ["resource.k8s.io/v1beta1"] * 2
    # v1 not served (a 404): then discovery says which version is
    assert [p for p, _ in fake.sent] == [v1, DISCOVERY, path.format("team-a"), path.format("team-b")]


NO_V1 = {ALL: errors.NotFound("not found", status=404)}


@pytest.mark.parametrize(("fake", "served", "says"), [
    pytest.param(FakeApi({}, {**NO_V1, DISCOVERY: errors.NotFound("not found", status=404)}), False, "",
                 id="not-served"),
    pytest.param(FakeApi({}, {**NO_V1, DISCOVERY: errors.Forbidden("no", status=403)}), True,
                 "could not be discovered", id="discovery-forbidden"),
    pytest.param(FakeApi({}, {**NO_V1, DISCOVERY: errors.KubeError("timed out")}), True, "could not be discovered",
                 id="discovery-unanswered"),
    pytest.param(FakeApi({DISCOVERY: b"<html>"}, NO_V1), True, "not JSON", id="discovery-garbled"),
    pytest.param(FakeApi({DISCOVERY: _group("v1alpha3")}, NO_V1), True, "serves none of v1, v1beta2, v1beta1",
                 id="only-alpha"),
    pytest.param(FakeApi({}, {ALL: errors.KubeError("timed out")}), True, "could not be listed (", id="v1-unanswered"),
    pytest.param(FakeApi({DISCOVERY: _group("v1")}, {ALL: errors.Forbidden("resourceclaims is forbidden",
                                                                              status=403)}),
                 True, "could not be listed (resourceclaims is forbidden)", id="list-forbidden"),
    pytest.param(FakeApi({DISCOVERY: _group("v1"), ALL: b"{"}), True, "could not be listed", id="list-garbled"),
])
def test_what_cannot_be_read_is_a_problem_and_no_claims(monkeypatch: pytest.MonkeyPatch, fake: FakeApi,
                                                         served: bool, says: str) -> None:
    monkeypatch.setattr(kubeapi, "request", fake.request)
    read = oc.read(None)  # type: ignore[arg-type]
    assert read.claims == () and read.served is served and says in read.problem
    assert bool(read.problem) is bool(says)


def test_the_pods_read_beside_them_are_their_uids_or_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    pods_path = "/api/v1/namespaces/team-a/pods"
    fake = FakeApi({pods_path: {"items": [{"metadata": {"name": "p", "uid": "uid-p"}}, {"metadata": {}}]}})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    assert oc.pods(None, ["team-a"]) == PodsSeen(frozenset({"uid-p"}), frozenset({"team-a"}))  # type: ignore[arg-type]
    fake.failing = {pods_path: errors.Forbidden("pods is forbidden", status=403)}
    failed = oc.pods(None, ["team-a"])  # type: ignore[arg-type]
    assert "pods is forbidden" in failed.problem and not failed.covers("team-a")


# -- the admin report: claims holding devices with no consumer, for a while ------------------------------------

T0 = datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.timezone.utc)


def written(item: dict[str, Any], *times: tuple[str, str | None]) -> dict[str, Any]:
    """`item` with managedFields entries: (time, subresource) each."""
    out = copy.deepcopy(item)
    out["metadata"]["managedFields"] = [{"manager": "m", "operation": "Update", "time": t,
                                         **({"subresource": sub} if sub else {})} for t, sub in times]
    return out


def test_when_the_status_was_last_written_is_read_from_its_status_entries_only() -> None:
    item = written(raw(), ("2026-11-23T10:00:00Z", "status"), ("2026-11-23T11:00:00Z", None),
                   ("2026-11-23T10:30:00Z", "status"))
    assert oc.to_claim(item, "resource.k8s.io/v1").status_written == T0 - datetime.timedelta(hours=1, minutes=30)
    assert oc.to_claim(raw(), "resource.k8s.io/v1").status_written is None
    odd = written(raw(), ("yesterday", "status"))
    assert oc.to_claim(odd, "resource.k8s.io/v1").status_written is None


def test_only_claims_held_with_no_consumer_for_long_enough_are_lingering() -> None:
    hour = datetime.timedelta(hours=1)
    claims = (oc.to_claim(written(raw("old"), ("2026-11-23T10:00:00Z", "status")), "resource.k8s.io/v1"),
              oc.to_claim(written(raw("new"), ("2026-11-23T11:59:00Z", "status")), "resource.k8s.io/v1"),
              oc.to_claim(raw("unknown-time"), "resource.k8s.io/v1"),
              oc.to_claim(written(raw("used", reserved=[pod()]), ("2026-11-23T10:00:00Z", "status")),
                          "resource.k8s.io/v1"),
              oc.to_claim(written(raw("stale", reserved=[pod("gone", "uid-gone")]),
                                  ("2026-11-23T10:00:00Z", "status")), "resource.k8s.io/v1"))
    read = dc.ClaimsRead(claims, "v1", pods=PodsSeen(frozenset({"uid-pod"})))
    assert dc.lingering(read, T0, hour) == ()  # never on a first look: since when is not known
    seen = dc.seen_since(read, {}, T0 - 2 * hour)
    assert sorted(seen) == ["uid-new", "uid-old", "uid-stale", "uid-unknown-time"]
    read = dataclasses.replace(read, seen=dc.seen_since(read, seen, T0))  # the next cycle keeps the first sight
    assert [v.claim.ref.name for v in dc.lingering(read, T0, hour)] == ["old", "stale"]
    unread_pods = dataclasses.replace(read, pods=None)
    assert [v.claim.ref.name for v in dc.lingering(unread_pods, T0, hour)] == ["old"]
    # Seen so only lately (a reservation dropped, a pod gone a minute ago): not yet, whatever the status says.
    lately = dataclasses.replace(read, seen=dc.seen_since(read, {}, T0 - datetime.timedelta(minutes=1)))
    assert dc.lingering(lately, T0, hour) == ()
    assert dc.lingering(dc.ClaimsRead(claims, "v1", problem="forbidden"), T0, hour) == ()
    assert dc.lingering(None, T0, hour) == ()
    deleting = dc.ClaimsRead(tuple(dataclasses.replace(c, deleting=True) for c in claims), "v1")
    assert dc.lingering(deleting, T0, hour) == ()


def test_the_plan_reports_them_with_the_namespace_owner_and_what_frees_them() -> None:
    from janitor.decide.model import NamespaceView, Observation, SafetyLedger
    from janitor.decide.plan import PlanSettings, plan

    claim = oc.to_claim(written(raw("old"), ("2026-11-23T10:00:00Z", "status")), "resource.k8s.io/v1")
    read = dc.ClaimsRead((claim,), "v1")
    observed = Observation(T0, namespaces={"team-a": NamespaceView("team-a", annotations={
        "janitor/owner": "#team-a"})}, claims=dataclasses.replace(read, seen=dc.seen_since(
            read, {}, T0 - datetime.timedelta(hours=2))))
    report = plan(observed, (), SafetyLedger(), T0, settings=PlanSettings(claims_after=datetime.timedelta(hours=1)))
    [line] = dict(report.admin_report.sections)["Device claims held with no consumer"]
    assert line.startswith("ResourceClaim/team-a/old: allocated (") and "reserved for nobody" in line
    assert "unchanged since 2026-11-23 10:00Z; namespace owner #team-a (channel)" in line
    assert line.endswith("If nothing uses it: kubectl -n team-a delete resourceclaim old")
    assert f"claim:{claim.ref.uid}" in report.admin_report.ids
    later = plan(observed, (), SafetyLedger(), T0, settings=PlanSettings(claims_after=datetime.timedelta(hours=3)))
    assert "Device claims held with no consumer" not in dict(later.admin_report.sections)


# -- discovery kept between the daemon's cycles ---------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_cluster_without_dra_is_asked_again_only_every_few_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without DRA (before 1.32, or not enabled) a cycle spent two requests learning so, every cycle."""
    fake = FakeApi({}, {**NO_V1, DISCOVERY: errors.NotFound("not found", status=404)})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    clock = Clock()
    kept = oc.Discovery(clock=clock)
    first = oc.read(None, discovery=kept)  # type: ignore[arg-type]
    assert (first.served, first.problem, first.claims) == (False, "", ())
    assert [p for p, _ in fake.sent] == [ALL, DISCOVERY]
    clock.now += oc.DISCOVER_EVERY.total_seconds() - 1
    again = oc.read(None, discovery=kept)  # type: ignore[arg-type]
    assert (again.served, again.problem, again.claims) == (False, "", ())
    assert len(fake.sent) == 2, "no request while the answer is kept"
    clock.now += 1
    oc.read(None, discovery=kept)  # type: ignore[arg-type]
    assert [p for p, _ in fake.sent[2:]] == [ALL, DISCOVERY], "asked again once it is old"


def test_an_older_version_is_listed_at_once_while_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    beta = "/apis/resource.k8s.io/v1beta2/resourceclaims"
    fake = FakeApi({DISCOVERY: _group("v1beta2"), beta: {"items": [raw("a")]}}, NO_V1)
    monkeypatch.setattr(kubeapi, "request", fake.request)
    clock = Clock()
    kept = oc.Discovery(clock=clock)
    oc.read(None, discovery=kept)  # type: ignore[arg-type]
    assert [p for p, _ in fake.sent] == [ALL, DISCOVERY, beta]
    read = oc.read(None, discovery=kept)  # type: ignore[arg-type]
    assert [c.api_version for c in read.claims] == ["resource.k8s.io/v1beta2"]
    assert [p for p, _ in fake.sent[3:]] == [beta], "one request a cycle, as where v1 is served"


@pytest.mark.parametrize("failing", [
    pytest.param({**NO_V1, DISCOVERY: errors.Forbidden("no", status=403)}, id="discovery-forbidden"),
    pytest.param({**NO_V1, DISCOVERY: errors.KubeError("timed out")}, id="discovery-unanswered"),
    pytest.param({ALL: errors.KubeError("timed out")}, id="v1-unanswered"),
])
def test_a_failed_look_is_not_kept(monkeypatch: pytest.MonkeyPatch, failing: dict[str, errors.KubeError]) -> None:
    fake = FakeApi({}, failing)
    monkeypatch.setattr(kubeapi, "request", fake.request)
    kept = oc.Discovery(clock=Clock())
    sent = []
    for _ in range(2):
        read = oc.read(None, discovery=kept)  # type: ignore[arg-type]
        assert read.problem and read.claims == ()
        sent.append(len(fake.sent))
    assert sent[1] == 2 * sent[0], "the next cycle looks again"


def test_where_v1_is_served_nothing_is_kept_and_v1_is_listed_each_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi({ALL: {"items": [raw("a")]}})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    kept = oc.Discovery(clock=Clock())
    for _ in range(2):
        assert [c.ref.name for c in oc.read(None, discovery=kept).claims] == ["a"]  # type: ignore[arg-type]
    assert [p for p, _ in fake.sent] == [ALL, ALL]


def test_the_watch_cache_keeps_what_discovery_said_for_the_daemons_cycles() -> None:
    from janitor.observe.cache import ClusterCache
    from janitor.settings import Settings

    cache = ClusterCache(None, Settings())  # type: ignore[arg-type]
    assert isinstance(cache.claims_discovery, oc.Discovery)


def test_a_kept_version_no_longer_served_is_looked_for_again_v1_first(monkeypatch: pytest.MonkeyPatch) -> None:
    beta = "/apis/resource.k8s.io/v1beta2/resourceclaims"
    fake = FakeApi({DISCOVERY: _group("v1beta2"), beta: {"items": [raw("a")]}}, NO_V1)
    monkeypatch.setattr(kubeapi, "request", fake.request)
    kept = oc.Discovery(clock=Clock())
    oc.read(None, discovery=kept)  # type: ignore[arg-type]
    fake.failing = {beta: errors.NotFound("not found", status=404)}  # the cluster was upgraded to 1.34
    fake.answers[ALL] = {"items": [raw("a")]}
    read = oc.read(None, discovery=kept)  # type: ignore[arg-type]
    assert [c.api_version for c in read.claims] == [V1] and not read.problem
    assert [p for p, _ in fake.sent[3:]] == [beta, ALL]
