"""What the re-check right before acting reads, against what a cycle reads on the same cluster:
the re-check reads one object's namespace, but what holds an action may be said elsewhere.

Covered: a sign that nodes can be added (an autoscaler's Events on pods in any namespace the
janitor reads) holds a pod that fits no node as waiting, in the cycle and in the re-check (which
takes the signs beyond its namespace from what the daemon knows now, and reads its own namespace's
Events only)."""

from __future__ import annotations

import datetime
import email.utils
import functools
import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from factories import NOW

from janitor import annotations as a
from janitor import errors, kubeapi
from janitor.decide import recheck
from janitor.decide.autoscaling import Autoscaling
from janitor.decide.model import SafetyLedger
from janitor.observe import observation, scoped
from janitor.policy.model import Lifecycle, Match, Mode, Namespaces, Pending, Policy
from janitor.settings import ClusterSettings, Settings

M = datetime.timedelta(minutes=1)
H = 60 * M
POLICY = Policy("stuck", (Pending(after=24 * H),), match=Match(namespaces=Namespaces(("*",))), mode=Mode.ENFORCE,
                lifecycle=Lifecycle(warn_before=H))


def stamp(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def cluster(scale_up_elsewhere: bool) -> dict[str, Any]:
    warned, deadline = NOW - 2 * H, NOW - H
    notes = {a.POLICY: "stuck", a.DEADLINE: a.format_expires(deadline), a.MARKED_AT: a.format_expires(warned),
             a.REASON: "stuck", a.MARKED_UID: "uid-train", a.WARNED_AT: a.format_expires(warned),
             a.WARNED_VIA: f"owner D0ALICE/{warned.timestamp():.6f}",
             a.WARNED_OF: f"delete {a.format_expires(deadline)}", "janitor/owner": "alice@lab.example"}
    sel = {"batch.kubernetes.io/controller-uid": "uid-train"}
    job = {"metadata": {"name": "train", "namespace": "team-a", "uid": "uid-train", "resourceVersion": "7",
                        "creationTimestamp": stamp(NOW - 4 * H), "annotations": notes,
                        "managedFields": [{"manager": sorted(a.FIELD_MANAGERS)[0], "fieldsV1": {"f:metadata": {
                            "f:annotations": {f"f:{k}": {} for k in notes}}}}]},
           "spec": {"selector": {"matchLabels": sel}}}
    pod = {"metadata": {"name": "train-a", "namespace": "team-a", "uid": "uid-pod", "resourceVersion": "8",
                        "creationTimestamp": stamp(NOW - 3 * H), "labels": sel,
                        "ownerReferences": [{"kind": "Job", "apiVersion": "batch/v1", "name": "train",
                                             "uid": "uid-train", "controller": True}]},
           "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Pending", "conditions": [{
               "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
               "lastTransitionTime": stamp(NOW - 3 * H)}]}}
    node = {"metadata": {"name": "cpu-node-1", "labels": {"kubernetes.io/hostname": "cpu-node-1"}},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi"}, "capacity": {"cpu": "32", "memory": "128Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    events = [{"metadata": {"name": "other.1", "namespace": "team-b", "creationTimestamp": stamp(NOW - M)},
               "involvedObject": {"kind": "Pod", "uid": "uid-other", "namespace": "team-b", "name": "other"},
               "source": {"component": "cluster-autoscaler"}, "reason": "TriggeredScaleUp",
               "message": "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]",
               "firstTimestamp": stamp(NOW - M), "lastTimestamp": stamp(NOW - M)}] if scale_up_elsewhere else []
    return {"job": job, "pod": pod, "node": node, "events": events,
            "namespaces": [{"metadata": {"name": n, "uid": f"uid-{n}", "resourceVersion": "1",
                                         "creationTimestamp": stamp(NOW - 100 * H)}} for n in ("team-a", "team-b")]}


class FakeApi:
    """The apiserver as `kubeapi.request` sees it, for this one cluster."""

    def __init__(self, world: dict[str, Any]) -> None:
        self.world = world

    def request(self, api: object, method: str, path: str, *, query: Any = (), doing: str = "", **_: Any
                ) -> SimpleNamespace:
        q = dict(query)
        w = self.world
        body: Any
        if path.endswith("/events"):
            ns = path.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in path else None
            source = q.get("fieldSelector", "")
            body = {"items": [e for e in w["events"] if (ns is None or e["metadata"]["namespace"] == ns)
                              and f"source={e['source']['component']}," in source + ","]}
        elif path == "/apis/batch/v1/namespaces/team-a/jobs/train":
            body = w["job"]
        elif path in ("/apis/batch/v1/jobs", "/apis/batch/v1/namespaces/team-a/jobs"):
            body = {"items": [w["job"]]}
        elif path in ("/api/v1/pods", "/api/v1/namespaces/team-a/pods"):
            body = {"items": [w["pod"]]}
        elif path == "/api/v1/namespaces/team-a/pods/train-a":
            body = w["pod"]
        elif path == "/api/v1/namespaces":
            body = {"items": w["namespaces"]}
        elif path.startswith("/api/v1/namespaces/") and path.count("/") == 4:
            body = next(n for n in w["namespaces"] if n["metadata"]["name"] == path.rsplit("/", 1)[1])
        elif path == "/api/v1/nodes":
            body = {"items": [w["node"]]}
        elif path.rsplit("/", 1)[-1] in ("deployments", "statefulsets", "daemonsets", "replicasets", "cronjobs",
                                          "configmaps", "services", "persistentvolumeclaims", "notebooks", "jobs",
                                          "pods"):
            body = {"items": []}
        else:  # the probe (status ConfigMap, karpenter.sh), Kueue and DRA discovery: not here
            raise errors.NotFound("not found", status=404, doing=doing)
        return SimpleNamespace(data=json.dumps(body).encode(), status=200,
                               headers={"Date": email.utils.format_datetime(NOW, usegmt=True)})


def test_an_autoscaler_sign_in_another_namespace_holds_the_recheck_as_it_holds_the_cycle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With no cluster-autoscaler status ConfigMap and no Karpenter API (the probe finds nothing),
    cluster-autoscaler triggered a scale-up for a pod of team-b since the cycle decided to delete a
    Job of team-a whose pod fits no node: nodes can be added, the pod waits (3 h, under its policy's
    24 h). The re-check reads team-a's Events; the sign from team-b comes from what the daemon
    knows beyond it (`elsewhere`: its watch cache, kept live), and the delete is not confirmed."""
    settings = Settings()
    fake = FakeApi(cluster(scale_up_elsewhere=False))
    monkeypatch.setattr(kubeapi, "request", fake.request)
    before = observation.read(None, settings, [POLICY], NOW)  # type: ignore[arg-type]
    [act] = [x for x in recheck_plan(before).actions if x.target.uid == "uid-train"]
    fake.world = cluster(scale_up_elsewhere=True)
    cycle_now = observation.read(None, settings, [POLICY], NOW)  # type: ignore[arg-type]
    assert not [x for x in recheck_plan(cycle_now).actions if x.target.uid == "uid-train"], \
        "the cycle on the fresh data holds (the pod waits for a node, 3 h < after 24 h)"
    fresh = scoped.read_scoped(None, settings, [POLICY], act, NOW,  # type: ignore[arg-type]
                               elsewhere=lambda: cycle_now.autoscaling)
    assert fresh is not None and fresh.autoscaling.present
    again = recheck.still_due(act, fresh, [POLICY], NOW, settings.plan())
    assert again.action is None, f"re-check confirmed the delete: {again.why}"
    # Nothing anywhere says nodes can be added: the delete the cycle decided stands.
    fake.world = cluster(scale_up_elsewhere=False)
    fresh = scoped.read_scoped(None, settings, [POLICY], act, NOW,  # type: ignore[arg-type]
                               elsewhere=lambda: Autoscaling())
    assert fresh is not None and recheck.still_due(act, fresh, [POLICY], NOW, settings.plan()).action is not None


def test_a_recheck_reads_the_events_of_its_own_namespace_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under --namespaces with 300 names, a re-check lists the autoscalers' Events in its target's
    namespace (one list per autoscaler), not in each of the 300: with dozens of actions a cycle it
    would pass its budget."""
    names = ("team-a", "team-b", *(f"lab-{i:03}" for i in range(298)))
    settings = Settings(cluster=replace(ClusterSettings(), namespaces=names))
    fake = FakeApi(cluster(scale_up_elsewhere=False))
    calls: list[str] = []

    def counted(api: object, method: str, path: str, **kw: Any) -> SimpleNamespace:
        calls.append(path)
        return fake.request(api, method, path, **kw)

    monkeypatch.setattr(kubeapi, "request", counted)
    [act] = [x for x in recheck_plan(observation.read(None, settings, [POLICY], NOW)).actions  # type: ignore[arg-type]
             if x.target.uid == "uid-train"]
    calls.clear()
    assert scoped.read_scoped(None, settings, [POLICY], act, NOW) is not None  # type: ignore[arg-type]
    assert [c for c in calls if c.endswith("/events")] == ["/api/v1/namespaces/team-a/events"] * 2, calls


def _beyond(monkeypatch: pytest.MonkeyPatch, cache: Any) -> tuple[FakeApi, Any, Any]:
    """A cycle that decided to delete team-a's Job, then a scale-up for a pod of team-b; what the
    daemon's re-checks take from beyond team-a (`fresh_look.Beyond`), with `cache` as its cache."""
    from janitor.fresh_look import Beyond

    fake = FakeApi(cluster(scale_up_elsewhere=False))
    monkeypatch.setattr(kubeapi, "request", fake.request)
    before = observation.read(None, Settings(), [POLICY], NOW)  # type: ignore[arg-type]
    [act] = [x for x in recheck_plan(before).actions if x.target.uid == "uid-train"]
    fake.world = cluster(scale_up_elsewhere=True)
    planned = SimpleNamespace(observation=before, policies=(POLICY,))
    ports = SimpleNamespace(api=None, cache=cache, clock=lambda: CLOCK[0])
    return fake, act, Beyond(ports, Settings(), planned)  # type: ignore[arg-type]


CLOCK = [NOW]  # the daemon's clock, as the re-checks of one cycle read it


def test_without_a_watch_cache_the_rechecks_read_the_other_namespaces_once_a_cycle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a watch cache (`--once`, `--no-watch-cache`), the signs beyond the re-check's
    namespace are read fresh (not the cycle's read, made before the scale-up), once for all the
    re-checks of that cycle."""
    fake, act, beyond = _beyond(monkeypatch, None)
    sent: list[str] = []
    monkeypatch.setattr(kubeapi, "request", lambda api, method, path, **kw: (sent.append(path),
                                                                           fake.request(api, method, path, **kw))[1])
    for _ in range(3):
        fresh = scoped.read_scoped(None, Settings(), [POLICY], act, NOW, elsewhere=beyond)  # type: ignore[arg-type]
        assert fresh is not None and recheck.still_due(act, fresh, [POLICY], NOW, Settings().plan()).action is None
    assert len([p for p in sent if p == "/api/v1/events"]) == 2  # one list per autoscaler, all namespaces, once


def test_without_a_watch_cache_that_read_is_made_again_after_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle's actions may take minutes: a scale-up for a pod of team-b after the first re-check's
    read is seen by a re-check a minute later."""
    fake, act, beyond = _beyond(monkeypatch, None)
    fake.world = cluster(scale_up_elsewhere=False)
    CLOCK[0] = NOW
    first = scoped.read_scoped(None, Settings(), [POLICY], act, NOW, elsewhere=beyond)  # type: ignore[arg-type]
    assert first is not None and recheck.still_due(act, first, [POLICY], NOW, Settings().plan()).action is not None
    fake.world = cluster(scale_up_elsewhere=True)
    CLOCK[0] = NOW + M
    later = scoped.read_scoped(None, Settings(), [POLICY], act, NOW + M, elsewhere=beyond)  # type: ignore[arg-type]
    assert later is not None and recheck.still_due(act, later, [POLICY], NOW + M, Settings().plan()).action is None
    CLOCK[0] = NOW


def test_nothing_is_read_beyond_a_namespace_where_nothing_there_could_add_a_sign(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With --node-autoscaling present (or none), or a sign in the re-check's own read, what other
    namespaces say changes nothing: they are not read."""
    from janitor.decide.autoscaling import NodeAutoscaling

    names = ("team-a", "team-b", *(f"lab-{i:03}" for i in range(298)))
    asked: list[NodeAutoscaling] = []
    for mode in (NodeAutoscaling.PRESENT, NodeAutoscaling.NONE):
        settings = Settings(cluster=replace(ClusterSettings(), namespaces=names, node_autoscaling=mode))
        _, act, _ = _beyond(monkeypatch, None)
        scoped.read_scoped(None, settings, [POLICY], act, NOW,  # type: ignore[arg-type]
                           elsewhere=functools.partial(lambda m: (asked.append(m), Autoscaling())[1], mode))
    assert not asked


def test_an_autoscalers_events_watch_not_synced_now_holds_the_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's watch of those Events lists again (after a 410) or its request failed: what
    they say is not known now, which is a sign that nodes can be added, as a refused list is."""
    from test_observe_autoscalers import _Watch

    from janitor.observe.cache import ClusterCache
    from janitor.observe.kind_status import KindStatus, State

    for state, error in ((State.LISTING, ""), (State.RETRYING, "the apiserver did not answer the watch within 10s")):
        cache = ClusterCache(object(), Settings(cluster=ClusterSettings(kinds=())))  # type: ignore[arg-type]
        watches = {k: _Watch(k, []) for k in ("Event:cluster-autoscaler", "Event:karpenter")}
        watches["Event:cluster-autoscaler"]._status = KindStatus("Event:cluster-autoscaler", state, False, 0, 1, 1, 0,
                                                                 1, 0, error)
        cache._watches.update(watches)  # type: ignore[arg-type]
        cache._groups.update({k: [k] for k in watches})
        cache.probe.found = lambda: Autoscaling()  # type: ignore[method-assign]
        _, act, beyond = _beyond(monkeypatch, cache)
        fresh = scoped.read_scoped(None, Settings(), [POLICY], act, NOW, elsewhere=beyond)  # type: ignore[arg-type]
        assert fresh is not None and recheck.still_due(act, fresh, [POLICY], NOW, Settings().plan()).action is None


def recheck_plan(seen: observation.Observation) -> Any:
    from janitor.decide.plan import plan
    return plan(seen, [POLICY], SafetyLedger(), NOW, settings=Settings().plan())
