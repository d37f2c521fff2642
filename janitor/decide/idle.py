"""The idle triggers: is a pod, and then its workload, idle on GPU or CPU?

Judged per GPU, on the peak over the window, so one idle GPU of a two-GPU pod shows. Anything
short of full evidence is *unknown*, never idle: a failed or partial query, fewer GPU series than
the GPUs the pod asked for, samples covering too little of the window, non-finite values, and a
pod whose containers started inside the window (a recreated pod with a reused name must not
inherit the old one's history). A workload is idle only if every one of its pods is idle.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from janitor.decide.evidence import CpuEvidence, GpuEvidence, PodKey
from janitor.policy.model import IdleCpu, IdleGpu


class Idleness(StrEnum):
    IDLE = "idle"
    PARTIAL = "partially-idle"  # some GPUs idle, some busy: shown to admins, never acted on
    BUSY = "busy"
    UNKNOWN = "unknown"
    TOO_YOUNG = "too-young"


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the API says about a pod that the idle triggers need."""

    key: PodKey
    uid: str
    started: datetime.datetime | None  # when its containers started (status.startTime)
    gpus: int  # GPUs or MIG instances it requests
    cpu_request_cores: float = 0.0  # app containers only


@dataclass(frozen=True, slots=True)
class Judgement:
    pod: PodKey
    idleness: Idleness
    why: str
    idle_gpus: tuple[str, ...] = ()
    peaks: Mapping[str, float | None] = field(default_factory=dict)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def _old_enough(facts: PodFacts, now: datetime.datetime, window: datetime.timedelta,
                min_age: datetime.timedelta) -> Judgement | None:
    if facts.started is None:
        return Judgement(facts.key, Idleness.UNKNOWN, "its containers have not started")
    needed = max(window, min_age)
    if now - facts.started < needed:
        return Judgement(facts.key, Idleness.TOO_YOUNG,
                         f"running for {now - facts.started} only; judged after {needed} "
                         "(samples before its start belong to another pod)")
    return None


def judge_gpu(facts: PodFacts, evidence: GpuEvidence, trigger: IdleGpu, now: datetime.datetime) -> Judgement:
    if evidence.failed:
        return Judgement(facts.key, Idleness.UNKNOWN, f"no usable {trigger.signal} data: {evidence.failed}")
    young = _old_enough(facts, now, trigger.window, trigger.min_pod_age)
    if young:
        return young
    series = evidence.pods.get(facts.key, ())
    if len(series) != facts.gpus:
        return Judgement(facts.key, Idleness.UNKNOWN,
                         f"{len(series)} {trigger.signal} series for {facts.gpus} requested GPUs")
    expected = evidence.window.expected_samples
    peaks = {s.gpu: s.peak for s in series}
    for s in series:
        coverage = s.samples / expected
        if coverage < trigger.min_coverage:
            return Judgement(facts.key, Idleness.UNKNOWN,
                             f"GPU {s.gpu}: samples cover {coverage:.0%} of the {trigger.window} window "
                             f"(at least {trigger.min_coverage:.0%} needed)", peaks=peaks)
        if s.peak is None:
            return Judgement(facts.key, Idleness.UNKNOWN, f"GPU {s.gpu}: no finite value in the window", peaks=peaks)
    idle = tuple(sorted(s.gpu for s in series if s.peak is not None and s.peak <= trigger.threshold))
    detail = ", ".join(f"GPU {s.gpu} peak {_fmt(s.peak)}" for s in sorted(series, key=lambda s: s.gpu))
    limit = f"{trigger.signal} <= {trigger.threshold:g} over {trigger.window}"
    if len(idle) == len(series):
        return Judgement(facts.key, Idleness.IDLE, f"idle: {detail} ({limit})", idle, peaks)
    if idle:
        return Judgement(facts.key, Idleness.PARTIAL, f"{len(idle)} of {len(series)} GPUs idle: {detail} ({limit})",
                         idle, peaks)
    return Judgement(facts.key, Idleness.BUSY, f"busy: {detail}", (), peaks)


def judge_cpu(facts: PodFacts, evidence: CpuEvidence, trigger: IdleCpu, now: datetime.datetime) -> Judgement:
    if evidence.failed:
        return Judgement(facts.key, Idleness.UNKNOWN, f"no usable CPU data: {evidence.failed}")
    young = _old_enough(facts, now, trigger.window, trigger.min_pod_age)
    if young:
        return young
    usage = evidence.pods.get(facts.key)
    if usage is None or usage.peak_cores is None:
        return Judgement(facts.key, Idleness.UNKNOWN, "no CPU series for its app containers")
    coverage = usage.samples / evidence.window.expected_samples
    if coverage < trigger.min_coverage:
        return Judgement(facts.key, Idleness.UNKNOWN,
                         f"CPU samples cover {coverage:.0%} of the {trigger.window} window")
    if trigger.cores is not None:
        limit, described = trigger.cores, f"{trigger.cores:g} cores"
    else:
        fraction = trigger.fraction_of_request or 0.0
        if facts.cpu_request_cores <= 0:
            return Judgement(facts.key, Idleness.UNKNOWN, "no CPU request to compare a fraction of it with")
        limit = fraction * facts.cpu_request_cores
        described = f"{fraction:g} of its {facts.cpu_request_cores:g}-core request"
    peak = usage.peak_cores
    if peak <= limit:
        return Judgement(facts.key, Idleness.IDLE, f"idle: CPU peak {peak:.3g} cores <= {described} over {trigger.window}")
    return Judgement(facts.key, Idleness.BUSY, f"busy: CPU peak {peak:.3g} cores > {described}")


def judge_workload(pods: Iterable[Judgement]) -> tuple[Idleness, str]:
    """Idle only if every pod is idle; any busy pod keeps the workload; otherwise unknown."""
    judged = list(pods)
    if not judged:
        return Idleness.UNKNOWN, "no pods"
    busy = [j for j in judged if j.idleness in (Idleness.BUSY, Idleness.PARTIAL)]
    if busy:
        return Idleness.BUSY, f"{len(busy)} of {len(judged)} pods in use ({busy[0].pod.pod}: {busy[0].why})"
    unsure = [j for j in judged if j.idleness is not Idleness.IDLE]
    if unsure:
        return Idleness.UNKNOWN, f"{len(unsure)} of {len(judged)} pods cannot be judged ({unsure[0].pod.pod}: {unsure[0].why})"
    shown = "; ".join(f"{j.pod.pod}: {j.why}" for j in judged[:3]) + ("; ..." if len(judged) > 3 else "")
    return Idleness.IDLE, f"all {len(judged)} pods idle ({shown})"
