"""The TTL/expiry trigger and the gates before it, as a table of objects and verdicts.

Aspects covered:
- strict comparisons as kube-janitor: age > ttl deletes, age == ttl keeps; now > expires deletes;
- forever and a zero TTL keep; empty values count as absent;
- invalid values keep the object and are reported once per object and value, not every cycle;
- janitor/expires beside any janitor-only mark key is part of the janitor's mark, not for this path;
- a Deployment's janitor/ttl or janitor/expires copied onto its ReplicaSet is never acted on;
- every action of this path names the policy ttl-expiry;
- a TTL inherited from a pod template is reported on the top-most owner, pods are kept;
  an owner that is not visible keeps the pod; a TTL set on one pod directly deletes it;
- gates: being deleted, protected namespace (and the protected Namespace itself), opt-out
  honoured or not;
- one deletion per object when both annotations have passed, the earliest deadline first.
"""

from __future__ import annotations

import pytest
from factories import NOW, ago, obj

from janitor import annotations as a
from janitor.decide.model import EXPIRY_POLICY, ActionType, Finding, Observation, SafetyLedger, State, TriggerKind
from janitor.decide.plan import CyclePlan, PlanSettings, plan
from janitor.decide.rails import Caps, Rails

OPEN = Rails(caps=Caps(10**6, 10**6, 10**6, 10**6))
Outcome = State  # the expiry path's verdicts: FIRES deletes, CLEAR keeps


def run(*objects, rails: Rails = OPEN) -> CyclePlan:
    return plan(Observation(NOW, tuple(objects)), (), SafetyLedger(), NOW, settings=PlanSettings(rails=rails))


def verdicts(p: CyclePlan) -> list[Finding]:
    return [f for f in p.findings if f.trigger is TriggerKind.EXPIRY]


def outcome_of(p: CyclePlan, name: str, rule: str | None = None) -> State:
    [verdict] = [v for v in verdicts(p) if v.subject.name == name and rule in (None, v.rule)]
    return verdict.state


@pytest.mark.parametrize(
    ("annotations", "created", "expected"),
    [
        ({a.TTL: "1h"}, ago(hours=1, seconds=1), State.FIRES),
        ({a.TTL: "1h"}, ago(hours=1), State.CLEAR),
        ({a.TTL: "2d"}, ago(days=3), State.FIRES),
        ({a.TTL: "1w"}, ago(days=6), State.CLEAR),
        ({a.TTL: "forever"}, ago(days=3000), State.CLEAR),
        ({a.TTL: "0s"}, ago(days=3), State.CLEAR),
        ({a.TTL: "30 minutes"}, ago(days=3), State.INVALID),
        ({a.EXPIRES: "2026-11-23T11:59:59Z"}, ago(days=1), State.FIRES),
        ({a.EXPIRES: "2026-11-23T12:00:00Z"}, ago(days=1), State.CLEAR),
        ({a.EXPIRES: "2026-11-22"}, ago(days=1), State.FIRES),
        ({a.EXPIRES: "2026-11-24"}, ago(days=1), State.CLEAR),
        ({a.EXPIRES: "next tuesday"}, ago(days=1), State.INVALID),
    ],
    ids=["ttl-passed-by-1s", "ttl-exactly-now-keeps", "ttl-days", "ttl-week-not-yet", "forever",
         "zero-ttl", "ttl-invalid", "expired-1s-ago", "expires-exactly-now-keeps", "expired-date",
         "expires-tomorrow", "expires-invalid"],
)
def test_rule_verdicts(annotations: dict[str, str], created, expected: State) -> None:
    p = run(obj("x", annotations=annotations, created=created))
    assert outcome_of(p, "x") is expected
    deleted = [act.target.name for act in p.deletions()]
    assert deleted == (["x"] if expected is State.FIRES else [])
    assert all(act.policy == EXPIRY_POLICY and act.trigger is TriggerKind.EXPIRY for act in p.actions)


def test_empty_value_is_no_annotation() -> None:
    p = run(obj("x", annotations={a.TTL: "", a.EXPIRES: ""}, created=ago(days=9)))
    assert verdicts(p) == [] and p.actions == ()


def test_invalid_value_is_reported_once_and_kept() -> None:
    bad = obj("x", annotations={a.TTL: "30 minutes"}, created=ago(days=3))
    [report] = run(bad).actions
    assert report.type is ActionType.REPORT and report.reason == "InvalidAnnotation"
    assert "30m" in str(report.why) and "kept" in str(report.why)
    assert report.report_key == "janitor/ttl=30 minutes"

    already = obj("x", annotations={a.TTL: "30 minutes", a.REPORTED: report.report_key}, created=ago(days=3))
    assert run(already).actions == ()

    changed = obj("x", annotations={a.TTL: "thirty", a.REPORTED: report.report_key}, created=ago(days=3))
    [again] = run(changed).actions
    assert again.report_key.splitlines() == ["janitor/ttl=30 minutes", "janitor/ttl=thirty"]


@pytest.mark.parametrize("key", a.JANITOR_ONLY_KEYS)
def test_expires_beside_any_mark_key_is_the_janitors_not_plain_expiry(key: str) -> None:
    """A mark with all but one key removed (janitor/policy among them) is still a mark."""
    marked = obj("x", annotations={a.EXPIRES: "2026-01-01", key: "anything"})
    p = run(marked)
    assert outcome_of(p, "x") is State.SKIPPED and p.actions == ()


def test_a_users_ttl_beside_a_mark_still_counts() -> None:
    """Precedence: the mark owns janitor/expires only; the user's own janitor/ttl stays theirs."""
    marked = obj("x", annotations={a.EXPIRES: "2099-01-01", a.POLICY: "idle-gpu", a.TTL: "1h"},
                 created=ago(hours=2))
    assert [act.rule for act in run(marked).deletions()] == ["ttl"]


@pytest.mark.parametrize("notes", [{a.TTL: "1h"}, {a.EXPIRES: "2026-01-01"}], ids=["ttl", "expires"])
def test_a_replicasets_copy_of_its_deployments_annotation_is_never_acted_on(notes: dict[str, str]) -> None:
    deploy = obj("web", kind="Deployment", created=ago(days=2))
    rs = obj("web-abc", kind="ReplicaSet", owner=deploy, annotations=notes, created=ago(days=2))
    p = run(deploy, rs)
    assert outcome_of(p, "web-abc") is State.SKIPPED and p.actions == ()
    [verdict] = verdicts(p)
    assert "copy" in verdict.why and "Deployment/web" in verdict.why


def test_a_replicaset_of_its_own_is_expired_like_anything_else() -> None:
    rs = obj("standalone", kind="ReplicaSet", annotations={a.TTL: "1h"}, created=ago(days=2))
    assert [act.target.name for act in run(rs).deletions()] == ["standalone"]


def test_inherited_ttl_reported_on_top_owner_and_pods_kept() -> None:
    deploy = obj("web", kind="Deployment", template={a.TTL: "1h"}, created=ago(days=2))
    rs = obj("web-abc", kind="ReplicaSet", owner=deploy, template={a.TTL: "1h"}, created=ago(days=2))
    pods = [obj(f"web-abc-{i}", kind="Pod", owner=rs, annotations={a.TTL: "1h"}, created=ago(days=2)) for i in range(3)]

    p = run(deploy, rs, *pods)

    assert p.deletions() == ()
    [report] = p.actions
    assert (report.type, report.target.name, report.reason) == (ActionType.REPORT, "web", "InheritedTTL")
    assert all(outcome_of(p, pod.ref.name) is State.SKIPPED for pod in pods)


def test_pod_with_its_own_ttl_is_deleted_and_invisible_owner_keeps() -> None:
    job = obj("train", kind="Job", template={}, created=ago(days=2))
    own = obj("train-x", kind="Pod", owner=job, annotations={a.TTL: "1h"}, created=ago(days=2))
    orphan_owner = obj("gone", kind="Job")
    hidden = obj("hidden-x", kind="Pod", owner=orphan_owner, annotations={a.TTL: "1h"}, created=ago(days=2))

    p = run(job, own, hidden)  # the second pod's owner is not in the snapshot

    assert [act.target.name for act in p.deletions()] == ["train-x"]
    assert outcome_of(p, "hidden-x") is State.SKIPPED


@pytest.mark.parametrize(
    ("target", "rails", "reason"),
    [
        (obj("x", annotations={a.TTL: "1s"}, deleting=True), OPEN, "already being deleted"),
        (obj("x", namespace="kube-system", annotations={a.TTL: "1s"}), OPEN, "protected"),
        (obj("kube-public", kind="Namespace", namespace=None, annotations={a.TTL: "1s"}), OPEN, "protected"),
        (obj("x", annotations={a.TTL: "1s", a.OPT_OUT: "true"}), OPEN, "opted out"),
    ],
    ids=["deleting", "protected-namespace", "protected-namespace-object", "opt-out"],
)
def test_gates_keep(target, rails: Rails, reason: str) -> None:
    p = run(target, rails=rails)
    [verdict] = verdicts(p)
    assert verdict.state is State.SKIPPED and reason in verdict.why
    assert p.actions == () and p.held == ()


def test_an_opted_out_namespace_keeps_everything_in_it() -> None:
    from janitor.decide.model import NamespaceView

    target = obj("x", annotations={a.TTL: "1s"})
    observation = Observation(NOW, (target,), namespaces={"team-a": NamespaceView("team-a", {}, {a.OPT_OUT: " True "})})
    p = plan(observation, (), SafetyLedger(), NOW, settings=PlanSettings(rails=OPEN))
    [verdict] = verdicts(p)
    assert verdict.state is State.SKIPPED and "namespace team-a" in verdict.why and p.actions == ()


def test_opt_out_not_honoured_when_forbidden() -> None:
    rails = Rails(caps=OPEN.caps, honour_opt_out=False)
    p = run(obj("x", annotations={a.TTL: "1s", a.OPT_OUT: "true"}), rails=rails)
    assert [act.target.name for act in p.deletions()] == ["x"]


def test_one_deletion_per_object_and_most_overdue_first() -> None:
    both = obj("both", annotations={a.TTL: "1h", a.EXPIRES: "2026-11-20"}, created=ago(hours=5))
    late = obj("late", annotations={a.EXPIRES: "2026-11-01"})
    recent = obj("recent", annotations={a.TTL: "1m"}, created=ago(minutes=5))
    p = run(recent, both, late)
    assert [(act.target.name, act.rule) for act in p.deletions()] == [
        ("late", "expires"), ("both", "expires"), ("recent", "ttl"),
    ]
