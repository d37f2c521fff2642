"""The hung trigger: every GPU busy on GPU_UTIL at every sample while compute and power stay idle.

Aspects covered:
- the signature on every GPU is hung, with each reading in the reason and the owner's words;
- work on SM activity or power on any GPU is not hung, even with other evidence in doubt;
- a GPU_UTIL that dipped below the level within the window is not hung (idle or working);
- missing, partial, doubtful or unattributable evidence on any signal is unknown, never hung:
  a failed read, too few samples, a NaN, no lowest sample, a model without idle power, a node
  without SM activity, another pod's UID, a MIG slice, a pod younger than the window;
- the policy file: defaults, its own policy, `report` unless an action is given, clear errors;
- the lifecycle: a stuck job is marked and warned under an enforcing hung policy although the
  in-use check and an idle-GPU policy call it busy on GPU_UTIL (or its CPU spins), while use on SM
  activity or power stops it; and its action is a report unless the policy names another.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import replace

import pytest
from factories import NOW, SCRAPED, ago, obj

from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    ContainerView,
    NamespaceView,
    ObjectRef,
    Observation,
    OwnerRef,
    PodState,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.plain import plain
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.rails import Caps, Rails
from janitor.decide.reasons import Code
from janitor.decide.triggers.hung import HungJudge
from janitor.policy import load
from janitor.policy.model import Action, GpuSignal, Hung, IdleCpu, IdleGpu, Lifecycle, Mode, Policy

H = datetime.timedelta(hours=1)
M30 = datetime.timedelta(minutes=30)
UTIL, SM, POWER = GpuSignal.GPU_UTIL, GpuSignal.SM_ACTIVE, GpuSignal.POWER
A100 = "NVIDIA A100-SXM4-80GB"
TRIGGER = Hung(window=M30, power=1.5, idle_power=(("NVIDIA A100*", 55.0),))
NAME = "train-0"
# 30 min of 15 s scrapes
SAMPLES = 120


def pod(gpus: int = 2, mig: bool = False, name: str = NAME, uid: str | None = None,
        controller: OwnerRef | None = None, namespace: str = "ml") -> PodView:
    resource = "nvidia.com/mig-1g.10gb" if mig else "nvidia.com/gpu"
    return PodView(ref=ObjectRef("Pod", "v1", namespace, name, uid or str(uuid.uuid4())), resource_version="1",
                   labels={}, controller=controller, node="gpu-node-1", phase="Running", started=NOW - 3 * H,
                   gpus=gpus, containers=(ContainerView("main", 4.0),),
                   state=PodState(limits={resource: gpus}) if mig else PodState())


def series(gpu: str, peak: float | None, low: float | None = None, samples: int = SAMPLES, model: str = A100,
           uid: str = "") -> GpuSeries:
    return GpuSeries(gpu, peak, samples, "gpu-node-1", SCRAPED, False, model, uid, low)


def spinning(n: int = 2, low: float = 97.0) -> tuple[GpuSeries, ...]:
    return tuple(series(str(g), 100.0, low) for g in range(n))


def quiet_sm(n: int = 2) -> tuple[GpuSeries, ...]:
    return tuple(series(str(g), 0.03) for g in range(n))


def quiet_power(n: int = 2) -> tuple[GpuSeries, ...]:
    return tuple(series(str(g), 70.0) for g in range(n))


def evidence(key: PodKey = PodKey("ml", NAME), window: datetime.timedelta = M30,
             failed: dict[GpuSignal, str] | None = None, **read: tuple[GpuSeries, ...]) -> dict:
    out = {}
    for signal in (UTIL, SM, POWER):
        found = read.get(signal.name)
        span = EvidenceWindow(str(signal), window, datetime.timedelta(seconds=15), NOW)
        out[(str(signal), window)] = GpuEvidence(span, {key: found} if found else {}, (failed or {}).get(signal))
    return out


def judge(p: PodView | None = None, trigger: Hung = TRIGGER, failed=None, **read):
    return HungJudge(evidence(failed=failed, **read), trigger, NOW)(p or pod())


def hung(**changed: tuple[GpuSeries, ...]) -> dict[str, tuple[GpuSeries, ...]]:
    read = {"GPU_UTIL": spinning(), "SM_ACTIVE": quiet_sm(), "POWER": quiet_power()}
    read.update(changed)
    return {k: v for k, v in read.items() if v}


def test_busy_on_gpu_util_with_compute_and_power_idle_on_every_gpu_is_hung() -> None:
    judged = judge(**hung())
    assert judged.state is State.FIRES and judged.idle_gpus == ("0", "1")
    assert judged.why.code is Code.GPU_HUNG
    assert "GPU 0 GPU_UTIL low 97, SM_ACTIVE 0.03, power 1.3x idle" in str(judged.why)
    assert "SM_ACTIVE <= 0.2, power <= 1.5x idle" in str(judged.why)


@pytest.mark.parametrize("changed", [
    {"SM_ACTIVE": (series("0", 0.03), series("1", 0.6))},
    {"POWER": (series("0", 70.0), series("1", 300.0))},
    # work beats doubt: the other signal unreadable for this GPU
    {"SM_ACTIVE": (series("0", 0.03, samples=3), series("1", 0.7))},
], ids=["sm", "power", "work-beats-doubt"])
def test_work_on_sm_activity_or_power_on_any_gpu_is_not_hung(changed: dict) -> None:
    judged = judge(**hung(**changed))
    assert judged.state is State.CLEAR and judged.why.code is Code.GPU_WORKS
    assert "GPU 1" in str(judged.why)


def test_gpu_util_that_dipped_in_the_window_is_not_hung() -> None:
    judged = judge(**hung(GPU_UTIL=(series("0", 100.0, 97.0), series("1", 100.0, 0.0))))
    assert judged.state is State.CLEAR and judged.why.code is Code.GPU_UTIL_DIPS
    assert "GPU 1 low 0" in str(judged.why)


@pytest.mark.parametrize(("changed", "code"), [
    ({"GPU_UTIL": (series("0", 100.0, 97.0, samples=20), series("1", 100.0, 97.0))}, Code.GPU_LOW_COVERAGE),
    ({"GPU_UTIL": (series("0", 100.0, None), series("1", 100.0, 97.0))}, Code.NON_FINITE),
    ({"SM_ACTIVE": (series("0", None), series("1", 0.03))}, Code.NON_FINITE),
    ({"SM_ACTIVE": (series("0", 0.03),)}, Code.SERIES_COUNT),
    ({"SM_ACTIVE": ()}, Code.SERIES_COUNT),  # the node exports no SM activity: never hung
    ({"POWER": (series("0", 70.0, model="NVIDIA L4"), series("1", 70.0, model="NVIDIA L4"))}, Code.NO_IDLE_POWER),
    ({"GPU_UTIL": (series("0", 100.0, 97.0, uid="someone-else"), series("1", 100.0, 97.0, uid="someone-else"))},
     Code.UID_OTHER),
    ({"SM_ACTIVE": (series("0", 0.03), series("2", 0.03))}, Code.SIGNALS_DISAGREE),
], ids=["coverage", "no-low", "nan-sm", "sm-count", "sm-missing", "no-idle-power", "uid", "gpus-disagree"])
def test_evidence_short_of_the_whole_window_on_any_signal_is_unknown(changed: dict, code: Code) -> None:
    judged = judge(**hung(**changed))
    assert judged.state is State.UNKNOWN
    assert code in judged.why.codes()


def test_a_failed_read_a_mig_slice_or_a_young_pod_is_never_hung() -> None:
    assert judge(failed={SM: "timeout"}, **hung()).why.code is Code.EVIDENCE_FAILED
    assert judge(pod(mig=True), **hung()).why.code is Code.HUNG_MIG
    young = replace(pod(), started=NOW - datetime.timedelta(minutes=10))
    assert judge(young, **hung()).state is State.TOO_YOUNG


# -- the policy file -----------------------------------------------------------------------------------------


def loaded(text: str) -> load.Loaded:
    policies, errors = load.from_text(text, file="hung.yaml")
    return load.Loaded(policies, errors, ())


POLICY = """policies:
  - name: stuck
    mode: enforce
    match: {namespaces: {include: ["*"]}}
    triggers:
      hung: %s
"""


def test_a_hung_policy_reports_unless_it_names_an_action_and_stands_alone() -> None:
    policy, = loaded(POLICY % "{}").policies
    assert policy.lifecycle.action is Action.REPORT
    assert policy.trigger(Hung) == Hung()  # SM activity only: no idle power given
    suspending, = loaded(POLICY % "{idlePowerWatts: {'NVIDIA A100*': 55}}" + "    lifecycle: {action: suspend}\n"
                         ).policies
    assert suspending.lifecycle.action is Action.SUSPEND and suspending.trigger(Hung).power == 1.5
    errors = loaded(POLICY % "{smActive: null}").errors + loaded(POLICY % "{power: 1.2}").errors + \
        loaded(POLICY % "{}" + "      idleGpu: {}\n").errors
    assert [e.field for e in errors] == ["triggers.hung", "triggers.hung.power", "triggers"]
    assert "GPU_UTIL alone cannot tell a stuck job from a working one" in errors[0].problem


# -- through the lifecycle -------------------------------------------------------------------------------------


RAILS = Rails(caps=Caps(1000, 1000, 1000, 1000))


def observed(sm: float = 0.03, cpu_cores: float = 3.0, util_low: float = 97.0) -> tuple[Observation, ObjectRef]:
    job = obj("train", kind="Job", namespace="ml", created=ago(days=1))
    p = pod(controller=OwnerRef("Job", "batch/v1", "train", job.ref.uid))
    key = PodKey("ml", p.ref.name)
    gpu = evidence(key, M30, GPU_UTIL=tuple(series(str(g), 100.0, util_low) for g in range(2)),
                   SM_ACTIVE=(series("0", 0.03), series("1", sm)), POWER=quiet_power())
    gpu |= evidence(key, 2 * H, GPU_UTIL=tuple(series(str(g), 100.0, util_low, samples=480) for g in range(2)))
    cpu = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)
    found = Evidence(gpu=gpu, cpu={(2 * H, ()): CpuEvidence(cpu, {key: CpuUsage(cpu_cores, 120, SCRAPED)})})
    return Observation(NOW, (job,), (p,), {"ml": NamespaceView("ml", {}, {})}, evidence=found), job.ref


STUCK = Policy("stuck", (Hung(window=M30, power=1.5, idle_power=(("NVIDIA A100*", 55.0),)),), mode=Mode.ENFORCE,
               lifecycle=Lifecycle(action=Action.REPORT))
IDLE = Policy("idle-gpu", (IdleGpu(),), mode=Mode.ENFORCE, lifecycle=Lifecycle(action=Action.SUSPEND))


def changes(observation: Observation, policies: list[Policy], ref: ObjectRef) -> list:
    decided = plan(observation, policies, SafetyLedger(), NOW, settings=PlanSettings(rails=RAILS))
    return [c for c in decided.changes if c.workload == ref]


def test_a_stuck_job_is_marked_and_warned_although_gpu_util_and_its_cpu_say_busy() -> None:
    observation, ref = observed()
    for policies in ([STUCK], [IDLE, STUCK], [Policy("cpu", (IdleCpu(cores=0.5),), mode=Mode.ENFORCE), STUCK]):
        found = changes(observation, policies, ref)
        assert [c.step for c in found] == [Step.MARK], policies
        assert found[0].policy == "stuck"
        assert found[0].notice is not None and found[0].notice.action == "report"
        assert found[0].notice.condition == "stuck"
        assert plain(found[0].notice.why) == ("looks stuck since 11:30 UTC on 2 GPUs: the GPUs report busy, but "
                                              "compute and power are idle")


def test_use_on_sm_activity_stops_the_mark_and_a_working_gpu_util_is_no_hang() -> None:
    observation, ref = observed(sm=0.7)
    assert changes(observation, [IDLE, STUCK], ref) == []
    observation, ref = observed(util_low=10.0)
    assert changes(observation, [STUCK], ref) == []
    findings = plan(observation, [STUCK], SafetyLedger(), NOW, settings=PlanSettings(rails=RAILS)).findings
    assert [f.state for f in findings if f.trigger is TriggerKind.HUNG] == [State.CLEAR]


def test_the_owner_reads_that_the_job_looks_stuck_and_that_nothing_will_be_done() -> None:
    from janitor.act.slack_messages import notice_text, summary

    observation, ref = observed()
    notice = changes(observation, [STUCK], ref)[0].notice
    assert notice is not None
    text = notice_text(notice, NOW)
    assert text.startswith(":warning: *Warning:* *Job ml/train* is stuck (policy `stuck`, 2 GPUs). This policy "
                           "only reports it: nothing will be done to it.")
    assert "*Why:* looks stuck since 11:30 UTC on 2 GPUs: the GPUs report busy, but compute and power are idle" \
        in text
    assert "will be *" not in text and "*When:*" not in text
    assert summary([notice], NOW, rich=False).startswith(
        "1 of your workloads is stuck: the janitor only reports it.")


# -- found in review: each path below reclaimed (or marked) a job a careful admin would keep -------------------

SUSPENDING = replace(STUCK, lifecycle=Lifecycle(action=Action.SUSPEND))


def test_sm_activity_reading_zero_under_full_gpu_util_is_an_exporter_fault_not_a_hang() -> None:
    judged = judge(**hung(SM_ACTIVE=(series("0", 0.0), series("1", 0.03))))
    assert judged.state is State.UNKNOWN and judged.why.code is Code.SM_ZERO_UNDER_LOAD
    assert "a known exporter fault" in str(judged.why)


def test_a_hung_policy_that_acts_reads_both_quiet_signals_and_never_deletes() -> None:
    acting = POLICY % "{}" + "    lifecycle: {action: suspend}\n"
    deleting = POLICY % "{idlePowerWatts: {'NVIDIA A100*': 55}}" + "    lifecycle: {action: delete}\n"
    errors = loaded(acting).errors + loaded(deleting).errors
    assert [e.field for e in errors] == ["lifecycle.action", "lifecycle.action"]
    assert "reads both smActive and power" in errors[0].problem
    assert "never deleted" in errors[1].problem
    assert loaded(POLICY % "{}").errors == ()  # reporting on SM activity alone is fine


def _workload_with(*pods: PodView, cpu: dict[str, float] | None = None) -> tuple[Observation, ObjectRef]:
    job = obj("train", kind="Job", namespace="ml", created=ago(days=1))
    ctrl = OwnerRef("Job", "batch/v1", "train", job.ref.uid)
    pods = tuple(replace(p, controller=ctrl) for p in pods)
    gpu: dict = {}
    for p in pods:
        if p.gpus:
            key = PodKey("ml", p.ref.name)
            for window, samples in ((M30, SAMPLES), (2 * H, 480)):
                part = evidence(key, window, GPU_UTIL=tuple(series(str(g), 100.0, 97.0, samples=samples)
                                                             for g in range(p.gpus)),
                                SM_ACTIVE=quiet_sm(p.gpus), POWER=quiet_power(p.gpus))
                for k, v in part.items():
                    merged = dict(gpu[k].pods) | dict(v.pods) if k in gpu else v.pods
                    gpu[k] = replace(v, pods=merged)
    span = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)
    usage = {PodKey("ml", name): CpuUsage(cores, 120, SCRAPED) for name, cores in (cpu or {}).items()}
    found = Evidence(gpu=gpu, cpu={(2 * H, ()): CpuEvidence(span, usage)})
    return Observation(NOW, (job,), pods, {"ml": NamespaceView("ml", {}, {})}, evidence=found), job.ref


def test_cpu_use_on_a_pod_the_hung_trigger_did_not_judge_stops_it() -> None:
    observation, ref = _workload_with(pod(), pod(gpus=0, name="prep-0"), cpu={NAME: 0.02, "prep-0": 8.0})
    assert changes(observation, [Policy("cpu", (IdleCpu(cores=0.5),), mode=Mode.ENFORCE), SUSPENDING], ref) == []


def test_a_pod_starting_keeps_a_hung_workload() -> None:
    starting = replace(pod(name="train-1"), phase="Pending", node="", started=None)
    observation, ref = _workload_with(pod(), starting)
    assert changes(observation, [SUSPENDING], ref) == []
    findings = plan(observation, [SUSPENDING], SafetyLedger(), NOW, settings=PlanSettings(rails=RAILS)).findings
    assert [f.reason.code for f in findings if f.trigger is TriggerKind.HUNG] == [Code.POD_STARTING]


def test_a_signal_in_doubt_that_could_stop_a_hang_holds_it() -> None:
    observation, ref = observed()
    mem = GpuSignal.MEM_COPY
    idle = Policy("idle-gpu", (IdleGpu(also=((mem, 5.0),)),), mode=Mode.ENFORCE, lifecycle=Lifecycle(
        action=Action.SUSPEND))
    span = EvidenceWindow(str(mem), 2 * H, datetime.timedelta(seconds=15), NOW)
    failed = replace(observation, evidence=replace(observation.evidence, gpu={
        **observation.evidence.gpu, (str(mem), 2 * H): GpuEvidence(span, {}, "query timed out")}))
    assert changes(failed, [idle, SUSPENDING], ref) == []
    # the same with memory copy read and idle: marked
    key = PodKey("ml", observation.pods[0].ref.name)
    read = replace(observation, evidence=replace(observation.evidence, gpu={
        **observation.evidence.gpu, (str(mem), 2 * H): GpuEvidence(span, {key: (series("0", 0.0, samples=480),
                                                                                series("1", 0.0, samples=480))})}))
    assert [c.step for c in changes(read, [idle, SUSPENDING], ref)] == [Step.MARK]
