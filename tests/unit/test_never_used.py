"""The never-used window: a pod idle since it started gets the policy's shorter notice.

Aspects covered:
- a pod at least `after` old, younger than the window, whose own samples (by its UID) since it
  started are all idle, with coverage and no gap over its life, is idle "never used";
- anything short of that stays as before (too young) or unknown: series without UIDs, younger
  than `after`, too few samples over its life, a gap inside its life; busy beats (in use);
  an earlier pod's series of the same name count for nothing;
- the same on several signals;
- the lifecycle: its mark's deadline and the least notice after delivery are neverUsed.warnBefore,
  the owner reads "unused" and "never used since it started", a mark of a used pod is lifted;
- the policy file.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import replace

import pytest
from factories import NOW, ago, obj

from janitor import annotations as ann
from janitor.decide.evidence import (
    CpuEvidence,
    CpuUsage,
    Evidence,
    EvidenceWindow,
    GpuEvidence,
    GpuSeries,
    PodKey,
    Quality,
)
from janitor.decide.lifecycle import Step, delivered
from janitor.decide.model import NamespaceView, ObjectRef, Observation, OwnerRef, PodView, SafetyLedger, State
from janitor.decide.plain import plain
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.rails import Caps, Rails
from janitor.decide.reasons import Code
from janitor.decide.triggers.idle import GpuJudge
from janitor.decide.triggers.signals import SignalsJudge
from janitor.policy import load
from janitor.policy.model import Action, GpuSignal, IdleGpu, Lifecycle, Mode, NeverUsed, Policy

M, H = datetime.timedelta(minutes=1), datetime.timedelta(hours=1)
STEP = datetime.timedelta(seconds=15)
TRIGGER = IdleGpu(window=2 * H, min_pod_age=2 * H, never_used=NeverUsed(30 * M, 20 * M))
UID = str(uuid.uuid4())
LIFE = 45 * M


def pod(started: datetime.timedelta = LIFE, uid: str = UID) -> PodView:
    return PodView(ref=ObjectRef("Pod", "v1", "ml", "nb-0", uid), resource_version="1", labels={},
                   controller=OwnerRef("StatefulSet", "apps/v1", "nb", "sts-uid"), node="gpu-node-1",
                   phase="Running", started=NOW - started, gpus=1)


def series(peak: float = 0.0, uid: str = UID, life: datetime.timedelta = LIFE, samples: int | None = None,
           gap_in_life: datetime.timedelta = STEP) -> GpuSeries:
    """A series as the query folds it: the window's steps before the pod started count as a gap."""
    gap = 2 * H - life + gap_in_life
    return GpuSeries("0", peak, samples if samples is not None else int(life / STEP), "gpu-node-1",
                     Quality(STEP, gap), uid=uid)


def gpu(*found: GpuSeries, signal: GpuSignal = GpuSignal.GPU_UTIL) -> GpuEvidence:
    return GpuEvidence(EvidenceWindow(str(signal), 2 * H, STEP, NOW), {PodKey("ml", "nb-0"): found})


def test_idle_since_it_started_is_never_used() -> None:
    judged = GpuJudge(gpu(series()), TRIGGER, NOW)(pod())
    assert (judged.state, judged.why.code, judged.never_used) == (State.FIRES, Code.NEVER_USED, True)
    assert plain(judged.why).startswith("never used since it started 45 min ago: ")


@pytest.mark.parametrize("case, found, started, state", [
    ("no UID on its series", (series(uid=""),), LIFE, State.TOO_YOUNG),
    ("younger than after", (series(life=20 * M),), 20 * M, State.TOO_YOUNG),
    ("too few samples over its life", (series(samples=60),), LIFE, State.UNKNOWN),
    ("a 10 min gap in its life", (series(gap_in_life=10 * M),), LIFE, State.UNKNOWN),
    ("busy once", (series(peak=40.0),), LIFE, State.CLEAR),
    ("only an earlier pod's series", (series(uid="earlier"),), LIFE, State.TOO_YOUNG),
])
def test_short_of_a_whole_idle_life_it_is_not_never_used(case: str, found: tuple[GpuSeries, ...],
                                                         started: datetime.timedelta, state: State) -> None:
    judged = GpuJudge(gpu(*found), TRIGGER, NOW)(pod(started))
    assert judged.state is state and not judged.never_used, case


def test_another_uids_series_under_its_name_leaves_it_too_young() -> None:
    """Another UID beside its own may be an earlier pod's (busy within the window) or its own under a
    relabelled UID: "never used" cannot be told, so the window decides, as without a never-used one."""
    for peak in (90.0, 0.0):
        judged = GpuJudge(gpu(series(), series(peak=peak, uid="earlier")), TRIGGER, NOW)(pod())
        assert judged.state is State.TOO_YOUNG and not judged.never_used


def test_a_signal_only_an_earlier_pod_had_on_its_node_is_not_left_out() -> None:
    several = replace(TRIGGER, also=((GpuSignal.SM_ACTIVE, 0.05),))
    earlier = GpuSeries("0", 0.9, 200, "gpu-node-1", Quality(STEP, LIFE + 150 * datetime.timedelta(seconds=1)),
                        uid="earlier")
    evidence = {(str(GpuSignal.GPU_UTIL), 2 * H): gpu(series()),
                (str(GpuSignal.SM_ACTIVE), 2 * H): gpu(earlier, signal=GpuSignal.SM_ACTIVE)}
    assert SignalsJudge(evidence, several, NOW)(pod()).state is State.TOO_YOUNG


def test_a_min_pod_age_longer_than_the_window_still_holds() -> None:
    assert GpuJudge(gpu(series()), replace(TRIGGER, min_pod_age=4 * H), NOW)(pod()).state is State.TOO_YOUNG


def test_never_used_on_several_signals() -> None:
    several = replace(TRIGGER, also=((GpuSignal.SM_ACTIVE, 0.05),))
    evidence = {(str(GpuSignal.GPU_UTIL), 2 * H): gpu(series()),
                (str(GpuSignal.SM_ACTIVE), 2 * H): gpu(series(peak=0.01), signal=GpuSignal.SM_ACTIVE)}
    assert SignalsJudge(evidence, several, NOW)(pod()).never_used
    evidence[(str(GpuSignal.SM_ACTIVE), 2 * H)] = gpu(series(peak=0.5), signal=GpuSignal.SM_ACTIVE)
    assert SignalsJudge(evidence, several, NOW)(pod()).state is State.CLEAR
    evidence[(str(GpuSignal.SM_ACTIVE), 2 * H)] = gpu(series(peak=0.01, uid=""), signal=GpuSignal.SM_ACTIVE)
    assert SignalsJudge(evidence, several, NOW)(pod()).state is State.TOO_YOUNG


# -- through the lifecycle -------------------------------------------------------------------------------------

RAILS = Rails(caps=Caps(1000, 1000, 1000, 1000))
NOTEBOOKS = Policy("notebooks", (TRIGGER,), mode=Mode.ENFORCE,
                   lifecycle=Lifecycle(warn_before=24 * H, action=Action.SCALE_TO_ZERO))


def observed(peak: float = 0.0, annotations: dict[str, str] | None = None, cpu: CpuUsage | None = None,
             started: datetime.timedelta = LIFE) -> tuple[Observation, ObjectRef]:
    sts = obj("nb", kind="StatefulSet", namespace="ml", created=ago(days=1), annotations=annotations or {})
    p = replace(pod(started), controller=OwnerRef("StatefulSet", "apps/v1", "nb", sts.ref.uid))
    window = EvidenceWindow("cpu", 2 * H, M, NOW)
    used = CpuEvidence(window, {PodKey("ml", "nb-0"): cpu or CpuUsage(0.01, 45, Quality(STEP, STEP))})
    found = Evidence(gpu={(str(GpuSignal.GPU_UTIL), 2 * H): gpu(series(peak))}, cpu={(2 * H, ()): used})
    return Observation(NOW, (sts,), (p,), {"ml": NamespaceView("ml", {}, {})}, evidence=found), sts.ref


def changes(observation: Observation, ref: ObjectRef) -> list:
    decided = plan(observation, [NOTEBOOKS], SafetyLedger(), NOW, settings=PlanSettings(rails=RAILS))
    return [c for c in decided.changes if c.workload == ref]


def test_a_never_used_workload_is_marked_with_the_shorter_notice_and_told_so() -> None:
    observation, ref = observed()
    [mark] = changes(observation, ref)
    assert mark.step is Step.MARK and mark.deadline == NOW + 20 * M and mark.never_used
    assert mark.notice is not None and mark.notice.condition == "unused"
    assert plain(mark.notice.why).startswith("never used since it started 45 min ago")
    # Delivered a minute later: the least notice after delivery is the shorter one too, not 24 h.
    patch = delivered(mark, ann.Delivery("D0ALICE", f"{(NOW + M).timestamp():.6f}"), NOTEBOOKS)
    assert ann.parse_expires(str(patch[ann.DEADLINE])) == NOW + 21 * M


@pytest.mark.parametrize("case, cpu", [
    ("its CPU busy once: in use", CpuUsage(2.0, 45, Quality(STEP, STEP))),
    ("more CPU points than its life holds: an earlier pod's of its name", CpuUsage(0.01, 60, Quality(STEP, STEP))),
    ("too few CPU points over its life", CpuUsage(0.01, 20, Quality(STEP, STEP))),
    ("a 10 min CPU gap in its life", CpuUsage(0.01, 45, Quality(STEP, 10 * M))),
])
def test_the_in_use_check_reads_its_cpu_since_it_started_too(case: str, cpu: CpuUsage) -> None:
    """Busy on any signal beats idle on another, and unknown holds: the in-use check judges the CPU
    of a pod the never-used window judges over the same life."""
    observation, ref = observed(cpu=cpu)
    assert changes(observation, ref) == [], case


def test_a_mark_older_than_its_pod_is_not_acted_on_through_never_used() -> None:
    """Warned of the workload's earlier pod, its deadline passed while the owner started a new one: the
    new pod, idle since it started, is owed its own notice, not the old deadline."""
    at = NOW - 25 * H
    marks = {ann.DEADLINE: ann.format_deadline(NOW - H), ann.POLICY: "notebooks",
             ann.MARKED_AT: ann.format_deadline(at), ann.WARNED_AT: ann.format_deadline(at),
             ann.WARNED_VIA: f"owner D0ALICE/{at.timestamp():.6f}",
             ann.WARNED_OF: f"scale-to-zero {ann.format_deadline(NOW - H)}"}
    observation, ref = observed(annotations=marks)
    sts = observation.objects[0]
    observation = replace(observation, objects=(replace(sts, annotations={**marks, ann.MARKED_UID: sts.ref.uid}),))
    steps = [c.step for c in changes(observation, ref)]
    assert Step.ACT not in steps, steps


def test_the_cpu_minute_the_pod_started_in_is_no_gap_in_its_life() -> None:
    """cAdvisor's samples are measured at minute steps: the step the pod started in saw none of them."""
    life = LIFE + 30 * datetime.timedelta(seconds=1)  # it started half-way through a minute step
    # 75 minute steps of the window saw no sample (74 before it, and the one it started in), then 25 s
    started_in = 75 * M + 25 * datetime.timedelta(seconds=1)
    observation, ref = observed(cpu=CpuUsage(0.01, 45, Quality(STEP, started_in)), started=life)
    assert [c.step for c in changes(observation, ref)] == [Step.MARK]
    # A minute more without samples inside its life is a gap all the same.
    observation, ref = observed(cpu=CpuUsage(0.01, 45, Quality(STEP, started_in + M)), started=life)
    assert changes(observation, ref) == []


def test_a_cpu_minute_that_saw_the_pod_start_early_is_no_gap_either() -> None:
    """Started 20 s into a minute step, the pod's first samples fall inside that step: the window's
    stretch with none of them is its 74 whole steps before it plus the scrape interval, less than
    those steps and the one it started in. That is no gap in its life (seen on the sandbox)."""
    life = LIFE + 20 * datetime.timedelta(seconds=1)
    before_it = 74 * M + STEP
    observation, ref = observed(cpu=CpuUsage(0.01, 45, Quality(STEP, before_it)), started=life)
    assert [c.step for c in changes(observation, ref)] == [Step.MARK]
    # Steps before it that held samples are another pod's of its name: the gap measured stands.
    observation, ref = observed(cpu=CpuUsage(0.01, 45, Quality(STEP, 10 * M)), started=life)
    assert changes(observation, ref) == []


def test_a_never_used_mark_is_lifted_when_the_pod_is_used() -> None:
    marks = {ann.DEADLINE: ann.format_deadline(NOW + 10 * M), ann.POLICY: "notebooks",
             ann.MARKED_AT: ann.format_deadline(NOW - 10 * M)}
    observation, ref = observed(peak=60.0, annotations=marks)
    assert [c.step for c in changes(observation, ref)] == [Step.UNMARK]


POLICY = """policies:
  - name: notebooks
    match: {namespaces: {include: ["*"]}}
    triggers:
      idleGpu: {window: 2h, neverUsed: %s}
"""


def test_the_policy_file() -> None:
    policies, errors = load.from_text(POLICY % "{after: 30m, warnBefore: 20m}", file="nb.yaml")
    assert not errors and policies[0].trigger(IdleGpu).never_used == NeverUsed(30 * M, 20 * M)
    _, errors = load.from_text(POLICY % "{after: 1h, warnBefore: 1h}", file="nb.yaml")
    assert [e.field for e in errors] == ["triggers.idleGpu.neverUsed"]
    assert "must be shorter than the window" in errors[0].problem
    _, errors = load.from_text(POLICY.replace("window: 2h,", "window: 2h, minPodAge: 3h,") % "{after: 30m, "
                               "warnBefore: 20m}", file="nb.yaml")
    assert [e.field for e in errors] == ["triggers.idleGpu.neverUsed"] and "minPodAge" in errors[0].problem
    _, errors = load.from_text(POLICY % "{after: 30m}", file="nb.yaml")
    assert [e.field for e in errors] == ["triggers.idleGpu.neverUsed.warnBefore"]
