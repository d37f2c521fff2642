"""What the synthetic exporters report: usage values that tests set, over time.

Tests never write series; they set *usage* per pod (GPU utilisation per GPU slot, CPU cores per
container) or per node (D-state processes, OOM kills), and the renderers turn that into each
exporter's series. Every key has one timeline, so a live scrape, the cAdvisor counter integral and
the backfill all read the same function of time:

* history segments `(start, end, value)` (half-open) win where they cover `t`; among overlapping
  segments the one added last wins;
* otherwise the latest live change at or before `t` (changes are stamped with the store's clock);
* otherwise the default below.

A value is a number, `ABSENT` (the exporter does not export the series: "no data", which must
never be read as idle), or `None` (back to the default). The last key element may be `None` as a
wildcard: `(ns, pod, None)` means every GPU slot / every container of the pod; an exact key
beats the wildcard only if it was set later (or covers `t` in history).

Defaults, chosen for a pod that does nothing (stated so tests can rely on them):

* GPU utilisation 0 %: an allocated GPU running no kernels reads 0 in `DCGM_FI_DEV_GPU_UTIL`.
* GR_ENGINE_ACTIVE and SM_ACTIVE: follow the slot's GPU utilisation / 100 when that is a number
  (busy GPUs are busy on every signal), else 0.0. Set them explicitly to emulate a broken PROF
  signal, a hung job (GPU_UTIL 100, SM_ACTIVE near 0) or a node without PROF fields (ABSENT).
* Power: `IDLE_WATTS` plus the utilisation's share of `BUSY_WATTS - IDLE_WATTS` (an A100's).
* CPU 0.002 cores per app container: a sleeping process plus runtime noise is a few millicores,
  never exactly 0. The pause container accrues `PAUSE_CPU_CORES` (not settable).
* Node D-state processes 0 and OOM kills 0.
* No `pod_uid` label on dcgm-exporter's series (its `--kubernetes-enable-pod-uid` is off by
  default). Set per node or for all (`set_pod_uid`); as a timeline, so an exporter restarted
  with the flag turned on within a window is a history segment.

For the cAdvisor counter, stretches where a container's CPU is `ABSENT` accrue the default rate,
so the counter stays monotonic and continuous when the series comes back.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Literal, TypeAlias

ABSENT: Final = "absent"
Level: TypeAlias = int | float | Literal["absent"]
Setting: TypeAlias = Level | None
Key: TypeAlias = tuple[Any, ...]

PAUSE_CPU_CORES: Final = 0.00002


class Kind(StrEnum):
    """What a value means; the key shape is given per kind."""

    GPU_UTIL = "gpu_util"  # (namespace, pod, slot | None), percent 0..100
    GR_ENGINE_ACTIVE = "gr_engine_active"  # (namespace, pod, slot | None), ratio 0..1
    SM_ACTIVE = "sm_active"  # (namespace, pod, slot | None), ratio 0..1
    POWER = "power"  # (namespace, pod, slot | None), watts
    CPU = "cpu"  # (namespace, pod, container | None), cores
    NODE_DSTATE = "node_dstate"  # (node,), processes in state D
    NODE_OOM_KILLS = "node_oom_kills"  # (node,), node_vmstat_oom_kill counter value
    TARGET_DOWN = "target_down"  # ("<exporter>/<node>",), 1 = the target fails its scrapes
    GHOST_GPU = "ghost_gpu"  # ("<node>/<gpu index>",), MiB of GPU memory in use with no pod on the GPU
    POD_UID = "pod_uid"  # ("<node>",) or (ALL_NODES,), 1 = dcgm-exporter runs with --kubernetes-enable-pod-uid


DEFAULTS: Final[Mapping[Kind, float]] = {
    Kind.GPU_UTIL: 0,
    Kind.GR_ENGINE_ACTIVE: 0.0,
    Kind.SM_ACTIVE: 0.0,
    Kind.POWER: 55.0,
    Kind.CPU: 0.002,
    Kind.NODE_DSTATE: 0,
    Kind.NODE_OOM_KILLS: 0,
    Kind.TARGET_DOWN: 0,
    Kind.GHOST_GPU: 0,
    Kind.POD_UID: 0,
}
_FLAGS = frozenset({Kind.POD_UID})  # how the exporter runs, not what it measured
ALL_NODES: Final = "*"  # the POD_UID key of every node; a node's own setting beats it
_POD_KINDS = frozenset({Kind.GPU_UTIL, Kind.GR_ENGINE_ACTIVE, Kind.SM_ACTIVE, Kind.POWER, Kind.CPU})
_GPU_KINDS = frozenset({Kind.GPU_UTIL, Kind.GR_ENGINE_ACTIVE, Kind.SM_ACTIVE, Kind.POWER})
IDLE_WATTS: Final = 55.0  # what an A100 draws with nothing running
BUSY_WATTS: Final = 400.0  # and at full load


@dataclass(frozen=True, slots=True)
class Segment:
    """A constant value over [start, end) in unix seconds."""

    start: float
    end: float
    value: Level

    def __post_init__(self) -> None:
        if not self.start < self.end:
            raise ValueError(f"segment start {self.start} must be before end {self.end}")
        _check_level(self.value)


def _check_level(value: Setting) -> None:
    if value is None or value == ABSENT:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"value must be a number, {ABSENT!r} or None, got {value!r}")


def make_key(kind: Kind | str, key: Iterable[Any]) -> tuple[Kind, Key]:
    """Validate and normalise a key (JSON lists become tuples, pod keys are padded with None)."""
    k = Kind(kind)
    parts = tuple(key)
    size = 3 if k in _POD_KINDS else 1
    if len(parts) < size and k in _POD_KINDS and len(parts) == 2:
        parts = (*parts, None)
    if len(parts) != size or any(not isinstance(p, str) for p in parts[: size - 1 or 1]):
        raise ValueError(f"{k.value} needs a key of {size} parts, got {parts!r}")
    if k in _GPU_KINDS and parts[2] is not None:
        parts = (parts[0], parts[1], int(parts[2]))
    return k, parts


def target_key(exporter: str, node: str | None) -> str:
    """The key of a scrape target in `Kind.TARGET_DOWN`."""
    return f"{exporter}/{node or ''}"


def _candidates(kind: Kind, key: Key) -> list[Key]:
    """The exact key first, then its wildcard (pod kinds only)."""
    if kind in _POD_KINDS and key[2] is not None:
        return [key, (key[0], key[1], None)]
    return [key]


class ValueSetters:
    """Typed setters shared by the in-process store and the HTTP client (`ValuesControl`).

    Subclasses provide `_send(body)` taking the JSON body of `POST /_values`, so a test reads the
    same whether the exporters run in this process or in another one.
    """

    def _send(self, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def set(self, kind: Kind | str, key: Iterable[Any], value: Setting) -> None:
        k, parts = make_key(kind, key)
        _check_level(value)
        self._send({"set": [{"kind": k.value, "key": list(parts), "value": value}]})

    def set_many(self, settings: Iterable[tuple[Kind | str, Iterable[Any], Setting]]) -> None:
        """Several settings in one request: a big cluster's worth of pods at once."""
        items = []
        for kind, key, value in settings:
            k, parts = make_key(kind, key)
            _check_level(value)
            items.append({"kind": k.value, "key": list(parts), "value": value})
        self._send({"set": items})

    def add_history(
        self, kind: Kind | str, key: Iterable[Any], segments: Iterable[Segment | tuple[float, float, Level]]
    ) -> None:
        k, parts = make_key(kind, key)
        segs = [s if isinstance(s, Segment) else Segment(*s) for s in segments]
        self._send(
            {"history": [{"kind": k.value, "key": list(parts), "segments": [[s.start, s.end, s.value] for s in segs]}]}
        )

    def set_gpu_util(self, namespace: str, pod: str, value: Setting, gpu: int | None = None) -> None:
        """Percent 0..100 for GPU slot `gpu` of the pod (None: all its GPUs)."""
        self.set(Kind.GPU_UTIL, (namespace, pod, gpu), value)

    def set_gr_engine_active(self, namespace: str, pod: str, value: Setting, gpu: int | None = None) -> None:
        """Ratio 0..1 for GPU slot `gpu` (None: all); also what MIG instances report."""
        self.set(Kind.GR_ENGINE_ACTIVE, (namespace, pod, gpu), value)

    def set_sm_active(self, namespace: str, pod: str, value: Setting, gpu: int | None = None) -> None:
        """Ratio 0..1 of cycles an SM had a warp, for GPU slot `gpu` (None: all)."""
        self.set(Kind.SM_ACTIVE, (namespace, pod, gpu), value)

    def set_power(self, namespace: str, pod: str, watts: Setting, gpu: int | None = None) -> None:
        """Watts drawn by GPU slot `gpu` (None: all)."""
        self.set(Kind.POWER, (namespace, pod, gpu), watts)

    def set_cpu(self, namespace: str, pod: str, container: str | None, cores: Setting) -> None:
        """CPU cores used by a container (None: all app containers of the pod)."""
        self.set(Kind.CPU, (namespace, pod, container), cores)

    def set_absent(self, kind: Kind | str, *key: Any) -> None:
        """Stop exporting the series: e.g. `set_absent("gpu_util", ns, pod)` or `("node_dstate", node)`."""
        self.set(kind, key, ABSENT)

    def unset(self, kind: Kind | str, *key: Any) -> None:
        """Back to the default from now on."""
        self.set(kind, key, None)

    def set_node_dstate(self, node: str, n: Setting) -> None:
        self.set(Kind.NODE_DSTATE, (node,), n)

    def set_node_oom_kills(self, node: str, n: Setting) -> None:
        self.set(Kind.NODE_OOM_KILLS, (node,), n)

    def set_ghost_gpu(self, node: str, gpu: int, mib: Setting) -> None:
        """Memory in use on a GPU no pod holds: a process of a deleted pod that did not let go."""
        self.set(Kind.GHOST_GPU, (f"{node}/{gpu}",), mib)

    def set_pod_uid(self, on: bool = True, node: str | None = None) -> None:
        """dcgm-exporter labels pods' GPU series with `pod_uid` from now on (or stops), on `node`
        (None: every node without a setting of its own)."""
        self.set(Kind.POD_UID, (node or ALL_NODES,), 1 if on else 0)

    def set_target_down(self, exporter: str, node: str, down: bool = True) -> None:
        """Make one exporter of one node fail its scrapes (503, `up == 0`), or recover."""
        self.set(Kind.TARGET_DOWN, (target_key(exporter, node),), 1 if down else 0)

    def reset(self) -> None:
        """Everything back to defaults from now on; the past is kept (counters stay monotonic)."""
        self._send({"reset": True})


class Values(ValueSetters):
    """Thread-safe store of value timelines; the HTTP server and the renderers share one."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._live: dict[tuple[Kind, Key], list[tuple[float, Setting]]] = {}
        self._history: dict[tuple[Kind, Key], list[Segment]] = {}
        # Which devices each pod holds (pod uid -> indices), kept for the pod's life and shared
        # with backfills through to_json, so live and backfilled series carry the same `gpu`.
        self._gpu_slots: dict[str, tuple[int, ...]] = {}
        # Render caches key on these: every write bumps the generation, and between two writes a
        # value can only change at one of the breakpoints (live change times, segment bounds).
        self._generation = 0
        self._points: list[float] | None = None

    def assign_gpus(self, node: Any, pods: Any) -> list[Any]:
        """`model.assign_gpus` with this store's sticky device map."""
        from devenv.exporters.model import assign_gpus

        with self._lock:
            return assign_gpus(node, pods, self._gpu_slots)

    # -- writing ---------------------------------------------------------------------------
    def _send(self, body: dict[str, Any]) -> None:
        self.apply(body)

    def apply(self, body: Mapping[str, Any]) -> None:
        """Merge a `POST /_values` body: `{"reset": bool, "set": [...], "history": [...]}`.

        `set` items are `{"kind", "key", "value", "at"?}` (stamped with the clock unless `at` is
        given); `history` items are `{"kind", "key", "segments": [[start, end, value], ...]}`.
        Everything is validated before anything is applied.
        """
        now = self._clock()
        sets = []
        for item in body.get("set", []):
            kind, key = make_key(item["kind"], item["key"])
            _check_level(item.get("value"))
            sets.append((kind, key, float(item.get("at", now)), item.get("value")))
        hist = []
        for item in body.get("history", []):
            kind, key = make_key(item["kind"], item["key"])
            hist.append((kind, key, [Segment(float(s[0]), float(s[1]), s[2]) for s in item["segments"]]))
        with self._lock:
            if body.get("reset"):
                self._reset(now)
            for kind, key, at, value in sets:
                changes = self._live.setdefault((kind, key), [])
                bisect.insort(changes, (at, value), key=lambda c: c[0])
            for kind, key, segs in hist:
                self._history.setdefault((kind, key), []).extend(segs)
            self._generation += 1
            self._points = None

    def _reset(self, now: float) -> None:
        # The exporter's flags are forgotten, past included: a later backfill of the same stretch
        # (another test's pods in the shared sandbox) renders as if they had never been set.
        for store in (self._live, self._history):
            for ident in [i for i in store if i[0] in _FLAGS]:
                del store[ident]
        for changes in self._live.values():
            changes.append((now, None))
        for ident, segs in list(self._history.items()):
            kept = [Segment(s.start, min(s.end, now), s.value) for s in segs if s.start < now]
            self._history[ident] = kept

    # -- what render caches need ------------------------------------------------------------
    @property
    def generation(self) -> int:
        """Bumped by every write (`apply`, and so every setter and `reset`)."""
        return self._generation

    def next_change_after(self, t: float) -> float:
        """The first time after `t` at which any value may change without a write (inf: none).

        Live changes may be stamped in the future (`at`) and history segments start and end, so
        a render made at `t` holds, for the same generation, until this time and no longer.
        """
        with self._lock:
            if self._points is None:
                points = {at for changes in self._live.values() for at, _ in changes}
                points.update(x for segs in self._history.values() for s in segs for x in (s.start, s.end))
                self._points = sorted(points)
            i = bisect.bisect_right(self._points, t)
            return self._points[i] if i < len(self._points) else float("inf")

    def piece_start(self, kind: Kind, key: Key, a: float, t: float) -> float:
        """Where the constant piece of `integrate(kind, key, a, ...)` that contains `t` begins.

        With `s = piece_start(kind, key, a, t)`, for any `u >= t` before the next breakpoint,
        `integrate(kind, key, a, s) + rate * (u - s)` (rate: `level(kind, key, s)`, ABSENT at the
        default) is `integrate(kind, key, a, u)` to the last bit: same pieces, same summing order.
        """
        points = self._breakpoints(kind, key, a, t)
        inner = [p for p in points[:-1] if p > a]  # interior breakpoints; `t` itself is only an end
        if t > a and self._is_breakpoint(kind, key, t):
            return t
        return inner[-1] if inner else a

    def _is_breakpoint(self, kind: Kind, key: Key, t: float) -> bool:
        with self._lock:
            for cand in _candidates(kind, key):
                if any(at == t for at, _ in self._live.get((kind, cand), ())):
                    return True
                if any(t in (seg.start, seg.end) for seg in self._history.get((kind, cand), ())):
                    return True
        return False

    # -- reading ---------------------------------------------------------------------------
    def resolve(self, kind: Kind, key: Key, t: float) -> Setting:
        """The value in force at `t` without defaults (None = unset)."""
        cands = _candidates(kind, key)
        with self._lock:
            for cand in cands:
                for seg in reversed(self._history.get((kind, cand), ())):
                    if seg.start <= t < seg.end:
                        return seg.value
            best: tuple[float, Setting] | None = None
            for cand in cands:
                changes = self._live.get((kind, cand), [])
                i = bisect.bisect_right(changes, t, key=lambda c: c[0])
                if i and (best is None or changes[i - 1][0] > best[0]):
                    best = changes[i - 1]
            return best[1] if best else None

    def level(self, kind: Kind, key: Key, t: float) -> Level:
        """The value at `t` with defaults applied (may be ABSENT)."""
        value = self.resolve(kind, key, t)
        if value is not None:
            return value
        if kind in (Kind.GR_ENGINE_ACTIVE, Kind.SM_ACTIVE, Kind.POWER):
            util = self.resolve(Kind.GPU_UTIL, key, t)
            share = util / 100 if util is not None and util != ABSENT else 0.0
            return IDLE_WATTS + share * (BUSY_WATTS - IDLE_WATTS) if kind is Kind.POWER else share
        return DEFAULTS[kind]

    def pod_uid(self, node: str, t: float) -> bool:
        """Whether dcgm-exporter on `node` labels pods' series with their UID at `t`."""
        value = self.resolve(Kind.POD_UID, (node,), t)
        if value is None:
            value = self.resolve(Kind.POD_UID, (ALL_NODES,), t)
        return value == 1

    def target_down(self, exporter: str, node: str | None, t: float) -> bool:
        """Whether the target fails its scrape at `t` (live, or in a history segment)."""
        return self.level(Kind.TARGET_DOWN, (target_key(exporter, node),), t) == 1

    def _breakpoints(self, kind: Kind, key: Key, a: float, b: float) -> list[float]:
        points = {a, b}
        with self._lock:
            for cand in _candidates(kind, key):
                points.update(t for t, _ in self._live.get((kind, cand), ()) if a < t < b)
                for seg in self._history.get((kind, cand), ()):
                    points.update(x for x in (seg.start, seg.end) if a < x < b)
        return sorted(points)

    def integrate(self, kind: Kind, key: Key, a: float, b: float) -> float:
        """Integral of the level over [a, b] (ABSENT stretches count at the default rate)."""
        if b <= a:
            return 0.0
        total = 0.0
        pts = self._breakpoints(kind, key, a, b)
        for p, q in zip(pts, pts[1:], strict=False):
            value = self.level(kind, key, p)
            total += float(DEFAULTS[kind] if value == ABSENT else value) * (q - p)
        return total

    # -- JSON --------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Full state: `{"live": [{kind, key, changes: [[t, v]]}], "history": [{kind, key, segments}]}`."""
        with self._lock:
            return {
                "live": [
                    {"kind": k.value, "key": list(key), "changes": [[t, v] for t, v in ch]}
                    for (k, key), ch in self._live.items()
                ],
                "history": [
                    {"kind": k.value, "key": list(key), "segments": [[s.start, s.end, s.value] for s in segs]}
                    for (k, key), segs in self._history.items()
                ],
                "gpu_slots": {uid: list(slots) for uid, slots in self._gpu_slots.items()},
            }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], clock: Callable[[], float] = time.time) -> Values:
        values = cls(clock)
        for item in data.get("live", []):
            values.apply(
                {"set": [{"kind": item["kind"], "key": item["key"], "value": v, "at": t} for t, v in item["changes"]]}
            )
        values.apply({"history": data.get("history", [])})
        values._gpu_slots = {uid: tuple(slots) for uid, slots in data.get("gpu_slots", {}).items()}
        return values
