"""The exporters' readers of pods and nodes (devenv.podviews), without an apiserver.

Aspects covered:
- a pod or node read as raw JSON gives the same view as the typed client model (owners, phases,
  start times before creation, deletion, unschedulable, CPU quantities, GPUs and MIG slices);
- the list reader pages through `continue`, keeps the view objects of unchanged pods and hands
  back the very same tuple while nothing changed;
- the watch reader applies ADDED/MODIFIED/DELETED events, moves its generation only when a view
  changed (a heartbeat that changes a node's object but not its view does not), keeps resuming
  from bookmarks and asks for a new list when the apiserver answers 410 Gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from devenv.podviews import (
    CachedPods,
    Watched,
    node_view,
    node_view_from_dict,
    pod_view,
    pod_view_from_dict,
    watched_nodes,
)


def raw_pod(name: str, **changes: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "1",
                     "creationTimestamp": "2025-11-25T15:06:30Z"},
        "spec": {"nodeName": "gpu-node-1", "containers": [
            {"name": "main", "resources": {"requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running", "startTime": "2025-11-25T15:06:31Z"},
    }
    for path, value in changes.items():
        section, key = path.split("__")
        pod[section][key] = value
    return pod


PODS: list[dict[str, Any]] = [
    raw_pod("plain"),
    raw_pod("owned", metadata__ownerReferences=[
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "2", "controller": True}]),
    raw_pod("backdated", status__startTime="2025-11-25T09:00:00Z"),
    raw_pod("deleting", metadata__deletionTimestamp="2025-11-25T16:00:00Z"),
    raw_pod("pending", spec__nodeName=None, status__phase="Pending", status__conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
    raw_pod("no-status", status__phase=None, status__startTime=None),
    raw_pod("mig-and-cpu", spec__containers=[
        {"name": "a", "resources": {"requests": {"cpu": "2", "nvidia.com/mig-3g.40gb": "1"}}},
        {"name": "b"}, {"name": "c", "resources": {"limits": {"cpu": "1.5"}}}]),
]
NODES: list[dict[str, Any]] = [
    {"metadata": {"name": "gpu", "uid": "n1", "annotations": {"devenv.janitor.dev/gpu-model": "NVIDIA H100 80GB HBM3"}},
     "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "8"}}},
    {"metadata": {"name": "mig", "uid": "n2"}, "status": {"allocatable": {"nvidia.com/mig-3g.40gb": "4"}}},
    {"metadata": {"name": "cpu", "uid": "n3"}, "status": {"allocatable": {"cpu": "32"}}},
]


@pytest.mark.parametrize("raw", PODS, ids=[p["metadata"]["name"] for p in PODS])
def test_a_raw_pod_reads_as_the_typed_one(raw: dict[str, Any]) -> None:
    typed = client.V1Pod.from_dict(raw)
    assert typed is not None and pod_view_from_dict(raw) == pod_view(typed)


@pytest.mark.parametrize("raw", NODES, ids=[n["metadata"]["name"] for n in NODES])
def test_a_raw_node_reads_as_the_typed_one(raw: dict[str, Any]) -> None:
    typed = client.V1Node.from_dict(raw)
    assert typed is not None and node_view_from_dict(raw) == node_view(typed)


class Response:
    """What the client returns with `_preload_content=False`: a body, or a stream of lines."""

    def __init__(self, body: dict[str, Any] | None = None, events: list[dict[str, Any]] | None = None) -> None:
        self.data = json.dumps(body).encode() if body is not None else b""
        self._stream = "".join(json.dumps(e) + "\n" for e in events or []).encode()

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        for i in range(0, len(self._stream), 7):  # chunks that split lines
            yield self._stream[i:i + 7]

    def release_conn(self) -> None:
        pass


class Lister:
    """A list_* method: pages of `items` (two per page), or the next queued watch response."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.watches: list[Response] = []
        self.lists = 0

    def __call__(self, **kwargs: Any) -> Response:
        if kwargs.get("watch"):
            return self.watches.pop(0)
        self.lists += 1
        start = int(kwargs.get("_continue") or 0)
        page = self.items[start:start + 2]
        more = str(start + 2) if start + 2 < len(self.items) else None
        return Response({"items": page, "metadata": {"resourceVersion": "100", **({"continue": more} if more else {})}})


class Core:
    def __init__(self, lister: Lister) -> None:
        self.list_pod_for_all_namespaces = self.list_node = lister


def test_the_list_reader_pages_and_keeps_unchanged_views() -> None:
    lister = Lister([dict(p) for p in PODS])
    pods = CachedPods(Core(lister), max_age=-1)  # type: ignore[arg-type]  # lists on every call
    first = pods()
    assert [p.name for p in first] == [p["metadata"]["name"] for p in PODS]
    assert lister.lists == 4  # 7 pods, 2 per page
    again = pods()
    assert again is first
    lister.items[0] = {**lister.items[0], "metadata": {**lister.items[0]["metadata"], "resourceVersion": "2"},
                       "status": {"phase": "Succeeded"}}
    changed = pods()
    assert changed is not first and changed[0].phase == "Succeeded"
    assert all(a is b for a, b in zip(changed[1:], first[1:], strict=True))


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def test_the_watch_reader_follows_events_and_moves_only_on_changes() -> None:
    nodes: list[dict[str, Any]] = [dict(n, metadata={**n["metadata"], "resourceVersion": "1"}) for n in NODES]
    lister = Lister(nodes)
    watched: Watched[Any] = watched_nodes(Core(lister))  # type: ignore[arg-type]
    assert watched._relist() == "100"  # what start() does before its thread watches
    views = watched()
    assert [n.name for n in views] == ["gpu", "mig", "cpu"] and watched.generation == 1
    heartbeat = {**nodes[0], "metadata": {**nodes[0]["metadata"], "resourceVersion": "101"},
                 "status": {**nodes[0]["status"], "conditions": [{"type": "Ready", "status": "True"}]}}
    new = {"metadata": {"name": "new", "uid": "n4", "resourceVersion": "102"}, "status": {"allocatable": {}}}
    lister.watches.append(Response(events=[event("MODIFIED", heartbeat), event("ADDED", new),
                                           event("BOOKMARK", {"metadata": {"resourceVersion": "150"}})]))
    assert watched._watch("100") == "150"
    assert watched.generation == 2  # the heartbeat changed no view
    assert watched()[0] is views[0]
    shrunk = {**nodes[1], "metadata": {**nodes[1]["metadata"], "resourceVersion": "151"},
              "status": {"allocatable": {"nvidia.com/mig-3g.40gb": "2"}}}
    lister.watches.append(Response(events=[event("MODIFIED", shrunk), event("DELETED", nodes[2]),
                                           event("ERROR", {"code": 410, "reason": "Expired"})]))
    assert watched._watch("150") == ""  # gone: list again
    assert [(n.name, n.gpus) for n in watched()] == [("gpu", 8), ("mig", 2), ("new", 0)]
    assert watched.generation == 4 and watched.events == 4  # bookmarks and errors are no changes
