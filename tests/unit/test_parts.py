"""A whole read of usage evidence in parts under a samples budget (janitor.observe.parts).

Aspects covered:
- within the budget (or with the budget 0) a read is one query scoped as before; a budget set too
  low gives at most 100 parts, whatever each namespace or pod costs;
- above it, parts by namespace: every namespace in exactly one part, each part within the budget
  unless one namespace alone passes it; a read that names no namespace ends with a part for every
  namespace the others do not name;
- a read that names its pods (a steady cycle's) is split by pod, each pod in exactly one part; a
  part's estimate counts every pod its matchers select (its namespaces times its names: StatefulSet
  names shared by namespaces bring in pods it does not name);
- as a property over generated clusters (namespaces of GPU pods, CPU-only pods, pods outside the
  covered ones, budgets from 0 to above the whole) for each of the three scopes;
- the answers merged into one evidence; a part that fails fails the whole read, and no further
  part is asked;
- `--prometheus-query-samples` refuses what is not a whole number of samples, in one line;
- through `read_evidence`: the queries a whole read sends, each naming its namespaces, and the
  steady cycle's whole read naming its pods part by part.
"""

from __future__ import annotations

import datetime
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from janitor.decide.evidence import CpuEvidence, CpuUsage, EvidenceWindow, GpuEvidence, GpuSeries, PodKey, Quality
from janitor.decide.model import ContainerView, ObjectRef, PodView
from janitor.observe import observation
from janitor.observe.carry import BusyCarry
from janitor.observe.parts import MAX_PARTS, Cost, Part, cpu_load, gpu_load, read, split
from janitor.observe.prometheus import PrometheusConfig, PrometheusSource, QueryResult, RowSink, Runtime, parse_answer
from janitor.policy.model import IdleGpu, Match, Policy
from janitor.settings import PrometheusSettings, Settings

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)
WINDOW = datetime.timedelta(hours=4)
STEP = datetime.timedelta(seconds=15)
COST = Cost.of(WINDOW, STEP, STEP)
PER_GPU = COST.per_series


def pod(namespace: str, name: str, gpus: int = 1, containers: int = 1) -> PodView:
    return PodView(ObjectRef("Pod", "v1", namespace, name, f"uid-{namespace}-{name}"), "1", {}, None, "node-1",
                   "Running", NOW - WINDOW * 2, gpus,
                   tuple(ContainerView(f"c{i}", 1.0) for i in range(containers)))


def key(p: PodView) -> PodKey:
    return PodKey(p.ref.namespace or "", p.ref.name)


def reads(part: Part, p: PodView) -> bool:
    """Whether the part's matchers select the pod's series: a part naming pods asks for its
    namespaces and its names, so it selects every pod of one of those names in one of those
    namespaces, named together or not."""
    if part.pods is not None:
        return p.ref.namespace in {k.namespace for k in part.pods} and p.ref.name in {k.pod for k in part.pods}
    if part.namespaces is not None:
        return p.ref.namespace in part.namespaces
    return p.ref.namespace not in part.outside


def estimate(part: Part, pods: Sequence[PodView]) -> int:
    """What the part makes Prometheus load, as `Cost` counts it: the GPUs of the covered pods its
    matchers select, each a GPU's points, and one series' raw samples."""
    return COST.fixed + sum(gpu_load(p) * PER_GPU for p in pods if reads(part, p))


def test_a_query_costs_two_subqueries_points_a_group_and_one_series_raw_samples() -> None:
    assert COST == Cost(math.ceil(1.1 * 2 * 961), math.ceil(1.1 * 961))
    assert Cost.of(WINDOW, datetime.timedelta(minutes=1), STEP) == Cost(math.ceil(1.1 * 2 * 241), COST.fixed)
    assert COST.of_series(3) == COST.fixed + 3 * COST.per_series
    assert gpu_load(pod("a", "p", gpus=8)) == 8 and cpu_load(pod("a", "p", containers=3)) == 1


def test_within_the_budget_a_read_is_one_query_as_before() -> None:
    pods = [pod("team-a", f"p{i}") for i in range(10)]
    whole = COST.of_series(10)
    assert split(budget=whole, cost=COST, load=gpu_load, covered=pods, namespaces=["team-a", "team-b"],
                 pods=None) == [Part(("team-a", "team-b"))]
    assert split(budget=whole, cost=COST, load=gpu_load, covered=pods, namespaces=None,
                 pods=None) == [Part(None)]
    assert split(budget=0, cost=COST, load=gpu_load, covered=pods, namespaces=None, pods=None) == [Part(None)]
    named = [key(p) for p in pods]
    assert split(budget=0, cost=COST, load=gpu_load, covered=pods, namespaces=None,
                 pods=named) == [Part(None, tuple(named))]


def test_above_the_budget_each_part_names_whole_namespaces() -> None:
    pods = ([pod("team-a", f"a{i}", gpus=4) for i in range(3)] + [pod("team-b", f"b{i}", gpus=8) for i in range(2)]
            + [pod("team-c", "c0", gpus=1)] + [pod("team-d", f"d{i}", gpus=8) for i in range(5)])
    budget = COST.of_series(16)  # team-a 12 GPUs, team-b 16, team-c 1, team-d 40 (alone above the budget)
    parts = split(budget=budget, cost=COST, load=gpu_load, covered=pods,
                  namespaces=["team-a", "team-b", "team-c", "team-d", "team-e"], pods=None)
    assert parts == [Part(("team-a",)), Part(("team-b",)), Part(("team-c",)), Part(("team-d", "team-e"))]
    # team-d alone passes the budget: it cannot be split without changing what the read answers;
    # team-e has no pod the estimate counts.
    assert [estimate(p, pods) <= budget for p in parts] == [True, True, True, False]


def test_a_read_of_every_namespace_ends_with_the_others() -> None:
    pods = [pod("team-a", "a", gpus=8), pod("team-b", "b", gpus=8)]
    parts = split(budget=COST.of_series(8), cost=COST, load=gpu_load, covered=pods, namespaces=None, pods=None)
    assert parts == [Part(("team-a",)), Part(("team-b",)), Part(None, outside=("team-a", "team-b"))]


def test_a_steady_cycles_whole_read_is_split_by_pod() -> None:
    pods = [pod("team-a", f"p{i}", gpus=2) for i in range(5)]
    named = [key(p) for p in pods]
    parts = split(budget=COST.of_series(4), cost=COST, load=gpu_load, covered=pods, namespaces=["team-a"],
                  pods=named)
    assert parts == [Part(None, tuple(named[0:2])), Part(None, tuple(named[2:4])), Part(None, tuple(named[4:]))]


def test_a_budget_set_too_low_sends_at_most_a_hundred_queries() -> None:
    pods = [pod(f"ns-{i}", "p", gpus=1) for i in range(500)]
    parts = split(budget=1, cost=COST, load=gpu_load, covered=pods, namespaces=None, pods=None)
    assert len(parts) == MAX_PARTS + 1  # and the part for every other namespace
    named = split(budget=1, cost=COST, load=gpu_load, covered=pods, namespaces=None,
                  pods=[key(p) for p in pods])
    assert len(named) == MAX_PARTS
    unequal = [pod(f"ns-{i:03}", "p", gpus=1 + i % 2) for i in range(150)]
    assert len(split(budget=1, cost=COST, load=gpu_load, covered=unequal, namespaces=None, pods=None)) <= MAX_PARTS + 1
    assert len(split(budget=1, cost=COST, load=gpu_load, covered=unequal, namespaces=None,
                     pods=[key(p) for p in unequal])) <= MAX_PARTS


# -- as a property ---------------------------------------------------------------------------------------

NAMESPACES = [f"ns-{i}" for i in range(6)]
REACHED: Counter[str] = Counter()
SITUATIONS = ("namespaces split", "every namespace split, the others last", "pods split",
              "a namespace alone above the budget", "one query within the budget", "one query, budget 0",
              "a name shared by namespaces in one part")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[PodView], list[str] | None, list[PodKey] | None, int]:
    pods: dict[PodKey, PodView] = {}
    for _ in range(draw(st.integers(0, 30))):
        # StatefulSet-style names: the same names in several namespaces.
        made = pod(draw(st.sampled_from(NAMESPACES)), f"w-{draw(st.integers(0, 7))}",
                   gpus=draw(st.sampled_from([0, 0, 1, 2, 4, 8])), containers=draw(st.integers(1, 3)))
        pods[key(made)] = made
    scope = draw(st.sampled_from(["namespaces", "every", "pods"]))
    covered_ns = sorted(draw(st.sets(st.sampled_from(NAMESPACES), min_size=1))) if scope == "namespaces" else None
    covered = [p for p in pods.values() if covered_ns is None or p.ref.namespace in covered_ns]
    named = None
    if scope == "pods":
        # Named pods may include one the estimate does not know (a pod gone since the list).
        named = sorted({key(p) for p in covered if draw(st.booleans())} | {PodKey("ns-0", "gone")})
    whole = COST.of_series(sum(p.gpus for p in covered))
    budget = draw(st.sampled_from([0, 1, COST.of_series(1), COST.of_series(3), COST.of_series(8), whole, whole + 1]))
    return covered, covered_ns, named, budget


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(clusters())
def test_the_parts_ask_for_exactly_the_whole_read_each_within_the_budget(
        drawn: tuple[list[PodView], list[str] | None, list[PodKey] | None, int]) -> None:
    covered, namespaces, named, budget = drawn
    parts = split(budget=budget, cost=COST, load=gpu_load, covered=covered, namespaces=namespaces,
                  pods=named)
    assert parts
    whole = sum(estimate(p, covered) for p in [Part(None, tuple(named)) if named is not None else
                                                Part(None if namespaces is None else tuple(namespaces))])
    if budget == 0 or whole <= budget:
        assert len(parts) == 1
        REACHED["one query, budget 0" if budget == 0 else "one query within the budget"] += 1
    elif len(parts) > 1:
        REACHED["pods split" if named is not None else "namespaces split" if namespaces is not None else
                "every namespace split, the others last"] += 1
    if named is not None:  # every named pod in exactly one part, in order
        assert all(p.namespaces is None and not p.outside for p in parts)
        assert [k for p in parts for k in p.pods or ()] == named
    elif namespaces is not None:  # every namespace in exactly one part
        assert all(p.pods is None and p.namespaces is not None for p in parts)
        assert sorted(n for p in parts for n in p.namespaces or ()) == sorted(namespaces)
    else:  # named namespaces once each, then (when split) every other namespace
        assert all(p.pods is None for p in parts)
        if len(parts) > 1:
            last = parts[-1]
            assert last.namespaces is None and sorted(last.outside) == sorted(
                n for p in parts[:-1] for n in p.namespaces or ())
            assert all(p.namespaces is not None for p in parts[:-1])
    for part in parts:  # each within the budget, unless one namespace or pod alone passes it
        items = ([Part(None, (k,)) for k in part.pods] if part.pods is not None else
                 [Part((n,)) for n in part.namespaces] if part.namespaces is not None else [part])
        costly = [i for i in items if estimate(i, covered) > COST.fixed]
        assert budget == 0 or estimate(part, covered) <= budget or len(costly) <= 1
        if budget and len(parts) > 1 and part.pods is None and estimate(part, covered) > budget:
            REACHED["a namespace alone above the budget"] += 1
        if part.pods is not None and len({k.namespace for k in part.pods}) > 1 and any(
                reads(part, p) and key(p) not in part.pods for p in covered):
            REACHED["a name shared by namespaces in one part"] += 1


def test_the_generator_reaches_each_case(request: pytest.FixtureRequest) -> None:
    """Checked after the property ran (it draws the same examples every time)."""
    if "test_the_parts_ask_for_exactly_the_whole_read_each_within_the_budget" not in {
            i.originalname for i in request.session.items}:
        pytest.skip("the property was not selected")
    missed = [what for what in SITUATIONS if REACHED[what] < 1]
    assert not missed, f"never reached: {missed} (all: {dict(REACHED)})"


# -- merging --------------------------------------------------------------------------------------------

SPAN = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", WINDOW, STEP, NOW)


def test_the_parts_answers_are_one_evidence() -> None:
    a = GpuSeries("0", 50.0, 960, "node-1", Quality())
    asked: list[Part] = []

    def ask(part: Part) -> GpuEvidence:
        asked.append(part)
        return GpuEvidence(SPAN, {PodKey(n, "p"): (a,) for n in part.namespaces or ()})

    found = read([Part(("a",)), Part(("b", "c"))], ask)
    assert found == GpuEvidence(SPAN, {PodKey("a", "p"): (a,), PodKey("b", "p"): (a,), PodKey("c", "p"): (a,)})
    assert len(asked) == 2
    cpu = read([Part(("a",)), Part(("b",))], lambda part: CpuEvidence(SPAN, {
        PodKey(n, "p"): CpuUsage(0.5, 240, Quality()) for n in part.namespaces or ()}))
    assert set(cpu.pods) == {PodKey("a", "p"), PodKey("b", "p")} and cpu.failed is None


def test_a_failed_part_fails_the_read_and_no_further_part_is_asked() -> None:
    asked: list[Part] = []

    def ask(part: Part) -> GpuEvidence:
        asked.append(part)
        if part.namespaces == ("b",):
            return GpuEvidence(SPAN, failed="query processing would load too many samples into memory")
        return GpuEvidence(SPAN, {PodKey("a", "p"): (GpuSeries("0", 0.0, 960, "n", Quality()),)})

    found = read([Part(("a",)), Part(("b",)), Part(("c",))], ask)
    assert found.failed == "part 2 of 3: query processing would load too many samples into memory"
    assert found.pods == {} and asked == [Part(("a",)), Part(("b",))]
    one = read([Part(("b",))], ask)
    assert one.failed == "query processing would load too many samples into memory"


# -- through read_evidence --------------------------------------------------------------------------------


class _Recording(PrometheusSource):
    """A Prometheus that records each query and answers every one with nothing found."""

    def __init__(self) -> None:
        super().__init__(PrometheusConfig(url="http://127.0.0.1:9"))
        self.queries: list[str] = []

    def active_targets(self) -> list[Any]:
        return [{"labels": {"job": "dcgm-exporter"}, "scrapeInterval": "15s"}]

    def instant(self, query: str, at: datetime.datetime, sink: RowSink | None = None) -> QueryResult:
        self.queries.append(query)
        return parse_answer(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}', query, sink)


def _namespaces_named(query: str) -> set[str]:
    """The namespaces a usage query's selectors ask for (`namespace=~"..."`)."""
    return {n for found in re.findall(r'namespace=~"([^"]*)"', query) for n in found.split("|")}


def test_a_whole_read_above_the_budget_sends_one_query_per_part() -> None:
    policy = Policy("idle", (IdleGpu(threshold=5.0, window=WINDOW),), match=Match())
    need = observation.needs([policy])
    covered = [pod(f"team-{t}", f"p{i}", gpus=8) for t in "abc" for i in range(2)]
    budget = COST.of_series(16)  # one namespace's 16 GPUs a part
    source = _Recording()
    settings = Settings(prometheus=PrometheusSettings(url="http://127.0.0.1:9", query_samples=budget))
    found = observation.read_evidence(source, settings, need, NOW, namespaces=["team-a", "team-b", "team-c"],
                                      covered=covered)
    assert all(e.failed is None for e in found.gpu.values())
    assert [_namespaces_named(q) for q in source.queries] == [{"team-a"}, {"team-b"}, {"team-c"}]
    source.queries.clear()
    one = Settings(prometheus=PrometheusSettings(url="http://127.0.0.1:9", query_samples=0))
    observation.read_evidence(source, one, need, NOW, namespaces=["team-a", "team-b", "team-c"], covered=covered)
    assert [_namespaces_named(q) for q in source.queries] == [{"team-a", "team-b", "team-c"}]


def _pods_named(query: str) -> set[str]:
    return {n for found in re.findall(r'pod=~"([^"]*)"', query) for n in found.split("|")}


def test_a_steady_cycles_whole_read_names_its_pods_part_by_part() -> None:
    """The carry's whole read of the pods it does not carry (here every pod: nothing was busy)."""
    policy = Policy("idle", (IdleGpu(threshold=5.0, window=WINDOW),), match=Match())
    need = observation.needs([policy])
    covered = [pod("team-a", f"p{i}", gpus=4) for i in range(4)]
    source = _Recording()
    source.runtime = lambda: Runtime(NOW - WINDOW, NOW - WINDOW)  # type: ignore[method-assign]
    budget = COST.of_series(8)  # two pods a part
    settings = Settings(prometheus=PrometheusSettings(url="http://127.0.0.1:9", query_samples=budget))
    carry = BusyCarry(datetime.timedelta(minutes=3))
    observation.read_evidence(source, settings, need, NOW, namespaces=["team-a"], carry=carry, covered=covered)
    assert [_namespaces_named(q) for q in source.queries] == [{"team-a"}]  # one namespace: one part
    source.queries.clear()
    observation.read_evidence(source, settings, need, NOW + datetime.timedelta(minutes=1), namespaces=["team-a"],
                              carry=carry, covered=covered)
    busy, *whole = source.queries
    assert not _pods_named(busy)
    assert [_pods_named(q) for q in whole] == [{"p0", "p1"}, {"p2", "p3"}]


def test_a_budget_that_is_not_a_whole_number_of_samples_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from janitor import cli

    for bad in ("-1", "5M", "1.5"):
        with pytest.raises(SystemExit) as stop:
            cli.build_parser().parse_args(["plan", "--prometheus-query-samples", bad])
        assert stop.value.code == 2
        assert f"{bad!r}: give a whole number of samples, 0 or more" in capsys.readouterr().err
    assert cli.build_parser().parse_args(["plan", "--prometheus-query-samples", "0"]).prometheus_query_samples == 0
