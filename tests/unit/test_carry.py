"""Busy verdicts carried between cycles, idle never (janitor.observe.carry), as properties.

Aspects covered:
- over generated sample histories (busy, idle, missing and non-finite stretches; pods that come, go
  and are re-created under their name with another UID; GPUs partly busy) and generated cycles (on
  time, late past the pause, Prometheus restarting or unable to say when it started, the busy
  answer or the whole read failing), the verdicts a steady cycle gives with what it carried never
  call idle what a read of every pod's whole window calls busy or unknown, and call idle whatever
  that read calls idle;
- a pod is carried only while the whole read holds a busy sample of each of its GPUs;
- the generators reach each of these situations (REACHED, with one known draw);
- the CPU's carry keeps the same promise, pod by pod;
- examples: a pause, a restart, an unknown start time and an unreadable busy answer each lead to a
  whole read of every pod, and a pod re-created under its name is read whole.
"""

from __future__ import annotations

import datetime
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from janitor.decide.evidence import (
    CpuEvidence,
    CpuUsage,
    EvidenceWindow,
    GpuEvidence,
    GpuSeries,
    PodKey,
    Quality,
)
from janitor.decide.model import ObjectRef, OwnerRef, PodView, State
from janitor.decide.triggers.idle import CpuJudge, GpuJudge
from janitor.observe.carry import BusyCarry, Full
from janitor.observe.prometheus import Runtime
from janitor.observe.targets import ScrapeIntervals
from janitor.policy.model import IdleCpu, IdleGpu

T0 = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.timezone.utc)
SCRAPE = 15  # seconds
WINDOW = datetime.timedelta(minutes=5)
LEVEL = 5.0
CORES = 0.5
STEP = datetime.timedelta(seconds=SCRAPE)
TRIGGER = IdleGpu(threshold=LEVEL, window=WINDOW, min_pod_age=datetime.timedelta(0), min_coverage=0.8)
CPU_TRIGGER = IdleCpu(cores=CORES, window=WINDOW, min_pod_age=datetime.timedelta(0))
GPU_KEY = (("DCGM_FI_DEV_GPU_UTIL", WINDOW), LEVEL)
CPU_KEY = ((WINDOW, ()), CORES, None)
MAX_PAUSE = datetime.timedelta(seconds=150)

settings.register_profile(
    "janitor-carry", max_examples=150, deadline=None, database=None, derandomize=True, print_blob=True,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
REACHED: Counter[str] = Counter()
SITUATIONS = ("a pod carried busy", "a carried pod read whole once its busy sample left the window",
              "idle called on a whole read after a carry", "partly idle GPUs read whole",
              "a pause read whole", "a restart read whole", "an unknown start read whole",
              "an unreadable busy answer read whole", "a re-created pod read whole",
              "a failed whole read", "a carried CPU")


# -- the sample histories -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Life:
    """One pod under a name: its UID, when it ran, and per GPU the value scraped at each 15 s."""

    uid: str
    start: int  # seconds after T0
    end: int
    gpus: tuple[tuple[float | None, ...], ...]  # per GPU, per scrape from `start` (None: no sample)

    def samples(self, gpu: int) -> list[tuple[int, float]]:
        return [(self.start + i * SCRAPE, v) for i, v in enumerate(self.gpus[gpu])
                if v is not None and self.start + i * SCRAPE < self.end]


@dataclass(frozen=True)
class Cycle:
    at: int  # seconds after T0
    started: int | None  # Prometheus' start time as it answers (None: it cannot say)
    busy_fails: bool
    whole_fails: bool


VALUES = st.sampled_from([0.0, 1.0, 4.0, 5.0, 6.0, 40.0, 90.0, math.nan])


@st.composite
def stretch(draw: st.DrawFn) -> list[float | None]:
    """A stretch of one kind: busy, idle, missing, or mixed scrapes."""
    n = draw(st.integers(1, 30))
    kind = draw(st.sampled_from(["busy", "idle", "idle", "gap", "mixed"]))
    if kind == "busy":
        return [90.0] * n
    if kind == "idle":
        return [0.0] * n
    if kind == "gap":
        return [None] * n
    return draw(st.lists(st.one_of(st.none(), VALUES), min_size=n, max_size=n))


@st.composite
def history(draw: st.DrawFn, length: int) -> list[Life]:
    """One to three names, each run by one to three pods one after the other."""
    lives: list[Life] = []
    for name in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, 300))
        for generation in range(draw(st.integers(1, 3))):
            end = at + draw(st.integers(60, length))
            gpus = draw(st.integers(1, 2))
            scrapes = (end - at) // SCRAPE + 1
            values = []
            for _ in range(gpus):
                row: list[float | None] = []
                while len(row) < scrapes:
                    row += draw(stretch())
                values.append(tuple(row[:scrapes]))
            lives.append(Life(f"uid-{name}-{generation}", at, end, tuple(values)))
            at = end + draw(st.sampled_from([0, 15, 120]))
    return lives


@st.composite
def cycles(draw: st.DrawFn) -> list[Cycle]:
    found, at, started = [], 600, 0
    for _ in range(draw(st.integers(3, 24))):
        # mostly on time; some early or late (the busy span then differs from the next); some paused
        at += draw(st.one_of(st.sampled_from([60, 60, 200]), st.integers(20, 140)))
        if draw(st.integers(0, 24)) == 0:
            started = at - 30  # Prometheus restarted
        said = None if draw(st.integers(0, 29)) == 0 else started
        found.append(Cycle(at, said, draw(st.integers(0, 24)) == 0, draw(st.integers(0, 29)) == 0))
    return found


def runtime(started: int | None, config: int | None = 0) -> Runtime:
    """What Prometheus says of itself: when it started and last loaded its config (None: it cannot say)."""
    return Runtime(None if started is None else stamp(started), None if config is None else stamp(config))


def name_of(life: Life) -> PodKey:
    return PodKey("ml", life.uid.rsplit("-", 1)[0].replace("uid", "pod"))


def stamp(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


# -- Prometheus, as the queries answer ------------------------------------------------------------------

@dataclass
class Answers:
    """What the queries answer from the histories at one cycle: the whole window of the pods asked
    about, or what was busy over the last span."""

    lives: Sequence[Life]
    cycle: Cycle
    asked_whole: list[Sequence[PodKey] | None] = field(default_factory=list)

    def _gpu_series(self, life: Life, gpu: int, since: float, busy_only: bool) -> GpuSeries | None:
        at = self.cycle.at
        inside = [(t, v) for t, v in life.samples(gpu) if since < t <= at]
        finite = [v for _, v in inside if math.isfinite(v)]
        peak = max(finite) if finite else None
        if busy_only:
            return GpuSeries(str(gpu), peak, 0, "node-1", uid=life.uid) if peak is not None and peak > LEVEL else None
        if not inside:
            return None
        times = [since] + [t for t, _ in inside] + [at]
        gap = datetime.timedelta(seconds=max(b - a for a, b in itertools.pairwise(times)))
        return GpuSeries(str(gpu), peak, len(inside), "node-1",
                         Quality(STEP, gap, any(not math.isfinite(v) for _, v in inside)), uid=life.uid)

    def gpu_whole(self, scoped: Sequence[PodKey] | None) -> GpuEvidence:
        self.asked_whole.append(scoped)
        window = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", WINDOW, STEP, stamp(self.cycle.at))
        if self.cycle.whole_fails:
            return GpuEvidence(window, failed="no answer within 30s")
        return GpuEvidence(window, self._gpu(scoped, self.cycle.at - WINDOW.total_seconds(), False))

    def gpu_busy(self, span: datetime.timedelta) -> GpuEvidence:
        window = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", span, STEP, stamp(self.cycle.at))
        if self.cycle.busy_fails:
            return GpuEvidence(window, failed="partial answer from Prometheus: a store was down")
        return GpuEvidence(window, self._gpu(None, self.cycle.at - span.total_seconds(), True))

    def _gpu(self, scoped: Sequence[PodKey] | None, since: float, busy_only: bool
             ) -> dict[PodKey, tuple[GpuSeries, ...]]:
        found: dict[PodKey, list[GpuSeries]] = {}
        for life in self.lives:
            if scoped is not None and name_of(life) not in scoped:
                continue
            for gpu in range(len(life.gpus)):
                s = self._gpu_series(life, gpu, since, busy_only)
                if s is not None:
                    found.setdefault(name_of(life), []).append(s)
        return {k: tuple(v) for k, v in found.items()}

    def _cpu_usage(self, scoped: Sequence[PodKey] | None, since: float, busy_only: bool) -> dict[PodKey, CpuUsage]:
        """A pod's cores: its first GPU's values read as hundredths of a core, by name (cAdvisor
        has no UID: every pod of the name counts)."""
        at = self.cycle.at
        found: dict[PodKey, list[tuple[int, float]]] = {}
        for life in self.lives:
            if scoped is None or name_of(life) in scoped:
                found.setdefault(name_of(life), []).extend(
                    (t, v / 100) for t, v in life.samples(0) if since < t <= at)
        usage = {}
        for key, inside in found.items():
            finite = [v for _, v in inside if math.isfinite(v)]
            peak = max(finite) if finite else None
            if busy_only:
                if peak is not None and peak > CORES:
                    usage[key] = CpuUsage(peak, 0)
                continue
            if not inside:
                continue
            times = [since] + sorted(t for t, _ in inside) + [at]
            gap = datetime.timedelta(seconds=max(b - a for a, b in itertools.pairwise(times)))
            usage[key] = CpuUsage(peak, len(inside), Quality(STEP, gap, len(finite) < len(inside)))
        return usage

    def cpu_whole(self, scoped: Sequence[PodKey] | None) -> CpuEvidence:
        self.asked_whole.append(scoped)
        window = EvidenceWindow("container_cpu_usage_seconds_total", WINDOW, STEP, stamp(self.cycle.at))
        if self.cycle.whole_fails:
            return CpuEvidence(window, failed="no answer within 30s")
        return CpuEvidence(window, self._cpu_usage(scoped, self.cycle.at - WINDOW.total_seconds(), False))

    def cpu_busy(self, span: datetime.timedelta) -> CpuEvidence:
        window = EvidenceWindow("container_cpu_usage_seconds_total", span, STEP, stamp(self.cycle.at))
        if self.cycle.busy_fails:
            return CpuEvidence(window, failed="HTTP 503")
        return CpuEvidence(window, self._cpu_usage(None, self.cycle.at - span.total_seconds(), True))


def running(lives: Sequence[Life], at: int) -> list[PodView]:
    """The pods the cluster shows at `at`: the newest life of each name that has started and not ended."""
    views = {}
    for life in sorted(lives, key=lambda life: life.start):
        if life.start <= at < life.end:
            key = name_of(life)
            views[key] = PodView(ref=ObjectRef("Pod", "v1", "ml", key.pod, life.uid), resource_version="1",
                                 labels={}, controller=OwnerRef("Job", "batch/v1", key.pod, "job-" + key.pod),
                                 node="node-1", phase="Running", started=stamp(life.start), gpus=len(life.gpus))
    return list(views.values())


WHY_WORDS = {Full.PAUSE: "a pause read whole", Full.RESTART: "a restart read whole",
             Full.UNKNOWN_START: "an unknown start read whole"}

# -- the runs -------------------------------------------------------------------------------------------

def run(lives: list[Life], plan: list[Cycle], *, cpu: bool = False) -> None:
    carry = BusyCarry(MAX_PAUSE)
    carried_before: set[str] = set()
    carried_ever: set[str] = set()
    read_whole_at: dict[str, int] = {}
    for cycle in plan:
        at = stamp(cycle.at)
        pods = running(lives, cycle.at)
        answers = Answers(lives, cycle)
        since = carry.begin(at, runtime(cycle.started))
        why = carry.stats.full
        if cpu:
            steady = carry.cpu(CPU_KEY, since, at, pods, answers.cpu_busy, answers.cpu_whole)
            whole = Answers(lives, Cycle(cycle.at, cycle.started, False, cycle.whole_fails)).cpu_whole(None)
            judged = [(p, CpuJudge(steady, CPU_TRIGGER, at)(p), CpuJudge(whole, CPU_TRIGGER, at)(p)) for p in pods]
        else:
            steady = carry.gpu(GPU_KEY, since, at, pods, answers.gpu_busy, answers.gpu_whole)
            whole = Answers(lives, Cycle(cycle.at, cycle.started, False, cycle.whole_fails)).gpu_whole(None)
            judged = [(p, GpuJudge(steady, TRIGGER, at)(p), GpuJudge(whole, TRIGGER, at)(p)) for p in pods]
        asked = answers.asked_whole[-1] if answers.asked_whole else None
        carried = set() if asked is None or steady.failed else {p.ref.uid for p in pods if name_of_pod(p) not in asked}
        for pod in pods:
            if pod.ref.uid in carried and not cpu:  # its GPUs as its last whole read found them, a window old at most
                assert cycle.at - read_whole_at[pod.ref.uid] < WINDOW.total_seconds(), (
                    f"at {cycle.at}s {pod.ref.name} carried, last read whole at {read_whole_at[pod.ref.uid]}s")
            elif not steady.failed:
                read_whole_at[pod.ref.uid] = cycle.at
        for pod, mine, theirs in judged:
            assert (mine.state is State.FIRES) == (theirs.state is State.FIRES), (
                f"at {cycle.at}s {pod.ref.name} ({pod.ref.uid}): carried {mine.state} ({mine.why}), "
                f"whole {theirs.state} ({theirs.why})")
            if pod.ref.uid in carried:
                # (a pod too young for the window is so whatever its samples say)
                assert theirs.state in (State.CLEAR, State.PARTIAL, State.TOO_YOUNG), (
                    f"at {cycle.at}s {pod.ref.name} carried busy, but the whole read says {theirs.state}: {theirs.why}")
                REACHED["a carried CPU" if cpu else "a pod carried busy"] += 1
            elif pod.ref.uid in carried_before:
                REACHED["a carried pod read whole once its busy sample left the window"] += 1
            if mine.state is State.FIRES and pod.ref.uid in carried_ever:
                REACHED["idle called on a whole read after a carry"] += 1
            if mine.state is State.PARTIAL and pod.ref.uid not in carried:
                REACHED["partly idle GPUs read whole"] += 1
            before = [life for life in lives if life.uid != pod.ref.uid and name_of(life) == name_of_pod(pod)
                      and life.end <= cycle.at]
            if before and since is not None and pod.ref.uid not in carried:
                REACHED["a re-created pod read whole"] += 1
        if why in WHY_WORDS:
            REACHED[WHY_WORDS[why]] += 1
        if cycle.busy_fails and since is not None:
            REACHED["an unreadable busy answer read whole"] += 1
            assert answers.asked_whole[-1] is None, "an unreadable busy answer, and not every pod read whole"
        if cycle.whole_fails:
            REACHED["a failed whole read"] += 1
        carried_before = carried
        carried_ever |= carried


def name_of_pod(pod: PodView) -> PodKey:
    return PodKey(pod.ref.namespace or "", pod.ref.name)


@settings(settings.get_profile("janitor-carry"))
@given(st.data())
def test_carried_busy_never_hides_what_the_whole_read_says(data: st.DataObject) -> None:
    plan = data.draw(cycles())
    lives = data.draw(history(plan[-1].at + 60))
    run(lives, plan)


@settings(settings.get_profile("janitor-carry"))
@given(st.data())
def test_the_cpu_carry_keeps_the_same_promise(data: st.DataObject) -> None:
    plan = data.draw(cycles())
    lives = data.draw(history(plan[-1].at + 60))
    run(lives, plan, cpu=True)


def test_the_generators_reach_each_situation(request: pytest.FixtureRequest) -> None:
    """Checked after both properties ran (the default run draws the same examples every time)."""
    if not {"test_carried_busy_never_hides_what_the_whole_read_says",
            "test_the_cpu_carry_keeps_the_same_promise"} <= {i.originalname for i in request.session.items}:
        pytest.skip("the properties were not selected")
    missed = [what for what in SITUATIONS if REACHED[what] < 1]
    assert not missed, f"never reached: {missed} (all: {dict(REACHED)})"


# -- examples ---------------------------------------------------------------------------------------------

def busy_pod() -> list[Life]:
    return [Life("uid-0-0", 0, 10_000, ((90.0,) * 700,))]


def asked(lives: list[Life], plan: list[Cycle], carry: BusyCarry | None = None) -> list[Sequence[PodKey] | None]:
    """What each cycle read whole: None for every pod, else the pods named."""
    carry, seen = carry or BusyCarry(MAX_PAUSE), []
    for cycle in plan:
        answers = Answers(lives, cycle)
        since = carry.begin(stamp(cycle.at), runtime(cycle.started))
        carry.gpu(GPU_KEY, since, stamp(cycle.at), running(lives, cycle.at), answers.gpu_busy, answers.gpu_whole)
        seen.append(answers.asked_whole[-1])
    return seen


def test_a_busy_pod_is_carried_from_the_second_read() -> None:
    assert asked(busy_pod(), [Cycle(600, 0, False, False), Cycle(660, 0, False, False),
                              Cycle(720, 0, False, False)]) == [None, [], []]


@pytest.mark.parametrize("case, then", [
    ("a pause past the limit", Cycle(660 + 151, 0, False, False)),
    ("Prometheus restarted", Cycle(720, 700, False, False)),
    ("Prometheus cannot say when it started", Cycle(720, None, False, False)),
    ("the busy answer is not whole", Cycle(720, 0, True, False)),
])
def test_each_doubt_about_the_carry_reads_every_pod_whole(case: str, then: Cycle) -> None:
    steady = [Cycle(600, 0, False, False), Cycle(660, 0, False, False)]
    assert asked(busy_pod(), [*steady, then]) == [None, [], None], case


def test_a_pod_re_created_under_its_name_is_read_whole() -> None:
    lives = [Life("uid-0-0", 0, 650, ((90.0,) * 60,)), Life("uid-0-1", 650, 10_000, ((90.0,) * 700,))]
    assert asked(lives, [Cycle(600, 0, False, False), Cycle(640, 0, False, False),
                         Cycle(700, 0, False, False)]) == [None, [], [PodKey("ml", "pod-0")]]


def test_a_busy_sample_is_carried_from_the_start_of_the_span_it_was_seen_in() -> None:
    """Busy at 615 s, seen by the read at 700 s over (600 s, 700 s]: carried until 900 s, not 1,000 s;
    at 950 s the window (650 s, 950 s] holds no busy sample, and the pod is read whole."""
    values = (90.0,) * 42 + (90.0,) + (0.0,) * 100  # busy until 615 s (start 0), idle after
    lives = [Life("uid-0-0", -15, 10_000, (values,))]
    plan = [Cycle(600, 0, False, False), Cycle(700, 0, False, False), Cycle(800, 0, False, False),
            Cycle(880, 0, False, False), Cycle(950, 0, False, False)]
    assert asked(lives, plan)[-1] == [PodKey("ml", "pod-0")]
    run(lives, plan)


def test_scrape_intervals_are_read_every_few_minutes_and_on_every_whole_read() -> None:
    carry, reads = BusyCarry(datetime.timedelta(hours=1)), []
    answers = iter([ScrapeIntervals({"dcgm": STEP}), ScrapeIntervals(None, "HTTP 503"),
                    ScrapeIntervals({"dcgm": STEP}), ScrapeIntervals({"dcgm": 2 * STEP}), ScrapeIntervals({}),
                    ScrapeIntervals({"dcgm": STEP}), ScrapeIntervals({"dcgm": STEP})])

    def cycle(at: int, started: int = 0, config: int | None = 0) -> ScrapeIntervals:
        carry.begin(stamp(at), runtime(started, config))

        def read() -> ScrapeIntervals:
            reads.append(at)
            return next(answers)
        return carry.intervals(stamp(at), read)

    assert cycle(600).jobs == {"dcgm": STEP}
    assert cycle(660).jobs == {"dcgm": STEP} and reads == [600]  # kept
    assert cycle(720 + 180).jobs is None  # past INTERVALS_FOR: read again; an error is not kept
    assert cycle(960).jobs == {"dcgm": STEP} and reads == [600, 900, 960]
    assert cycle(1020, started=1000).jobs == {"dcgm": 2 * STEP}  # Prometheus restarted: read again
    assert reads == [600, 900, 960, 1020]
    # Its config reloaded (a ServiceMonitor changed a job's interval), it did not restart: read again.
    assert cycle(1080, started=1000, config=1050).jobs == {} and reads[-1] == 1080
    # A store that does not say when it loaded its config: read every cycle.
    cycle(1140, started=1000, config=None)
    cycle(1200, started=1000, config=None)
    assert reads[-2:] == [1140, 1200]


def test_what_is_kept_stays_the_size_of_the_pods_there() -> None:
    """Pods come and go by the thousand a day: the carry forgets each one's series once it is gone."""
    carry = BusyCarry(MAX_PAUSE)
    lives = [Life(f"uid-{n}-0", 0, 700 + 60 * n, ((90.0,) * 200,)) for n in range(3)]
    for at in (600, 660, 720, 780, 840):
        answers = Answers(lives, Cycle(at, 0, False, False))
        carry.begin(stamp(at), runtime(0))
        carry.gpu(GPU_KEY, None if at == 600 else stamp(at - 60), stamp(at), running(lives, at), answers.gpu_busy,
                  answers.gpu_whole)
        carry.cpu(CPU_KEY, None if at == 600 else stamp(at - 60), stamp(at), running(lives, at), answers.cpu_busy,
                  answers.cpu_whole)
    assert carry.kept() == (0, 0, 0)  # every pod gone by 840 s: no pod, no GPU series, no CPU kept


def test_an_unreadable_busy_answer_reads_that_cycle_whole_and_is_counted_under_its_name() -> None:
    carry = BusyCarry(MAX_PAUSE)
    plan = [Cycle(600, 0, False, False), Cycle(660, 0, True, False), Cycle(720, 0, False, False)]
    assert asked(busy_pod(), plan, carry) == [None, None, []]
    assert carry.full_reads == {Full.START: 1, Full.UNREADABLE: 1}


def test_a_pod_without_a_gpu_series_is_not_kept_for_the_gpu_query() -> None:
    """Most covered pods of a cluster hold no GPU: nothing of theirs can be carried busy, so the
    GPU query's carry holds nothing for them (it held an empty set each, 216 bytes)."""
    carry = BusyCarry(MAX_PAUSE)
    lives = [Life("uid-0-0", 0, 10_000, ((90.0,) * 200,)), Life("uid-1-0", 0, 10_000, ((0.0,) * 200,)),
             Life("uid-2-0", 0, 10_000, ())]
    for at in (600, 660):
        answers = Answers(lives, Cycle(at, 0, False, False))
        carry.begin(stamp(at), runtime(0))
        found = carry.gpu(GPU_KEY, None if at == 600 else stamp(at - 60), stamp(at), running(lives, at),
                          answers.gpu_busy, answers.gpu_whole)
        assert set(found.pods) == {PodKey("ml", "pod-0"), PodKey("ml", "pod-1")}
        assert carry.kept()[0] == 2  # the two pods with a GPU series, whatever their verdict
    assert carry.kept()[1] == 1  # pod-0's GPU, seen busy since the first read
    assert answers.asked_whole[-1] == [PodKey("ml", "pod-1"), PodKey("ml", "pod-2")]  # pod-0 carried busy
