"""What keeps a cycle's reads proportional to what matters: queries scoped to the namespaces the
idle policies cover, a watch stream split into events as it arrives, metadata-only kinds, and the
cache's refusal to hand out a snapshot it cannot stand behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from janitor.decide.model import NamespaceView, ResourceKind
from janitor.observe import cluster, evidence, watch
from janitor.observe.cache import ClusterCache, NotSynced
from janitor.observe.observation import MAX_SCOPED_NAMESPACES, covered_namespaces
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
    assert [json.loads(line) for line in watch._lines(_Stream(chunks))] == events


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
