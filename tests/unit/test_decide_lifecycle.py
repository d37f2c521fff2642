"""The idle lifecycle, as a pure function of annotations, findings and time.

Aspects covered:
- an idle workload is marked with a deadline warnBefore ahead and a warning intent in the same write;
- a busy one is never marked; a marked one that is busy again is unmarked and its owner told;
- nothing is acted on before a warning reached the owner (admin-only delivery does not count
  unless the policy says so), while a send is in flight, or while the evidence is unknown;
- the effective deadline is the later of the mark and delivery + grace, and it is written back;
- keep-until delays the action, never past marked-at + maxExtension; a malformed one keeps to the cap;
- a user's own janitor/expires is never marked over; an action that does not fit the kind never marks;
- reminders every remindEvery; warnings paced per owner; new marks capped per cycle, owner, namespace;
- marks of a policy that is gone or in shadow mode are removed; a mark that does not parse is restarted.
"""

from __future__ import annotations

import datetime

import pytest
from factories import NOW, ago, obj

from janitor import annotations as a
from janitor.decide.idle import Idleness
from janitor.decide.lifecycle import (
    LifecycleSettings,
    MarkCaps,
    Step,
    delivered,
    plan_lifecycle,
    read_mark,
    resend,
)
from janitor.decide.model import ActionType, ObjectView
from janitor.decide.notices import Delivery, NoticeKind
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.shadow import IdleFinding
from janitor.policy.model import Action, Lifecycle, Mode, Policy, IdleGpu

H = datetime.timedelta(hours=1)
ALICE = Owner(OwnerKind.EMAIL, "alice@lab.example")


def policy(name: str = "idle-gpu", mode: Mode = Mode.ENFORCE, **lifecycle) -> Policy:
    return Policy(name, (IdleGpu(),), mode=mode, lifecycle=Lifecycle(**lifecycle))


def job(notes: dict[str, str] | None = None, name: str = "train", kind: str = "Job", ns: str = "team-a") -> ObjectView:
    return obj(name, kind=kind, namespace=ns, annotations=notes or {})


def finding(view: ObjectView, idleness: Idleness = Idleness.IDLE, pol: Policy | None = None,
            owner: Owner = ALICE) -> IdleFinding:
    pol = pol or policy()
    return IdleFinding(pol.name, "", pol.mode, "idleGpu", view.ref, idleness,
                       "all 1 pods idle (GPU 0 peak 0 over 2:00:00)", (), 1, 2.0, owner=owner)


def t(when: datetime.datetime) -> str:
    return a.format_expires(when)


def marked(marked_at: datetime.datetime, deadline: datetime.datetime, warned_at: datetime.datetime | None = None,
           via: str = "owner D0ALICE/{}", **extra: str) -> dict[str, str]:
    notes = {a.POLICY: "idle-gpu", a.EXPIRES: t(deadline), a.MARKED_AT: t(marked_at), a.REASON: "idle"}
    if warned_at is not None:
        notes |= {a.WARNED_AT: t(warned_at), a.WARNED_VIA: via.format(warned_at.timestamp())}
    return notes | extra


def one(view: ObjectView, idleness: Idleness = Idleness.IDLE, pol: Policy | None = None,
        settings: LifecycleSettings = LifecycleSettings(), now: datetime.datetime = NOW):
    pol = pol or policy()
    changes = plan_lifecycle([finding(view, idleness, pol)], {view.ref.uid: view}, [pol], now, settings).changes
    assert len(changes) == 1, changes
    return changes[0]


def test_idle_workload_is_marked_with_a_warning_intent_in_the_same_write() -> None:
    change = one(job(), pol=policy(warn_before=24 * H))
    assert change.step is Step.MARK
    assert change.annotations[a.EXPIRES] == t(NOW + 24 * H)
    assert change.annotations[a.POLICY] == "idle-gpu" and "GPU 0 peak 0" in change.annotations[a.REASON]
    assert change.annotations[a.NOTICE].startswith("warning ")
    assert change.notice is not None and change.notice.kind is NoticeKind.WARNING
    assert change.notice.deadline == NOW + 24 * H
    assert "janitor/keep-until=" in change.notice.keep_command and "-n team-a annotate job/train" in change.notice.keep_command


@pytest.mark.parametrize("idleness", [Idleness.BUSY, Idleness.UNKNOWN, Idleness.PARTIAL, Idleness.TOO_YOUNG])
def test_not_idle_is_never_marked(idleness: Idleness) -> None:
    view = job()
    assert plan_lifecycle([finding(view, idleness)], {view.ref.uid: view}, [policy()], NOW).changes == ()


def test_shadow_policy_never_marks() -> None:
    view, pol = job(), policy(mode=Mode.SHADOW)
    assert plan_lifecycle([finding(view, pol=pol)], {view.ref.uid: view}, [pol], NOW).changes == ()


def test_users_own_expires_is_never_marked_over() -> None:
    change = one(job({a.EXPIRES: "2030-01-01"}))
    assert change.step is Step.WAIT and change.annotations == {} and "user's own" in change.why


def test_action_that_does_not_fit_the_kind_never_marks() -> None:
    change = one(job(kind="Job"), pol=policy(action=Action.SCALE_TO_ZERO))
    assert change.step is Step.WAIT and "does not apply" in change.why


def test_busy_again_is_unmarked_and_the_owner_told() -> None:
    view = job(marked(ago(hours=2), NOW + H, ago(hours=2)) | {a.KEEP_UNTIL: "2030-01-01"})
    change = one(view, Idleness.BUSY)
    assert change.step is Step.UNMARK
    assert set(change.annotations) == {a.POLICY, a.EXPIRES, a.MARKED_AT, a.REASON, a.WARNED_AT, a.WARNED_VIA}
    assert all(v is None for v in change.annotations.values())  # keep-until is the owner's: untouched
    assert change.notice is not None and change.notice.kind is NoticeKind.CANCELLED


@pytest.mark.parametrize(("notes", "step"), [
    pytest.param(marked(ago(hours=30), ago(hours=6)), Step.NOTIFY, id="never-warned"),
    pytest.param(marked(ago(hours=30), ago(hours=6), ago(hours=30), via="admins C0ADMINS/{}"), Step.NOTIFY,
                 id="admins-only"),
    pytest.param(marked(ago(hours=30), ago(hours=6), ago(hours=30),
                        **{a.NOTICE: f"reminder abc-1 {t(ago(hours=1))}"}), Step.RECOVER, id="send-in-flight"),
])
def test_never_acted_on_without_a_delivered_warning(notes: dict[str, str], step: Step) -> None:
    change = one(job(notes))
    assert change.step is step and change.action is None


def test_admin_delivery_counts_when_the_policy_says_so() -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), via="admins C0ADMINS/{}")
    change = one(job(notes), pol=policy(admin_fallback_counts=True))
    assert change.step is Step.ACT


def test_unknown_evidence_keeps_the_mark_and_never_acts() -> None:
    change = one(job(marked(ago(hours=30), ago(hours=6), ago(hours=30))), Idleness.UNKNOWN)
    assert change.step is Step.WAIT and change.annotations == {}


def test_due_and_warned_is_acted_on_with_the_policy_action() -> None:
    view = job(marked(ago(hours=30), ago(hours=6), ago(hours=30)), kind="Deployment")
    change = one(view, pol=policy(action=Action.SCALE_TO_ZERO))
    assert change.step is Step.ACT and change.action is not None
    assert change.action.type is ActionType.SCALE_TO_ZERO and change.action.resource_version == view.resource_version
    assert "deadline" in change.action.why and "GPU 0 peak 0" in change.action.why


def test_late_delivery_moves_the_deadline_and_writes_it_back() -> None:
    # Marked 30 h ago with a 24 h notice, but Slack delivered the warning only 2 h ago.
    change = one(job(marked(ago(hours=30), ago(hours=6), ago(hours=2))), pol=policy(warn_before=24 * H))
    assert change.step is Step.EXTEND and change.annotations == {a.EXPIRES: t(ago(hours=2) + 24 * H)}
    settled = one(job(marked(ago(hours=30), ago(hours=2) + 24 * H, ago(hours=2))), pol=policy(warn_before=24 * H))
    assert settled.step is Step.WAIT


def test_delivery_record_sets_the_effective_deadline() -> None:
    change = one(job(), pol=policy(warn_before=H))
    late = Delivery("D0ALICE", f"{(NOW + 3 * H).timestamp():.6f}")
    record = delivered(change, late, policy(warn_before=H))
    assert record[a.EXPIRES] == t(NOW + 4 * H) and record[a.NOTICE] is None
    assert record[a.WARNED_AT] == t(NOW + 3 * H) and read_mark({**change.annotations, **record}) is not None


@pytest.mark.parametrize(("keep", "expected"), [
    pytest.param(NOW + 2 * H, NOW + 2 * H, id="within-cap"),
    pytest.param(NOW + 30 * 24 * H, ago(hours=30) + 7 * 24 * H, id="capped"),
    pytest.param("next tuesday", ago(hours=30) + 7 * 24 * H, id="malformed-keeps-to-cap"),
])
def test_keep_until_delays_but_not_past_the_cap(keep, expected) -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30)) | {a.KEEP_UNTIL: keep if isinstance(keep, str) else t(keep)}
    change = one(job(notes), pol=policy(max_extension=7 * 24 * H, remind_every=0 * H))
    assert change.step is Step.EXTEND and change.annotations[a.EXPIRES] == t(expected)
    # Once written, it waits until then and acts after.
    notes[a.EXPIRES] = t(expected)
    assert one(job(notes), pol=policy(max_extension=7 * 24 * H, remind_every=0 * H)).step is Step.WAIT
    assert one(job(notes), pol=policy(max_extension=7 * 24 * H, remind_every=0 * H), now=expected).step is Step.ACT


def test_reminder_every_remind_every() -> None:
    notes = marked(ago(hours=9), NOW + 15 * H, ago(hours=9))
    change = one(job(notes), pol=policy(remind_every=8 * H))
    assert change.step is Step.NOTIFY and change.notice is not None and change.notice.kind is NoticeKind.REMINDER
    notes[a.REMINDED_AT] = t(ago(hours=1))
    assert one(job(notes), pol=policy(remind_every=8 * H)).step is Step.WAIT


def test_warnings_are_paced_per_owner() -> None:
    warned = job(marked(ago(hours=2), NOW + 22 * H, ago(minutes=10)), name="old")
    fresh = job(name="new")
    pol = policy()
    plan = plan_lifecycle([finding(warned), finding(fresh)], {v.ref.uid: v for v in (warned, fresh)}, [pol], NOW,
                          LifecycleSettings(pace=H))
    new = next(c for c in plan.changes if c.workload == fresh.ref)
    assert new.step is Step.MARK and new.notice is None and a.NOTICE not in new.annotations


def test_new_marks_are_capped_per_owner_and_cycle() -> None:
    views = [job(name=f"w{i:03}") for i in range(200)]
    pol = policy()
    plan = plan_lifecycle([finding(v) for v in views], {v.ref.uid: v for v in views}, [pol], NOW,
                          LifecycleSettings(caps=MarkCaps(per_cycle=50, per_owner=10, per_namespace=20)))
    steps = [c.step for c in plan.changes]
    assert steps.count(Step.MARK) == 10 and steps.count(Step.HELD) == 190


def test_marks_nobody_enforces_are_removed() -> None:
    view = job(marked(ago(hours=2), NOW + H, ago(hours=2)))
    gone = plan_lifecycle([], {view.ref.uid: view}, [], NOW).changes
    assert [c.step for c in gone] == [Step.UNMARK]
    shadow = policy(mode=Mode.SHADOW)
    still = plan_lifecycle([finding(view, pol=shadow)], {view.ref.uid: view}, [shadow], NOW).changes
    assert [c.step for c in still] == [Step.UNMARK]


def test_mark_that_does_not_parse_is_restarted() -> None:
    change = one(job(marked(ago(hours=2), NOW + H) | {a.EXPIRES: "soon"}))
    assert change.step is Step.UNMARK and "does not parse" in change.why


def test_resend_gets_this_cycles_intent() -> None:
    notes = marked(ago(hours=30), ago(hours=6), None, **{a.NOTICE: f"warning abc-1 {t(ago(hours=1))}"})
    change = one(job(notes))
    assert change.step is Step.RECOVER and change.intent is not None and change.intent.id == "abc-1"
    again = resend(change, NOW)
    assert again.step is Step.NOTIFY and again.annotations[a.NOTICE].startswith("warning ")
    assert "abc-1" not in again.annotations[a.NOTICE]


def test_all_new_marks_of_one_owner_in_one_cycle_share_the_digest() -> None:
    views = [job(name=f"w{i}") for i in range(3)]
    plan = plan_lifecycle([finding(v) for v in views], {v.ref.uid: v for v in views}, [policy()], NOW,
                          LifecycleSettings(pace=H))
    intents = {c.annotations[a.NOTICE] for c in plan.changes}
    assert [c.step for c in plan.changes] == [Step.MARK] * 3 and len(intents) == 1
    assert all(c.notice is not None for c in plan.changes)


def test_friday_evening_warning_is_not_acted_on_over_the_weekend() -> None:
    from janitor.decide.model import NamespaceView
    from janitor.policy.model import WorkingHours

    friday = datetime.datetime(2026, 11, 27, 18, tzinfo=datetime.timezone.utc)  # 19:00 in Berlin
    pol = policy(warn_before=H, remind_every=0 * H,
                 working_hours=WorkingHours("Europe/Berlin", grace=4 * H))
    notes = marked(friday, friday + H, friday)
    view = job(notes)
    saturday = friday + 20 * H
    changes = plan_lifecycle([finding(view, pol=pol)], {view.ref.uid: view}, [pol], saturday).changes
    assert changes[0].step is Step.EXTEND
    assert changes[0].annotations[a.EXPIRES] == "2026-11-30T12:00:00Z"  # Monday 13:00 in Berlin
    # A namespace in New York counts its own working day: Friday 13:00 there, 4 h later is 17:00.
    ny = {"team-a": NamespaceView("team-a", annotations={a.TIME_ZONE: "America/New_York"})}
    changes = plan_lifecycle([finding(view, pol=pol)], {view.ref.uid: view}, [pol], saturday, namespaces=ny).changes
    assert changes[0].step is Step.EXTEND and changes[0].annotations[a.EXPIRES] == "2026-11-27T22:00:00Z"


def test_a_replicasets_copy_of_its_deployments_mark_is_left_alone() -> None:
    deployment = job(marked(ago(hours=2), NOW + H, ago(hours=2)), kind="Deployment", name="nb")
    copy = obj("nb-5d4f", kind="ReplicaSet", namespace="team-a", owner=deployment,
               annotations=dict(deployment.annotations))
    pol = policy()
    objects = {v.ref.uid: v for v in (deployment, copy)}
    changes = plan_lifecycle([finding(deployment)], objects, [pol], NOW).changes
    assert [c.workload.kind for c in changes] == ["Deployment"]


def test_owner_hears_when_a_policy_no_longer_covers_their_warned_workload() -> None:
    view = job(marked(ago(hours=2), NOW + H, ago(hours=2)) | {"janitor/owner": "bob@lab.example"})
    [change] = plan_lifecycle([], {view.ref.uid: view}, [], NOW).changes
    assert change.step is Step.UNMARK and change.notice is not None
    assert change.notice.kind is NoticeKind.CANCELLED and change.notice.owner.value == "bob@lab.example"
    unwarned = job(marked(ago(hours=2), NOW + H) | {"janitor/owner": "bob@lab.example"})
    [quiet] = plan_lifecycle([], {unwarned.ref.uid: unwarned}, [], NOW).changes
    assert quiet.step is Step.UNMARK and quiet.notice is None  # never told, nothing to take back


def test_admin_only_warning_waits_for_an_owner_without_repeating() -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), via="admins C0ADMINS/{}")
    nobody = Owner(OwnerKind.UNKNOWN)
    view = job(notes)
    [change] = plan_lifecycle([finding(view, owner=nobody)], {view.ref.uid: view}, [policy()], NOW).changes
    assert change.step is Step.WAIT and change.notice is None and "only the admins" in change.why


def test_report_policy_warns_and_never_acts() -> None:
    pol = policy(action=Action.REPORT)
    assert one(job(), pol=pol).step is Step.MARK
    change = one(job(marked(ago(hours=30), ago(hours=6), ago(hours=30))), pol=pol)
    assert change.step is Step.WAIT and change.action is None and "only reports" in change.why
