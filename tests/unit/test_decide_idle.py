"""The idle GPU/CPU triggers as tables of evidence and verdicts.

Aspects covered:
- a pod with every GPU at or under the threshold over the window is idle; one busy GPU makes it
  partially idle (shown, never acted on); all busy is busy;
- unknown, never idle: failed/partial query, fewer series than requested GPUs, coverage under
  the minimum, a non-finite peak, no start time;
- too young: containers started inside the window (a recreated pod with a reused name);
- CPU: absolute cores or a fraction of the request; missing series or request is unknown;
- a workload is idle only if every pod is; one busy worker keeps a 4-pod job; unknown otherwise.
"""

from __future__ import annotations

import datetime

import pytest
from factories import NOW

from janitor.decide.evidence import CpuEvidence, CpuUsage, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.idle import Idleness, Judgement, PodFacts, judge_cpu, judge_gpu, judge_workload
from janitor.policy.model import IdleCpu, IdleGpu

H = datetime.timedelta(hours=1)
WINDOW = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, datetime.timedelta(seconds=15), NOW)  # 480 samples
POD = PodKey("ml", "train-0")
TRIGGER = IdleGpu()  # peak <= 5 over 2h, coverage 0.8


def facts(gpus: int = 2, started_hours: float = 3, cpu: float = 4.0) -> PodFacts:
    return PodFacts(POD, "uid-1", NOW - datetime.timedelta(hours=started_hours), gpus, cpu)


def gpu_evidence(*series: GpuSeries, failed: str | None = None) -> GpuEvidence:
    return GpuEvidence(WINDOW, {POD: series} if series else {}, failed)


@pytest.mark.parametrize(
    ("series", "expected", "words"),
    [
        ((GpuSeries("0", 0, 480), GpuSeries("1", 5, 470)), Idleness.IDLE, "GPU 0 peak 0, GPU 1 peak 5"),
        ((GpuSeries("0", 97, 480), GpuSeries("1", 0, 480)), Idleness.PARTIAL, "1 of 2 GPUs idle"),
        ((GpuSeries("0", 97, 480), GpuSeries("1", 6, 480)), Idleness.BUSY, "busy"),
        ((GpuSeries("0", 0, 480),), Idleness.UNKNOWN, "1 DCGM_FI_DEV_GPU_UTIL series for 2 requested GPUs"),
        ((GpuSeries("0", 0, 480), GpuSeries("1", 0, 300)), Idleness.UNKNOWN, "cover 62%"),
        ((GpuSeries("0", 0, 480), GpuSeries("1", None, 480)), Idleness.UNKNOWN, "no finite value"),
    ],
    ids=["all-idle", "one-idle-gpu", "busy", "missing-series", "gap", "nan"],
)
def test_gpu_verdicts(series, expected: Idleness, words: str) -> None:
    judged = judge_gpu(facts(), gpu_evidence(*series), TRIGGER, NOW)
    assert judged.idleness is expected
    assert words in judged.why


def test_failed_query_is_unknown_not_idle() -> None:
    judged = judge_gpu(facts(), gpu_evidence(failed="HTTP 503 timeout"), TRIGGER, NOW)
    assert judged.idleness is Idleness.UNKNOWN and "503" in judged.why


def test_pod_younger_than_the_window_is_not_judged() -> None:
    series = (GpuSeries("0", 0, 480), GpuSeries("1", 0, 480))  # history of an earlier pod, same name
    judged = judge_gpu(facts(started_hours=0.5), gpu_evidence(*series), TRIGGER, NOW)
    assert judged.idleness is Idleness.TOO_YOUNG


def test_not_started_is_unknown() -> None:
    judged = judge_gpu(PodFacts(POD, "u", None, 1), gpu_evidence(GpuSeries("0", 0, 480)), TRIGGER, NOW)
    assert judged.idleness is Idleness.UNKNOWN


def test_mig_instance_ids_and_ratio_threshold() -> None:
    trigger = IdleGpu(threshold=0.05)
    judged = judge_gpu(facts(gpus=1), gpu_evidence(GpuSeries("3/2", 0.01, 480)), trigger, NOW)
    assert judged.idleness is Idleness.IDLE and judged.idle_gpus == ("3/2",)


CPU_WINDOW = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)  # 120 points


@pytest.mark.parametrize(
    ("trigger", "usage", "cpu_request", "expected"),
    [
        (IdleCpu(cores=0.05), CpuUsage(0.01, 120), 4.0, Idleness.IDLE),
        (IdleCpu(cores=0.05), CpuUsage(0.5, 120), 4.0, Idleness.BUSY),
        (IdleCpu(fraction_of_request=0.02), CpuUsage(0.07, 120), 4.0, Idleness.IDLE),
        (IdleCpu(fraction_of_request=0.02), CpuUsage(0.09, 120), 4.0, Idleness.BUSY),
        (IdleCpu(fraction_of_request=0.02), CpuUsage(0.0, 120), 0.0, Idleness.UNKNOWN),
        (IdleCpu(cores=0.05), CpuUsage(0.0, 50), 4.0, Idleness.UNKNOWN),
        (IdleCpu(cores=0.05), None, 4.0, Idleness.UNKNOWN),
    ],
    ids=["cores-idle", "cores-busy", "fraction-idle", "fraction-busy", "no-request", "gap", "no-series"],
)
def test_cpu_verdicts(trigger: IdleCpu, usage: CpuUsage | None, cpu_request: float, expected: Idleness) -> None:
    evidence = CpuEvidence(CPU_WINDOW, {POD: usage} if usage else {})
    assert judge_cpu(facts(cpu=cpu_request), evidence, trigger, NOW).idleness is expected


def j(name: str, idleness: Idleness) -> Judgement:
    return Judgement(PodKey("ml", name), idleness, idleness.value)


def test_one_busy_worker_keeps_a_four_pod_job() -> None:
    pods = [j("w0", Idleness.IDLE), j("w1", Idleness.IDLE), j("w2", Idleness.BUSY), j("w3", Idleness.IDLE)]
    verdict, why = judge_workload(pods)
    assert verdict is Idleness.BUSY and "1 of 4 pods in use (w2" in why


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([Idleness.IDLE] * 4, Idleness.IDLE),
        ([Idleness.IDLE, Idleness.UNKNOWN], Idleness.UNKNOWN),
        ([Idleness.IDLE, Idleness.TOO_YOUNG], Idleness.UNKNOWN),
        ([Idleness.PARTIAL, Idleness.IDLE], Idleness.BUSY),
        ([Idleness.UNKNOWN, Idleness.BUSY], Idleness.BUSY),
        ([], Idleness.UNKNOWN),
    ],
    ids=["all-idle", "one-unknown", "one-young", "partial", "busy-beats-unknown", "no-pods"],
)
def test_workload_verdicts(states, expected: Idleness) -> None:
    assert judge_workload([j(f"p{i}", s) for i, s in enumerate(states)])[0] is expected
