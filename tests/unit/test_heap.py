"""The daemon's heap between cycles (janitor/heap.py), as its cycles leave it.

Aspects covered:
- a cycle runs with the cyclic collector off, and it is on again once the cycle ends, or once the
  daemon abandons a cycle past its budget (the cycle's thread may run on for a long while); it
  stays off while the daemon handles the cycle's result, until the heap settles;
- what a cycle leaves as cyclic garbage is collected when it ends;
- what is alive when a cycle ends is frozen out of the collector's walk, and
  `janitor_heap_frozen_objects` says how much; the cycle's result is not (it is dropped first);
- a frozen value that later becomes cyclic garbage is not kept past the next thaw (`THAW_EVERY`);
- the daemon's threads share two malloc arenas where the C library is glibc, unless the admin set
  MALLOC_ARENA_MAX.
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from janitor import cycle, heap
from janitor.cycle import CycleResult, Ports
from janitor.daemon import _Cycles
from janitor.settings import Settings
from janitor.telemetry import Telemetry

ROOT = Path(__file__).resolve().parents[2]


class Knot:
    """A value in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    gc.unfreeze()
    yield
    gc.unfreeze()
    if not was:
        gc.disable()
    gc.collect()


def _cycles(clock: Clock, budget: float = 600.0) -> _Cycles:
    settings = Settings(interval=datetime.timedelta(seconds=60), cycle_budget=datetime.timedelta(seconds=budget))
    daemon = _Cycles(Ports(api=None), settings, Telemetry(), None)  # type: ignore[arg-type]
    daemon.heap = heap.Heap(clock=clock)
    return daemon


def _failing(seen: dict[str, Any], make: Callable[[], object] | None = None) -> Callable[..., CycleResult]:
    """A cycle that records what it saw of the collector, makes what `make` makes, and fails (the
    daemon handles the failure as any other)."""

    def run_cycle(*_: object) -> CycleResult:
        seen["enabled"] = gc.isenabled()
        if make is not None:
            make()
        raise RuntimeError("this cycle stops here")

    return run_cycle


def test_a_cycle_runs_with_the_collector_off_and_it_is_on_again_after(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(cycle, "run_cycle", _failing(seen))
    _cycles(Clock()).job()
    assert seen["enabled"] is False
    assert gc.isenabled()



def test_the_collector_stays_off_while_the_daemon_handles_the_cycles_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The result (the plan, the evidence, the observation) is alive until it is handled: a
    collection then would walk all of it only to see it freed a moment later, at 50,000 pods half
    a second of a steady cycle. The collector waits for the heap to settle."""
    monkeypatch.setattr(cycle, "run_cycle", _failing({}))
    seen: list[bool] = []
    daemon = _cycles(Clock())
    handle = daemon._finished
    monkeypatch.setattr(daemon, "_finished", lambda outcome: (seen.append(gc.isenabled()), handle(outcome)))
    daemon.job()
    assert seen == [False]
    assert gc.isenabled()

def test_the_garbage_cycles_a_cycle_leaves_are_collected_when_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    refs: list[weakref.ref[Knot]] = []
    monkeypatch.setattr(cycle, "run_cycle", _failing({}, lambda: refs.append(weakref.ref(Knot()))))
    _cycles(Clock()).job()
    assert refs and refs[0]() is None


def test_what_lives_on_after_a_cycle_is_frozen_and_counted_but_not_its_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[object] = []
    result: list[weakref.ref[Knot]] = []

    def run_cycle(*_: object) -> CycleResult:
        kept.append({"a value the next cycle reads": [1, 2, 3]})
        error = RuntimeError("the cycle's outcome")
        knot = Knot()
        result.append(weakref.ref(knot))
        error.knot = knot  # type: ignore[attr-defined]  # held by the outcome only
        raise error

    monkeypatch.setattr(cycle, "run_cycle", run_cycle)
    monkeypatch.setattr(logging.getLogger("janitor.daemon"), "disabled", True)  # no log record holds the outcome
    daemon = _cycles(Clock())
    assert gc.get_freeze_count() == 0
    daemon.job()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    assert daemon.telemetry.registry.get_sample_value("janitor_heap_frozen_objects") == frozen
    # no generation the collector walks holds what the cycle left alive
    assert not any(o is kept[0] for o in gc.get_objects())
    # the outcome was dropped before the freeze: its garbage is gone, not frozen until the thaw
    assert result[0]() is None


def test_a_frozen_value_that_becomes_garbage_goes_at_the_next_thaw(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    kept: list[Knot] = []
    monkeypatch.setattr(cycle, "run_cycle", _failing({}, lambda: kept.append(Knot()) if not kept else None))
    daemon = _cycles(clock)
    daemon.job()  # the knot is alive, so it is frozen
    ref = weakref.ref(kept.pop())
    clock.now += 60
    daemon.job()
    gc.collect()
    assert ref() is not None  # frozen garbage waits for the thaw...
    clock.now += heap.THAW_EVERY.total_seconds()
    daemon.job()
    assert ref() is None  # ...and no longer
    assert gc.get_freeze_count() > 0  # frozen again after the thaw


def test_a_cycle_abandoned_past_its_budget_leaves_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    seen: dict[str, Any] = {}

    def hung(*_: object) -> CycleResult:
        seen["enabled"] = gc.isenabled()
        release.wait(10)
        raise RuntimeError("it answered at last")

    monkeypatch.setattr(cycle, "run_cycle", hung)
    daemon = _cycles(Clock(), budget=0.5)
    try:
        daemon.job()
        assert seen["enabled"] is False
        assert daemon.abandoned, "the cycle was abandoned"
        assert gc.isenabled()
    finally:
        release.set()
        for thread in daemon.abandoned:
            thread.join(5)


def test_the_collector_is_on_after_the_heap_settles_whatever_left_it_off() -> None:
    """A cycle abandoned past its budget still plans on its thread: its own pause may read the
    collector on just as the daemon's ends, and turn it off for good (a standby would then never
    collect). Settling, which only the daemon's job does, leaves it on."""
    gc.disable()
    heap.Heap(clock=Clock()).settle()
    assert gc.isenabled()


def test_the_daemons_threads_share_two_malloc_arenas_unless_the_admin_set_their_number(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert heap.fewer_arenas() is True  # glibc, as here and in the image
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert heap.fewer_arenas() is False  # the admin's number stands (glibc read it at start)


def test_fewer_arenas_changes_nothing_where_the_c_library_is_not_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(heap.ctypes, "CDLL", _no_glibc)
    assert heap.fewer_arenas() is False


# -- found by an adversarial read ----------------------------------------------------------------------------


class Standby:
    """An elector whose replica does not hold the lease (as one is after abandoning a cycle)."""

    def is_leader(self) -> bool:
        return False


def test_a_standby_turns_the_collector_on_whatever_an_abandoned_cycle_left() -> None:
    """An abandoned cycle's own plan pause may catch the collector on as the daemon's ends, and turn
    it off for good; the replica then steps down, and a standby's job returns early every interval:
    its watch threads' cyclic garbage would never be collected."""
    daemon = _cycles(Clock())
    daemon.elector = Standby()  # type: ignore[assignment]
    gc.disable()
    daemon.job()
    assert gc.isenabled()


def test_too_many_abandoned_cycles_leave_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    daemon = _cycles(Clock())
    alive = threading.Event()
    waiting = [threading.Thread(target=alive.wait, args=(10,)) for _ in range(10)]
    for thread in waiting:
        thread.start()
    daemon.abandoned = waiting
    monkeypatch.setattr(logging.getLogger("janitor.daemon"), "disabled", True)
    try:
        gc.disable()
        daemon.job()
        assert gc.isenabled()
    finally:
        alive.set()
        for thread in waiting:
            thread.join(5)


def test_an_arena_number_set_through_glibc_tunables_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=4")
    assert heap.fewer_arenas() is False


_MAPPED_AFTER_A_BIG_FREE = """
import ctypes, sys
from janitor import heap

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    assert heap.fixed_mmap_threshold()
big = bytes(8 << 20)  # a cycle's answer: mapped, and glibc's threshold rises to its size once freed
del big
before = libc.mallinfo2().hblks
block = bytes(512 << 10)  # the next cycle's page
print(libc.mallinfo2().hblks - before)
"""


def _mapped_after_a_big_free(how: str) -> int:
    """In a process of its own, without any malloc setting of this one's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-c", _MAPPED_AFTER_A_BIG_FREE, how], capture_output=True, text=True,
                          check=True, env=env, cwd=ROOT)
    return int(done.stdout)


def test_big_blocks_stay_mappings_handed_back_when_freed() -> None:
    """glibc raises its threshold to any mapped block freed: after a big answer, the next page of
    half a megabyte comes from the heap, where it can stay the process's once freed. Fixed, it is
    a mapping of its own (a process of its own for each: the setting is the process's)."""
    assert _mapped_after_a_big_free("glibc's own") == 0
    assert _mapped_after_a_big_free("fixed") == 1


def test_an_admins_mmap_threshold_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert heap.fixed_mmap_threshold() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")
    assert heap.fixed_mmap_threshold() is False
    monkeypatch.setattr(heap.ctypes, "CDLL", _no_glibc)
    monkeypatch.delenv("GLIBC_TUNABLES")
    assert heap.fixed_mmap_threshold() is False  # musl: nothing to set


def _no_glibc(name: str) -> object:
    raise OSError(f"{name}: cannot open shared object file")
