"""An idle-GPU trigger that reads several signals: idle only where every one that is there says so.

GPU_UTIL reads about 100 % for a job spinning in a hung collective and 0 for a MIG slice; the PROF
fields can read 0 under load on some driver and GPU combinations; power means something only
against the model's idle power. A policy that names several (`signals:`) gets, per GPU:

* busy when any signal is above its threshold (busy on any signal beats idle on another);
* unknown when none is, and any signal's samples cannot show it idle (a gap, NaN, too little
  coverage), exactly as for one signal;
* idle when every signal that is there is at or below its threshold over the whole window.

A signal is *not there* for a pod when its node exports no series of it at all (the PROF fields
are off by default in dcgm-exporter), or when it does not measure a MIG slice the pod holds. That is said in the
verdict with the signals it left out, and counted per policy and signal, never silently ignored.
A pod whose node exports the signal for other pods but not for it is missing evidence: unknown.
Power for a model without an idle power is unknown too (power is the check on a PROF field reading
0 under load, so it is never dropped for an admin's omission).
When no named signal is there at all, the pod is unknown. A read that failed is not "not there":
it is unknown, as for one signal.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from janitor.decide.attribution import Attributed, attribute
from janitor.decide.evidence import GpuEvidence, GpuKey, GpuSeries
from janitor.decide.model import Finding, Observation, PodJudgement, PodView, State, TriggerKind
from janitor.decide.reasons import Code, Fact, Reason, why
from janitor.decide.selection import Workload
from janitor.decide.triggers import never_used
from janitor.decide.triggers.idle import GpuJudge, finding, gpu_pods, is_mig_pod, pod_key
from janitor.decide.triggers.spec import Reads, Recheck, Role, TriggerSpec, Usage, duration, gap_words
from janitor.policy.model import GpuSignal, IdleGpu, Policy
from janitor.policy.model import Trigger as PolicyTrigger
from janitor.why_note import Scalar


@dataclass(frozen=True, slots=True)
class Left:
    """A signal the verdict on a pod could not read, and why (`MISSING_*`)."""

    signal: GpuSignal
    code: str  # NOT_EXPORTED, ON_MIG, UNNAMED (left and unknown: the verdict cannot be idle)
    detail: str = ""


NOT_EXPORTED, ON_MIG, UNNAMED = "not-exported", "mig", "node-unnamed"
_LEFT_WORDS = {NOT_EXPORTED: "not exported on its node", ON_MIG: "does not measure MIG slices",
               UNNAMED: "its series name no node it runs on: is --hostname-label a node name?"}


def left_words(left: Sequence[Left]) -> tuple[str, ...]:
    return tuple(f"{x.signal.short} ({_LEFT_WORDS[x.code]})" for x in left)


def _value(signal: GpuSignal, s: GpuSeries, trigger: IdleGpu) -> float | None:
    """The number judged: the peak, or for power the peak over the model's idle power."""
    if s.peak is None or not signal.relative:
        return s.peak
    idle = trigger.idle_watts(s.model)
    return None if idle is None else s.peak / idle


def _shown(signal: GpuSignal, value: float | None) -> str:
    if value is None:
        return f"{signal.short} n/a"
    return f"power {value:.2g}x idle" if signal.relative else f"{signal.short} {value:g}"


_Read = tuple[GpuSignal, float, GpuJudge, tuple[GpuSeries, ...]]


def _named_elsewhere(pod: PodView, read: Sequence[tuple[GpuSignal, float, GpuJudge, Attributed]]) -> bool:
    """Whether the pod's own series carry node labels none of which is its node's name: then the
    exporter's labels (`--hostname-label`) hold another name (the exporter pod's host name, an IP),
    match no node, and every node would look like one exporting nothing; a missing signal is then
    missing evidence. Without any series of its own, every signal is left out and the pod is
    unknown anyway (none of the named signals there)."""
    seen = False
    for *_, mine in read:
        for s in mine.series:
            if s.node == pod.node:
                return False
            seen = True
    return seen


class SignalsJudge:
    """Judges a pod's GPUs on every signal of one policy's trigger (`judge` for one signal)."""

    def __init__(self, evidence: Mapping[GpuKey, GpuEvidence], trigger: IdleGpu, now: datetime.datetime) -> None:
        self.trigger = trigger
        self.parts = [(signal, threshold, GpuJudge(evidence.get((str(signal), trigger.window)),
                                                   replace(trigger, signal=signal, threshold=threshold, also=()), now))
                      for signal, threshold in trigger.limits]
        self.limits: tuple[tuple[str, float], ...] = tuple((str(s), t) for s, t in trigger.limits)
        self.names = ", ".join(s.short for s, _ in trigger.limits)
        self.nodes: dict[GpuSignal, frozenset[str]] = {}

    def __call__(self, pod: PodView) -> PodJudgement:
        """The verdict, with the signals it could not judge (`doubt_on`: all of them when it is unknown
        and no one signal is to blame)."""
        self.doubtful: set[str] = set()
        judged = self._judge(pod)
        doubt_on = frozenset(self.doubtful)
        if not doubt_on and judged.state in (State.UNKNOWN, State.TOO_YOUNG):
            doubt_on = frozenset(str(s) for s, _ in self.trigger.limits)
        return replace(judged, doubt_on=doubt_on) if doubt_on else judged

    def _judge(self, pod: PodView) -> PodJudgement:
        failures = [r for _, _, judge in self.parts if (r := judge.unread()) is not None]
        self.doubtful.update(str(s) for s, _, judge in self.parts if judge.unread() is not None)
        if len(failures) == len(self.parts):
            return PodJudgement(pod.ref, State.UNKNOWN, failures[0])
        young = self.parts[0][2].young(pod)
        if young:
            return self._never_used(pod) or young
        key = pod_key(pod)
        read = [(signal, threshold, judge, attribute(pod.ref.uid, judge.evidence.pods.get(key, ()), str(signal))
                 if judge.evidence else Attributed(())) for signal, threshold, judge in self.parts]
        mig = is_mig_pod(pod) or any(s.mig for *_, mine in read for s in mine.series)
        left: list[Left] = []
        present: list[_Read] = []
        doubt: Reason | None = failures[0] if failures else None  # no GPU is idle on a signal not read
        for signal, threshold, judge, mine in read:
            series = mine.series
            if judge.unread() is not None:
                continue
            if mig and not signal.covers_mig:
                left.append(Left(signal, ON_MIG))
            elif mine.doubt is not None:  # not left out: its samples are there, whose they are is unknown
                doubt = doubt or mine.doubt
                self.doubtful.add(str(signal))
                if len(series) == pod.gpus == len({s.gpu for s in series}):
                    present.append((signal, threshold, judge, series))  # its own busy samples still count
            elif not series and self._not_on(signal, judge, pod):
                if _named_elsewhere(pod, read):  # not read, and no reason to judge on less: unknown
                    left.append(Left(signal, UNNAMED))
                    doubt = doubt or why(Code.SERIES_COUNT, series=0, signal=str(signal), gpus=pod.gpus)
                    self.doubtful.add(str(signal))
                else:
                    left.append(Left(signal, NOT_EXPORTED))
            elif len(series) != pod.gpus or len({s.gpu for s in series}) != len(series):
                doubt = doubt or why(Code.SERIES_COUNT, series=len(series), signal=str(signal), gpus=pod.gpus)
                self.doubtful.add(str(signal))
                if series:
                    present.append((signal, threshold, judge, series))  # busy beats unknown; doubt leaves none idle
            elif signal.relative and (model := next((s.model for s in series if _value(signal, s, self.trigger)
                                                     is None and s.peak is not None), None)) is not None:
                # Not left out: power is read where a PROF field reads 0 under load, and an unknown
                # model's watts cannot say idle. Busy on another signal still counts.
                doubt = doubt or why(Code.NO_IDLE_POWER, model=model or "an unnamed model")
                self.doubtful.add(str(signal))
            else:
                present.append((signal, threshold, judge, series))
        if not present:
            return PodJudgement(pod.ref, State.UNKNOWN, _noting(doubt, left) if doubt else why(
                Code.NO_SIGNAL, signals=self.names, left=left_words(left), limits=self.limits,
                lost=tuple((str(x.signal), x.code, x.detail) for x in left)))
        gpus = {s.gpu for s in present[0][3]}
        if any({s.gpu for s in series} != gpus for *_, series in present):
            doubt = doubt or why(Code.SIGNALS_DISAGREE, signals=self.names)
        return self._combine(pod, present, left, sorted({s.gpu for *_, series in present for s in series}), doubt)

    def _never_used(self, pod: PodView) -> PodJudgement | None:
        """The verdict on every signal over the pod's whole life (`triggers.never_used`), or None."""
        now = self.parts[0][2].now
        running = never_used.life(self.trigger, pod, now)
        if running is None:
            return None
        read: dict[GpuKey, GpuEvidence] = {}
        for signal, _, judge in self.parts:
            if judge.evidence is None:
                continue  # not read: unknown on it over the life too
            found = never_used.evidence(judge.evidence, pod, running)
            if found is None:
                return None
            read[(str(signal), running)] = found
        return never_used.judged(SignalsJudge(read, never_used.trigger(self.trigger, running), now)(pod), running)

    def _not_on(self, signal: GpuSignal, judge: GpuJudge, pod: PodView) -> bool:
        """Whether the pod's node exports no series of the signal at all (for any pod, or none): then
        the field is off there. Missing for this pod alone while its node exports it is missing
        evidence, and without node labels which node exports what cannot be told. The nodes read
        across the cluster (`GpuEvidence.exporting`) count with those of the pods read."""
        nodes = self.nodes.get(signal)
        if nodes is None:
            read = judge.evidence
            pods = read.pods.values() if read is not None else ()
            nodes = frozenset(s.node for series in pods for s in series)
            if read is not None and read.exporting is not None:
                nodes |= read.exporting
            self.nodes[signal] = nodes
        return bool(pod.node) and "" not in nodes and pod.node not in nodes

    def _combine(self, pod: PodView, present: Sequence[_Read], left: Sequence[Left], gpus: Sequence[str],
                 doubt: Reason | None) -> PodJudgement:
        """Busy on any signal read beats everything; `doubt` (a signal not read, or not attributable to
        GPUs) leaves no GPU idle, as does any doubtful series."""
        busy: dict[str, str] = {}  # GPU -> what showed use
        busy_on: set[str] = set()
        unsure: Reason | None = doubt
        readings: list[tuple[str, str, float | None]] = []
        shown: dict[str, list[str]] = {g: [] for g in gpus}
        for signal, threshold, judge, series in present:
            for s in series:
                value = _value(signal, s, self.trigger)
                readings.append((s.gpu, str(signal), value))
                shown[s.gpu].append(_shown(signal, value))
                if value is not None and value > threshold:
                    busy.setdefault(s.gpu, f"{_shown(signal, value)} > {threshold:g}")
                    busy_on.add(str(signal))
                elif (doubt_here := judge.unsure(s)) is not None:
                    unsure = unsure or doubt_here
                    self.doubtful.add(str(signal))
        first = present[0][3] if present[0][0] is self.trigger.signal else ()
        peaks = {s.gpu: s.peak for s in first}
        if unsure is not None and not busy:
            return PodJudgement(pod.ref, State.UNKNOWN, _noting(unsure, left), peaks=peaks)
        idle = tuple(g for g in gpus if g not in busy) if unsure is None else ()
        facts: dict[str, Fact] = {
            "limits": self.limits, "window": self.trigger.window, "readings": tuple(readings),
            "left": tuple((str(x.signal), x.code, x.detail) for x in left),
            "missing": why(Code.SIGNALS_LEFT, left=left_words(left)) if left else None,
        }
        if len(idle) == len(gpus):
            detail = "; ".join(f"GPU {g} {', '.join(shown[g])}" for g in gpus)
            return PodJudgement(pod.ref, State.FIRES, why(Code.GPU_SIGNALS_IDLE, detail=detail, within=self._within(),
                                                          **facts), idle, peaks)
        detail = "; ".join(f"GPU {g} {busy[g]}" for g in gpus if g in busy)
        if idle:
            return PodJudgement(pod.ref, State.PARTIAL, why(Code.GPU_SIGNALS_PARTIAL, idle=len(idle), total=len(gpus),
                                                            detail=detail, **facts), idle, peaks, frozenset(busy_on))
        return PodJudgement(pod.ref, State.CLEAR, why(Code.GPU_SIGNALS_BUSY, detail=detail, **facts), (), peaks,
                            frozenset(busy_on))

    def _within(self) -> str:
        return ", ".join(f"power <= {t:g}x idle" if s.relative else f"{s.short} <= {t:g}"
                         for s, t in self.trigger.limits)



def several(trigger: IdleGpu) -> bool:
    """Whether the trigger needs this judge: several signals, or power (judged against idle power)."""
    return bool(trigger.also) or trigger.signal.relative


def _noting(reason: Reason, left: Sequence[Left]) -> Reason:
    """`reason` with the signals left out as a fact: an unknown verdict still says what was not
    read (the in-use check reads GPU_UTIL beside a policy that read no work signal)."""
    if not left or reason.fact("left") is not None:
        return reason
    return replace(reason, facts=(*reason.facts, ("left", tuple((str(x.signal), x.code, x.detail) for x in left))))


def left_of(judgement: PodJudgement) -> tuple[tuple[str, str, str], ...]:
    """The signals a verdict could not read, as (signal, why, detail), for the coverage metric."""
    left = judgement.why.fact("lost" if judgement.why.code is Code.NO_SIGNAL else "left")
    return tuple(x for x in left if isinstance(x, tuple) and len(x) == 3) if isinstance(left, tuple) else ()


def coverage(findings: Iterable[Finding]) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (policy, signal): of the GPU pods judged on several signals, how many had it read."""
    found: dict[tuple[str, str], list[int]] = {}
    for f in findings:
        if f.trigger is not TriggerKind.IDLE_GPU:
            continue
        for judged in f.pods:
            limits = judged.why.fact("limits")
            if not isinstance(limits, tuple):
                continue
            lost = {signal for signal, code, _ in left_of(judged) if code != ON_MIG}  # MIG: by design
            for signal, _ in limits:
                count = found.setdefault((f.policy, str(signal)), [0, 0])
                count[0] += signal not in lost
                count[1] += 1
    return {k: (read, total) for k, (read, total) in found.items()}


def gpu_findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
                 now: datetime.datetime) -> list[Finding]:
    """The idle-GPU trigger: each workload's running GPU pods judged on the policy's signals."""
    trigger = policy.trigger(IdleGpu)
    assert trigger is not None
    judge = SignalsJudge(observation.evidence.gpu, trigger, now) if several(trigger) else \
        GpuJudge(observation.evidence.gpu.get((str(trigger.signal), trigger.window)), trigger, now)
    return [finding(TriggerKind.IDLE_GPU, w, policy, [judge(p) for p in pods], pods, trigger.window, observation,
                    now) for w in workloads for pods in [gpu_pods(w)]]


def _reads(trigger: PolicyTrigger) -> Reads:
    """One query per signal; power has no busy level of its own (it is judged against each model's
    idle power), so its query keeps every series."""
    if not isinstance(trigger, IdleGpu):
        return Reads()
    keys = tuple(((str(signal), trigger.window), None if signal.relative else threshold)
                 for signal, threshold in trigger.limits)
    return Reads(gpu=keys, gpu_whole=tuple(k for k, _ in keys) if several(trigger) else ())


def _facts(trigger: PolicyTrigger) -> dict[str, Scalar]:
    if not isinstance(trigger, IdleGpu):
        return {}
    facts: dict[str, Scalar] = {"window": duration(trigger.window), "threshold": trigger.threshold,
                                "signal": str(trigger.signal)}
    if trigger.also:  # every signal with its threshold; power as a multiple of idle power
        facts["signals"] = ", ".join(f"{s.short}<={t:g}{'x idle' if s.relative else ''}" for s, t in trigger.limits)
    return facts


def _describe(t: PolicyTrigger) -> str:
    assert isinstance(t, IdleGpu)
    read = " and ".join(f"{s.value} peak <= {th:g}{' x idle power' if s.relative else ''}" for s, th in t.limits)
    never = (f"; never used since started, from {duration(t.never_used.after)} old: notice "
             f"{duration(t.never_used.warn_before)}") if t.never_used is not None else ""
    return (f"idleGpu: {read} per GPU over {duration(t.window)} "
            f"(coverage >= {t.min_coverage:g}, {gap_words(t.max_gap)}, pod age >= {duration(t.min_pod_age)}){never}")


TRIGGER = TriggerSpec(TriggerKind.IDLE_GPU, Role.MARKS, Usage.READS, gpu_findings, policy=IdleGpu, pods=gpu_pods,
                      reads=_reads, recheck=Recheck(pods=True, usage=True), facts=_facts,
                      describe=_describe)
