"""The crash-loop trigger: GPU workloads holding GPUs while doing nothing but restarting.

Aspects covered:
- a GPU workload fires when every GPU pod restarted `restarts` times, the last within the
  window (both bounds included); a healthy GPU pod beside it keeps it (clear); an old crash,
  too few restarts, no recorded exit, a CPU-only pod or an unreadable owner chain is no finding;
- the why names the restarts, the last exit, the memory limit and, from the node agent's OOM
  reports (structured, by pod uid), what the OOM kills took: single processes (the status shows
  no OOMKilled) or the whole container (memory.oom.group); no OOM part when nothing points to one;
- through a cycle's plan: a workload found crash-looping and of unknown GPU use is marked by the
  crash-loop policy; busy on the GPU signal vetoes the crash-loop mark; a shadow policy never marks.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence

import pytest
from factories import NOW, obj

from janitor.decide import selection
from janitor.decide.evidence import (
    Evidence,
    EvidenceWindow,
    GpuEvidence,
    GpuSeries,
    PodKey,
)
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    Finding,
    NamespaceView,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodState,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.plan import plan
from janitor.decide.rails import Rails
from janitor.decide.triggers import crashloop
from janitor.node_report import OomReport, OomScope
from janitor.policy.model import CrashLoop, IdleGpu, Match, Mode, Namespaces, Policy

M = datetime.timedelta(minutes=1)
H = datetime.timedelta(hours=1)
GIB = 2**30
POLICY = Policy("crash", (CrashLoop(restarts=5, window=60 * M),), match=Match(namespaces=Namespaces(("*",))),
                mode=Mode.ENFORCE)
IDLE_GPU = Policy("idle-gpu", (IdleGpu(window=2 * H),), mode=Mode.ENFORCE)
SINGLE = "3 OOM kills in this pod's memory cgroup (3 since it started): single processes were killed"
GROUP = "1 OOM kill in this pod's memory cgroup (1 since it started): the whole container was killed"


def pod(owner: ObjectView, restarts: int, exited_ago: float | None, gpus: int = 1, reason: str = "OOMKilled",
        memory: float | None = 8 * GIB, name: str | None = None) -> PodView:
    return PodView(ObjectRef("Pod", "v1", "team-a", name or f"p{uuid.uuid4().hex[:4]}", str(uuid.uuid4())), "1", {},
                   OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid), "n1", "Running",
                   NOW - 5 * H, gpus, state=PodState(
                       restarts=restarts, last_exit=f"train: {reason}, exit code 137",
                       last_exit_at=NOW - exited_ago * M if exited_ago is not None else None,
                       limits={"memory": memory} if memory else {}))


def observe(pods: Sequence[PodView], objects: Sequence[ObjectView], *,
            oom: Mapping[str, tuple[OomReport, ...]] | None = None, evidence: Evidence | None = None) -> Observation:
    return Observation(NOW, objects=tuple(objects), pods=tuple(pods), namespaces={"team-a": NamespaceView("team-a")},
                       evidence=evidence or Evidence(), oom=dict(oom or {}))


def findings(pods: Sequence[PodView], objects: Sequence[ObjectView],
             oom: Mapping[str, tuple[OomReport, ...]] | None = None) -> list[Finding]:
    observation = observe(pods, objects, oom=oom)
    return crashloop.findings(selection.workloads(observation, Rails()), observation, POLICY, NOW)


def test_a_crash_looping_gpu_job_names_restarts_exit_and_memory_limit() -> None:
    job = obj("train", kind="Job")
    looping = pod(job, 7, 2, gpus=2)
    [found] = findings([looping], [job])
    assert found.state is State.FIRES and found.subject == job.ref and found.gpus == 2
    assert found.trigger is TriggerKind.CRASH_LOOP and found.condition == "crash-looping"
    assert found.why.startswith("crash-looping while holding 2 GPUs: ")
    assert (f"{looping.ref.name}: 7 restarts, last exit train: OOMKilled, exit code 137 at 2026-11-23 11:58Z"
            in found.why)
    assert "memory limit 8.0 GiB" in found.why


@pytest.mark.parametrize(("exit_reason", "memory", "reports", "present", "absent"), [
    pytest.param("Error", 8 * GIB, (OomReport(3, 3, OomScope.PROCESS, SINGLE),),
                 ("OOM: memory limit 8.0 GiB", f"node agent: {SINGLE}", "the container kept running",
                  "singleProcessOOMKill"), ("memory.oom.group",), id="single-processes-status-silent"),
    pytest.param("OOMKilled", 8 * GIB, (OomReport(1, 1, OomScope.CONTAINER, GROUP),),
                 (f"node agent: {GROUP}", "memory.oom.group"), ("the container kept running",), id="whole-container"),
    pytest.param("OOMKilled", 8 * GIB, (OomReport(1, 1, OomScope.CONTAINER, "first"),
                                        OomReport(2, 3, OomScope.PROCESS, "latest")),
                 ("node agent: latest", "the container kept running"), ("node agent: first",),
                 id="latest-words-any-single"),
    pytest.param("Error", 8 * GIB, (OomReport(0, 0, OomScope.UNKNOWN, "OOM kills seen by an older agent"),),
                 ("node agent: OOM kills seen by an older agent", "memory.oom.group"), ("kept running",),
                 id="older-agent-scope-unknown"),
    pytest.param("OOMKilled", 8 * GIB, (), ("OOM: memory limit 8.0 GiB", "memory.oom.group"), ("node agent",),
                 id="status-only"),
    pytest.param("OOMKilled", None, (), ("OOM: no memory limit set",), ("GiB",), id="no-memory-limit"),
    pytest.param("Error", 8 * GIB, (), ("last exit train: Error, exit code 137",), ("OOM", "node agent"),
                 id="no-oom-at-all"),
])
def test_the_oom_part_of_the_why(exit_reason: str, memory: float | None, reports: tuple[OomReport, ...],
                                 present: tuple[str, ...], absent: tuple[str, ...]) -> None:
    job = obj("train", kind="Job")
    looping = pod(job, 7, 2, reason=exit_reason, memory=memory)
    other = pod(obj("other", kind="Job"), 0, None)  # reports about another pod say nothing about this one
    oom = {looping.ref.uid: reports, other.ref.uid: (OomReport(9, 9, OomScope.PROCESS, "not this pod"),)}
    [found] = findings([looping], [job], oom)
    assert found.state is State.FIRES
    for words in present:
        assert words in found.why
    for words in (*absent, "not this pod"):
        assert words not in found.why


@pytest.mark.parametrize(("restarts", "exited_ago", "gpus", "verdict"), [
    pytest.param(5, 2, 1, State.FIRES, id="restarts-at-the-bound"),
    pytest.param(7, 60, 1, State.FIRES, id="last-exit-at-the-window-edge"),
    pytest.param(7, 61, 1, None, id="last-exit-before-the-window"),
    pytest.param(7, 120, 1, None, id="old-crash"),
    pytest.param(4, 2, 1, None, id="too-few-restarts"),
    pytest.param(7, None, 1, None, id="no-exit-recorded"),
    pytest.param(7, 2, 0, None, id="cpu-only-pod"),
])
def test_when_a_single_pod_job_is_crash_looping(restarts: int, exited_ago: float | None, gpus: int,
                                                verdict: State | None) -> None:
    job = obj("train", kind="Job")
    found = findings([pod(job, restarts, exited_ago, gpus=gpus)], [job])
    assert [f.state for f in found] == ([verdict] if verdict else [])


def test_a_healthy_gpu_pod_keeps_the_workload() -> None:
    job = obj("train", kind="Job")
    looping, healthy = pod(job, 7, 2, name="a"), pod(job, 0, None, name="b")
    [found] = findings([looping, healthy], [job])
    assert found.state is State.CLEAR and found.why.startswith("1 of 2 GPU pods crash-looping; not acted on")
    assert {j.pod.name: j.state for j in found.pods} == {"a": State.FIRES, "b": State.CLEAR}


def test_a_pod_whose_owner_cannot_be_read_is_not_judged() -> None:
    job = obj("train", kind="Job")  # not among what was read
    assert findings([pod(job, 7, 2)], []) == []


# -- through a cycle's plan ---------------------------------------------------------------------------------


def busy(pods: Sequence[PodView]) -> Evidence:
    """GPU evidence where every GPU of these pods peaked at 80 % over the idle policy's window."""
    trigger = IDLE_GPU.trigger(IdleGpu)
    assert trigger is not None
    window = EvidenceWindow(str(trigger.signal), trigger.window, datetime.timedelta(seconds=15), NOW)
    series = {PodKey("team-a", p.ref.name): tuple(GpuSeries(str(i), 80.0, 480) for i in range(p.gpus)) for p in pods}
    return Evidence({(str(trigger.signal), trigger.window): GpuEvidence(window, series)})


def test_the_crash_loop_policy_marks_a_workload_whose_gpu_use_is_unknown() -> None:
    job = obj("train", kind="Job")
    looping = pod(job, 7, 2)
    cycle = plan(observe([looping], [job]), [IDLE_GPU, POLICY], SafetyLedger(), NOW)
    by_trigger = {f.trigger: f for f in cycle.findings}
    assert by_trigger[TriggerKind.IDLE_GPU].state is State.UNKNOWN  # no GPU evidence read
    assert by_trigger[TriggerKind.CRASH_LOOP].state is State.FIRES
    [change] = cycle.changes
    assert change.step is Step.MARK and change.policy == "crash" and change.workload == job.ref
    assert str(change.why).startswith("crash-looping: marked, to delete at ")


def test_busy_on_the_gpu_vetoes_the_crash_loop_mark() -> None:
    job = obj("train", kind="Job")
    looping = pod(job, 7, 2)
    cycle = plan(observe([looping], [job], evidence=busy([looping])), [IDLE_GPU, POLICY], SafetyLedger(), NOW)
    by_trigger = {f.trigger: f for f in cycle.findings}
    assert by_trigger[TriggerKind.IDLE_GPU].state is State.CLEAR
    assert by_trigger[TriggerKind.CRASH_LOOP].state is State.FIRES
    assert cycle.changes == () and cycle.actions == ()


def test_a_shadow_crash_loop_policy_never_marks() -> None:
    job = obj("train", kind="Job")
    shadow = Policy("crash", (CrashLoop(restarts=5, window=60 * M),), mode=Mode.SHADOW)
    cycle = plan(observe([pod(job, 7, 2)], [job]), [shadow], SafetyLedger(), NOW)
    [found] = cycle.findings
    assert found.state is State.FIRES and found.mode is Mode.SHADOW
    assert cycle.changes == () and cycle.actions == ()
