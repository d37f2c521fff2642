"""The rails between a proposed deletion and a real one.

Aspects covered:
- caps over rolling windows: per hour and per day, in total and per namespace; deletions older
  than the window stop counting; the most overdue candidates go first;
- the tripwire: a jump in candidates past the fraction (and the minimum) stops all deletions and
  stays tripped across cycles until acknowledged; an old acknowledgment does not count; after an
  acknowledgment the jump is the new baseline; a first run or a small rise never trips;
- dry-run holds every deletion and says so;
- clock skew beyond the threshold pauses deletions; deadlines use the apiserver's clock;
- record_deletions feeds the caps of later cycles.
"""

from __future__ import annotations

import datetime

from factories import NOW, ago, obj

from janitor import annotations as a
from janitor.decide.model import ActionType, Deletion, Observation, SafetyLedger
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.rails import Caps, HoldReason, Rails, Tripwire, record_deletions

TIGHT = Caps(per_hour=5, per_day=8, per_namespace_per_hour=3, per_namespace_per_day=100)


def expired(n: int, namespace: str = "team-a", prefix: str = "cm") -> list:
    return [obj(f"{prefix}-{i:03d}", namespace=namespace, annotations={a.TTL: "1m"}, created=ago(hours=1, minutes=i))
            for i in range(n)]


def run(objects, ledger=SafetyLedger(), rails=Rails(caps=TIGHT), local_now=NOW, apiserver=NOW):
    return plan(Observation(apiserver, tuple(objects)), (), ledger, local_now, settings=PlanSettings(rails=rails))


def names(actions) -> list[str]:
    return [act.target.name for act in actions]


def test_caps_per_namespace_and_total_in_one_cycle() -> None:
    objects = expired(4, "team-a") + expired(4, "team-b", "x")
    p = run(objects)
    # The most overdue first (created longest ago); 5 per hour in all, 3 per hour per namespace.
    assert names(p.deletions()) == ["cm-003", "x-003", "cm-002", "x-002", "cm-001"]
    assert {h.reason for h in p.held} == {HoldReason.CAP}
    assert names(h.action for h in p.held) == ["x-001", "cm-000", "x-000"]


def test_caps_count_past_deletions_in_rolling_windows() -> None:
    ledger = SafetyLedger(deletions=(
        *(Deletion(ago(minutes=30), "team-z") for _ in range(4)),  # in the hour
        *(Deletion(ago(hours=5), "team-z") for _ in range(3)),  # in the day only
        *(Deletion(ago(days=2), "team-z") for _ in range(50)),  # out of both windows
    ))
    p = run(expired(3), ledger=ledger)
    assert len(p.deletions()) == 1  # 5/hour with 4 used; the day (8) has 7 used
    assert "per hour" in p.held[0].why
    assert len(p.ledger.deletions) == 7  # older than a day is forgotten


def test_record_deletions_feeds_later_cycles() -> None:
    first = run(expired(3))
    ledger = record_deletions(first.ledger, first.deletions(), NOW)
    later = run(expired(3, prefix="new"), ledger=ledger, local_now=NOW + datetime.timedelta(minutes=1),
                apiserver=NOW + datetime.timedelta(minutes=1))
    assert later.deletions() == ()  # team-a used its 3 per hour


def test_zero_cap_stops_a_path() -> None:
    p = run(expired(2), rails=Rails(caps=Caps(per_hour=0)))
    assert p.deletions() == () and len(p.held) == 2


def test_tripwire_trips_and_stays_until_acknowledged() -> None:
    rails = Rails(caps=Caps(10**6, 10**6, 10**6, 10**6), tripwire=Tripwire(fraction=0.5, min_jump=20))
    baseline = run(expired(2), rails=rails)
    assert len(baseline.deletions()) == 2 and baseline.ledger.previous_candidates == 2

    burst = run(expired(200), ledger=baseline.ledger, rails=rails)
    assert burst.deletions() == ()
    assert {h.reason for h in burst.held} == {HoldReason.TRIPWIRE} and len(burst.held) == 200
    assert burst.ledger.tripped_at == NOW and burst.tripped_now
    assert any("tripwire" in n for n in burst.notices)

    still = run(expired(200), ledger=burst.ledger, rails=rails)
    assert still.deletions() == () and "acknowledge" in still.held[0].why
    assert not still.tripped_now  # announced once, when it tripped

    stale_ack = run(expired(200), rails=rails,
                    ledger=SafetyLedger(previous_candidates=2, tripped_at=NOW, acknowledged_at=ago(hours=1)))
    assert stale_ack.deletions() == ()

    acked = run(expired(200), rails=rails,
                ledger=SafetyLedger(previous_candidates=2, tripped_at=ago(minutes=5), acknowledged_at=ago(minutes=1)))
    assert len(acked.deletions()) == 200
    assert acked.ledger.tripped_at is None and acked.ledger.previous_candidates == 200


def test_tripwire_ignores_first_run_and_small_rises() -> None:
    rails = Rails(caps=Caps(10**6, 10**6, 10**6, 10**6), tripwire=Tripwire(fraction=0.5, min_jump=20))
    assert len(run(expired(100), rails=rails).deletions()) == 100  # no previous cycle
    small = run(expired(15), rails=rails, ledger=SafetyLedger(previous_candidates=1))
    assert len(small.deletions()) == 15  # +14 < min_jump
    proportional = run(expired(140), rails=rails, ledger=SafetyLedger(previous_candidates=100))
    assert len(proportional.deletions()) == 140  # +40 % < 50 %


def test_dry_run_holds_everything_but_keeps_reports() -> None:
    bad = obj("bad", annotations={a.TTL: "soon"})
    p = run([*expired(2), bad], rails=Rails(caps=TIGHT, dry_run=True))
    assert p.deletions() == ()
    assert [h.reason for h in p.held] == [HoldReason.DRY_RUN] * 2
    assert [act.type for act in p.actions] == [ActionType.REPORT]  # act sends it with dryRun=All


def test_unreadable_ledger_stops_deletions() -> None:
    p = run(expired(2), ledger=SafetyLedger(unreadable=True))
    assert p.deletions() == ()
    assert {h.reason for h in p.held} == {HoldReason.LEDGER}
    assert "repairs or deletes" in p.notices[0]


def test_clock_skew_pauses_deletions() -> None:
    skewed = run(expired(2), local_now=NOW + datetime.timedelta(minutes=5))
    assert skewed.deletions() == ()
    assert {h.reason for h in skewed.held} == {HoldReason.CLOCK_SKEW}
    assert any("300s off" in n for n in skewed.notices)
    fine = run(expired(2), local_now=NOW + datetime.timedelta(seconds=10))
    assert len(fine.deletions()) == 2


def test_unknown_apiserver_clock_pauses_deletions() -> None:
    p = run(expired(2), apiserver=None)
    assert p.deletions() == () and {h.reason for h in p.held} == {HoldReason.CLOCK_SKEW}
    assert any("clock is unknown" in n for n in p.notices)


def test_deadlines_use_the_apiserver_clock() -> None:
    # The janitor's clock is 20 s behind (within the threshold); the TTL passed 10 s ago by the
    # apiserver's clock and not yet by the janitor's.
    target = obj("x", annotations={a.TTL: "1h"}, created=ago(hours=1, seconds=10))
    p = run([target], local_now=NOW - datetime.timedelta(seconds=20))
    assert names(p.deletions()) == ["x"]
    assert p.now == NOW


def test_admins_are_told_what_the_caps_hold_back_and_what_resumes_it() -> None:
    capped = run(expired(12))
    [(title, lines)] = [s for s in capped.admin_report.sections if s[0].startswith("Deletions held back")]
    assert any("9 deletions" in line and "cap" in line and "--max-deletions-per-hour" in line for line in lines)
    # The same hold a cycle later is the same report (not sent again until it changes or at the pace).
    assert run(expired(11)).admin_report.key == capped.admin_report.key


def test_admins_are_told_the_tripwire_holds_everything_with_the_command_that_resumes() -> None:
    rails = Rails(caps=Caps(10**6, 10**6, 10**6, 10**6), tripwire=Tripwire(fraction=0.5, min_jump=20))
    baseline = run(expired(2), rails=rails)
    for cycle in (run(expired(200), ledger=baseline.ledger, rails=rails),
                  run(expired(200), ledger=run(expired(200), ledger=baseline.ledger, rails=rails).ledger, rails=rails)):
        held = dict(cycle.admin_report.sections)["Deletions held back"]
        assert any("200 deletions" in line and "tripwire" in line
                   and f"kubectl -n kube-idle-janitor annotate configmap janitor-state {a.ACKNOWLEDGE_TRIPWIRE}="
                   in line for line in held), held


def test_a_dry_run_is_no_news_for_admins() -> None:
    assert run(expired(3), rails=Rails(caps=TIGHT, dry_run=True)).admin_report.empty
