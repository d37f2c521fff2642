"""The idle GPU/CPU triggers pod by pod, and a workload's verdict from its pods', as tables.

Aspects covered:
- a pod with every GPU at or under the threshold over the window is idle; one busy GPU makes it
  partially idle (shown, never acted on); all busy is busy; MIG instance ids and ratio thresholds;
- unknown, never idle: no evidence read, failed/partial query, fewer series than requested GPUs,
  coverage under the minimum, a non-finite peak, no start time;
- too young: containers started inside the window (a recreated pod with a reused name) or
  younger than the policy's minimum pod age;
- CPU: absolute cores or a fraction of the request of the app containers (ignored sidecars'
  requests left out); missing series, request or coverage is unknown;
- a workload is idle only if every pod is; one busy (or partially idle) worker keeps a 4-pod job;
  unknown otherwise; a starting pod makes it in use whatever its other pods say;
- every verdict carries its reason as data (`reason.code`, nested pod reasons) and as a sentence.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import replace

import pytest
from factories import NOW, SCRAPED, scraped_every

from janitor.decide.evidence import CpuEvidence, CpuUsage, EvidenceWindow, GpuEvidence, GpuSeries, PodKey, Quality
from janitor.decide.model import ContainerView, ObjectRef, PodJudgement, PodState, PodView, State
from janitor.decide.reasons import Code, text
from janitor.decide.triggers.idle import judge_cpu, judge_gpu, judge_workload
from janitor.policy.model import GpuSignal, IdleCpu, IdleGpu

H = datetime.timedelta(hours=1)
S = datetime.timedelta(seconds=1)
WINDOW = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, datetime.timedelta(seconds=15), NOW)  # 480 samples
POD = PodKey("ml", "train-0")
TRIGGER = IdleGpu()  # peak <= 5 over 2h, coverage 0.8, pods at least 2h old


def pod(gpus: int = 2, started_hours: float | None = 3, containers=(("main", 4.0),), name: str = "train-0",
        phase: str = "Running") -> PodView:
    return PodView(
        ref=ObjectRef("Pod", "v1", "ml", name, str(uuid.uuid4())), resource_version="1", labels={}, controller=None,
        node="gpu-node-1", phase=phase,
        started=None if started_hours is None else NOW - datetime.timedelta(hours=started_hours), gpus=gpus,
        containers=tuple(ContainerView(n, c) for n, c in containers),
    )


def scraped(gpu: str, peak: float | None, samples: int) -> GpuSeries:
    """A GPU's series every 15 s without a gap or a NaN: only its numbers decide."""
    return GpuSeries(gpu, peak, samples, quality=SCRAPED)


def gpu_evidence(*series: GpuSeries, failed: str | None = None) -> GpuEvidence:
    return GpuEvidence(WINDOW, {POD: series} if series else {}, failed)


# -- GPU, per pod -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("series", "state", "code", "words"),
    [
        ((scraped("0", 0, 480), scraped("1", 5, 470)), State.FIRES, Code.GPU_IDLE, "GPU 0 peak 0, GPU 1 peak 5"),
        ((scraped("0", 97, 480), scraped("1", 0, 480)), State.PARTIAL, Code.GPU_PARTIAL, "1 of 2 GPUs idle"),
        ((scraped("0", 97, 480), scraped("1", 6, 480)), State.CLEAR, Code.GPU_BUSY, "busy"),
        ((scraped("0", 0, 480),), State.UNKNOWN, Code.SERIES_COUNT,
         "1 DCGM_FI_DEV_GPU_UTIL series for 2 requested GPUs"),
        ((scraped("0", 0, 480), scraped("1", 0, 300)), State.UNKNOWN, Code.GPU_LOW_COVERAGE, "cover 62%"),
        ((scraped("0", 0, 480), scraped("1", None, 480)), State.UNKNOWN, Code.NON_FINITE, "no finite value"),
    ],
    ids=["all-idle", "one-idle-gpu", "busy", "missing-series", "gap", "nan"],
)
def test_gpu_verdicts(series, state: State, code: Code, words: str) -> None:
    judged = judge_gpu(pod(), gpu_evidence(*series), TRIGGER, NOW)
    assert judged.state is state
    assert judged.why.code is code
    assert words in str(judged.why)


def test_idle_and_partially_idle_pods_name_their_idle_gpus_and_peaks() -> None:
    idle = judge_gpu(pod(), gpu_evidence(scraped("0", 0, 480), scraped("1", 5, 470)), TRIGGER, NOW)
    assert idle.idle_gpus == ("0", "1") and idle.peaks == {"0": 0, "1": 5}
    partial = judge_gpu(pod(), gpu_evidence(scraped("0", 97, 480), scraped("1", 0, 480)), TRIGGER, NOW)
    assert partial.idle_gpus == ("1",) and partial.peaks == {"0": 97, "1": 0}


@pytest.mark.parametrize(
    ("evidence", "code", "words"),
    [
        (None, Code.NO_EVIDENCE_READ, "no DCGM_FI_DEV_GPU_UTIL evidence was read"),
        (gpu_evidence(failed="HTTP 503 timeout"), Code.EVIDENCE_FAILED, "503"),
        (gpu_evidence(scraped("0", 0, 480), scraped("1", 0, 480), failed="partial answer"),
         Code.EVIDENCE_FAILED, "partial answer"),
    ],
    ids=["not-read", "failed-query", "partial-answer-with-idle-series"],
)
def test_evidence_not_usable_is_unknown_not_idle(evidence: GpuEvidence | None, code: Code, words: str) -> None:
    judged = judge_gpu(pod(), evidence, TRIGGER, NOW)
    assert judged.state is State.UNKNOWN and judged.why.code is code and words in str(judged.why)


@pytest.mark.parametrize(
    ("trigger", "started_hours"),
    [(TRIGGER, 0.5), (IdleGpu(min_pod_age=6 * H), 3)],
    ids=["started-inside-the-window", "younger-than-min-pod-age"],
)
def test_young_pod_is_not_judged(trigger: IdleGpu, started_hours: float) -> None:
    series = (scraped("0", 0, 480), scraped("1", 0, 480))  # history of an earlier pod, same name
    judged = judge_gpu(pod(started_hours=started_hours), gpu_evidence(*series), trigger, NOW)
    assert judged.state is State.TOO_YOUNG and judged.why.code is Code.TOO_YOUNG
    assert judged.idle_gpus == ()


def test_not_started_is_unknown() -> None:
    judged = judge_gpu(pod(gpus=1, started_hours=None), gpu_evidence(scraped("0", 0, 480)), TRIGGER, NOW)
    assert judged.state is State.UNKNOWN and judged.why.code is Code.NOT_STARTED


def test_mig_instance_ids_and_ratio_threshold() -> None:
    trigger = IdleGpu(signal=GpuSignal.GR_ENGINE_ACTIVE, threshold=0.05)
    mig = GpuSeries("3/2", 0.01, 480, quality=SCRAPED, mig=True)
    judged = judge_gpu(pod(gpus=1), gpu_evidence(mig), trigger, NOW)
    assert judged.state is State.FIRES and judged.idle_gpus == ("3/2",)


@pytest.mark.parametrize("by", ["series", "request"])
def test_a_mig_slice_on_gpu_util_is_unknown_whatever_it_reads(by: str) -> None:
    """dcgm-exporter exports GPU_UTIL as 0 for MIG instances, busy or not."""
    series = GpuSeries("3/2", 0.0, 480, quality=SCRAPED, mig=by == "series")
    slice_pod = replace(pod(gpus=1), state=PodState(limits={"nvidia.com/mig-3g.40gb": 1.0} if by == "request" else {}))
    judged = judge_gpu(slice_pod, gpu_evidence(series), IdleGpu(), NOW)
    assert judged.state is State.UNKNOWN and judged.why.code is Code.MIG_SIGNAL
    assert "does not measure MIG slices" in str(judged.why) and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in str(judged.why)


M = datetime.timedelta(minutes=1)


@pytest.mark.parametrize(
    ("quality", "trigger", "state", "code", "words"),
    [
        (Quality(15 * S, 20 * M), IdleGpu(), State.UNKNOWN, Code.GAP,
         "GPU 0: no samples for 20m00s at a stretch within the last 2h00m (at most 1m00s is accepted)"),
        (Quality(15 * S, 50 * S), IdleGpu(), State.FIRES, Code.GPU_IDLE, "idle"),
        (Quality(30 * S, 110 * S), IdleGpu(), State.FIRES, Code.GPU_IDLE, "idle"),  # 4 intervals of 30 s
        (Quality(15 * S, 50 * S), IdleGpu(max_gap=30 * S), State.UNKNOWN, Code.GAP, "at most 30s"),
        (Quality(15 * S, None), IdleGpu(), State.UNKNOWN, Code.GAP, "no samples for 2h00m"),
        (Quality(15 * S, 15 * S, non_finite=True), IdleGpu(), State.UNKNOWN, Code.NON_FINITE_SAMPLES,
         "GPU 0: NaN or infinite samples within the last 2h00m"),
        (Quality(None, 15 * S), IdleGpu(), State.UNKNOWN, Code.NO_INTERVAL, "how often Prometheus scrapes it"),
    ],
    ids=["20-min-hole", "short-gap", "default-scales-with-interval", "policy-max-gap", "gap-not-measured",
         "nan-sample", "interval-unknown"],
)
def test_evidence_quality_decides_whether_a_gpu_can_be_judged(
        quality: Quality, trigger: IdleGpu, state: State, code: Code, words: str) -> None:
    judged = judge_gpu(pod(gpus=1), gpu_evidence(GpuSeries("0", 0.0, 480, quality=quality)), trigger, NOW)
    assert judged.state is state and judged.why.code is code
    assert words in str(judged.why)


@pytest.mark.parametrize("quality", [Quality(15 * S, 20 * M), Quality(15 * S, 15 * S, non_finite=True),
                                     Quality(None, 15 * S)], ids=["gap", "nan", "interval-unknown"])
def test_a_busy_sample_is_use_whatever_else_is_missing(quality: Quality) -> None:
    """Only idleness needs the whole window: a finite peak above the threshold proves use."""
    busy = judge_gpu(pod(gpus=2), gpu_evidence(GpuSeries("0", 90.0, 100, quality=quality),
                                               GpuSeries("1", 0.0, 480, quality=quality)), IdleGpu(), NOW)
    assert busy.state is State.CLEAR and busy.why.code is Code.GPU_BUSY and busy.idle_gpus == ()
    cpu = judge_cpu(pod(gpus=0), CpuEvidence(CPU_WINDOW, {POD: CpuUsage(2.0, 30, quality)}), IdleCpu(cores=0.05), NOW)
    assert cpu.state is State.CLEAR and cpu.why.code is Code.CPU_BUSY


def test_coverage_is_measured_against_the_targets_own_interval() -> None:
    """240 samples fill 2 h scraped every 30 s, and half of it scraped every 15 s."""
    half = GpuSeries("0", 0.0, 240, quality=scraped_every(15 * S))
    assert judge_gpu(pod(gpus=1), gpu_evidence(half), IdleGpu(), NOW).why.code is Code.GPU_LOW_COVERAGE
    full = GpuSeries("0", 0.0, 240, quality=scraped_every(30 * S))
    assert judge_gpu(pod(gpus=1), gpu_evidence(full), IdleGpu(), NOW).state is State.FIRES


@pytest.mark.parametrize(
    ("quality", "code"),
    [(Quality(15 * S, 20 * M), Code.GAP), (Quality(15 * S, 15 * S, non_finite=True), Code.NON_FINITE_SAMPLES),
     (Quality(None, 15 * S), Code.NO_INTERVAL)],
    ids=["gap", "nan", "interval-unknown"],
)
def test_cpu_evidence_quality(quality: Quality, code: Code) -> None:
    evidence = CpuEvidence(CPU_WINDOW, {POD: CpuUsage(0.0, 120, quality)})
    judged = judge_cpu(pod(gpus=0), evidence, IdleCpu(cores=0.05), NOW)
    assert judged.state is State.UNKNOWN and judged.why.code is code and str(judged.why).startswith("CPU: ")


# -- CPU, per pod -----------------------------------------------------------------------------------

CPU_WINDOW = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)  # 120 points


@pytest.mark.parametrize(
    ("trigger", "usage", "cpu_request", "state", "code"),
    [
        (IdleCpu(cores=0.05), CpuUsage(0.01, 120, SCRAPED), 4.0, State.FIRES, Code.CPU_IDLE),
        (IdleCpu(cores=0.05), CpuUsage(0.5, 120, SCRAPED), 4.0, State.CLEAR, Code.CPU_BUSY),
        (IdleCpu(fraction_of_request=0.02), CpuUsage(0.07, 120, SCRAPED), 4.0, State.FIRES, Code.CPU_IDLE),
        (IdleCpu(fraction_of_request=0.02), CpuUsage(0.09, 120, SCRAPED), 4.0, State.CLEAR, Code.CPU_BUSY),
        (IdleCpu(fraction_of_request=0.02), CpuUsage(0.0, 120, SCRAPED), 0.0, State.UNKNOWN, Code.CPU_NO_REQUEST),
        (IdleCpu(cores=0.05), CpuUsage(0.0, 50, SCRAPED), 4.0, State.UNKNOWN, Code.CPU_LOW_COVERAGE),
        (IdleCpu(cores=0.05), CpuUsage(None, 120, SCRAPED), 4.0, State.UNKNOWN, Code.CPU_NO_SERIES),
        (IdleCpu(cores=0.05), None, 4.0, State.UNKNOWN, Code.CPU_NO_SERIES),
    ],
    ids=["cores-idle", "cores-busy", "fraction-idle", "fraction-busy", "no-request", "gap", "nan", "no-series"],
)
def test_cpu_verdicts(trigger: IdleCpu, usage: CpuUsage | None, cpu_request: float, state: State,
                      code: Code) -> None:
    evidence = CpuEvidence(CPU_WINDOW, {POD: usage} if usage else {})
    judged = judge_cpu(pod(gpus=0, containers=(("main", cpu_request),)), evidence, trigger, NOW)
    assert judged.state is state and judged.why.code is code


def test_cpu_fraction_counts_only_the_app_containers_request() -> None:
    """0.06 cores is over 5 % of the app's 1 core, though under 5 % of 9 cores with the sidecar."""
    trigger = IdleCpu(fraction_of_request=0.05, ignore_containers=("istio-proxy",))
    web = pod(gpus=0, containers=(("app", 1.0), ("istio-proxy", 8.0)))
    judged = judge_cpu(web, CpuEvidence(CPU_WINDOW, {POD: CpuUsage(0.06, 120, SCRAPED)}), trigger, NOW)
    assert judged.state is State.CLEAR and "0.05 of its 1-core request" in str(judged.why)


@pytest.mark.parametrize(
    ("evidence", "started_hours", "state", "code"),
    [
        (None, 3, State.UNKNOWN, Code.NO_EVIDENCE_READ),
        (CpuEvidence(CPU_WINDOW, {POD: CpuUsage(0.0, 120, SCRAPED)}, failed="HTTP 503"), 3, State.UNKNOWN,
         Code.EVIDENCE_FAILED),
        (CpuEvidence(CPU_WINDOW, {POD: CpuUsage(0.0, 120, SCRAPED)}), 0.5, State.TOO_YOUNG, Code.TOO_YOUNG),
        (CpuEvidence(CPU_WINDOW, {POD: CpuUsage(0.0, 120, SCRAPED)}), None, State.UNKNOWN, Code.NOT_STARTED),
    ],
    ids=["not-read", "failed-query", "too-young", "not-started"],
)
def test_cpu_short_of_full_evidence_is_never_idle(evidence: CpuEvidence | None, started_hours: float | None,
                                                  state: State, code: Code) -> None:
    judged = judge_cpu(pod(gpus=0, started_hours=started_hours), evidence, IdleCpu(cores=0.05), NOW)
    assert judged.state is state and judged.why.code is code


# -- a workload, from its pods ----------------------------------------------------------------------


def j(name: str, state: State) -> PodJudgement:
    return PodJudgement(ObjectRef("Pod", "v1", "ml", name, f"uid-{name}"), state, text(str(state)))


def test_one_busy_worker_keeps_a_four_pod_job() -> None:
    pods = [j("w0", State.FIRES), j("w1", State.FIRES), j("w2", State.CLEAR), j("w3", State.FIRES)]
    state, reason = judge_workload(pods)
    assert state is State.CLEAR and reason.code is Code.PODS_IN_USE
    assert "1 of 4 pods in use (w2" in str(reason)


@pytest.mark.parametrize(
    ("states", "expected", "code"),
    [
        ([State.FIRES] * 4, State.FIRES, Code.ALL_IDLE),
        ([State.FIRES, State.UNKNOWN], State.UNKNOWN, Code.PODS_UNSURE),
        ([State.FIRES, State.TOO_YOUNG], State.UNKNOWN, Code.PODS_UNSURE),
        ([State.PARTIAL, State.FIRES], State.CLEAR, Code.PODS_IN_USE),
        ([State.UNKNOWN, State.CLEAR], State.CLEAR, Code.PODS_IN_USE),
        ([], State.UNKNOWN, Code.NO_PODS),
    ],
    ids=["all-idle", "one-unknown", "one-young", "partial", "busy-beats-unknown", "no-pods"],
)
def test_workload_verdicts(states: list[State], expected: State, code: Code) -> None:
    state, reason = judge_workload([j(f"p{i}", s) for i, s in enumerate(states)])
    assert state is expected and reason.code is code


@pytest.mark.parametrize(
    "states",
    [[State.FIRES] * 4, [State.FIRES, State.UNKNOWN], [State.TOO_YOUNG], [State.CLEAR], []],
    ids=["all-idle", "one-unknown", "too-young", "busy", "no-running-pods"],
)
def test_a_starting_pod_makes_the_workload_in_use(states: list[State]) -> None:
    starting = pod(name="train-4", phase="Pending", started_hours=None)
    state, reason = judge_workload([j(f"p{i}", s) for i, s in enumerate(states)], starting)
    assert state is State.CLEAR and reason.code is Code.POD_STARTING
    assert reason.fact("pod") == "train-4"
    assert str(reason) == "pod train-4 is starting (Pending): in use again, or about to be"


def test_an_idle_workloads_reason_names_its_pods_as_data_and_words() -> None:
    pods = [j(f"w{i}", State.FIRES) for i in range(4)]
    state, reason = judge_workload(pods)
    assert state is State.FIRES
    assert reason.fact("total") == 4 and reason.codes() == {Code.ALL_IDLE, Code.POD, Code.FREE_TEXT}
    assert str(reason) == "all 4 pods idle (w0: fires; w1: fires; w2: fires; ...)"


def test_an_unsure_workload_names_the_pod_that_cannot_be_judged() -> None:
    state, reason = judge_workload([j("w0", State.FIRES), j("w1", State.UNKNOWN)])
    assert state is State.UNKNOWN
    assert str(reason) == "1 of 2 pods cannot be judged (w1: unknown)"
