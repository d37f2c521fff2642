"""The daemon's heap between cycles: what lives on is frozen out of the cyclic collector's walk.

Why: the watch cache keeps a value per object, hundreds of thousands of tracked objects at 12,500
pods and over a million at 50,000, and CPython's cyclic collector walks every tracked object at
each full collection. A cycle's work (the cache's snapshot, the evidence, the plan, the verdicts
it keeps) leaves enough new objects alive to set off two or three full collections every steady
cycle, each a walk of the whole cache that finds nothing: the cache's values are acyclic and die
by reference counting. At 12,500 pods that walking was a third of a steady cycle's CPU
(`bench/cluster_scale.py`, `gc_seconds`). So the daemon runs each cycle with the collector off
(cyclic garbage a cycle makes waits for its end, a cycle's budget at most), keeps it off while it
handles the cycle's result (a collection then walked the plan and the evidence just before they
were dropped: a tenth of a steady cycle's CPU), and then collects once and freezes what is alive
(`gc.freeze`): from then on the collector walks only what is younger than the last cycle, here and
in the watch threads between cycles.

A frozen value is still freed by reference counting when dropped; only one that has become part of
a garbage cycle since it was frozen is not, until the heap thaws: every `THAW_EVERY` the heap is
unfrozen and collected whole once, so such garbage is kept an hour at most. The one-shot commands
keep the collector as it is (their plan alone runs with it paused, `cycle.observe_and_plan`)."""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import gc
import os
import time
from collections.abc import Callable, Iterator

THAW_EVERY = datetime.timedelta(hours=1)
ARENAS = 2  # malloc arenas the daemon's threads share (`fewer_arenas`)
MMAP_THRESHOLD = 128 * 1024  # bytes from which a block is its own mapping (`fixed_mmap_threshold`)
_M_ARENA_MAX = -8  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block, then as it was (a block within one changes nothing)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class Heap:
    """The collector's regime around the daemon's cycles (one per daemon)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.thawed_at = clock()

    @staticmethod
    def cycle() -> contextlib.AbstractContextManager[None]:
        """The collector off while the daemon runs (or waits on) a cycle and handles its result.

        The context ends when the daemon is done with the cycle, also with one it abandoned past
        its budget, so a cycle that never returns cannot keep the collector off."""
        return collector_paused()

    def settle(self) -> None:
        """After a cycle, once its result is dropped (the plan and the evidence go by reference
        counting, so the collection walks what lives on, not them): collect what is left (and,
        once every `THAW_EVERY`, the whole heap), then freeze the rest. The collector is on after
        it: an abandoned cycle's own pause (its plan's) may have caught it on as the daemon's ended."""
        gc.enable()
        now = self.clock()
        if now - self.thawed_at >= THAW_EVERY.total_seconds():
            gc.unfreeze()
            self.thawed_at = now
        gc.collect()
        gc.freeze()

    @staticmethod
    def frozen() -> int:
        """Objects out of the collector's walk (janitor_heap_frozen_objects)."""
        return gc.get_freeze_count()


def fewer_arenas(arenas: int = ARENAS) -> bool:
    """At most `arenas` malloc arenas for the daemon's threads (glibc's `mallopt`, as
    MALLOC_ARENA_MAX would set it), called before the watch threads start; True if it took.

    Why: glibc gives threads that allocate at once arenas of their own, up to eight per core, and
    each arena keeps the memory freed in it for its next allocations. The watch threads decode
    pages and events while the cycle decodes Prometheus' answers, so each kept its own high-water
    mark: at 12,500 pods two arenas took the peak RSS from 204 MB to 183-191 MB, with no more CPU
    (`bench/cluster_scale.py`, two runs). An admin's MALLOC_ARENA_MAX (or glibc.malloc.arena_max
    in GLIBC_TUNABLES) is left as it is; another C library (musl) is left alone."""
    return _mallopt(_M_ARENA_MAX, arenas, "MALLOC_ARENA_MAX", "arena_max")


def fixed_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Every block of `threshold` bytes or more in a mapping of its own, handed back to the system
    when freed (glibc's `mallopt`, as MALLOC_MMAP_THRESHOLD_ would set it); True if it took.

    Why: glibc starts at this threshold but raises it to the size of any mapped block freed, up to
    32 MB. A cycle frees big blocks (Prometheus' answers, a page of pods, the arrays of the dicts
    that index 50,000 pods), so after the first cycle they all came from the heap, where a freed
    one stays the process's as long as a small live object sits above it. Fixed, they come and go
    as mappings: at 12,500 pods the peak RSS over four cycles fell from 186 MB to 165-167 MB
    (`bench/cluster_scale.py`, two runs against one on one sandbox), for a few more system calls.
    An admin's MALLOC_MMAP_THRESHOLD_ (or glibc.malloc.mmap_threshold in GLIBC_TUNABLES) stands;
    another C library is left alone."""
    return _mallopt(_M_MMAP_THRESHOLD, threshold, "MALLOC_MMAP_THRESHOLD_", "mmap_threshold")


def _mallopt(parameter: int, value: int, variable: str, tunable: str) -> bool:
    if variable in os.environ or f"glibc.malloc.{tunable}" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(parameter, value))
