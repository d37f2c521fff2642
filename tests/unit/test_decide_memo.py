"""The idle triggers' judgements kept between cycles (decide.memo): reused only on the same pod and
evidence, never for a young pod, forgotten when unused. The property that the plan is the same with
and without them is in test_promises.py."""

from __future__ import annotations

import datetime
from dataclasses import replace

from factories import NOW, SCRAPED
from test_decide_idle import CPU_WINDOW, POD, pod, scraped

from janitor.decide.evidence import CpuEvidence, CpuUsage, EvidenceWindow, GpuEvidence
from janitor.decide.memo import Judgements
from janitor.decide.model import ContainerView, PodView, State
from janitor.decide.triggers.idle import CpuJudge, GpuJudge
from janitor.policy.model import IdleCpu, IdleGpu

H = datetime.timedelta(hours=1)
WINDOW = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, datetime.timedelta(seconds=15), NOW)


def cpu_cycles(trigger: IdleCpu, *cycles: tuple[PodView, CpuEvidence]) -> tuple[list[State], Judgements]:
    kept = Judgements()
    states = []
    for view, evidence in cycles:
        kept.next_cycle()
        states.append(CpuJudge(evidence, trigger, NOW, kept.table(("cpu", trigger)))(view).state)
    return states, kept


def test_a_pod_resized_in_place_is_judged_again_on_its_new_request() -> None:
    """A running pod's CPU request can be resized in place (same uid): 0.3 cores is idle against 10 %
    of 4 cores, and use against 10 % of 2; the judgement of the cycle before must not outlive it."""
    trigger = IdleCpu(fraction_of_request=0.1)
    evidence = CpuEvidence(CPU_WINDOW, {POD: CpuUsage(0.3, 120, SCRAPED)})
    before = pod(gpus=0, containers=(("main", 4.0),))
    resized = replace(before, resource_version="2", containers=(ContainerView("main", 2.0),))
    states, _ = cpu_cycles(trigger, (before, evidence), (resized, evidence))
    assert states == [State.FIRES, State.CLEAR]


def test_new_evidence_is_judged_again_and_equal_evidence_is_not() -> None:
    trigger = IdleCpu(cores=0.5)
    view = pod(gpus=0)
    idle = CpuEvidence(CPU_WINDOW, {POD: CpuUsage(0.3, 120, SCRAPED)})
    busy = CpuEvidence(CPU_WINDOW, {POD: CpuUsage(2.0, 120, SCRAPED)})
    again = CpuEvidence(CPU_WINDOW, {POD: CpuUsage(2.0, 120, SCRAPED)})  # equal, not the same object
    states, kept = cpu_cycles(trigger, (view, idle), (view, busy), (view, again))
    assert states == [State.FIRES, State.CLEAR, State.CLEAR]
    assert kept.counts()[:2] == (1, 0)  # the last cycle: reused, nothing judged afresh


def test_a_young_pod_is_never_kept_so_it_is_judged_once_old_enough() -> None:
    trigger = IdleGpu()  # pods at least 2 h old
    evidence = GpuEvidence(WINDOW, {POD: (scraped("0", 1.0, 480), scraped("1", 0.0, 480))})
    view = pod(started_hours=1.5)
    kept = Judgements()
    states = []
    for now in (NOW, NOW + H):
        kept.next_cycle()
        states.append(GpuJudge(evidence, trigger, now, kept.table(("gpu", trigger)))(view).state)
    assert states == [State.TOO_YOUNG, State.FIRES]


def test_judgements_of_pods_gone_are_forgotten() -> None:
    trigger = IdleCpu(cores=0.5)
    evidence = CpuEvidence(CPU_WINDOW, {POD: CpuUsage(0.3, 120, SCRAPED)})
    first, second = pod(gpus=0), pod(gpus=0)
    kept = Judgements()
    for view in (first, second, second):
        kept.next_cycle()
        CpuJudge(evidence, trigger, NOW, kept.table(("cpu", trigger)))(view)
    assert kept.counts() == (1, 0, 1)  # the first pod's judgement went when a cycle did not use it
    kept.next_cycle()
    kept.next_cycle()
    assert kept.counts() == (0, 0, 0)  # nor the trigger's table, once no cycle asked for it
