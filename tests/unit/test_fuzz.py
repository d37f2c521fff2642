"""What people write, fuzzed: annotation values and policy files (hypothesis; clusters from generated.py).

Whatever a user writes on an object or an admin into a policy file, the janitor accepts it inside
its bounds (durations of at most 100 years, times in the years 1000 to 8999, time zones zoneinfo
loads; docs/policies.md) or says what is wrong with it, and a cycle always completes.

Aspects covered:
- the defects as found, one by one: plan() on an object annotated janitor/ttl: 3000000d or
  janitor/expires in the year 9999 reports it (an Event for a malformed annotation); on a marked
  workload whose marked-at or warned-at is in the year 9999 (or 0001, with working hours in a zone
  west of UTC) or whose Slack timestamp is past 9999, it removes the mark as broken; in a namespace
  annotated janitor/time-zone: Europe (a directory of the zone database) or with a 300-character
  zone, it counts working hours in the policy's zone; a janitor/keep-until in the year 9999 keeps
  the workload to the policy's cap;
- (a) every annotation parser (janitor/ttl, janitor/expires and janitor/keep-until, the mark as
  read_mark reads it, Delivery, WarnedOf, Intent, janitor/time-zone, janitor/opt-out) on arbitrary
  text and on near-valid values (boundary and huge numbers, odd units and digits, far and
  impossible dates, directories of the zone database): only ValueError comes out, and whatever
  is accepted works in the janitor's date arithmetic (creation + TTL, a time plus or minus three
  of the longest durations, into any zone, written back as it was read, working hours added);
- (b) the policy loader on arbitrary text, on YAML dumped from generated mappings and lists, on a
  valid file mutated field by field (odd values anywhere, deep nesting, aliases, huge numbers),
  on text cut and spliced, and on raw bytes through from_paths: it returns PolicyErrors, each one
  line of bounded length, and raises nothing; what it accepts is inside the bounds;
- (c) plan() (and the re-check of what it finds due) on generated clusters whose objects and
  namespaces carry fuzzed annotations: it returns; every janitor/ttl or janitor/expires that does
  not parse is an invalid finding with a report proposed (or already made), unless the object is
  left alone for another reason; a mark holding a value that does not parse is never acted on and,
  on the object it was written on, is removed as broken; every deadline it computes can be written;
- the run reaches its budget of annotation values and policy documents (counted here).

JANITOR_FUZZ_PROFILE=long runs 45 times as many examples: at least 1,000,000 annotation values
and 100,000 policy documents; the counts are printed at the end of the run.
"""

from __future__ import annotations

import copy
import datetime
import functools
import os
import sys
import zoneinfo
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from factories import NOW, SCRAPED, ago, obj
from generated import DAY, Case, H, cases
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from janitor import annotations as ann
from janitor.decide import selection, sight
from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    ActionType,
    ContainerView,
    NamespaceView,
    ObjectRef,
    Observation,
    OwnerRef,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.plan import CyclePlan, plan
from janitor.decide.reasons import Code
from janitor.decide.recheck import still_due
from janitor.decide.triggers.expiry import report_key, reported_keys
from janitor.decide.workhours import add_working_time
from janitor.policy import load
from janitor.policy.model import IdleGpu, Lifecycle, Mode, Policy, WorkingHours

# -- the run's budget ---------------------------------------------------------------------------------

settings.register_profile(
    "janitor-fuzz", max_examples=100, deadline=None, database=None, print_blob=True,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.large_base_example])
settings.register_profile("janitor-fuzz-long", settings.get_profile("janitor-fuzz"), max_examples=4500)
LONG = os.environ.get("JANITOR_FUZZ_PROFILE") == "long"
PROFILE = settings.get_profile("janitor-fuzz-long" if LONG else "janitor-fuzz")
pytestmark = [pytest.mark.timeout(0)] if LONG else []  # the long run is past the suite's per-test timeout
BUDGET = {"values": 1_000_000, "documents": 100_000} if LONG else {"values": 20_000, "documents": 5_000}
COUNTS = {"values": 0, "documents": 0, "plans": 0}  # annotation values parsed, policy documents loaded, plans
PROPERTIES: set[str] = set()
HELD: set[str] = set()


def examples(share: float) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A property running `share` of the profile's examples, counted for the budget when it holds."""
    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        run = settings(PROFILE, max_examples=max(1, round(PROFILE.max_examples * share)))(test)
        PROPERTIES.add(test.__name__)

        @functools.wraps(run)
        def counted(*args: object, **kwargs: object) -> None:
            run(*args, **kwargs)
            HELD.add(test.__name__)
        return counted
    return decorate


def count(what: str, n: int = 1) -> None:
    COUNTS[what] += n


# -- near-valid annotation values -----------------------------------------------------------------------

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MOST = ann.MAX_DURATION // datetime.timedelta(seconds=1)
ZONES = sorted(zoneinfo.available_timezones())
ZONE_DIRECTORIES = ["Europe", "America", "America/Argentina", "Etc", "Asia", "posix", "right", "Antarctica"]
EXTREME_ZONES = [zoneinfo.ZoneInfo(z) for z in ("Pacific/Kiritimati", "Etc/GMT+12", "America/St_Johns")]
LONGEST = ann.MAX_DURATION


def _digits(n: int) -> str:
    return "9" * n


numbers = st.one_of(
    st.integers(0, 10**6).map(str),
    st.sampled_from([str(MOST // f + d) for f in UNITS.values() for d in (-1, 0, 1)]),
    st.integers(0, 10**40).map(str),
    st.sampled_from([19, 20, 4299, 4300, 4301, 5000]).map(_digits),
    st.sampled_from(["", "-1", "+1", "1.5", "1e3", "0x10", "\u0665", "\uff15", "1_000", "\u0661\u0662"]),
)
near_ttls = st.builds(
    lambda zeros, number, unit, before, after: before + "0" * zeros + number + unit + after,
    st.sampled_from([0, 0, 0, 1, 30, 5000]), numbers,
    st.sampled_from([*UNITS, *UNITS, "S", "M", "D", "W", "y", "ms", "min", "", "\u00b5s"]),
    st.sampled_from(["", "", "", " ", "-", "+"]), st.sampled_from(["", "", "", "\n", " ", "s", "forever"]),
) | st.sampled_from(["forever", "FOREVER", "Forever", "forevermore", "never", "0s"])


def _time(year: int, month: int, day: int, hms: tuple[int, int, int], form: int, padded: bool,
          suffix: str) -> str:
    hour, minute, second = hms
    date = f"{year:04d}-{month:02d}-{day:02d}" if padded else f"{year}-{month}-{day}"
    text = [date, f"{date}T{hour:02d}:{minute:02d}", f"{date}T{hour:02d}:{minute:02d}:{second:02d}Z"][form]
    return text + suffix


years = st.one_of(st.integers(1, 9999), st.sampled_from([0, 1, 999, 1000, 8999, 9000, 9999]),
                  st.integers(10_000, 10**7))
near_times = st.builds(
    _time, years, st.integers(0, 13), st.integers(0, 32),
    st.tuples(st.integers(0, 25), st.integers(0, 61), st.integers(0, 61)),
    st.integers(0, 2), st.sampled_from([True, True, True, False]),
    st.sampled_from(["", "", "", "\n", "Z", "+01:00", ".5"]),
) | st.datetimes(min_value=datetime.datetime(1, 1, 1)).map(
    lambda d: f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}Z")
# Real days at the edges of the years, and past them; the very first and last seconds of them.
far_times = st.builds(_time, st.sampled_from([1, 999, 1000, 8999, 9000, 9998, 9999]), st.integers(1, 12),
                      st.integers(1, 28), st.tuples(st.integers(0, 23), st.integers(0, 59), st.integers(0, 59)),
                      st.integers(0, 2), st.just(True), st.just("")) | st.sampled_from([
                          "9999-12-31T23:59:59Z", "9999-12-31", "9999-12-28T00:00", "0001-01-01T00:00:00Z",
                          "0001-01-01", "8999-12-31T23:59:59Z", "9000-01-01T00:00:00Z", "1000-01-01",
                          "0999-12-31T23:59:59Z"])
near_times |= far_times
near_zones = st.one_of(
    st.sampled_from(ZONES), st.sampled_from(ZONE_DIRECTORIES),
    st.builds(lambda z, cut, junk: z[:cut] + junk, st.sampled_from(ZONES), st.integers(0, 40),
              st.sampled_from(["", "/", "//", " ", "\x00", "..", "/..", ".tab", "\udcff"])),
    st.sampled_from(ZONES).map(str.lower), st.integers(60, 400).map(lambda n: "a" * n),
    st.sampled_from(["", ".", "/", "../etc/passwd", "/etc/localtime", "zone.tab", "tzdata.zi", "UTC/", "Etc/../UTC"]),
)
slack_stamps = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-10**20, 10**20).map(str),
    st.sampled_from(["253402300799", "-62135596800", "32503680000", "1e300", "nan", "inf", "1764590400.123456"]),
)
deliveries = st.builds(lambda who, channel, ts: f"{who} {channel}/{ts}",
                       st.sampled_from(["owner", "admins", "someone", ""]), st.sampled_from(["D0ALICE", "", "C/1"]),
                       slack_stamps)
warned_ofs = st.builds(lambda action, when: f"{action} {when}", st.sampled_from(["delete", "suspend", ""]), near_times)
intents = st.builds(lambda kind, at, rest: f"{kind} abc-1 {at}{rest}",
                    st.sampled_from(["warning", "reminder", "done", "nope"]), near_times,
                    st.sampled_from(["", " delete 2026-11-24T12:00:00Z"]) | warned_ofs.map(lambda w: " " + w))
any_text = st.text(max_size=40) | st.text(alphabet="0123456789smhdwTZ:-+ ./\n", max_size=30)
values = st.one_of(any_text, near_ttls, near_times, near_zones, deliveries, warned_ofs, intents)
# The strategy of each key people (or a damaged janitor) may write on an object.
BY_KEY: Mapping[str, st.SearchStrategy[str]] = {
    ann.TTL: near_ttls | any_text, ann.EXPIRES: near_times | any_text, ann.KEEP_UNTIL: near_times | any_text,
    ann.DEADLINE: near_times | any_text, ann.MARKED_AT: near_times, ann.WARNED_AT: near_times,
    ann.REMINDED_AT: near_times,
    ann.WARNED_VIA: deliveries, ann.WARNED_OF: warned_ofs, ann.NOTICE: intents,
    ann.OPT_OUT: st.sampled_from(["true", " TRUE ", "false", "yes", ""]) | any_text,
    ann.POLICY: st.sampled_from(["p0", "p1", "retired", ""]), ann.MARKED_UID: st.sampled_from(["", "someone-else"]),
}
batches = functools.partial(st.lists, min_size=40, max_size=60)


def writable(when: datetime.datetime) -> None:
    """`when` can be written as the janitor writes deadlines (and read back while in range)."""
    text = ann.format_deadline(when)
    if ann.EARLIEST <= when <= ann.LATEST and not when.microsecond:
        assert ann.parse_expires(text) == when


def arithmetic(when: datetime.datetime) -> None:
    """What the janitor does with a time it read: add or take a few of the longest durations (and
    the year of days working hours may skip), show it in any zone, write it."""
    assert ann.EARLIEST <= when <= ann.LATEST and when.tzinfo is not None
    for moved in (when + 3 * LONGEST + 366 * DAY, when - 3 * LONGEST - 366 * DAY, when):
        writable(moved)
        for zone in EXTREME_ZONES:
            moved.astimezone(zone)


# -- (a) annotation parsers ---------------------------------------------------------------------------------


@examples(1)
@given(batches(st.one_of(near_ttls, any_text)))
def test_ttl_values_parse_inside_the_bound_or_raise_value_error(texts: list[str]) -> None:
    count("values", len(texts))
    for text in texts:
        try:
            ttl = ann.parse_ttl(text)
        except ValueError:
            continue
        if ttl is not None:
            assert datetime.timedelta(0) <= ttl <= ann.MAX_DURATION
            assert ann.parse_ttl(ann.format_duration(ttl)) == ttl
            for created in (ann.EARLIEST, ann.LATEST, NOW):
                writable(created + ttl)


@examples(1)
@given(batches(st.one_of(near_times, any_text)))
def test_times_parse_inside_the_years_or_raise_value_error(texts: list[str]) -> None:
    count("values", len(texts))
    for text in texts:
        try:
            when = ann.parse_expires(text)
        except ValueError:
            continue
        arithmetic(when)


@examples(1)
@given(batches(st.one_of(near_zones, any_text)))
def test_time_zones_load_or_raise_value_error(texts: list[str]) -> None:
    count("values", len(texts))
    hours = WorkingHours("Europe/Berlin", grace=4 * H)
    for text in texts:
        add_working_time(NOW, hours, text)  # a namespace's zone goes here as it was written
        try:
            zone = ann.parse_time_zone(text)
        except ValueError:
            continue
        assert len(text) <= ann.MAX_TIME_ZONE_LENGTH
        for when in (ann.EARLIEST - 3 * LONGEST, ann.LATEST + 3 * LONGEST):
            writable(when.astimezone(zone))
        add_working_time(ann.LATEST + LONGEST, WorkingHours(text, days=(), grace=LONGEST), text)


@examples(1)
@given(batches(st.one_of(deliveries, warned_ofs, intents, any_text)))
def test_mark_records_parse_inside_the_years_or_not_at_all(texts: list[str]) -> None:
    count("values", len(texts))
    for text in texts:
        delivery, warned_of, intent = ann.Delivery.parse(text), ann.WarnedOf.parse(text), ann.Intent.parse(text)
        times = [delivery.at if delivery else None, warned_of.deadline if warned_of else None,
                 intent.at if intent else None, intent.warns_of.deadline if intent and intent.warns_of else None]
        for when in times:
            if when is not None:
                arithmetic(when)


@examples(1)
@given(st.lists(st.dictionaries(st.sampled_from(sorted(BY_KEY)), values, min_size=1, max_size=8), min_size=5,
                max_size=10))
def test_a_mark_of_any_values_reads_inside_the_years(notes_list: list[dict[str, str]]) -> None:
    count("values", sum(len(n) for n in notes_list))
    for notes in notes_list:
        mark = ann.read_mark(notes)
        if mark is None:
            continue
        for when in (mark.deadline, mark.marked_at, mark.warned_at, mark.reminded_at,
                     mark.warned_via.at if mark.warned_via else None,
                     mark.warned_of.deadline if mark.warned_of else None, mark.intent.at if mark.intent else None):
            if when is not None:
                arithmetic(when)


@examples(0.5)
@given(batches(st.one_of(values, st.sampled_from(["true", "True ", " TRUE", "yes", "1"]))))
def test_opt_out_reads_any_value(texts: list[str]) -> None:
    count("values", len(texts))
    for text in texts:
        assert ann.is_true(text) is (text.strip().lower() == "true")


# -- (b) the policy loader -------------------------------------------------------------------------------

FULL: dict[str, Any] = {"policies": [{
    "name": "idle-gpu-notebooks", "description": "Notebooks holding idle GPUs.", "mode": "enforce",
    "match": {"namespaces": {"include": ["team-*", "ml-research"], "exclude": ["team-infra"]},
              "namespaceSelector": {"matchLabels": {"example.com/tier": "interactive"}},
              "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["jupyter"]},
                                                   {"key": "keep", "operator": "DoesNotExist"}]},
              "kinds": ["Notebook", "Pod"]},
    "triggers": {"idleGpu": {"signal": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "threshold": 0.05, "window": "4h",
                             "minCoverage": 0.8, "minPodAge": "1h"},
                 "idleCpu": {"cores": 0.5, "window": "2h", "ignoreContainers": ["istio-proxy"]},
                 "pending": {"after": "24h", "includeGated": False}, "crashLoop": {"restarts": 5, "window": "1h"},
                 "terminating": {"after": "30m", "forceDelete": False}},
    "lifecycle": {"warnBefore": "24h", "remindEvery": "8h", "action": "suspend", "maxExtension": "7d",
                  "honourOptOut": True, "minGrace": "12h", "adminFallbackCounts": False,
                  "workingHours": {"timeZone": "Europe/Berlin", "days": ["Mon", "Fri"], "hours": "09:00-18:00",
                                   "grace": "4h"}},
}]}
FIELDS = sorted({k for k in yaml.safe_dump(FULL).replace(":", " ").split() if k.isidentifier()})


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        found += _paths(child, (*at, key))
    return found


PATHS = _paths(FULL)[1:]


def _bomb(levels: int) -> str:
    parts = ["&a0 [x, x, x, x, x, x, x, x, x, x]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


class Raw(str):
    """YAML that no Python value dumps to, written into the text in place of a marker."""


RAW = ["9" * 5000, "-" + "9" * 4301, "0x" + "f" * 5000, "1" + "0" * 400 + ".5", "[" * 100 + "]" * 100,
       "{a: " * 200 + "1" + "}" * 200, "&a [*a]", "*nowhere", _bomb(3), _bomb(8), ".nan", "-.inf", "0o777", "1_000",
       "190:20:30", "2001-12-14t21:59:43.10-05:00", "!!python/object/apply:os.system [true]", "!!binary aGVsbG8=",
       "!!int '12'", "!!float .5", "!custom x", "{a: 1, a: 2}", "{<<: {window: 1h}}", "~", "'\\x00'", '"\\uD800"',
       "|\n  block\n", "? [complex, key]\n: value"]
odd_scalars = st.one_of(
    near_ttls, near_zones, near_times, st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([True, False, None, "", "0s", "forever", "99999999d", "36500d", "36501d", "Europe", "Mon"]),
    st.text(max_size=20), st.integers(100, 2000).map(lambda n: "x" * n), st.sampled_from(FIELDS),
)


def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.sampled_from([*FIELDS, "policies"]) | st.text(max_size=10)
    return st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4)


odd_values = st.recursive(odd_scalars, _nested, max_leaves=8)
mutations = st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(["replace", "replace", "delete", "add"]),
                               odd_values | st.sampled_from(RAW).map(Raw)), min_size=0, max_size=4)


_GONE = object()


def _child(parent: Any, key: Any) -> Any:
    if isinstance(parent, dict):
        return parent.get(key, _GONE)
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        return parent[key]
    return _GONE


def _mutated(mutated: list[tuple[tuple[Any, ...], str, Any]], flow: bool | None) -> str:
    """FULL with each (path, how, value) applied where the path still leads, dumped; a Raw value is
    written into the text as it is."""
    doc = copy.deepcopy(FULL)
    raws: dict[str, str] = {}
    for path, how, value in mutated:
        parent: Any = doc
        for key in path[:-1]:
            parent = _child(parent, key)
        key = path[-1]
        if _child(parent, key) is _GONE:
            continue
        if isinstance(value, Raw):
            marker = f"RAW{len(raws)}MARK"
            raws[marker] = value
            value = marker
        if how == "delete":
            del parent[key]
        elif how == "add" and isinstance(parent, dict):
            parent[f"{key}x"] = value
        elif how == "add":
            parent.append(value)
        else:
            parent[key] = value
    text = yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True, sort_keys=False)
    for marker, raw in raws.items():
        text = text.replace(marker, raw)
    return text


def loaded(text: str) -> tuple[Policy, ...]:
    """The loader on one document: PolicyErrors of one short line each, or policies in the bounds."""
    count("documents")
    policies, errors = load.from_text(text, file="fuzz.yaml")
    for error in errors:
        assert isinstance(error, load.PolicyError)
        line = str(error)
        assert line.startswith("fuzz.yaml") and len(line) <= 600 and "\n" not in line, line
    if errors:
        return ()
    for policy in policies:
        life = policy.lifecycle
        durations = [life.warn_before, life.remind_every, life.max_extension, life.min_grace]
        for trigger in policy.triggers:
            durations += [getattr(trigger, name, None) for name in ("window", "min_pod_age", "after")]
        if life.working_hours is not None:
            durations.append(life.working_hours.grace)
            ann.parse_time_zone(life.working_hours.time_zone)
        assert all(d is None or datetime.timedelta(0) <= d <= ann.MAX_DURATION for d in durations), durations
    return policies


def test_the_unmutated_document_loads() -> None:
    assert [p.name for p in loaded(_mutated([], None))] == ["idle-gpu-notebooks"]


@examples(1)
@given(st.lists(mutations, min_size=3, max_size=3), st.sampled_from([None, False, True]))
def test_loader_on_policies_mutated_field_by_field(variants: list[Any], flow: bool | None) -> None:
    for mutated in variants:
        loaded(_mutated(mutated, flow))


@examples(1)
@given(st.lists(st.recursive(odd_scalars, _nested, max_leaves=30), min_size=8, max_size=8), st.booleans())
def test_loader_on_arbitrary_yaml(documents: list[Any], wrapped: bool) -> None:
    for document in documents:
        loaded(yaml.safe_dump({"policies": [document]} if wrapped else document, allow_unicode=True))


@examples(1)
@given(st.lists(st.tuples(mutations, st.integers(0, 2000), st.integers(0, 60), st.text(max_size=30)),
                min_size=3, max_size=3))
def test_loader_on_text_cut_and_spliced(variants: list[tuple[Any, int, int, str]]) -> None:
    for mutated, at, length, splice in variants:
        text = _mutated(mutated, None)
        at %= len(text) + 1
        loaded(text[:at] + splice + text[at + length:])


@examples(1)
@given(st.lists(st.text(max_size=200) | st.text(alphabet="policies:-{}[]&*!|>'\"#\n ,0123456789.ab", max_size=200),
                min_size=40, max_size=40))
def test_loader_on_arbitrary_text(texts: list[str]) -> None:
    for text in texts:
        loaded(text)


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "policies.yaml"


@examples(0.5)
@given(contents=st.lists(st.binary(max_size=300) | st.builds(lambda m, junk: _mutated(m, None).encode() + junk,
                                                             mutations, st.binary(max_size=8)), min_size=4, max_size=4))
def test_from_paths_on_raw_bytes(policy_file: Path, contents: list[bytes]) -> None:
    for content in contents:
        count("documents")
        policy_file.write_bytes(content)
        found = load.from_paths([policy_file])
        assert all(isinstance(e, load.PolicyError) and len(str(e)) <= 600 for e in found.errors)


# -- (c) plan() on fuzzed clusters ---------------------------------------------------------------------------

OBJECT_KEYS = sorted(BY_KEY)
MARK_KEYS = [ann.DEADLINE, ann.MARKED_AT, ann.WARNED_AT, ann.REMINDED_AT, ann.WARNED_VIA, ann.WARNED_OF, ann.NOTICE,
             ann.KEEP_UNTIL]
NAMESPACE_KEYS = [ann.TIME_ZONE, ann.OPT_OUT, ann.TTL]
PLAN_VALUES = {**BY_KEY, ann.TIME_ZONE: near_zones | any_text}


@st.composite
def fuzzed(draw: st.DrawFn) -> tuple[Case, datetime.datetime, int]:
    """A generated cluster, then fuzzed values written on some of its objects and namespaces."""
    case = draw(cases("due", "due", "any", "idle"))  # "due": warned marks past their deadlines
    cluster = case.cluster
    things = [*cluster.objects.values(), *cluster.pods.values()]
    marked = [t for t in things if ann.carries_mark(t.annotations)]
    written = 0
    for _ in range(draw(st.integers(1, 4))):
        if marked and draw(st.integers(0, 2)):  # a mark otherwise whole, one value of it fuzzed
            key, target = draw(st.sampled_from(MARK_KEYS)), draw(st.sampled_from(marked))
            if key == ann.DEADLINE and key not in target.annotations:
                key = ann.EXPIRES  # an older mark's deadline
            target.annotations[key] = draw(PLAN_VALUES[key])
        elif things and draw(st.integers(0, 4)):
            key = draw(st.sampled_from(OBJECT_KEYS))
            draw(st.sampled_from(things)).annotations[key] = draw(PLAN_VALUES[key])
        else:
            key = draw(st.sampled_from(NAMESPACE_KEYS))
            cluster.namespaces[draw(st.sampled_from(sorted(cluster.namespaces)))][1][key] = draw(PLAN_VALUES[key])
        written += 1
    return case, NOW + draw(st.sampled_from([0 * H, 7 * H, 9 * DAY])), written


def _rejected(parse: Callable[[str], object], text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return True
    return False


def _reported(observation: Observation, planned: CyclePlan, case: Case) -> None:
    """Every value plan() cannot use shows: as an invalid finding with its report, or a broken mark removed
    (in a cycle that could see pods and namespaces: one that could not changes nothing, see test_sight)."""
    rails = case.settings.rails
    if any(s.kind in sight.FOUNDATIONS for s in observation.skipped_kinds):
        assert planned.actions == () and all(c.step is Step.WAIT for c in planned.changes)
        return
    for view in observation.objects:
        for key, rule, parse in ((ann.TTL, "ttl", ann.parse_ttl), (ann.EXPIRES, "expires", ann.parse_expires)):
            value = view.annotations.get(key)
            if not value or not _rejected(parse, value):
                continue
            found = [f for f in planned.findings if f.trigger is TriggerKind.EXPIRY and f.subject.uid == view.ref.uid
                     and f.rule in (rule, "rails")]
            assert found and all(f.state in (State.INVALID, State.SKIPPED) for f in found), (key, value, found)
            for f in found:
                if f.state is State.INVALID:
                    assert f.reason.code in (Code.TTL_INVALID, Code.EXPIRES_INVALID)
                    assert (f.proposal is not None and f.proposal.type is ActionType.REPORT) or \
                        report_key(key, value) in reported_keys(view), f
        mark = ann.read_mark(view.annotations, view.foreign_marks)
        if mark is None or not mark.problems:
            continue
        changes = [c for c in planned.changes if c.workload.uid == view.ref.uid]
        assert all(c.step in (Step.UNMARK, Step.DROP_COPY, Step.WAIT) for c in changes), (mark.problems, changes)
        protected = selection.is_protected(selection.namespace_of(view), rails)
        if mark.belongs_to(view.ref.uid) and not view.deleting and not protected:
            assert [(c.step, c.why.code) for c in changes] == [(Step.UNMARK, Code.MARK_BROKEN)], changes
    for when in [c.deadline for c in planned.changes] + [f.deadline for f in planned.findings]:
        if when is not None:
            ann.format_deadline(when)


@examples(2)
@given(fuzzed())
def test_plan_on_clusters_with_fuzzed_annotations(drawn: tuple[Case, datetime.datetime, int]) -> None:
    case, at, written = drawn
    count("values", written)
    count("plans")
    observation = case.cluster.observe(case.policies, at)
    planned = plan(observation, case.policies, SafetyLedger(), at, settings=case.settings)
    _reported(observation, planned, case)
    for action in planned.actions:
        if action.type is not ActionType.REPORT:
            still_due(action, observation, case.policies, at, case.settings)


# -- the defects as found ----------------------------------------------------------------------------------

NS = "team-a"
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def _marked_job(notes: Mapping[str, str], namespace: Mapping[str, str] = {}, lifecycle: Lifecycle = Lifecycle()
                ) -> CyclePlan:
    """plan() on an idle Job the janitor marked 30 hours ago and warned about, with `notes` over
    its mark and `namespace` as its namespace's annotations."""
    observation, policy = marked_job_observation(notes, namespace, lifecycle)
    return plan(observation, [policy], SafetyLedger(), NOW)


def marked_job_observation(notes: Mapping[str, str] = {}, namespace: Mapping[str, str] = {},
                           lifecycle: Lifecycle = Lifecycle()) -> tuple[Observation, Policy]:
    """What `_marked_job` plans on: the observation, and its one enforcing idle-GPU policy."""
    warned = ago(hours=30)
    mark = {ann.POLICY: "idle-gpu", ann.DEADLINE: ago(hours=6).strftime(STAMP), ann.MARKED_AT: warned.strftime(STAMP),
            ann.REASON: "idle", ann.MARKED_UID: "uid-train", ann.WARNED_AT: warned.strftime(STAMP),
            ann.WARNED_VIA: f"owner D0ALICE/{warned.timestamp():.6f}",
            ann.WARNED_OF: f"delete {ago(hours=6).strftime(STAMP)}"}
    view = obj("train", kind="Job", namespace=NS, annotations=mark | dict(notes), uid="uid-train")
    pod = PodView(ObjectRef("Pod", "v1", NS, "train-x", "uid-pod"), "1", {},
                  OwnerRef("Job", "batch/v1", "train", "uid-train"), node="gpu-node-1", phase="Running",
                  started=ago(hours=5), gpus=1, containers=(ContainerView("main", 4.0),))
    trigger = IdleGpu()
    window = EvidenceWindow(str(trigger.signal), trigger.window, datetime.timedelta(seconds=15), NOW)
    cpu = EvidenceWindow("cpu", trigger.window, datetime.timedelta(minutes=1), NOW)  # idle on the CPU too
    evidence = Evidence(gpu={(str(trigger.signal), trigger.window): GpuEvidence(
        window, {PodKey(NS, "train-x"): (GpuSeries("0", 0.0, 480, quality=SCRAPED),)})},
        cpu={(trigger.window, ()): CpuEvidence(cpu, {PodKey(NS, "train-x"): CpuUsage(0.01, 120, SCRAPED)})})
    observation = Observation(NOW, (view,), (pod,), {NS: NamespaceView(NS, {}, {ann.OWNER: "alice@lab.example",
                                                                                 **namespace})}, evidence=evidence)
    return observation, Policy("idle-gpu", (trigger,), mode=Mode.ENFORCE, lifecycle=lifecycle)


@pytest.mark.parametrize(("key", "value", "code"), [
    (ann.TTL, "3000000d", Code.TTL_INVALID), (ann.TTL, "36501d", Code.TTL_INVALID),
    (ann.EXPIRES, "9999-12-31T23:59:59Z", Code.EXPIRES_INVALID), (ann.EXPIRES, "0001-01-01", Code.EXPIRES_INVALID),
], ids=["ttl-3000000d", "ttl-a-day-past", "expires-9999", "expires-0001"])
def test_plan_reports_a_ttl_or_expiry_past_the_bounds(key: str, value: str, code: Code) -> None:
    planned = plan(Observation(NOW, (obj("notes", annotations={key: value}),)), (), SafetyLedger(), NOW)
    [finding] = planned.findings
    assert finding.state is State.INVALID and finding.reason.code is code
    [report] = planned.actions
    assert report.type is ActionType.REPORT and report.reason == "InvalidAnnotation"
    assert ("at most 36500d (100 years)" if key == ann.TTL else "years 1000 to 8999") in str(report.why)


WEST = Lifecycle(working_hours=WorkingHours("America/New_York", grace=4 * H))


@pytest.mark.parametrize(("key", "value", "lifecycle"), [
    (ann.MARKED_AT, "9999-12-31T23:59:59Z", Lifecycle()), (ann.WARNED_AT, "9999-12-31T23:59:59Z", Lifecycle()),
    (ann.WARNED_AT, "9999-12-31T00:00:00Z", WEST), (ann.WARNED_AT, "0001-01-01T00:00:00Z", WEST),
    (ann.WARNED_VIA, "owner D0ALICE/253402300799", Lifecycle()), (ann.WARNED_OF, "delete 9999-12-31T23:59:59Z", WEST),
    (ann.REMINDED_AT, "9999-12-31", Lifecycle()), (ann.DEADLINE, "9999-12-31T23:59:59Z", Lifecycle()),
], ids=["marked-at-9999", "warned-at-9999", "warned-at-9999-working-hours", "warned-at-0001-west-of-utc",
        "slack-ts-9999", "warned-of-9999", "reminded-at-9999", "deadline-9999"])
def test_plan_removes_a_mark_with_a_time_past_the_bounds(key: str, value: str, lifecycle: Lifecycle) -> None:
    [change] = _marked_job({key: value}, lifecycle=lifecycle).changes
    assert (change.step, change.why.code) == (Step.UNMARK, Code.MARK_BROKEN)
    assert key in str(change.why)


def test_plan_keeps_to_the_cap_for_a_keep_until_past_the_bounds() -> None:
    [change] = _marked_job({ann.KEEP_UNTIL: "9999-12-31"}).changes
    assert change.step is Step.EXTEND and change.why.fact("why").code is Code.KEEP_UNPARSEABLE  # type: ignore[union-attr]
    assert change.deadline == ago(hours=30) + Lifecycle().max_extension


@pytest.mark.parametrize("zone", ["Europe", "a" * 300, "Europe/Berlin\x00", "../etc/passwd", "America/Argentina"],
                         ids=["directory", "300-chars", "nul", "path", "nested-directory"])
def test_plan_counts_working_hours_in_the_policys_zone_when_the_namespaces_is_no_zone(zone: str) -> None:
    late = {ann.WARNED_AT: ago(hours=1).strftime(STAMP),
            ann.WARNED_VIA: f"owner D0ALICE/{ago(hours=1).timestamp():.6f}"}
    [change] = _marked_job(late, {ann.TIME_ZONE: zone}, WEST).changes
    [expected] = _marked_job(late, {}, WEST).changes
    assert change.step is Step.EXTEND and change.deadline == expected.deadline


# -- the budget (last in this module) ---------------------------------------------------------------------


def test_the_run_reaches_its_budget(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> None:
    """The properties together parse at least BUDGET["values"] annotation values and load at least
    BUDGET["documents"] policy documents (when the whole module ran and every property held)."""
    module = sys.modules[__name__]
    selected = {item.originalname for item in request.session.items if getattr(item, "module", None) is module}
    if selected != {name for name in vars(module) if name.startswith("test_")}:
        pytest.skip("only some of this module's tests were selected")
    if HELD != PROPERTIES:
        pytest.skip(f"not every property held ({', '.join(sorted(PROPERTIES - HELD))})")
    with capsys.disabled():
        print(f"\nfuzzed: {COUNTS['values']} annotation values, {COUNTS['documents']} policy documents, "
              f"{COUNTS['plans']} plans")
    assert COUNTS["values"] >= BUDGET["values"] and COUNTS["documents"] >= BUDGET["documents"], (COUNTS, BUDGET)
