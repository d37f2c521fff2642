"""Consent bound to what was consented to, owners who change, and messages and metrics that tell the truth.

Aspects covered:
- a release ("Release now") counts only for the action and the warning it answered, only while
  the workload is still idle and judged, and lapses after `RELEASE_LAPSES_AFTER`, or when the
  action, the owner or the mark changes;
- a new owner (the namespace handed over after the warning) is warned with the full grace before
  anything happens, and is never first told "done";
- an owner that is a channel: its members may keep, only the owner user or an admin may release
  (members too where the daemon is told so);
- the first warning shows the deadline the janitor will keep: delivery + grace when the warning
  goes out late, the owner's keep-until (within the cap) when it was set before the mark;
- a marked Deployment counts once in `janitor_marked_workloads`, not again for its ReplicaSet's copy.
"""

from __future__ import annotations

import datetime
import types
from collections import Counter

from factories import NOW, SCRAPED
from test_decide_lifecycle import ALICE, applied, job, marked, one, policy, t

from janitor import annotations as a
from janitor.annotations import Delivery
from janitor.decide.clicks import ButtonValue, Op, Outcome, Presser, judge
from janitor.decide.lifecycle import Step, delivered
from janitor.decide.model import State
from janitor.decide.owners import Owner, OwnerKind
from janitor.policy.model import Action as PolicyAction

M = datetime.timedelta(minutes=1)
H = datetime.timedelta(hours=1)
DAY = 24 * H
MARKED = NOW - 2 * H
BOB = Owner(OwnerKind.EMAIL, "bob@lab.example")
TEAM = Owner(OwnerKind.CHANNEL, "#team-vision")
OWNER = Presser("U0ALICE1", owner=True, admin=False)


def suspend(**lifecycle: object):
    return policy(action=PolicyAction.SUSPEND, **lifecycle)


def delete(**lifecycle: object):
    return policy(action=PolicyAction.DELETE, **lifecycle)


def warned_of_suspend():
    """Marked two hours ago, warned an hour later: suspend in 20 h."""
    return job(marked(MARKED, NOW + 20 * H, MARKED + H, action="suspend"))


def released(view, presser: Presser = OWNER, owner: Owner = ALICE, at: datetime.datetime = NOW, pol=None):
    verdict = judge(Op.RELEASE, 0, ButtonValue.of(view.ref, MARKED), view, presser, owner, pol or suspend(), at)
    assert verdict.outcome is Outcome.DONE, verdict.said
    return applied(view, verdict.annotations)


def deliver(view, change, at: datetime.datetime, pol) -> object:
    """The workload after `change`'s write and its send's delivery record at `at`."""
    view = applied(view, change.annotations)
    return applied(view, delivered(change, Delivery("D0OWNER", f"{at.timestamp():.6f}"), pol, view.annotations))


# -- a release is bound to what it answered -------------------------------------------------------------


def test_a_release_counts_only_for_the_action_and_the_warning_it_answered() -> None:
    """Released under suspend; the rails held it; the admin switched the policy to delete; the
    janitor warned again ("delete in 24 h"). One cycle after that warning is delivered, the old
    release must not delete at once: the owner consented to a suspend."""
    view = released(warned_of_suspend())
    warn = one(view, pol=delete(), now=NOW + 5 * M)
    assert warn.step is Step.NOTIFY and warn.notice is not None and warn.notice.action == "delete"
    view = deliver(view, warn, NOW + 6 * M, delete())
    after = one(view, pol=delete(), now=NOW + 20 * M)
    assert after.step is not Step.ACT, f"{after.step}: {after.why}"


def test_a_release_acts_only_on_a_workload_still_idle_and_old_enough_to_judge() -> None:
    """Held by the caps, the release must not act on pods restarted since, too young to judge."""
    view = released(warned_of_suspend())
    for state in (State.TOO_YOUNG, State.UNKNOWN):
        change = one(view, state, pol=suspend(), now=NOW + 10 * M)
        assert change.step is not Step.ACT, f"{state}: {change.why}"


def test_a_release_lapses() -> None:
    from janitor.decide.consent import RELEASE_LAPSES_AFTER

    view = released(warned_of_suspend())
    assert one(view, pol=suspend(), now=NOW + 10 * M).step is Step.ACT
    late = one(view, pol=suspend(), now=NOW + RELEASE_LAPSES_AFTER + M)
    assert late.step is not Step.ACT and late.deadline is not None and late.deadline >= NOW + 20 * H


def test_a_release_lapses_when_the_owner_changes() -> None:
    view = released(warned_of_suspend())
    change = one(view, pol=suspend(), now=NOW + 10 * M, owner=BOB)
    assert change.step is not Step.ACT


# -- owners who change ------------------------------------------------------------------------------------


def test_a_new_owner_is_warned_with_the_full_grace_before_anything_happens() -> None:
    """Warned alice; the namespace is handed over to bob; at the deadline bob must get a warning
    with the full grace, not a "done"."""
    pol = delete(warn_before=DAY, remind_every=0 * H)
    mark = one(job(), pol=pol)
    assert mark.step is Step.MARK
    view = deliver(job(), mark, NOW + M, pol)
    later = NOW + DAY + 2 * H
    assert one(view, pol=pol, now=later).step is Step.ACT  # alice was warned: due
    change = one(view, pol=pol, now=later, owner=BOB)
    assert change.step is Step.NOTIFY and change.notice is not None and change.notice.owner == BOB
    assert change.notice.kind is a.NoticeKind.WARNING
    assert change.notice.deadline is not None and change.notice.deadline >= later + pol.lifecycle.grace
    bob_told = deliver(view, change, later + M, pol)
    assert one(bob_told, pol=pol, now=later + 2 * H, owner=BOB).step is not Step.ACT
    assert one(bob_told, pol=pol, now=later + M + DAY, owner=BOB).step is Step.ACT


def test_a_warning_found_on_slack_after_a_crash_counts_for_the_owner_it_was_sent_to() -> None:
    """The janitor sent alice's warning and stopped before recording it; the namespace was handed to
    bob meanwhile. The recovered record must not say bob was warned."""
    pol = delete(warn_before=DAY, remind_every=0 * H)
    mark = one(job(), pol=pol)
    view = applied(job(), mark.annotations)  # the intent is written; its delivery never recorded
    recover = one(view, pol=pol, now=NOW + 10 * M, owner=BOB)
    assert recover.step is Step.RECOVER
    view = applied(view, delivered(recover, Delivery("D0ALICE", f"{(NOW + M).timestamp():.6f}"), pol,
                                   view.annotations))
    change = one(view, pol=pol, now=NOW + DAY + 2 * H, owner=BOB)
    assert change.step is Step.NOTIFY and change.notice is not None and change.notice.owner == BOB


def test_channel_members_may_keep_but_only_the_owner_user_or_an_admin_may_release() -> None:
    view = warned_of_suspend()
    member = Presser("U0CAROL1", owner=False, admin=False, member=True)
    kept = judge(Op.KEEP, 1, ButtonValue.of(view.ref, MARKED), view, member, TEAM, suspend(max_extension=7 * DAY), NOW)
    assert kept.outcome is Outcome.DONE
    refused = judge(Op.RELEASE, 0, ButtonValue.of(view.ref, MARKED), view, member, TEAM, suspend(), NOW)
    assert refused.outcome is Outcome.NOT_ALLOWED and refused.annotations == {}
    allowed = judge(Op.RELEASE, 0, ButtonValue.of(view.ref, MARKED), view, member, TEAM, suspend(), NOW,
                    members_release=True)
    assert allowed.outcome is Outcome.DONE


# -- messages that tell the truth ---------------------------------------------------------------------------


def test_a_late_first_warning_shows_the_deadline_the_janitor_keeps() -> None:
    """Marked three days ago; Slack was down since, so no warning reached anyone. The warning that
    goes out now must not name the mark's deadline, two days past: the janitor keeps the full grace."""
    view = job(marked(NOW - 3 * DAY, NOW - 2 * DAY))
    pol = delete(warn_before=DAY)
    change = one(view, pol=pol)
    assert change.step is Step.NOTIFY and change.notice is not None
    assert change.notice.deadline is not None and change.notice.deadline >= NOW + pol.lifecycle.grace
    intent = a.Intent.parse(str(change.annotations[a.NOTICE]))
    assert intent is not None and intent.warns_of is not None and intent.warns_of.deadline == change.notice.deadline


def test_keep_until_set_before_the_mark_sets_the_first_warnings_deadline() -> None:
    pol = delete(warn_before=DAY, max_extension=7 * DAY)
    for keep, expected in ((NOW + 3 * DAY, NOW + 3 * DAY), (NOW + 30 * DAY, NOW + 7 * DAY), (NOW + 2 * H, NOW + DAY)):
        change = one(job({a.KEEP_UNTIL: t(keep)}), pol=pol)
        assert change.step is Step.MARK and change.notice is not None
        assert change.notice.deadline == expected and change.annotations[a.DEADLINE] == t(expected), t(keep)


# -- metrics that tell the truth --------------------------------------------------------------------------


def test_a_marked_deployment_counts_once_in_the_marked_workloads() -> None:
    """The Deployment controller copies the Deployment's mark onto its ReplicaSet."""
    from test_decide_lifecycle import _running_pod

    from janitor.daemon import record
    from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
    from janitor.decide.model import NamespaceView, Observation, SafetyLedger
    from janitor.decide.plan import plan
    from janitor.telemetry import Telemetry

    deploy = job(marked(NOW - 3 * H, NOW + 20 * H, NOW - 3 * H, uid="uid-nb", action="scale-to-zero"),
                 kind="Deployment", name="nb")
    rs = job(dict(deploy.annotations), kind="ReplicaSet", name="nb-5d4f", owner=deploy)
    pod = _running_pod("nb-5d4f-x1", rs)
    key = PodKey("team-a", pod.ref.name)
    gpu = GpuEvidence(EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, 15 * datetime.timedelta(seconds=1), NOW),
                      {key: (GpuSeries("0", 0.0, 480, quality=SCRAPED),)})
    cpu = CpuEvidence(EvidenceWindow("cpu", 2 * H, M, NOW), {key: CpuUsage(0.01, 120, SCRAPED)})
    observation = Observation(NOW, (deploy, rs), (pod,), {"team-a": NamespaceView("team-a")},
                              evidence=Evidence({("DCGM_FI_DEV_GPU_UTIL", 2 * H): gpu}, {(2 * H, ()): cpu}))
    policies = [policy(action=PolicyAction.SCALE_TO_ZERO)]
    decided = plan(observation, policies, SafetyLedger(), NOW)
    result = types.SimpleNamespace(
        planned=types.SimpleNamespace(policies_reloaded=None, memory=types.SimpleNamespace(policies=policies),
                                      observation=observation, policies=policies),
        plan=decided, results=(), ledger_contended=False, lifecycle=types.SimpleNamespace(sent=(), failed=()),
        queries=(),
        phases=types.SimpleNamespace(observe=0.0, decide=0.0, act=0.0, decide_cpu=0.0), seconds=0.0)
    telemetry = Telemetry()
    record(telemetry, result)  # type: ignore[arg-type]
    marked_count = Counter({s.labels["policy"]: s.value for m in telemetry.registry.collect() for s in m.samples
                            if s.name == "janitor_marked_workloads"})
    assert marked_count == Counter({"idle-gpu": 1})


# -- found by the adversarial read of the change ------------------------------------------------------


def test_a_keep_pressed_after_a_release_wins() -> None:
    """Released; the caps held the action; ten minutes later the owner (or an admin) keeps it for
    three days and is told "Kept until ...": nothing may happen before then."""
    pol = suspend(max_extension=7 * DAY)
    view = released(warned_of_suspend(), pol=pol)
    admin = Presser("U0ADMIN1", owner=False, admin=True)
    keep = judge(Op.KEEP, 3, ButtonValue.of(view.ref, MARKED, "suspend"), view, admin, ALICE, pol, NOW + 10 * M)
    assert keep.outcome is Outcome.DONE
    kept = applied(view, keep.annotations)
    change = one(kept, pol=pol, now=NOW + 20 * M)
    assert change.step is not Step.ACT, change.why
    assert keep.annotations.get(a.RELEASE, "") is None  # the click withdraws the release too


def test_a_warning_sent_again_after_slack_was_down_names_the_deadline_kept() -> None:
    """The warning's send failed with the mark, and Slack was down for three days: the one sent again
    must not name the mark's deadline, two days past."""
    from janitor.decide.lifecycle import resend

    pol = delete(warn_before=DAY, remind_every=0 * H)
    mark = one(job(), pol=pol)
    view = applied(job(), mark.annotations)
    later = NOW + 3 * DAY
    again = resend(one(view, pol=pol, now=later), later)
    assert again.notice is not None and again.notice.deadline is not None
    assert again.notice.deadline >= later + pol.lifecycle.grace
