"""reservedQuota: a Job or JobSet between two pods or two attempts is not what kueue#14811 leaves (Workloads
read from Kueue's own JSON)."""

from __future__ import annotations

import dataclasses
import datetime

from factories import NOW
from test_reserved_quota import NS, OWNER, H, kjob, quota, verdicts
from test_reserved_quota_paths import SUSPEND, read_workload

from janitor.decide.lifecycle import Step
from janitor.decide.model import ObjectRef, ObjectView, OwnerRef, State

ADMITTED_3H = [("QuotaReserved", "True", 3 * H, "QuotaReserved"), ("Admitted", "True", 3 * H, "Admitted")]


# A running Job (admitted 3 h ago, never evicted, NOT suspended) whose pod object is gone a moment ago:
# its GPU node died and PodGC removed the pod, or the scheduler preempted it, or `kubectl drain`
# evicted it. The Job controller creates the replacement after its failure backoff (10 s doubling, capped
# at minutes). There is no Failed pod object left for `_ended` to read, so the gap fix does not apply,
# and nothing else tells this Job from kueue#14811 (there the Job is suspended and Evicted is True).
def test_a_running_job_between_a_deleted_pod_and_its_replacement_is_not_marked() -> None:
    job = kjob(queued=read_workload(ADMITTED_3H), suspended=False)
    assert not job.suspended and not job.queued.evicted  # type: ignore[union-attr]
    decision = quota([job], [], policies=[SUSPEND])
    state, reason = verdicts(decision)["train"]
    marks = [c for c in decision.changes if c.step is Step.MARK]
    assert state is not State.FIRES and not marks, f"{state}: {reason}; marked and warned: {marks}"


# A JobSet restart (failurePolicy.maxRestarts): the JobSet controller deletes every child Job with its
# pods, then creates them again; between the last old pod going and the first new one being created
# the JobSet has child Jobs (not suspended) and no pod at all.
def test_a_jobset_between_restart_attempts_is_not_marked() -> None:
    queued = read_workload(ADMITTED_3H)
    jobset = ObjectView(ObjectRef("JobSet", "jobset.x-k8s.io/v1alpha2", NS, "train", "uid-train"), "10",
                        NOW - 5 * H, dict(OWNER), queued=queued)
    child = ObjectView(ObjectRef("Job", "batch/v1", NS, "train-workers-0", "uid-child"), "3",
                       NOW - datetime.timedelta(seconds=5), {},
                       controller=OwnerRef("JobSet", "jobset.x-k8s.io/v1alpha2", "train", "uid-train"))
    decision = quota([jobset, child], [], policies=[SUSPEND])
    state, reason = verdicts(decision)["train"]
    marks = [c for c in decision.changes if c.step is Step.MARK]
    assert state is not State.FIRES and not marks, f"{state}: {reason}; marked and warned: {marks}"


# Control: what kueue#14811 leaves (Evicted True, the Job suspended, no pods) still fires.
def test_control_the_kueue_14811_state_still_fires() -> None:
    stuck = read_workload([*ADMITTED_3H, ("Evicted", "True", 3 * H, "PodsReadyTimeout")])
    job = dataclasses.replace(kjob(queued=stuck), suspended=True)
    assert verdicts(quota([job], [], policies=[SUSPEND]))["train"][0] is State.FIRES


# `--kinds` replaces the defaults: an admin listing `jobsets.jobset.x-k8s.io/v1alpha2` without `Job`
# gets JobSet pods whose chain (Pod -> Job -> JobSet) cannot be read. Running ones make the JobSet
# unknown (strays), but finished ones are simply not its pods: a JobSet whose worker failed a minute
# ago (restart on its way) is judged podless, from its reservation 3 h ago.
def test_a_jobsets_pods_under_unread_child_jobs_still_count_for_the_gap() -> None:
    from test_reserved_quota import pod_of

    queued = read_workload(ADMITTED_3H)
    jobset = ObjectView(ObjectRef("JobSet", "jobset.x-k8s.io/v1alpha2", NS, "train", "uid-train"), "10",
                        NOW - 5 * H, dict(OWNER), queued=queued)
    child = OwnerRef("Job", "batch/v1", "train-workers-0", "uid-child")  # not listed: Job not in --kinds
    failed = dataclasses.replace(pod_of(jobset, "Failed", controller=child),
                                 started=NOW - datetime.timedelta(minutes=1))
    decision = quota([jobset], [failed], policies=[SUSPEND])
    state, reason = verdicts(decision)["train"]
    assert state is not State.FIRES, f"{state}: {reason}"
