"""Pod judgements of the idle triggers, kept from one cycle for the next.

Why: at tens of thousands of pods, judging every running pod on every idle policy is the largest
share of a steady cycle's `plan()`, and almost every pod and its evidence are the same as a
minute ago. A judgement is a function of the pod view, its evidence (the GPU series or the CPU
usage), the policy's trigger and the evidence window, and of `now` only through the pod's age,
which the judge checks before asking here (a young pod is never remembered). So a judgement is
reused only when every one of those is equal to what it was judged on: the plan is the same with
or without this cache, and it can be dropped at any moment (DESIGN.md: the process holds only
caches that can be rebuilt). A property test plans cycle after cycle with and without it.

Pods are compared by identity first (the watch cache hands the same view while the pod is
unchanged), then by value; evidence by value, since each cycle's answers are new objects.
Entries not used in a cycle are dropped at the start of the next, so the cache holds at most the
pods of the last cycle times the idle triggers.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from janitor.decide.model import PodJudgement, PodView

_Entry = tuple[PodView, Any, PodJudgement, int]


class Table:
    """One trigger's judgements (one policy's trigger over one evidence window), by pod uid."""

    __slots__ = ("_entries", "_cycle", "hits", "misses")

    def __init__(self, cycle: int) -> None:
        self._entries: dict[str, _Entry] = {}
        self._cycle = cycle
        self.hits = 0
        self.misses = 0

    def recall(self, pod: PodView, evidence: object) -> PodJudgement | None:
        """The judgement made on this pod with this evidence, or None."""
        entry = self._entries.get(pod.ref.uid)
        if entry is not None:
            seen, judged_on, judgement, _ = entry
            if (seen is pod or seen == pod) and (judged_on is evidence or judged_on == evidence):
                self._entries[pod.ref.uid] = (pod, evidence, judgement, self._cycle)
                self.hits += 1
                return judgement
        self.misses += 1
        return None

    def keep(self, pod: PodView, evidence: object, judgement: PodJudgement) -> None:
        self._entries[pod.ref.uid] = (pod, evidence, judgement, self._cycle)

    def _sweep(self, cycle: int) -> None:
        """Forget what the cycle before this one did not use, and count this cycle afresh."""
        last = self._cycle
        self._entries = {uid: e for uid, e in self._entries.items() if e[3] >= last}
        self._cycle, self.hits, self.misses = cycle, 0, 0

    def __len__(self) -> int:
        return len(self._entries)


class Judgements:
    """The tables of every idle trigger, carried by the shell from cycle to cycle.

    Not thread-safe: one plan at a time uses it (the cycle's); a re-check plans without it."""

    def __init__(self) -> None:
        self._tables: dict[Hashable, Table] = {}
        self._cycle = 0

    def next_cycle(self) -> None:
        """Begin a cycle: tables no trigger asked for last cycle go, entries it did not use too."""
        last = self._cycle
        self._cycle += 1
        self._tables = {scope: t for scope, t in self._tables.items() if t._cycle >= last}
        for table in self._tables.values():
            table._sweep(self._cycle)

    def table(self, scope: Hashable) -> Table:
        """The table of one trigger, `scope` being everything its judgements depend on besides the
        pod and its evidence (the trigger's settings and the evidence window's length and step)."""
        table = self._tables.get(scope)
        if table is None:
            table = self._tables[scope] = Table(self._cycle)
        else:
            table._cycle = self._cycle
        return table

    def counts(self) -> tuple[int, int, int]:
        """Judgements reused and made this cycle, and entries held."""
        tables = self._tables.values()
        return sum(t.hits for t in tables), sum(t.misses for t in tables), sum(len(t) for t in tables)
