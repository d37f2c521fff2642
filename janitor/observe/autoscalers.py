"""What node autoscalers say: their Events on pods, classified once, and the signs that one runs.

cluster-autoscaler and Karpenter say on a pod whether a node comes for it; their words are the only
record of that, so they are read here, once, into `AutoscalerNote`s (decide never reads the words):

- cluster-autoscaler (source `cluster-autoscaler`): `TriggeredScaleUp` "pod triggered scale-up:
  [{gpu-pool 0->1 (max: 4)}]" is a node coming; `NotTriggerScaleUp` "pod didn't trigger scale-up:
  <count> <reason>, ..." lists a reason per node group, aggregated, in no stable order (older
  versions add "(it wouldn't fit if a new node is added)" whatever the reasons). Only scheduler
  predicates a node group's template fails for good (Insufficient X, node affinity/selector,
  untolerated taint) on every group mean never; a group at its maximum size, the cluster at its
  maximum, a quota: a limit; backoff, a group not ready, all-or-nothing, the expander: not now;
  any other reason, or none, is not understood. One reason not understood makes it all so.
- Karpenter (source `karpenter`): `Nominated` "Pod should schedule on: nodeclaim/x[, node/y]" is a
  node coming; `FailedScheduling` "Failed to schedule pod, <err>; <err>" (one error per NodePool)
  says never only where every error is one of requirements, resources, taints or DRA; NodePool
  limits are a limit, offerings and minValues not now (typographic apostrophes read as ASCII).

Event objects are folded per pod into the newest of each (source, reason), with since when it has
said the same (janitor.decide.autoscaling reads how long and how recently). The signs that nodes
can be added (`--node-autoscaling auto`): cluster-autoscaler's status ConfigMap, Karpenter's API
group, or any of these Events on a pod; a sign that cannot be read counts as one.
"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from janitor import errors, kubeapi
from janitor.decide.autoscaling import AutoscalerNote, Autoscaling, NodeAutoscaling, Said
from janitor.decide.model import ResourceKind
from janitor.observe import cluster, watch

logger = logging.getLogger(__name__)

CLUSTER_AUTOSCALER, KARPENTER = "cluster-autoscaler", "karpenter"
SOURCES = (CLUSTER_AUTOSCALER, KARPENTER)
REASONS = {CLUSTER_AUTOSCALER: ("TriggeredScaleUp", "NotTriggerScaleUp"), KARPENTER: ("Nominated", "FailedScheduling")}
STATUS_CONFIGMAP = ("kube-system", "cluster-autoscaler-status")
KARPENTER_GROUP = "karpenter.sh"
EVENTS = ResourceKind("", "v1", "Event", "events")
CONFIGMAPS = ResourceKind("", "v1", "ConfigMap", "configmaps")

_COMBINED = "(combined from similar events): "  # client-go's aggregator, past 10 similar Events in 10 minutes
_GROUP = re.compile(r"\{(\S+) (\d+)->(\d+) \(max: (\d+)\)\}")
_CA_NO = re.compile(r"^pod didn't trigger scale-up(?: \(it wouldn't fit if a new node is added\))?:?\s*(.*)$", re.S)
_CA_ITEM = re.compile(r",\s*(?=\d+ )")  # "<count> <reason>" items; a quota's resources hold ", " too
_CA_LIMITED = ("max node group size reached", "max total nodes in cluster reached", "exceeded quota")
_CA_NOT_NOW = ("in backoff after failed scale-up", "not ready for scale-up", "all-or-nothing strategy",
               "expansion options filtered out")
_CA_NEVER = ("Insufficient ", "node(s) didn't match Pod's node affinity", "node(s) didn't match node selector",
             "node(s) had untolerated taint", "node(s) had taint")
_KARPENTER_FAILED = "Failed to schedule pod, "
_KARPENTER_LIMITED = ("exceed limits for nodepool", "limits have been exhausted")
_KARPENTER_NOT_NOW = ("offering", "minValues")
_KARPENTER_NEVER = ("incompatible requirements", "did not tolerate taint", "no instance type has enough resources",
                    "no instance type met all requirements",
                    "no instance type met the scheduling requirements or had enough resources",
                    "filtered out all available instance types",
                    "Dynamic Resource Allocation requirements that are not yet supported")


def field_selector(source: str) -> str:
    """The Events of one autoscaler on pods: both post on other objects too (nodes, NodePools)."""
    return f"source={source},involvedObject.kind=Pod"


def _overall(verdicts: Sequence[Said]) -> Said:
    if not verdicts:
        return Said.UNKNOWN
    for said in (Said.LIMITED, Said.NOT_NOW, Said.UNKNOWN):
        if said in verdicts:
            return said
    return Said.NEVER


def _ca_item(item: str) -> Said:
    reason = re.sub(r"^\d+ ", "", item.strip())
    if reason.startswith(_CA_LIMITED):
        return Said.LIMITED
    if any(words in reason for words in _CA_NOT_NOW):
        return Said.NOT_NOW
    return Said.NEVER if reason.startswith(_CA_NEVER) else Said.UNKNOWN


def _karpenter_error(error: str) -> Said:
    if any(words in error for words in _KARPENTER_LIMITED):
        return Said.LIMITED
    if any(words in error for words in _KARPENTER_NOT_NOW):
        return Said.NOT_NOW
    return Said.NEVER if any(words in error for words in _KARPENTER_NEVER) else Said.UNKNOWN


def classify(source: str, reason: str, message: str) -> tuple[Said, str, tuple[str, ...]] | None:
    """(what it says, its words after the fixed part, the node groups or NodeClaims coming) of one
    Event; None for an Event that says nothing about a node for the pod."""
    text = message.replace("\u2019", "'").strip()
    text = text.removeprefix(_COMBINED)
    if (source, reason) == (CLUSTER_AUTOSCALER, "TriggeredScaleUp"):
        groups = tuple(f"{g} {old}->{new} (max: {top})" for g, old, new, top in _GROUP.findall(text))
        return Said.COMING, text.removeprefix("pod triggered scale-up: "), groups
    if (source, reason) == (CLUSTER_AUTOSCALER, "NotTriggerScaleUp"):
        found = _CA_NO.match(text)
        if found is None:
            return Said.UNKNOWN, text, ()
        detail = found.group(1).strip()
        items = [i for i in _CA_ITEM.split(detail) if i.strip()] if detail else []
        return _overall([_ca_item(i) for i in items]), detail, ()
    if (source, reason) == (KARPENTER, "Nominated"):
        body = text.removeprefix("Pod should schedule on:").strip()
        return Said.COMING, body, tuple(t.strip() for t in body.split(",") if t.strip())
    if (source, reason) == (KARPENTER, "FailedScheduling"):
        if not text.startswith(_KARPENTER_FAILED):
            return Said.UNKNOWN, text, ()
        detail = text.removeprefix(_KARPENTER_FAILED)
        return _overall([_karpenter_error(e) for e in detail.split("; ") if e.strip()]), detail, ()
    return None


def note(item: Mapping[str, Any]) -> tuple[str, AutoscalerNote] | None:
    """(the pod's uid, the note) of one Event, or None when it is not an autoscaler's word on a pod."""
    involved = item.get("involvedObject") or {}
    source = (item.get("source") or {}).get("component") or item.get("reportingComponent") or ""
    uid, reason = involved.get("uid"), item.get("reason") or ""
    if not uid or involved.get("kind") != "Pod" or reason not in REASONS.get(source, ()):
        return None
    said = classify(source, reason, item.get("message") or "")
    if said is None:
        return None
    at = cluster.api_time
    first = at(item.get("firstTimestamp")) or at(item.get("eventTime")) or \
        at((item.get("metadata") or {}).get("creationTimestamp"))
    last = at((item.get("series") or {}).get("lastObservedTime")) or at(item.get("lastTimestamp")) or \
        at(item.get("eventTime")) or first
    return uid, AutoscalerNote(source, reason, said[0], first, last, said[1], said[2])


def _when(n: AutoscalerNote) -> tuple[bool, datetime.datetime]:
    return n.last is not None, n.last or datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)


def notes(found: Iterable[tuple[str, AutoscalerNote]]) -> dict[str, tuple[AutoscalerNote, ...]]:
    """Per pod uid, the newest note of each (source, reason); its `first` is the earliest of the
    notes of that kind saying the same (cluster-autoscaler's reasons in another order are another
    Event object, yet the same word)."""
    kinds: dict[tuple[str, str, str], list[AutoscalerNote]] = {}
    for uid, n in found:
        kinds.setdefault((uid, n.source, n.reason), []).append(n)
    folded: dict[str, list[AutoscalerNote]] = {}
    for (uid, _, _), said in sorted(kinds.items()):
        newest = max(said, key=_when)
        firsts = [n.first for n in said if n.said is newest.said and n.first is not None]
        folded.setdefault(uid, []).append(AutoscalerNote(newest.source, newest.reason, newest.said,
                                                         min(firsts, default=newest.first), newest.last,
                                                         newest.detail, newest.targets))
    return {uid: tuple(n) for uid, n in folded.items()}


def read_notes(api: ApiClient, namespaces: Sequence[str] | None, page_size: int
               ) -> tuple[dict[str, tuple[AutoscalerNote, ...]], str | None]:
    """The autoscalers' notes on pods in `namespaces` (None: all), and why they could not be read
    (None: they were)."""
    found: list[tuple[str, AutoscalerNote]] = []
    try:
        for source in SOURCES:
            for items, _ in cluster.list_items(api, EVENTS, page_size=page_size, namespaces=namespaces,
                                              field_selector=field_selector(source)):
                found.extend(n for n in map(note, items) if n is not None)
    except errors.Unauthorized:
        raise
    except errors.KubeError as e:
        logger.warning("cannot read the autoscalers' Events: %s; pods that fit no node wait", e)
        return {}, f"the autoscalers' Events could not be read ({e.server_message})"
    return notes(found), None


def probe(api: ApiClient) -> Autoscaling:
    """Signs of a node autoscaler that do not expire as Events do: cluster-autoscaler's status
    ConfigMap (it rewrites it every 10 s) and Karpenter's API group (its CRDs), with the
    autoscalers they show running. A sign that cannot be read counts as one: it cannot be ruled out."""
    signs: list[str] = []
    sources: list[str] = []
    namespace, name = STATUS_CONFIGMAP
    checks = ((f"cluster-autoscaler's status ConfigMap {namespace}/{name}", kubeapi.path(CONFIGMAPS, namespace, name),
               CLUSTER_AUTOSCALER),
              (f"Karpenter's API group {KARPENTER_GROUP}", f"/apis/{KARPENTER_GROUP}", KARPENTER))
    for sign, path, source in checks:
        try:
            kubeapi.request(api, "GET", path, accept=watch.metadata_accept(as_list=False), doing=f"look for {sign}")
        except errors.NotFound:
            continue
        except errors.Unauthorized:
            raise
        except errors.KubeError as e:
            sign = f"{sign} could not be looked for ({e.server_message}), so it is not ruled out"
        signs.append(sign)
        sources.append(source)
    return Autoscaling(tuple(signs), tuple(sources))


PROBE_SECONDS = 300.0  # the watch cache's cycles ask again this often; the re-check before acting always does


class Probe:
    """`probe` kept for `PROBE_SECONDS`: a steady cycle from the watch cache asks the apiserver
    for nothing it does not need; an autoscaler installed since is seen within minutes, and its
    Events on pods are a sign at once."""

    def __init__(self, api: ApiClient, every: float = PROBE_SECONDS) -> None:
        self.api, self.every = api, every
        self._lock = threading.Lock()
        self._found = Autoscaling()
        self._at: float | None = None

    def found(self) -> Autoscaling:
        with self._lock:
            if self._at is None or time.monotonic() - self._at >= self.every:
                self._found, self._at = probe(self.api), time.monotonic()
            return self._found


def autoscaling(mode: NodeAutoscaling, probed: Autoscaling, found: Mapping[str, Sequence[AutoscalerNote]],
                unreadable: str | None = None) -> Autoscaling:
    """Whether nodes can be added, by the admin's word or else by the signs found."""
    if mode is NodeAutoscaling.NONE:
        return Autoscaling()
    if mode is NodeAutoscaling.PRESENT:
        return Autoscaling(("--node-autoscaling present",))
    signs = list(probed.signs)
    if any(found.values()):
        signs.append("autoscaler Events on pods")
    if unreadable:
        signs.append(unreadable)
    return Autoscaling(tuple(signs), probed.sources)
