"""The hung trigger: GPUs that report busy while nothing on them computes.

`DCGM_FI_DEV_GPU_UTIL` counts the time any kernel runs, so a job deadlocked in a collective (a
peer gone, an NCCL ring waiting forever) reads about 100 % there, on every GPU it holds, while
its SMs and its power stay near idle (../shared/reference/gpu-signals-and-prometheus3.md). Such
a workload is neither idle nor busy: it is stuck, and its owner should hear so in those words.

A GPU is hung when GPU_UTIL stays at or above the policy's `utilization` at every sample of the
window (its lowest sample, read with the peak) and every quiet signal the policy names (SM
activity, power over the model's idle power) stays at or below its limit (their peaks). The
workload is hung when every GPU of every pod is. Like idleness, it needs the whole window's
evidence on every signal: a gap, a NaN, a series that cannot be attributed, a model without an
idle power or a node without the field make it *unknown*; work on any quiet signal clears it
(work beats doubt), and so does a GPU_UTIL that dipped (then the GPU is idle or working, which
the idle trigger judges). A MIG slice cannot be judged (GPU_UTIL does not measure it).

Only the signals a stuck job makes read busy (`BLIND`) do not veto it: GPU_UTIL and the GR
engine count the spinning kernel, and a deadlocked collective spins its CPU threads too (NCCL's
proxy thread polls). SM activity, power and memory copy that show work do (this module reads the
first two itself). Pure.
"""

from __future__ import annotations

import datetime
import operator
from collections.abc import Mapping, Sequence

from janitor.decide.attribution import attribute
from janitor.decide.evidence import GpuEvidence, GpuKey, GpuSeries
from janitor.decide.model import CPU_SIGNAL, Finding, Observation, PodJudgement, PodView, State, TriggerKind
from janitor.decide.reasons import Code, Fact, Reason, Words, why
from janitor.decide.selection import Workload
from janitor.decide.triggers.idle import GpuJudge, gpu_pods, is_mig_pod, pod_key, starting
from janitor.decide.triggers.spec import Reads, Recheck, Role, TriggerSpec, Usage, duration, gap_words
from janitor.policy.model import GpuSignal, Hung, IdleGpu, Policy
from janitor.policy.model import Trigger as PolicyTrigger
from janitor.why_note import Scalar

UTIL = GpuSignal.GPU_UTIL
BLIND = frozenset({str(GpuSignal.GPU_UTIL), str(GpuSignal.GR_ENGINE_ACTIVE), CPU_SIGNAL})
_QUIET_WORDS = {GpuSignal.SM_ACTIVE: "compute", GpuSignal.POWER: "power"}
_first = operator.itemgetter(0)


def quiet_words(trigger: Hung) -> str:
    """"compute and power are", "compute is": what the owner is told stays idle."""
    names = [_QUIET_WORDS[s] for s, _ in trigger.quiet]
    return " and ".join(names) + (" are" if len(names) > 1 else " is")


def _judge(evidence: Mapping[GpuKey, GpuEvidence], trigger: Hung, signal: GpuSignal, limit: float,
           now: datetime.datetime) -> GpuJudge:
    """One signal's judge, for what idleness and stuckness share: the pod's age, the window's coverage,
    its gaps and non-finite samples."""
    as_idle = IdleGpu(signal=signal, threshold=limit, window=trigger.window, min_coverage=trigger.min_coverage,
                      min_pod_age=trigger.min_pod_age, max_gap=trigger.max_gap, idle_power=trigger.idle_power)
    return GpuJudge(evidence.get((str(signal), trigger.window)), as_idle, now)



def _shown(signal: GpuSignal, value: float | None) -> str:
    if value is None:
        return f"{signal.short} n/a"
    return f"power {value:.2g}x idle" if signal.relative else f"{signal.short} {value:g}"


Reading = tuple[GpuSignal, float | None]  # a quiet signal's value on one GPU (power: as a multiple of idle)


def _works_words(works: tuple[tuple[str, tuple[GpuSignal, float, float]], ...]) -> str:
    """"GPU 0 sm 0.71 > 0.2; GPU 1 power 3.1x idle > 1.5": the quiet signals that show work."""
    return "; ".join(f"GPU {gpu} {_shown(signal, value)} > {limit:g}" for gpu, (signal, value, limit) in works)


def _dips_words(dips: tuple[tuple[str, float], ...]) -> str:
    return ", ".join(f"GPU {gpu} low {low:g}" for gpu, low in dips)


def _hung_words(gpus: tuple[tuple[str, float | None, tuple[Reading, ...]], ...]) -> str:
    """"GPU 0 util low 97, sm 0.01, power 1.1x idle; ...": every GPU's lowest GPU_UTIL and quiet readings."""
    return "; ".join(f"GPU {gpu} {UTIL.short} low {low:g}, {', '.join(_shown(s, v) for s, v in shown)}"
                     for gpu, low, shown in gpus)


class HungJudge:
    """Judges a pod's GPUs on one policy's hung signature."""

    def __init__(self, evidence: Mapping[GpuKey, GpuEvidence], trigger: Hung, now: datetime.datetime) -> None:
        self.trigger = trigger
        self.util = _judge(evidence, trigger, UTIL, trigger.utilization, now)
        self.quiet = [(signal, limit, _judge(evidence, trigger, signal, limit, now)) for signal, limit in trigger.quiet]
        self.names = ", ".join((UTIL.short, *(s.short for s, _ in trigger.quiet)))
        self.within = ", ".join(f"power <= {t:g}x idle" if s.relative else f"{s.short} <= {t:g}"
                                for s, t in trigger.quiet)
        # Why a signal's evidence says nothing this cycle, if one's does not: the same for every pod.
        self.unread = next((r for j in (self.util, *(j for *_, j in self.quiet)) if (r := j.unread()) is not None),
                           None)

    def _value(self, signal: GpuSignal, s: GpuSeries) -> float | None:
        if s.peak is None or not signal.relative:
            return s.peak
        idle = self.trigger.idle_watts(s.model)
        return None if idle is None else s.peak / idle

    def __call__(self, pod: PodView) -> PodJudgement:
        if self.unread is not None:
            return PodJudgement(pod.ref, State.UNKNOWN, self.unread)
        young = self.util.young(pod)
        if young:
            return young
        key = pod_key(pod)
        read = [(signal, limit, judge, attribute(pod.ref.uid, judge.evidence.pods.get(key, ()) if judge.evidence
                                                 else (), str(signal))) for signal, limit, judge in self.quiet]
        util = attribute(pod.ref.uid, self.util.evidence.pods.get(key, ()) if self.util.evidence else (), str(UTIL))
        if is_mig_pod(pod) or any(s.mig for s in util.series) or any(s.mig for *_, m in read for s in m.series):
            return PodJudgement(pod.ref, State.UNKNOWN, why(Code.HUNG_MIG, what="a GPU it requested", signal=str(UTIL)))
        works: dict[str, tuple[GpuSignal, float, float]] = {}
        doubt: Reason | None = None
        readings: dict[str, list[Reading]] = {}
        for signal, limit, judge, mine in read:
            for s in mine.series:
                value = self._value(signal, s)
                readings.setdefault(s.gpu, []).append((signal, value))
                if value is not None and value > limit:
                    works.setdefault(s.gpu, (signal, value, limit))
                elif doubt is None:
                    doubt = (why(Code.NO_IDLE_POWER, model=s.model or "an unnamed model")
                             if signal.relative and s.peak is not None and value is None else
                             # A spinning collective keeps at least one SM busy: a field at exactly 0 under a
                             # busy GPU_UTIL is the PROF fields' known fault, not a hang.
                             why(Code.SM_ZERO_UNDER_LOAD, gpu=s.gpu, signal=str(signal))
                             if signal is GpuSignal.SM_ACTIVE and s.peak == 0 else judge.unsure(s))
            doubt = doubt or mine.doubt or self._count(pod, mine.series, signal)
        if works:  # work on any GPU: not stuck, whatever else is in doubt (its words written when shown)
            detail = Words(_works_words, tuple(sorted(works.items(), key=_first)))
            return PodJudgement(pod.ref, State.CLEAR, why(Code.GPU_WORKS, detail=detail))
        dips = sorted((s for s in util.series if s.low is not None and s.low < self.trigger.utilization),
                      key=lambda s: s.gpu)
        if dips:
            detail = Words(_dips_words, tuple((s.gpu, s.low) for s in dips if s.low is not None))
            return PodJudgement(pod.ref, State.CLEAR, why(Code.GPU_UTIL_DIPS, detail=detail, signal=str(UTIL),
                                                          utilization=self.trigger.utilization,
                                                          window=self.trigger.window))
        doubt = doubt or util.doubt or self._count(pod, util.series, UTIL) or next(
            (r for s in util.series for r in [self.util.unsure(s) or (
                None if s.low is not None else why(Code.NON_FINITE, gpu=s.gpu))] if r is not None), None)
        gpus = {s.gpu for s in util.series}
        if doubt is None and any({s.gpu for s in mine.series} != gpus for *_, mine in read):
            doubt = why(Code.SIGNALS_DISAGREE, signals=self.names)
        if doubt is not None:
            return PodJudgement(pod.ref, State.UNKNOWN, doubt)
        ordered = sorted(util.series, key=lambda s: s.gpu)
        detail = Words(_hung_words, tuple((s.gpu, s.low, tuple(readings.get(s.gpu, ()))) for s in ordered))
        facts: dict[str, Fact] = {"detail": detail, "signal": str(UTIL), "utilization": self.trigger.utilization,
                                  "within": self.within, "window": self.trigger.window}
        return PodJudgement(pod.ref, State.FIRES, why(Code.GPU_HUNG, **facts), tuple(s.gpu for s in ordered),
                            {s.gpu: s.peak for s in ordered})

    @staticmethod
    def _count(pod: PodView, series: Sequence[GpuSeries], signal: GpuSignal) -> Reason | None:
        if len(series) == pod.gpus == len({s.gpu for s in series}):
            return None
        return why(Code.SERIES_COUNT, series=len(series), signal=str(signal), gpus=pod.gpus)


def _workload(judged: Sequence[PodJudgement], pods: Sequence[PodView], trigger: Hung,
              now: datetime.datetime, starting: PodView | None) -> tuple[State, Reason]:
    """Hung only if every pod is and none is starting (a replacement rank may be on its way); a pod
    that is not keeps the workload; otherwise unknown."""
    if starting is not None:
        return State.CLEAR, why(Code.POD_STARTING, pod=starting.ref.name, phase=starting.phase)
    if not judged:
        return State.UNKNOWN, why(Code.NO_PODS)
    clear_, fires = State.CLEAR, State.FIRES  # looked up once, not per pod (slow attributes on 3.11)
    clear = [j for j in judged if j.state is clear_]
    if clear:
        return State.CLEAR, why(Code.PODS_NOT_HUNG, working=len(clear), total=len(judged), pod=clear[0].pod.name,
                                why=clear[0].why)
    unsure = [j for j in judged if j.state is not fires]
    if unsure:
        return State.UNKNOWN, why(Code.PODS_UNSURE, unsure=len(unsure), total=len(judged), pod=unsure[0].pod.name,
                                  why=unsure[0].why)
    shown = tuple(why(Code.POD, pod=j.pod.name, why=j.why) for j in judged[:3])
    return State.FIRES, why(Code.ALL_HUNG, since=now - trigger.window, gpus=sum(p.gpus for p in pods),
                            signal=str(UTIL), quiet=quiet_words(trigger), shown=shown,
                            more="; ..." if len(judged) > 3 else "")


def findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
             now: datetime.datetime) -> list[Finding]:
    """Each workload's running GPU pods judged on the policy's hung signature."""
    trigger = policy.trigger(Hung)
    assert trigger is not None
    judge = HungJudge(observation.evidence.gpu, trigger, now)
    found = []
    for w in workloads:
        pods = gpu_pods(w)
        judged = [judge(p) for p in pods]
        state, reason = (State.UNKNOWN, why(Code.WORKLOAD_UNKNOWN, why=w.unknown)) if w.unknown is not None \
            else _workload(judged, pods, trigger, now, starting(w))
        gpus = sum([p.gpus for p in pods])
        found.append(Finding(TriggerKind.HUNG, policy.name, policy.mode, w.ref, state, reason, source=policy.source,
                             known=w.known, pods=tuple(judged), gpus=gpus,
                             reclaim_gpu_hours=gpus * trigger.window.total_seconds() / 3600
                             if state is State.FIRES else 0.0,
                             owner=w.owner, managed_by=w.managed_by))
    return found


def _reads(trigger: PolicyTrigger) -> Reads:
    """GPU_UTIL with its lowest sample (so its query keeps busy GPUs whole), and each quiet signal."""
    if not isinstance(trigger, Hung):
        return Reads()
    util = (str(UTIL), trigger.window)
    return Reads(gpu=((util, None), *(((str(s), trigger.window), None) for s, _ in trigger.quiet)), gpu_low=(util,))


def _facts(trigger: PolicyTrigger) -> dict[str, Scalar]:
    if not isinstance(trigger, Hung):
        return {}
    return {"window": duration(trigger.window), "utilization": trigger.utilization,
            "signals": ", ".join(f"{s.short}<={t:g}{'x idle' if s.relative else ''}" for s, t in trigger.quiet)}


def _describe(t: PolicyTrigger) -> str:
    assert isinstance(t, Hung)
    quiet = " and ".join(f"{s.value} peak <= {th:g}{' x idle power' if s.relative else ''}" for s, th in t.quiet)
    return (f"hung: {UTIL.value} >= {t.utilization:g} at every sample while {quiet}, on every GPU over "
            f"{duration(t.window)} (coverage >= {t.min_coverage:g}, {gap_words(t.max_gap)}, pod age >= "
            f"{duration(t.min_pod_age)})")


TRIGGER = TriggerSpec(TriggerKind.HUNG, Role.MARKS, Usage.VETOED, findings, policy=Hung, pods=gpu_pods, reads=_reads,
                      recheck=Recheck(pods=True, usage=True), condition="stuck", blind_to=BLIND, facts=_facts,
                      describe=_describe)
