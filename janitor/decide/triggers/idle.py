"""The idle triggers: is a workload idle on GPU (`idleGpu`) or CPU (`idleCpu`)?

Judged pod by pod, per GPU, on the peak over the window, so one idle GPU of a two-GPU pod shows.
Anything short of full evidence is *unknown*, never idle: a failed or partial query, fewer GPU
series than the GPUs the pod asked for, a MIG slice judged on a signal that reads 0 for MIG, a
series whose scrape interval Prometheus does not know, a stretch without samples longer than the
policy's `maxGap` (what happened then is not known), any NaN or infinite sample, samples covering
too little of the window, and a pod whose containers started inside the window (a recreated pod
with a reused name must not inherit the old one's history). Where the exporter labels series with
pod UIDs, only the pod's own UID counts (`janitor.decide.attribution`). A workload is idle only if every one
of its running pods is, and none of its pods is starting (a starting pod means it is in use
again, or about to be).
"""

from __future__ import annotations

import datetime
import operator
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from janitor.decide import activity
from janitor.decide.attribution import attribute
from janitor.decide.evidence import CpuEvidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey, Quality
from janitor.decide.model import (
    CPU_SIGNAL,
    MIG_RESOURCE_PREFIX,
    Finding,
    Observation,
    PodJudgement,
    PodView,
    State,
    TriggerKind,
)
from janitor.decide.reasons import Code, Fact, Reason, Words, why
from janitor.decide.selection import Workload
from janitor.decide.triggers import never_used
from janitor.decide.triggers.spec import Reads, Recheck, Role, TriggerSpec, Usage, duration, gap_words
from janitor.policy.model import GAP_INTERVALS, IdleCpu, IdleGpu, Policy
from janitor.policy.model import Trigger as PolicyTrigger
from janitor.why_note import Scalar

_GPU = operator.attrgetter("gpu")
_ON_CPU = frozenset({CPU_SIGNAL})  # a CPU verdict's `busy_on`, or `doubt_on` when it is not sure
_IN_USE = frozenset({State.CLEAR, State.PARTIAL})  # a pod's verdicts that keep its workload
ACTIVITY_SIGNAL = "activity"  # what a pod judgement names as busy when the policy's activity rules say in use
MIN_DEFAULT_GAP = datetime.timedelta(minutes=1)
"""The default `maxGap` is GAP_INTERVALS scrape intervals, but never under a minute: a Prometheus
scraping every few seconds misses a scrape or two under load without losing what a GPU did."""


def pod_key(pod: PodView) -> PodKey:
    return PodKey(pod.ref.namespace or "", pod.ref.name)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def _peak_words(peaks: tuple[tuple[str, float | None], ...]) -> str:
    """"GPU 0 peak 0.4, GPU 1 peak 97": a GPU verdict's detail, written where it is shown."""
    return ", ".join(f"GPU {gpu} peak {_fmt(peak)}" for gpu, peak in peaks)


def _pairs(ordered: Sequence[GpuSeries]) -> tuple[tuple[str, float | None], ...]:
    """Each series' GPU and peak, in the order given."""
    return tuple([(s.gpu, s.peak) for s in ordered])


def max_gap(configured: datetime.timedelta | None, interval: datetime.timedelta) -> datetime.timedelta:
    return configured if configured is not None else max(GAP_INTERVALS * interval, MIN_DEFAULT_GAP)


def _doubt(what: str, quality: Quality, window: EvidenceWindow, configured: datetime.timedelta | None
           ) -> Reason | None:
    """Why these samples cannot show idleness, or None when they can."""
    if quality.interval is None:
        return why(Code.NO_INTERVAL, what=what)
    if quality.non_finite:
        return why(Code.NON_FINITE_SAMPLES, what=what, window=window.window)
    allowed = max_gap(configured, quality.interval)
    if quality.gap is None or quality.gap > allowed:
        return why(Code.GAP, what=what, gap=quality.gap or window.window, window=window.window, allowed=allowed)
    return None


def is_mig_pod(pod: PodView) -> bool:
    """Whether the pod holds a MIG slice (`is_mig`, inline: asked of every GPU pod judged)."""
    for resource, amount in pod.state.limits.items():
        if resource.startswith(MIG_RESOURCE_PREFIX) and amount > 0:
            return True
    return False


def _any_mig(series: Sequence[GpuSeries]) -> bool:
    """Whether any series is a MIG instance's (a loop, not any(): asked of every GPU pod judged)."""
    for s in series:
        if s.mig:
            return True
    return False


def _doubting(judged: PodJudgement, signals: frozenset[str]) -> PodJudgement:
    """A verdict of one signal that is not sure says on which (the signal it reads)."""
    return replace(judged, doubt_on=signals) if judged.state in (State.UNKNOWN, State.TOO_YOUNG) else judged


class _Judge:
    """What judging a pod on one policy's trigger needs that no pod changes, worked out once per
    policy and cycle: the age a pod needs, and per scrape interval the longest gap allowed."""

    def __init__(self, trigger: IdleGpu | IdleCpu, now: datetime.datetime) -> None:
        self.now = now
        self.needed = max(trigger.window, trigger.min_pod_age)
        self.configured = trigger.max_gap
        self.allowed: dict[datetime.timedelta, datetime.timedelta] = {}

    def young(self, pod: PodView, doubt_on: frozenset[str] = frozenset()) -> PodJudgement | None:
        """Why the pod is not judged yet (not started, or younger than the window or the minimum
        age: samples before its start belong to another pod), or None. `doubt_on`: the signals the
        verdict could not judge, when the judge names them."""
        if pod.started is None:
            return PodJudgement(pod.ref, State.UNKNOWN, why(Code.NOT_STARTED), doubt_on=doubt_on)
        running = self.now - pod.started
        if running < self.needed:
            return PodJudgement(pod.ref, State.TOO_YOUNG, why(Code.TOO_YOUNG, running=running, needed=self.needed),
                                doubt_on=doubt_on)
        return None

    def doubtful(self, quality: Quality) -> bool:
        """Whether `_doubt` has a reason for these samples."""
        interval = quality.interval
        if interval is None or quality.non_finite or quality.gap is None:
            return True
        allowed = self.allowed.get(interval)
        if allowed is None:
            allowed = self.allowed[interval] = max_gap(self.configured, interval)
        return quality.gap > allowed


class GpuJudge(_Judge):
    """`judge_gpu` for one policy's trigger and evidence."""

    def __init__(self, evidence: GpuEvidence | None, trigger: IdleGpu, now: datetime.datetime) -> None:
        super().__init__(trigger, now)
        self.evidence, self.trigger = evidence, trigger
        self.signal = str(trigger.signal)
        self.limit: tuple[tuple[str, Fact], ...] = (("signal", self.signal), ("threshold", trigger.threshold),
                                                     ("window", trigger.window))
        self.busy_on = frozenset({self.signal})
        self.expected: dict[datetime.timedelta, int] = {}
        self._unread = self._not_read()  # the same for every pod: the evidence is the cycle's
        self.covers_mig = trigger.signal.covers_mig

    def __call__(self, pod: PodView) -> PodJudgement:
        evidence, trigger, signal = self.evidence, self.trigger, self.signal
        unread = self._unread
        if unread is not None or evidence is None:
            return PodJudgement(pod.ref, State.UNKNOWN, unread or why(Code.NO_EVIDENCE_READ, signal=signal))
        young = self.young(pod)
        if young:
            return self.never_used(pod) or young
        mine = attribute(pod.ref.uid, evidence.pods.get(pod_key(pod), ()), signal)
        series = mine.series
        if not self.covers_mig and (is_mig_pod(pod) or _any_mig(series)):
            gpu = next((f"GPU {s.gpu}" for s in series if s.mig), "a GPU it requested")
            return PodJudgement(pod.ref, State.UNKNOWN, why(Code.MIG_SIGNAL, what=gpu, signal=signal))
        counted = None if len(series) == pod.gpus else why(Code.SERIES_COUNT, series=len(series), signal=signal,
                                                                     gpus=pod.gpus)
        if mine.doubt is not None or counted is not None:
            # A predecessor's samples, some that cannot be told from one's, or more or fewer series
            # than GPUs: its own samples above the threshold are use all the same (busy beats unknown).
            busy_own = sorted((s for s in series if s.peak is not None and s.peak > trigger.threshold), key=_GPU)
            if busy_own:
                return PodJudgement(pod.ref, State.CLEAR, self._reason(Code.GPU_BUSY, _pairs(busy_own)), (),
                                    {s.gpu: s.peak for s in series}, self.busy_on)
            if mine.doubt is not None:
                return PodJudgement(pod.ref, State.UNKNOWN, mine.doubt, peaks={s.gpu: s.peak for s in series})
            assert counted is not None
            return PodJudgement(pod.ref, State.UNKNOWN, counted)
        distinct = self._distinct(pod, series)
        if distinct is not None:
            return distinct
        peaks = {s.gpu: s.peak for s in series}
        # A sample above the threshold is use, whatever else is missing: busy beats unknown. Only
        # idleness needs the whole window's evidence.
        busy = {s.gpu for s in series if s.peak is not None and s.peak > trigger.threshold}
        unsure = next((r for s in series if s.gpu not in busy for r in [self.unsure(s)] if r is not None), None)
        if unsure is not None and not busy:
            return PodJudgement(pod.ref, State.UNKNOWN, unsure, peaks=peaks)
        idle = tuple(sorted(s.gpu for s in series if s.gpu not in busy)) if unsure is None else ()
        ordered = _pairs(sorted(series, key=_GPU))
        if len(idle) == len(series):
            return PodJudgement(pod.ref, State.FIRES, self._reason(Code.GPU_IDLE, ordered), idle, peaks)
        if idle:
            return PodJudgement(pod.ref, State.PARTIAL, self._reason(Code.GPU_PARTIAL, ordered, ("idle", len(idle)),
                                                                     ("total", len(series))), idle, peaks, self.busy_on)
        return PodJudgement(pod.ref, State.CLEAR, self._reason(Code.GPU_BUSY, ordered), (), peaks, self.busy_on)

    def never_used(self, pod: PodView) -> PodJudgement | None:
        """The verdict over the pod's whole life, where the never-used window judges a pod too young
        for the idle window (`triggers.never_used`); None where it does not."""
        running = never_used.life(self.trigger, pod, self.now)
        found = never_used.evidence(self.evidence, pod, running) if running and self.evidence else None
        if running is None or found is None:
            return None
        return never_used.judged(GpuJudge(found, never_used.trigger(self.trigger, running), self.now)(pod), running)

    def _reason(self, code: Code, peaks: tuple[tuple[str, float | None], ...], *first: tuple[str, Fact]) -> Reason:
        """`why(code, **first, detail=..., signal=..., threshold=..., window=..., peaks=...)`: each GPU's
        peak as data, in GPU order (plain words read those), the sentence's detail written from them
        only when shown, and the trigger's limit. Its facts are put together as `why` would, without
        the keyword dicts: this is said of every GPU pod judged."""
        return Reason(code, (*first, ("detail", Words(_peak_words, peaks)), *self.limit, ("peaks", peaks)))

    def _distinct(self, pod: PodView, series: Sequence[GpuSeries]) -> PodJudgement | None:
        """The rule above in one pass over the series, when each names another GPU (as exporters
        do); None when two name the same one: then a GPU is busy if either series says so."""
        threshold = self.trigger.threshold
        peaks: dict[str, float | None] = {}
        idle: list[str] = []
        unsure = None
        for s in series:
            peak = peaks[s.gpu] = s.peak
            if peak is not None and peak > threshold:
                continue
            if unsure is None:
                unsure = self.unsure(s)
            idle.append(s.gpu)
        if len(peaks) != len(series):
            return None
        if unsure is not None and len(idle) == len(series):
            return PodJudgement(pod.ref, State.UNKNOWN, unsure, peaks=peaks)
        found = tuple(sorted(idle)) if unsure is None else ()
        ordered = tuple(sorted(peaks.items()))  # by GPU: each names another, so no two peaks are compared
        if len(found) == len(series):
            return PodJudgement(pod.ref, State.FIRES, self._reason(Code.GPU_IDLE, ordered), found, peaks)
        if found:
            return PodJudgement(pod.ref, State.PARTIAL, self._reason(Code.GPU_PARTIAL, ordered, ("idle", len(found)),
                                                                     ("total", len(series))), found, peaks,
                                self.busy_on)
        return PodJudgement(pod.ref, State.CLEAR, self._reason(Code.GPU_BUSY, ordered), (), peaks, self.busy_on)

    def unread(self) -> Reason | None:
        """Why this signal's evidence says nothing this cycle (not read, or the query failed), or None."""
        return self._unread

    def _not_read(self) -> Reason | None:
        if self.evidence is None:
            return why(Code.NO_EVIDENCE_READ, signal=self.signal)
        if self.evidence.failed:
            return why(Code.EVIDENCE_FAILED, signal=self.signal, error=self.evidence.failed)
        return None

    def unsure(self, s: GpuSeries) -> Reason | None:
        """Why this GPU's series cannot show it idle over the window, or None when it can."""
        assert self.evidence is not None
        window, trigger = self.evidence.window, self.trigger
        if self.doubtful(s.quality):
            return _doubt(f"GPU {s.gpu}", s.quality, window, trigger.max_gap)
        interval = s.quality.interval
        assert interval is not None  # doubtful checked it
        expected = self.expected.get(interval)
        if expected is None:
            expected = self.expected[interval] = window.expected_at(interval)
        coverage = s.samples / expected
        if coverage < trigger.min_coverage:
            return why(Code.GPU_LOW_COVERAGE, gpu=s.gpu, coverage=coverage, window=trigger.window,
                       needed=trigger.min_coverage)
        return why(Code.NON_FINITE, gpu=s.gpu) if s.peak is None else None


def judge_gpu(pod: PodView, evidence: GpuEvidence | None, trigger: IdleGpu, now: datetime.datetime) -> PodJudgement:
    return GpuJudge(evidence, trigger, now)(pod)


class CpuJudge(_Judge):
    """`judge_cpu` for one policy's trigger and evidence."""

    def __init__(self, evidence: CpuEvidence | None, trigger: IdleCpu, now: datetime.datetime) -> None:
        super().__init__(trigger, now)
        self.evidence, self.trigger = evidence, trigger
        # What no pod changes, worked out once: an absolute limit's words, the points the window holds
        # (when a pod first needs them).
        self.cores = f"{trigger.cores:g} cores" if trigger.cores is not None else ""
        self.expected: int | None = None

    def __call__(self, pod: PodView) -> PodJudgement:
        """The verdict; one that is not sure says so of the CPU (`doubt_on`), made so where it is
        made rather than copied after (a verdict for every running pod, several times a cycle)."""
        evidence, trigger = self.evidence, self.trigger
        if evidence is None:
            return PodJudgement(pod.ref, State.UNKNOWN, why(Code.NO_EVIDENCE_READ, signal="CPU"), doubt_on=_ON_CPU)
        if evidence.failed:
            return PodJudgement(pod.ref, State.UNKNOWN, why(Code.EVIDENCE_FAILED, signal="CPU",
                                                            error=evidence.failed), doubt_on=_ON_CPU)
        young = self.young(pod, _ON_CPU)
        if young:
            life = self._life(pod, evidence)
            return young if life is None else _doubting(life, _ON_CPU)
        usage = evidence.pods.get(pod_key(pod))
        if usage is None or usage.peak_cores is None:
            return PodJudgement(pod.ref, State.UNKNOWN, why(Code.CPU_NO_SERIES), doubt_on=_ON_CPU)
        if trigger.cores is not None:
            limit, described = trigger.cores, self.cores
        else:
            ignored = trigger.ignore_containers
            request = sum(c.cpu_request_cores for c in pod.containers if c.name not in ignored)
            if request <= 0:
                return PodJudgement(pod.ref, State.UNKNOWN, why(Code.CPU_NO_REQUEST), doubt_on=_ON_CPU)
            fraction = trigger.fraction_of_request or 0.0
            limit, described = fraction * request, f"{fraction:g} of its {request:g}-core request"
        peak = usage.peak_cores
        if peak > limit:  # use, whatever else is missing: only idleness needs the whole window
            return PodJudgement(pod.ref, State.CLEAR, why(Code.CPU_BUSY, peak=peak, limit=described,
                                                          window=trigger.window), busy_on=_ON_CPU)
        doubt = _doubt("CPU", usage.quality, evidence.window, trigger.max_gap) if self.doubtful(usage.quality) else None
        if doubt is not None:
            return PodJudgement(pod.ref, State.UNKNOWN, doubt, doubt_on=_ON_CPU)
        expected = self.expected
        if expected is None:
            expected = self.expected = evidence.window.expected_samples
        coverage = usage.samples / expected
        if coverage < trigger.min_coverage:
            return PodJudgement(pod.ref, State.UNKNOWN, why(Code.CPU_LOW_COVERAGE, coverage=coverage,
                                                            window=trigger.window), doubt_on=_ON_CPU)
        return PodJudgement(pod.ref, State.FIRES, why(Code.CPU_IDLE, peak=peak, limit=described,
                                                      window=trigger.window))


    def _life(self, pod: PodView, evidence: CpuEvidence) -> PodJudgement | None:
        """The CPU since the pod started, for the in-use check of a never-used window (`life_after`):
        busy on it beats everything; more points than its life holds are another pod's of its name
        (unknown); else judged over its life as over a window. None where it does not apply."""
        after, trigger = self.trigger.life_after, self.trigger
        if after is None or pod.started is None or not after <= self.now - pod.started < trigger.window:
            return None
        running, window = self.now - pod.started, evidence.window
        usage = evidence.pods.get(pod_key(pod))
        if usage is not None:
            usage = replace(usage, quality=never_used.shifted(
                usage.quality, never_used.before_start(window.window, window.step, running, partial=True),
                window.window, running, never_used.before_start(window.window, window.step, running)))
        found = CpuEvidence(replace(window, window=running), {pod_key(pod): usage} if usage is not None else {})
        judged = CpuJudge(found, replace(trigger, window=running, min_pod_age=datetime.timedelta(0), life_after=None),
                          self.now)(pod)
        if judged.state is not State.CLEAR and usage is not None and usage.samples > running // window.step + 1:
            return PodJudgement(pod.ref, State.UNKNOWN, why(Code.CPU_BEFORE_START, samples=usage.samples,
                                                            running=running))
        return never_used.judged(judged, running)


def judge_cpu(pod: PodView, evidence: CpuEvidence | None, trigger: IdleCpu, now: datetime.datetime) -> PodJudgement:
    return CpuJudge(evidence, trigger, now)(pod)


def judge_workload(pods: Sequence[PodJudgement], starting: PodView | None = None) -> tuple[State, Reason]:
    """Idle only if every pod is idle and none is starting; any busy pod keeps it; otherwise unknown."""
    if starting is not None:
        return State.CLEAR, why(Code.POD_STARTING, pod=starting.ref.name, phase=starting.phase)
    if not pods:
        return State.UNKNOWN, why(Code.NO_PODS)
    busy = [j for j in pods if j.state in _IN_USE]
    if busy:
        return State.CLEAR, why(Code.PODS_IN_USE, busy=len(busy), total=len(pods), pod=busy[0].pod.name,
                                why=busy[0].why)
    fires = State.FIRES  # looked up once, not per pod (an enum member is a slow attribute on 3.11)
    unsure = [j for j in pods if j.state is not fires]
    if unsure:
        return State.UNKNOWN, why(Code.PODS_UNSURE, unsure=len(unsure), total=len(pods), pod=unsure[0].pod.name,
                                  why=unsure[0].why)
    shown = tuple(why(Code.POD, pod=j.pod.name, why=j.why) for j in pods[:3])
    return State.FIRES, why(Code.ALL_IDLE, total=len(pods), shown=shown, more="; ..." if len(pods) > 3 else "")


def running(workload: Workload) -> tuple[PodView, ...]:
    """The pods `idleCpu` judges: running and not being deleted (found as the workload was made)."""
    return workload.running


def gpu_pods(workload: Workload) -> tuple[PodView, ...]:
    """The pods `idleGpu` judges: running pods that hold GPUs."""
    return workload.gpu_pods


def starting(workload: Workload) -> PodView | None:
    """The workload's first pod that is starting (Pending, not being deleted), or None."""
    for p in workload.pods:
        if p.phase == "Pending" and not p.deleting:
            return p
    return None


def finding(trigger: TriggerKind, workload: Workload, policy: Policy, judged: Sequence[PodJudgement],
             pods: Sequence[PodView], window: datetime.timedelta, observation: Observation,
             now: datetime.datetime) -> Finding:
    """The workload's verdict: unknown when its owner chain is; in use when the policy's activity
    rules say so (whatever its GPUs or CPU read); else what its pods' verdicts make it."""
    gpus = sum([p.gpus for p in pods])
    if workload.unknown is not None:
        state, reason = State.UNKNOWN, why(Code.WORKLOAD_UNKNOWN, why=workload.unknown)
    elif policy.activity is not None and (active := activity.in_use(workload, policy, observation.evidence,
                                                                    now)) is not None:
        # Use no trigger is blind to: a stuck job's spin makes its GPU_UTIL read busy, not its requests.
        state, reason = State.CLEAR, active
        judged = [replace(j, busy_on=j.busy_on | {ACTIVITY_SIGNAL}) for j in judged]
    else:
        state, reason = judge_workload(judged, starting(workload))
    idle_gpus = gpus if state is State.FIRES and trigger is TriggerKind.IDLE_GPU else 0
    return Finding(trigger, policy.name, policy.mode, workload.ref, state, reason, source=policy.source,
                   known=workload.known, pods=tuple(judged), gpus=gpus,
                   reclaim_gpu_hours=idle_gpus * window.total_seconds() / 3600,
                   owner=workload.owner, managed_by=workload.managed_by)


def cpu_findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
                 now: datetime.datetime) -> list[Finding]:
    trigger = policy.trigger(IdleCpu)
    assert trigger is not None
    judge = CpuJudge(observation.evidence.cpu.get((trigger.window, tuple(sorted(trigger.ignore_containers)))),
                     trigger, now)
    return [finding(TriggerKind.IDLE_CPU, w, policy, [judge(p) for p in pods], pods, trigger.window, observation,
                    now) for w in workloads for pods in [running(w)]]


def reclaim_by(findings: Iterable[Finding]) -> dict[tuple[str, str], float]:
    """GPU-hours enforcing would reclaim, per (policy, namespace)."""
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for f in findings:
        if f.known and f.reclaim_gpu_hours:
            totals[(f.policy, f.subject.namespace or "")] += f.reclaim_gpu_hours
    return dict(totals)


def _cpu_reads(trigger: PolicyTrigger) -> Reads:
    if not isinstance(trigger, IdleCpu):
        return Reads()
    return Reads(cpu=(((trigger.window, tuple(sorted(trigger.ignore_containers))), trigger.cores,
                       trigger.fraction_of_request),))


def _cpu_facts(trigger: PolicyTrigger) -> dict[str, Scalar]:
    if not isinstance(trigger, IdleCpu):
        return {}
    facts: dict[str, Scalar] = {"window": duration(trigger.window)}
    if trigger.cores is not None:
        facts["cores"] = trigger.cores
    if trigger.fraction_of_request is not None:
        facts["fractionOfRequest"] = trigger.fraction_of_request
    return facts


def _cpu_describe(t: PolicyTrigger) -> str:
    assert isinstance(t, IdleCpu)
    limit = f"{t.cores:g} cores" if t.cores is not None else f"{t.fraction_of_request:g} of request"
    ignored = f", ignoring {', '.join(t.ignore_containers)}" if t.ignore_containers else ""
    return f"idleCpu: peak <= {limit} over {duration(t.window)} ({gap_words(t.max_gap)}){ignored}"


CPU_TRIGGER = TriggerSpec(TriggerKind.IDLE_CPU, Role.MARKS, Usage.READS, cpu_findings, policy=IdleCpu, pods=running,
                          reads=_cpu_reads, recheck=Recheck(pods=True, usage=True), facts=_cpu_facts,
                          describe=_cpu_describe)
