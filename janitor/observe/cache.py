"""The cluster as the daemon keeps it between cycles: each kind a cycle reads, watched.

Listing every kind every cycle costs the apiserver the whole cluster every minute; a steady cycle
should cost what changed. So the daemon lists each kind once and then follows it
(`observe.watch`; nodes, whose every kubelet status report would come whole, are listed again
every --node-refresh instead), and a cycle takes a snapshot of the slim values kept: configured kinds as
`ObjectView`s (pods and namespaces also as the views the triggers read), nodes as `NodeInfo`, the
node agent's OOM Events, and node autoscalers' Events on pods (as their notes) with the probe for
an autoscaler, asked again every few minutes.

A snapshot is refused (`NotSynced`) while any kind it needs has not completed its first list or
has lost the apiserver, and when one lost it while the snapshot was taken: the cycle then does
nothing, and says so on /healthz, /readyz and in the metrics. A cycle waits for kinds on their way
(a first list answering page by page), never for a request without an answer: every request of
the cache waits at most the client's timeout (--kube-timeout) for its answer, and a kind whose
request failed is not waited for. What an action depends on is still read fresh right before it
(`scoped.read_scoped`), so the cache never decides an action alone.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client import ApiClient

from janitor import errors, kubeapi, node_report
from janitor.decide.autoscaling import AutoscalerNote, Autoscaling, NodeAutoscaling
from janitor.decide.model import NamespaceView, NodeInfo, ObjectView, PodView, ResourceKind, SkippedKind
from janitor.observe import autoscalers, claims, cluster, views
from janitor.observe.kind_status import KindStatus
from janitor.observe.watch import KindWatch
from janitor.settings import Settings

logger = logging.getLogger(__name__)


class NotSynced(errors.KubeError):
    """A kind the cycle needs is not (or no longer) known from the apiserver: the cycle does nothing."""

    temporary = True


@dataclass(frozen=True, slots=True)
class Entry:
    """What is kept of one object: its view as a configured kind, and the trigger's view of it."""

    object: ObjectView | None = None
    pod: PodView | None = None
    namespace: NamespaceView | None = None
    node: NodeInfo | None = None
    event: Mapping[str, Any] | None = None  # an OOM Event's few fields (views.oom_reports reads them)
    note: tuple[str, AutoscalerNote] | None = None  # an autoscaler's Event on a pod: (pod uid, what it says)


@dataclass(frozen=True)
class Snapshot:
    objects: tuple[ObjectView, ...]
    pods: tuple[PodView, ...]
    namespaces: dict[str, NamespaceView]
    nodes: tuple[NodeInfo, ...]
    oom: dict[str, tuple[Any, ...]]
    skipped: tuple[SkippedKind, ...]
    autoscaler: dict[str, tuple[AutoscalerNote, ...]] = field(default_factory=dict)
    autoscaler_unreadable: str | None = None  # why the autoscalers' Events could not be read
    nodes_at: datetime.datetime | None = None  # polled nodes: when their last list began; None: watched


def _is(kind: ResourceKind, name: str) -> bool:
    return kind.group == "" and kind.kind == name


def _slim_note(item: Mapping[str, Any]) -> Entry | None:
    found = autoscalers.note(item)
    return Entry(note=found) if found is not None else None


def _slim_event(item: Mapping[str, Any]) -> Entry:
    return Entry(event={"involvedObject": {"uid": (item.get("involvedObject") or {}).get("uid")},
                        "reason": item.get("reason"), "message": item.get("message"),
                        "lastTimestamp": item.get("lastTimestamp"), "eventTime": item.get("eventTime")})


class ClusterCache:
    """Every kind a cycle reads, each on its own watch; `ensure` adds kinds as policies come to need them."""

    def __init__(self, api: ApiClient, settings: Settings, *, timeout: kubeapi.Timeout | None = None) -> None:
        self.api, self.settings = api, settings
        # Each request's wait for its answer (connect, read): the client's own (--kube-timeout) by default.
        own: kubeapi.Timeout | None = getattr(api, "timeout", None)
        self.timeout: kubeapi.Timeout = timeout or own or kubeapi.DEFAULT_TIMEOUT
        self._watches: dict[str, KindWatch[Entry]] = {}
        self._groups: dict[str, list[str]] = {}  # a kind's key -> its watches (one per namespace in scope)
        self._optional: set[str] = set()  # groups whose refusal (403, 404) is reported, not a reason to stop
        self._lock = threading.Lock()
        self.probe = autoscalers.Probe(api)
        self.claims_discovery = claims.Discovery()  # where v1 claims are not served, what discovery said

    # -- which kinds ---------------------------------------------------------------------------------
    def ensure(self, *, pods: bool, nodes: bool, oom: bool, scaling: bool = False) -> None:
        """Start watching every kind a cycle with these needs reads (a kind already watched is kept)."""
        c = self.settings.cluster
        configured = {k.key for k in c.kinds}
        for kind in c.kinds:
            self._add(kind, as_object=True)
        if pods and views.PODS.key not in configured:
            self._add(views.PODS, as_object=False)
        if views.NAMESPACES.key not in configured:
            self._add(views.NAMESPACES, as_object=False)
        if nodes:
            self._add(views.NODES, as_object=False, everywhere=True)
        if oom:
            self._add(views.EVENTS, as_object=False, field_selector=f"reason={node_report.EVENT_OOM}")
        for source in autoscalers.SOURCES if scaling else ():  # the autoscalers' Events on pods
            self._add(views.EVENTS, as_object=False, field_selector=autoscalers.field_selector(source),
                      group=f"Event:{source}", slim=_slim_note)

    def _add(self, kind: ResourceKind, *, as_object: bool, everywhere: bool = False,
             field_selector: str | None = None, group: str | None = None, slim: Any = None) -> None:
        key = group or kind.key
        with self._lock:
            if key in self._groups:
                return
            scope = self.settings.cluster.namespaces
            namespaces: Sequence[str | None] = scope if (scope is not None and kind.namespaced
                                                         and not everywhere) else [None]
            keep = None
            if scope is not None and _is(kind, "Namespace") and not everywhere:
                wanted = frozenset(scope)
                keep = lambda item: (item.get("metadata") or {}).get("name") in wanted  # noqa: E731
            keys = []
            for namespace in namespaces:
                w: KindWatch[Entry] = KindWatch(
                    self.api, kind, slim or self._slim(kind, as_object), namespace=namespace,
                    metadata_only=cluster.metadata_only(kind), field_selector=field_selector, keep=keep,
                    page_size=cluster.page_size_of(kind, self.settings.cluster.page_size), timeout=self.timeout,
                    name=group and group + (f"@{namespace}" if namespace else ""),
                    relist_seconds=self._relist(kind))
                self._watches[w.key] = w.start()
                keys.append(w.key)
            self._groups[key] = keys
            if group is not None:
                self._optional.add(key)

    def _relist(self, kind: ResourceKind) -> float | None:
        """Nodes are listed every --node-refresh rather than watched (0: watched, as every other kind)."""
        refresh = self.settings.cluster.node_refresh.total_seconds()
        return refresh if _is(kind, "Node") and refresh > 0 else None

    @staticmethod
    def _slim(kind: ResourceKind, as_object: bool) -> Any:
        if _is(kind, "Event"):
            return _slim_event
        if _is(kind, "Node"):
            return lambda item: Entry(node=views.node_info(item))

        def slim(item: Mapping[str, Any]) -> Entry:
            pod = views.pod_view(item) if _is(kind, "Pod") else None
            view = cluster.to_view(kind, item) if as_object else None
            if view is not None and pod is not None:  # one copy of what both views hold alike
                view = replace(view, ref=pod.ref, labels=pod.labels, annotations=pod.annotations)
            return Entry(object=view, pod=pod,
                         namespace=views.namespace_view(item) if _is(kind, "Namespace") else None)
        return slim

    # -- state -----------------------------------------------------------------------------------------
    def status(self) -> list[KindStatus]:
        with self._lock:
            watches = list(self._watches.values())
        return [w.status() for w in watches]

    def unsynced(self) -> list[KindStatus]:
        """Kinds not synced now (a kind skipped for 403/404 counts as known: it is shown as skipped)."""
        with self._lock:
            watches = list(self._watches.values())
        return [s for w in watches if w.skipped is None and not (s := w.status()).synced]

    def failing(self) -> list[KindStatus]:
        """Kinds not synced for a reason (a failed request, an answer that did not come in time,
        silence past the bound), not merely on their way: what /healthz says."""
        return [s for s in self.unsynced() if s.failing]

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for kinds on their way (listing, or their watch opening; a big
        cluster's list takes a while, page by page), each only while its request is younger than
        the timeout: a kind whose request failed, or got no answer in time, is not waited for (the
        cycle says it is not synced)."""
        deadline = time.monotonic() + seconds
        while any(s.underway for s in self.unsynced()):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return not self.unsynced()

    def stop(self) -> None:
        with self._lock:
            watches = list(self._watches.values())
        for w in watches:
            w.stop()

    # -- the cycle's read --------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The values kept now; `NotSynced` when any kind is not known from the apiserver now."""
        self._refuse_unsynced()
        objects: list[ObjectView] = []
        pods: list[PodView] = []
        namespaces: dict[str, NamespaceView] = {}
        nodes: list[NodeInfo] = []
        events: list[Mapping[str, Any]] = []
        notes: list[tuple[str, AutoscalerNote]] = []
        unreadable: str | None = None
        nodes_at: datetime.datetime | None = None  # when the polled nodes' list began
        skipped: list[SkippedKind] = []
        with self._lock:
            groups = {key: [self._watches[k] for k in keys] for key, keys in self._groups.items()}
            optional = set(self._optional)
        configured = {k.key for k in self.settings.cluster.kinds}
        for key, watches in groups.items():
            failed = next((w.skipped for w in watches if w.skipped is not None), None)
            if failed is not None:
                if key in configured:
                    skipped.append(cluster.skipped(watches[0].kind, failed))
                    continue
                if key in optional:  # pods that fit no node wait, as when nothing was said
                    unreadable = f"the autoscalers' Events could not be read ({failed.server_message})"
                    continue
                raise NotSynced(f"{key} cannot be read: {failed}", doing="read the watch cache")
            for w in watches:
                values, listed_at = w.values_at()
                if w.relist_seconds is not None and listed_at is not None:
                    nodes_at = listed_at if nodes_at is None else min(nodes_at, listed_at)
                for e in values:
                    if e.object is not None:
                        objects.append(e.object)
                    if e.pod is not None:
                        pods.append(e.pod)
                    if e.namespace is not None:
                        namespaces[e.namespace.name] = e.namespace
                    if e.node is not None:
                        nodes.append(e.node)
                    if e.event is not None:
                        events.append(e.event)
                    if e.note is not None:
                        notes.append(e.note)
        self._refuse_unsynced()  # a kind lost meanwhile: what was read of it is not used either
        return Snapshot(tuple(objects), tuple(pods), namespaces, tuple(nodes), views.oom_reports(events),
                        tuple(skipped), autoscalers.notes(notes), unreadable, nodes_at)

    def autoscaling_now(self, mode: NodeAutoscaling) -> Autoscaling | None:
        """Whether nodes can be added, from the autoscalers' Events kept now (on pods of every
        namespace watched) and the probe: what the re-check before acting, which reads one
        namespace, takes from beyond it. Events refused, or not synced now (listing again after a
        410, a request that failed), are a sign: what they say is not known. None where they are
        not watched."""
        with self._lock:
            watches = [self._watches[k] for source in autoscalers.SOURCES
                       for k in self._groups.get(f"Event:{source}", [])]
        if not watches:
            return None
        notes: list[tuple[str, AutoscalerNote]] = []
        unreadable: str | None = None
        for w in watches:
            failed, status = w.skipped, w.status()
            if failed is not None:
                unreadable = f"the autoscalers' Events could not be read ({failed.server_message})"
            elif not status.synced:
                unreadable = f"the autoscalers' Events are not read now ({status.error or status.state})"
            else:
                notes.extend(e.note for e in w.values() if e.note is not None)
        probed = self.probe.found() if mode is NodeAutoscaling.AUTO else Autoscaling()
        return autoscalers.autoscaling(mode, probed, autoscalers.notes(notes), unreadable)

    def _refuse_unsynced(self) -> None:
        missing = self.unsynced()
        if missing:
            said = ", ".join(f"{s.key} ({s.state.value}{': ' + s.error if s.error else ''})" for s in missing)
            raise NotSynced(f"the watch cache is not synced: {said}", doing="read the watch cache")
