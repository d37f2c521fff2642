"""The janitor's own annotations, when someone else wrote them: never a favour, never a shortcut.

The apiserver records who last wrote each annotation (`metadata.managedFields`); observe hands the
janitor-only keys someone else wrote to decide as data (`ObjectView.foreign_marks`). Each test is
one way a researcher (or a colleague) could edit a mark with `kubectl annotate`, and what the
lifecycle does with it.

Aspects covered:
- a forward-dated janitor/marked-at (or a rewritten janitor/policy) with a keep-until never moves
  the cap: keep-until is then not honoured past the deadline in force, and the reason says why;
- a forward-dated janitor/expires on a mark never moves its deadline: the janitor's own deadline
  is written back;
- a janitor/warned-* the janitor did not write never counts as a delivered warning, and never
  names a later deadline;
- a janitor/release the janitor did not write never releases;
- a janitor/reminded-at or janitor/notice the janitor did not write never holds back a warning;
- a mark written entirely by someone else is warned of before anything happens to it;
- a controller's copy of a mark (all its keys written by the controller) is still a copy, and its
  source's own mark still decides;
- the Keep button on a mark whose janitor/marked-at someone else wrote keeps nothing and says why;
- row 6c of the precedence table (docs/policies.md), through the whole plan: the plain expiry path
  never acts on the mark, and the lifecycle reclaims at the deadline in force.
"""

from __future__ import annotations

import dataclasses

import pytest
from factories import NOW, SCRAPED, ago
from test_clicks import OWNER, value_of
from test_decide_lifecycle import (
    ALICE,
    DAY,
    NS,
    H,
    _idle_gpus,
    _running_pod,
    cycle,
    finding,
    job,
    marked,
    one,
    policy,
    t,
)

from janitor import annotations as a
from janitor.annotations import Intent, NoticeKind, WarnedOf
from janitor.decide.clicks import Op, Outcome, judge
from janitor.decide.lifecycle import Step
from janitor.decide.model import ActionType, NamespaceView, ObjectView, Observation, SafetyLedger, TriggerKind
from janitor.decide.plan import plan
from janitor.decide.reasons import Code
from janitor.policy.model import Action

WARNING_KEYS = frozenset({a.WARNED_AT, a.WARNED_VIA, a.WARNED_OF})


def written_by_others(view: ObjectView, *keys: str) -> ObjectView:
    """The view as observe reads it when `keys` were last written by someone other than the janitor."""
    return dataclasses.replace(view, foreign_marks=frozenset(keys))


# -- the cap ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("keep", [NOW + 30 * DAY, NOW + 2 * H], ids=["past-the-real-cap", "within-the-real-cap"])
def test_a_forward_dated_marked_at_with_a_keep_until_does_not_move_the_cap(keep) -> None:
    """Marked 30 h ago (cap: 7 d after that), warned, due 6 h ago. The owner forward-dates
    janitor/marked-at by two months and sets janitor/keep-until in the same `kubectl annotate`:
    the cap counted from a marked-at the janitor did not write is no cap, so nothing is kept."""
    pol = policy(max_extension=7 * DAY, remind_every=0 * H)
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30)) | {a.MARKED_AT: t(NOW + 60 * DAY),
                                                                   a.KEEP_UNTIL: t(keep)}
    honest = one(job(notes), pol=pol)
    assert honest.step is Step.EXTEND  # read as the janitor's own, it would keep (the defect)

    change = one(written_by_others(job(notes), a.MARKED_AT), pol=pol)
    assert change.step is Step.ACT and change.action is not None
    assert change.deadline == ago(hours=6)


def test_the_reason_says_why_a_keep_until_is_not_honoured() -> None:
    pol = policy(max_extension=7 * DAY, remind_every=0 * H)
    notes = marked(ago(hours=30), NOW + 2 * H, ago(hours=30)) | {a.MARKED_AT: t(NOW), a.KEEP_UNTIL: t(NOW + DAY)}
    change = one(written_by_others(job(notes), a.MARKED_AT), pol=pol)
    assert change.step is Step.WAIT and change.deadline == NOW + 2 * H and change.annotations == {}
    said = str(change.why)
    assert "janitor/keep-until is not honoured" in said and "janitor/marked-at" in said
    assert "not written by the janitor" in said and "janitor unmark" in said
    assert Code.KEEP_UNTRUSTED in change.why.codes()


def test_a_rewritten_policy_name_gives_no_extension_either() -> None:
    """janitor/policy says whose maxExtension counts: rewritten, it proves nothing."""
    pol = policy(max_extension=7 * DAY, remind_every=0 * H)
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30)) | {a.KEEP_UNTIL: t(NOW + DAY)}
    assert one(job(notes), pol=pol).step is Step.EXTEND
    assert one(written_by_others(job(notes), a.POLICY), pol=pol).step is Step.ACT


def test_the_warning_of_a_mark_without_a_trusted_cap_offers_no_keep() -> None:
    change = one(written_by_others(job(marked(ago(hours=30), ago(hours=6))), a.MARKED_AT), pol=policy())
    assert change.step is Step.NOTIFY and change.notice is not None
    assert change.notice.cap is None and change.notice.keep_command == ""


# -- the deadline -----------------------------------------------------------------------------------------

def test_a_forward_dated_expires_on_a_mark_never_moves_its_deadline() -> None:
    pol = policy(remind_every=0 * H)
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30)) | {a.DEADLINE: "2099-01-01"}
    assert one(job(notes), pol=pol).step is Step.WAIT  # read as the janitor's, 2099 would hold (the defect)
    change = one(written_by_others(job(notes), a.DEADLINE), pol=pol)
    assert change.step is Step.EXTEND and change.action is None
    assert change.annotations[a.DEADLINE] == t(ago(hours=6)) and change.deadline == ago(hours=6)
    restored = job(notes | {a.DEADLINE: t(ago(hours=6))})
    assert one(restored, pol=pol).step is Step.ACT


def test_an_expires_someone_else_wrote_before_the_warning_is_not_what_the_warning_names() -> None:
    pol = policy(warn_before=DAY)
    change = one(written_by_others(job(marked(ago(hours=1), NOW + 90 * DAY)), a.DEADLINE), pol=pol)
    assert change.step is Step.NOTIFY and change.deadline == NOW + DAY
    intent = Intent.parse(str(change.annotations[a.NOTICE]))
    assert intent is not None and intent.warns_of == WarnedOf("delete", NOW + DAY)


# -- the warning ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("forged", [WARNING_KEYS, frozenset({a.WARNED_OF})], ids=["whole-record", "warned-of"])
def test_a_warning_record_the_janitor_did_not_write_never_counts(forged: frozenset[str]) -> None:
    """Due, with a record of a delivered warning the janitor never wrote (a colleague who wants
    the GPUs, or a copy-paste): the owner is warned first, and nothing is acted on."""
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30))
    assert one(job(notes)).step is Step.ACT
    change = one(written_by_others(job(notes), *forged))
    assert change.step is Step.NOTIFY and change.action is None
    assert change.notice is not None and change.notice.kind is NoticeKind.WARNING


def test_a_warned_of_deadline_the_janitor_did_not_write_never_postpones() -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), warned_deadline=NOW + 90 * DAY)
    change = one(written_by_others(job(notes), a.WARNED_OF))
    # Warned anew, naming the janitor's own deadline: the least notice from now (the mark's, six
    # hours past, is long gone), never the forged one 90 days out.
    assert change.step is Step.NOTIFY and change.deadline == NOW + DAY
    intent = Intent.parse(str(change.annotations[a.NOTICE]))
    assert intent is not None and intent.warns_of == WarnedOf("delete", NOW + DAY)


def test_a_release_the_janitor_did_not_write_never_releases() -> None:
    release = a.Release(ago(hours=2), NOW, "U0BOB", "delete", ago(hours=1), ALICE.key)
    notes = marked(ago(hours=2), NOW + 23 * H, ago(hours=1)) | {a.RELEASE: str(release)}
    pol = policy(action=Action.DELETE)
    assert one(job(notes), pol=pol).step is Step.ACT  # the owner's own button press would act
    change = one(written_by_others(job(notes), a.RELEASE), pol=pol)
    assert change.step is Step.WAIT and change.action is None and change.deadline == NOW + 23 * H


def test_a_reminded_at_in_the_future_never_holds_back_the_owners_warnings() -> None:
    """janitor/reminded-at: 2099 on one marked Job counts as the owner's last message: read as the
    janitor's, the per-owner pace would hold back every warning to them until 2099."""
    old = job(marked(ago(hours=30), NOW + 20 * H, ago(hours=30), uid="uid-old")
              | {a.REMINDED_AT: "2099-01-01T00:00:00Z"}, name="old")
    new = job(name="new")
    pol = policy()

    def new_mark(views: list[ObjectView]):
        return next(c for c in cycle(views, [finding(v) for v in views], [pol]) if c.workload == new.ref)

    assert new_mark([old, new]).notice is None  # the defect
    fresh = new_mark([written_by_others(old, a.REMINDED_AT), new])
    assert fresh.step is Step.MARK and fresh.notice is not None


def test_a_send_in_flight_the_janitor_did_not_record_never_holds_back_the_warning() -> None:
    """A janitor/notice dated 2099: read as the janitor's, Slack would be asked about it and it
    would never be sent again before 2099, so the owner would never be warned."""
    notes = marked(ago(hours=30), ago(hours=6)) | {a.NOTICE: f"warning abc-1 2099-01-01T00:00:00Z delete {t(NOW)}"}
    assert one(job(notes)).step is Step.RECOVER
    change = one(written_by_others(job(notes), a.NOTICE))
    assert change.step is Step.NOTIFY and change.notice is not None and change.notice.owner == ALICE
    assert Intent.parse(str(change.annotations[a.NOTICE])) != Intent.parse(notes[a.NOTICE])


def test_a_mark_someone_else_wrote_whole_is_warned_of_before_anything_happens() -> None:
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30)) | {a.KEEP_UNTIL: t(NOW + DAY)}
    forged = written_by_others(job(notes), *(k for k in notes if k != a.KEEP_UNTIL))
    change = one(forged, pol=policy(warn_before=DAY))
    assert change.step is Step.NOTIFY and change.action is None
    assert change.deadline == NOW + DAY and change.notice is not None and change.notice.cap is None


# -- copies -----------------------------------------------------------------------------------------------

def test_a_controllers_copy_is_still_a_copy_and_its_sources_own_mark_decides() -> None:
    """The Deployment controller wrote every key of the copy on the ReplicaSet: a copy, as before."""
    deployment = job(marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-nb", action="scale-to-zero"),
                     kind="Deployment", name="nb")
    copy = job(dict(deployment.annotations), kind="ReplicaSet", name="nb-5d4f", owner=deployment)
    copy = written_by_others(copy, *(k for k in copy.annotations if k in (*a.JANITOR_ONLY_KEYS, a.EXPIRES)))
    pol = policy(action=Action.SCALE_TO_ZERO)
    changes = {c.workload.name: c for c in cycle([deployment, copy], [finding(deployment)], [pol])}
    assert changes["nb"].step is Step.ACT
    assert changes["nb-5d4f"].step is Step.WAIT and changes["nb-5d4f"].why.code is Code.COPY_OF_SOURCE


# -- the Keep button --------------------------------------------------------------------------------------

def test_keep_on_a_mark_whose_marked_at_someone_else_wrote_keeps_nothing_and_says_why() -> None:
    view = job(marked(ago(hours=2), NOW + 20 * H, ago(hours=1)))
    pol = policy(max_extension=7 * DAY)
    assert judge(Op.KEEP, 1, value_of(view, ago(hours=2)), view, OWNER, ALICE, pol, NOW).outcome is Outcome.DONE
    verdict = judge(Op.KEEP, 1, value_of(view, ago(hours=2)), written_by_others(view, a.MARKED_AT), OWNER, ALICE,
                    pol, NOW)
    assert verdict.outcome is Outcome.NO_ROOM and verdict.annotations == {}
    assert "janitor/marked-at" in verdict.said and "not written by the janitor" in verdict.said


def test_precedence_row_6c_through_the_whole_plan() -> None:
    """An idle Deployment, warned and due; its owner forward-dated janitor/marked-at and set a
    keep-until a month ahead: one plan reclaims it at the deadline it was warned of."""
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), uid="uid-nb", action="scale-to-zero")
    deployment = written_by_others(job(notes | {a.MARKED_AT: t(NOW + 60 * DAY), a.KEEP_UNTIL: t(NOW + 30 * DAY)},
                                       kind="Deployment", name="nb"), a.MARKED_AT)
    rs = job({}, kind="ReplicaSet", name="nb-5d4f", owner=deployment)
    pods = (_running_pod("nb-5d4f-x1", rs),)
    observation = Observation(NOW, (deployment, rs), pods,
                              {NS: NamespaceView(NS, {}, {a.OWNER: "alice@lab.example"})}, evidence=_idle_gpus(pods))
    decided = plan(observation, [policy(action=Action.SCALE_TO_ZERO)], SafetyLedger(), NOW)
    assert [(x.target.name, x.type) for x in decided.actions] == [("nb", ActionType.SCALE_TO_ZERO)]
    assert not [f for f in decided.findings if f.trigger is TriggerKind.EXPIRY and f.subject == deployment.ref]
    # The mark's deadline is janitor/deadline: nothing for the plain path (or kube-janitor) to read.


def test_a_bare_pods_forward_dated_marked_at_does_not_move_the_cap() -> None:
    """A bare pod is its own workload: the keys of its mark someone else wrote count as theirs too."""
    import uuid

    from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
    from janitor.decide.model import ContainerView, ObjectRef, PodView
    from janitor.decide.plan import PlanSettings

    uid = str(uuid.uuid4())
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30), uid=uid) | {a.MARKED_AT: t(NOW + 60 * DAY),
                                                                           a.KEEP_UNTIL: t(NOW + 30 * DAY)}
    pod = PodView(ObjectRef("Pod", "v1", "team-a", "debug", uid), "1", {}, None, "gpu-node-1", "Running",
                  ago(hours=50), 1, (ContainerView("main", 4.0),), annotations=notes, created=ago(hours=50),
                  foreign_marks=frozenset({a.MARKED_AT}))
    key = PodKey("team-a", "debug")
    gpu = GpuEvidence(EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, 15 * H / 3600, NOW),
                      {key: (GpuSeries("0", 0.0, 480, quality=SCRAPED),)})
    cpu = CpuEvidence(EvidenceWindow("cpu", 2 * H, H / 60, NOW), {key: CpuUsage(0.01, 120, SCRAPED)})
    observation = Observation(NOW, (), (pod,), {"team-a": NamespaceView("team-a")},
                              evidence=Evidence({("DCGM_FI_DEV_GPU_UTIL", 2 * H): gpu}, {(2 * H, ()): cpu}))
    decided = plan(observation, [policy(max_extension=7 * DAY, remind_every=0 * H)], SafetyLedger(), NOW,
                   settings=PlanSettings())
    assert [x.target.uid for x in decided.actions if x.rule == "lifecycle"] == [uid]


def test_a_warned_to_the_janitor_did_not_write_never_counts_as_a_warning() -> None:
    """Someone rewrote whom the warning reached (to skip the warning the new owner is owed): the
    record is no warning, and the owner now is warned before anything happens."""
    notes = marked(ago(hours=30), ago(hours=6), ago(hours=30)) | {a.WARNED_TO: ALICE.key}
    assert one(job(notes)).step is Step.ACT
    change = one(written_by_others(job(notes), a.WARNED_TO))
    assert change.step is Step.NOTIFY and change.notice is not None and change.notice.owner == ALICE
