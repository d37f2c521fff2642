"""Usage evidence from Prometheus, as plain values the idle triggers judge.

`observe` fills these from one aggregated query per signal per cycle; deciding never sees PromQL.
Every number comes with how much data stands behind it, because missing or partial metrics must
read as *unknown*, never as idle.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PodKey:
    namespace: str
    pod: str


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """One GPU (or MIG instance) of a pod over the window."""

    gpu: str  # the exporter's `gpu` label, with `/GPU_I_ID` appended for a MIG instance
    peak: float | None  # max over the window; None when not a finite number
    samples: int  # samples in the window
    node: str = ""  # the exporter's Hostname/hostname label, for admins


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """CPU cores used by a pod's app containers (sidecars already left out), peak over the window."""

    peak_cores: float | None
    samples: int


@dataclass(frozen=True, slots=True)
class EvidenceWindow:
    signal: str  # e.g. DCGM_FI_DEV_GPU_UTIL
    window: datetime.timedelta
    step: datetime.timedelta  # the scrape interval the coverage is measured against
    at: datetime.datetime

    @property
    def expected_samples(self) -> int:
        return max(1, int(self.window / self.step))


@dataclass(frozen=True, slots=True)
class GpuEvidence:
    """All GPU series per pod for one signal and window, or why there is none at all."""

    window: EvidenceWindow
    pods: Mapping[PodKey, tuple[GpuSeries, ...]] = field(default_factory=dict)
    # Set when the query failed or answered partially (warnings): then nothing may be judged idle.
    failed: str | None = None


@dataclass(frozen=True, slots=True)
class CpuEvidence:
    window: EvidenceWindow
    pods: Mapping[PodKey, CpuUsage] = field(default_factory=dict)
    failed: str | None = None
