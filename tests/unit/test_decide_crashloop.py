"""The crash-loop trigger.

Aspects covered:
- a GPU workload triggers when every GPU pod restarted `restarts` times, the last within the
  window; a healthy GPU pod beside it keeps it (busy); an old crash or a CPU pod is not a finding;
- the exit reason, the memory limit and the node agent's OOM words are in the why;
- a workload found idle and crash-looping is decided by the trigger that fired (or marked it).
"""

from __future__ import annotations

import datetime
import uuid

from factories import NOW, obj

from janitor.decide.crashloop import crash_findings
from janitor.decide.idle import Idleness
from janitor.decide.lifecycle import Step, plan_lifecycle
from janitor.decide.model import ObjectRef, OwnerRef, PodState, PodView
from janitor.decide.shadow import IdleFinding
from janitor.policy.model import CrashLoop, Match, Mode, Namespaces, Policy

M = datetime.timedelta(minutes=1)
POLICY = Policy("crash", (CrashLoop(restarts=5, window=60 * M),), match=Match(namespaces=Namespaces(("*",))),
                mode=Mode.ENFORCE)


def pod(owner, restarts: int, exited_ago: float | None, gpus: int = 1, reason: str = "OOMKilled") -> PodView:
    return PodView(ObjectRef("Pod", "v1", "team-a", f"p{uuid.uuid4().hex[:4]}", str(uuid.uuid4())), "1", {},
                   OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid), "n1", "Running",
                   NOW - 90 * M, gpus, state=PodState(
                       restarts=restarts, last_exit=f"train: {reason}, exit code 137",
                       last_exit_at=NOW - exited_ago * M if exited_ago is not None else None,
                       limits={"memory": 8 * 2**30}))


def test_crash_looping_gpu_job_with_oom_details() -> None:
    job = obj("train", kind="Job")
    looping = pod(job, 7, 2)
    events = {looping.ref.uid: ["3 OOM kills in this pod's memory cgroup: single processes were killed"]}
    [found] = crash_findings([looping], {}, {job.ref.uid: job}, [POLICY], NOW, events)
    assert found.idleness is Idleness.IDLE and found.condition == "crash-looping" and found.trigger == "crashLoop"
    assert "7 restarts" in found.why and "OOMKilled, exit code 137" in found.why
    assert "memory limit 8.0 GiB" in found.why and "singleProcessOOMKill" in found.why


def test_a_healthy_gpu_pod_keeps_it_and_old_or_cpu_crashes_are_no_finding() -> None:
    job = obj("train", kind="Job")
    [busy] = crash_findings([pod(job, 7, 2), pod(job, 0, None)], {}, {job.ref.uid: job}, [POLICY], NOW)
    assert busy.idleness is Idleness.BUSY and "1 of 2 GPU pods" in busy.why
    assert crash_findings([pod(job, 7, 120)], {}, {job.ref.uid: job}, [POLICY], NOW) == []
    assert crash_findings([pod(job, 3, 2)], {}, {job.ref.uid: job}, [POLICY], NOW) == []
    assert crash_findings([pod(job, 7, 2, gpus=0)], {}, {job.ref.uid: job}, [POLICY], NOW) == []


def test_the_trigger_that_fired_decides_a_workload_found_twice() -> None:
    job = obj("train", kind="Job")
    [crash] = crash_findings([pod(job, 7, 2)], {}, {job.ref.uid: job}, [POLICY], NOW)
    idle = IdleFinding("idle", "", Mode.ENFORCE, "idleGpu", job.ref, Idleness.UNKNOWN, "too few samples", (), 1, 0.0)
    [change] = plan_lifecycle([idle, crash], {job.ref.uid: job}, [POLICY], NOW).changes
    assert change.step is Step.MARK and change.policy == "crash"
