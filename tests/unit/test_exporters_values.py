"""The value store tests write to: one timeline per key, defaults, history, JSON.

Aspects covered:
- documented defaults (GPU 0 %, GR_ENGINE_ACTIVE following GPU util, CPU 0.002 cores, node 0);
- live changes take effect at their clock time, not before;
- wildcard vs exact keys: the later change wins; history segments win over live values;
- ABSENT is kept distinct from 0 and from "unset";
- reset() returns to defaults from now on but keeps the past (counters stay monotonic);
- the integral used for CPU counters over piecewise-constant segments;
- validation errors name the problem; JSON round trip (the control API's format).
"""

from __future__ import annotations

import json

import pytest

from devenv.exporters.values import ABSENT, DEFAULTS, Kind, Segment, Values, make_key


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock(1000.0)


@pytest.fixture
def values(clock: Clock) -> Values:
    return Values(clock=clock)


def test_defaults_for_a_pod_that_does_nothing(values: Values) -> None:
    assert values.level(Kind.GPU_UTIL, ("ns", "p", 0), 1000) == 0
    assert values.level(Kind.GR_ENGINE_ACTIVE, ("ns", "p", 0), 1000) == 0.0
    assert values.level(Kind.CPU, ("ns", "p", "c"), 1000) == DEFAULTS[Kind.CPU] == 0.002
    assert values.level(Kind.NODE_DSTATE, ("n",), 1000) == 0
    assert values.level(Kind.NODE_OOM_KILLS, ("n",), 1000) == 0


def test_changes_apply_from_their_clock_time(values: Values, clock: Clock) -> None:
    values.set_gpu_util("ns", "p", 80, gpu=0)
    assert values.level(Kind.GPU_UTIL, ("ns", "p", 0), 999.9) == 0
    assert values.level(Kind.GPU_UTIL, ("ns", "p", 0), 1000) == 80
    assert values.level(Kind.GR_ENGINE_ACTIVE, ("ns", "p", 0), 1000) == pytest.approx(0.8)


def test_latest_of_exact_and_wildcard_wins(values: Values, clock: Clock) -> None:
    values.set_gpu_util("ns", "p", 10, gpu=1)
    clock.t = 1010
    values.set_gpu_util("ns", "p", 50)
    assert values.level(Kind.GPU_UTIL, ("ns", "p", 1), 1005) == 10
    assert values.level(Kind.GPU_UTIL, ("ns", "p", 1), 1010) == 50
    clock.t = 1020
    values.set_gpu_util("ns", "p", 70, gpu=1)
    assert values.level(Kind.GPU_UTIL, ("ns", "p", 1), 1020) == 70
    assert values.level(Kind.GPU_UTIL, ("ns", "p", 0), 1020) == 50


def test_history_wins_where_it_covers(values: Values) -> None:
    values.set_cpu("ns", "p", "c", 1.5)
    values.add_history(Kind.CPU, ("ns", "p", "c"), [(900, 1100, 4.0), Segment(1100, 1200, ABSENT)])
    assert values.level(Kind.CPU, ("ns", "p", "c"), 899) == 0.002
    assert values.level(Kind.CPU, ("ns", "p", "c"), 1000) == 4.0
    assert values.level(Kind.CPU, ("ns", "p", "c"), 1150) == ABSENT
    assert values.level(Kind.CPU, ("ns", "p", "c"), 1200) == 1.5


def test_absent_is_neither_zero_nor_unset(values: Values, clock: Clock) -> None:
    values.set_absent("gpu_util", "ns", "p")
    assert values.resolve(Kind.GPU_UTIL, ("ns", "p", 3), 1000) == ABSENT
    assert values.level(Kind.GR_ENGINE_ACTIVE, ("ns", "p", 3), 1000) == 0.0
    clock.t = 1001
    values.unset("gpu_util", "ns", "p")
    assert values.resolve(Kind.GPU_UTIL, ("ns", "p", 3), 1001) is None


def test_reset_goes_back_to_defaults_but_keeps_the_past(values: Values, clock: Clock) -> None:
    values.set_cpu("ns", "p", "c", 2.0)
    values.add_history(Kind.NODE_DSTATE, ("n",), [(500, 5000, 4)])
    clock.t = 1100
    before = values.integrate(Kind.CPU, ("ns", "p", "c"), 0, 1100)
    values.reset()
    assert values.level(Kind.CPU, ("ns", "p", "c"), 1050) == 2.0
    assert values.level(Kind.CPU, ("ns", "p", "c"), 1100) == 0.002
    assert values.level(Kind.NODE_DSTATE, ("n",), 1099) == 4
    assert values.level(Kind.NODE_DSTATE, ("n",), 1100) == 0
    assert values.integrate(Kind.CPU, ("ns", "p", "c"), 0, 1100) == pytest.approx(before)


def test_integrate_piecewise(values: Values, clock: Clock) -> None:
    key = ("ns", "p", "c")
    values.add_history(Kind.CPU, key, [(0, 100, 1.0), (100, 200, ABSENT)])
    values.apply({"set": [{"kind": "cpu", "key": list(key), "value": 3.0, "at": 250}]})
    # 100*1 + 100*default(absent) + 50*default + 50*3
    assert values.integrate(Kind.CPU, key, 0, 300) == pytest.approx(100 + 100 * 0.002 + 50 * 0.002 + 150)
    assert values.integrate(Kind.CPU, key, 300, 300) == 0.0


@pytest.mark.parametrize(("kind", "key", "message"), [
    ("gpu_util", ("ns",), "needs a key of 3 parts"),
    ("node_dstate", ("a", "b"), "needs a key of 1 parts"),
    ("nope", ("n",), "nope"),
])
def test_bad_keys_are_refused(kind: str, key: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_key(kind, key)


def test_bad_values_and_segments_are_refused(values: Values) -> None:
    with pytest.raises(ValueError, match="must be a number"):
        values.set_gpu_util("ns", "p", "high")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="before end"):
        Segment(10, 10, 1)
    with pytest.raises(ValueError):
        values.apply({"set": [{"kind": "cpu", "key": ["ns", "p", "c"], "value": True}]})


def test_json_round_trip(values: Values, clock: Clock) -> None:
    values.set_gpu_util("ns", "p", 30, gpu=0)
    values.set_absent("cpu", "ns", "p", "c")
    values.add_history("gpu_util", ("ns", "p", None), [(0, 500, 90)])
    clock.t = 1010
    values.set_node_oom_kills("n", 2)
    data = json.loads(json.dumps(values.to_json()))
    copy = Values.from_json(data, clock=clock)
    for kind, key, t in [(Kind.GPU_UTIL, ("ns", "p", 0), 100), (Kind.GPU_UTIL, ("ns", "p", 0), 1005),
                         (Kind.CPU, ("ns", "p", "c"), 1005), (Kind.NODE_OOM_KILLS, ("n",), 1005),
                         (Kind.NODE_OOM_KILLS, ("n",), 1010)]:
        assert copy.level(kind, key, t) == values.level(kind, key, t)
    assert copy.to_json() == data
