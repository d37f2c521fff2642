"""A workload's GPUs held without a request (a DRA claim, a shared GPU), on nodes as labs run them:
the PROF fields off on some (dcgm-exporter's default), MIG slices, a hostname label that names no node.

An idle-GPU policy judges the pods that request a GPU. Where an enforcing one does, the in-use check
reads the GPUs of the others on GPU_UTIL and, beside it, on the PROF fields the policy reads.

Covered:
- a MIG slice held through a claim, under a policy reading GR_ENGINE_ACTIVE: idle on it, the
  workload is marked; busy on it, it vetoes and a due mark is removed, not kept waiting on a
  GPU_UTIL that cannot measure it;
- a GPU held through a DRA claim, or a shared GPU, on a node without the PROF fields: its GPU_UTIL
  at 97 % vetoes a policy reading GR_ENGINE_ACTIVE (and power), and a due mark goes, in the cycle
  and in the re-check right before acting;
- under a hostname label that names no node, a policy reading GR and power read no work signal on
  the pod: GPU_UTIL is read beside it, and 97 % vetoes.
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
UTIL, GR, POWER = str(GpuSignal.GPU_UTIL), str(GpuSignal.GR_ENGINE_ACTIVE), str(GpuSignal.POWER)

# Series per signal: pod name -> (peak, node label) or (peak, node label, MIG slice?); a signal a node
# does not export has no entry.
Series = Mapping[str, Mapping[str, tuple[float, str] | tuple[float, str, bool]]]


def observed(objects: Sequence[ObjectView], pods: Sequence[PodView], gpu: Series,
             exporting: Mapping[str, frozenset[str]]) -> Observation:
    evidence = {(signal, 2 * H): GpuEvidence(EvidenceWindow(signal, 2 * H, STEP, NOW), {
        PodKey(NS, name): (GpuSeries("0/1" if any(mig) else "0", peak, 480, node, quality=SCRAPED, mig=any(mig),
                                     model="NVIDIA H100"),)
        for name, (peak, node, *mig) in peaks.items()}, exporting=exporting.get(signal))
        for signal, peaks in gpu.items()}
    cpu = {(2 * H, ()): CpuEvidence(EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW),
                                    {PodKey(NS, p.ref.name): CpuUsage(0.01, 120, quality=SCRAPED) for p in pods})}
    claims = ClaimsRead((Claim(ClaimRef(NS, "trainer-1-gpu", "uid-c"), "1", "resource.k8s.io/v1", NOW - 40 * H,
                               True, devices=(Device("gpu", "gpu.nvidia.com", "pool", "d0"),)),), "v1")
    return Observation(NOW, tuple(objects), tuple(pods), {NS: NamespaceView(NS)}, evidence=Evidence(evidence, cpu),
                       claims=claims)


def steps(objects: Sequence[ObjectView], pods: Sequence[PodView], policy: Policy, gpu: Series,
          exporting: Mapping[str, frozenset[str]] = {}) -> list[tuple[Step, str]]:
    changes = plan(observed(objects, pods, gpu, exporting), [policy], SafetyLedger(), NOW, settings=SETTINGS).changes
    return [(c.step, str(c.why)) for c in changes if c.workload.uid == objects[0].ref.uid]


def due(sts: ObjectView, policy: str) -> ObjectView:
    return with_notes(sts, mark(sts, policy=policy, marked_at=ago(hours=30), deadline=ago(hours=6),
                                warned_at=ago(hours=30)))


ON_GR = Policy("idle-gpu", (IdleGpu(signal=GpuSignal.GR_ENGINE_ACTIVE, threshold=0.05, window=2 * H),),
               mode=Mode.ENFORCE)


# -- MIG slices held through a claim ---------------------------------------------------------------------

def mig_steps(objects: Sequence[ObjectView], gr_peak: float) -> list[tuple[Step, str]]:
    """trainer-0 requests a GPU, idle; trainer-1 holds a MIG slice through a claim, on another node."""
    pods = [gpu_pod("trainer-0", objects[0]),
            replace(gpu_pod("trainer-1", objects[0], gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))]
    gpu: Series = {GR: {"trainer-0": (0.0, "gpu-node-1"), "trainer-1": (gr_peak, "gpu-node-2", True)},
                   UTIL: {"trainer-0": (0.0, "gpu-node-1"),
                          "trainer-1": (0.0, "gpu-node-2", True)}}  # GPU_UTIL reads 0 on a MIG slice
    return steps(objects, pods, ON_GR, gpu)


def test_a_claimed_mig_slice_idle_on_the_policys_signal_lets_the_workload_be_marked() -> None:
    sts = view("trainer", "StatefulSet")
    assert [step for step, _ in mig_steps([sts], 0.0)] == [Step.MARK], mig_steps([sts], 0.0)


def test_a_claimed_mig_slice_busy_on_the_policys_signal_vetoes_and_removes_a_due_mark() -> None:
    sts = view("trainer", "StatefulSet")
    assert mig_steps([sts], 0.97) == []
    found = mig_steps([due(sts, "idle-gpu")], 0.97)
    assert [step for step, _ in found] == [Step.UNMARK], found


# -- on nodes without the PROF fields ---------------------------------------------------------------------

GR_AND_POWER = Policy("idle-gpu", (IdleGpu(signal=GpuSignal.GR_ENGINE_ACTIVE, threshold=0.05, window=2 * H,
                                           also=((GpuSignal.POWER, 1.5),), idle_power=(("NVIDIA H100", 70.0),)),),
                      mode=Mode.ENFORCE)


def test_a_claimed_gpu_at_97_percent_is_not_judged_on_power_alone() -> None:
    """trainer-0 requests a GPU on a node exporting the PROF fields; trainer-1 holds one through a DRA
    claim on a node with them off (dcgm-exporter's default): GR is left out for it, and power alone
    (75 W, about idle) shows no kernel at work. GPU_UTIL at 97 % there vetoes, and a due mark goes."""
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts),
            replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))]
    gpu = {GR: {"trainer-0": (0.0, "gpu-node-1")},
           POWER: {"trainer-0": (70.0, "gpu-node-1"), "trainer-1": (75.0, "gpu-node-2")},
           UTIL: {"trainer-0": (0.0, "gpu-node-1"), "trainer-1": (97.0, "gpu-node-2")}}
    exporting = {GR: frozenset({"gpu-node-1"}), POWER: frozenset({"gpu-node-1", "gpu-node-2"})}
    assert steps([sts], pods, GR_AND_POWER, gpu, exporting) == []
    found = steps([due(sts, "idle-gpu")], pods, GR_AND_POWER, gpu, exporting)
    assert [s for s, _ in found] == [Step.UNMARK], found


def test_a_shared_gpu_at_97_percent_on_a_node_without_prof_fields_vetoes() -> None:
    """trainer-1 holds a GPU without a request or a claim (a shared-GPU resource,
    NVIDIA_VISIBLE_DEVICES), seen by its series alone: its node exports no GR, and its GPU_UTIL at
    97 % vetoes."""
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts), replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2")]
    gpu = {GR: {"trainer-0": (0.0, "gpu-node-1")},
           UTIL: {"trainer-0": (0.0, "gpu-node-1"), "trainer-1": (97.0, "gpu-node-2")}}
    assert steps([sts], pods, ON_GR, gpu) == []


def test_a_claimed_gpu_at_97_percent_on_a_node_without_prof_fields_removes_a_due_mark() -> None:
    """As above with a DRA claim: in use on GPU_UTIL, the workload loses its due mark (not held
    waiting on a GR its node does not export)."""
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts),
            replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))]
    gpu = {GR: {"trainer-0": (0.0, "gpu-node-1")},
           UTIL: {"trainer-0": (0.0, "gpu-node-1"), "trainer-1": (97.0, "gpu-node-2")}}
    found = steps([due(sts, "idle-gpu")], pods, ON_GR, gpu)
    assert [s for s, _ in found] == [Step.UNMARK], found


# -- a hostname label that names no node -----------------------------------------------------------------

def test_a_gpu_at_97_percent_under_a_wrong_hostname_label_removes_a_due_mark() -> None:
    """--hostname-label holds the exporter pod's name; PROF fields off everywhere. The policy reads GR
    and power: GR cannot be told exported or not (unknown), and with no work signal read on the pod
    the in-use check reads GPU_UTIL beside it: 97 % vetoes and the due mark goes."""
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts)]
    gpu = {GR: {}, POWER: {"trainer-0": (75.0, "dcgm-exporter-x7k2p")},
           UTIL: {"trainer-0": (97.0, "dcgm-exporter-x7k2p")}}
    exporting = {GR: frozenset(), POWER: frozenset({"dcgm-exporter-x7k2p"})}
    found = steps([due(sts, "idle-gpu")], pods, GR_AND_POWER, gpu, exporting)
    assert [s for s, _ in found] == [Step.UNMARK], found


def test_the_recheck_does_not_confirm_a_reclaim_the_cycle_would_hold() -> None:
    """The cycle (a watch cache minutes old) saw only trainer-0 and found the due mark actionable. The
    fresh read before acting shows trainer-1, holding a GPU through a DRA claim on a node without the
    PROF fields, at 97 % GPU_UTIL: the re-check does not confirm, whether it read the claims or not."""
    from janitor.decide.recheck import still_due

    sts = due(view("trainer", "StatefulSet"), "idle-gpu")
    trainer0 = gpu_pod("trainer-0", sts)
    stale = observed([sts], [trainer0], {GR: {"trainer-0": (0.0, "gpu-node-1")},
                                         UTIL: {"trainer-0": (0.0, "gpu-node-1")}}, {})
    actions = [a for a in plan(stale, [ON_GR], SafetyLedger(), NOW, settings=SETTINGS).actions
               if a.target.uid == sts.ref.uid]
    assert actions, "the cycle decided no action"
    pods = [trainer0,
            replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))]
    gpu = {GR: {"trainer-0": (0.0, "gpu-node-1")},
           UTIL: {"trainer-0": (0.0, "gpu-node-1"), "trainer-1": (97.0, "gpu-node-2")}}
    cycle_now = plan(observed([sts], pods, gpu, {}), [ON_GR], SafetyLedger(), NOW, settings=SETTINGS)
    assert not [a for a in cycle_now.actions if a.target.uid == sts.ref.uid]  # the cycle on the fresh read holds
    for claims in (observed([sts], pods, gpu, {}).claims, None):
        fresh = replace(observed([sts], pods, gpu, {}), claims=claims)
        again = still_due(actions[0], fresh, [ON_GR], NOW, SETTINGS)
        assert again.action is None, str(again.why)
    # trainer-1's series gone by the re-check (its node's exporter restarting): its claim holds a GPU
    # of unknown use, so the reclaim is not confirmed; the claims unread, nothing says it holds none.
    vanished = {GR: {"trainer-0": (0.0, "gpu-node-1")}, UTIL: {"trainer-0": (0.0, "gpu-node-1")}}
    for claims in (observed([sts], pods, vanished, {}).claims, None):
        fresh = replace(observed([sts], pods, vanished, {}), claims=claims)
        again = still_due(actions[0], fresh, [ON_GR], NOW, SETTINGS)
        assert again.action is None, str(again.why)


def test_a_claimed_gpu_whose_node_exports_no_work_signal_for_it_is_not_judged_on_power_alone() -> None:
    """trainer-1's node exports power for it, but neither GPU_UTIL nor GR (a trimmed counters file):
    power alone shows no kernel at work, so its GPU is unknown and the workload is not marked."""
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts),
            replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))]
    gpu = {GR: {"trainer-0": (0.0, "gpu-node-1")},
           POWER: {"trainer-0": (70.0, "gpu-node-1"), "trainer-1": (75.0, "gpu-node-2")},
           UTIL: {"trainer-0": (0.0, "gpu-node-1")}}
    exporting = {GR: frozenset({"gpu-node-1"}), POWER: frozenset({"gpu-node-1", "gpu-node-2"})}
    found = steps([sts], pods, GR_AND_POWER, gpu, exporting)
    assert Step.MARK not in [s for s, _ in found], found


def test_a_claimed_gpu_is_busy_by_the_policys_gpu_util_threshold_where_it_is_below_the_checks() -> None:
    """The policy calls a GPU busy above 2 % GPU_UTIL: a claimed GPU at 3 % is in use by the admin's
    own number, though under the in-use check's 5 %."""
    strict = Policy("idle-gpu", (IdleGpu(signal=GpuSignal.GPU_UTIL, threshold=2.0, window=2 * H),), mode=Mode.ENFORCE)
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts),
            replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))]
    gpu = {UTIL: {"trainer-0": (0.0, "gpu-node-1"), "trainer-1": (3.0, "gpu-node-2")}}
    assert steps([sts], pods, strict, gpu) == []


def test_claims_that_cannot_be_read_hold_a_claim_pod_without_series_and_the_plan_says_why() -> None:
    """The claims' list failed (RBAC trimmed, a version not served): a pod that names a claim and has
    no GPU series may hold a GPU, so its workload is not marked; the plan's notes say so, naming the
    failure, as the finding's own words ("0 series for 1 GPUs") cannot."""
    sts = view("trainer", "StatefulSet")
    pods = [gpu_pod("trainer-0", sts),
            replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))]
    gpu: Series = {UTIL: {"trainer-0": (0.0, "gpu-node-1")}}
    unreadable = ClaimsRead(problem="ResourceClaims could not be listed (403 Forbidden)")
    seen = replace(observed([sts], pods, gpu, {}), claims=unreadable)
    planned = plan(seen, [Policy("idle-gpu", (IdleGpu(window=2 * H),), mode=Mode.ENFORCE)], SafetyLedger(), NOW,
                   settings=SETTINGS)
    assert not [c for c in planned.changes if c.workload.uid == sts.ref.uid and c.step is Step.MARK]
    [note] = [n for n in planned.notices if "ResourceClaims" in n]
    assert note.startswith("ResourceClaims could not be listed (403 Forbidden): running pods that request no GPU "
                           "name a claim"), note
    assert "unknown" in note and "not marked or reclaimed by an idle policy" in note, note
    fine = plan(observed([sts], pods, gpu, {}), [Policy("idle-gpu", (IdleGpu(window=2 * H),), mode=Mode.ENFORCE)],
                SafetyLedger(), NOW, settings=SETTINGS)
    assert not [n for n in fine.notices if "ResourceClaims" in n]
    # Said only where it explains something: no idle policy loaded, or the only such pod leaving.
    assert not [n for n in plan(seen, [], SafetyLedger(), NOW, settings=SETTINGS).notices if "ResourceClaims" in n]
    leaving = replace(seen, pods=(pods[0], replace(pods[1], deleting=True)))
    assert not [n for n in plan(leaving, [Policy("idle-gpu", (IdleGpu(window=2 * H),), mode=Mode.ENFORCE)],
                                SafetyLedger(), NOW, settings=SETTINGS).notices if "ResourceClaims" in n]


def test_the_recheck_holds_a_claimed_gpu_missing_a_signal_its_node_exports_for_another_workload() -> None:
    """trainer-1 holds a GPU through a claim on gpu-node-2, at 1 % GPU_UTIL and without a GR series;
    gpu-node-2 exports GR (for another workload's pod): GR is missing evidence there, not a field
    the node lacks, so the re-check (whose read holds only trainer's pods) does not confirm the
    reclaim the cycle holds. It knows so from which nodes export GR, read across the cluster."""
    from janitor.decide.recheck import still_due

    sts, other = due(view("trainer", "StatefulSet"), "idle-gpu"), view("other", "StatefulSet")
    t0 = gpu_pod("trainer-0", sts)
    t1 = replace(gpu_pod("trainer-1", sts, gpus=0), node="gpu-node-2", resource_claims=("trainer-1-gpu",))
    o0 = replace(gpu_pod("other-0", other), node="gpu-node-2")
    gpu: Series = {GR: {"trainer-0": (0.0, "gpu-node-1"), "other-0": (0.9, "gpu-node-2")},
                   UTIL: {"trainer-0": (0.0, "gpu-node-1"), "trainer-1": (1.0, "gpu-node-2"),
                          "other-0": (90.0, "gpu-node-2")}}
    exporting = {signal: frozenset({"gpu-node-1", "gpu-node-2"}) for signal in (GR, UTIL)}
    cycle = plan(observed([sts, other], [t0, t1, o0], gpu, exporting), [ON_GR], SafetyLedger(), NOW,
                 settings=SETTINGS)
    assert not [x for x in cycle.actions if x.target.uid == sts.ref.uid]
    earlier = observed([sts], [t0], {GR: {"trainer-0": (0.0, "gpu-node-1")}, UTIL: {"trainer-0": (0.0, "gpu-node-1")}},
                       exporting)
    [act] = [x for x in plan(earlier, [ON_GR], SafetyLedger(), NOW, settings=SETTINGS).actions
             if x.target.uid == sts.ref.uid]
    mine = {signal: {p: v for p, v in per.items() if p.startswith("trainer-")} for signal, per in gpu.items()}
    assert still_due(act, observed([sts], [t0, t1], mine, exporting), [ON_GR], NOW, SETTINGS).action is None
