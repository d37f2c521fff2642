"""What a cycle reads, as one `Observation` (the re-check's read, scoped to one object, is
`observe.scoped`, on the same helpers).

A cycle lists each kind once (paginated): the configured kinds, and pods, namespaces and nodes
only if the kinds do not include them and the policies need them; the same pod and namespace
lists give both the objects the expiry path judges and the views the pod triggers read. Usage
evidence is one query per distinct (signal, window) the policies need, never one per pod.

Where a pending policy is loaded, a read also tells whether nodes can be added and what node
autoscalers said about each pod (janitor.observe.autoscalers): their Events on pods, listed by
source, and in `--node-autoscaling auto` the probe for an autoscaler.
"""

from __future__ import annotations

import datetime
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from kubernetes.client import ApiClient

from janitor import errors, node_report
from janitor.decide import usage
from janitor.decide.autoscaling import AutoscalerNote, Autoscaling, NodeAutoscaling
from janitor.decide.evidence import CpuEvidence, CpuKey, Evidence, EvidenceWindow, GpuEvidence, GpuKey, PodKey
from janitor.decide.model import (
    NamespaceView,
    NodeInfo,
    ObjectView,
    Observation,
    PodView,
    ResourceKind,
    SkippedKind,
)
from janitor.decide.triggers import registry
from janitor.observe import activity, autoscalers, claims, cluster, evidence, kueue, parts, targets, views
from janitor.observe.cache import ClusterCache
from janitor.observe.carry import BusyCarry, in_scope
from janitor.observe.prometheus import (
    HONOR_LABELS,
    SERVICE_MONITOR,
    LabelMap,
    Matcher,
    PrometheusConfig,
    PrometheusSource,
)
from janitor.policy.model import Policy
from janitor.settings import Settings

logger = logging.getLogger(__name__)

Progress = Callable[[str, int], None]
GAP_STEP_BOUNDS = (datetime.timedelta(seconds=5), datetime.timedelta(seconds=60))


def gap_step(intervals: Mapping[str, datetime.timedelta] | None, fallback: datetime.timedelta | None
             ) -> datetime.timedelta:
    """The resolution GPU gaps are measured at: the shortest scrape interval Prometheus knows,
    kept between 5 s (the query's cost grows with window / step) and 60 s."""
    known = list((intervals or {}).values()) + ([fallback] if fallback else [])
    low, high = GAP_STEP_BOUNDS
    return min(max(min(known, default=datetime.timedelta(seconds=30)), low), high)


_K = TypeVar("_K")
CPU_STEP = datetime.timedelta(minutes=1)  # the CPU subquery's resolution: its peak is the busiest rate window


@dataclass(frozen=True)
class Needs:
    """What the policies read besides the configured kinds."""

    pods: bool = False
    nodes: bool = False
    oom: bool = False
    autoscalers: bool = False  # what node autoscalers say (pending policies)
    ghost_gpus: bool = False
    gpu: frozenset[GpuKey] = field(default_factory=frozenset)
    gpu_low: frozenset[GpuKey] = field(default_factory=frozenset)  # the lowest sample read too
    gpu_whole: frozenset[GpuKey] = field(default_factory=frozenset)  # read whole every cycle (Reads.gpu_whole)
    # Which nodes export the signal is read across the cluster (gpu_whole's, and the in-use check's
    # reads beside GPU_UTIL: decide.usage.read_beside).
    gpu_exporting: frozenset[GpuKey] = field(default_factory=frozenset)
    cpu: frozenset[CpuKey] = field(default_factory=frozenset)
    # Per query, the level above which every policy reading its answer calls a peak busy (the
    # highest threshold among them); a CPU query read both in cores and as a fraction of requests
    # has neither.
    gpu_busy_above: Mapping[GpuKey, float] = field(default_factory=dict)
    cpu_busy_above: Mapping[CpuKey, float] = field(default_factory=dict)  # cores
    cpu_busy_fraction: Mapping[CpuKey, float] = field(default_factory=dict)  # of each pod's requests
    activity: frozenset[str] = field(default_factory=frozenset)  # the activity rules' expressions

    @property
    def prometheus(self) -> bool:
        """Whether anything is to be asked of Prometheus."""
        return bool(self.gpu or self.cpu or self.ghost_gpus or self.activity)


def needs(policies: Iterable[Policy]) -> Needs:
    """What the policies and their in-use checks (decide.usage) read: the union of what each
    policy's triggers say they read (decide.triggers.spec.Reads)."""
    policies = tuple(policies)
    policies += usage.companions(policies)
    reads = [registry.of_policy(t).reads(t) for p in policies for t in p.triggers]
    low = frozenset(k for r in reads for k in r.gpu_low)
    # A query whose lowest sample someone reads keeps every GPU's rows: its busy GPUs are the point.
    gpu = [g for r in reads for g in r.gpu] + [(k, None) for k in low]
    cpu = [c for r in reads for c in r.cpu]
    return Needs(
        pods=any(p.triggers for p in policies),
        nodes=any(r.nodes for r in reads),
        oom=any(r.oom for r in reads),
        autoscalers=any(r.autoscalers for r in reads),
        ghost_gpus=any(r.ghost_gpus for r in reads),
        gpu=frozenset(k for k, _ in gpu),
        gpu_low=low,
        gpu_whole=frozenset(k for r in reads for k in r.gpu_whole),
        gpu_exporting=frozenset(k for r in reads for k in r.gpu_whole) | usage.read_beside(policies),
        cpu=frozenset(k for k, *_ in cpu),
        gpu_busy_above=_highest(gpu),
        cpu_busy_above=_highest([(k, cores) for k, cores, _ in cpu]),
        cpu_busy_fraction=_highest([(k, fraction) for k, _, fraction in cpu]),
        activity=frozenset(rule.expr for p in policies if p.activity is not None for rule in p.activity.rules),
    )


def _highest(levels: Sequence[tuple[_K, float | None]]) -> dict[_K, float]:
    """The highest level per key, for the keys where every level is known."""
    found: dict[_K, float] = {}
    unknown: set[_K] = set()
    for key, level in levels:
        if level is None:
            unknown.add(key)
        else:
            found[key] = max(level, found.get(key, level))
    return {k: v for k, v in found.items() if k not in unknown}


def prometheus_source(settings: Settings) -> PrometheusSource:
    prom = settings.prometheus
    if not prom.url:
        raise ValueError("the idle policies need --prometheus-url")
    labels = SERVICE_MONITOR if prom.dcgm_labels == "servicemonitor" else HONOR_LABELS
    token = _secret(prom.bearer_token_file, "--prometheus-bearer-token-file") if prom.bearer_token_file else None
    password = _secret(prom.password_file, "--prometheus-password-file") if prom.password_file else prom.password
    if (prom.client_cert_file is None) != (prom.client_key_file is None):
        raise ValueError("--prometheus-client-cert and --prometheus-client-key go together")
    return PrometheusSource(PrometheusConfig(
        prom.url, label_map=labels, extra_matchers=tuple(Matcher.parse(m) for m in prom.extra_matchers),
        bearer_token=token, basic_auth=(prom.username, password or "") if prom.username else None,
        verify=prom.ca_file or True, read_timeout=prom.timeout.total_seconds(),
        connect_timeout=min(3.0, prom.timeout.total_seconds()),
        client_cert=(prom.client_cert_file, prom.client_key_file) if prom.client_cert_file and prom.client_key_file
        else None))


def _secret(path: str, flag: str) -> str:
    """A credential from a file (a mounted Secret), read now so that a rotation is picked up."""
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot read it ({e.strerror or e})") from None


def _is(kind: ResourceKind, name: str) -> bool:
    return kind.group == "" and kind.kind == name


MAX_SCOPED_NAMESPACES = 300  # beyond this many, a cycle's queries name no namespace (the regex would outgrow them)


def covered_namespaces(policies: Sequence[Policy], namespaces: Mapping[str, NamespaceView], *,
                       everywhere: bool = True) -> list[str] | None:
    """The namespaces a policy that reads usage evidence covers (any trigger whose reads name a GPU or
    CPU query: idle, hung), by name and labels: a cycle's usage queries need no series from any
    other. None: every namespace (or too many to name). `namespaces` are those the janitor sees;
    unless it sees `everywhere` (`--namespaces`), all of them covered are still named."""
    idle = [p for p in policies if any((r := registry.of_policy(t).reads(t)).gpu or r.cpu or r.gpu_low
                                       for t in p.triggers)]
    names = [n for n, v in namespaces.items()
             if any(p.match.namespaces.matches(n) and p.match.namespace_selector.matches(v.labels) for p in idle)]
    return None if (everywhere and len(names) == len(namespaces)) or len(names) > MAX_SCOPED_NAMESPACES \
        else sorted(names)


CANNOT_TELL = frozenset({""})
"""`GpuEvidence.exporting` when the nodes could not be read: a node without a name exports the field,
so which node exports what cannot be told and every missing series is unknown. Not the read's
failure: its busy series still veto (a GPU held through a DRA claim is seen only there)."""


def read_evidence(source: PrometheusSource | None, settings: Settings, need: Needs, at: datetime.datetime,
                  pods: Sequence[PodKey] | None = None, namespaces: Sequence[str] | None = None, *,
                  carry: BusyCarry | None = None, covered: Sequence[PodView] = ()) -> Evidence:
    """One query per (signal, window) and per (window, ignored containers), or several where a
    whole read would load too many samples at once (`janitor.observe.parts`, estimated from the
    `covered` pods: those of `namespaces`); `pods` (a re-check's) or else `namespaces` (those the
    policies cover) scope them. With `carry` (the daemon's), the busy verdicts of `covered` pods
    are carried between cycles (`janitor.observe.carry`); a re-check never carries."""
    if source is None or not need.prometheus:
        return Evidence()
    prom = settings.prometheus
    carry = carry if pods is None else None
    since = carry.begin(at, source.runtime()) if carry is not None else None
    if not (need.gpu or need.cpu):
        read = targets.ScrapeIntervals(None)
    elif carry is not None:
        read = carry.intervals(at, functools.partial(targets.scrape_intervals, source))
    else:
        read = targets.scrape_intervals(source)
    usage = _Usage(source, settings, need, at, read.jobs, pods, namespaces, covered)
    gpu: dict[GpuKey, GpuEvidence] = {}
    for key in sorted(need.gpu, key=str):
        level = need.gpu_busy_above.get(key)
        if carry is None or level is None or key in need.gpu_whole or key in need.gpu_low:
            gpu[key] = usage.gpu(key, None)
        else:
            gpu[key] = carry.gpu((key, level), since, at, covered, functools.partial(usage.gpu_busy, key, level),
                                 functools.partial(usage.gpu, key))
    exporting: dict[str, frozenset[str] | str] = {}  # by signal: a query each, whatever the windows
    for key in sorted(need.gpu_exporting, key=str):
        found = gpu.get(key)
        if found is None or found.failed:
            continue
        nodes = exporting.get(key[0])
        if nodes is None:
            nodes = exporting[key[0]] = evidence.exporting_nodes(
                source, signal=key[0], at=at, labels=usage.labels, hostname_label=prom.hostname_label)
            if not isinstance(nodes, frozenset):
                logger.warning("which nodes export %s is unknown (%s): a pod without its series is unknown on it",
                               key[0], nodes)
        gpu[key] = replace(found, exporting=nodes) if isinstance(nodes, frozenset) else replace(
            found, exporting=CANNOT_TELL, exporting_failed=nodes)
    cpu: dict[CpuKey, CpuEvidence] = {}
    for ckey in sorted(need.cpu, key=str):
        cores, fraction = need.cpu_busy_above.get(ckey), need.cpu_busy_fraction.get(ckey)
        if carry is None or (cores is None and fraction is None):
            cpu[ckey] = usage.cpu(ckey, None)
        else:
            cpu[ckey] = carry.cpu((ckey, cores, fraction), since, at, covered,
                                  functools.partial(usage.cpu_busy, ckey), functools.partial(usage.cpu, ckey))
    if carry is not None:
        carry.end()
    ghosts = (evidence.ghost_gpus(source, at=at, labels=usage.labels, hostname_label=prom.hostname_label)
              if need.ghost_gpus and pods is None else None)
    return Evidence(gpu, cpu, ghosts, activity.read(source, need.activity, at), read.error,
                    read.error is not None and prom.scrape_interval is None)


@dataclass(frozen=True)
class _Usage:
    """The usage queries of one read: each (signal, window) or CPU query, over the whole window of
    the pods or namespaces in scope (or of the pods `scoped` names), or over the last `span` only
    for what was busy then (`janitor.observe.carry`)."""

    source: PrometheusSource
    settings: Settings
    need: Needs
    at: datetime.datetime
    intervals: Mapping[str, datetime.timedelta] | None
    pods: Sequence[PodKey] | None
    namespaces: Sequence[str] | None
    covered: Sequence[PodView] = ()  # the pods of `namespaces`, for the estimate of a whole read's parts

    @property
    def labels(self) -> LabelMap:
        return self.source.config.label_map

    @functools.cached_property
    def step(self) -> datetime.timedelta:
        return gap_step(self.intervals, self.settings.prometheus.scrape_interval)

    @functools.cached_property
    def shortest(self) -> datetime.timedelta:
        """The shortest scrape interval known (else the step): the most raw samples a series holds."""
        known = list((self.intervals or {}).values()) + [i for i in [self.settings.prometheus.scrape_interval] if i]
        return min(known, default=self.step)

    def _parts(self, window: datetime.timedelta, step: datetime.timedelta, load: Callable[[PodView], int],
               scoped: Sequence[PodKey] | None) -> list[parts.Part]:
        """The queries of one whole read (`janitor.observe.parts`): a re-check's few pods in one."""
        if self.pods is not None:
            return [parts.Part(None, tuple(self.pods))]
        return parts.split(budget=self.settings.prometheus.query_samples,
                           cost=parts.Cost.of(window, step, self.shortest), load=load,
                           covered=self.covered, namespaces=self.namespaces, pods=scoped)

    def gpu(self, key: GpuKey, scoped: Sequence[PodKey] | None) -> GpuEvidence:
        signal, window = key
        if scoped is not None and not scoped:
            return GpuEvidence(EvidenceWindow(signal, window, self.step, self.at))
        prom, need = self.settings.prometheus, self.need
        return parts.read(self._parts(window, self.step, parts.gpu_load, scoped), lambda part: evidence.gpu_evidence(
            self.source, signal=signal, window=window, step=self.step, at=self.at, labels=self.labels,
            hostname_label=prom.hostname_label, pods=part.pods, intervals=self.intervals,
            fallback=prom.scrape_interval, namespaces=part.namespaces, outside=part.outside,
            busy_above=need.gpu_busy_above.get(key), low=key in need.gpu_low))

    def gpu_busy(self, key: GpuKey, level: float, span: datetime.timedelta) -> GpuEvidence:
        return evidence.gpu_busy(self.source, signal=key[0], since=span, step=self.step, at=self.at,
                                 labels=self.labels, hostname_label=self.settings.prometheus.hostname_label,
                                 namespaces=self.namespaces, busy_above=level)

    def cpu(self, key: CpuKey, scoped: Sequence[PodKey] | None) -> CpuEvidence:
        window, ignore = key
        if scoped is not None and not scoped:
            return CpuEvidence(EvidenceWindow(evidence.CPU_METRIC, window, CPU_STEP, self.at))
        prom, need = self.settings.prometheus, self.need
        return parts.read(self._parts(window, CPU_STEP, parts.cpu_load, scoped), lambda part: evidence.cpu_evidence(
            self.source, window=window, step=CPU_STEP, at=self.at, ignore_containers=ignore, pods=part.pods,
            intervals=self.intervals, fallback=prom.scrape_interval, namespaces=part.namespaces,
            outside=part.outside, busy_above=need.cpu_busy_above.get(key),
            busy_fraction=need.cpu_busy_fraction.get(key)))

    def cpu_busy(self, key: CpuKey, span: datetime.timedelta) -> CpuEvidence:
        return evidence.cpu_busy(self.source, since=span, step=CPU_STEP, at=self.at, ignore_containers=key[1],
                                 namespaces=self.namespaces, busy_above=self.need.cpu_busy_above.get(key),
                                 busy_fraction=self.need.cpu_busy_fraction.get(key))


def oom_reports(api: ApiClient, namespaces: Sequence[str] | None, page_size: int) -> dict[str, tuple[Any, ...]]:
    items: list[Mapping[str, Any]] = []
    for page, _ in cluster.list_items(api, views.EVENTS, page_size=page_size, namespaces=namespaces,
                                      field_selector=f"reason={node_report.EVENT_OOM}"):
        items.extend(page)
    return views.oom_reports(items)


def autoscaler_notes(api: ApiClient, settings: Settings, need: Needs, namespaces: Sequence[str] | None
             ) -> tuple[Autoscaling, dict[str, tuple[AutoscalerNote, ...]]]:
    """Whether nodes can be added, and what autoscalers said about pods in `namespaces`."""
    mode = settings.cluster.node_autoscaling
    if not need.autoscalers or mode is NodeAutoscaling.NONE:
        return Autoscaling(), {}
    found, unreadable = autoscalers.read_notes(api, namespaces, settings.cluster.page_size)
    probed = autoscalers.probe(api) if mode is NodeAutoscaling.AUTO else Autoscaling()
    return autoscalers.autoscaling(mode, probed, found, unreadable), found


def read(api: ApiClient, settings: Settings, policies: Sequence[Policy], now: datetime.datetime, *,
         source: PrometheusSource | None = None, progress: Progress | None = None) -> Observation:
    """The cycle's observation. `at` is the Date header of the first page read: the earliest moment
    of the read, so that objects read later look younger, never older, than they are."""
    c = settings.cluster
    need = needs(policies)
    objects: list[ObjectView] = []
    pods: list[PodView] = []
    namespaces: dict[str, NamespaceView] = {}
    skipped: list[SkippedKind] = []
    first: datetime.datetime | None = None

    def listed(kind: ResourceKind, *, as_objects: bool) -> None:
        nonlocal first
        count = 0
        for items, date in cluster.list_items(api, kind, page_size=c.page_size, namespaces=c.namespaces):
            first = first or date
            for item in items:
                if as_objects:
                    objects.append(cluster.to_view(kind, item))
                if _is(kind, "Pod"):
                    pods.append(views.pod_view(item))
                elif _is(kind, "Namespace"):
                    view = views.namespace_view(item)
                    namespaces[view.name] = view
            count += len(items)
            if progress is not None:
                progress(kind.key, count)

    done: set[str] = set()
    for kind in c.kinds:
        try:
            listed(kind, as_objects=True)
            done.add(kind.key)
        except (errors.NotFound, errors.Forbidden) as e:
            skipped.append(cluster.skipped(kind, e))
    if need.pods and views.PODS.key not in done:
        listed(views.PODS, as_objects=False)
    if views.NAMESPACES.key not in done:
        listed(views.NAMESPACES, as_objects=False)
    nodes: list[NodeInfo] = []
    if need.nodes:
        for items, _ in cluster.list_items(api, views.NODES, page_size=c.page_size):
            nodes.extend(views.node_info(item) for item in items)
    oom = oom_reports(api, c.namespaces, c.page_size) if need.oom else {}
    scaling, said = autoscaler_notes(api, settings, need, c.namespaces)
    at = first or now
    viewed = kueue.attach(api, objects, page_size=c.page_size, namespaces=kueue.looked_up(policies, namespaces))
    held = claims.for_cycle(api, c.namespaces, c.claims_after, c.page_size,
                            pods if need.pods or views.PODS.key in done else None, judged=claims.judged(policies))
    covered = covered_namespaces(policies, namespaces, everywhere=c.namespaces is None)
    return Observation(first, viewed, tuple(pods), namespaces,
                       tuple(nodes), need.nodes,
                       read_evidence(source, settings, need, at, namespaces=covered, covered=in_scope(pods, covered)),
                       oom, tuple(skipped), scaling, said, claims=held)


def read_cached(cache: ClusterCache, settings: Settings, policies: Sequence[Policy], at: datetime.datetime | None,
                now: datetime.datetime, *, source: PrometheusSource | None = None,
                first_sync: float = 0.0, carry: BusyCarry | None = None) -> Observation:
    """The cycle's observation from the watch cache: no list at all once it is synced. `at` is the
    apiserver's Date from a request of this cycle. Raises `NotSynced` when a kind it needs is not
    synced (after waiting up to `first_sync` seconds for kinds on their way, such as those just
    added; never for a request past its timeout: `ClusterCache.wait`)."""
    need = needs(policies)
    mode = settings.cluster.node_autoscaling
    scaled = need.autoscalers and mode is not NodeAutoscaling.NONE
    cache.ensure(pods=need.pods, nodes=need.nodes, oom=need.oom, scaling=scaled)
    if first_sync > 0:
        cache.wait(first_sync)
    snap = cache.snapshot()
    said = snap.autoscaler if scaled else {}
    probed = cache.probe.found() if scaled and mode is NodeAutoscaling.AUTO else Autoscaling()
    scaling = autoscalers.autoscaling(mode, probed, said, snap.autoscaler_unreadable) if scaled else Autoscaling()
    objects = kueue.attach(cache.api, snap.objects, namespaces=kueue.looked_up(policies, snap.namespaces))
    covered = covered_namespaces(policies, snap.namespaces, everywhere=settings.cluster.namespaces is None)
    held = claims.for_cycle(cache.api, settings.cluster.namespaces, settings.cluster.claims_after,
                            settings.cluster.page_size,
                            # pods forbidden: the snapshot has none, which says nothing of claims
                            snap.pods if need.pods and all(s.kind != "Pod" for s in snap.skipped) else None,
                            judged=claims.judged(policies), discovery=cache.claims_discovery)
    return Observation(at, objects, snap.pods, snap.namespaces,
                       snap.nodes if need.nodes else (), need.nodes,
                       read_evidence(source, settings, need, at or now, namespaces=covered, carry=carry,
                                     covered=in_scope(snap.pods, covered)),
                       snap.oom if need.oom else {}, snap.skipped, scaling, said,
                       snap.nodes_at if need.nodes else None, held)
