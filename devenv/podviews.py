"""The synthetic exporters' view of the cluster, read from the real apiserver.

Series are derived from the real pod objects (name, namespace, uid, node, containers, GPUs), so a
test creates a pod the ordinary way and only sets usage values.

Two readers, for two sizes. `CachedPods` lists at most once per `max_age` (Prometheus scrapes
several targets per interval and each asks for the same list), as raw JSON: the client's typed
models cost about a millisecond per pod to build, which at 40,000 pods is most of a core.
`WatchedPods`/`WatchedNodes` list once and then follow a watch, so a big sandbox pays per change,
not per pod and scrape. Both hand back the same view objects for unchanged objects, which is what
lets the render cache see at a glance which nodes' targets are stale.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from kubernetes import client

from devenv.exporters.model import ContainerView, NodeView, PodView
from devenv.nodes import GPU_MODEL

log = logging.getLogger(__name__)
V = TypeVar("V", PodView, NodeView)
ListCall = Callable[..., Any]  # a CoreV1Api list_* method


def _quantity(value: str | None) -> float:
    """CPU quantity ('500m', '2', '1.5') in cores; other suffixes are not used for CPU."""
    if not value:
        return 0.0
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _gpu_count(requests: Mapping[str, str] | None, limits: Mapping[str, str] | None) -> int:
    """Whole GPUs or MIG instances requested (limits count too: GPUs are set as limits)."""
    merged = {**(requests or {}), **(limits or {})}
    return sum(int(v) for k, v in merged.items() if k == "nvidia.com/gpu" or k.startswith("nvidia.com/mig-"))


def _gpus(resources: client.V1ResourceRequirements | None) -> int:
    return 0 if resources is None else _gpu_count(resources.requests, resources.limits)


def _seconds(stamp: str | None) -> float | None:
    """An RFC 3339 time from the apiserver as unix seconds."""
    return datetime.datetime.fromisoformat(stamp).timestamp() if stamp else None


def _created(creation: float, start: float | None) -> float:
    """Since when the exporters show the pod: its start time if the sandbox backdated it
    (STARTED_AT), so a backfilled history can cover hours before the object was made."""
    return min(creation, start if start is not None else float("inf"))


def pod_view(pod: client.V1Pod) -> PodView:
    """The view of a typed pod (as `history` reads them); `pod_view_from_dict` for raw JSON."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    assert meta is not None and spec is not None and status is not None
    owner = next((o for o in meta.owner_references or [] if o.controller), None)
    unschedulable = any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in (status.conditions or [])
    )
    assert meta.creation_timestamp is not None
    return PodView(
        namespace=str(meta.namespace),
        name=str(meta.name),
        uid=str(meta.uid),
        node=spec.node_name,
        phase=status.phase or "Pending",
        created=_created(meta.creation_timestamp.timestamp(),
                         status.start_time.timestamp() if status.start_time else None),
        owner_kind=owner.kind if owner else "",
        owner_name=owner.name if owner else "",
        containers=tuple(
            ContainerView(
                name=c.name,
                cpu_request_cores=_quantity((c.resources.requests or {}).get("cpu") if c.resources else None),
                gpus=_gpus(c.resources),
            )
            for c in spec.containers
        ),
        deletion_timestamp=meta.deletion_timestamp.timestamp() if meta.deletion_timestamp else None,
        unschedulable=unschedulable,
    )


def pod_view_from_dict(pod: Mapping[str, Any]) -> PodView:
    """`pod_view` of a pod as the apiserver's JSON has it: the same view, without typed models."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )
    containers = []
    for c in spec.get("containers") or []:
        resources = c.get("resources") or {}
        containers.append(ContainerView(
            name=c["name"],
            cpu_request_cores=_quantity((resources.get("requests") or {}).get("cpu")),
            gpus=_gpu_count(resources.get("requests"), resources.get("limits")),
        ))
    return PodView(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        node=spec.get("nodeName"),
        phase=status.get("phase") or "Pending",
        created=_created(_seconds(meta["creationTimestamp"]) or 0.0, _seconds(status.get("startTime"))),
        owner_kind=owner["kind"] if owner else "",
        owner_name=owner["name"] if owner else "",
        containers=tuple(containers),
        deletion_timestamp=_seconds(meta.get("deletionTimestamp")),
        unschedulable=unschedulable,
    )


def _node_view(name: str, allocatable: Mapping[str, str], annotations: Mapping[str, str]) -> NodeView:
    mig = next((k for k in allocatable if k.startswith("nvidia.com/mig-")), None)
    gpus = int(allocatable.get(mig or "nvidia.com/gpu", 0))
    model = annotations.get(GPU_MODEL)
    return NodeView(
        name=name,
        gpus=gpus,
        mig_profile=mig.removeprefix("nvidia.com/mig-") if mig else None,
        **({"gpu_model": model} if model else {}),
    )


def node_view(node: client.V1Node) -> NodeView:
    """A node's GPUs as the device plugin advertises them (whole GPUs or MIG instances)."""
    assert node.metadata is not None and node.status is not None
    return _node_view(str(node.metadata.name), node.status.allocatable or {}, node.metadata.annotations or {})


def node_view_from_dict(node: Mapping[str, Any]) -> NodeView:
    meta, status = node["metadata"], node.get("status") or {}
    return _node_view(meta["name"], status.get("allocatable") or {}, meta.get("annotations") or {})


def list_raw(list_call: ListCall, page_size: int = 500) -> tuple[list[dict[str, Any]], str]:
    """All items of a list call as JSON dicts (paged), and the list's resourceVersion."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        page = json.loads(list_call(**kwargs).data)
        items.extend(page.get("items") or [])
        token = page["metadata"].get("continue")
        if not token:
            return items, str(page["metadata"].get("resourceVersion", ""))


def _lines(resp: Any) -> Iterator[bytes]:
    """The lines of a streamed watch response (one JSON event each)."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield from lines
    if buffer:
        yield buffer


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))


class CachedPods:
    """A pods provider for the exporters that lists pods at most once per `max_age` seconds.

    Unchanged pods (same uid and resourceVersion) keep their view object, and an unchanged list
    comes back as the same tuple.
    """

    def __init__(self, core: client.CoreV1Api, max_age: float = 1.0) -> None:
        self._core = core
        self._max_age = max_age
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._views: dict[tuple[str, str], PodView] = {}
        self._pods: tuple[PodView, ...] = ()

    def __call__(self) -> tuple[PodView, ...]:
        with self._lock:
            if time.monotonic() - self._at > self._max_age:
                items, _ = list_raw(self._core.list_pod_for_all_namespaces)
                views = {}
                for item in items:
                    key = _key(item)
                    views[key] = self._views.get(key) or pod_view_from_dict(item)
                pods = tuple(views.values())
                if pods != self._pods:
                    self._pods = pods
                self._views = views
                self._at = time.monotonic()
            return self._pods


class Watched(Generic[V]):
    """Objects of one kind as views, kept current by a list and then a watch (raw JSON).

    `generation` moves with every change, so the render cache only calls this when something
    happened. The first list runs in `start()`, so the exporters never serve an empty cluster
    that merely has not been read yet. A broken watch resumes from its resourceVersion, and
    lists again when the apiserver no longer has it (410 Gone).
    """

    def __init__(self, list_call: ListCall, parse: Callable[[Mapping[str, Any]], V], name: str,
                 watch_seconds: int = 60) -> None:
        self._list_call = list_call
        self._parse: Callable[[Mapping[str, Any]], V] = parse
        self._name = name
        self._watch_seconds = watch_seconds
        self._lock = threading.Lock()
        self._views: dict[str, tuple[str, V]] = {}  # uid -> (resourceVersion, view)
        self._snapshot: tuple[V, ...] | None = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp: Any = None
        self.generation = 0
        self.events = 0

    def start(self) -> Watched[V]:
        version = self._relist()
        self._thread = threading.Thread(target=self._run, args=(version,), name=f"watch-{self._name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # the watch thread is a daemon; this only hurries it
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __call__(self) -> tuple[V, ...]:
        with self._lock:
            if self._snapshot is None:
                self._snapshot = tuple(view for _, view in self._views.values())
            return self._snapshot

    def _changed(self) -> None:
        self._snapshot = None
        self.generation += 1

    def _relist(self) -> str:
        items, version = list_raw(self._list_call)
        fresh = {}
        for item in items:
            uid, rv = _key(item)
            old = self._views.get(uid)
            fresh[uid] = old if old is not None and old[0] == rv else (rv, self._parse(item))
        with self._lock:
            if fresh != self._views:
                self._views = fresh
                self._changed()
        return version

    def _run(self, version: str) -> None:
        while not self._stop.is_set():
            try:
                version = self._watch(version)
            except Exception as e:  # connection reset, apiserver restart: resume after a pause
                if self._stop.is_set():
                    return
                log.warning("watching %s failed (%s); resuming", self._name, e)
                time.sleep(1.0)
            if version == "":
                try:
                    version = self._relist()
                except Exception as e:
                    log.warning("listing %s failed (%s); retrying", self._name, e)
                    time.sleep(1.0)

    def _watch(self, version: str) -> str:
        """One watch request until the server ends it; the version to resume from ("" = list again)."""
        self._resp = resp = self._list_call(
            watch=True, resource_version=version, allow_watch_bookmarks=True,
            timeout_seconds=self._watch_seconds, _preload_content=False,
            _request_timeout=(10, self._watch_seconds + 30))
        try:
            for line in _lines(resp):
                if self._stop.is_set():
                    return version
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return "" if obj.get("code") == 410 else version
                version = str(obj.get("metadata", {}).get("resourceVersion", version))
                if kind == "BOOKMARK":
                    continue
                self._apply(kind, obj)
        finally:
            resp.release_conn()
            self._resp = None
        return version

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        uid, rv = _key(obj)
        view = None if kind == "DELETED" else self._parse(obj)
        with self._lock:
            self.events += 1
            old = self._views.get(uid)
            if view is None:
                if old is not None:
                    del self._views[uid]
                    self._changed()
            elif old is None or old[1] != view:
                self._views[uid] = (rv, view)
                self._changed()
            else:
                self._views[uid] = (rv, old[1])  # same view: keep the object, nothing to re-render


def watched_pods(core: client.CoreV1Api) -> Watched[PodView]:
    return Watched(core.list_pod_for_all_namespaces, pod_view_from_dict, "pods")


def watched_nodes(core: client.CoreV1Api) -> Watched[NodeView]:
    """Nodes as the exporters see them; heartbeats change a node's object, not its view."""
    return Watched(core.list_node, node_view_from_dict, "nodes")
