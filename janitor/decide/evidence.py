"""Usage evidence from Prometheus, as plain values the idle triggers judge.

`observe` fills these from one aggregated query per signal per cycle; deciding never sees PromQL.
Every number comes with how much data stands behind it, because missing or partial metrics must
read as *unknown*, never as idle.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple


class PodKey(NamedTuple):
    """A pod by namespace and name, as Prometheus labels its series. A named tuple, not a dataclass:
    every running pod's evidence is looked up by one several times a cycle, and a tuple hashes and
    compares in C (a frozen dataclass's `__hash__` and `__eq__` are Python calls)."""

    namespace: str
    pod: str


@dataclass(frozen=True, slots=True)
class Quality:
    """How much a series' numbers can be trusted, measured by Prometheus over the window.

    `interval` is the scrape interval of the target(s) that export the series, read from
    Prometheus' targets (None: unknown, so the expected number of samples is unknown). `gap` is
    the longest stretch without samples, measured at the query's resolution (None: not measured).
    `non_finite` says a NaN or ±Inf sample fell in the window: what it stood for is unknown."""

    interval: datetime.timedelta | None = None
    gap: datetime.timedelta | None = None
    non_finite: bool = False


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """One GPU (or MIG instance) of a pod over the window."""

    gpu: str  # the exporter's `gpu` label, with `/GPU_I_ID` appended for a MIG instance
    peak: float | None  # max over the window; None when not a finite number
    samples: int  # samples in the window
    node: str = ""  # the exporter's Hostname/hostname label, for admins
    quality: Quality = Quality()
    mig: bool = False  # the series is a MIG instance's (it carries GPU_I_ID)
    model: str = ""  # dcgm-exporter's modelName, read where a policy judges power against idle power
    uid: str = ""  # the pod UID the exporter labelled the series with ("": none, it is matched by name)
    # min over the window, read where a trigger needs the lowest sample (hung: busy at every one); None:
    # not read, or not a finite number
    low: float | None = None


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """CPU cores used by a pod's app containers (sidecars already left out), peak over the window."""

    peak_cores: float | None
    samples: int  # points of the rate at the evidence's step
    quality: Quality = Quality()  # of the containers' raw cAdvisor samples


@dataclass(frozen=True, slots=True)
class EvidenceWindow:
    signal: str  # e.g. DCGM_FI_DEV_GPU_UTIL
    window: datetime.timedelta
    step: datetime.timedelta  # the resolution gaps (and CPU rate points) are measured at
    at: datetime.datetime

    @property
    def expected_samples(self) -> int:
        """Points expected at `step` (the CPU rate's subquery points)."""
        return max(1, int(self.window / self.step))

    def expected_at(self, interval: datetime.timedelta) -> int:
        """Samples a target scraped every `interval` leaves in the window."""
        return max(1, int(self.window / interval))


@dataclass(frozen=True, slots=True)
class GpuEvidence:
    """All GPU series per pod for one signal and window, or why there is none at all.

    Keyed by namespace and name, as the exporter names pods: under one key may be series of
    several pods of that name (a predecessor's, by another UID); `janitor.decide.attribution`
    tells which are the pod's own."""

    window: EvidenceWindow
    pods: Mapping[PodKey, tuple[GpuSeries, ...]] = field(default_factory=dict)
    # Set when the query failed or answered partially (warnings): then nothing may be judged idle.
    failed: str | None = None
    # The nodes with a series of this signal now, any pod's or none's, read across the cluster (a
    # query of its own, where a policy reads several signals): which nodes export the field at all.
    # The pods above are those of the namespaces the policies cover, so they cannot tell it. None:
    # not read; then only the pods above tell. A node named "": which node exports what cannot be
    # told (the answer failed, or a series has no node label), so no signal is left out.
    exporting: frozenset[str] | None = None
    # Why which nodes export the signal is unknown (`exporting` is then {""}): said in the cycle's
    # notes, as no signal is left out while it lasts (such pods stay unknown).
    exporting_failed: str | None = None


@dataclass(frozen=True, slots=True)
class CpuEvidence:
    window: EvidenceWindow
    pods: Mapping[PodKey, CpuUsage] = field(default_factory=dict)
    failed: str | None = None


GpuKey = tuple[str, datetime.timedelta]  # (signal, window)
CpuKey = tuple[datetime.timedelta, tuple[str, ...]]  # (window, ignored containers, sorted)


@dataclass(frozen=True, slots=True)
class GhostGpu:
    """A GPU with framebuffer memory in use and no pod mapped to it. `bus_id` and `uuid` (""
    where the exporter does not label them) name it as the node agent does: `gpu` is an index."""

    node: str
    gpu: str
    mib: float
    bus_id: str = ""
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class ActivityEvidence:
    """One activity rule's answer (`policy.model.ActivityRule`): the pods its samples name, with the
    pod UIDs they carry ("" where a sample has none), or why it says nothing reliable."""

    pods: Mapping[PodKey, frozenset[str]] = field(default_factory=dict)
    anonymous: int = 0  # samples that name no pod (no namespace or pod label): whose use is unknown
    failed: str | None = None  # an error, a timeout or a partial answer: counted as use


@dataclass(frozen=True, slots=True)
class Evidence:
    """All usage evidence one cycle read: one answer per distinct (signal, window) the policies need.
    A key that is missing was not read; a value with `failed` set was read and is unusable."""

    gpu: Mapping[GpuKey, GpuEvidence] = field(default_factory=dict)
    cpu: Mapping[CpuKey, CpuEvidence] = field(default_factory=dict)
    ghost_gpus: tuple[GhostGpu, ...] | None = None  # None: not read, or the query failed
    activity: Mapping[str, ActivityEvidence] = field(default_factory=dict)  # by the rule's expression
    # Why Prometheus' targets API gave no scrape intervals this cycle (None: it gave them, or was
    # not asked); and whether no --scrape-interval stood in either, so that every pod judged on
    # this evidence is unknown, never idle, though each query answered.
    targets_error: str | None = None
    intervals_unknown: bool = False

    @property
    def intervals_notice(self) -> str | None:
        """What admins must hear while the targets API gives no intervals, as one line: nothing
        else moves (the queries answer, the verdicts are merely *unknown*)."""
        if self.targets_error is None:
            return None
        said = " ".join(self.targets_error.split())
        if self.intervals_unknown:
            return (f"scrape intervals unknown ({said}): every pod judged on Prometheus is unknown, never idle, "
                    "until the targets API answers or --scrape-interval is set")
        return f"scrape intervals from --scrape-interval, not from Prometheus ({said})"

    @property
    def failures(self) -> tuple[str, ...]:
        failed = [e.failed for e in self.gpu.values()] + [e.failed for e in self.cpu.values()]
        return tuple(sorted({f for f in failed if f}))

    @property
    def exporting_failures(self) -> tuple[str, ...]:
        """Per signal whose exporting nodes could not be read, what follows: its read stands (its
        series judge as ever), but no pod missing a series of it is judged without it."""
        return tuple(sorted({f"which nodes export {e.window.signal} is unknown ({e.exporting_failed}): a pod "
                             "missing its series is unknown on it, never judged without it"
                             for e in self.gpu.values() if e.exporting_failed}))
