"""The paths by which the orphanedClaim trigger could delete a claim a careful admin would keep, or
break a promise to its owner, each a test (found by review; each failed before its fix)."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

from factories import NOW
from test_holder_notices import held
from test_node_gpu_holders import GONE, held_on
from test_orphaned_claim import (
    NS,
    V1,
    H,
    a_pod,
    claim_item,
    claim_policy,
    decided,
    due_notes,
    observed,
    verdicts,
)

from janitor import annotations as a
from janitor.act.slack_buttons import actions
from janitor.clicks import Clicks
from janitor.decide import claims as dc
from janitor.decide.clicks import ButtonValue
from janitor.decide.lifecycle import Step
from janitor.decide.model import State
from janitor.decide.plan import decide
from janitor.decide.reasons import Code
from janitor.observe import claims as oc
from janitor.policy import load
from janitor.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
D = datetime.timedelta(days=1)


def test_a_janitor_ttl_on_a_claim_deletes_nothing_where_claims_are_not_among_the_kinds() -> None:
    # The shipped policy file (shadow, matching nothing) is loaded; a claim in use carries janitor/ttl.
    policies, errors = load.from_text((ROOT / "policies/orphaned-claims.yaml").read_text(), file="o.yaml")
    assert not errors
    user = a_pod("trainer", uid="uid-live", claims=["gpu"])
    item = claim_item(reserved=[{"resource": "pods", "name": "trainer", "uid": "uid-live"}],
                      meta={"annotations": {"janitor/ttl": "1h"}})
    decision = decide(observed(item, pods=[user]), policies, NOW)
    assert not decision.due and not decision.reports, decision.due


def test_the_keep_button_on_a_claims_warning_keeps_it() -> None:
    decision = decided(observed(claim_item()))
    [mark] = decision.changes
    assert mark.step is Step.MARK and mark.notice is not None
    block = actions(mark.notice)
    assert block is not None
    value = ButtonValue.decode(block["elements"][0]["value"])
    assert value is not None and value.kind == "ResourceClaim"
    clicks = Clicks(None, None, Settings(), lambda: [claim_policy()], None, lambda: None)  # type: ignore[arg-type]
    assert clicks._kinds.get("ResourceClaim") == oc.CLAIMS  # the click reads and writes the claim it names


def _old_warning() -> dict[str, str]:
    old = NOW - 14 * D
    return due_notes("delete") | {
        a.DEADLINE: a.format_expires(old), a.MARKED_AT: a.format_expires(old - D),
        a.WARNED_AT: a.format_expires(old - D), a.WARNED_VIA: f"owner D0ALICE/{(old - D).timestamp():.6f}",
        a.WARNED_OF: f"delete {a.format_expires(old)}"}


def test_a_removed_policy_unmarks_its_claims_and_tells_the_owner() -> None:
    item = claim_item(meta={"annotations": _old_warning()})
    decision = decide(observed(item), [], NOW)  # the policy file deleted; claims still read for the report
    [change] = decision.changes
    assert change.step is Step.UNMARK and change.workload.kind == "ResourceClaim", change


def test_claims_read_only_for_the_pods_naming_them_leave_the_marks_of_a_removed_policy(monkeypatch: Any) -> None:
    """With --orphaned-claims-after 0 and no orphanedClaim policy, a cycle reads the claims only
    because a pod names one (its GPU may be held through it): their marks stay as they are, as with
    no claim read, and are removed by `janitor unmark`, never on whether some pod names a claim."""
    from test_claims_observe import ALL, FakeApi

    from janitor import kubeapi

    item = claim_item(meta={"annotations": _old_warning()})
    monkeypatch.setattr(kubeapi, "request", FakeApi({ALL: {"items": [item]}}).request)
    user = a_pod("other-job", claims=["other-nic"])
    for_pods = oc.for_cycle(None, None, datetime.timedelta(0), 250, [user])  # type: ignore[arg-type]
    assert for_pods is not None and [c.ref.name for c in for_pods.claims] == ["gpu"]
    decision = decide(dataclasses.replace(observed(), pods=(user,), claims=for_pods), [], NOW)
    assert not decision.changes, decision.changes
    reported = oc.for_cycle(None, None, datetime.timedelta(minutes=10), 250, [user])  # type: ignore[arg-type]
    decision = decide(dataclasses.replace(observed(), pods=(user,), claims=reported), [], NOW)
    assert [c.step for c in decision.changes] == [Step.UNMARK]


def test_time_the_claims_were_read_only_for_pods_does_not_count_for_a_policy_loaded_later(monkeypatch: Any) -> None:
    """A removed orphanedClaim policy's marks stay (an old warning, its deadline long past) while the
    claims are read only for the pods naming them: put back, the policy counts `after` again from
    its own first look, as where no claim was read, and deletes nothing at once."""
    from test_claims_observe import ALL, FakeApi

    from janitor import cycle, kubeapi

    item = claim_item(meta={"annotations": _old_warning()})
    monkeypatch.setattr(kubeapi, "request", FakeApi({ALL: {"items": [item]}}).request)
    other = a_pod("other-job", claims=["other-nic"])
    memory: dict[str, tuple[dc.State, datetime.datetime]] = {}
    for at in (NOW - 3 * H, NOW - 2 * H):
        read = oc.for_cycle(None, None, datetime.timedelta(0), 250, [other])  # type: ignore[arg-type]
        assert read is not None and read.for_pods
        memory = cycle.claims_memory(dataclasses.replace(observed(), at=at, pods=(other,), claims=read), memory, at)
    assert memory == {}
    read = oc.for_cycle(None, None, datetime.timedelta(0), 250, [other], judged=True)  # type: ignore[arg-type]
    assert read is not None and not read.for_pods
    seen = dataclasses.replace(observed(), pods=(other,), claims=read)
    memory = cycle.claims_memory(seen, memory, NOW)
    decision = decide(dataclasses.replace(seen, claims=dataclasses.replace(read, seen=memory)), [claim_policy(after=H)],
                      NOW)
    assert not decision.due and all(c.step is not Step.ACT for c in decision.changes), decision.due


def test_claims_not_read_at_all_forget_since_when_they_were_held() -> None:
    # With --orphaned-claims-after 0 and no orphanedClaim policy, claims are not read: whatever the
    # memory said, a policy loaded later counts `after` again from its own first look.
    before = {"uid-gpu": (dc.State.ORPHANED, NOW - 14 * D)}
    assert dc.seen_since(None, before, NOW) == {}
    failed = dc.ClaimsRead(problem="ResourceClaims could not be listed (timeout)")
    assert dc.seen_since(failed, before, NOW) == {}  # a failed read saw nothing: time unseen never counts


def test_a_stale_or_unproven_agent_report_of_a_holder_still_keeps_the_claim() -> None:
    item = claim_item(meta={"annotations": due_notes("delete")}, reserved=[{"resource": "pods", "name": "t",
                                                                            "uid": GONE}])
    stale = held_on("gpu-7", held(GONE, namespace=NS), scanned=NOW - 30 * datetime.timedelta(minutes=1))
    unproven = held_on("gpu-7", held(GONE, namespace=NS), run=False)
    for report in (stale, unproven):
        decision = decided(observed(item, nodes=[report]))
        [(state, reason)] = verdicts(decision).values()
        assert state is State.UNKNOWN and "still holds a GPU" in str(reason), reason
        assert not decision.due


def test_the_grace_does_not_count_time_a_pod_named_it() -> None:
    item = claim_item(written_at=NOW - 5 * H)
    waiting = a_pod("next-run", phase="Pending", claims=["gpu"])
    claim = oc.to_claim(item, V1)
    read = dc.ClaimsRead((claim,), "v1", pods=dc.PodsSeen(frozenset({waiting.ref.uid})))
    kept = dc.seen_since(read, {claim.ref.uid: (dc.State.ORPHANED, NOW - 3 * H)}, NOW,
                         named=frozenset({(NS, "gpu")}))
    assert claim.ref.uid not in kept  # in use by a pod: not held with no consumer, the count starts again
    decision = decided(observed(item, pods=[], seen_for=None))  # the pod gone since the last cycle
    [(state, _)] = verdicts(decision).values()
    assert state is State.TOO_YOUNG


def test_a_claim_another_object_owns_without_controlling_it_is_left_to_that_owner() -> None:
    owner: dict[str, Any] = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u-js",
                             "blockOwnerDeletion": True}
    item = claim_item(meta={"ownerReferences": [owner], "annotations": due_notes("delete")})
    decision = decided(observed(item))
    [(state, reason)] = verdicts(decision).values()
    assert state is State.UNKNOWN and reason.code is Code.CLAIM_UNSURE and "JobSet js" in str(reason), reason
    assert not decision.due


# -- a second review's paths ---------------------------------------------------------------------------

def test_janitor_unmark_removes_the_marks_on_claims(monkeypatch: Any) -> None:
    from janitor import unmark as um
    from janitor.observe import observation

    item = claim_item(meta={"annotations": due_notes("delete")})
    monkeypatch.setattr(observation, "read", lambda *_a, **_k: observed())
    monkeypatch.setattr(oc, "read", lambda *_a, **_k: dc.ClaimsRead((oc.to_claim(item, V1),), "v1"))
    written: list[Any] = []
    monkeypatch.setattr(um.kube, "annotate", lambda *args, **kw: written.append((args, kw)))
    monkeypatch.setattr(um, "_drop_done_notes", lambda *args: None)
    done = um.unmark(None, Settings(), policy="orphaned-claims")  # type: ignore[arg-type]
    assert [(u.ref, u.result) for u in done] == [(f"ResourceClaim/{NS}/gpu", "removed")]
    [(args, kw)] = written
    assert kw["kind"] == oc.CLAIMS and a.DEADLINE in args[3] and args[3][a.DEADLINE] is None


def test_time_the_pods_were_not_seen_does_not_count() -> None:
    from janitor.cycle import claims_memory
    from janitor.decide.model import SkipCause, SkippedKind

    item = claim_item(written_at=NOW - 10 * H)
    before = {"uid-gpu": (dc.State.ORPHANED, NOW - 5 * H)}
    blind = dataclasses.replace(observed(item, pods_read=False),
                                skipped_kinds=(SkippedKind("Pod", "forbidden", SkipCause.FORBIDDEN),))
    assert claims_memory(blind, before, NOW) == {}  # a Pending pod may have named it all along
    assert claims_memory(observed(item), before, NOW) == before  # seen: the count goes on
    failed = dc.ClaimsRead(problem="ResourceClaims could not be listed (timeout)")
    assert dc.seen_since(failed, before, NOW) == {}


def test_a_replica_that_leads_again_or_a_cycle_that_failed_starts_the_count_again() -> None:
    from janitor import daemon, heap
    from janitor.cycle import Memory

    class Follower:
        def is_leader(self) -> bool:
            return False

    class Gauge:
        def set(self, _: int) -> None: ...

    cycles = daemon._Cycles.__new__(daemon._Cycles)
    cycles.elector = Follower()  # type: ignore[assignment]
    cycles.telemetry = type("T", (), {"leader": Gauge()})()  # type: ignore[assignment]
    cycles.memory = Memory(claims_seen={"uid-gpu": (dc.State.ORPHANED, NOW - 5 * H)})
    cycles.ready = False
    cycles.heap = heap.Heap()
    cycles.job()
    assert cycles.memory.claims_seen == {}


def test_a_holder_whose_pod_the_agent_never_saw_listed_keeps_a_claim_reserved_for_nobody() -> None:
    item = claim_item(meta={"annotations": due_notes("delete")})
    unnamed = held_on("gpu-node-1", held(GONE, namespace="", name=""))
    decision = decided(observed(item, nodes=[unnamed]))
    [(state, reason)] = verdicts(decision).values()
    assert state is State.UNKNOWN and "still holds a GPU" in str(reason) and not decision.due
    elsewhere = held_on("gpu-node-1", held(GONE, namespace="team-b"))
    assert [s for s, _ in verdicts(decided(observed(item, nodes=[elsewhere]))).values()] == [State.FIRES]


def test_the_watch_cache_path_reads_claims_for_a_policy_even_with_the_report_off(monkeypatch: Any) -> None:
    # --orphaned-claims-after 0 turns the admin report's section off; an orphanedClaim policy still
    # judges claims, so the cycle from the watch cache reads them (and never lists them as objects).
    from test_claims_observe import DISCOVERY, FakeApi, _group
    from test_claims_report_paths import StubCache

    from janitor import kubeapi
    from janitor.decide.model import NamespaceView
    from janitor.observe import observation
    from janitor.observe.cache import Snapshot

    fake = FakeApi({DISCOVERY: _group("v1"), "/apis/resource.k8s.io/v1/resourceclaims": {"items": [claim_item()]}})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    snap = Snapshot(objects=(), pods=(), namespaces={NS: NamespaceView(NS)}, nodes=(), oom={}, skipped=())
    off = dataclasses.replace(Settings(), cluster=dataclasses.replace(Settings().cluster,
                                                                      claims_after=datetime.timedelta(0)))
    seen = observation.read_cached(StubCache(snap), off, [claim_policy()], NOW, NOW)  # type: ignore[arg-type]
    assert seen.claims is not None and [c.ref.name for c in seen.claims.claims] == ["gpu"]
    assert seen.objects == ()
    nothing = observation.read_cached(StubCache(snap), off, [], NOW, NOW)  # type: ignore[arg-type]
    assert nothing.claims is None
