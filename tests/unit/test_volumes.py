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
import datetime

import pytest
from factories import NOW, SCRAPED, obj
from test_decide_lifecycle import DAY, H, cycle, finding, marked, one, policy
from test_wrongful_actions import gpu_pod

from janitor import annotations as a
from janitor.act.slack_messages import notice_text
from janitor.annotations import NoticeKind
from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.lifecycle import LifecycleSettings, Step, plan_lifecycle
from janitor.decide.model import NamespaceView, ObjectView, Observation, PodView, ResourceKind, SafetyLedger
from janitor.decide.plan import plan
from janitor.decide.reasons import Code
from janitor.decide.recheck import still_due
from janitor.decide.selection import Workload
from janitor.decide.volumes import ClaimTemplates
from janitor.observe.cluster import to_view
from janitor.plugin import entries, render
from janitor.policy.load import from_text
from janitor.policy.model import Action, IdleGpu, Policy

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



# -- found by the adversarial read ------------------------------------------------------------------------


def test_a_warning_that_said_the_volumes_stay_is_given_again_before_they_go() -> None:
    """deleteVolumes: true; warned "its volumes stay (Retain)"; a chart sets whenScaled: Delete before the
    deadline. The owner hears that the volumes go, with the full notice, before anything happens."""
    pol = policy(action=Action.SCALE_TO_ZERO, delete_volumes=True)
    notes = marked(NOW - 2 * DAY, NOW - H, NOW - 2 * DAY, uid="uid-db", action="scale-to-zero")
    view = sts(SCALED_DELETES, notes)
    (change,) = cycle([view], [finding(view, pol=pol)], [pol])
    assert (change.step, change.why.code) == (Step.NOTIFY, Code.WARN_AGAIN_VOLUMES)
    assert change.deadline is not None and change.deadline >= NOW + DAY
    intent = a.Intent.parse(str(change.annotations[a.NOTICE]))
    assert intent is not None and intent.warns_of is not None and intent.warns_of.volumes
    assert change.notice is not None and "are deleted with it" in notice_text(change.notice, NOW)
    # That warning delivered a grace ago, it is acted on.
    told = notes | {a.WARNED_OF: f"scale-to-zero {a.format_expires(NOW - H)} volumes"}
    view = sts(SCALED_DELETES, told)
    assert [c.step for c in cycle([view], [finding(view, pol=pol)], [pol])] == [Step.ACT]


def test_the_warned_of_record_reads_with_and_without_volumes() -> None:
    with_volumes = a.WarnedOf.parse("scale-to-zero 2026-11-27T10:00:00Z volumes")
    assert with_volumes is not None and with_volumes.volumes and str(with_volumes).endswith(" volumes")
    plain = a.WarnedOf.parse("delete 2026-11-27T10:00:00Z")
    assert plain is not None and not plain.volumes and str(plain) == "delete 2026-11-27T10:00:00Z"
    assert a.WarnedOf.parse("delete 2026-11-27T10:00:00Z data") is None
    intent = a.Intent.parse("warning abc-1 2026-11-27T09:00:00Z delete 2026-11-28T09:00:00Z volumes")
    assert intent is not None and intent.warns_of is not None and intent.warns_of.volumes


def test_the_done_note_is_the_one_the_recheck_decided() -> None:
    """The cycle read whenScaled: Delete (deleteVolumes: true, warned so); the fresh read before acting
    finds Retain: the note sent says the volumes stayed, as they did."""
    pol = policy(action=Action.SCALE_TO_ZERO, delete_volumes=True)
    notes = marked(NOW - 2 * DAY, NOW - H, NOW - 2 * DAY, uid="uid-db", action="scale-to-zero")
    notes[a.WARNED_OF] += " volumes"
    cached = sts(SCALED_DELETES, notes)
    pod = gpu_pod("db-0", cached)
    pod = dataclasses.replace(pod, ref=dataclasses.replace(pod.ref, namespace="team-a"))
    planned = plan(_idle([cached], [pod], pol), [pol], SafetyLedger(), NOW)
    (action,) = planned.actions
    assert "are deleted with it" in planned.change_for(action).notice.volumes  # type: ignore[union-attr]
    fresh = _idle([dataclasses.replace(cached, claims=ClaimTemplates(("data",)), resource_version="9")], [pod], pol)
    again = still_due(action, fresh, [pol], NOW)
    assert again.action is not None and again.change is not None and again.change.notice is not None
    assert again.change.notice.volumes == "its volumes (claims from templates data) stay (whenScaled: Retain)"


def _idle(objects: list[ObjectView], pods: list[PodView], pol: Policy) -> Observation:
    """Two hours of idle GPU and CPU samples for `pods`, under `pol`'s window."""
    trigger = pol.trigger(IdleGpu)
    assert trigger is not None
    step = datetime.timedelta(seconds=15)
    window = EvidenceWindow(str(trigger.signal), trigger.window, step, NOW)
    cpu = EvidenceWindow("cpu", trigger.window, datetime.timedelta(minutes=1), NOW)
    evidence = Evidence(
        gpu={(str(trigger.signal), trigger.window): GpuEvidence(window, {
            PodKey("team-a", p.ref.name): (GpuSeries("0", 0.0, 480, quality=SCRAPED),) for p in pods})},
        cpu={(trigger.window, ()): CpuEvidence(cpu, {
            PodKey("team-a", p.ref.name): CpuUsage(0.01, 120, SCRAPED) for p in pods})})
    return Observation(NOW, tuple(objects), tuple(pods), {"team-a": NamespaceView("team-a", {}, {
        a.OWNER: "alice@lab.example"})}, evidence=evidence)


def test_what_owns_a_statefulset_with_claims_is_judged_by_them() -> None:
    """A Notebook (or any custom resource) owning a StatefulSet with whenDeleted: Delete: deleting it
    deletes the StatefulSet and, through it, the claims; stopping a Notebook scales it to zero."""
    notebook = obj("nb", kind="Notebook", namespace="team-a", uid="uid-nb")
    below = dataclasses.replace(obj("nb", kind="StatefulSet", namespace="team-a", uid="uid-nb-sts", owner=notebook),
                                claims=ClaimTemplates(("workspace",), "Delete", "Delete"))
    for action in (Action.DELETE, Action.STOP):
        pol = policy(action=action)
        f = finding(notebook, pol=pol)
        chain = Workload(notebook.ref, notebook, (), NamespaceView("team-a"), "Notebook",
                         chain=(below.ref, notebook.ref), owner=f.owner)
        (change,) = plan_lifecycle([chain], [notebook, below], [f], [pol], NOW, LifecycleSettings())
        assert (change.step, change.why.code) == (Step.WAIT, Code.VOLUMES_WOULD_GO), action
    allowed = policy(action=Action.STOP, delete_volumes=True)
    f = finding(notebook, pol=allowed)
    chain = Workload(notebook.ref, notebook, (), NamespaceView("team-a"), "Notebook", chain=(below.ref, notebook.ref),
                     owner=f.owner)
    (change,) = plan_lifecycle([chain], [notebook, below], [f], [allowed], NOW, LifecycleSettings())
    assert change.step is Step.MARK and change.notice is not None
    assert change.notice.volumes == \
        "its volumes (claims from templates workspace) are deleted with it (whenScaled: Delete)"


def test_the_cancelled_note_names_the_action_it_will_not_take_and_why() -> None:
    notes = marked(NOW - 2 * DAY, NOW - H, NOW - 2 * DAY, uid="uid-db", action="scale-to-zero")
    pol = policy(action=Action.SCALE_TO_ZERO)
    view = sts(SCALED_DELETES, notes)
    (change,) = cycle([view], [finding(view, pol=pol)], [pol])
    assert change.notice is not None
    text = notice_text(change.notice, NOW)
    assert "is no longer marked (policy `idle-gpu`), so it will not be scaled to zero" in text
    assert "would now delete its volumes (whenScaled: Delete)" in text
