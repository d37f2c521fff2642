"""The lifecycle, as a pure function of annotations, findings and time (tables of one cycle each).

Aspects covered:
- an idle workload is marked (deadline warnBefore ahead, janitor/marked-uid) with a warning intent,
  naming the action and deadline it warns of, in the same write;
- a workload not idle is never marked; a marked one that is busy again is unmarked and its owner told;
- nothing is acted on before a warning reached the owner (admin-only delivery does not count
  unless the policy says so), while a send is in flight, or while the evidence is unknown;
- the deadline in force is the latest of the mark, the warned-of deadline and delivery + grace
  (in working hours, in the namespace's own zone); it is written back and never moves earlier;
- keep-until delays the action, never past marked-at + maxExtension and never to an earlier time;
  a malformed one keeps to the cap;
- a user's own janitor/expires is never marked over; an action that does not fit the kind never marks;
- reminders every remindEvery; warnings paced per owner; new marks capped per cycle, owner, namespace;
- a warning naming another action than the policy's current one is warned of again before acting;
- marks of a policy that is gone or in shadow mode are removed (a warned owner hears so);
- a mark that does not parse, or a warning record without janitor/warned-of, is removed to start again;
- copies: a mark whose janitor/marked-uid is another object's is dropped silently and never acted
  on, and left alone (no write) while its Deployment still carries its own mark;
- the delivery record (warned-at, warned-via, warned-of, expires) and a resend under a new intent;
- every mark carries its reason as data (janitor/why: policy, trigger, action, code, plain words,
  the trigger's numbers, marked-at, deadline, keep cap), within 2 KB, kept in step when the deadline
  moves or another action is warned of, and removed with the mark.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence

import pytest
from factories import NOW, SCRAPED, ago, obj

from janitor import annotations as a
from janitor.annotations import Delivery, Intent, NoticeKind, WarnedOf
from janitor.decide.evidence import (
    CpuEvidence,
    CpuUsage,
    Evidence,
    EvidenceWindow,
    GpuEvidence,
    GpuSeries,
    PodKey,
)
from janitor.decide.lifecycle import (
    Change,
    LifecycleSettings,
    MarkCaps,
    Step,
    delivered,
    effective_deadline,
    intent_id,
    plan_lifecycle,
    resend,
)
from janitor.decide.model import (
    ActionType,
    ContainerView,
    Finding,
    NamespaceView,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.plain import plain
from janitor.decide.plan import plan
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import Workload
from janitor.decide.why_notes import trigger_facts
from janitor.policy.model import (
    Action,
    CrashLoop,
    GpuSignal,
    IdleCpu,
    IdleGpu,
    Lifecycle,
    Mode,
    Pending,
    Policy,
    WorkingHours,
)
from janitor.why_note import WhyNote

M = datetime.timedelta(minutes=1)
H = datetime.timedelta(hours=1)
DAY = 24 * H
NS = "team-a"
ALICE = Owner(OwnerKind.EMAIL, "alice@lab.example")
DEFAULTS = LifecycleSettings()
REASONS: Mapping[State, Reason] = {
    State.FIRES: why(Code.GPU_IDLE, detail="GPU 0 peak 0", signal="DCGM_FI_DEV_GPU_UTIL", threshold=5.0,
                     window="2:00:00"),
    State.CLEAR: why(Code.GPU_BUSY, detail="GPU 0 peak 97"),
    State.PARTIAL: why(Code.GPU_PARTIAL, idle=1, total=2, detail="GPU 1 peak 0", signal="DCGM_FI_DEV_GPU_UTIL",
                       threshold=5.0, window="2:00:00"),
    State.UNKNOWN: why(Code.NO_EVIDENCE_READ, signal="GPU"),
    State.TOO_YOUNG: why(Code.TOO_YOUNG, running="0:30:00", needed="2:00:00"),
}


def policy(name: str = "idle-gpu", mode: Mode = Mode.ENFORCE, **lifecycle: object) -> Policy:
    return Policy(name, (IdleGpu(),), mode=mode, lifecycle=Lifecycle(**lifecycle))  # type: ignore[arg-type]


def job(notes: Mapping[str, str] | None = None, *, name: str = "train", kind: str = "Job",
        owner: ObjectView | None = None) -> ObjectView:
    """A workload with a stable uid, `uid-<name>`, so a mark can name it."""
    return obj(name, kind=kind, namespace=NS, annotations=dict(notes or {}), uid=f"uid-{name}", owner=owner)


def t(when: datetime.datetime) -> str:
    return a.format_expires(when)


def marked(marked_at: datetime.datetime, deadline: datetime.datetime, warned_at: datetime.datetime | None = None,
           *, uid: str = "uid-train", via: str = "owner D0ALICE/{}", action: str = "delete",
           warned_deadline: datetime.datetime | None = None) -> dict[str, str]:
    """The annotations the janitor writes when it marks object `uid` and its warning is delivered."""
    notes = {a.POLICY: "idle-gpu", a.DEADLINE: t(deadline), a.MARKED_AT: t(marked_at), a.REASON: "idle",
             a.MARKED_UID: uid}
    if warned_at is not None:
        notes |= {a.WARNED_AT: t(warned_at), a.WARNED_VIA: via.format(f"{warned_at.timestamp():.6f}"),
                  a.WARNED_OF: f"{action} {t(warned_deadline or deadline)}"}
    return notes


def finding(view: ObjectView, state: State = State.FIRES, pol: Policy | None = None, owner: Owner = ALICE) -> Finding:
    pol = pol or policy()
    return Finding(TriggerKind.IDLE_GPU, pol.name, pol.mode, view.ref, state, REASONS[state], gpus=1,
                   reclaim_gpu_hours=2.0, owner=owner)


def workload(view: ObjectView, namespace: NamespaceView | None = None) -> Workload:
    return Workload(view.ref, view, (), namespace or NamespaceView(NS), view.ref.kind, owner=ALICE)


def cycle(views: Sequence[ObjectView], findings: Sequence[Finding], policies: Sequence[Policy], *,
          now: datetime.datetime = NOW, settings: LifecycleSettings = DEFAULTS,
          namespace: NamespaceView | None = None) -> tuple[Change, ...]:
    subjects = {f.subject.uid for f in findings}
    workloads = [workload(v, namespace) for v in views if v.ref.uid in subjects]
    return plan_lifecycle(workloads, views, findings, policies, now, settings)


def one(view: ObjectView, state: State = State.FIRES, pol: Policy | None = None, *,
        settings: LifecycleSettings = DEFAULTS, now: datetime.datetime = NOW,
        owner: Owner = ALICE) -> Change:
    pol = pol or policy()
    changes = cycle([view], [finding(view, state, pol, owner)], [pol], now=now, settings=settings)
    assert len(changes) == 1, changes
    return changes[0]


def applied(view: ObjectView, patch: Mapping[str, str | None]) -> ObjectView:
    """The object after a merge-patch of its annotations (None removes a key)."""
    notes = {**view.annotations, **patch}
    return job({k: v for k, v in notes.items() if v is not None}, name=view.ref.name, kind=view.ref.kind)


# -- marking ------------------------------------------------------------------------------------------

def test_idle_workload_is_marked_with_a_warning_intent_in_the_same_write() -> None:
    change = one(job(), pol=policy(warn_before=DAY))
    assert change.step is Step.MARK
    assert change.annotations[a.DEADLINE] == t(NOW + DAY)
    assert change.annotations[a.POLICY] == "idle-gpu" and "GPU 0 peak 0" in str(change.annotations[a.REASON])
    assert change.annotations[a.MARKED_AT] == t(NOW) and change.annotations[a.MARKED_UID] == "uid-train"
    intent = Intent.parse(str(change.annotations[a.NOTICE]))
    assert intent is not None and intent.kind is NoticeKind.WARNING and intent.id == intent_id(ALICE, NOW)
    assert intent.warns_of == WarnedOf("delete", NOW + DAY)
    assert change.notice is not None and change.notice.kind is NoticeKind.WARNING
    assert change.notice.deadline == NOW + DAY and change.notice.action == "delete"
    assert "janitor/keep-until=" in change.notice.keep_command
    assert "-n team-a annotate job/train" in change.notice.keep_command
    # What was written reads back as the janitor's own mark on this object, not yet warned.
    mark = a.read_mark({k: v for k, v in change.annotations.items() if v is not None})
    assert mark is not None and mark.problems == () and mark.belongs_to("uid-train") and not mark.warned


@pytest.mark.parametrize("state", [State.CLEAR, State.UNKNOWN, State.PARTIAL, State.TOO_YOUNG],
                         ids=lambda s: str(s))
def test_not_idle_is_never_marked(state: State) -> None:
    view = job()
    assert cycle([view], [finding(view, state)], [policy()]) == ()


def test_shadow_policy_never_marks() -> None:
    view, pol = job(), policy(mode=Mode.SHADOW)
    assert cycle([view], [finding(view, pol=pol)], [pol]) == ()


def test_users_own_expires_is_never_marked_over() -> None:
    change = one(job({a.EXPIRES: "2030-01-01"}))
    assert change.step is Step.WAIT and change.annotations == {} and change.notice is None
    assert change.why.code is Code.USERS_EXPIRES


def test_action_that_does_not_fit_the_kind_never_marks() -> None:
    change = one(job(kind="Job"), pol=policy(action=Action.SCALE_TO_ZERO))
    assert change.step is Step.WAIT and change.annotations == {} and change.notice is None
    assert change.why.code is Code.ACTION_DOES_NOT_FIT


def test_busy_again_is_unmarked_and_the_owner_told() -> None:
    view = job(marked(ago(hours=2), NOW + H, ago(hours=2)) | {a.KEEP_UNTIL: "2030-01-01"})
    change = one(view, State.CLEAR)
    assert change.step is Step.UNMARK and change.why.code is Code.IN_USE
    assert set(change.annotations) == {a.POLICY, a.DEADLINE, a.MARKED_AT, a.REASON, a.MARKED_UID, a.WARNED_AT,
                                       a.WARNED_VIA, a.WARNED_OF}
    assert all(v is None for v in change.annotations.values())  # keep-until is the owner's: untouched
    assert change.notice is not None and change.notice.kind is NoticeKind.CANCELLED and change.notice.owner == ALICE


# -- no action without a delivered warning ----------------------------------------------------------------

@pytest.mark.parametrize(("notes", "step"), [
    pytest.param(marked(ago(hours=30), ago(hours=6)), Step.NOTIFY, id="never-warned"),
    pytest.param(marked(ago(hours=30), ago(hours=6), ago(hours=30), via="admins C0ADMINS/{}"), Step.NOTIFY,
                 id="admins-only"),
    pytest.param(marked(ago(hours=30), ago(hours=6), ago(hours=30))
                 | {a.NOTICE: f"reminder abc-1 {t(ago(hours=1))}"}, Step.RECOVER, id="send-in-flight"),
])
def test_never_acted_on_without_a_delivered_warning(notes: dict[str, str], step: Step) -> None:
    change = one(job(notes))
    assert change.step is step and change.action is None


def test_admin_delivery_counts_when_the_policy_says_so() -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), via="admins C0ADMINS/{}")
    change = one(job(notes), pol=policy(admin_fallback_counts=True))
    assert change.step is Step.ACT and change.action is not None


def test_admin_only_warning_waits_for_an_owner_without_repeating() -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), via="admins C0ADMINS/{}")
    change = one(job(notes), owner=Owner(OwnerKind.UNKNOWN))
    assert change.step is Step.WAIT and change.notice is None and change.annotations == {}
    assert change.why.code is Code.ADMINS_ONLY


def test_a_warning_again_after_only_the_admins_were_reached_is_for_the_owner_only() -> None:
    """The owner's e-mail has no Slack user: the admins heard once; the owner is tried again (they
    may join Slack), but the admin channel must not hear about the same workload every hour."""
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), via="admins C0ADMINS/{}")
    change = one(job(notes))
    assert change.step is Step.NOTIFY and change.notice is not None and change.notice.admins_told
    first = one(job(marked(ago(hours=30), ago(hours=6))))
    assert first.notice is not None and not first.notice.admins_told


@pytest.mark.parametrize("state", [State.UNKNOWN, State.TOO_YOUNG], ids=lambda s: str(s))
def test_unknown_evidence_keeps_the_mark_and_never_acts(state: State) -> None:
    change = one(job(marked(ago(hours=30), ago(hours=6), ago(hours=30))), state)
    assert change.step is Step.WAIT and change.annotations == {} and change.action is None


def test_due_and_warned_is_acted_on_with_the_policy_action() -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-nb", action="scale-to-zero")
    view = job(notes, kind="Deployment", name="nb")
    change = one(view, pol=policy(action=Action.SCALE_TO_ZERO))
    assert change.step is Step.ACT and change.action is not None and change.annotations == {}
    assert change.action.type is ActionType.SCALE_TO_ZERO and change.action.resource_version == view.resource_version
    assert change.action.policy == "idle-gpu" and change.action.trigger is TriggerKind.IDLE_GPU
    assert change.action.target == view.ref and change.action.why.code is Code.RECLAIM
    assert "deadline" in str(change.action.why) and "GPU 0 peak 0" in str(change.action.why)
    assert change.notice is not None and change.notice.kind is NoticeKind.DONE  # sent once it is done
    assert "--replicas=1" in change.notice.resume_command


def test_report_policy_warns_and_never_acts() -> None:
    pol = policy(action=Action.REPORT)
    assert one(job(), pol=pol).step is Step.MARK
    change = one(job(marked(ago(hours=30), ago(hours=6), ago(hours=30), action="report")), pol=pol)
    assert change.step is Step.WAIT and change.action is None and change.why.code is Code.REPORT_ONLY


def test_a_changed_action_is_warned_of_again_before_acting() -> None:
    """Warned of a delete; the admin changed the policy to scale-to-zero since. Due, but the owner
    was never told of scale-to-zero: a new warning naming it goes out, and nothing is acted on."""
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-nb", action="delete")
    change = one(job(notes, kind="Deployment", name="nb"), pol=policy(action=Action.SCALE_TO_ZERO, warn_before=DAY))
    assert change.step is Step.NOTIFY and change.action is None
    assert change.why.code is Code.WARN_AGAIN_ACTION
    assert change.notice is not None and change.notice.kind is NoticeKind.WARNING
    assert change.notice.action == "scale-to-zero" and change.notice.deadline == NOW + DAY
    intent = Intent.parse(str(change.annotations[a.NOTICE]))
    assert intent is not None and intent.warns_of == WarnedOf("scale-to-zero", NOW + DAY)


# -- the deadline in force ------------------------------------------------------------------------------

def test_late_delivery_moves_the_deadline_and_writes_it_back() -> None:
    # Marked 30 h ago with a 24 h notice, but Slack delivered the warning only 2 h ago.
    change = one(job(marked(ago(hours=30), ago(hours=6), ago(hours=2))), pol=policy(warn_before=DAY))
    assert change.step is Step.EXTEND and change.annotations == {a.DEADLINE: t(ago(hours=2) + DAY)}
    assert change.action is None
    settled = one(job(marked(ago(hours=30), ago(hours=2) + DAY, ago(hours=2), warned_deadline=ago(hours=6))),
                  pol=policy(warn_before=DAY))
    assert settled.step is Step.WAIT and settled.deadline == ago(hours=2) + DAY


def test_an_earlier_janitor_expires_never_undercuts_the_deadline_the_warning_named() -> None:
    """Someone edited janitor/expires to a past time: the owner was told NOW + 5 h, so that holds."""
    notes = marked(ago(hours=30), ago(hours=1), ago(hours=30), warned_deadline=NOW + 5 * H)
    change = one(job(notes), pol=policy(warn_before=DAY))
    assert change.step is Step.EXTEND and change.annotations == {a.DEADLINE: t(NOW + 5 * H)} and change.action is None


def test_delivery_record_sets_the_deadline_in_force() -> None:
    change = one(job(), pol=policy(warn_before=H))
    late = Delivery("D0ALICE", f"{(NOW + 3 * H).timestamp():.6f}")
    record = delivered(change, late, policy(warn_before=H))
    assert record == {a.NOTICE: None, a.WARNED_AT: t(NOW + 3 * H), a.WARNED_VIA: str(late),
                      a.WARNED_OF: f"delete {t(NOW + 4 * H)}", a.WARNED_TO: ALICE.key, a.DEADLINE: t(NOW + 4 * H),
                      a.WHY: why_note(change.annotations).with_changes(deadline=NOW + 4 * H).encode()}
    after = applied(applied(job(), change.annotations), record)
    mark = a.read_mark(after.annotations)
    assert mark is not None and mark.problems == () and mark.warned and mark.intent is None
    assert mark.warned_of == WarnedOf("delete", NOW + 4 * H)
    # The next cycles wait for the deadline the owner was given, then act on it.
    assert one(after, pol=policy(warn_before=H, remind_every=0 * H), now=NOW + 3 * H + 30 * M).step is Step.WAIT
    assert one(after, pol=policy(warn_before=H, remind_every=0 * H), now=NOW + 4 * H).step is Step.ACT


def test_a_reminders_delivery_records_only_when_it_was_sent() -> None:
    notes = marked(ago(hours=9), NOW + 15 * H, ago(hours=9))
    change = one(job(notes), pol=policy(remind_every=8 * H))
    record = delivered(change, Delivery("D0ALICE", f"{NOW.timestamp():.6f}"), policy(remind_every=8 * H))
    assert record == {a.NOTICE: None, a.REMINDED_AT: t(NOW)}


@pytest.mark.parametrize(("keep", "expected"), [
    pytest.param(NOW + 2 * H, NOW + 2 * H, id="within-cap"),
    pytest.param(NOW + 30 * DAY, ago(hours=30) + 7 * DAY, id="capped"),
    pytest.param("next tuesday", ago(hours=30) + 7 * DAY, id="malformed-keeps-to-cap"),
])
def test_keep_until_delays_but_not_past_the_cap(keep: datetime.datetime | str, expected: datetime.datetime) -> None:
    pol = policy(max_extension=7 * DAY, remind_every=0 * H)
    keep_until = keep if isinstance(keep, str) else t(keep)
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30)) | {a.KEEP_UNTIL: keep_until}
    change = one(job(notes), pol=pol)
    assert change.step is Step.EXTEND and change.annotations == {a.DEADLINE: t(expected)}
    # Once written, it waits until then and acts after.
    notes[a.DEADLINE] = t(expected)
    assert one(job(notes), pol=pol).step is Step.WAIT
    assert one(job(notes), pol=pol, now=expected).step is Step.ACT


@pytest.mark.parametrize(("keep", "cap"), [
    pytest.param(NOW + 72 * H, DAY, id="cap-already-past"),  # marked 48 h ago: the cap was 24 h ago
    pytest.param(NOW + 30 * M, 7 * DAY, id="keep-before-the-deadline"),
    pytest.param(ago(hours=5), 7 * DAY, id="keep-in-the-past"),
])
def test_keep_until_never_moves_the_deadline_earlier(keep: datetime.datetime, cap: datetime.timedelta) -> None:
    """Marked 48 h ago, the warning delivered late (23 h ago, 24 h grace): due in an hour. Asking
    for time, however it is capped, never gets the workload reclaimed sooner."""
    pol = policy(max_extension=cap, warn_before=DAY, remind_every=0 * H)
    notes = marked(ago(hours=48), NOW + H, ago(hours=23)) | {a.KEEP_UNTIL: t(keep)}
    change = one(job(notes), pol=pol)
    assert change.step is Step.WAIT and change.action is None and change.annotations == {}
    assert change.deadline == NOW + H
    mark = a.read_mark(notes)
    assert mark is not None
    assert effective_deadline(mark, pol, notes[a.KEEP_UNTIL])[0] == NOW + H
    assert one(job(notes), pol=pol, now=NOW + H).step is Step.ACT


def test_friday_evening_warning_is_not_acted_on_over_the_weekend() -> None:
    friday = datetime.datetime(2026, 11, 27, 18, tzinfo=datetime.UTC)  # 19:00 in Berlin
    pol = policy(warn_before=H, remind_every=0 * H, working_hours=WorkingHours("Europe/Berlin", grace=4 * H))
    view = job(marked(friday, friday + H, friday))
    saturday = friday + 20 * H
    [change] = cycle([view], [finding(view, pol=pol)], [pol], now=saturday)
    assert change.step is Step.EXTEND and change.annotations == {a.DEADLINE: "2026-11-30T12:00:00Z"}  # Mon 13:00
    # A namespace in New York counts its own working day: Friday 13:00 there, 4 h later is 17:00.
    ny = NamespaceView(NS, annotations={a.TIME_ZONE: "America/New_York"})
    [change] = cycle([view], [finding(view, pol=pol)], [pol], now=saturday, namespace=ny)
    assert change.step is Step.EXTEND and change.annotations == {a.DEADLINE: "2026-11-27T22:00:00Z"}
    assert change.time_zone == "America/New_York"


# -- messages: reminders, pace, caps ----------------------------------------------------------------------

def test_reminder_every_remind_every() -> None:
    notes = marked(ago(hours=9), NOW + 15 * H, ago(hours=9))
    change = one(job(notes), pol=policy(remind_every=8 * H))
    assert change.step is Step.NOTIFY and change.notice is not None and change.notice.kind is NoticeKind.REMINDER
    intent = Intent.parse(str(change.annotations[a.NOTICE]))
    assert intent is not None and intent.kind is NoticeKind.REMINDER and intent.warns_of is None
    notes[a.REMINDED_AT] = t(ago(hours=1))
    assert one(job(notes), pol=policy(remind_every=8 * H)).step is Step.WAIT


def test_warnings_are_paced_per_owner() -> None:
    warned = job(marked(ago(hours=2), NOW + 22 * H, ago(minutes=10), uid="uid-old"), name="old")
    fresh = job(name="new")
    pol = policy()
    changes = cycle([warned, fresh], [finding(warned), finding(fresh)], [pol], settings=LifecycleSettings(pace=H))
    new = next(c for c in changes if c.workload == fresh.ref)
    assert new.step is Step.MARK and new.notice is None and a.NOTICE not in new.annotations
    assert a.MARKED_UID in new.annotations  # marked all the same: the warning follows at the owner's pace


def test_all_new_marks_of_one_owner_in_one_cycle_share_the_digest() -> None:
    views = [job(name=f"w{i}") for i in range(3)]
    changes = cycle(views, [finding(v) for v in views], [policy()], settings=LifecycleSettings(pace=H))
    intents = {c.annotations[a.NOTICE] for c in changes}
    assert [c.step for c in changes] == [Step.MARK] * 3 and len(intents) == 1
    assert all(c.notice is not None for c in changes)


@pytest.mark.parametrize(("owners", "namespaces", "marks"), [
    pytest.param(1, 1, 10, id="per-owner"),
    pytest.param(200, 1, 20, id="per-namespace"),
    pytest.param(200, 200, 50, id="per-cycle"),
])
def test_new_marks_are_capped(owners: int, namespaces: int, marks: int) -> None:
    views = [obj(f"w{i:03}", kind="Job", namespace=f"ns-{i % namespaces}", uid=f"uid-{i}") for i in range(200)]
    found = [finding(v, owner=Owner(OwnerKind.EMAIL, f"u{i % owners}@lab.example")) for i, v in enumerate(views)]
    changes = plan_lifecycle([], views, found, [policy()], NOW,
                             LifecycleSettings(caps=MarkCaps(per_cycle=50, per_owner=10, per_namespace=20)))
    steps = [c.step for c in changes]
    assert steps.count(Step.MARK) == marks and steps.count(Step.HELD) == 200 - marks
    assert all(c.annotations == {} and c.notice is None for c in changes if c.step is Step.HELD)


# -- marks to remove ------------------------------------------------------------------------------------

def test_marks_nobody_enforces_are_removed() -> None:
    view = job(marked(ago(hours=2), NOW + H, ago(hours=2)))
    gone = cycle([view], [], [])
    assert [c.step for c in gone] == [Step.UNMARK] and gone[0].why.code is Code.NO_LONGER_COVERED
    shadow = policy(mode=Mode.SHADOW)
    still = cycle([view], [finding(view, pol=shadow)], [shadow])
    assert [c.step for c in still] == [Step.UNMARK] and still[0].why.code is Code.NO_LONGER_COVERED
    assert still[0].notice is not None and still[0].notice.kind is NoticeKind.CANCELLED  # it was warned


@pytest.mark.parametrize(("broken", "problem"), [
    pytest.param({a.DEADLINE: "soon"}, "janitor/deadline='soon'", id="expires-does-not-parse"),
    pytest.param({a.MARKED_UID: ""}, "janitor/marked-uid missing", id="no-marked-uid"),
    pytest.param({a.WARNED_VIA: "somewhere"}, "janitor/warned-via='somewhere'", id="warned-via-does-not-parse"),
    pytest.param({a.NOTICE: "warning"}, "janitor/notice='warning'", id="intent-does-not-parse"),
])
def test_mark_that_does_not_parse_is_restarted(broken: dict[str, str], problem: str) -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30)) | broken
    change = one(job(notes))
    assert change.step is Step.UNMARK and change.action is None and change.why.code is Code.MARK_BROKEN
    assert problem in str(change.why)
    assert set(change.annotations) == set(notes) and all(v is None for v in change.annotations.values())


def test_a_warning_record_without_warned_of_is_a_broken_mark() -> None:
    """Warned-at and warned-via without what the warning said: what the owner was told is unknown,
    so the due workload is not acted on; the mark goes, to start again with a new warning."""
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30))
    del notes[a.WARNED_OF]
    change = one(job(notes))
    assert change.step is Step.UNMARK and change.action is None and change.why.code is Code.MARK_BROKEN
    assert "warning record incomplete" in str(change.why)
    assert change.annotations == {k: None for k in notes}


# -- copies of a mark on other objects ----------------------------------------------------------------

@pytest.mark.parametrize("found", [True, False], ids=["idle-and-due", "no-findings"])
def test_a_mark_written_on_another_object_is_dropped_silently(found: bool) -> None:
    """A Job applied again from saved YAML after the marked one was deleted: a new uid carrying the
    old Job's mark and delivered warning, long due. Never acted on, nobody told, the copy removed."""
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-of-the-deleted-job")
    view = job(notes)
    [change] = cycle([view], [finding(view)] if found else [], [policy()])
    assert change.step is Step.DROP_COPY and change.action is None and change.notice is None
    assert change.why.code is Code.COPY_REMOVED
    assert change.annotations == {k: None for k in notes}


def test_a_replicasets_copy_of_its_deployments_mark_is_left_alone() -> None:
    """The Deployment controller copied the Deployment's mark onto its ReplicaSet and would copy it
    again: the copy is neither acted on nor written, and the Deployment's own mark decides."""
    deployment = job(marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-nb", action="scale-to-zero"),
                     kind="Deployment", name="nb")
    copy = job(dict(deployment.annotations), kind="ReplicaSet", name="nb-5d4f", owner=deployment)
    pol = policy(action=Action.SCALE_TO_ZERO)
    changes = {c.workload.name: c for c in cycle([deployment, copy], [finding(deployment)], [pol])}
    assert changes["nb"].step is Step.ACT
    rs = changes["nb-5d4f"]
    assert rs.step is Step.WAIT and rs.annotations == {} and rs.notice is None and rs.action is None
    assert rs.why.code is Code.COPY_OF_SOURCE


def test_a_replicasets_copy_of_a_mark_its_deployment_no_longer_carries_is_dropped() -> None:
    deployment = job(kind="Deployment", name="nb")  # busy again: the janitor removed its mark
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-nb")
    copy = job(notes, kind="ReplicaSet", name="nb-5d4f", owner=deployment)
    [change] = cycle([deployment, copy], [finding(deployment, State.CLEAR)], [policy()])
    assert change.workload == copy.ref and change.step is Step.DROP_COPY and change.notice is None
    assert change.annotations == {k: None for k in notes}


# -- recovery --------------------------------------------------------------------------------------------

def test_resend_gets_this_cycles_intent() -> None:
    notes = marked(ago(hours=30), ago(hours=6)) | {
        a.NOTICE: f"warning abc-1 {t(ago(hours=1))} delete {t(ago(hours=6))}"}
    change = one(job(notes))
    assert change.step is Step.RECOVER and change.intent is not None and change.intent.id == "abc-1"
    assert change.annotations == {} and change.notice is not None and change.notice.kind is NoticeKind.WARNING
    again = resend(change, NOW)
    assert again.step is Step.NOTIFY and again.why.code is Code.RESEND
    intent = Intent.parse(str(again.annotations[a.NOTICE]))
    assert intent is not None and intent.kind is NoticeKind.WARNING and intent.at == NOW
    assert intent.id == intent_id(ALICE, NOW) and intent.id != "abc-1"
    # The message is rendered now: it names the deadline kept from now, not the mark's, six hours past.
    assert intent.warns_of == WarnedOf("delete", NOW + DAY) and again.intent == intent


# -- the whole decision, from what a cycle observed -------------------------------------------------------

def _running_pod(name: str, owner: ObjectView) -> PodView:
    return PodView(ObjectRef("Pod", "v1", NS, name, str(uuid.uuid4())), "1", {},
                   OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid),
                   node="gpu-node-1", phase="Running", started=ago(hours=5), gpus=1,
                   containers=(ContainerView("main", 4.0),))


def _idle_gpus(pods: Sequence[PodView]) -> Evidence:
    trigger = IdleGpu()
    window = EvidenceWindow(str(trigger.signal), trigger.window, datetime.timedelta(seconds=15), NOW)
    series = {PodKey(NS, p.ref.name): (GpuSeries("0", 0.0, 480, quality=SCRAPED),) for p in pods}
    cpu = EvidenceWindow("cpu", trigger.window, datetime.timedelta(minutes=1), NOW)  # the in-use check's CPU: idle
    used = {PodKey(NS, p.ref.name): CpuUsage(0.01, 120, SCRAPED) for p in pods}
    return Evidence(gpu={(str(trigger.signal), trigger.window): GpuEvidence(window, series)},
                    cpu={(trigger.window, ()): CpuEvidence(cpu, used)})


def test_a_deployments_mark_decides_through_plan_and_its_replicasets_copy_is_never_written() -> None:
    deployment = job(marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-nb", action="scale-to-zero"),
                     kind="Deployment", name="nb")
    rs = job(dict(deployment.annotations), kind="ReplicaSet", name="nb-5d4f", owner=deployment)
    pods = (_running_pod("nb-5d4f-x1", rs),)
    observation = Observation(NOW, (deployment, rs), pods, {NS: NamespaceView(NS, {}, {a.OWNER: "alice@lab.example"})},
                              evidence=_idle_gpus(pods))
    decided = plan(observation, [policy(action=Action.SCALE_TO_ZERO)], SafetyLedger(), NOW)
    steps = {c.workload.name: c.step for c in decided.changes}
    assert steps == {"nb": Step.ACT, "nb-5d4f": Step.WAIT}
    assert [(x.target.name, x.type) for x in decided.actions] == [("nb", ActionType.SCALE_TO_ZERO)]
    assert all(not c.annotations for c in decided.changes if c.workload.name == "nb-5d4f")


def test_owner_hears_when_a_policy_no_longer_covers_their_warned_workload() -> None:
    """The admin removed the policy: the warned owner (janitor/owner on the Job) hears that
    nothing will happen; an owner who was never warned is not told anything."""
    notes = marked(ago(hours=2), NOW + H, ago(hours=2)) | {a.OWNER: "bob@lab.example"}
    view = job(notes)
    observation = Observation(NOW, (view,), (_running_pod("train-x", view),), {NS: NamespaceView(NS)})
    [change] = plan(observation, [], SafetyLedger(), NOW).changes
    assert change.step is Step.UNMARK and change.why.code is Code.NO_LONGER_COVERED
    assert a.OWNER not in change.annotations  # the owner's annotation stays
    assert change.notice is not None and change.notice.kind is NoticeKind.CANCELLED
    assert change.notice.owner == Owner(OwnerKind.EMAIL, "bob@lab.example", change.notice.owner.source)

    unwarned = job(marked(ago(hours=2), NOW + H) | {a.OWNER: "bob@lab.example"})
    observation = Observation(NOW, (unwarned,), (_running_pod("train-x", unwarned),), {NS: NamespaceView(NS)})
    [quiet] = plan(observation, [], SafetyLedger(), NOW).changes
    assert quiet.step is Step.UNMARK and quiet.notice is None  # never told, nothing to take back


def test_a_mark_stays_while_its_workloads_pods_cannot_be_traced_to_it() -> None:
    """The ReplicaSets were not read this cycle: the Deployment's pods cannot be traced to it, so
    whether its policy still covers it is not known. Removing a mark needs positive evidence."""
    deployment = job(marked(ago(hours=2), NOW + H, ago(hours=2), uid="uid-nb", action="scale-to-zero"),
                     kind="Deployment", name="nb")
    rs = job({}, kind="ReplicaSet", name="nb-5d4f", owner=deployment)
    pods = (_running_pod("nb-5d4f-x1", rs),)
    observation = Observation(NOW, (deployment,), pods, {NS: NamespaceView(NS, {}, {a.OWNER: "alice@lab.example"})},
                              evidence=_idle_gpus(pods))
    decided = plan(observation, [policy(action=Action.SCALE_TO_ZERO)], SafetyLedger(), NOW)
    [change] = [c for c in decided.changes if c.workload.name == "nb"]
    assert change.step is Step.WAIT and not change.annotations and change.notice is None
    assert change.why.code is Code.COVERAGE_UNSURE
    assert decided.actions == ()

    # With every link read and the policy gone, the mark goes (and the warned owner hears).
    whole = Observation(NOW, (deployment, rs), pods, observation.namespaces, evidence=_idle_gpus(pods))
    [gone] = [c for c in plan(whole, [], SafetyLedger(), NOW).changes if c.workload.name == "nb"]
    assert gone.step is Step.UNMARK and gone.why.code is Code.NO_LONGER_COVERED


# -- the reason as data (janitor/why) ---------------------------------------------------------------------

def why_note(notes: Mapping[str, str | None]) -> WhyNote:
    note = WhyNote.parse(str(notes.get(a.WHY)))
    assert note is not None, notes.get(a.WHY)
    return note


def test_a_mark_carries_its_reason_as_data_in_the_same_write() -> None:
    change = one(job(), pol=policy(warn_before=DAY, max_extension=3 * DAY))
    assert set(change.annotations) == {a.DEADLINE, a.POLICY, a.REASON, a.WHY, a.MARKED_AT, a.MARKED_UID, a.NOTICE}
    assert why_note(change.annotations) == WhyNote(
        policy="idle-gpu", trigger="idleGpu", action="delete", code="gpu-idle", words=plain(REASONS[State.FIRES]),
        facts={"window": "2h", "threshold": 5.0, "signal": "DCGM_FI_DEV_GPU_UTIL", "gpus": 1},
        marked_at=NOW, deadline=NOW + DAY, keep_cap=NOW + 3 * DAY, max_extension="3d")
    mark = a.read_mark({k: v for k, v in change.annotations.items() if v is not None})
    assert mark is not None and mark.problems == ()


def test_a_policy_without_extensions_writes_no_cap() -> None:
    note = why_note(one(job(), pol=policy(max_extension=0 * H)).annotations)
    assert note.keep_cap is None and note.max_extension == "0s"


def test_the_reason_as_data_stays_small_however_long_the_words() -> None:
    view = job()
    long = why(Code.FREE_TEXT, text="x" * 20_000)
    found = Finding(TriggerKind.IDLE_GPU, "idle-gpu", Mode.ENFORCE, view.ref, State.FIRES, long, gpus=1, owner=ALICE)
    [change] = cycle([view], [found], [policy()])
    assert len(str(change.annotations[a.WHY]).encode()) <= 2048 and why_note(change.annotations).code == "text"


@pytest.mark.parametrize(("trigger", "facts"), [
    pytest.param(IdleGpu(signal=GpuSignal.GR_ENGINE_ACTIVE, threshold=0.1, window=4 * H),
                 {"window": "4h", "threshold": 0.1, "signal": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}, id="idleGpu"),
    pytest.param(IdleCpu(cores=0.5, window=3 * H), {"window": "3h", "cores": 0.5}, id="idleCpu-cores"),
    pytest.param(IdleCpu(fraction_of_request=0.1), {"window": "2h", "fractionOfRequest": 0.1}, id="idleCpu-fraction"),
    pytest.param(Pending(after=6 * H), {"after": "6h"}, id="pending"),
    pytest.param(CrashLoop(restarts=3, window=30 * M), {"restarts": 3, "window": "30m"}, id="crashLoop"),
])
def test_the_facts_are_the_triggers_own_numbers(trigger: IdleGpu | IdleCpu | Pending | CrashLoop,
                                                 facts: dict[str, object]) -> None:
    kind = {IdleGpu: TriggerKind.IDLE_GPU, IdleCpu: TriggerKind.IDLE_CPU, Pending: TriggerKind.PENDING,
            CrashLoop: TriggerKind.CRASH_LOOP}[type(trigger)]
    pol = Policy("p", (trigger,), mode=Mode.ENFORCE)
    assert trigger_facts(kind, pol, gpus=0) == facts
    assert trigger_facts(kind, pol, gpus=2) == {**facts, "gpus": 2}


def test_the_reason_as_data_follows_the_deadline_when_it_moves() -> None:
    pol = policy(warn_before=DAY, max_extension=7 * DAY, remind_every=0 * H)
    first = one(job(), pol=pol)
    note = why_note(first.annotations)
    # Warned only 2 h later: the deadline in force is delivery + grace, and the note says so.
    notes = marked(NOW, NOW + DAY, NOW + 2 * H) | {a.WHY: str(first.annotations[a.WHY])}
    change = one(job(notes), pol=pol, now=NOW + 2 * H)
    assert change.step is Step.EXTEND and change.annotations[a.DEADLINE] == t(NOW + 2 * H + DAY)
    assert why_note(change.annotations) == note.with_changes(deadline=NOW + 2 * H + DAY)
    # Kept until later (within the cap): the same.
    kept = notes | {a.DEADLINE: t(NOW + 2 * H + DAY), a.KEEP_UNTIL: t(NOW + 3 * DAY)}
    change = one(job(kept), pol=pol, now=NOW + 3 * H)
    assert change.step is Step.EXTEND and why_note(change.annotations).deadline == NOW + 3 * DAY
    # A mark written before the key existed gets none: it is never invented from the words.
    assert a.WHY not in one(job(marked(NOW, NOW + DAY, NOW + 2 * H)), pol=pol, now=NOW + 2 * H).annotations


def test_the_delivery_record_keeps_the_reason_as_data_in_step() -> None:
    pol = policy(warn_before=H)
    change = one(job(), pol=pol)
    late = Delivery("D0ALICE", f"{(NOW + 3 * H).timestamp():.6f}")
    record = delivered(change, late, pol)
    assert why_note(record) == why_note(change.annotations).with_changes(deadline=NOW + 4 * H)
    # A warning of another action, sent after the mark: the note (on the object) names the new action.
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-nb") | {
        a.WHY: str(change.annotations[a.WHY])}
    pol = policy(action=Action.SCALE_TO_ZERO, warn_before=DAY)
    again = one(job(notes, kind="Deployment", name="nb"), pol=pol)
    assert again.step is Step.NOTIFY and a.WHY not in again.annotations
    record = delivered(again, Delivery("D0ALICE", f"{NOW.timestamp():.6f}"), pol, notes)
    assert why_note(record).action == "scale-to-zero" and why_note(record).deadline == NOW + DAY
    assert a.WHY not in delivered(again, Delivery("D0ALICE", f"{NOW.timestamp():.6f}"), pol)  # none on the object


def test_unmark_removes_the_reason_as_data() -> None:
    notes = marked(ago(hours=2), NOW + H, ago(hours=2)) | {a.WHY: why_note(one(job()).annotations).encode()}
    change = one(job(notes), State.CLEAR)
    assert change.step is Step.UNMARK and change.annotations[a.WHY] is None
