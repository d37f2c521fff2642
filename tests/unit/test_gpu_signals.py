"""An idle-GPU policy that reads several signals: idle only where every signal that is there is low.

Aspects covered:
- busy on any named signal is busy (a job at 0 % GPU_UTIL and 60 % SM activity is in use), per GPU,
  so one GPU busy on SM activity and another idle on all is partially idle;
- a signal the node does not export, one that does not measure a MIG slice, or power for a model
  without an idle power is left out, and the verdict says so (as data and in words); when no
  named signal is there, the pod is unknown;
- a failed read, a partial set of series or doubtful samples on any signal is unknown unless
  another signal shows use;
- power is judged as a multiple of the model's idle power;
- the researcher's words name each signal in its units.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import replace

import pytest
from factories import NOW, SCRAPED

from janitor.decide.evidence import EvidenceWindow, GpuEvidence, GpuSeries, PodKey, Quality
from janitor.decide.model import ContainerView, ObjectRef, PodState, PodView, State
from janitor.decide.plain import plain
from janitor.decide.reasons import Code
from janitor.decide.triggers.signals import SignalsJudge, left_of
from janitor.policy.model import GpuSignal, IdleGpu, NeverUsed

H = datetime.timedelta(hours=1)
POD = PodKey("ml", "train-0")
UTIL, SM, GR, POWER = GpuSignal.GPU_UTIL, GpuSignal.SM_ACTIVE, GpuSignal.GR_ENGINE_ACTIVE, GpuSignal.POWER
A100 = "NVIDIA A100-SXM4-80GB"
TRIGGER = IdleGpu(signal=UTIL, threshold=5, also=((SM, 0.05), (POWER, 1.2)), idle_power=(("NVIDIA A100*", 55.0),))


def pod(gpus: int = 2, mig: bool = False) -> PodView:
    resource = "nvidia.com/mig-1g.10gb" if mig else "nvidia.com/gpu"
    return PodView(ref=ObjectRef("Pod", "v1", "ml", "train-0", str(uuid.uuid4())), resource_version="1", labels={},
                   controller=None, node="gpu-node-1", phase="Running", started=NOW - 3 * H, gpus=gpus,
                   containers=(ContainerView("main", 4.0),),
                   state=PodState(limits={resource: gpus}) if mig else PodState())


def series(gpu: str, peak: float | None, samples: int = 480, model: str = A100, quality: Quality = SCRAPED,
           mig: bool = False) -> GpuSeries:
    return GpuSeries(gpu, peak, samples, "gpu-node-1", quality, mig, model)


def evidence(failed: dict[GpuSignal, str] | None = None, **read: tuple[GpuSeries, ...]) -> dict:
    out = {}
    for signal in (UTIL, SM, POWER, GR):
        window = EvidenceWindow(str(signal), 2 * H, datetime.timedelta(seconds=15), NOW)
        found = read.get(signal.name)
        out[(str(signal), 2 * H)] = GpuEvidence(window, {POD: found} if found else {}, (failed or {}).get(signal))
    return out


def judge(trigger: IdleGpu = TRIGGER, p: PodView | None = None, failed=None, **read):
    return SignalsJudge(evidence(failed, **read), trigger, NOW)(p or pod())


IDLE_UTIL = (series("0", 0), series("1", 2))
IDLE_SM = (series("0", 0.01), series("1", 0.02))
IDLE_POWER = (series("0", 58.0), series("1", 60.0))


def test_busy_on_sm_activity_at_zero_gpu_util_is_busy() -> None:
    judged = judge(GPU_UTIL=IDLE_UTIL, SM_ACTIVE=(series("0", 0.6), series("1", 0.55)), POWER=IDLE_POWER)
    assert judged.state is State.CLEAR
    assert judged.why.code is Code.GPU_SIGNALS_BUSY
    assert "GPU 0 SM_ACTIVE 0.6 > 0.05" in str(judged.why)
    assert plain(judged.why).startswith("in use: GPU 0 at 60 % SM_ACTIVE")


def test_idle_on_every_signal_is_idle_with_each_reading() -> None:
    judged = judge(GPU_UTIL=IDLE_UTIL, SM_ACTIVE=IDLE_SM, POWER=IDLE_POWER)
    assert judged.state is State.FIRES and judged.idle_gpus == ("0", "1")
    assert judged.why.code is Code.GPU_SIGNALS_IDLE
    assert ("1", str(POWER), 60.0 / 55.0) in judged.why.fact("readings")
    assert "GPU_UTIL <= 5, SM_ACTIVE <= 0.05, power <= 1.2x idle" in str(judged.why)
    assert plain(judged.why) == ("its 2 GPUs peaked at no more than 2 % GPU_UTIL, 2 % SM_ACTIVE and 1.1x idle power "
                                 "over the last 2 h")


def test_one_gpu_busy_on_sm_and_one_idle_is_partial() -> None:
    judged = judge(GPU_UTIL=IDLE_UTIL, SM_ACTIVE=(series("0", 0.3), series("1", 0.0)), POWER=IDLE_POWER)
    assert judged.state is State.PARTIAL and judged.idle_gpus == ("1",)


def test_power_above_idle_is_busy_and_a_model_without_idle_power_is_unknown() -> None:
    busy = judge(GPU_UTIL=IDLE_UTIL, SM_ACTIVE=IDLE_SM, POWER=(series("0", 58.0), series("1", 250.0)))
    assert busy.state is State.PARTIAL and busy.idle_gpus == ("0",)
    h100 = (series("0", 450.0, model="NVIDIA H100 80GB HBM3"), series("1", 440.0, model="NVIDIA H100 80GB HBM3"))
    unknown = judge(GPU_UTIL=IDLE_UTIL, SM_ACTIVE=IDLE_SM, POWER=h100)
    assert unknown.state is State.UNKNOWN and unknown.why.code is Code.NO_IDLE_POWER
    assert "no idle power is given for NVIDIA H100 80GB HBM3" in str(unknown.why)
    assert judge(GPU_UTIL=(series("0", 90), series("1", 0)), SM_ACTIVE=IDLE_SM, POWER=h100).state is State.CLEAR


def test_a_signal_the_node_does_not_export_is_left_out_and_said() -> None:
    judged = judge(GPU_UTIL=IDLE_UTIL, POWER=IDLE_POWER)
    assert judged.state is State.FIRES
    assert left_of(judged) == ((str(SM), "not-exported", ""),)
    assert "not read: SM_ACTIVE (not exported on its node)" in str(judged.why)
    assert plain(judged.why).endswith("; not read: SM_ACTIVE (not exported on its node)")


def test_a_signal_its_node_exports_for_others_but_not_for_it_is_unknown() -> None:
    other = PodKey("ml", "other")
    read = evidence(GPU_UTIL=IDLE_UTIL, POWER=IDLE_POWER)
    sm = read[(str(SM), 2 * H)]
    read[(str(SM), 2 * H)] = GpuEvidence(sm.window, {other: (series("3", 0.4),)})  # same node, another pod
    judged = SignalsJudge(read, TRIGGER, NOW)(pod())
    assert judged.state is State.UNKNOWN and judged.why.code is Code.SERIES_COUNT
    unlabelled = GpuEvidence(sm.window, {other: (GpuSeries("3", 0.4, 480, "", SCRAPED, False, A100),)})
    read[(str(SM), 2 * H)] = unlabelled  # no node labels: which node exports it cannot be told
    assert SignalsJudge(read, TRIGGER, NOW)(pod()).state is State.UNKNOWN


def test_a_node_that_exports_the_signal_for_pods_not_read_is_not_said_to_export_none() -> None:
    """Usage queries read the namespaces the policies cover, so the pods read may be the only ones
    on their node while its other GPUs, held by pods of other namespaces or by none, export the
    field: the nodes that export a signal are read across the cluster, and a pod without a series
    there is missing evidence (unknown), not a node without the field."""
    read = evidence(GPU_UTIL=IDLE_UTIL, POWER=IDLE_POWER)
    sm = read[(str(SM), 2 * H)]
    read[(str(SM), 2 * H)] = GpuEvidence(sm.window, {}, exporting=frozenset({"gpu-node-1", "gpu-node-2"}))
    judged = SignalsJudge(read, TRIGGER, NOW)(pod())
    assert judged.state is State.UNKNOWN and judged.why.code is Code.SERIES_COUNT
    read[(str(SM), 2 * H)] = GpuEvidence(sm.window, {}, exporting=frozenset({"gpu-node-2"}))
    judged = SignalsJudge(read, TRIGGER, NOW)(pod())
    assert judged.state is State.FIRES and left_of(judged) == ((str(SM), "not-exported", ""),)
    # Its own pods' series still tell: a node seen exporting it for a pod read is not left out.
    other = PodKey("ml", "other")
    read[(str(SM), 2 * H)] = GpuEvidence(sm.window, {other: (series("3", 0.4),)}, exporting=frozenset())
    assert SignalsJudge(read, TRIGGER, NOW)(pod()).state is State.UNKNOWN


def test_a_signal_is_left_out_only_where_the_pods_own_series_name_its_node() -> None:
    """Which nodes export a signal is told by the exporter's hostname label, which must hold node
    names (`--hostname-label`). Where the pod's own series of the other signals carry another name
    (the exporter pod's host name, an IP), no name tells its node, and a missing signal is unknown,
    not one its node does not export."""
    def elsewhere(found: tuple[GpuSeries, ...]) -> tuple[GpuSeries, ...]:
        return tuple(replace(s, node="dcgm-exporter-7x2k9") for s in found)

    read = evidence(GPU_UTIL=elsewhere(IDLE_UTIL), POWER=elsewhere(IDLE_POWER))
    sm = read[(str(SM), 2 * H)]
    read[(str(SM), 2 * H)] = replace(sm, exporting=frozenset({"dcgm-exporter-4mq7b"}))
    judged = SignalsJudge(read, TRIGGER, NOW)(pod())
    assert judged.state is State.UNKNOWN and judged.why.code is Code.SERIES_COUNT, judged.why
    # Series that name its node tell, as before.
    read = evidence(GPU_UTIL=IDLE_UTIL, POWER=IDLE_POWER)
    read[(str(SM), 2 * H)] = replace(sm, exporting=frozenset({"gpu-node-2"}))
    assert SignalsJudge(read, TRIGGER, NOW)(pod()).state is State.FIRES


def test_a_young_pod_judged_over_its_life_keeps_the_nodes_read_across_the_cluster() -> None:
    """Judged on its life (`neverUsed`), a young pod's signal is left out as on its window: not where
    its node exports the field for pods not read."""
    young = replace(pod(gpus=1), started=NOW - 50 * datetime.timedelta(minutes=1))
    never = IdleGpu(signal=UTIL, threshold=5, also=((SM, 0.05),), window=2 * H,
                    min_pod_age=30 * datetime.timedelta(minutes=1),
                    never_used=NeverUsed(after=30 * datetime.timedelta(minutes=1),
                                         warn_before=30 * datetime.timedelta(minutes=1)))
    read = evidence(GPU_UTIL=(replace(series("0", 0, samples=200), uid=young.ref.uid),))
    sm = read[(str(SM), 2 * H)]
    read[(str(SM), 2 * H)] = replace(sm, exporting=frozenset({"gpu-node-1"}))
    judged = SignalsJudge(read, never, NOW)(young)
    assert judged.state is not State.FIRES and not judged.never_used, judged.why
    read[(str(SM), 2 * H)] = replace(sm, exporting=frozenset({"gpu-node-2"}))
    judged = SignalsJudge(read, never, NOW)(young)
    assert judged.state is State.FIRES and judged.never_used
    assert "SM_ACTIVE (not exported on its node)" in str(judged.why)


def test_no_named_signal_there_is_unknown() -> None:
    judged = judge(IdleGpu(signal=SM, threshold=0.05, also=((GR, 0.05),)), GPU_UTIL=IDLE_UTIL)
    assert judged.state is State.UNKNOWN and judged.why.code is Code.NO_SIGNAL


def test_mig_slices_are_judged_on_the_signals_that_measure_them() -> None:
    trigger = IdleGpu(signal=UTIL, threshold=5, also=((SM, 0.05),))
    mig = pod(gpus=1, mig=True)
    idle = judge(trigger, mig, GPU_UTIL=(series("0/1", 0, mig=True),), SM_ACTIVE=(series("0/1", 0.01, mig=True),))
    assert idle.state is State.FIRES
    assert left_of(idle) == ((str(UTIL), "mig", ""),)
    only_util = judge(IdleGpu(signal=UTIL, threshold=5, also=((POWER, 1.2),), idle_power=(("*", 50.0),)), mig,
                      GPU_UTIL=(series("0/1", 0, mig=True),), POWER=(series("0/1", 50.0, mig=True),))
    assert only_util.state is State.UNKNOWN and only_util.why.code is Code.NO_SIGNAL


@pytest.mark.parametrize("case", ["failed", "partial-series", "low-coverage", "nan"])
def test_doubt_on_any_signal_is_unknown_unless_another_shows_use(case: str) -> None:
    failed, sm = None, IDLE_SM
    if case == "failed":
        failed = {SM: "timeout"}
    elif case == "partial-series":
        sm = (series("0", 0.01),)
    elif case == "low-coverage":
        sm = (series("0", 0.01, samples=100), series("1", 0.01))
    else:
        sm = (series("0", None), series("1", 0.01))
    judged = judge(failed=failed, GPU_UTIL=IDLE_UTIL, SM_ACTIVE=sm, POWER=IDLE_POWER)
    assert judged.state is State.UNKNOWN
    busy = judge(failed=failed, GPU_UTIL=(series("0", 90), series("1", 0)), SM_ACTIVE=sm, POWER=IDLE_POWER)
    assert busy.state is State.CLEAR, busy.why  # busy beats unknown: GPU 1 is not shown idle either


def test_every_read_failing_is_unknown_whatever_else() -> None:
    judged = judge(failed={UTIL: "timeout", SM: "timeout", POWER: "timeout"}, GPU_UTIL=IDLE_UTIL)
    assert judged.state is State.UNKNOWN and judged.why.code is Code.EVIDENCE_FAILED


def test_coverage_counts_the_pods_each_signal_was_read_for() -> None:
    from janitor.decide.model import Finding, TriggerKind
    from janitor.decide.triggers.signals import coverage
    from janitor.policy.model import Mode
    full = judge(GPU_UTIL=IDLE_UTIL, SM_ACTIVE=IDLE_SM, POWER=IDLE_POWER)
    lacking = judge(GPU_UTIL=IDLE_UTIL, POWER=IDLE_POWER)
    mig = judge(IdleGpu(signal=UTIL, threshold=5, also=((SM, 0.05),)), pod(gpus=1, mig=True),
                GPU_UTIL=(series("0/1", 0, mig=True),), SM_ACTIVE=(series("0/1", 0.01, mig=True),))
    found = Finding(TriggerKind.IDLE_GPU, "gpu", Mode.SHADOW, pod().ref, State.FIRES, full.why,
                    pods=(full, lacking, mig))
    # A MIG slice's GPU_UTIL is left out by design, not for want of the field: it counts as read.
    assert coverage([found]) == {("gpu", str(UTIL)): (3, 3), ("gpu", str(SM)): (2, 3), ("gpu", str(POWER)): (2, 2)}


def test_a_lone_power_signal_is_judged_against_idle_power() -> None:
    trigger = IdleGpu(signal=POWER, threshold=1.2, idle_power=(("NVIDIA A100*", 55.0),))
    assert judge(trigger, POWER=IDLE_POWER).state is State.FIRES
    assert judge(trigger, POWER=(series("0", 300.0), series("1", 300.0))).state is State.CLEAR


def test_the_owner_reads_a_signal_left_out_on_any_pod() -> None:
    from janitor.decide.reasons import why
    full = judge(GPU_UTIL=IDLE_UTIL, SM_ACTIVE=IDLE_SM, POWER=IDLE_POWER)
    lacking = judge(GPU_UTIL=IDLE_UTIL, POWER=IDLE_POWER)
    pods = tuple(why(Code.POD, pod=n, why=j.why) for n, j in (("a", full), ("b", lacking)))
    words = plain(why(Code.ALL_IDLE, total=2, shown=pods, more=""))
    assert words.startswith("all 2 pods idle") and "not read: SM_ACTIVE" in words


# -- the veto of a GPU at work, beside policies that read other signals ------------------------------------


def _marked(policy_trigger: IdleGpu, peaks: dict[str, float | None]) -> set[str]:
    """The workloads one enforcing policy marks: a StatefulSet whose pod uses 0.05 cores."""
    from factories import ago

    from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence
    from janitor.decide.lifecycle import Step
    from janitor.decide.model import NamespaceView, ObjectView, Observation, OwnerRef, SafetyLedger
    from janitor.decide.plan import PlanSettings, plan
    from janitor.decide.rails import Caps, Rails
    from janitor.policy.model import Mode, Policy

    sts = ObjectView(ObjectRef("StatefulSet", "apps/v1", "ml", "trainer", "sts-uid"), "7", ago(hours=5), replicas=1)
    trainer = PodView(ObjectRef("Pod", "v1", "ml", "trainer-0", "pod-uid"), "1", {},
                      OwnerRef("StatefulSet", "apps/v1", "trainer", "sts-uid"), node="gpu-node-1", phase="Running",
                      started=NOW - 5 * H, gpus=1, containers=(ContainerView("main", 32.0),))
    step = datetime.timedelta(seconds=15)
    gpu = {(signal, 2 * H): GpuEvidence(EvidenceWindow(signal, 2 * H, step, NOW), {} if peak is None else
                                        {PodKey("ml", "trainer-0"): (series("0", peak),)})
           for signal, peak in peaks.items()}
    cpu = {(2 * H, ()): CpuEvidence(EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW),
                                    {PodKey("ml", "trainer-0"): CpuUsage(0.05, 120, SCRAPED)})}
    observation = Observation(NOW, (sts,), (trainer,), {"ml": NamespaceView("ml")}, evidence=Evidence(gpu, cpu))
    planned = plan(observation, [Policy("idle-gpu", (policy_trigger,), mode=Mode.ENFORCE)], SafetyLedger(), NOW,
                   settings=PlanSettings(rails=Rails(caps=Caps(1000, 1000, 1000, 1000))))
    return {c.workload.name for c in planned.changes if c.step is Step.MARK}


def test_a_policy_on_memory_copy_alone_keeps_the_gpu_util_veto() -> None:
    trigger = IdleGpu(signal=GpuSignal.MEM_COPY, threshold=5, window=2 * H, min_pod_age=2 * H)
    assert _marked(trigger, {str(UTIL): 97.0, str(GpuSignal.MEM_COPY): 2.0}) == set()
    assert _marked(trigger, {str(UTIL): 1.0, str(GpuSignal.MEM_COPY): 2.0}) == {"trainer"}


def test_a_work_signal_left_out_on_a_node_keeps_the_gpu_util_veto() -> None:
    trigger = IdleGpu(signal=SM, threshold=0.05, also=((GpuSignal.MEM_COPY, 5.0),), window=2 * H, min_pod_age=2 * H)
    assert _marked(trigger, {str(UTIL): 97.0, str(GpuSignal.MEM_COPY): 2.0, str(SM): None}) == set()
    assert _marked(trigger, {str(UTIL): 1.0, str(GpuSignal.MEM_COPY): 2.0, str(SM): None}) == {"trainer"}
