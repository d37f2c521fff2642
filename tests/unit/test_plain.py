"""What a researcher reads as the "why" of a Slack message, from a reason's code and facts.

Aspects covered:
- durations in words ("4 h", "30 min", "1 h 30 min", "2 d", "3 d 4 h");
- idle GPU: one pod with one GPU, one pod with several GPUs (a few: each peak; many: the highest),
  several pods (one peak each, "…" past the pods the reason names), GPU_UTIL as percent and
  GR_ENGINE_ACTIVE (a fraction 0..1) shown as percent;
- idle CPU in cores, one pod and several;
- stuck Pending: the time in the state and what the scheduler said, which node could run it once
  what passes, containers not starting, and a pod no node could ever run (what it asks for against
  the most any node has);
- crash-looping: the container, its restarts, its last run and exit, running out of memory;
- the "cancelled" reasons: in use again, with the peak that shows it;
- reasons built by the real triggers (so the facts read here are the facts the triggers write);
- any other code, and a reason missing the facts read here, fall back to the reason's sentence.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from factories import NOW, SCRAPED, obj

from janitor.decide import selection
from janitor.decide.evidence import CpuEvidence, CpuUsage, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.model import (
    ContainerKind,
    ContainerStatus,
    ContainerView,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    Observation,
    OwnerRef,
    PodJudgement,
    PodState,
    PodView,
    State,
)
from janitor.decide.plain import duration, plain
from janitor.decide.rails import Rails
from janitor.decide.reasons import Code, Reason, text, why
from janitor.decide.triggers import crashloop, pending
from janitor.decide.triggers.idle import judge_cpu, judge_gpu, judge_workload
from janitor.policy.model import CrashLoop, GpuSignal, IdleCpu, IdleGpu, Match, Namespaces, Pending, Policy

H = datetime.timedelta(hours=1)
M = datetime.timedelta(minutes=1)
D = datetime.timedelta(days=1)


@pytest.mark.parametrize(("delta", "words"), [
    (4 * H, "4 h"), (4 * H + datetime.timedelta(seconds=30), "4 h"), (30 * M, "30 min"), (90 * M, "1 h 30 min"),
    (2 * D, "2 d"), (3 * D + 4 * H + 12 * M, "3 d 4 h"), (datetime.timedelta(seconds=45), "45 s"),
    (M + datetime.timedelta(seconds=20), "1 min 20 s"), (D, "1 d"), (datetime.timedelta(0), "0 s"),
], ids=["hours", "drops-seconds-after-hours", "minutes", "hour-and-minutes", "days", "days-and-hours", "seconds",
        "minutes-and-seconds", "a-day", "zero"])
def test_durations_in_words(delta: datetime.timedelta, words: str) -> None:
    assert duration(delta) == words


# -- idle ---------------------------------------------------------------------------------------------------


def gpu_pod(name: str = "nb-0", gpus: int = 1) -> PodView:
    return PodView(ObjectRef("Pod", "v1", "ml", name, str(uuid.uuid4())), "1", {}, None, "gpu-node-1", "Running",
                   NOW - 3 * D, gpus, containers=(ContainerView("main", 4.0),))


def idle_gpus(peaks: Sequence[float], *, name: str = "nb-0", window: datetime.timedelta = 4 * H,
              signal: GpuSignal = GpuSignal.GPU_UTIL) -> PodJudgement:
    """One pod judged by the real trigger on a GPU series per peak, scraped every 15 s."""
    trigger = IdleGpu(signal=signal, threshold=signal.default_threshold, window=window, min_pod_age=window)
    samples = int(window / datetime.timedelta(seconds=15))
    series = tuple(GpuSeries(str(i), peak, samples, quality=SCRAPED) for i, peak in enumerate(peaks))
    evidence = GpuEvidence(EvidenceWindow(str(signal), window, datetime.timedelta(seconds=15), NOW),
                           {PodKey("ml", name): series})
    judged = judge_gpu(gpu_pod(name, len(peaks)), evidence, trigger, NOW)
    assert judged.state is State.FIRES, judged.why
    return judged


def idle_cpu(peak: float, *, name: str = "web-0", window: datetime.timedelta = 2 * H) -> PodJudgement:
    trigger = IdleCpu(cores=0.1, window=window, min_pod_age=window)
    evidence = CpuEvidence(EvidenceWindow("cpu", window, M, NOW),
                           {PodKey("ml", name): CpuUsage(peak, int(window / M), SCRAPED)})
    judged = judge_cpu(gpu_pod(name, 0), evidence, trigger, NOW)
    assert judged.state is State.FIRES, judged.why
    return judged


def workload(*pods: PodJudgement) -> Reason:
    state, reason = judge_workload(pods)
    assert state is State.FIRES
    return reason


@pytest.mark.parametrize(("reason", "words"), [
    (workload(idle_gpus([0])), "GPU 0 peaked at 0 % over the last 4 h"),
    (workload(idle_gpus([0.4], window=30 * M)), "GPU 0 peaked at 0.4 % over the last 30 min"),
    (workload(idle_gpus([0, 2])), "its 2 GPUs peaked at 0 % and 2 % over the last 4 h"),
    (workload(idle_gpus([0, 2, 1])), "its 3 GPUs peaked at 0 %, 2 % and 1 % over the last 4 h"),
    (workload(idle_gpus([0, 2, 1, 0, 3, 0, 0, 0])), "its 8 GPUs peaked at no more than 3 % over the last 4 h"),
    (workload(idle_gpus([0.004], signal=GpuSignal.GR_ENGINE_ACTIVE, window=2 * D)),
     "GPU 0 peaked at 0.4 % over the last 2 d"),
    (workload(idle_gpus([0], name="a"), idle_gpus([1], name="b"), idle_gpus([0], name="c")),
     "all 3 pods idle: GPU peaks 0 %, 1 %, 0 % over the last 4 h"),
    (workload(idle_gpus([0, 3], name="a"), idle_gpus([1], name="b")),
     "all 2 pods idle: GPU peaks 3 %, 1 % over the last 4 h"),
    (workload(*(idle_gpus([i % 2], name=f"w{i}") for i in range(5))),
     "all 5 pods idle: GPU peaks 0 %, 1 %, 0 %, … over the last 4 h"),
    (workload(idle_cpu(0.02)), "CPU peaked at 0.02 cores over the last 2 h"),
    (workload(idle_cpu(0.02, name="a"), idle_cpu(0, name="b")),
     "all 2 pods idle: CPU peaks 0.02, 0 cores over the last 2 h"),
], ids=["one-gpu", "fraction-of-a-percent", "two-gpus", "three-gpus", "eight-gpus", "gr-engine-active-fraction",
        "three-pods", "a-pods-highest-gpu", "more-pods-than-named", "cpu", "cpu-pods"])
def test_idle_in_plain_words(reason: Reason, words: str) -> None:
    assert plain(reason) == words


# -- stuck Pending ------------------------------------------------------------------------------------------

NODES = (NodeInfo("gpu-node-1", {"kubernetes.io/hostname": "gpu-node-1"},
                  allocatable={"cpu": 64, "memory": 2**38, "nvidia.com/gpu": 4}),
         NodeInfo("gpu-node-2", {"kubernetes.io/hostname": "gpu-node-2"},
                  allocatable={"cpu": 64, "memory": 2**38, "nvidia.com/gpu": 2}))
STUCK = Policy("stuck", (Pending(after=30 * M),), match=Match(namespaces=Namespaces(("*",))))
SCHEDULER = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def pending_reason(*states: dict[str, Any], nodes: Sequence[NodeInfo] = NODES) -> Reason:
    job = obj("train", kind="Job")
    pods = tuple(PodView(ObjectRef("Pod", "v1", "team-a", f"train-{i}", str(uuid.uuid4())), "1", {},
                         OwnerRef("Job", "batch/v1", "train", job.ref.uid), None, "Pending", None, 0,
                         state=PodState(**state), created=NOW - 5 * D) for i, state in enumerate(states))
    observation = Observation(NOW, objects=(job,), pods=pods, namespaces={"team-a": NamespaceView("team-a")},
                              nodes=tuple(nodes), nodes_known=True)
    [found] = pending.findings(selection.workloads(observation, Rails()), observation, STUCK, NOW)
    assert found.state is State.FIRES, found.why
    return found.reason


def unschedulable(gpus: float, stuck: datetime.timedelta = 3 * D + 2 * H, **extra: Any) -> dict[str, Any]:
    return {"scheduled": False, "schedule_reason": "Unschedulable", "schedule_message": SCHEDULER,
            "scheduled_changed": NOW - stuck, "requests": {"nvidia.com/gpu": gpus}, **extra}


@pytest.mark.parametrize(("reason", "words"), [
    (pending_reason(unschedulable(4)), f"Pending for 3 d 2 h: the scheduler finds no node for it ({SCHEDULER})"),
    (pending_reason(unschedulable(8)),
     "no node in the cluster could ever run it: it asks for 8 GPUs and no node has that many (at most 4 GPUs)"),
    (pending_reason(unschedulable(2, stuck=50 * M, node_selector={"gpu": "h100"})),
     "no node in the cluster could ever run it: nodeSelector gpu=h100 matches no node (2 nodes)"),
    (pending_reason(unschedulable(3), nodes=(NodeInfo("gpu-node-1", {}, allocatable={"nvidia.com/gpu": 4},
                                                      unschedulable=True), NODES[1])),
     "Pending for 3 d 2 h: gpu-node-1 could run it once the node is uncordoned"),
    (pending_reason({"scheduled": True, "scheduled_changed": NOW - 40 * M,
                     "waiting": (("main", "ImagePullBackOff", "back-off pulling image"),)}),
     "Pending for 40 min: scheduled, but not started (main: ImagePullBackOff (back-off pulling image))"),
    (pending_reason(unschedulable(4), unschedulable(4, stuck=2 * H)),
     f"none of its 2 pods runs; train-0: Pending for 3 d 2 h: the scheduler finds no node for it ({SCHEDULER})"),
], ids=["unschedulable", "more-gpus-than-any-node", "selector-matches-no-node", "waits-for-a-cordoned-node",
        "image-pull", "several-pods"])
def test_pending_in_plain_words(reason: Reason, words: str) -> None:
    assert plain(reason) == words


# -- crash-looping ------------------------------------------------------------------------------------------

LOOPS = Policy("crash", (CrashLoop(restarts=5, window=60 * M),), match=Match(namespaces=Namespaces(("*",))))


def looping_pod(name: str, gpus: int, memory: float | None, exit_words: str, restarts: int = 7) -> PodView:
    ended = NOW - 2 * M
    trainer = ContainerStatus("train", ContainerKind.APP, restarts, "waiting", "CrashLoopBackOff", None, None,
                              exit_words, ended - 90 * datetime.timedelta(seconds=1), ended)
    return PodView(ObjectRef("Pod", "v1", "team-a", name, str(uuid.uuid4())), "1", {},
                   OwnerRef("Job", "batch/v1", "train", "job-uid"), "n1", "Running", NOW - 5 * H, gpus,
                   state=PodState(containers=(trainer,), limits={"memory": memory} if memory else {}))


def crash_reason(*pods: PodView) -> Reason:
    job = obj("train", kind="Job", uid="job-uid")
    observation = Observation(NOW, objects=(job,), pods=pods, namespaces={"team-a": NamespaceView("team-a")})
    [found] = crashloop.findings(selection.workloads(observation, Rails()), observation, LOOPS, NOW)
    assert found.state is State.FIRES, found.why
    return found.reason


@pytest.mark.parametrize(("reason", "words"), [
    (crash_reason(looping_pod("train-0", 2, 8 * 2**30, "OOMKilled, exit code 137")),
     "crash-looping while holding 2 GPUs: container train restarted 7 times; its last run ended after 1 min 30 s "
     "(OOMKilled, exit code 137); now waiting (CrashLoopBackOff); it ran out of memory (memory limit 8.0 GiB); "
     "on cgroup v2 one process over the limit takes the whole container (memory.oom.group) unless the node sets "
     "singleProcessOOMKill"),
    (crash_reason(looping_pod("train-0", 1, None, "Error, exit code 1", restarts=12)),
     "crash-looping while holding 1 GPU: container train restarted 12 times; its last run ended after 1 min 30 s "
     "(Error, exit code 1); now waiting (CrashLoopBackOff)"),
    (crash_reason(looping_pod("train-0", 1, None, "Error, exit code 1"),
                  looping_pod("train-1", 1, None, "Error, exit code 2")),
     "crash-looping while holding 2 GPUs: train-0: container train restarted 7 times; its last run ended after "
     "1 min 30 s (Error, exit code 1); now waiting (CrashLoopBackOff); train-1: container train restarted 7 times; "
     "its last run ended after 1 min 30 s (Error, exit code 2); now waiting (CrashLoopBackOff)"),
], ids=["oom", "error", "two-pods"])
def test_crash_loop_in_plain_words(reason: Reason, words: str) -> None:
    assert plain(reason) == words


# -- cancelled, and the fallback ----------------------------------------------------------------------------


def busy_gpu() -> Reason:
    trigger = IdleGpu(window=2 * H)
    evidence = GpuEvidence(EvidenceWindow(str(trigger.signal), 2 * H, datetime.timedelta(seconds=15), NOW),
                           {PodKey("ml", "nb-0"): (GpuSeries("0", 97.0, 480, quality=SCRAPED),)})
    state, reason = judge_workload([judge_gpu(gpu_pod(), evidence, trigger, NOW)])
    assert state is State.CLEAR
    return why(Code.IN_USE, trigger="idleGpu", policy="idle-gpu", why=reason)


@pytest.mark.parametrize(("reason", "words"), [
    (busy_gpu(), "in use again: GPU 0 peaked at 97 % over the last 2 h"),
    (why(Code.IN_USE, trigger="idleGpu", policy="idle-gpu",
         why=why(Code.POD_STARTING, pod="nb-1", phase="Pending")), "in use again: pod nb-1 is starting"),
], ids=["busy-gpu", "pod-starting"])
def test_in_use_again_in_plain_words(reason: Reason, words: str) -> None:
    assert plain(reason) == words


@pytest.mark.parametrize("reason", [
    why(Code.NO_LONGER_COVERED, policy="idle-gpu"),
    why(Code.MARK_BROKEN, problems=("janitor/expires does not parse",)),
    # Facts the plain words need but this reason lacks (a reason built by hand, or by an older
    # version): its sentence, never a half-made phrase.
    why(Code.ALL_IDLE, total=1, shown=(why(Code.POD, pod="nb", why=why(
        Code.GPU_IDLE, detail="GPU 0 peak 0", signal="DCGM_FI_DEV_GPU_UTIL", threshold=5.0, window=4 * H)),), more=""),
    # A code not covered inside one that is: the whole sentence, not half of each.
    why(Code.STUCK_FOR, state=text("an admission webhook said no"), stuck=2 * H),
], ids=["no-longer-covered", "mark-broken", "gpu-idle-without-peaks", "uncovered-inside"])
def test_other_reasons_fall_back_to_their_sentence(reason: Reason) -> None:
    assert plain(reason) == str(reason)
