"""A workload whose pods hold GPUs two ways: some request `nvidia.com/gpu`, others hold one through a
DRA claim (no request; seen only on dcgm-exporter's series under their names).

An idle-GPU policy judges the pods that request a GPU. Where an enforcing one does, the in-use check
reads the GPUs of the others, and judges them on that policy's own signals and thresholds, as the
policy would (its numbers are the admin's): a MIG slice held through a claim is judged on a signal
that measures MIG slices where the policy reads one.

Covered:
- idle on the policy's signal on every pod: marked;
- a claimed MIG slice busy on the policy's signal: not marked, and a due mark is removed, not kept
  waiting on a GPU_UTIL that cannot measure it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import replace

from factories import NOW, SCRAPED, ago
from test_wrongful_actions import NS, H, gpu_pod, mark, view, with_notes

from janitor.decide.claims import Claim, ClaimRef, ClaimsRead, Device
from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.lifecycle import Step
from janitor.decide.model import NamespaceView, ObjectView, Observation, PodView, SafetyLedger
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.rails import Caps, Rails
from janitor.policy.model import GpuSignal, IdleGpu, Mode, Policy

STEP = datetime.timedelta(seconds=15)
SETTINGS = PlanSettings(rails=Rails(caps=Caps(1000, 1000, 1000, 1000)))
UTIL, GR = str(GpuSignal.GPU_UTIL), str(GpuSignal.GR_ENGINE_ACTIVE)
ON_GR = Policy("idle-gpu", (IdleGpu(signal=GpuSignal.GR_ENGINE_ACTIVE, threshold=0.05, window=2 * H),),
               mode=Mode.ENFORCE)


def observed(objects: Sequence[ObjectView], pods: Sequence[PodView],
             gpu: Mapping[str, Mapping[str, tuple[float, bool]]]) -> Observation:
    """The cluster read: per signal, per pod name, its one GPU's peak and whether it is a MIG slice
    (over 2 h); every pod's CPU idle; the claim `trainer-1-gpu` holding a device of gpu.nvidia.com."""
    evidence = {(signal, 2 * H): GpuEvidence(EvidenceWindow(signal, 2 * H, STEP, NOW), {
        PodKey(NS, name): (GpuSeries("0/1" if mig else "0", peak, 480, quality=SCRAPED, mig=mig),)
        for name, (peak, mig) in peaks.items()}) for signal, peaks in gpu.items()}
    cpu = {(2 * H, ()): CpuEvidence(EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW),
                                    {PodKey(NS, p.ref.name): CpuUsage(0.01, 120, quality=SCRAPED) for p in pods})}
    claims = ClaimsRead((Claim(ClaimRef(NS, "trainer-1-gpu", "uid-c"), "1", "resource.k8s.io/v1", NOW - 40 * H,
                               True, devices=(Device("gpu", "gpu.nvidia.com", "pool", "d0"),)),), "v1")
    return Observation(NOW, tuple(objects), tuple(pods), {NS: NamespaceView(NS)}, evidence=Evidence(evidence, cpu),
                       claims=claims)


def pods_of(sts: ObjectView) -> list[PodView]:
    """One pod requesting a GPU, one holding a MIG slice through a claim, on another node."""
    return [gpu_pod("trainer-0", sts),
            replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))]


def steps(objects: Sequence[ObjectView], gr_peak: float) -> list[tuple[Step, str]]:
    sts = objects[0]
    gpu = {GR: {"trainer-0": (0.0, False), "trainer-1": (gr_peak, True)},
           UTIL: {"trainer-0": (0.0, False), "trainer-1": (0.0, True)}}  # GPU_UTIL reads 0 on a MIG slice
    changes = plan(observed(objects, pods_of(sts), gpu), [ON_GR], SafetyLedger(), NOW, settings=SETTINGS).changes
    return [(c.step, str(c.why)) for c in changes if c.workload.uid == sts.ref.uid]


def test_a_claimed_mig_slice_idle_on_the_policys_signal_lets_the_workload_be_marked() -> None:
    sts = view("trainer", "StatefulSet")
    assert [step for step, _ in steps([sts], 0.0)] == [Step.MARK], steps([sts], 0.0)


def test_a_claimed_mig_slice_busy_on_the_policys_signal_vetoes_and_removes_a_due_mark() -> None:
    sts = view("trainer", "StatefulSet")
    assert steps([sts], 0.97) == []
    due = with_notes(sts, mark(sts, policy="idle-gpu", marked_at=ago(hours=30), deadline=ago(hours=6),
                               warned_at=ago(hours=30)))
    found = steps([due], 0.97)
    assert [step for step, _ in found] == [Step.UNMARK], found
