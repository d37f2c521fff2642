"""The lifecycle's endings are one table (janitor/policy/endings.py), and what users see follows it.

Aspects covered:
- every action a policy may name has its entry, and the loader accepts exactly those names (its
  error lists them, in the table's order);
- the kinds an action applies to are the entry's: delete and report any kind, the others only theirs;
- every reclaim's resume command, as the owner gets it, undoes its patch on a sample object: after
  the patch the next cycle's check says it holds, after the command it says it does not, and the
  field is back as it was (a CronJob's Jobs suspended with it are resumed with it too);
- a reclaim that cannot be checked or undone is refused when the table is built;
- every ending that acts is carried out by the plan's action of the same name, and that action
  reads its ending back; a report (an Event) and a force delete carry none, and the `report`
  ending makes no action;
- the acting layer sends each reclaim's patch as the table has it, in one merge patch with the
  mark's removal, and a CronJob's running Jobs get the same patch, guarded by their uid;
- Slack says each ending in its short words (the warning, the "done" note, the Release button's
  confirmation, which a report-only policy does not have), `kubectl janitor explain` in its longer
  ones; a name no ending has is shown as it is;
- a Notebook stopped already (the stop ending holds on it) is not marked: nothing is left to reclaim.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import re
import shlex
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from test_decide_lifecycle import job, one, policy
from test_kubectl_plugin import marked_job, read

from janitor import annotations, kubeapi
from janitor.act import kube
from janitor.act.slack_buttons import actions
from janitor.act.slack_messages import notice_text
from janitor.decide.lifecycle import Step
from janitor.decide.model import Action as PlannedAction
from janitor.decide.model import ActionType, ObjectRef, ResourceKind, TriggerKind
from janitor.decide.notices import Notice, NoticeKind, kubectl_ref, resume_command
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.reasons import Code, text
from janitor.plugin import render
from janitor.policy import load
from janitor.policy.endings import ENDINGS, Action, Ending, Queued, find

NOW = datetime.datetime(2026, 3, 2, 10, 0, tzinfo=datetime.timezone.utc)


def test_every_action_has_its_entry() -> None:
    assert set(ENDINGS) == set(Action)
    for action, ending in ENDINGS.items():
        assert ending.action is action and action.ending is ending and find(str(action)) is ending
    assert find("nuke") is None and find("Suspend") is None


def _loaded_action(value: str) -> tuple[Action | None, tuple[str, ...]]:
    text = textwrap.dedent(f"""\
        policies:
          - name: p
            match: {{namespaces: {{include: [team-a]}}}}
            triggers: {{idleGpu: {{}}}}
            lifecycle: {{action: {value}}}
        """)
    policies, errors = load.from_text(text, file="p.yaml", parse_duration=annotations.parse_ttl)
    return (policies[0].lifecycle.action if policies else None), tuple(str(e) for e in errors)


def test_the_loader_accepts_exactly_the_tables_actions() -> None:
    for action in ENDINGS:
        assert _loaded_action(str(action)) == (action, ())
    _, errors = _loaded_action("nuke")
    assert len(errors) == 1 and errors[0].endswith("is not one of " + " | ".join(str(a) for a in ENDINGS))


def test_the_kinds_an_action_applies_to_are_its_entrys() -> None:
    kinds = ("Pod", "Deployment", "StatefulSet", "Job", "JobSet", "CronJob", "Notebook", "RayCluster")
    for action, ending in ENDINGS.items():
        fits = {kind for kind in kinds if action.applies_to(kind)}
        assert fits == (set(kinds) if ending.kinds is None else set(ending.kinds) & set(kinds)), action
    assert Action.DELETE.ending.kinds is None and Action.REPORT.ending.kinds is None
    assert [k for k in kinds if Action.SCALE_TO_ZERO.applies_to(k)] == ["Deployment", "StatefulSet"]


@dataclass(frozen=True)
class _Seen:
    """What a cycle reads of an object (the fields `ObjectView` has)."""

    replicas: int | None = None
    suspended: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    queued: Queued | None = None


def _seen(obj: dict[str, Any]) -> _Seen:
    spec = obj.get("spec") or {}
    return _Seen(spec.get("replicas"), spec.get("suspend") is True, dict(obj["metadata"].get("annotations") or {}))


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """A JSON merge patch (RFC 7386), as the apiserver applies `--type=merge`."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping):
            inner = target.get(key)
            if not isinstance(inner, dict):
                inner = target[key] = {}
            _merge(inner, value)
        else:
            target[key] = value


def _run(command: str, objects: dict[str, dict[str, Any]], namespace: str) -> None:
    """Carry out the commands the owner is given, on `objects` by `kind/name`: the few forms they use."""
    for part in command.split(" && "):
        words = shlex.split(part)
        assert words[:3] == ["kubectl", "-n", namespace], part
        verb, ref, *rest = words[3:]
        obj = objects[ref]
        if verb == "patch":
            assert rest[:2] == ["--type=merge", "-p"], part
            _merge(obj, json.loads(rest[2]))
        elif verb == "scale":
            (flag,) = rest
            obj["spec"]["replicas"] = int(flag.removeprefix("--replicas="))
        elif verb == "annotate":
            (key,) = rest
            assert key.endswith("-"), part
            obj["metadata"]["annotations"].pop(key[:-1])
        else:
            raise AssertionError(f"a command the owner cannot be given: {part}")


def _ref(kind: str, api_version: str, name: str) -> ObjectRef:
    return ObjectRef(kind, api_version, "team-a", name, f"uid-{name}")


# One sample object per reclaim, as the user had it, and what it looks like to kubectl.
SAMPLES = {
    Action.SUSPEND: (_ref("CronJob", "batch/v1", "nightly"),
                     {"metadata": {"annotations": {"team": "a"}}, "spec": {"suspend": False, "schedule": "@daily"}}),
    Action.SCALE_TO_ZERO: (_ref("Deployment", "apps/v1", "serve"),
                           {"metadata": {"annotations": {}}, "spec": {"replicas": 3}}),
    Action.STOP: (_ref("Notebook", "kubeflow.org/v1", "nb"),
                  {"metadata": {"annotations": {"notebooks.kubeflow.org/last-activity": "x"}}, "spec": {}}),
}


@pytest.mark.parametrize("action", [a for a, e in ENDINGS.items() if e.reclaims], ids=str)
def test_the_resume_command_undoes_the_patch(action: Action) -> None:
    ending = ENDINGS[action]
    assert ending.patch is not None and ending.acts
    ref, before = SAMPLES[action]
    run = _ref("Job", "batch/v1", "nightly-29000000")  # a Job the CronJob runs, suspended with it
    also = (run,) if ending.carries_runs else ()
    original = {kubectl_ref(ref): before, **{kubectl_ref(r): copy.deepcopy(before) for r in also}}
    objects = copy.deepcopy(original)
    for obj in objects.values():
        _merge(obj, ending.patch(NOW))
        assert ending.held(_seen(obj)) is True
    replicas = before["spec"].get("replicas")
    _run(resume_command(ref, action, replicas, also), objects, "team-a")
    assert objects == original
    assert all(ending.held(_seen(obj)) is False for obj in objects.values())


def test_a_scale_to_zero_with_no_replicas_recorded_resumes_at_one() -> None:
    ref = _ref("Deployment", "apps/v1", "serve")
    assert resume_command(ref, Action.SCALE_TO_ZERO, None) == "kubectl -n team-a scale deployment/serve --replicas=1"
    assert Action.SCALE_TO_ZERO.ending.held(_Seen(replicas=None)) is None  # the object does not say


def test_delete_and_report_leave_nothing_to_resume_or_check() -> None:
    ref = _ref("Deployment", "apps/v1", "serve")
    for action in (Action.DELETE, Action.REPORT):
        ending = ENDINGS[action]
        assert not ending.reclaims and ending.patch is None
        assert resume_command(ref, action, 3) == "" and ending.held(_Seen(replicas=0, suspended=True)) is None
    assert Action.DELETE.ending.acts and not Action.REPORT.ending.acts


def test_a_reclaim_that_cannot_be_checked_or_undone_is_refused() -> None:
    with pytest.raises(ValueError, match="a reclaim needs"):
        Ending(Action.SUSPEND, "suspended", "suspended", reclaims=True, patch=lambda now: {"spec": {"suspend": True}},
               holds=lambda seen: seen.suspended)
    with pytest.raises(ValueError, match="a reclaim acts"):
        Ending(Action.STOP, "stopped", "stopped", acts=False, reclaims=True, patch=lambda now: {},
               holds=lambda seen: True, resume=lambda ns, ref, replicas, also: "")


def test_every_ending_that_acts_has_its_action_and_no_other_does() -> None:
    for action, ending in ENDINGS.items():
        if ending.acts:
            carried = ActionType.carrying(action)
            assert str(carried) == str(action) and carried.ending is ending
        else:
            with pytest.raises(ValueError):
                ActionType.carrying(action)
    assert {t for t in ActionType if t.ending is not None} == {ActionType.carrying(a) for a, e in ENDINGS.items()
                                                               if e.acts}
    assert ActionType.REPORT.ending is None and ActionType.FORCE_DELETE.ending is None


KINDS = {"CronJob": ResourceKind("batch", "v1", "CronJob", "cronjobs"),
         "Deployment": ResourceKind("apps", "v1", "Deployment", "deployments"),
         "Notebook": ResourceKind("kubeflow.org", "v1", "Notebook", "notebooks")}
# The patches as the apiserver receives them: a change here changes what users' objects become.
PATCHES = {Action.SUSPEND: {"spec": {"suspend": True}}, Action.SCALE_TO_ZERO: {"spec": {"replicas": 0}},
           Action.STOP: {"metadata": {"annotations": {annotations.NOTEBOOK_STOPPED: "<time>"}}}}


@pytest.mark.parametrize("action", [a for a, e in ENDINGS.items() if e.reclaims], ids=str)
def test_the_acting_layer_sends_the_tables_patch(action: Action, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, Any]] = []

    def request(api: object, method: str, path: str, *, body: Any = None, **_: Any) -> SimpleNamespace:
        sent.append((path, body))
        return SimpleNamespace(data=b"{}")

    monkeypatch.setattr(kubeapi, "request", request)
    ref, _ = SAMPLES[action]
    runs = (_ref("Job", "batch/v1", "nightly-1"),) if ENDINGS[action].carries_runs else ()
    planned = PlannedAction(ActionType.carrying(action), ref, "7", "p", TriggerKind.IDLE_GPU, "lifecycle",
                            "IdleReclaimed", text("due"), also=runs, record={annotations.RECLAIMED: "r"})
    result = kube.apply(None, planned, kind=KINDS[ref.kind])  # type: ignore[arg-type]
    assert result.outcome is kube.Outcome.DONE, result.detail
    patches = [body for path, body in sent if not path.endswith("/events")]
    [workload, *jobs] = patches[len(patches) // 2:]  # after the dry-run probes, the same requests for real
    assert patches[:len(patches) // 2] == patches[len(patches) // 2:]
    body = copy.deepcopy(workload)
    meta = body["metadata"]
    assert meta.pop("uid") == ref.uid and meta.pop("resourceVersion") == "7"  # guarded by the read
    notes = meta["annotations"]
    assert {key: notes.pop(key) for key in (*annotations.MARK_KEYS, annotations.RECLAIMED)} == \
        {**{key: None for key in annotations.MARK_KEYS}, annotations.RECLAIMED: "r"}  # the mark goes with it
    expected = copy.deepcopy(PATCHES[action])
    if action is Action.STOP:
        stamp = notes[annotations.NOTEBOOK_STOPPED]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
        expected["metadata"]["annotations"][annotations.NOTEBOOK_STOPPED] = stamp
    if not notes:
        del meta["annotations"]
    if not meta:
        del body["metadata"]
    assert body == expected
    assert jobs == [{**PATCHES[action], "metadata": {"uid": run.uid}} for run in runs]


def _notice(kind: NoticeKind, action: str) -> Notice:
    return Notice(kind, _ref("Job", "batch/v1", "train"), "idle-gpu", Owner(OwnerKind.EMAIL, "alice@lab.example"),
                  action, text("idle"), NOW, deadline=NOW + datetime.timedelta(hours=5),
                  marked_at=NOW - datetime.timedelta(hours=1), cap=NOW + datetime.timedelta(days=5))


def _release_confirmation(notice: Notice) -> str | None:
    block = actions(notice)
    assert block is not None
    return next((e["confirm"]["text"]["text"] for e in block["elements"] if e["action_id"] == "janitor.release"), None)


@pytest.mark.parametrize("action", [*ENDINGS, "nuke"], ids=str)
def test_slack_and_the_plugin_say_each_ending_in_its_words(action: str) -> None:
    ending = find(action)
    done = ending.done if ending is not None else action
    warned = notice_text(_notice(NoticeKind.WARNING, action), NOW)
    if ending is not None and not ending.acts:  # a report names no deadline's action: nothing happens then
        assert "This policy only reports it: nothing will be done to it." in warned and "will be *" not in warned
    else:
        assert f"will be *{done}* (policy `idle-gpu`" in warned
    assert f"was *{done}* (policy `idle-gpu`)" in notice_text(_notice(NoticeKind.DONE, action), NOW)
    released = _release_confirmation(_notice(NoticeKind.WARNING, action))
    assert released == (f"Job train will be {done} within a minute." if ending is not None and ending.acts else None)
    entry = dataclasses.replace(read(marked_job()), action=action)
    shown = render.explain_text("job/train", "team-a", entry, [], NOW)
    explained = ending.explained if ending is not None else action
    assert f"what happens    {explained}, at " in shown


def test_the_words_users_read_today() -> None:
    assert {str(a): (e.done, e.explained) for a, e in ENDINGS.items()} == {
        "delete": ("deleted", "deleted"),
        "suspend": ("suspended", "suspended (spec.suspend: true; its pods stop, the Job stays)"),
        "scale-to-zero": ("scaled to zero", "scaled to zero replicas"),
        "stop": ("stopped", "stopped (the Kubeflow way; its volume stays)"),
        "report": ("reported (this policy does nothing to it)", "nothing"),
    }


def test_a_notebook_the_stop_holds_on_is_not_marked() -> None:
    stopped = job({annotations.NOTEBOOK_STOPPED: "2026-03-01T08:00:00Z"}, kind="Notebook")
    change = one(stopped, pol=policy(action=Action.STOP))
    assert change.step is Step.WAIT and change.why.code is Code.STOPPED
    assert one(job(kind="Notebook"), pol=policy(action=Action.STOP)).step is Step.MARK
