"""Busy verdicts carried between cycles; idle never.

Why: a cycle that asks Prometheus for every covered pod's whole window (hours) costs Prometheus a
minute at 50,000 pods, though most GPUs of a working cluster were busy a minute ago and nothing a
busy GPU did since can make it idle. A GPU or pod seen busy at time t stays busy until t + window:
every read of the whole window evaluated before then holds that sample, and a sample above the
threshold is use whatever else the window holds (busy beats unknown). So the daemon keeps, per
query and busy level, when each GPU series and pod was last seen busy, and a steady cycle asks:

1. which GPUs and pods were busy since the last cycle's read (one query per signal over those
   seconds only; each busy one is kept as busy *from the start of that span*, a time no later than
   its busy sample, so the carry ends no later than the sample leaves the window);
2. the whole window, as before, only for the pods not carried: pods never read whole since the
   daemon started, pods with any GPU series not seen busy within the window (partly idle pods
   included), new pods, pods re-created under their name (another UID), and each pod whose last
   whole read is a window old (a GPU series that appeared since is then seen).

The carried pods' evidence is their busy series with the peak seen busy, as a whole read gives a
busy GPU's (its peak alone); every idle verdict, mark and action rests on a whole read, and the
re-check before acting reads the whole window again. The level is the highest threshold among the
policies reading the query (`observation.Needs`), so busy above it is busy for each of them; a query
without one level (power, the lowest sample) or one whose readers look across pods (which signals
a node exports at all) is read whole every cycle.

A whole read of everything, and no carry, after: the daemon's start, a cycle more than `max_pause`
after the last read (the janitor paused, lost its lease, or a cycle failed), and a Prometheus that
restarted or cannot say when it started (`/api/v1/status/runtimeinfo`); a query whose busy answer
is not whole (an error, a timeout, warnings) reads every pod whole that cycle. Behind Thanos Query
the start time is Thanos' own, so a restart of a Prometheus behind it goes unseen: what was carried
stays busy where a whole read might now say unknown (the safe side), until it leaves the window.
Behind an HA pair without sticky sessions the start time alternates, and most cycles read whole.
The scrape intervals are kept for `INTERVALS_FOR` while Prometheus' config is unchanged. What is
kept is forgotten with the pods: it stays the size of the cluster. The one-shot commands never carry.
"""

from __future__ import annotations

import datetime
import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from janitor.decide.evidence import CpuEvidence, CpuKey, CpuUsage, GpuEvidence, GpuKey, GpuSeries, PodKey, Quality
from janitor.decide.model import PodView
from janitor.observe.prometheus import Runtime
from janitor.observe.targets import ScrapeIntervals

logger = logging.getLogger(__name__)

_SeriesId = tuple[PodKey, str, str, bool, str, str]  # pod, gpu, node, MIG, model, UID label
_PodId = tuple[PodKey, str]  # the pod by name and UID


def pod_id(pod: PodView) -> _PodId:
    return PodKey(pod.ref.namespace or "", pod.ref.name), pod.ref.uid


def _series_id(key: PodKey, s: GpuSeries) -> _SeriesId:
    return key, s.gpu, s.node, s.mig, s.model, s.uid


def _own(series: Iterable[GpuSeries], uid: str) -> list[GpuSeries]:
    """The series a pod can call its own: labelled with its UID, or with none (matched by name)."""
    return [s for s in series if s.uid in ("", uid)]


@dataclass
class _GpuKept:
    """One GPU query's carry: each series last seen busy (from when, and the peak seen), and each
    pod's own series as its last whole read found them."""

    busy: dict[_SeriesId, tuple[datetime.datetime, GpuSeries]] = field(default_factory=dict)
    # Each pod's series ids, sorted; a pod without one is not kept (it is never carried). A
    # frozenset each, 216 bytes even empty, for every covered pod with a GPU or without, was about
    # 3.9 MB of 56 MB live at 12,500 pods.
    pods: dict[_PodId, tuple[tuple[_SeriesId, ...], datetime.datetime]] = field(default_factory=dict)

    def seen_busy(self, found: GpuEvidence, since: datetime.datetime) -> None:
        for key, series in found.pods.items():
            for s in series:
                if s.peak is not None:
                    self.busy[_series_id(key, s)] = (since, GpuSeries(s.gpu, s.peak, 0, s.node, Quality(), s.mig,
                                                                      s.model, s.uid))

    def read_whole(self, found: GpuEvidence, pods: Iterable[_PodId], at: datetime.datetime) -> None:
        for key, uid in pods:
            ids = tuple(sorted({_series_id(key, s) for s in _own(found.pods.get(key, ()), uid)}))
            if ids:
                self.pods[(key, uid)] = (ids, at)
            else:
                self.pods.pop((key, uid), None)

    def carried(self, pod: _PodId, at: datetime.datetime, window: datetime.timedelta
                ) -> tuple[GpuSeries, ...] | None:
        """The pod's series, each busy within the window, or None when any is not, none is known,
        or its last whole read is a window old: a GPU series that appeared since (one idle beside a
        busy one) is then seen, and the pod is not carried busy for ever on what it was."""
        ids, read = self.pods.get(pod, ((), at))
        if not ids or not at < read + window:
            return None
        found = []
        for i in ids:
            kept = self.busy.get(i)
            if kept is None or not at < kept[0] + window:
                return None
            found.append(kept[1])
        return tuple(found)

    def forget(self, at: datetime.datetime, window: datetime.timedelta, there: set[_PodId]) -> None:
        """Drop what has left the window and the pods no longer there: the carry stays the cluster's size."""
        names = {key for key, _ in there}
        self.busy = {i: kept for i, kept in self.busy.items() if i[0] in names and at < kept[0] + window}
        self.pods = {p: kept for p, kept in self.pods.items() if p in there}


@dataclass
class _CpuKept:
    busy: dict[_PodId, tuple[datetime.datetime, float]] = field(default_factory=dict)

    def seen_busy(self, found: CpuEvidence, since: datetime.datetime, pods: Iterable[_PodId]) -> None:
        by_name = dict(pods)
        for key, usage in found.pods.items():
            uid = by_name.get(key)
            if uid is not None and usage.peak_cores is not None:
                self.busy[(key, uid)] = (since, usage.peak_cores)

    def carried(self, pod: _PodId, at: datetime.datetime, window: datetime.timedelta) -> CpuUsage | None:
        kept = self.busy.get(pod)
        if kept is None or not at < kept[0] + window:
            return None
        return CpuUsage(kept[1], 0, Quality())

    def forget(self, at: datetime.datetime, window: datetime.timedelta, there: set[_PodId]) -> None:
        self.busy = {i: kept for i, kept in self.busy.items() if i in there and at < kept[0] + window}


INTERVALS_FOR = datetime.timedelta(minutes=5)
"""How long the scrape intervals read from Prometheus' targets are kept: they change only when
its scrape config does, and the answer is megabytes at thousands of nodes. The re-check before
acting reads them afresh, so no action rests on kept ones."""

_T = TypeVar("_T")
GpuCarryKey = tuple[GpuKey, float]  # the query and its busy level
CpuCarryKey = tuple[CpuKey, float | None, float | None]  # the query, busy above in cores, as a fraction


class Full(enum.StrEnum):
    """Why this cycle reads every pod's whole window (a reason, for the log and the metric)."""

    START = "start"
    PAUSE = "pause"
    RESTART = "prometheus-restart"
    UNKNOWN_START = "prometheus-start-unknown"
    UNREADABLE = "unreadable"


@dataclass
class CarryStats:
    """What the last cycle's reads did, for the metrics: pods carried busy, pods read whole."""

    full: Full | None = None  # why everything was read whole (None: a steady read)
    carried: int = 0
    read_whole: int = 0


class BusyCarry:
    """The daemon's carried busy verdicts (see the module's docstring); one per process."""

    def __init__(self, max_pause: datetime.timedelta) -> None:
        self.max_pause = max_pause
        self._at: datetime.datetime | None = None
        self._runtime = Runtime()
        self._used: tuple[set[GpuCarryKey], set[CpuCarryKey]] = (set(), set())
        self._gpu: dict[GpuCarryKey, _GpuKept] = {}
        self._cpu: dict[CpuCarryKey, _CpuKept] = {}
        self.stats = CarryStats()
        self.full_reads: dict[Full, int] = {}  # why, how many cycles
        self._intervals: tuple[datetime.datetime, ScrapeIntervals] | None = None

    def intervals(self, at: datetime.datetime, read: Callable[[], ScrapeIntervals]) -> ScrapeIntervals:
        """The scrape intervals, read at most every `INTERVALS_FOR` while Prometheus says when it
        last loaded its config and that has not changed (a reload may change a job's interval), and
        on every cycle that reads everything whole (`begin`); an answer that gave none is not kept."""
        kept = self._intervals
        if kept is not None and at - kept[0] < INTERVALS_FOR:
            return kept[1]
        found = read()
        self._intervals = (at, found) if found.jobs is not None and self._runtime.config is not None else None
        return found

    def begin(self, at: datetime.datetime, runtime: Runtime) -> datetime.datetime | None:
        """The time of the last read, when this cycle may read only what happened since; else None,
        having forgotten everything (this cycle reads every pod's whole window)."""
        last, self._at = self._at, at
        was, self._runtime = self._runtime, runtime
        if runtime.config != was.config:
            self._intervals = None
        why = (Full.START if last is None else Full.UNKNOWN_START if runtime.start is None
               else Full.RESTART if runtime.start != was.start
               else Full.PAUSE if not last < at <= last + self.max_pause else None)
        self.stats = CarryStats(full=why)
        self._used = (set(), set())
        if why is None:
            return last
        if why != Full.START:
            logger.info("usage read whole this cycle (%s): nothing is carried from before", why)
        self.full_reads[why] = self.full_reads.get(why, 0) + 1
        self._gpu.clear()
        self._cpu.clear()
        self._intervals = None
        return None

    def unreadable(self) -> None:
        """An answer was not whole: its query reads every pod whole this cycle (counted once a cycle)."""
        if self.stats.full is None:
            self.full_reads[Full.UNREADABLE] = self.full_reads.get(Full.UNREADABLE, 0) + 1
            self.stats = replace(self.stats, full=Full.UNREADABLE)

    def kept(self) -> tuple[int, int, int]:
        """Pods, GPU series and CPU pods kept: what the carry holds (it stays the cluster's size)."""
        return (sum(len(k.pods) for k in self._gpu.values()), sum(len(k.busy) for k in self._gpu.values()),
                sum(len(k.busy) for k in self._cpu.values()))

    def gpu(self, key: GpuCarryKey, since: datetime.datetime | None, at: datetime.datetime,
            pods: Sequence[PodView], busy: Callable[[datetime.timedelta], GpuEvidence],
            whole: Callable[[Sequence[PodKey] | None], GpuEvidence]) -> GpuEvidence:
        """The GPU evidence of `pods` (those the query covers): busy since `since` and carried, the
        rest read whole. `busy(span)` asks which GPUs were busy over the last `span`; `whole(pods)`
        reads the whole window of those pods (None: of every pod, as without a carry)."""
        kept = self._gpu.setdefault(key, _GpuKept())
        self._used[0].add(key)
        window = key[0][1]
        ids = [pod_id(p) for p in pods]  # once a cycle: each is asked for several times
        if since is not None:
            recent = busy(at - since)
            if recent.failed:
                logger.warning("which GPUs were busy since the last cycle is unknown (%s): every pod is read whole",
                               recent.failed)
                self.unreadable()
                kept = self._gpu[key] = _GpuKept()
                since = None
            else:
                kept.seen_busy(recent, since)
        carried, rest, scoped = self._split(since, ids, lambda pod: kept.carried(pod, at, window))
        read = whole(scoped)
        if read.failed:  # every pod unknown; what is kept stays true, and the next cycle reads them again
            return read
        kept.read_whole(read, rest, at)
        kept.forget(at, window, set(ids))
        return replace(read, pods={**carried, **read.pods})

    def cpu(self, key: CpuCarryKey, since: datetime.datetime | None, at: datetime.datetime,
            pods: Sequence[PodView], busy: Callable[[datetime.timedelta], CpuEvidence],
            whole: Callable[[Sequence[PodKey] | None], CpuEvidence]) -> CpuEvidence:
        """As `gpu`, for a CPU query: a pod carried busy has its peak alone."""
        kept = self._cpu.setdefault(key, _CpuKept())
        self._used[1].add(key)
        window = key[0][0]
        ids = [pod_id(p) for p in pods]
        if since is not None:
            recent = busy(at - since)
            if recent.failed:
                logger.warning("which pods' CPU was busy since the last cycle is unknown (%s): every pod is read "
                               "whole", recent.failed)
                self.unreadable()
                kept = self._cpu[key] = _CpuKept()
                since = None
            else:
                kept.seen_busy(recent, since, ids)
        carried_cpu, _, scoped = self._split(since, ids, lambda pod: kept.carried(pod, at, window))
        read = whole(scoped)
        if read.failed:
            return read
        kept.forget(at, window, set(ids))
        return replace(read, pods={**carried_cpu, **read.pods})

    def end(self) -> None:
        """Forget the queries this cycle did not carry (a policy changed its window or threshold,
        or a query is now read whole every cycle): what is kept is of the last cycle's reads."""
        self._gpu = {k: v for k, v in self._gpu.items() if k in self._used[0]}
        self._cpu = {k: v for k, v in self._cpu.items() if k in self._used[1]}

    def _split(self, since: datetime.datetime | None, pods: Sequence[_PodId],
               carried_of: Callable[[_PodId], _T | None]
               ) -> tuple[dict[PodKey, _T], list[_PodId], list[PodKey] | None]:
        """The pods carried (by name, with what is carried), the rest, and the pods the whole read
        names (None: every pod, when nothing is carried this cycle); counted for the metrics."""
        carried: dict[PodKey, _T] = {}
        if since is not None:
            for pod in pods:
                found = carried_of(pod)
                if found is not None:
                    carried[pod[0]] = found
        rest = [p for p in pods if p[0] not in carried]
        self._count(len(carried), len(rest))
        return carried, rest, None if since is None else sorted({key for key, _ in rest}, key=_order)

    def _count(self, carried: int, whole: int) -> None:
        self.stats = replace(self.stats, carried=self.stats.carried + carried,
                             read_whole=self.stats.read_whole + whole)


def _order(key: PodKey) -> tuple[str, str]:
    return key.namespace, key.pod


def in_scope(pods: Iterable[PodView], namespaces: Sequence[str] | None) -> list[PodView]:
    """The pods a usage query covers: those of the namespaces the policies cover (None: all)."""
    wanted = None if namespaces is None else set(namespaces)
    return [p for p in pods if wanted is None or (p.ref.namespace or "") in wanted]


__all__ = ["BusyCarry", "CarryStats", "CpuCarryKey", "Full", "GpuCarryKey", "in_scope", "pod_id"]
