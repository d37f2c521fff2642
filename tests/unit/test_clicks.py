"""Buttons on warnings, judged and rendered, and the owner's release in the lifecycle.

Aspects covered:
- a click changes something only from the owner or an admin, only on the object and the mark the
  message was sent for (not after it was deleted, re-created, unmarked or marked again);
  properties over generated times and days: a keep never passes the policy's cap, never moves the
  deadline earlier, and a refused click writes nothing;
- Release writes janitor/release naming the mark; the lifecycle then acts at once with the
  policy's action, only on a warned mark of the same marked-at, never for a report-only policy,
  and busy evidence still unmarks instead;
- warnings and reminders carry Keep / Release / Why buttons whose values decode to the workload's
  UID and mark; Keep buttons never promise past the cap; done and cancelled notes carry none.
"""

from __future__ import annotations

import datetime

from factories import NOW
from hypothesis import given
from hypothesis import strategies as st
from test_decide_lifecycle import ALICE, applied, job, marked, one, policy, t

from janitor import annotations as a
from janitor.act.slack_buttons import actions
from janitor.act.slack_messages import MessageContext, render_digest
from janitor.decide.clicks import ButtonValue, Op, Outcome, Presser, judge
from janitor.decide.deadlines import keep_cap
from janitor.decide.lifecycle import Step
from janitor.decide.model import ActionType, State
from janitor.decide.notices import Notice, NoticeKind
from janitor.policy.model import Action as PolicyAction

DAY, HOUR = datetime.timedelta(days=1), datetime.timedelta(hours=1)
MARKED = NOW - 2 * HOUR
OWNER = Presser("U0ALICE1", owner=True, admin=False)
STRANGER = Presser("U0BOB", owner=False, admin=False)
ADMIN = Presser("U0ROOT", owner=False, admin=True)


def warned_job(**extra: str):
    return job({**marked(MARKED, NOW + 20 * HOUR, MARKED + HOUR, action="suspend"), **extra})


def value_of(view, marked_at: datetime.datetime = MARKED, action: str = "") -> ButtonValue:
    return ButtonValue.of(view.ref, marked_at, action)


def test_a_value_survives_the_round_trip_and_junk_is_none() -> None:
    view = warned_job()
    assert ButtonValue.decode(value_of(view).encode()) == value_of(view)
    assert ButtonValue.decode("not json") is None and ButtonValue.decode('{"k": 1}') is None


def test_keep_by_the_owner_or_an_admin_writes_keep_until() -> None:
    view = warned_job()
    for presser in (OWNER, ADMIN):
        verdict = judge(Op.KEEP, 1, value_of(view), view, presser, ALICE, policy(max_extension=7 * DAY), NOW)
        assert verdict.outcome is Outcome.DONE
        assert verdict.annotations == {a.KEEP_UNTIL: t(NOW + DAY)}
        assert f"by <@{presser.user}>" in verdict.said


def test_a_stranger_an_old_message_or_a_recreated_object_changes_nothing() -> None:
    view = warned_job()
    pol = policy(max_extension=7 * DAY)
    refused = judge(Op.KEEP, 1, value_of(view), view, STRANGER, ALICE, pol, NOW)
    assert refused.outcome is Outcome.NOT_ALLOWED and not refused.annotations and ALICE.value in refused.said
    again = job(marked(NOW - HOUR, NOW + 20 * HOUR, NOW - HOUR))  # unmarked and marked again since
    assert judge(Op.RELEASE, 0, value_of(view), again, OWNER, ALICE, pol, NOW).outcome is Outcome.STALE
    reborn = job(marked(MARKED, NOW + 20 * HOUR, MARKED + HOUR, uid="uid-other"), name="other")
    assert judge(Op.KEEP, 1, value_of(view), reborn, OWNER, ALICE, pol, NOW).outcome is Outcome.STALE
    assert judge(Op.KEEP, 1, value_of(view), None, OWNER, ALICE, pol, NOW).outcome is Outcome.STALE
    unmarked = job()
    assert judge(Op.WHY, 0, value_of(view), unmarked, OWNER, ALICE, pol, NOW).outcome is Outcome.STALE


@given(days=st.sampled_from([1, 3]), cap_hours=st.integers(0, 24 * 10), age_hours=st.integers(0, 24 * 10),
       deadline_hours=st.integers(-24, 24 * 10), presser=st.sampled_from([OWNER, STRANGER, ADMIN]),
       micros=st.integers(0, 999_999), op=st.sampled_from([Op.KEEP, Op.RELEASE, Op.WHY]))
def test_a_keep_never_passes_the_cap_nor_moves_the_deadline_earlier(days: int, cap_hours: int, age_hours: int,
                                                                   deadline_hours: int, presser: Presser,
                                                                   micros: int, op: Op) -> None:
    marked_at = NOW - datetime.timedelta(hours=age_hours)
    deadline = NOW + datetime.timedelta(hours=deadline_hours)
    view = job(marked(marked_at, deadline, marked_at))
    pol = policy(max_extension=datetime.timedelta(hours=cap_hours))
    now = NOW.replace(microsecond=micros)  # a click comes at any instant; annotations hold whole seconds
    verdict = judge(op, days, value_of(view, marked_at), view, presser, ALICE, pol, now)
    if verdict.outcome is not Outcome.DONE:
        assert verdict.annotations == {}
        return
    assert presser.owner or presser.admin
    if op is not Op.KEEP:
        released = a.Release(marked_at, NOW, presser.user, "delete", marked_at, ALICE.key)
        assert verdict.annotations == ({a.RELEASE: str(released)} if op is Op.RELEASE else {})
        return
    until = a.parse_expires(verdict.annotations[a.KEEP_UNTIL])
    cap = keep_cap(marked_at, pol.lifecycle.max_extension)
    assert cap is not None and until <= cap and until > deadline and until <= NOW + days * DAY


def test_a_keep_shorter_than_the_keep_in_force_adds_nothing() -> None:
    """Keep 3 days, then Keep 1 day before the next cycle moved the deadline: the second would cut
    the first short, so it is refused like any keep that adds nothing."""
    view = warned_job(**{a.KEEP_UNTIL: t(NOW + 3 * DAY)})
    verdict = judge(Op.KEEP, 1, value_of(view), view, OWNER, ALICE, policy(max_extension=7 * DAY), NOW)
    assert verdict.outcome is Outcome.NO_ROOM and verdict.annotations == {}
    assert verdict.said == (f"Policy idle-gpu keeps Job team-a/train at most 1w after it was first marked "
                            f"({a.format_expires(MARKED + 7 * DAY)}): nothing to add.")


def test_release_acts_at_once_on_the_warned_mark_only() -> None:
    view = warned_job()
    verdict = judge(Op.RELEASE, 0, value_of(view), view, OWNER, ALICE, policy(), NOW)
    released = applied(view, verdict.annotations)
    change = one(released, pol=policy(action=PolicyAction.SUSPEND))
    assert change.step is Step.ACT and change.action is not None and change.action.type is ActionType.SUSPEND
    assert change.action.reason == "IdleReleased" and "released by its owner (U0ALICE1" in str(change.why)
    assert one(view, pol=policy(action=PolicyAction.SUSPEND)).step is not Step.ACT  # without it: the deadline

    old = job({**marked(MARKED, NOW + 20 * HOUR, MARKED + HOUR, action="suspend"),
               a.RELEASE: str(a.Release(MARKED - DAY, NOW, "U0ALICE1", "suspend", MARKED + HOUR, ALICE.key))})
    assert one(old, pol=policy(action=PolicyAction.SUSPEND)).step is not Step.ACT  # another mark's release
    assert one(released, pol=policy(action=PolicyAction.REPORT)).step is not Step.ACT
    busy = one(released, State.CLEAR, pol=policy(action=PolicyAction.SUSPEND))
    assert busy.step is Step.UNMARK and busy.annotations[a.RELEASE] is None  # busy wins; the release goes too
    unwarned = job({**marked(MARKED, NOW + 20 * HOUR),
                    a.RELEASE: str(a.Release(MARKED, NOW, "U0ALICE1", "suspend", MARKED + HOUR, ALICE.key))})
    assert one(unwarned, pol=policy(action=PolicyAction.SUSPEND)).step is not Step.ACT  # no warning reached them


def notice(kind: NoticeKind, cap: datetime.datetime | None, deadline: datetime.datetime | None = NOW + 20 * HOUR,
           action: str = "suspend") -> Notice:
    view = warned_job()
    return Notice(kind, view.ref, "idle-gpu", ALICE, action, view.annotations and a_reason(), NOW, deadline,
                  marked_at=MARKED, cap=cap)


def a_reason():
    from janitor.decide.reasons import Code, why

    return why(Code.GPU_IDLE, detail="GPU 0 peak 0", signal="DCGM_FI_DEV_GPU_UTIL", threshold=5.0, window="2:00:00")


def labels(block) -> list[str]:
    return [e["text"]["text"] for e in block["elements"]] if block else []


def test_buttons_carry_the_workload_and_mark_and_respect_the_cap() -> None:
    roomy = actions(notice(NoticeKind.WARNING, MARKED + 7 * DAY))
    assert labels(roomy) == ["Keep 1 day", "Keep 3 days", "Release now", "Why?"]
    assert {ButtonValue.decode(e["value"]) for e in roomy["elements"]} == {value_of(warned_job(), action="suspend")}
    near = actions(notice(NoticeKind.REMINDER, NOW + 22 * HOUR))
    assert labels(near)[0].startswith("Keep until ") and "Keep 3 days" not in labels(near)
    assert labels(actions(notice(NoticeKind.WARNING, None))) == ["Release now", "Why?"]  # no extension at all
    assert labels(actions(notice(NoticeKind.WARNING, MARKED + 7 * DAY, action="report"))) == ["Keep 1 day",
                                                                                             "Keep 3 days", "Why?"]
    assert actions(notice(NoticeKind.DONE, None, None)) is None and actions(notice(NoticeKind.CANCELLED, None)) is None


def test_every_warning_in_a_digest_has_its_buttons_within_the_limits() -> None:
    notices = [notice(NoticeKind.WARNING, MARKED + 7 * DAY) for _ in range(60)]
    assert not any(b["type"] == "actions" for m in render_digest(notices, NOW) for b in m.blocks)  # no receiver
    messages = render_digest(notices, NOW, context=MessageContext(buttons=True))
    blocks = [b for m in messages for b in m.blocks]
    assert sum(b["type"] == "actions" for b in blocks) == 60 and all(len(m.blocks) <= 50 for m in messages)
    for m in messages:  # a notice's buttons follow its own section, in the same part
        kinds = [b["type"] for b in m.blocks]
        assert all(kinds[i - 1] == "section" for i, k in enumerate(kinds) if k == "actions")


def test_why_answers_in_plain_words_then_the_numbers() -> None:
    from janitor.why_note import WhyNote

    note = WhyNote("idle-gpu", "idleGpu", "suspend", "all-idle", "GPU 0 peaked at 0 % over the last 4 h",
                   {"window": "4h", "threshold": 5.0}, MARKED, NOW + 20 * HOUR)
    view = warned_job(**{a.WHY: note.encode()})
    said = judge(Op.WHY, 0, value_of(view), view, OWNER, ALICE, policy(), NOW).said
    assert said.startswith("GPU 0 peaked at 0 % over the last 4 h\nPolicy idle-gpu (idleGpu: window 4h, threshold 5")
    assert said.endswith("The numbers: idle")  # the mark's janitor/reason
    old = warned_job()  # a mark from before janitor/why: its reason as it is
    assert judge(Op.WHY, 0, value_of(old), old, OWNER, ALICE, policy(), NOW).said == "idle"


def test_a_keep_after_a_release_withdraws_it_even_when_it_adds_no_time() -> None:
    """The owner released, then changed their mind while the deadline was still further off than
    the keep asked for: the keep adds no time, but it withdraws the release, so nothing is acted on
    before the deadline the warning named (found in review: the release stood and acted)."""
    view = job(marked(MARKED, NOW + 2 * DAY, MARKED + HOUR, action="suspend"))
    pol = policy(action=PolicyAction.SUSPEND, max_extension=7 * DAY)
    released = applied(view, judge(Op.RELEASE, 0, value_of(view), view, OWNER, ALICE, pol, NOW).annotations)
    keep = judge(Op.KEEP, 1, value_of(released), released, OWNER, ALICE, pol, NOW + HOUR)
    assert keep.outcome is Outcome.DONE and keep.annotations == {a.RELEASE: None}
    assert "release withdrawn" in keep.said.lower()
    assert one(applied(released, keep.annotations), pol=pol, now=NOW + HOUR).step is not Step.ACT
