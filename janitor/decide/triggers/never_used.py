"""The never-used window of an idle-GPU trigger (`IdleGpu.never_used`): a pod judged on its whole life.

A pod younger than the idle window is not judged on it (samples before its start belong to another
pod). Where the policy has a never-used window and the pod is at least `after` old, it is judged
instead on the samples since it started, read by the same query: the series labelled with its own
UID (an earlier pod of the same name is another series; a series without UIDs cannot be told
from one, and leaves the pod too young, as before), their coverage and gaps counted over its life
rather than over the window. The steps of the window before it started are no gap in its
samples, so they are taken off the longest gap, counted down to whole steps (towards *unknown*).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from dataclasses import replace

from janitor.decide.evidence import GpuEvidence, GpuSeries, PodKey, Quality
from janitor.decide.model import PodJudgement, PodView, State
from janitor.decide.reasons import Code, why
from janitor.policy.model import IdleGpu


def life(trigger: IdleGpu, pod: PodView, now: datetime.datetime) -> datetime.timedelta | None:
    """How long the pod has run, where the never-used window judges it: at least `after`, and less
    than the idle window (whose query holds its whole life); else None."""
    never = trigger.never_used
    if never is None or pod.started is None or trigger.min_pod_age > trigger.window:
        return None
    running = now - pod.started
    return running if never.after <= running < trigger.window else None


def evidence(found: GpuEvidence, pod: PodView, running: datetime.timedelta) -> GpuEvidence | None:
    """`found` as if read over the pod's life: its own series, gaps before its start taken off; None
    when any series under its name is not its own by UID: one without a UID cannot be told from its
    own, and one with another UID may be an earlier pod's, busy within the window, or its own under a
    UID relabelled (then the window decides, as without a never-used window)."""
    key = PodKey(pod.ref.namespace or "", pod.ref.name)
    series = found.pods.get(key, ())
    if any(s.uid != pod.ref.uid for s in series):
        return None
    window = found.window
    before = before_start(window.window, window.step, running)
    own = tuple(replace(s, quality=shifted(s.quality, before, window.window, running)) for s in series)
    # The other pods' series stay, and the nodes read across the cluster: which signals a node
    # exports at all is read from them.
    return replace(found, window=replace(window, window=running), pods=_With(found.pods, key, own))


class _With(Mapping[PodKey, tuple[GpuSeries, ...]]):
    """`{**pods, key: own}` without the copy: each young pod judged on its life reads the whole read
    this way, and copying it for each made a cycle's cost grow with the square of its pods."""

    __slots__ = ("_pods", "_key", "_own")

    def __init__(self, pods: Mapping[PodKey, tuple[GpuSeries, ...]], key: PodKey,
                 own: tuple[GpuSeries, ...]) -> None:
        self._pods, self._key, self._own = pods, key, own

    def __getitem__(self, key: PodKey) -> tuple[GpuSeries, ...]:
        return self._own if key == self._key else self._pods[key]

    def __iter__(self) -> Iterator[PodKey]:  # in the order of the dict it stands for
        yield from self._pods
        if self._key not in self._pods:
            yield self._key

    def __len__(self) -> int:
        return len(self._pods) + (self._key not in self._pods)


def shifted(quality: Quality, before: datetime.timedelta, window: datetime.timedelta,
            running: datetime.timedelta, whole: datetime.timedelta | None = None) -> Quality:
    """`quality` over the pod's life: the longest gap less the steps `before` it started. A gap
    shorter than the `whole` steps before it (`before` unless told) means another series of its name
    filled those steps (a CPU series has no UID): the gap cannot go below what its staleness
    measured, which catches a gap in its life up to Prometheus' lookback. One between the two is
    the stretch before it, ending inside the step it started in: no gap in its life."""
    gap = quality.gap
    if gap is None:
        return quality
    if gap >= window:  # no sample over the whole window, or gaps as long: as long as its life
        return replace(quality, gap=running)
    if gap <= (before if whole is None else whole):
        return quality
    return replace(quality, gap=max(gap - before, datetime.timedelta(0)))


def before_start(window: datetime.timedelta, step: datetime.timedelta, running: datetime.timedelta, *,
                 partial: bool = False) -> datetime.timedelta:
    """The whole steps of the window before the pod started; with `partial`, the step it started in
    too (the CPU's minute steps: that step saw no sample of it, and a rate over minutes bridges a gap
    of one, so it hides no use)."""
    before = window - running
    return (before // step + (1 if partial and before % step else 0)) * step


def trigger(idle: IdleGpu, running: datetime.timedelta) -> IdleGpu:
    """The trigger over the pod's life: its thresholds and coverage, a window as long as the life."""
    return replace(idle, window=running, min_pod_age=datetime.timedelta(0), never_used=None)


def judged(verdict: PodJudgement, running: datetime.timedelta) -> PodJudgement:
    """An idle verdict over the pod's life says so; any other stands as it is (busy beats, doubt holds)."""
    if verdict.state is not State.FIRES:
        return verdict
    return replace(verdict, why=why(Code.NEVER_USED, life=running, why=verdict.why), never_used=True)
