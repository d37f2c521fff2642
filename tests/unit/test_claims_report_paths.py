"""The paths by which the DRA claims section could tell an admin to delete a claim in use, each a test."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from test_claims_observe import DISCOVERY, FakeApi, _group, pod, raw, written
from test_reserved_quota import quota_policy

from janitor import kubeapi
from janitor.decide.model import NamespaceView, SafetyLedger, SkipCause, SkippedKind
from janitor.decide.plan import plan
from janitor.observe import claims, observation
from janitor.observe.cache import Snapshot
from janitor.settings import Settings

T0 = datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.timezone.utc)
SECTION = "Device claims held with no consumer"


class StubCache:
    """A ClusterCache whose Pod watch RBAC refused (403): the snapshot says so in `skipped`."""

    def __init__(self, snap: Snapshot) -> None:
        self.api, self.snap = None, snap
        self.claims_discovery = claims.Discovery()

    def ensure(self, **_: Any) -> None:
        pass

    def wait(self, seconds: float) -> bool:
        return True

    def snapshot(self) -> Snapshot:
        return self.snap


def test_pods_unreadable_in_the_watch_cache_do_not_make_every_claim_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    # A GPU pod runs and holds its claim (reserved for it since 10:00); the janitor's Pod watch got a 403.
    claim = written(raw("train-0-gpu", reserved=[pod("train-0", "uid-running")]), ("2026-11-23T10:00:00Z", "status"))
    fake = FakeApi({DISCOVERY: _group("v1"), "/apis/resource.k8s.io/v1/resourceclaims": {"items": [claim]}})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    snap = Snapshot(objects=(), pods=(), namespaces={"ml": NamespaceView("ml"), "team-a": NamespaceView("team-a")},
                    nodes=(), oom={}, skipped=(SkippedKind("Pod", "pods is forbidden", SkipCause.FORBIDDEN),))
    seen = observation.read_cached(StubCache(snap), Settings(), [quota_policy()], T0, T0)  # type: ignore[arg-type]
    report = plan(seen, [quota_policy()], SafetyLedger(), T0, settings=Settings().plan()).admin_report
    sections = dict(report.sections)
    assert "No sight, no change" in sections  # the janitor knows it cannot see pods...
    lines = sections.get(SECTION, ())
    assert not lines, f"...and still tells the admin to delete a claim its running pod holds: {lines}"


def test_a_claim_whose_gone_pod_still_holds_its_gpu_is_not_offered_for_deletion() -> None:
    # Pod ml/train-7f9 was force-deleted; its process still holds GPU minor 3 (the node agent proves it,
    # and the same report lists it). The claim's stale reservation for that pod is what keeps the
    # scheduler from handing the device to the next pod; the report says "delete it" all the same.
    from test_holder_notices import held
    from test_node_gpu_holders import GONE, held_on

    from janitor.decide import claims as dc
    from janitor.decide.claims import PodsSeen
    from janitor.decide.model import Observation
    from janitor.observe import claims as oc
    from janitor.observe import views

    claim = oc.to_claim(written(raw("train-7f9-gpu", namespace="ml", reserved=[pod("train-7f9", GONE)]),
                                ("2026-11-23T10:00:00Z", "status")), "resource.k8s.io/v1")
    seen = Observation(T0, namespaces={"ml": NamespaceView("ml")},
                       nodes=(views.node_info(held_on("gpu-7", held(GONE))),),
                       claims=dc.ClaimsRead((claim,), "v1", pods=PodsSeen(frozenset({"uid-other"}))))
    report = dict(plan(seen, [], SafetyLedger(), T0).admin_report.sections)
    assert any(GONE in line or "train-7f9" in line for line in report.get("GPUs held by processes of deleted pods", ()))
    lines = report.get(SECTION, ())
    assert not any("delete resourceclaim train-7f9-gpu" in line for line in lines), lines


def test_the_grace_counts_from_when_the_consumer_went_not_from_the_last_status_write() -> None:
    # 11:59 its pod runs (IN_USE). 12:00 the pod object is gone and the resourceclaim controller has not
    # yet dropped the reservation (it does within moments, or after a kube-controller-manager failover).
    # --orphaned-claims-after 10m is meant to cover "a deallocation on its way takes seconds", but the
    # clock it reads is the reservation's write at 02:00, so the claim is listed, with "delete", at once.
    from janitor.decide import claims as dc
    from janitor.decide.claims import PodsSeen
    from janitor.observe import claims as oc

    claim = oc.to_claim(written(raw("shared-gpu", reserved=[pod("infer-0", "uid-infer-0")]),
                                ("2026-11-23T02:00:00Z", "status")), "resource.k8s.io/v1")
    ten = datetime.timedelta(minutes=10)
    minute = datetime.timedelta(minutes=1)
    before = dc.ClaimsRead((claim,), "v1", pods=PodsSeen(frozenset({"uid-infer-0"})))
    assert dc.lingering(before, T0 - minute, ten) == ()
    now = dc.ClaimsRead((claim,), "v1", pods=PodsSeen(frozenset()))
    listed = dc.lingering(now, T0, ten)
    assert listed == (), f"listed {[v.words for v in listed]} a minute after its consumer was seen alive"


def test_a_claim_a_waiting_pod_names_is_not_listed() -> None:
    # A pod Pending that names a claim allocated and reserved for nobody (its scheduling cycle under
    # way, or retried): the claim is about to be used, and the report must not say "delete" on it.
    from test_orphaned_claim import a_pod

    from janitor.decide import claims as dc
    from janitor.decide.model import Observation
    from janitor.observe import claims as oc

    claim = oc.to_claim(written(raw("gpu", namespace="team-a"), ("2026-11-23T02:00:00Z", "status")),
                        "resource.k8s.io/v1")
    waiting = a_pod("next", phase="Pending", claims=["gpu"])
    seen: dict[str, tuple[dc.State, datetime.datetime]] = {}
    for minutes in (30, 20, 10, 0):  # cycle after cycle, the daemon's memory as cycle.py keeps it
        read = dc.ClaimsRead((claim,), "v1", pods=dc.PodsSeen(frozenset({waiting.ref.uid})))
        seen = dc.seen_since(read, seen, T0 - datetime.timedelta(minutes=minutes), named=dc.named_by([waiting]))
    observed = Observation(T0, pods=(waiting,), namespaces={"team-a": NamespaceView("team-a")},
                           claims=dc.ClaimsRead((claim,), "v1", pods=dc.PodsSeen(frozenset({waiting.ref.uid})),
                                                seen=seen))
    assert SECTION not in dict(plan(observed, [], SafetyLedger(), T0).admin_report.sections)
    assert dc.named_by([waiting]) == {("team-a", "gpu")}
    assert dc.named_by([a_pod("done", phase="Succeeded", claims=["gpu"])]) == set()
