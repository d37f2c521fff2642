"""Render each scrape target once per change of its inputs, not once per scrape.

A target's text depends on the pods of its node, the node, the `Values` and, for counters, the
clock. Rendering from scratch on every scrape costs O(pods) per target, so O(nodes x pods) per
scrape interval: at 800 nodes the sandbox's exporters could no longer answer Prometheus in time.
Here every target keeps what it rendered, keyed by exactly those inputs:

* pods: the providers' lists are snapshotted and grouped by node; a node whose pods did not
  change keeps the very same tuple, so an identity check tells whether its target is stale;
* values: `Values.generation` changes with every write, and between writes a value can change
  only at a breakpoint (`Values.next_change_after`), so a render holds until then;
* time: dcgm-exporter and kube-state-metrics do not depend on it. The two counters do (cAdvisor
  CPU seconds, node-exporter CPU seconds): for them the cache keeps a plan, the label text of
  every line and each counter as `integral up to s + rate * (now - s)`, which is the same float
  `Values.integrate` gives (see `Values.piece_start`), and only formats numbers per scrape.

kube-state-metrics depends on nothing but the pods, and each pod's lines on nothing but that
pod, so its lines are kept per pod and a change of some pods re-renders only those.

With `aggregate` set (a dcgm label style), each per-node exporter is also served as one target
for all nodes, with the labels Prometheus would have stored for each node's own target written
into the series (`devenv.exporters.targets`).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from devenv.exporters.exposition import Family, Labels, Sample, go_float, labels_text, sample_line
from devenv.exporters.model import (
    PAUSE_IMAGE,
    NodeView,
    PodView,
    container_cgroup,
    container_id,
    pod_cgroup,
    pods_on,
)
from devenv.exporters.render import (
    KSM_HELP,
    NODE_BOOT_UNIX,
    NODE_CPU_HELP,
    PER_NODE,
    ksm_order,
    ksm_pod_samples,
    node_cpu_series,
    render_dcgm,
    render_node_exporter,
)
from devenv.exporters.targets import DcgmStyle, node_target, stored_labels
from devenv.exporters.values import ABSENT, DEFAULTS, PAUSE_CPU_CORES, Kind, Values

_NO_PODS: tuple[PodView, ...] = ()
_CADVISOR = ("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "counter")
FamilyText = tuple[str, str, str, str]  # name, help, type, sample lines (each ending in a newline)
LabelMap = Callable[[Labels], Labels]


def assemble(families: Iterable[FamilyText]) -> str:
    """Prometheus text format from per-family line blocks; the same text `to_text` writes."""
    return "".join(f"# HELP {name} {help_}\n# TYPE {name} {type_}\n{body}"
                   for name, help_, type_, body in families if body)


def _static(families: Iterable[Family], relabel: LabelMap) -> list[FamilyText]:
    return [(f.name, f.help, f.type, "".join(sample_line(Sample(s.name, relabel(s.labels), s.value, s.timestamp_ms))
                                              + "\n" for s in f.samples)) for f in families]


@dataclass(frozen=True)
class _PodCpu:
    """A running pod's cAdvisor lines: label prefixes and each container's counter as a line."""

    created: float
    total_prefix: str
    pause_prefix: str
    containers: tuple[tuple[str | None, float, float, float], ...]  # prefix (None: ABSENT), s, integral to s, rate


@dataclass
class _Plan:
    """What a target serves between two changes of its inputs."""

    static: list[FamilyText]
    cadvisor: list[_PodCpu] | None = None
    node_cpu: list[tuple[str, float]] | None = None  # node-exporter: line prefix, share of uptime

    def families_at(self, now: float) -> list[FamilyText]:
        if self.cadvisor is not None:
            return [(*_CADVISOR, _cadvisor_lines(self.cadvisor, now))]
        if self.node_cpu is not None:
            values = _node_cpu_values(max(0.0, now - NODE_BOOT_UNIX))
            body = "".join(f"{prefix}{values[i]}\n" for i, (prefix, _) in enumerate(self.node_cpu))
            return [("node_cpu_seconds_total", NODE_CPU_HELP, "counter", body), *self.static]
        return self.static


@lru_cache(maxsize=8)
def _node_cpu_values(uptime: float) -> tuple[str, ...]:
    """The same on every node (all booted at NODE_BOOT_UNIX), so formatted once per scrape time."""
    return tuple(go_float(round(uptime * share, 2)) for _, share in node_cpu_series())


def _cadvisor_lines(pods: list[_PodCpu], now: float) -> str:
    """`render_cadvisor` at `now` from a plan; same floats, same text."""
    ts = f" {int(now * 1000)}\n"
    lines: list[str] = []
    for pod in pods:
        elapsed = max(0.0, now - pod.created)
        pause = PAUSE_CPU_CORES * elapsed
        total = pause
        children = [f"{pod.pause_prefix}{go_float(round(pause, 9))}{ts}"]
        for prefix, start, integral, rate in pod.containers:
            used = integral + rate * (now - start) if elapsed else 0.0
            total += used
            if prefix is not None:
                children.append(f"{prefix}{go_float(round(used, 9))}{ts}")
        lines.append(f"{pod.total_prefix}{go_float(round(total, 9))}{ts}")
        lines.extend(children)
    return "".join(lines)


@dataclass
class _Entry:
    node: NodeView
    pods: tuple[PodView, ...]
    generation: int
    since: float
    until: float
    plan: _Plan
    text: bytes | None = None  # per-node text of a plan that does not depend on the clock


@dataclass
class _Snapshot:
    pods: tuple[PodView, ...] = ()
    nodes: dict[str, NodeView] = field(default_factory=dict)
    by_node: dict[str, tuple[PodView, ...]] = field(default_factory=dict)
    generations: tuple[int | None, int | None] = (None, None)
    version: int = 0


class RenderCache:
    """Exposition text per target (and per aggregate), re-rendered only when an input changed.

    Providers are called on every scrape and their answer compared with the last one (cheap when
    they hand back the same objects), unless both have a `generation` attribute: a provider kept
    current by someone else (a watch) bumps it on every change, and is only called when it moved.

    `renders` counts full renders per (exporter, node) and `ksm_pod_renders` the pods whose KSM
    lines were rendered: what a test checks to see that an unchanged scrape did no work.
    """

    def __init__(self, pods_provider: Callable[[], Sequence[PodView]],
                 nodes_provider: Callable[[], Sequence[NodeView]], values: Values, *,
                 hostname_label: str | None = "Hostname", aggregate: DcgmStyle | None = None) -> None:
        self.pods_provider = pods_provider
        self.nodes_provider = nodes_provider
        self.values = values
        self.hostname_label = hostname_label
        self.aggregate = aggregate
        self.renders: collections.Counter[tuple[str, str | None]] = collections.Counter()
        self.ksm_pod_renders = 0
        self._lock = threading.RLock()
        self._snap = _Snapshot()
        self._entries: dict[tuple[str, str, bool], _Entry] = {}
        self._ksm: tuple[tuple[PodView, ...], bytes] | None = None
        self._ksm_memo: dict[PodView, tuple[str, ...]] = {}
        self._dcgm_all: tuple[int, int, float, float, bytes] | None = None

    # -- inputs --------------------------------------------------------------------------------
    def snapshot(self) -> _Snapshot:
        """The providers' pods and nodes, grouped by node; the same object while nothing changed."""
        with self._lock:
            snap = self._snap
            gens = (getattr(self.pods_provider, "generation", None), getattr(self.nodes_provider, "generation", None))
            if snap.version and None not in gens and gens == snap.generations:
                return snap
            pods = tuple(self.pods_provider())
            nodes = list(self.nodes_provider())
            same_pods = pods == snap.pods
            named: dict[str, NodeView] = {}
            for n in nodes:
                named.setdefault(n.name, n)
            if snap.version and same_pods and named == snap.nodes:
                snap.generations = gens
                return snap
            by_node = snap.by_node
            if not same_pods:
                groups: dict[str, list[PodView]] = {}
                for p in pods:
                    if p.node:
                        groups.setdefault(p.node, []).append(p)
                by_node = {}
                for name, group in groups.items():
                    ordered = tuple(pods_on(name, group))
                    old = snap.by_node.get(name)
                    by_node[name] = old if old == ordered else ordered  # keep identity: its targets stay valid
            self._snap = _Snapshot(snap.pods if same_pods else pods, named, by_node, gens, snap.version + 1)
            return self._snap

    # -- per target ----------------------------------------------------------------------------
    def body(self, exporter: str, node: str | None, now: float) -> bytes:
        """The text of one per-node target or of kube-state-metrics; KeyError if unknown."""
        with self._lock:
            snap = self.snapshot()
            if exporter == "kube-state-metrics":
                return self._ksm_body(snap)
            if exporter not in PER_NODE:
                raise KeyError(exporter)
            view = snap.nodes.get(node or "")
            if view is None:
                raise KeyError(node)
            entry = self._entry(exporter, view, snap, now, aggregate=False)
            if entry.text is not None:
                return entry.text
            text = assemble(entry.plan.families_at(now)).encode()
            if entry.plan.cadvisor is None and entry.plan.node_cpu is None:
                entry.text = text
            return text

    def aggregate_body(self, exporter: str, now: float) -> bytes:
        """One text for `exporter` on every node (GPU nodes only for dcgm), each series with the
        labels stored for its node's own target; nodes whose target is set down are left out."""
        if self.aggregate is None or exporter not in PER_NODE:
            raise KeyError(exporter)
        with self._lock:
            snap = self.snapshot()
            gen = self.values.generation
            if exporter == "dcgm" and self._dcgm_all is not None:
                version, generation, since, until, text = self._dcgm_all
                if (version, generation) == (snap.version, gen) and since <= now < until:
                    return text
            merged: dict[str, tuple[str, str, list[str]]] = {}
            until = self.values.next_change_after(now)
            for name in sorted(snap.nodes):
                view = snap.nodes[name]
                if (exporter == "dcgm" and view.gpus <= 0) or self.values.target_down(exporter, name, now):
                    continue
                entry = self._entry(exporter, view, snap, now, aggregate=True)
                until = min(until, entry.until)
                for fam, help_, type_, lines in entry.plan.families_at(now):
                    merged.setdefault(fam, (help_, type_, []))[2].append(lines)
            text = assemble((fam, h, t, "".join(parts)) for fam, (h, t, parts) in merged.items()).encode()
            if exporter == "dcgm":
                self._dcgm_all = (snap.version, gen, now, until, text)
            return text

    def _entry(self, exporter: str, view: NodeView, snap: _Snapshot, now: float, *, aggregate: bool) -> _Entry:
        key = (exporter, view.name, aggregate)
        pods = _NO_PODS if exporter == "node-exporter" else snap.by_node.get(view.name, _NO_PODS)  # it shows no pods
        gen = self.values.generation
        entry = self._entries.get(key)
        if (entry is not None and entry.node == view and entry.pods is pods and entry.generation == gen
                and entry.since <= now < entry.until):
            return entry
        relabel = self._relabel(exporter, view) if aggregate else _same
        plan, until = self._plan(exporter, view, pods, now, relabel)
        self.renders[(exporter, view.name)] += 1
        entry = self._entries[key] = _Entry(view, pods, gen, now, until, plan)
        if len(self._entries) > 8 * max(len(snap.nodes), 1):  # nodes went away: forget their targets
            self._entries = {k: e for k, e in self._entries.items() if k[1] in snap.nodes}
        return entry

    def _relabel(self, exporter: str, view: NodeView) -> LabelMap:
        target = node_target(exporter, view, dcgm_style=self.aggregate or "direct")
        if target is None:
            raise KeyError(f"{exporter} has no target on {view.name}")
        return lambda labels: tuple(sorted(stored_labels(labels, target).items()))

    def _plan(self, exporter: str, view: NodeView, pods: tuple[PodView, ...], now: float,
              relabel: LabelMap) -> tuple[_Plan, float]:
        until = self.values.next_change_after(now)
        if exporter == "dcgm":
            families = render_dcgm(view, pods, self.values, now, hostname_label=self.hostname_label)
            return _Plan(_static(families, relabel)), until
        if exporter == "node-exporter":
            rest = render_node_exporter(view, self.values, now)[1:]
            cpu = [(f"node_cpu_seconds_total{labels_text(relabel(labels))} ", share)
                   for labels, share in node_cpu_series()]
            return _Plan(_static(rest, relabel), node_cpu=cpu), until
        plans: list[_PodCpu] = []
        for pod in pods_on(view.name, pods):
            if pod.phase != "Running":
                continue
            if pod.created > now:  # its counters start later: plan again then
                until = min(until, pod.created)
            plans.append(self._pod_cpu(pod, now, relabel))
        return _Plan([], cadvisor=plans), until

    def _pod_cpu(self, pod: PodView, now: float, relabel: LabelMap) -> _PodCpu:
        """The counters of `render_cadvisor` for one pod, as of `now` until the next breakpoint."""
        name = _CADVISOR[0]

        def prefix(container: str, cgroup: str, image: str, cid: str) -> str:
            labels = (("container", container), ("cpu", "total"), ("id", cgroup), ("image", image), ("name", cid),
                      ("namespace", pod.namespace), ("pod", pod.name))
            return f"{name}{labels_text(relabel(labels))} "

        sandbox = container_id(pod.uid, "")
        containers = []
        for c in pod.containers:
            key = (pod.namespace, pod.name, c.name)
            start = self.values.piece_start(Kind.CPU, key, pod.created, now) if now > pod.created else pod.created
            level = self.values.level(Kind.CPU, key, start)
            rate = float(DEFAULTS[Kind.CPU] if level == ABSENT else level)
            integral = self.values.integrate(Kind.CPU, key, pod.created, start)
            absent = self.values.level(Kind.CPU, key, now) == ABSENT
            cid = container_id(pod.uid, c.name)
            containers.append((None if absent else prefix(c.name, container_cgroup(pod, cid), c.image, cid),
                               start, integral, rate))
        return _PodCpu(pod.created, prefix("", pod_cgroup(pod), "", ""),
                       prefix("", container_cgroup(pod, sandbox), PAUSE_IMAGE, sandbox), tuple(containers))

    # -- kube-state-metrics --------------------------------------------------------------------
    def _ksm_body(self, snap: _Snapshot) -> bytes:
        if self._ksm is not None and self._ksm[0] is snap.pods:
            return self._ksm[1]
        self.renders[("kube-state-metrics", None)] += 1
        names = list(KSM_HELP)
        memo: dict[PodView, tuple[str, ...]] = {}
        parts: list[list[str]] = [[] for _ in names]
        for pod in ksm_order(snap.pods):
            lines = memo.get(pod) or self._ksm_memo.get(pod)
            if lines is None:
                self.ksm_pod_renders += 1
                samples = ksm_pod_samples(pod)
                lines = tuple("".join(sample_line(s) + "\n" for s in samples.get(n, ())) for n in names)
            memo[pod] = lines
            for i, text in enumerate(lines):
                if text:
                    parts[i].append(text)
        self._ksm_memo = memo
        body = assemble((n, KSM_HELP[n], "gauge", "".join(parts[i])) for i, n in enumerate(names)).encode()
        self._ksm = (snap.pods, body)
        return body


def _same(labels: Labels) -> Labels:
    return labels
