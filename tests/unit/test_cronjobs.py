"""CronJobs as owners of their Jobs, and acting on a CronJob as stopping what it runs.

Aspects covered:
- with `--cronjob-target job` (the default), the CronJob's `janitor/opt-out`, `janitor/owner` and
  `janitor/keep-until` govern its Jobs: an opted-out CronJob's Jobs are never marked, its owner is
  the one warned (before the namespace's), its keep-until keeps its Jobs (within the cap); a Job
  whose CronJob cannot be read is never acted on;
- with `--cronjob-target cronjob`, suspending a CronJob suspends the Jobs it is running too (the
  action names them, the same plan dry-run prints); a suspended CronJob is never marked again for
  the run it left behind: a Job still running under it is judged on its own.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence

from factories import NOW, SCRAPED

from janitor import annotations as a
from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    ActionType,
    ContainerView,
    NamespaceView,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodView,
    SafetyLedger,
)
from janitor.decide.owners import OwnerKind
from janitor.decide.plan import CyclePlan, PlanSettings, plan
from janitor.decide.selection import CronJobMode
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import IdleGpu, Lifecycle, Mode, Policy

H = datetime.timedelta(hours=1)
DAY = 24 * H
NS = "team-a"


def view(kind: str, name: str, notes: Mapping[str, str] | None = None, owner: ObjectView | None = None,
         suspended: bool = False) -> ObjectView:
    return ObjectView(ObjectRef(kind, "batch/v1", NS, name, f"uid-{name}"), "7", NOW - 3 * DAY, dict(notes or {}),
                      controller=OwnerRef(owner.ref.kind, "batch/v1", owner.ref.name, owner.ref.uid) if owner else None,
                      **({"suspended": True} if suspended else {}))


def pod(name: str, job: ObjectView) -> PodView:
    return PodView(ObjectRef("Pod", "v1", NS, name, str(uuid.uuid4())), "1", {},
                   OwnerRef("Job", "batch/v1", job.ref.name, job.ref.uid), "gpu-node-1", "Running", NOW - 5 * H, 1,
                   containers=(ContainerView("main", 4.0),))


def idle(pods: Sequence[PodView]) -> Evidence:
    gpu = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, datetime.timedelta(seconds=15), NOW)
    cpu = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)
    return Evidence({("DCGM_FI_DEV_GPU_UTIL", 2 * H): GpuEvidence(gpu, {PodKey(NS, p.ref.name): (
        GpuSeries("0", 0.0, 480, quality=SCRAPED),) for p in pods})},
        {(2 * H, ()): CpuEvidence(cpu, {PodKey(NS, p.ref.name): CpuUsage(0.01, 120, SCRAPED) for p in pods})})


def policy(action: PolicyAction = PolicyAction.DELETE, **lifecycle: object) -> Policy:
    return Policy("idle-gpu", (IdleGpu(),), mode=Mode.ENFORCE,
                  lifecycle=Lifecycle(action=action, **lifecycle))  # type: ignore[arg-type]


def decide(objects: Sequence[ObjectView], pods: Sequence[PodView], pol: Policy,
           mode: CronJobMode = CronJobMode.JOB, namespace_owner: str = "alice@lab.example") -> CyclePlan:
    observation = Observation(NOW, tuple(objects), tuple(pods),
                              {NS: NamespaceView(NS, {}, {a.OWNER: namespace_owner})}, evidence=idle(pods))
    return plan(observation, [pol], SafetyLedger(), NOW, settings=PlanSettings(cronjob_mode=mode))


def steps(decided: CyclePlan) -> dict[str, Step]:
    return {c.workload.name: c.step for c in decided.changes}


def marked(uid: str, *, action: str, deadline: datetime.datetime) -> dict[str, str]:
    at = NOW - 30 * H
    return {a.POLICY: "idle-gpu", a.DEADLINE: a.format_expires(deadline), a.MARKED_AT: a.format_expires(at),
            a.REASON: "idle", a.MARKED_UID: uid, a.WARNED_AT: a.format_expires(at),
            a.WARNED_VIA: f"owner D0ALICE/{at.timestamp():.6f}", a.WARNED_OF: f"{action} {a.format_expires(deadline)}"}


# -- --cronjob-target job: the CronJob governs its Jobs -----------------------------------------------------


def test_an_opted_out_cronjobs_jobs_are_never_marked() -> None:
    cron = view("CronJob", "nightly", {a.OPT_OUT: "true"})
    job = view("Job", "nightly-2901", owner=cron)
    decided = decide([cron, job], [pod("nightly-2901-x", job)], policy())
    assert Step.MARK not in steps(decided).values(), steps(decided)


def test_a_cronjobs_owner_is_warned_about_its_jobs() -> None:
    cron = view("CronJob", "nightly", {a.OWNER: "bob@lab.example"})
    job = view("Job", "nightly-2901", owner=cron)
    [mark] = [c for c in decide([cron, job], [pod("nightly-2901-x", job)], policy()).changes if c.step is Step.MARK]
    assert mark.notice is not None and mark.notice.owner.kind is OwnerKind.EMAIL
    assert mark.notice.owner.value == "bob@lab.example"


def test_a_cronjobs_keep_until_keeps_its_jobs() -> None:
    cron = view("CronJob", "nightly", {a.KEEP_UNTIL: a.format_expires(NOW + 3 * DAY)})
    job = view("Job", "nightly-2901", owner=cron)
    decided = decide([cron, job], [pod("nightly-2901-x", job)], policy(warn_before=DAY, max_extension=7 * DAY))
    [mark] = [c for c in decided.changes if c.step is Step.MARK]
    assert mark.annotations[a.DEADLINE] == a.format_expires(NOW + 3 * DAY)
    due = view("Job", "nightly-2901", marked("uid-nightly-2901", action="delete", deadline=NOW - H), owner=cron)
    decided = decide([cron, due], [pod("nightly-2901-x", due)], policy(warn_before=DAY, max_extension=7 * DAY))
    assert not [x for x in decided.actions if x.rule == "lifecycle"], steps(decided)


def test_a_job_whose_cronjob_cannot_be_read_is_never_acted_on() -> None:
    cron = view("CronJob", "nightly")
    due = view("Job", "nightly-2901", marked("uid-nightly-2901", action="delete", deadline=NOW - H), owner=cron)
    decided = decide([due], [pod("nightly-2901-x", due)], policy())
    assert not [x for x in decided.actions if x.rule == "lifecycle"]
    job = view("Job", "nightly-2901", owner=cron)
    assert Step.MARK not in steps(decide([job], [pod("nightly-2901-x", job)], policy())).values()


# -- --cronjob-target cronjob: acting on it stops what it runs -----------------------------------------------


def test_suspending_a_cronjob_suspends_the_jobs_it_is_running() -> None:
    cron = view("CronJob", "nightly", marked("uid-nightly", action="suspend", deadline=NOW - H))
    job = view("Job", "nightly-2901", owner=cron)
    decided = decide([cron, job], [pod("nightly-2901-x", job)], policy(PolicyAction.SUSPEND),
                     mode=CronJobMode.CRONJOB)
    [act] = [x for x in decided.actions if x.rule == "lifecycle"]
    assert act.type is ActionType.SUSPEND and act.target == cron.ref
    assert act.also == (job.ref,)


def test_a_suspended_cronjob_is_not_marked_again_for_the_run_it_left() -> None:
    """The CronJob was suspended (and its mark removed); one of its Jobs could not be and still runs idle."""
    cron = view("CronJob", "nightly", suspended=True)
    job = view("Job", "nightly-2901", owner=cron)
    decided = decide([cron, job], [pod("nightly-2901-x", job)], policy(PolicyAction.SUSPEND),
                     mode=CronJobMode.CRONJOB)
    assert "nightly" not in steps(decided), steps(decided)
    assert steps(decided).get("nightly-2901") is Step.MARK  # the run left behind, on its own


# -- found by the adversarial read of the change ------------------------------------------------------


def test_suspending_a_cronjob_leaves_its_opted_out_or_kept_jobs_alone_and_says_how_to_resume() -> None:
    cron = view("CronJob", "nightly", marked("uid-nightly", action="suspend", deadline=NOW - H))
    manual = view("Job", "nightly-manual", {a.OPT_OUT: "true"}, owner=cron)
    kept = view("Job", "nightly-kept", {a.KEEP_UNTIL: a.format_expires(NOW + 3 * DAY)}, owner=cron)
    run = view("Job", "nightly-2901", owner=cron)
    pods = [pod("nightly-manual-x", manual), pod("nightly-kept-x", kept), pod("nightly-2901-x", run)]
    decided = decide([cron, manual, kept, run], pods, policy(PolicyAction.SUSPEND), mode=CronJobMode.CRONJOB)
    [act] = [x for x in decided.actions if x.rule == "lifecycle"]
    assert act.also == (run.ref,)
    done = decided.change_for(act)
    assert done is not None and done.notice is not None
    assert "patch job/nightly-2901" in done.notice.resume_command and "cronjob/nightly" in done.notice.resume_command


def test_the_plain_path_never_deletes_a_job_whose_cronjob_it_cannot_read() -> None:
    cron = view("CronJob", "nightly", {a.OPT_OUT: "true"})
    job = view("Job", "nightly-2901", {a.TTL: "1h"}, owner=cron)
    assert decide([cron, job], [], policy()).actions == ()
    assert decide([job], [], policy()).actions == ()


def test_the_cancelled_note_of_a_cronjobs_run_goes_to_the_cronjobs_owner() -> None:
    """Bob (the CronJob's owner) was warned of its Job; the run finished, so the mark is no longer
    covered: bob hears it, not the namespace's owner."""
    cron = view("CronJob", "nightly", {a.OWNER: "bob@lab.example"})
    done = view("Job", "nightly-2901", marked("uid-nightly-2901", action="delete", deadline=NOW + H), owner=cron)
    [unmark] = [c for c in decide([cron, done], [], policy()).changes if c.workload.name == "nightly-2901"]
    assert unmark.step is Step.UNMARK and unmark.notice is not None
    assert unmark.notice.owner.value == "bob@lab.example"
