"""What keeps a cycle's reads proportional to what matters: queries scoped to the namespaces the
idle policies cover, a watch stream split into events as it arrives, metadata-only kinds, and the
cache's refusal to hand out a snapshot it cannot stand behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from janitor import errors
from janitor.decide.model import NamespaceView, ResourceKind
from janitor.observe import cluster, evidence, watch, watch_stream
from janitor.observe.cache import ClusterCache, NotSynced
from janitor.observe.observation import MAX_SCOPED_NAMESPACES, covered_namespaces, needs
from janitor.observe.prometheus import HONOR_LABELS
from janitor.policy.model import IdleCpu, IdleGpu, LabelSelector, Match, Namespaces, Pending, Policy
from janitor.settings import ClusterSettings, Settings


def namespaces(*specs: tuple[str, dict[str, str]]) -> dict[str, NamespaceView]:
    return {name: NamespaceView(name, labels, {}) for name, labels in specs}


SEEN = namespaces(("team-a", {"gpu": "yes"}), ("team-b", {"gpu": "yes"}), ("kube-system", {}), ("ci", {}))


def test_queries_name_only_the_namespaces_an_idle_policy_covers() -> None:
    gpu = Policy("gpu", (IdleGpu(),), match=Match(namespace_selector=LabelSelector((("gpu", "yes"),))))
    cpu = Policy("cpu", (IdleCpu(),), match=Match(namespaces=Namespaces(include=("ci",))))
    stuck = Policy("stuck", (Pending(),))  # not a usage trigger: it reads no series
    assert covered_namespaces([gpu, stuck], SEEN) == ["team-a", "team-b"]
    assert covered_namespaces([gpu, cpu, stuck], SEEN) == ["ci", "team-a", "team-b"]


def test_every_namespace_covered_or_too_many_to_name_means_no_namespace_matcher() -> None:
    assert covered_namespaces([Policy("all", (IdleGpu(),))], SEEN) is None
    many = namespaces(*((f"team-{i}", {}) for i in range(MAX_SCOPED_NAMESPACES + 2)), ("kube-system", {}))
    some = Policy("teams", (IdleGpu(),), match=Match(namespaces=Namespaces(include=("team-*",))))
    assert covered_namespaces([some], many) is None


def test_a_janitor_given_namespaces_names_them_though_its_policies_cover_all_it_sees() -> None:
    """Under `--namespaces` the janitor sees only those namespaces: a policy covering all it sees
    covers those, and a query without a namespace matcher would read every pod Prometheus holds
    (the whole cluster's series, for pods the janitor never judges)."""
    teams = namespaces(("team-a", {"gpu": "yes"}), ("team-b", {}))
    assert covered_namespaces([Policy("all", (IdleGpu(),))], teams, everywhere=False) == ["team-a", "team-b"]
    assert covered_namespaces([Policy("all", (IdleGpu(),))], teams, everywhere=True) is None
    gpu = Policy("gpu", (IdleGpu(),), match=Match(namespace_selector=LabelSelector((("gpu", "yes"),))))
    assert covered_namespaces([gpu], teams, everywhere=False) == ["team-a"]


def test_a_busy_peak_is_sent_alone_only_above_every_threshold_that_reads_it() -> None:
    """A GPU's quality rows may be left out only where every policy reading the answer calls its
    peak busy: above the highest threshold. A CPU answer read against a fraction of each pod's
    request has no such level, so it comes whole."""
    hours = IdleGpu().window
    lenient = Policy("lenient", (IdleGpu(threshold=20.0),))
    strict = Policy("strict", (IdleGpu(threshold=5.0), IdleCpu(cores=0.2)))
    other_window = Policy("other", (IdleGpu(threshold=50.0, window=hours * 2), IdleCpu(cores=0.5)))
    need = needs([strict, lenient, other_window])
    assert need.gpu_busy_above == {("DCGM_FI_DEV_GPU_UTIL", hours): 20.0, ("DCGM_FI_DEV_GPU_UTIL", hours * 2): 50.0}
    assert need.cpu_busy_above == {(IdleCpu().window, ()): 0.5}
    by_request = Policy("by-request", (IdleCpu(fraction_of_request=0.1),))
    more = Policy("more", (IdleCpu(fraction_of_request=0.3),))
    assert needs([by_request, more]).cpu_busy_fraction == {(IdleCpu().window, ()): 0.3}
    mixed = needs([strict, by_request])
    assert mixed.cpu_busy_above == {} and mixed.cpu_busy_fraction == {}
    fraction = evidence.cpu_query(window=hours, step=hours / 120, ignore_containers=("istio-proxy",),
                                  busy_fraction=0.3)
    assert ('> on (namespace, pod) (0.3 * sum by (namespace, pod) (kube_pod_container_resource_requests'
            '{resource="cpu",container!~"istio-proxy"}))') in fraction
    query = evidence.gpu_query("DCGM_FI_DEV_GPU_UTIL", window=hours, step=hours / 480, labels=HONOR_LABELS,
                               busy_above=20.0)
    assert query.startswith("((max by (") and ") > 20.0) < 9.2e+18" in query
    assert evidence.gpu_query("DCGM_FI_DEV_GPU_UTIL", window=hours, step=hours / 480, labels=HONOR_LABELS) in query


def test_a_namespace_scope_becomes_one_exact_matcher_and_none_matches_nothing() -> None:
    (matcher,) = evidence.scope(HONOR_LABELS, None, ["team-b", "team-a.x"])
    assert matcher.render() == 'namespace=~"team-a\\\\.x|team-b"'
    (nothing,) = evidence.scope(HONOR_LABELS, None, [])
    assert nothing.render() == 'namespace=~"$^"'
    assert evidence.scope(HONOR_LABELS, None, None) == ()


class _Stream:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        yield from self.chunks


def test_a_watch_stream_is_split_into_whole_events_however_it_is_chunked() -> None:
    events = [{"type": "ADDED", "object": {"metadata": {"uid": str(i), "resourceVersion": str(i)}}} for i in range(3)]
    text = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    chunks = [text[i:i + 7] for i in range(0, len(text), 7)]
    assert [json.loads(line) for line in watch_stream.lines(_Stream(chunks))] == events
    # Cut in the middle of the last event: the whole ones only; the watch asks for the rest again.
    cut = [text[: len(text) - 10]]
    assert [json.loads(line) for line in watch_stream.lines(_Stream(cut))] == events[:2]


def test_a_line_of_a_watch_that_is_not_an_event_is_the_kinds_failure_in_words() -> None:
    with pytest.raises(errors.ServerError, match="watch Pod: the watch sent a line that is not JSON"):
        watch_stream.event(b'{"type": "ADDED", "obj', "Pod")
    with pytest.raises(errors.ServerError, match="not an event"):
        watch_stream.event(b"[1, 2]", "Pod")


def test_kinds_read_by_their_metadata_alone_are_asked_for_as_partial_metadata() -> None:
    assert cluster.metadata_only(ResourceKind("", "v1", "ConfigMap", "configmaps"))
    assert cluster.metadata_only(ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False))
    # A workload's pod template and a custom resource's replicas are read: those come whole.
    assert not cluster.metadata_only(ResourceKind("batch", "v1", "Job", "jobs"))
    assert not cluster.metadata_only(ResourceKind("kubeflow.org", "v1", "Notebook", "notebooks"))
    assert not cluster.metadata_only(ResourceKind("", "v1", "Pod", "pods"))
    assert "as=PartialObjectMetadataList" in watch.metadata_accept(as_list=True)


def test_a_cache_that_never_listed_refuses_a_snapshot() -> None:
    class Unreachable:
        def param_serialize(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionRefusedError("no apiserver here")

    settings = Settings(cluster=ClusterSettings(kinds=(ResourceKind("", "v1", "ConfigMap", "configmaps"),)))
    cache = ClusterCache(Unreachable(), settings)  # type: ignore[arg-type]
    try:
        cache.ensure(pods=False, nodes=False, oom=False)
        assert not cache.wait(2.0)
        with pytest.raises(NotSynced, match="ConfigMap"):
            cache.snapshot()
        assert all(not s.synced and s.failures >= 1 for s in cache.status())
    finally:
        cache.stop()


def test_pods_alike_share_what_they_hold_alike() -> None:
    """A cache of 50,000 pods keeps one copy of what pods carry alike (tolerations, resource totals,
    finalizers, label keys) and, for a pod kept both as an object and as a pod, one copy of its
    labels and annotations; the views read exactly as before."""
    from janitor.observe.cache import ClusterCache
    from janitor.observe.views import PODS

    def pod(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": "7",
                             "creationTimestamp": "2026-11-25T10:00:00Z", "labels": {"app": "train"},
                             "annotations": {"note": "x"}, "finalizers": ["example.com/hold"]},
                "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "resources": {
                    "limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "2"}}}],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
                "status": {"phase": "Running", "startTime": "2026-11-25T10:00:05Z"}}

    slim = ClusterCache._slim(PODS, as_object=True)
    a, b = slim(pod("a")), slim(pod("b"))
    assert a.pod is not None and b.pod is not None and a.object is not None
    assert a.pod.state.tolerations is b.pod.state.tolerations
    assert a.pod.state.limits is b.pod.state.limits and a.pod.state.requests is b.pod.state.requests
    assert a.pod.state.finalizers is b.pod.state.finalizers and a.pod.containers is b.pod.containers
    assert a.object.labels is a.pod.labels and a.object.annotations is a.pod.annotations and a.object.ref is a.pod.ref
    assert dict(a.pod.state.limits) == {"nvidia.com/gpu": 1.0} and a.pod.gpus == 1
    assert a.object == cluster.to_view(PODS, pod("a")) and a.pod.labels == {"app": "train"}
