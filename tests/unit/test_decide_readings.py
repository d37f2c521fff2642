"""What a view reads of its janitor annotations when it is built (decide/readings.py), once per
resourceVersion, is what parsing the annotations each cycle gave.

Aspects covered:
- every expiry value (valid, forever, zero, malformed, too large, out of range, stray whitespace)
  judges exactly as parsing it on the spot did, at several times around its deadline: the same
  verdict, the same reason (code, facts, sentence) and the same deadline;
- the mark, the keep-until (and which of two keeps longer) and the reported lines are what the
  annotation codec reads from the annotations, marks someone else wrote included;
- a malformed annotation still makes the same Warning Event report, cycle after cycle until it is
  recorded as reported, and one on a new value again;
- nothing read is kept past its view: a view built at a new resourceVersion (the watch cache's
  MODIFIED event, a fresh read, `dataclasses.replace`) reads its annotations again, while a view
  the cache keeps between cycles keeps its one reading; a bare pod's workload is its listed view
  (read once) only at the pod's own resourceVersion.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping

import pytest
from factories import NOW, ago, obj

from janitor import annotations as a
from janitor.decide import readings, selection
from janitor.decide.deadlines import keep_order
from janitor.decide.model import ActionType, ObjectView, Observation, PodView, ResourceKind, SafetyLedger, State
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.rails import Caps, Rails
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.triggers import expiry
from janitor.observe import cluster, views
from janitor.observe.cache import ClusterCache
from janitor.observe.watch import KindWatch

H = datetime.timedelta(hours=1)
OPEN = Rails(caps=Caps(10**6, 10**6, 10**6, 10**6))
CONFIG_MAPS = ResourceKind("", "v1", "ConfigMap", "configmaps")


def _stamp(when: datetime.datetime) -> str:
    return a.format_expires(when.replace(microsecond=0))


def parsed_on_the_spot(view: ObjectView, key: str, value: str, now: datetime.datetime
                       ) -> tuple[State, Reason, datetime.datetime | None]:
    """The expiry judgement as it was made before views read their annotations: parsed every cycle."""
    if key == a.TTL:
        try:
            ttl = a.parse_ttl(value)
        except ValueError as e:
            return State.INVALID, why(Code.TTL_INVALID, error=str(e)), None
        if ttl is None:
            return State.CLEAR, why(Code.TTL_FOREVER), None
        if ttl <= datetime.timedelta(0):
            return State.CLEAR, why(Code.TTL_ZERO, value=value), None
        try:
            deadline = view.created + ttl
        except OverflowError:
            return State.CLEAR, why(Code.TTL_NOT_YET, value=value, age=now - view.created, deadline="never"), None
        age = now - view.created
        if age > ttl:
            return State.FIRES, why(Code.TTL_PASSED, value=value, created=_stamp(view.created), age=age,
                                    deadline=_stamp(deadline)), deadline
        return State.CLEAR, why(Code.TTL_NOT_YET, value=value, age=age, deadline=_stamp(deadline)), deadline
    try:
        when = a.parse_expires(value)
    except ValueError as e:
        return State.INVALID, why(Code.EXPIRES_INVALID, error=str(e)), None
    if now > when:
        return State.FIRES, why(Code.EXPIRES_PASSED, value=value, ago=now - when), when
    return State.CLEAR, why(Code.EXPIRES_NOT_YET, value=value, left=when - now), when


TTLS = ["1h", "08s", "2d", "1w", "forever", "FOREVER", "0s", "000m", "30 minutes", "1.5h", "-1h", "5m\n", " 5m",
        "36500d", "36501d", "9" * 40 + "w", "٥m", "1H"]
EXPIRIES = ["2026-11-23T11:00:00Z", "2026-11-23T11:00", "2026-11-23", "2026-11-24", "2026-11-23T12:00:00Z",
            "2026-13-01", "2026-02-30", "0999-12-31", "9000-01-01", "next tuesday", "2026-11-23T11:00:00+01:00",
            "2026-11-23t11:00:00z"]


@pytest.mark.parametrize(("key", "value"), [(a.TTL, v) for v in TTLS] + [(a.EXPIRES, v) for v in EXPIRIES])
@pytest.mark.parametrize("created", [ago(hours=1), ago(days=3), ago(hours=1, microseconds=250)],
                         ids=["an-hour-old", "three-days-old", "sub-second-creation"])
def test_a_value_read_once_judges_as_parsing_it_every_cycle(key: str, value: str,
                                                            created: datetime.datetime) -> None:
    view = obj("x", annotations={key: value}, created=created)
    [rule] = view.readings.rules
    assert (rule.key, rule.value) == (key, value)
    for now in (NOW, NOW + H, created + H, created + H + datetime.timedelta(microseconds=1), NOW + 400 * 24 * H):
        judged = (expiry.judge_ttl(view, rule, now) if key == a.TTL else expiry.judge_expires(rule, now))
        expected = parsed_on_the_spot(view, key, value, now)
        assert judged == expected
        assert str(judged[1]) == str(expected[1])


def test_a_ttl_past_the_last_time_python_holds_never_expires() -> None:
    view = obj("x", annotations={a.TTL: "36500d"}, created=datetime.datetime(9990, 1, 1, tzinfo=datetime.UTC))
    [rule] = view.readings.rules
    assert rule.says is readings.Says.NEVER
    assert expiry.judge_ttl(view, rule, NOW) == parsed_on_the_spot(view, a.TTL, "36500d", NOW)


def test_empty_and_absent_values_are_no_rule_and_objects_without_janitor_keys_share_one_reading() -> None:
    assert obj("x", annotations={a.TTL: "", a.EXPIRES: ""}).readings.rules == ()
    plain = obj("y", annotations={"app": "web"})
    assert plain.readings is readings.NOTHING
    assert obj("z").readings is readings.NOTHING


def _mark(**extra: str) -> dict[str, str]:
    return {a.DEADLINE: "2026-11-24T12:00:00Z", a.POLICY: "idle-gpu", a.MARKED_AT: "2026-11-23T10:00:00Z",
            a.MARKED_UID: "u-1", a.REASON: "idle", **extra}


@pytest.mark.parametrize("notes", [
    {},
    {a.TTL: "1h"},
    _mark(),
    _mark(**{a.MARKED_AT: "yesterday"}),
    {a.EXPIRES: "2026-11-24T12:00:00Z", a.POLICY: "idle-gpu", a.MARKED_AT: "2026-11-23T10:00:00Z",
     a.MARKED_UID: "u-1"},  # an older mark: its deadline in janitor/expires
    _mark(**{a.WARNED_AT: "2026-11-23T11:00:00Z", a.WARNED_VIA: "owner D0OWNER/1795000000.000100",
             a.WARNED_OF: "delete 2026-11-24T12:00:00Z"}),
    _mark(**{a.WARNED_AT: "2026-11-23T11:00:00Z"}),  # a warning record without the rest
    {a.POLICY: "idle-gpu"},  # all but one key removed
    _mark(**{a.KEEP_UNTIL: "2026-11-30T00:00:00Z"}),
], ids=["none", "ttl-only", "whole", "broken-time", "legacy", "warned", "incomplete-warning", "one-key", "kept"])
@pytest.mark.parametrize("foreign", [frozenset(), frozenset({a.MARKED_AT, a.DEADLINE}),
                                     frozenset({a.WARNED_AT, a.WARNED_VIA})], ids=["ours", "cap-foreign",
                                                                                   "warning-foreign"])
def test_the_mark_read_once_is_the_mark_the_codec_reads(notes: Mapping[str, str], foreign: frozenset[str]) -> None:
    view = dataclasses.replace(obj("x", annotations=dict(notes)), foreign_marks=foreign)
    assert view.readings.marked == a.carries_mark(notes)
    assert view.readings.mark == a.read_mark(notes, foreign)


@pytest.mark.parametrize("value", [None, "2026-11-30T00:00:00Z", "2026-11-30", "soon", "", "2026-02-30"])
def test_the_keep_until_read_once_is_the_one_parsed(value: str | None) -> None:
    view = obj("x", annotations={} if value is None else {a.KEEP_UNTIL: value})
    keep = view.readings.keep
    if value is None:
        assert keep is None
        return
    assert keep is not None and keep.value == value
    try:
        assert keep.until == a.parse_expires(value)
    except ValueError:
        assert keep.until is None
    assert keep_order(keep) == keep_order(value)


@pytest.mark.parametrize(("theirs", "own"), [("2026-11-30", "2026-11-29"), ("2026-11-29", "2026-11-30"),
                                             ("never", "2026-11-30"), ("2026-11-30", "never"), ("x", "y")])
def test_which_keep_keeps_longer_is_decided_as_on_the_strings(theirs: str, own: str) -> None:
    parsed = (keep_order(readings.Keep.of(theirs)), keep_order(readings.Keep.of(own)))
    assert (parsed[0] > parsed[1]) == (keep_order(theirs) > keep_order(own))


def test_the_reported_lines_are_read_as_written() -> None:
    view = obj("x", annotations={a.REPORTED: "janitor/ttl=8 hours\n\ninherited:janitor/ttl=1h\n"})
    assert view.readings.reported == frozenset({"janitor/ttl=8 hours", "inherited:janitor/ttl=1h"})
    assert expiry.reported_keys(view) == {"janitor/ttl=8 hours", "inherited:janitor/ttl=1h"}


def _plan(*objects: ObjectView, now: datetime.datetime = NOW):
    return plan(Observation(now, tuple(objects)), (), SafetyLedger(), now, settings=PlanSettings(rails=OPEN))


@pytest.mark.parametrize(("key", "value", "code"), [(a.TTL, "8 hours", Code.TTL_INVALID),
                                                     (a.TTL, "36501d", Code.TTL_INVALID),
                                                     (a.EXPIRES, "2026-13-01", Code.EXPIRES_INVALID)])
def test_a_malformed_annotation_read_once_is_reported_every_cycle_until_recorded(key: str, value: str,
                                                                                 code: Code) -> None:
    view = obj("x", annotations={key: value}, created=ago(days=3))
    error = _error(key, value)
    for now in (NOW, NOW + H, NOW + 24 * H):  # the same view, cycle after cycle
        [report] = _plan(view, now=now).actions
        assert report.type is ActionType.REPORT and report.reason == "InvalidAnnotation"
        assert report.rule == "malformed" and report.report_key == f"{key}={value}"
        assert report.why == why(Code.MALFORMED_KEPT, why=why(code, error=error))
        assert str(report.why) == f"invalid {key}: {error}; the object is kept"
    recorded = dataclasses.replace(view, resource_version="101",
                                   annotations={key: value, a.REPORTED: report.report_key or ""})
    assert _plan(recorded).actions == ()
    other = dataclasses.replace(recorded, resource_version="102", annotations={key: value + "!",
                                                                              a.REPORTED: report.report_key or ""})
    [again] = _plan(other).actions
    assert again.report_key == "\n".join(sorted({f"{key}={value}", f"{key}={value}!"}))


def _error(key: str, value: str) -> str:
    try:
        a.parse_ttl(value) if key == a.TTL else a.parse_expires(value)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"{value} parses")


def test_a_replaced_view_reads_its_new_annotations() -> None:
    view = obj("x", annotations={a.TTL: "1h"}, created=ago(days=3))
    changed = dataclasses.replace(view, resource_version="101", annotations={a.TTL: "forever"})
    assert [r.says for r in view.readings.rules] == [readings.Says.AT]
    assert [r.says for r in changed.readings.rules] == [readings.Says.FOREVER]
    with pytest.raises(ValueError):
        dataclasses.replace(view, readings=changed.readings)  # never handed over from another view


def _item(version: str, annotations: Mapping[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "results", "namespace": "team-a", "uid": "u-1", "resourceVersion": version,
                         "creationTimestamp": "2026-11-20T12:00:00Z", "annotations": dict(annotations)}}


def test_a_fresh_read_at_a_new_resource_version_reads_again() -> None:
    old = cluster.to_view(CONFIG_MAPS, _item("9", {a.TTL: "1d"}))
    new = cluster.to_view(CONFIG_MAPS, _item("10", {a.TTL: "8 hours"}))
    assert [(r.says, r.deadline) for r in old.readings.rules] == [
        (readings.Says.AT, datetime.datetime(2026, 11, 21, 12, tzinfo=datetime.UTC))]
    assert [(r.says, r.error) for r in new.readings.rules] == [(readings.Says.INVALID, _error(a.TTL, "8 hours"))]


def test_the_watch_cache_keeps_one_reading_per_resource_version() -> None:
    """Between cycles the cached view keeps its reading (parsed once); the object's next version
    is a new view, read again; a plan still holding the old view keeps the old version's."""
    watch: KindWatch = KindWatch(None, CONFIG_MAPS, ClusterCache._slim(CONFIG_MAPS, True))  # type: ignore[arg-type]
    watch._apply({"type": "ADDED", "object": _item("9", {a.TTL: "1d"})})
    [first] = watch.values()
    assert first.object is not None
    held = first.object
    [again] = watch.values()  # the next cycle, nothing changed
    assert again.object is held and again.object.readings is held.readings

    watch._apply({"type": "MODIFIED", "object": _item("10", {a.TTL: "forever", a.KEEP_UNTIL: "2026-12-01"})})
    [changed] = watch.values()
    assert changed.object is not None and changed.object.resource_version == "10"
    assert [r.says for r in changed.object.readings.rules] == [readings.Says.FOREVER]
    assert changed.object.readings.keep == readings.Keep("2026-12-01", datetime.datetime(2026, 12, 1,
                                                                                       tzinfo=datetime.UTC))
    assert [r.says for r in held.readings.rules] == [readings.Says.AT] and held.readings.keep is None

    watch._apply({"type": "MODIFIED", "object": _item("11", {a.TTL: "forever", a.KEEP_UNTIL: "2026-12-01"})})
    [same_words] = watch.values()  # a new version whose annotations did not change: read again all the same
    assert same_words.object is not changed.object and same_words.object.readings == changed.object.readings


def test_a_pod_in_the_watch_cache_reads_its_own_annotations() -> None:
    pods = ResourceKind("", "v1", "Pod", "pods")
    watch: KindWatch = KindWatch(None, pods, ClusterCache._slim(pods, True))  # type: ignore[arg-type]
    item = _item("9", {a.TTL: "2h"})
    item["spec"], item["status"] = {"containers": [{"name": "main"}]}, {"phase": "Running"}
    watch._apply({"type": "ADDED", "object": item})
    [entry] = watch.values()
    assert entry.object is not None and entry.pod is not None
    assert [(r.key, r.value, r.says) for r in entry.object.readings.rules] == [(a.TTL, "2h", readings.Says.AT)]


def _bare_pod(version: str, annotations: Mapping[str, str]) -> tuple[PodView, ObjectView]:
    pods = ResourceKind("", "v1", "Pod", "pods")
    item = _item(version, annotations)
    item["spec"], item["status"] = {"containers": [{"name": "main"}]}, {"phase": "Running"}
    return views.pod_view(item), cluster.to_view(pods, item)


def test_a_bare_pods_workload_is_its_listed_view_read_once() -> None:
    """A bare pod is a workload of its own: where pods are listed as objects (by default), its
    workload's view is the listed one at the pod's version, whose annotations were read once; where
    they are not, or another version was listed, one is made of the pod and read then."""
    pod, listed = _bare_pod("9", {a.TTL: "2h"})
    [workload] = selection.workloads(Observation(NOW, (listed,), (pod,)), OPEN)
    assert workload.view is listed
    [alone] = selection.workloads(Observation(NOW, (), (pod,)), OPEN)
    assert alone.view is not None and alone.view.readings == listed.readings
    _, older = _bare_pod("8", {a.TTL: "1h"})
    [behind] = selection.workloads(Observation(NOW, (older,), (pod,)), OPEN)
    assert behind.view is not None and behind.view is not older and behind.view.resource_version == "9"
    assert [r.value for r in behind.view.readings.rules] == ["2h"]
