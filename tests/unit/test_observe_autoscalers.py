"""Node autoscalers' Events on pods, read once into what they say (janitor.observe.autoscalers).

Aspects covered:
- cluster-autoscaler's words as it writes them: a scale-up triggered (one group, several), no
  scale-up with only predicate reasons (never, whatever the order of its reasons, in the older
  "(it wouldn't fit if a new node is added)" form, after client-go combined similar Events), with a
  limit (max node group size, max total nodes, quota), with a passing reason (backoff, not ready,
  all-or-nothing, expander), with reasons not understood or none at all;
- Karpenter's words: a node nominated, failing for requirements, resources, taints or DRA (never,
  with or without one error per NodePool), NodePool limits, offerings and minValues (with its
  typographic apostrophes), errors not understood, words without the fixed part;
- only the autoscalers' reasons on pods count (the scheduler's FailedScheduling, Karpenter's other
  Events, Events on other objects are no word about a node for the pod);
- Events fold into the newest of each kind per pod, with since when the same was said, times read
  from core/v1 and events.k8s.io fields;
- the signs that nodes can be added, by the admin's word, the probes and the Events;
- the probes: a ConfigMap or API group not found is no sign, one that cannot be read is one.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from janitor import errors
from janitor.decide.autoscaling import Autoscaling, NodeAutoscaling, Said
from janitor.observe import autoscalers
from janitor.observe.autoscalers import CLUSTER_AUTOSCALER as CA
from janitor.observe.autoscalers import KARPENTER

UTC = datetime.timezone.utc
PREDICATES = ("1 Insufficient nvidia.com/gpu", "2 node(s) didn't match Pod's node affinity/selector",
              "1 node(s) had untolerated taint {nvidia.com/gpu: present}")


@pytest.mark.parametrize(("message", "said", "targets"), [
    pytest.param("pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]", Said.COMING, ("gpu-pool 0->1 (max: 4)",),
                 id="one-group"),
    pytest.param("pod triggered scale-up: [{eks-gpu-a 0->1 (max: 4)} {eks-gpu-b 0->2 (max: 8)}]", Said.COMING,
                 ("eks-gpu-a 0->1 (max: 4)", "eks-gpu-b 0->2 (max: 8)"), id="two-groups"),
])
def test_cluster_autoscaler_triggering_a_scale_up(message: str, said: Said, targets: tuple[str, ...]) -> None:
    assert autoscalers.classify(CA, "TriggeredScaleUp", message) == (said, message.split(": ", 1)[1], targets)


@pytest.mark.parametrize(("message", "said"), [
    pytest.param("pod didn't trigger scale-up: " + ", ".join(PREDICATES), Said.NEVER, id="predicates"),
    pytest.param("pod didn't trigger scale-up: " + ", ".join(reversed(PREDICATES)), Said.NEVER,
                 id="predicates-another-order"),
    pytest.param("pod didn't trigger scale-up (it wouldn't fit if a new node is added): 1 node(s) didn't match "
                 "Pod's node affinity/selector", Said.NEVER, id="older-form"),
    pytest.param("(combined from similar events): pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu",
                 Said.NEVER, id="combined-by-client-go"),
    pytest.param("pod didn't trigger scale-up: 1 node(s) had untolerated taint(s), 3 max node group size reached",
                 Said.LIMITED, id="taint-and-max-size"),
    pytest.param("pod didn't trigger scale-up: 3 max node group size reached, 1 node(s) had untolerated taint(s)",
                 Said.LIMITED, id="max-size-and-taint"),
    pytest.param("pod didn't trigger scale-up (it wouldn't fit if a new node is added): 2 max node group size "
                 "reached", Said.LIMITED, id="older-form-at-max"),
    pytest.param("pod didn't trigger scale-up: max total nodes in cluster reached", Said.LIMITED, id="max-total"),
    pytest.param('pod didn\'t trigger scale-up: 1 exceeded quota: "gpu-quota", resources: nvidia.com/gpu, cpu, '
                 "1 Insufficient cpu", Said.LIMITED, id="quota"),
    pytest.param("pod didn't trigger scale-up: 1 in backoff after failed scale-up, 2 node(s) didn't match Pod's "
                 "node affinity/selector", Said.NOT_NOW, id="backoff-beside-predicates"),
    pytest.param("pod didn't trigger scale-up: 2 not ready for scale-up", Said.NOT_NOW, id="not-ready"),
    pytest.param("pod didn't trigger scale-up: 1 not all pods would fit and scale-up is using all-or-nothing "
                 "strategy", Said.NOT_NOW, id="all-or-nothing"),
    pytest.param("pod didn't trigger scale-up: 1 expansion options filtered out and no longer considered",
                 Said.NOT_NOW, id="expander"),
    pytest.param("pod didn't trigger scale-up: 1 node(s) didn't match pod topology spread constraints, "
                 "1 Insufficient nvidia.com/gpu", Said.UNKNOWN, id="a-predicate-not-for-good"),
    pytest.param("pod didn't trigger scale-up:", Said.UNKNOWN, id="no-group-considered"),
    pytest.param("pod didn't trigger scale-up (it wouldn't fit if a new node is added)", Said.UNKNOWN,
                 id="older-form-without-reasons"),
    pytest.param("something else entirely", Said.UNKNOWN, id="other-words"),
])
def test_cluster_autoscaler_not_triggering_a_scale_up(message: str, said: Said) -> None:
    found = autoscalers.classify(CA, "NotTriggerScaleUp", message)
    assert found is not None and found[0] is said, found


KARPENTER_REQUIREMENTS = ("incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In "
                          "[no-such-pool] not in karpenter.sh/nodepool In [standard]")
KARPENTER_RESOURCES = ('no instance type has enough resources, requirements=karpenter.sh/capacity-type In '
                       '[on-demand], karpenter.sh/nodepool In [gpu], resources={"cpu":"4","nvidia.com/gpu":"16",'
                       '"pods":"1"}')


@pytest.mark.parametrize(("message", "said"), [
    pytest.param(f"Failed to schedule pod, {KARPENTER_REQUIREMENTS}", Said.NEVER, id="requirements"),
    pytest.param(f"Failed to schedule pod, {KARPENTER_RESOURCES}", Said.NEVER, id="resources"),
    pytest.param(f'Failed to schedule pod, incompatible with nodepool "gpu", daemonset overhead={{"cpu":"200m"}}, '
                 f'{KARPENTER_RESOURCES}; incompatible with nodepool "default", daemonset overhead={{"cpu":"200m"}}, '
                 "did not tolerate taint (taint=nvidia.com/gpu=present:NoSchedule)", Said.NEVER, id="per-nodepool"),
    pytest.param("Failed to schedule pod, pod has Dynamic Resource Allocation requirements that are not yet "
                 "supported by Karpenter", Said.NEVER, id="dra"),
    pytest.param('Failed to schedule pod, all available instance types exceed limits for nodepool: "gpu"',
                 Said.LIMITED, id="limits"),
    pytest.param(f'Failed to schedule pod, incompatible with nodepool "cpu", daemonset overhead={{}}, '
                 f'{KARPENTER_REQUIREMENTS}; all available instance types exceed limits for nodepool: "gpu"',
                 Said.LIMITED, id="requirements-beside-limits"),
    pytest.param("Failed to schedule pod, pod didn\u2019t schedule because NodePool couldn\u2019t meet minValues "
                 "requirements", Said.NOT_NOW, id="min-values-typographic-apostrophes"),
    pytest.param('Failed to schedule pod, incompatible with nodepool "spot", daemonset overhead={}, no instance '
                 "type has the required offering, requirements=karpenter.sh/capacity-type In [spot], resources={}",
                 Said.NOT_NOW, id="offering"),
    pytest.param("Failed to schedule pod, no instance type met the scheduling requirements or had a required "
                 "offering", Said.NOT_NOW, id="requirements-or-offering"),
    pytest.param("Failed to schedule pod, unsatisfiable topology constraint for topology spread, "
                 "key=topology.kubernetes.io/zone", Said.UNKNOWN, id="topology"),
    pytest.param("something else", Said.UNKNOWN, id="other-words"),
])
def test_karpenter_failing_to_schedule(message: str, said: Said) -> None:
    found = autoscalers.classify(KARPENTER, "FailedScheduling", message)
    assert found is not None and found[0] is said, found


def test_karpenter_nominating_a_nodeclaim() -> None:
    assert autoscalers.classify(KARPENTER, "Nominated", "Pod should schedule on: nodeclaim/gpu-x7k2") == (
        Said.COMING, "nodeclaim/gpu-x7k2", ("nodeclaim/gpu-x7k2",))
    found = autoscalers.classify(KARPENTER, "Nominated", "Pod should schedule on: nodeclaim/gpu-x7k2, node/ip-10-0-1-5")
    assert found is not None and found[2] == ("nodeclaim/gpu-x7k2", "node/ip-10-0-1-5")


def event(reason: str, message: str, *, uid: str = "pod-1", source: str = CA, kind: str = "Pod",
          first: str = "2026-11-23T11:50:00Z", last: str = "2026-11-23T11:55:00Z", **more: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"x.{reason}", "namespace": "team-a", "uid": f"e-{reason}-{first}"},
            "involvedObject": {"kind": kind, "namespace": "team-a", "name": "train-a", "uid": uid},
            "reason": reason, "message": message, "source": {"component": source},
            "firstTimestamp": first, "lastTimestamp": last, "count": 2, **more}


NEVER = "pod didn't trigger scale-up: " + ", ".join(PREDICATES)


def t(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("item", [
    pytest.param(event("FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                       source="default-scheduler"), id="the-schedulers-own"),
    pytest.param(event("DisruptionBlocked", "Cannot disrupt NodeClaim", source=KARPENTER), id="karpenter-other"),
    pytest.param(event("ScaledUpGroup", "Scale-up: setting group gpu-pool size to 1", kind="ConfigMap"),
                 id="on-the-status-configmap"),
    pytest.param(event("TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]", uid=""),
                 id="no-uid"),
])
def test_only_an_autoscalers_word_on_a_pod_counts(item: dict[str, Any]) -> None:
    assert autoscalers.note(item) is None


def test_events_fold_into_the_newest_of_each_kind_per_pod() -> None:
    items = [
        event("NotTriggerScaleUp", NEVER, first="2026-11-23T11:40:00Z", last="2026-11-23T11:45:00Z"),
        # The same reasons in another order: another Event object, the same word, said until later.
        event("NotTriggerScaleUp", "pod didn't trigger scale-up: " + ", ".join(reversed(PREDICATES)),
              first="2026-11-23T11:50:00Z", last="2026-11-23T11:55:00Z"),
        event("TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]",
              first="2026-11-23T11:30:00Z", last="2026-11-23T11:30:00Z"),
        event("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached",
              first="2026-11-23T11:20:00Z", last="2026-11-23T11:25:00Z"),
        event("Nominated", "Pod should schedule on: nodeclaim/gpu-1", uid="pod-2", source=KARPENTER),
    ]
    found = autoscalers.notes(n for n in map(autoscalers.note, items) if n is not None)
    assert set(found) == {"pod-1", "pod-2"}
    by_reason = {n.reason: n for n in found["pod-1"]}
    no = by_reason["NotTriggerScaleUp"]
    assert no.said is Said.NEVER and no.first == t("2026-11-23T11:40:00Z") and no.last == t("2026-11-23T11:55:00Z")
    assert no.source == CA and "1 Insufficient nvidia.com/gpu" in no.detail
    assert by_reason["TriggeredScaleUp"].targets == ("gpu-pool 0->1 (max: 4)",)
    [nominated] = found["pod-2"]
    assert nominated.said is Said.COMING and nominated.source == KARPENTER


def test_times_come_from_either_events_api() -> None:
    series = event("Nominated", "Pod should schedule on: nodeclaim/gpu-1", source="", first="", last="",
                   reportingComponent=KARPENTER, eventTime="2026-11-23T11:50:00.000000Z",
                   series={"count": 3, "lastObservedTime": "2026-11-23T11:58:00.000000Z"})
    found = autoscalers.note(series)
    assert found is not None
    uid, n = found
    assert uid == "pod-1" and n.source == KARPENTER
    assert n.first == t("2026-11-23T11:50:00Z") and n.last == t("2026-11-23T11:58:00Z")


def test_the_signs_that_nodes_can_be_added() -> None:
    said = autoscalers.note(event("TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]"))
    assert said is not None
    some = autoscalers.notes([said])
    ca = Autoscaling(("cm",), (CA,))
    assert not autoscalers.autoscaling(NodeAutoscaling.NONE, ca, some).present
    assert autoscalers.autoscaling(NodeAutoscaling.PRESENT, Autoscaling(), {}).signs == ("--node-autoscaling present",)
    assert not autoscalers.autoscaling(NodeAutoscaling.AUTO, Autoscaling(), {}).present
    assert autoscalers.autoscaling(NodeAutoscaling.AUTO, Autoscaling(), some).signs == ("autoscaler Events on pods",)
    assert autoscalers.autoscaling(NodeAutoscaling.AUTO, ca, {}, "unreadable") == Autoscaling(("cm", "unreadable"),
                                                                                               (CA,))


class _Answer:
    def __init__(self, status: int, body: bytes = b"{}") -> None:
        self.status, self.body, self.headers = status, body, {}

    def read(self) -> bytes:
        return self.body


class _Api:
    """Answers GETs by path: (status, body)."""

    def __init__(self, answers: dict[str, int]) -> None:
        self.answers, self.asked = answers, []

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[str, str]:
        return method, path

    def call_api(self, method: str, path: str, *args: Any, **kwargs: Any) -> _Answer:
        self.asked.append(path)
        status = self.answers.get(path, 404)
        return _Answer(status, json.dumps({"kind": "Status", "message": f"HTTP {status}"}).encode())


CM = "/api/v1/namespaces/kube-system/configmaps/cluster-autoscaler-status"


@pytest.mark.parametrize(("answers", "signs", "sources"), [
    pytest.param({}, (), (), id="neither"),
    pytest.param({CM: 200}, ("cluster-autoscaler's status ConfigMap kube-system/cluster-autoscaler-status",), (CA,),
                 id="cluster-autoscaler"),
    pytest.param({"/apis/karpenter.sh": 200}, ("Karpenter's API group karpenter.sh",), (KARPENTER,), id="karpenter"),
    pytest.param({CM: 403}, ("cluster-autoscaler's status ConfigMap kube-system/cluster-autoscaler-status could not "
                             "be looked for (HTTP 403), so it is not ruled out",), (CA,), id="forbidden-is-a-sign"),
    pytest.param({"/apis/karpenter.sh": 503}, ("Karpenter's API group karpenter.sh could not be looked for (HTTP "
                                               "503), so it is not ruled out",), (KARPENTER,),
                 id="unanswered-is-a-sign"),
])
def test_the_probes(answers: dict[str, int], signs: tuple[str, ...], sources: tuple[str, ...]) -> None:
    api = _Api(answers)
    assert autoscalers.probe(api) == Autoscaling(signs, sources)  # type: ignore[arg-type]
    assert api.asked == [CM, "/apis/karpenter.sh"]


def test_bad_credentials_fail_the_probe() -> None:
    with pytest.raises(errors.Unauthorized):
        autoscalers.probe(_Api({CM: 401}))  # type: ignore[arg-type]


def test_only_a_pending_policy_reads_what_autoscalers_say() -> None:
    from janitor.observe.observation import needs
    from janitor.policy.model import IdleGpu, Pending, Policy

    assert needs([Policy("stuck", (Pending(),))]).autoscalers
    assert not needs([Policy("idle", (IdleGpu(),))]).autoscalers


class _Watch:
    """A watch as the cache's snapshot reads it: refused (403) or holding entries."""

    def __init__(self, key: str, entries: list[Any], refused: errors.KubeError | None = None) -> None:
        from janitor.observe.kind_status import KindStatus, State
        from janitor.observe.views import EVENTS

        self.key, self.kind, self.entries, self.skipped = key, EVENTS, entries, refused
        self._status = KindStatus(key, State.SKIPPED if refused else State.WATCHING, not refused, len(entries),
                                  1, 0, 0, 0, 0)

    def status(self) -> Any:
        return self._status

    relist_seconds = None  # watched, not polled

    def values_at(self) -> tuple[list[Any], None]:
        return self.entries, None

    def values(self) -> list[Any]:
        return self.entries

    def stop(self) -> None:
        pass


def test_the_watch_cache_keeps_the_autoscalers_notes_and_a_refusal_makes_pods_wait() -> None:
    """Events the janitor may not read are no reason to stop every cycle (OOM Events are): pods
    that fit no node then wait, as when nothing was said."""
    from janitor.observe.cache import ClusterCache, Entry
    from janitor.settings import ClusterSettings, Settings

    cache = ClusterCache(object(), Settings(cluster=ClusterSettings(kinds=())))  # type: ignore[arg-type]
    said = autoscalers.note(event("NotTriggerScaleUp", NEVER))
    watches = {"Event:cluster-autoscaler": _Watch("Event:cluster-autoscaler", [Entry(note=said)]),
               "Event:karpenter": _Watch("Event:karpenter", [], errors.Forbidden("events is forbidden", status=403))}
    cache._watches.update(watches)  # type: ignore[arg-type]
    cache._groups.update({key: [key] for key in watches})
    cache._optional.update(watches)
    snap = cache.snapshot()
    [n] = snap.autoscaler["pod-1"]
    assert n.said is Said.NEVER
    assert snap.autoscaler_unreadable == "the autoscalers' Events could not be read (events is forbidden)"
    assert autoscalers.autoscaling(NodeAutoscaling.AUTO, Autoscaling(), snap.autoscaler,
                                   snap.autoscaler_unreadable).present


def test_the_watch_cache_says_now_whether_nodes_can_be_added_for_the_recheck() -> None:
    """The re-check before acting reads one namespace's Events; an autoscaler's Events on a pod of
    any namespace are a sign that nodes can be added, which the daemon's cache keeps live: it gives
    the re-check the signs the snapshot would (a note on a pod, a refused list); Events not synced
    now (listing again, a request that failed) are a sign too, and not watched it says nothing."""
    from janitor.observe.cache import ClusterCache, Entry
    from janitor.observe.kind_status import KindStatus, State
    from janitor.settings import ClusterSettings, Settings

    cache = ClusterCache(object(), Settings(cluster=ClusterSettings(kinds=())))  # type: ignore[arg-type]
    assert cache.autoscaling_now(NodeAutoscaling.AUTO) is None  # not watched: the cycle's read stands
    said = autoscalers.note(event("TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]"))
    watches = {"Event:cluster-autoscaler": _Watch("Event:cluster-autoscaler", [Entry(note=said)]),
               "Event:karpenter": _Watch("Event:karpenter", [])}
    cache._watches.update(watches)  # type: ignore[arg-type]
    cache._groups.update({key: [key] for key in watches})
    cache.probe.found = lambda: Autoscaling()  # type: ignore[method-assign]
    now = cache.autoscaling_now(NodeAutoscaling.AUTO)
    assert now is not None and now.signs == ("autoscaler Events on pods",)
    assert cache.autoscaling_now(NodeAutoscaling.NONE) == Autoscaling()
    watches["Event:karpenter"].skipped = errors.Forbidden("events is forbidden", status=403)
    watches["Event:cluster-autoscaler"].entries = []
    now = cache.autoscaling_now(NodeAutoscaling.AUTO)
    assert now is not None and now.signs == ("the autoscalers' Events could not be read (events is forbidden)",)
    watches["Event:karpenter"].skipped = None
    watches["Event:cluster-autoscaler"]._status = KindStatus("Event:cluster-autoscaler", State.LISTING, False, 0,
                                                             1, 0, 0, 0, 0)
    now = cache.autoscaling_now(NodeAutoscaling.AUTO)
    assert now is not None and "the autoscalers' Events are not read now (listing)" in now.signs
