"""A StatefulSet's volumes: an action that would delete them does not fit unless the policy allows it.

Aspects covered:
- scale-to-zero under `whenScaled: Delete`, delete under `whenDeleted: Delete` never mark (WAIT,
  with the rule named); an unknown retention value counts as Delete; no claim templates, nothing lost;
- a mark whose StatefulSet turned to Delete since is removed (its warned owner told), so the re-check
  before acting, which decides on the same rules, never applies it;
- `lifecycle.deleteVolumes: true` lets it happen, and the warning says the volumes go;
- the warning, the "done" note, `kubectl janitor explain` (text and JSON) say what happens to the
  volumes; observe reads the retention policy from the object.
"""

from __future__ import annotations

import dataclasses

import pytest
from factories import NOW, obj
from test_decide_lifecycle import DAY, H, cycle, finding, marked, one, policy

from janitor.act.slack_messages import notice_text
from janitor.annotations import NoticeKind
from janitor.decide.lifecycle import Step
from janitor.decide.model import ObjectView, ResourceKind
from janitor.decide.reasons import Code
from janitor.decide.volumes import ClaimTemplates
from janitor.observe.cluster import to_view
from janitor.plugin import entries, render
from janitor.policy.load import from_text
from janitor.policy.model import Action

STS = ResourceKind("apps", "v1", "StatefulSet", "statefulsets")


def sts(claims: ClaimTemplates | None, notes: dict[str, str] | None = None) -> ObjectView:
    view = obj("db", kind="StatefulSet", namespace="team-a", annotations=notes or {}, uid="uid-db")
    return dataclasses.replace(view, ref=dataclasses.replace(view.ref, api_version="apps/v1"), claims=claims,
                               replicas=2)


SCALED_DELETES = ClaimTemplates(("data",), when_scaled="Delete")
DELETED_DELETES = ClaimTemplates(("data", "scratch"), when_deleted="Delete")


@pytest.mark.parametrize(("claims", "action", "rule"), [
    (SCALED_DELETES, Action.SCALE_TO_ZERO, "whenScaled: Delete"),
    (DELETED_DELETES, Action.DELETE, "whenDeleted: Delete"),
    (ClaimTemplates(("data",), when_scaled="Sometimes"), Action.SCALE_TO_ZERO, "whenScaled: Sometimes"),
])
def test_an_action_that_would_delete_volumes_never_marks(claims: ClaimTemplates, action: Action, rule: str) -> None:
    change = one(sts(claims), pol=policy(action=action))
    assert change.step is Step.WAIT and change.annotations == {} and change.notice is None
    assert change.why.code is Code.VOLUMES_WOULD_GO and change.why.fact("rule") == rule


@pytest.mark.parametrize(("claims", "action", "words"), [
    (SCALED_DELETES, Action.DELETE, "its volumes (claims from templates data) stay (whenDeleted: Retain)"),
    (DELETED_DELETES, Action.SCALE_TO_ZERO,
     "its volumes (claims from templates data, scratch) stay (whenScaled: Retain)"),
    (ClaimTemplates(()), Action.SCALE_TO_ZERO, ""),  # no claim templates: nothing to lose
    (None, Action.DELETE, ""),
])
def test_an_action_that_keeps_volumes_marks_and_says_so(claims: ClaimTemplates | None, action: Action,
                                                        words: str) -> None:
    change = one(sts(claims), pol=policy(action=action))
    assert change.step is Step.MARK and change.notice is not None
    assert change.notice.volumes == words
    if words:
        assert f"*Volumes:* {words}" in notice_text(change.notice, NOW)


def test_a_policy_that_allows_it_marks_and_the_warning_says_the_volumes_go() -> None:
    change = one(sts(SCALED_DELETES), pol=policy(action=Action.SCALE_TO_ZERO, delete_volumes=True))
    assert change.step is Step.MARK and change.notice is not None
    assert change.notice.volumes == "its volumes (claims from templates data) are deleted with it (whenScaled: Delete)"
    assert "are deleted with it" in notice_text(change.notice, NOW)


def test_a_mark_whose_volumes_became_at_risk_is_removed_and_its_owner_told() -> None:
    """Marked and warned under Retain; the owner's chart switched to whenScaled: Delete since. At the
    deadline the janitor unmarks instead of acting (the re-check decides with these same rules)."""
    notes = marked(NOW - 2 * DAY, NOW - H, NOW - 2 * DAY, uid="uid-db", action="scale-to-zero")
    pol = policy(action=Action.SCALE_TO_ZERO)
    view = sts(SCALED_DELETES, notes)
    changes = cycle([view], [finding(view, pol=pol)], [pol])
    assert [(c.step, c.why.code) for c in changes] == [(Step.UNMARK, Code.VOLUMES_NOW_AT_RISK)]
    assert changes[0].notice is not None and changes[0].notice.kind is NoticeKind.CANCELLED
    # Under Retain the same mark is acted on: the rule above is what held it.
    kept = sts(ClaimTemplates(("data",)), notes)
    assert [c.step for c in cycle([kept], [finding(kept, pol=pol)], [pol])] == [Step.ACT]


def test_the_done_note_says_what_happened_to_the_volumes() -> None:
    notes = marked(NOW - 2 * DAY, NOW - H, NOW - 2 * DAY, uid="uid-db", action="scale-to-zero")
    pol = policy(action=Action.SCALE_TO_ZERO)
    view = sts(ClaimTemplates(("data",)), notes)
    (change,) = cycle([view], [finding(view, pol=pol)], [pol])
    assert change.notice is not None and change.notice.kind is NoticeKind.DONE
    assert "*Volumes:* its volumes (claims from templates data) stay (whenScaled: Retain)" in \
        notice_text(change.notice, NOW)


def _item(spec: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "db", "namespace": "team-a", "uid": "u", "resourceVersion": "1",
                         "creationTimestamp": "2026-11-01T00:00:00Z"}, "spec": spec}


def test_observe_reads_the_claim_templates_and_their_retention() -> None:
    spec = {"replicas": 2, "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
            "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}
    assert to_view(STS, _item(spec)).claims == ClaimTemplates(("data",), when_scaled="Delete", when_deleted="Retain")
    assert to_view(STS, _item({"replicas": 1})).claims == ClaimTemplates(())
    deployment = ResourceKind("apps", "v1", "Deployment", "deployments")
    assert to_view(deployment, _item(spec)).claims is None


def test_explain_says_what_happens_to_the_volumes() -> None:
    deadline = NOW + 5 * H
    notes = marked(NOW - DAY, deadline, NOW - DAY, uid="uid-db", action="scale-to-zero")
    view = sts(SCALED_DELETES, notes)
    entry = entries.read(view, entries.kind_of("sts"), NOW)
    assert entry is not None and entry.action == "scale-to-zero"
    text = render.explain_text("sts/db", "team-a", entry, (), NOW)
    assert "volumes" in text and "are deleted with it (whenScaled: Delete)" in text
    assert render.item(entry, NOW)["volumes"] == entry.volumes


POLICY = """\
policies:
  - name: p
    mode: enforce
    match:
      namespaces: {{include: ["team-*"]}}
    triggers:
      idleGpu: {{window: 2h}}
    lifecycle:
      action: scale-to-zero
      deleteVolumes: {value}
"""


def test_delete_volumes_is_read_from_the_policy_file_and_checked() -> None:
    (pol,), errors = from_text(POLICY.format(value="true"), file="p.yaml")
    assert pol.lifecycle.delete_volumes is True and errors == ()
    (pol,), errors = from_text(POLICY.format(value="x").replace("      deleteVolumes: x\n", ""), file="p.yaml")
    assert pol.lifecycle.delete_volumes is False and errors == ()
    policies, errors = from_text(POLICY.format(value="'yes'"), file="p.yaml")
    assert policies == ()
    assert [str(e) for e in errors] == ["p.yaml:10: lifecycle.deleteVolumes: 'yes' is not true or false"]

