"""The crash-loop trigger: GPU workloads holding GPUs while doing nothing but restarting.

Aspects covered:
- a GPU workload fires when every GPU pod has a container that restarted `restarts` times and
  whose last run began and ended within the window (both bounds included); a healthy GPU pod
  beside it keeps it (clear); an old crash, no recorded exit, a CPU-only pod or an unreadable
  owner chain is no finding; a recent restart that is no crash loop is a clear finding saying why;
- restarts are judged per container, never summed; sidecars are not judged (native ones, init
  containers with restartPolicy Always, and those the policy lists), and the why names them; a
  container that ran for days and failed once is no loop however many restarts it had before; an
  init container that completed is no loop; one crash-looping is; a run that never started counts
  as a run of no length;
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
from factories import NOW, SCRAPED, obj

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
    ContainerKind,
    ContainerStatus,
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
from janitor.decide.triggers import crashloop, registry
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


def container(name: str = "train", restarts: int = 7, exited_ago: float | None = 2, ran: float = 1,
              reason: str = "OOMKilled", kind: ContainerKind = ContainerKind.APP, state: str = "waiting",
              now: str = "CrashLoopBackOff") -> ContainerStatus:
    """A container that restarted `restarts` times, its last run `ran` minutes long, ending `exited_ago` minutes ago."""
    ended = NOW - exited_ago * M if exited_ago is not None else None
    return ContainerStatus(name, kind, restarts, state, now, ended if state == "running" else None,
                           0 if state == "terminated" else None,
                           f"{reason}, exit code 137" if ended else "", ended - ran * M if ended else None, ended)


def pod(owner: ObjectView, restarts: int, exited_ago: float | None, gpus: int = 1, reason: str = "OOMKilled",
        memory: float | None = 8 * GIB, name: str | None = None, ran: float = 1,
        others: Sequence[ContainerStatus] = ()) -> PodView:
    return PodView(ObjectRef("Pod", "v1", "team-a", name or f"p{uuid.uuid4().hex[:4]}", str(uuid.uuid4())), "1", {},
                   OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid), "n1", "Running",
                   NOW - 5 * H, gpus, state=PodState(
                       containers=(*others, container("train", restarts, exited_ago, ran, reason)),
                       limits={"memory": memory} if memory else {}))


def observe(pods: Sequence[PodView], objects: Sequence[ObjectView], *,
            oom: Mapping[str, tuple[OomReport, ...]] | None = None, evidence: Evidence | None = None) -> Observation:
    return Observation(NOW, objects=tuple(objects), pods=tuple(pods), namespaces={"team-a": NamespaceView("team-a")},
                       evidence=evidence or Evidence(), oom=dict(oom or {}))


def findings(pods: Sequence[PodView], objects: Sequence[ObjectView],
             oom: Mapping[str, tuple[OomReport, ...]] | None = None, policy: Policy = POLICY) -> list[Finding]:
    observation = observe(pods, objects, oom=oom)
    return crashloop.findings(selection.workloads(observation, Rails()), observation, policy, NOW)


def test_a_crash_looping_gpu_job_names_restarts_exit_and_memory_limit() -> None:
    job = obj("train", kind="Job")
    looping = pod(job, 7, 2, gpus=2)
    [found] = findings([looping], [job])
    assert found.state is State.FIRES and found.subject == job.ref and found.gpus == 2
    assert found.trigger is TriggerKind.CRASH_LOOP and registry.condition(found) == "crash-looping"
    assert found.why.startswith("crash-looping while holding 2 GPUs: ")
    assert (f"{looping.ref.name}: container train: 7 restarts, last exit OOMKilled, exit code 137 at "
            "2026-11-23 11:58Z after a 1m00s run, now waiting (CrashLoopBackOff)" in found.why)
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
    pytest.param("Error", 8 * GIB, (), ("last exit Error, exit code 137",), ("OOM", "node agent"),
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


@pytest.mark.parametrize(("restarts", "exited_ago", "ran", "gpus", "verdict", "words"), [
    pytest.param(5, 2, 1, 1, State.FIRES, "5 restarts", id="restarts-at-the-bound"),
    pytest.param(7, 0, 60, 1, State.FIRES, "after a 1h00m run", id="last-run-began-at-the-window-edge"),
    pytest.param(7, 0, 61, 1, State.CLEAR, "its last run lasted 1h01m (it started before the 1h00m window)",
                 id="last-run-began-before-the-window"),
    pytest.param(7, 60, 0, 1, State.FIRES, "7 restarts", id="last-exit-at-the-window-edge"),
    pytest.param(7, 61, 0, 1, None, "", id="last-exit-before-the-window"),
    pytest.param(7, 120, 1, 1, None, "", id="old-crash"),
    pytest.param(4, 2, 1, 1, State.CLEAR, "container train: 4 restarts, fewer than 5", id="too-few-restarts"),
    pytest.param(7, None, 1, 1, None, "", id="no-exit-recorded"),
    pytest.param(7, 2, 1, 0, None, "", id="cpu-only-pod"),
])
def test_when_a_single_pod_job_is_crash_looping(restarts: int, exited_ago: float | None, ran: float, gpus: int,
                                                verdict: State | None, words: str) -> None:
    job = obj("train", kind="Job")
    found = findings([pod(job, restarts, exited_ago, gpus=gpus, ran=ran)], [job])
    assert [f.state for f in found] == ([verdict] if verdict else [])
    assert all(words in f.why for f in found)


SIDECAR_POLICY = Policy("crash", (CrashLoop(restarts=5, window=60 * M, ignore_containers=("istio-proxy",)),),
                        match=Match(namespaces=Namespaces(("*",))), mode=Mode.ENFORCE)


@pytest.mark.parametrize(("sidecar", "policy"), [
    pytest.param(container("istio-proxy", 9, 2), SIDECAR_POLICY, id="listed-in-ignoreContainers"),
    pytest.param(container("proxy", 9, 2, kind=ContainerKind.SIDECAR), POLICY, id="native-sidecar"),
])
def test_a_restarting_sidecar_does_not_flag_a_healthy_trainer(sidecar: ContainerStatus, policy: Policy) -> None:
    job = obj("train", kind="Job")
    healthy = pod(job, 0, None, name="a", others=(sidecar,))
    [found] = findings([healthy], [job], policy=policy)
    assert found.state is State.CLEAR and found.why.startswith("restarted, but none of its 1 GPU pods is crash-looping")
    assert f"a: not crash-looping: container train: 0 restarts, fewer than 5; sidecar restarts not counted: " \
           f"{sidecar.name} (9 restarts)" in found.why


def test_a_listed_app_container_named_like_a_sidecar_is_ignored_only_where_listed() -> None:
    job = obj("train", kind="Job")
    flapping = pod(job, 0, None, name="a", others=(container("istio-proxy", 9, 2),))
    [found] = findings([flapping], [job])  # the policy without ignoreContainers judges it like any container
    assert found.state is State.FIRES and "container istio-proxy: 9 restarts" in found.why


def test_restarts_are_counted_per_container_never_summed() -> None:
    job = obj("train", kind="Job")
    split = pod(job, 3, 2, name="a", others=(container("loader", 3, 2),))
    [found] = findings([split], [job])
    assert found.state is State.CLEAR and "fewer than 5" in found.why


def test_a_trainer_that_ran_for_days_and_failed_once_is_not_looping() -> None:
    # Seven restarts last week (a node kept failing), then three days of training, one failure
    # two minutes ago, running again: its lifetime count says nothing about the last hour.
    job = obj("train", kind="Job")
    [found] = findings([pod(job, 7, 2, ran=3 * 24 * 60)], [job])
    assert found.state is State.CLEAR
    assert "its last run lasted 3d0h (it started before the 1h00m window): a failure, not a loop" in found.why


def test_init_containers_are_judged_until_they_complete() -> None:
    job = obj("train", kind="Job")
    done = container("fetch", 6, 30, kind=ContainerKind.INIT, state="terminated", now="Completed")
    [found] = findings([pod(job, 0, None, name="a", others=(done,))], [job])
    assert found.state is State.CLEAR and "container fetch: 6 restarts, then completed" in found.why
    looping = container("fetch", 6, 1, kind=ContainerKind.INIT)
    [found] = findings([pod(job, 0, None, name="a", others=(looping,))], [job])
    assert found.state is State.FIRES and "a: container fetch: 6 restarts" in found.why


def test_a_container_running_again_fires_and_says_so() -> None:
    job = obj("train", kind="Job")
    again = container("train", 6, 3, state="running", now="")
    again_pod = pod(job, 0, None, name="a")
    again_pod = PodView(again_pod.ref, "1", {}, again_pod.controller, "n1", "Running", NOW - H, 1,
                        state=PodState(containers=(again,)))
    [found] = findings([again_pod], [job])
    assert found.state is State.FIRES and "running again since 2026-11-23 11:57Z" in found.why


def running_again(ran: datetime.timedelta, running_for: datetime.timedelta, *,
                  window: datetime.timedelta = 24 * H) -> Finding:
    """A container that crashed 5 times (its last run lasting `ran`) and has run for `running_for` since."""
    job = obj("train", kind="Job")
    since = NOW - running_for
    again = ContainerStatus("train", ContainerKind.APP, 5, "running", "", since, None, "Error, exit code 1",
                            since - ran, since)
    pod = PodView(ObjectRef("Pod", "v1", "team-a", "a", str(uuid.uuid4())), "1", {},
                  OwnerRef("Job", "batch/v1", "train", job.ref.uid), "n1", "Running", NOW - 10 * H, 1,
                  state=PodState(containers=(again,)))
    policy = Policy("crash", (CrashLoop(restarts=5, window=window),), mode=Mode.ENFORCE)
    [found] = findings([pod], [job], policy=policy)
    return found


def test_a_crash_loop_that_recovered_ends() -> None:
    """Five quick crashes, then nine hours of healthy running: no loop, though every crash lies in
    the 24 h window (acted on otherwise, as the window is longer than warnBefore)."""
    found = running_again(30 * datetime.timedelta(seconds=1), 9 * H)
    assert found.state is State.CLEAR
    assert "running for 9h00m since, longer than its last run (30s) and 10m00s: recovered" in found.why


@pytest.mark.parametrize("ran,running_for", [(1 * M, 8 * M), (20 * M, 12 * M)], ids=["under-10m", "under-last-run"])
def test_a_run_no_longer_than_the_loops_runs_is_still_a_loop(ran: datetime.timedelta,
                                                             running_for: datetime.timedelta) -> None:
    """The kubelet forgets a container's crash back-off after 10 minutes of running; a run shorter
    than that, or than the loop's last run, may end the way the others did."""
    assert running_again(ran, running_for).state is State.FIRES


def test_a_run_that_never_started_counts_as_no_run_at_all() -> None:
    # containerd reports a container whose command does not exist as started at the Unix epoch.
    job = obj("train", kind="Job")
    never = ContainerStatus("train", ContainerKind.APP, 8, "waiting", "CrashLoopBackOff",
                            last_exit="StartError, exit code 128", last_exit_at=NOW - 2 * M,
                            last_started=datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc))
    stuck = pod(job, 0, None, name="a")
    stuck = PodView(stuck.ref, "1", {}, stuck.controller, "n1", "Running", NOW - H, 1,
                    state=PodState(containers=(never,)))
    [found] = findings([stuck], [job])
    assert found.state is State.FIRES and "StartError, exit code 128 at 2026-11-23 11:58Z after a 0s run" in found.why


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
    series = {PodKey("team-a", p.ref.name): tuple(GpuSeries(str(i), 80.0, 480, quality=SCRAPED) for i in range(p.gpus))
              for p in pods}
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
