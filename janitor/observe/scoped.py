"""What the re-check before acting reads, scoped to one object, as an `Observation`.

It reads only what one action's decision depends on: the object (by name, checked by UID), its
owner chain, its namespace, and for a workload its pods (by its selector, so pods of a ReplicaSet
created since the cycle's read are there too) with their owner chains, the usage evidence of
exactly those pods, and the nodes, OOM reports or autoscalers' words the trigger reads (whether
nodes can be added, with the signs `elsewhere` gives from other namespaces), and the
claims of the namespace where one of those pods names one (its GPU may be held through it); for a
DRA claim, the claim and every pod of its namespace, judged with the daemon's memory of the claim.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from janitor.decide.autoscaling import Autoscaling, NodeAutoscaling
from janitor.decide.claims import ClaimsRead
from janitor.decide.claims import State as ClaimState
from janitor.decide.evidence import Evidence, PodKey
from janitor.decide.model import Action, ActionType, NamespaceView, NodeInfo, ObjectView, Observation, OwnerRef, PodView
from janitor.decide.triggers import registry
from janitor.decide.triggers.spec import NodeScope
from janitor.observe import claims, cluster, kueue, views
from janitor.observe.observation import autoscaler_notes, needs, oom_reports, read_evidence
from janitor.observe.prometheus import PrometheusSource
from janitor.policy.model import Policy
from janitor.settings import Settings


class _Scoped:
    """Objects read by name for one re-check, each checked by UID, each read once."""

    def __init__(self, api: ApiClient, settings: Settings) -> None:
        self.api = api
        self.kinds = {k.kind: k for k in (*settings.cluster.kinds, views.PODS, views.NAMESPACES, claims.CLAIMS)}
        self.objects: dict[str, ObjectView] = {}
        self.date: datetime.datetime | None = None

    def get(self, kind_name: str, namespace: str | None, name: str, uid: str) -> dict[str, Any] | None:
        kind = self.kinds.get(kind_name)
        if kind is None:
            return None  # a kind the janitor does not read: the chain stays unknown, never acted on
        item, date = cluster.read_item(self.api, kind, namespace if kind.namespaced else None, name)
        self.date = self.date or date
        if item is None or (item.get("metadata") or {}).get("uid") != uid:
            return None
        self.objects.setdefault(uid, cluster.to_view(kind, item))
        return item

    def climb(self, controller: OwnerRef | None, namespace: str | None) -> tuple[str, ...]:
        """Read the owner chain up from `controller`; the UIDs on it."""
        chain: list[str] = []
        while controller is not None and controller.uid not in chain:  # owner references may form a cycle
            view = self.objects.get(controller.uid)
            if view is None and self.get(controller.kind, namespace, controller.name, controller.uid) is not None:
                view = self.objects.get(controller.uid)
            if view is None:
                break
            chain.append(controller.uid)
            controller = view.controller
        return tuple(chain)


def _pods_of(scoped: _Scoped, target: ObjectView, item: Mapping[str, Any], page_size: int) -> list[PodView]:
    """The target's pods now: listed by its selector's matchLabels when it has one (a superset
    when it also has expressions), else every pod of its namespace; kept if their chain reaches it."""
    labels = ((item.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None
    found = []
    for items, _ in cluster.list_items(scoped.api, views.PODS, page_size=page_size,
                                       namespaces=[target.ref.namespace or ""], label_selector=selector):
        for raw in items:
            pod = views.pod_view(raw)
            if target.ref.uid in scoped.climb(pod.controller, pod.ref.namespace):
                found.append(pod)
    return found


def read_scoped(api: ApiClient, settings: Settings, policies: Sequence[Policy], action: Action,
                now: datetime.datetime, *, source: PrometheusSource | None = None,
                claims_seen: Mapping[str, tuple[ClaimState, datetime.datetime]] | None = None,
                elsewhere: Callable[[], Autoscaling] | None = None) -> Observation | None:
    """What `action`'s decision depends on, read now; None when its object is gone or recreated.
    `claims_seen`: since when the daemon has seen each claim hold devices with no consumer (a claim's
    re-check judges the claim with it; none known, the count starts again and nothing is due).
    `elsewhere`: whether nodes can be added, as the daemon knows it now beyond the target's
    namespace (`fresh_look.Beyond`), asked where the trigger reads the autoscalers: its signs
    only hold, never act."""
    target = action.target
    scoped = _Scoped(api, settings)
    item = scoped.get(target.kind, target.namespace, target.name, target.uid)
    if item is None:
        return None
    view = scoped.objects[target.uid]
    pods: list[PodView] = []
    if target.kind == "Pod" and target.api_version == "v1":
        pods.append(views.pod_view(item))
    scoped.climb(view.controller, target.namespace)
    reads = registry.spec(action.trigger).recheck
    held: ClaimsRead | None = None
    if reads.claims and target.kind == claims.CLAIMS.kind and target.api_version == claims.CLAIMS.api_version:
        # Every pod of its namespace: which of them it is reserved for, and whether one names it.
        for page, _ in cluster.list_items(api, views.PODS, page_size=settings.cluster.page_size,
                                          namespaces=[target.namespace or ""]):
            pods.extend(views.pod_view(raw) for raw in page)
        held = claims.scoped(api, item, target.api_version, pods, claims_seen or {})
    elif reads.pods and target.kind != "Pod":
        pods = _pods_of(scoped, view, item, settings.cluster.page_size)
    if held is None and reads.usage and any(p.resource_claims for p in pods):
        # A pod's GPU may be held through its claim: unread, one without series is of unknown use.
        held = claims.read(api, [target.namespace or ""], page_size=settings.cluster.page_size)
    namespaces: dict[str, NamespaceView] = {}
    name = target.name if target.kind == "Namespace" else target.namespace
    if name:
        raw, _ = cluster.read_item(api, views.NAMESPACES, None, name)
        if raw is not None:
            namespaces[name] = views.namespace_view(raw)
    nodes: list[NodeInfo] = []
    nodes_known = False
    if reads.nodes is NodeScope.ALL:
        for items, _ in cluster.list_items(api, views.NODES, page_size=settings.cluster.page_size):
            nodes.extend(views.node_info(i) for i in items)
        nodes_known = True
    elif reads.nodes is NodeScope.OF_PODS:
        for node in {p.node for p in pods if p.node}:
            raw, _ = cluster.read_item(api, views.NODES, None, node)
            nodes.extend([views.node_info(raw)] if raw is not None else [])
        nodes_known = True
    need = needs(policies)
    oom = oom_reports(api, [target.namespace or ""], settings.cluster.page_size) if reads.oom and need.oom else {}
    # A scale-up triggered (or a node nominated) since the cycle's read stops the action. An
    # autoscaler's Events on a pod of any namespace are a sign that nodes can be added: beyond this
    # namespace, the signs come from `elsewhere`.
    scaling, said = autoscaler_notes(api, settings, need, [target.namespace or ""]) if reads.autoscalers else (
        Autoscaling(), {})
    # Asked only where a sign from beyond could change the verdict.
    if elsewhere is not None and reads.autoscalers and not scaling.present \
            and settings.cluster.node_autoscaling is NodeAutoscaling.AUTO and (beyond := elsewhere()).signs:
        scaling = Autoscaling(tuple(dict.fromkeys((*scaling.signs, *beyond.signs))),
                              tuple(dict.fromkeys((*scaling.sources, *beyond.sources))))
    keys = [PodKey(p.ref.namespace or "", p.ref.name) for p in pods]
    # Every usage signal the policies read, not only the acting trigger's: busy on any one vetoes.
    found = read_evidence(source, settings, need, scoped.date or now, keys) if reads.usage and pods else Evidence()
    objects = tuple(scoped.objects.values())  # a suspend goes through the Kueue Workload that admits it
    objects = kueue.attach(api, objects, every=True) if action.type is ActionType.SUSPEND or reads.kueue else objects
    return Observation(scoped.date, objects, tuple(pods), namespaces, tuple(nodes),
                       nodes_known, found, oom, autoscaling=scaling, autoscaler=said, claims=held)
