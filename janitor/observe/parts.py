"""A whole read of usage evidence in parts, each under a budget of samples.

Why: a usage query loads every sample of every series it selects over the policy's window at once
(what Prometheus reports as `peakSamples`), and Prometheus refuses a query above its
`--query.max-samples` (50 M by default) with an error. At 20,000 GPUs and 4-hour windows one
whole read loads about 37 M: a cluster a third larger, or a 6-hour window, and every cycle's GPU
evidence would fail, so the janitor would judge nothing idle, ever. The evaluation time grows the
same way and meets `--prometheus-timeout`. So a whole read whose estimate passes the budget
(`--prometheus-query-samples`) is asked in parts:

- **by namespace**, when the read names namespaces (or none): each part names whole namespaces,
  so together the parts answer exactly what the one query would, the series of pods gone within
  the window included (the multi-signal trigger reads those to tell which nodes export a field).
  When the read names no namespace, a last part asks for every namespace the others do not name;
- **by pod**, when the read names its pods (those a steady cycle reads whole): each part names
  some of them, and is estimated with every pod its matchers select (`_pod_groups`).

The estimate counts what the observation knows: each covered pod's GPUs (or the pod, for CPU)
times the points a group holds at the query's step, and one series' raw samples (`Cost`). Series
of pods gone within the window are not counted: the default budget, a tenth of Prometheus'
default limit, leaves them room. A namespace alone above the budget is one part (it cannot be
split without changing what the read answers). Merged, the parts are one evidence: any part that
fails fails it all, as one query's failure does, and no further part is asked.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from janitor.decide.evidence import CpuEvidence, GpuEvidence, PodKey
from janitor.decide.model import PodView

_E = TypeVar("_E", GpuEvidence, CpuEvidence)
_T = TypeVar("_T")


MAX_PARTS = 100
"""The most parts one read is split into (by the estimate; the part for the namespaces no other
names comes besides): a budget set too low makes the parts bigger rather than sending thousands
of queries a cycle."""


@dataclass(frozen=True)
class Part:
    """One query's scope: these pods (all named), or these namespaces (None: every namespace but
    those in `outside`)."""

    namespaces: tuple[str, ...] | None
    pods: tuple[PodKey, ...] | None = None
    outside: tuple[str, ...] = ()


MARGIN = 1.1  # above the measured peaks (tests/integration/test_parts_live.py)


@dataclass(frozen=True)
class Cost:
    """What one usage query loads at its peak, estimated: `per_series` for each group it answers
    (a GPU, or a pod of a CPU query) and `fixed` once.

    Measured against Prometheus 2.x and 3.x with `stats=all`: a query holds two subqueries'
    points of each group at once (`window / step` each, the ends included), and the raw samples of
    one series at a time (functions over a range read one series after the other). A tenth more."""

    per_series: int
    fixed: int

    @classmethod
    def of(cls, window: datetime.timedelta, step: datetime.timedelta, interval: datetime.timedelta) -> Cost:
        points, raw = int(window / step) + 1, int(window / interval) + 1
        return cls(math.ceil(MARGIN * 2 * points), math.ceil(MARGIN * raw))

    def of_series(self, series: int) -> int:
        return self.fixed + series * self.per_series


def gpu_load(pod: PodView) -> int:
    """The groups a pod brings to a GPU query: one per GPU."""
    return pod.gpus


def cpu_load(pod: PodView) -> int:
    """The groups a pod brings to a CPU query: its containers are summed into one."""
    del pod
    return 1


def _groups(items: Iterable[_T], cost: Callable[[_T], int], budget: int) -> list[list[_T]]:
    """Consecutive groups, each within the budget unless one item alone passes it (an item that
    costs nothing joins the group before it)."""
    groups: list[list[_T]] = []
    total = 0
    for item in items:
        each = cost(item)
        if not groups or (each > 0 and total + each > budget):
            groups.append([])
            total = 0
        groups[-1].append(item)
        total += each
    return _at_most(groups)


def _pod_groups(pods: Iterable[PodKey], by_pod: Mapping[PodKey, int], budget: int) -> list[list[PodKey]]:
    """Consecutive groups of named pods, each within the budget unless one pod alone passes it.

    A part naming pods asks for its namespaces and its names (`evidence.scope`), so it selects
    every pod of one of those names in one of those namespaces, named together or not (`w-0` of
    namespace a and `w-1` of b select b's `w-0` and a's `w-1` too). What a pod adds to a group is
    counted so: its own series, and those of the pods it brings in that way."""
    names_in: dict[str, set[str]] = {}
    spaces_of: dict[str, set[str]] = {}  # by pod name: looked up per name, not per namespace of the group
    for key in by_pod:
        names_in.setdefault(key.namespace, set()).add(key.pod)
        spaces_of.setdefault(key.pod, set()).add(key.namespace)
    groups: list[list[PodKey]] = []
    spaces: set[str] = set()
    names: set[str] = set()
    total = 0
    for key in pods:
        added = 0
        if key.namespace not in spaces:
            added += sum(by_pod.get(PodKey(key.namespace, n), 0) for n in names & names_in.get(key.namespace, set()))
        if key.pod not in names:
            added += sum(by_pod[PodKey(ns, key.pod)] for ns in spaces & spaces_of.get(key.pod, set()))
            if key.namespace not in spaces:
                added += by_pod.get(key, 0)
        if not groups or (added > 0 and total + added > budget):
            groups.append([])
            spaces, names, total = set(), set(), 0
            added = by_pod.get(key, 0)
        groups[-1].append(key)
        spaces.add(key.namespace)
        names.add(key.pod)
        total += added
    return _at_most(groups)


def _at_most(groups: list[list[_T]]) -> list[list[_T]]:
    """The groups, neighbours merged into `MAX_PARTS` or fewer where there are more."""
    each = -(-len(groups) // MAX_PARTS)
    return groups if each <= 1 else [sum(groups[i:i + each], []) for i in range(0, len(groups), each)]


def split(*, budget: int, cost: Cost, load: Callable[[PodView], int], covered: Sequence[PodView],
          namespaces: Sequence[str] | None, pods: Sequence[PodKey] | None) -> list[Part]:
    """The parts of one whole read: one, as before, while the estimate is within `budget` (or the
    budget is 0: never split); else by pod when `pods` names them, else by namespace."""
    by_pod: dict[PodKey, int] = {}
    for p in covered:
        by_pod[PodKey(p.ref.namespace or "", p.ref.name)] = load(p) * cost.per_series
    budget = budget and max(1, budget - cost.fixed)  # what the groups may bring to each query
    if pods is not None:
        # A group brings in covered pods only, each once: within the budget all together, one part,
        # without grouping (the steady cycle's usual case: a read of what is not carried).
        fits = budget <= 0 or sum(by_pod.values()) <= budget
        groups = [] if fits else _pod_groups(pods, by_pod, budget)
        return [Part(None, tuple(g)) for g in groups] if len(groups) > 1 else [Part(None, tuple(pods))]
    by_namespace: dict[str, int] = {}
    for key, each in by_pod.items():
        by_namespace[key.namespace] = by_namespace.get(key.namespace, 0) + each
    whole = [Part(None if namespaces is None else tuple(namespaces))]
    if budget <= 0 or sum(by_namespace.values()) <= budget:
        return whole
    names = sorted(by_namespace if namespaces is None else namespaces)
    parts = [Part(tuple(g)) for g in _groups(names, lambda n: by_namespace.get(n, 0), budget)]
    if namespaces is None:
        parts.append(Part(None, outside=tuple(names)))
    return parts


def read(parts: Sequence[Part], ask: Callable[[Part], _E]) -> _E:
    """The parts' answers as one evidence: parts by namespace never overlap; a pod two parts by
    pod both select (its name and namespace each named in both) is read whole by each, the same
    answer. The first failure, without asking the rest, where a part fails."""
    found: list[_E] = []
    for i, part in enumerate(parts):
        answer = ask(part)
        if answer.failed is not None:
            if len(parts) == 1:
                return answer
            return type(answer)(answer.window, failed=f"part {i + 1} of {len(parts)}: {answer.failed}")
        found.append(answer)
    if len(found) == 1:
        return found[0]
    merged: dict[PodKey, object] = {}
    for answer in found:
        merged.update(answer.pods)
    first = found[0]
    return type(first)(first.window, merged)  # type: ignore[arg-type]


__all__ = ["MAX_PARTS", "Cost", "Part", "cpu_load", "gpu_load", "read", "split"]
