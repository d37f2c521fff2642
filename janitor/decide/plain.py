"""A reason in a researcher's words, for the Slack messages: "GPU 0 peaked at 0 % over the last 4 h".

The sentence of a `Reason` (janitor.decide.reasons) is written for admins and the audit log: it
names the DCGM field, the threshold and every pod, which a researcher reading a DM on a phone
should not have to decode. Here the same codes and facts become a short line: the numbers that
matter in the units people think in (a GPU signal as percent whatever its range, CPU in cores,
durations as "4 h"). Only facts are read, never the sentence; a code not covered here, or a reason
missing a fact read here, gives its sentence unchanged, so nothing is ever left half-said. Pure.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence

from janitor.decide.reasons import Code, Fact, Reason
from janitor.durations import in_words
from janitor.policy.model import GpuSignal

GIB = 2**30
GPUS_LISTED = 4  # a pod's GPUs listed peak by peak up to this many; past it, only the highest


class _Missing(Exception):
    """A fact the plain words need is not there: the reason's sentence is shown instead."""


def duration(delta: datetime.timedelta) -> str:
    """"4 h", "30 min", "1 h 30 min", "2 d", "3 d 4 h" (janitor.durations)."""
    return in_words(delta)


def plain(reason: Reason) -> str:
    """The reason in plain words, or its sentence when its code (or a fact of it) is not covered."""
    if not isinstance(reason, Reason):  # words from elsewhere (tests, older notes): as they are
        return str(reason)
    try:
        return _words(reason)
    except _Missing:
        return str(reason)


def _words(reason: Reason) -> str:
    render = _RENDER.get(reason.code)
    if render is None:
        raise _Missing(reason.code)
    return render(reason)


def _fact(reason: Reason, name: str) -> Fact:
    value = reason.fact(name)
    if value is None:
        raise _Missing(name)
    return value


def _reason(reason: Reason, name: str) -> Reason:
    value = _fact(reason, name)
    if not isinstance(value, Reason):
        raise _Missing(name)
    return value


def _number(reason: Reason, name: str) -> float:
    value = _fact(reason, name)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _Missing(name)
    return float(value)


def _delta(reason: Reason, name: str) -> datetime.timedelta:
    value = _fact(reason, name)
    if not isinstance(value, datetime.timedelta):
        raise _Missing(name)
    return value


def _text(reason: Reason, name: str) -> str:
    return str(_fact(reason, name))


def _reasons(reason: Reason, name: str) -> tuple[Reason, ...]:
    value = _fact(reason, name)
    if not isinstance(value, tuple) or not value or not all(isinstance(r, Reason) for r in value):
        raise _Missing(name)
    return value


def _tuple(reason: Reason, name: str) -> tuple[object, ...]:
    value = _fact(reason, name)
    if not isinstance(value, tuple):
        raise _Missing(name)
    return value


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def _listed(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _small(value: float) -> str:
    """Two significant digits under 10, whole numbers above: 0.4, 2, 1.3, 87."""
    return f"{value:.0f}" if value >= 10 else f"{float(f'{value:.2g}'):g}"


# -- idle ---------------------------------------------------------------------------------------------------


def _percent(signal: str, peak: float | None) -> str:
    """A GPU signal's value as percent of its range (GPU_UTIL is 0-100, the PROF fields 0-1)."""
    if peak is None:
        return "n/a"
    try:
        top = GpuSignal(signal).maximum
    except ValueError:
        return f"{peak:g} ({signal})"  # a signal this version does not know: its own number and name
    return f"{_small(max(0.0, peak) * 100 / top)} %"


def _peaks(reason: Reason) -> list[tuple[str, float | None]]:
    """(GPU, peak) of a pod's GPU reason, in GPU order."""
    peaks = _fact(reason, "peaks")
    if not isinstance(peaks, tuple) or not peaks:
        raise _Missing("peaks")
    found: list[tuple[str, float | None]] = []
    for item in peaks:
        if not (isinstance(item, tuple) and len(item) == 2 and (item[1] is None or isinstance(item[1], int | float))):
            raise _Missing("peaks")
        found.append((str(item[0]), None if item[1] is None else float(item[1])))
    return found


def _highest(peaks: Sequence[tuple[str, float | None]]) -> float | None:
    known = [p for _, p in peaks if p is not None]
    return max(known) if known else None


def _over(reason: Reason) -> str:
    return f"over the last {duration(_delta(reason, 'window'))}"


def _gpu(reason: Reason) -> str:
    """GPU_IDLE, GPU_PARTIAL, GPU_BUSY: one pod's GPUs."""
    signal, peaks = _text(reason, "signal"), _peaks(reason)
    if len(peaks) == 1:
        [(gpu, peak)] = peaks
        return f"GPU {gpu} peaked at {_percent(signal, peak)} {_over(reason)}"
    if len(peaks) <= GPUS_LISTED:
        shown = _listed([_percent(signal, p) for _, p in peaks])
        return f"its {len(peaks)} GPUs peaked at {shown} {_over(reason)}"
    return f"its {len(peaks)} GPUs peaked at no more than {_percent(signal, _highest(peaks))} {_over(reason)}"


def _reading(signal: str, value: float | None) -> str:
    """One signal's number in people's units: "3 % SM_ACTIVE", "1.1x idle power"."""
    try:
        known = GpuSignal(signal)
    except ValueError:
        return f"{value} ({signal})"
    if known.relative:
        return "power n/a" if value is None else f"{_small(value)}x idle power"
    return f"{_percent(signal, value)} {known.short}"


def _signals(reason: Reason) -> str:
    """GPU_SIGNALS_*: one pod's GPUs on several signals, each signal at its highest."""
    readings, limits = _fact(reason, "readings"), dict(_limits(reason))
    if not isinstance(readings, tuple) or not readings:
        raise _Missing("readings")
    top: dict[str, float | None] = {}
    busy: list[str] = []
    gpus: list[str] = []
    for item in readings:
        if not (isinstance(item, tuple) and len(item) == 3):
            raise _Missing("readings")
        gpu, signal, value = str(item[0]), str(item[1]), item[2]
        if gpu not in gpus:
            gpus.append(gpu)
        known = top.get(signal)
        top[signal] = value if known is None else known if value is None else max(known, value)
        if value is not None and value > limits.get(signal, float("inf")):
            busy.append(f"GPU {gpu} at {_reading(signal, value)}")
    left = reason.fact("missing")
    missing = f"; not read: {_listed([str(x) for x in _tuple(left, 'left')])}" if isinstance(left, Reason) else ""
    if reason.code is not Code.GPU_SIGNALS_IDLE and busy:
        return f"in use: {_listed(busy[:GPUS_LISTED])}{missing}"
    shown = _listed([_reading(sig, value) for sig, value in top.items()])
    who = f"GPU {gpus[0]}" if len(gpus) == 1 else f"its {len(gpus)} GPUs"
    most = "" if len(gpus) == 1 else "no more than "
    return f"{who} peaked at {most}{shown} {_over(reason)}{missing}"


def _limits(reason: Reason) -> list[tuple[str, float]]:
    limits = _fact(reason, "limits")
    if not isinstance(limits, tuple):
        raise _Missing("limits")
    return [(str(s), float(t)) for s, t in limits]


def _cores(value: float) -> str:
    shown = _small(value)
    return f"{shown} {'core' if shown == '1' else 'cores'}"


def _cpu(reason: Reason) -> str:
    """CPU_IDLE, CPU_BUSY."""
    return f"CPU peaked at {_cores(_number(reason, 'peak'))} {_over(reason)}"


def _all_idle(reason: Reason) -> str:
    total, shown = int(_number(reason, "total")), [_reason(p, "why") for p in _reasons(reason, "shown")]
    if total == 1:
        return _words(shown[0])
    codes = {r.code for r in shown}
    more = ", …" if total > len(shown) else ""
    if codes == {Code.GPU_IDLE}:
        signals = {_text(r, "signal") for r in shown}
        if len(signals) != 1:
            raise _Missing("signal")
        signal = signals.pop()
        peaks = ", ".join(_percent(signal, _highest(_peaks(r))) for r in shown)
        return f"all {total} pods idle: GPU peaks {peaks}{more} {_over(shown[0])}"
    if codes == {Code.GPU_SIGNALS_IDLE}:
        first = next((r for r in shown if isinstance(r.fact("missing"), Reason)), shown[0])  # what was left out shows
        return f"all {total} pods idle, e.g. {_words(first)}"
    if codes == {Code.NEVER_USED}:
        return f"none of its {total} pods used since it started, e.g. {_words(shown[0])}"
    if codes == {Code.CPU_IDLE}:
        peaks = ", ".join(_small(_number(r, "peak")) for r in shown)
        return f"all {total} pods idle: CPU peaks {peaks}{more} cores {_over(shown[0])}"
    raise _Missing("shown")


def _in_use(reason: Reason) -> str:
    return f"in use again: {_words(_reason(reason, 'why'))}"


def _pods_in_use(reason: Reason) -> str:
    busy, total = int(_number(reason, "busy")), int(_number(reason, "total"))
    inner = _words(_reason(reason, "why"))
    return inner if total == 1 else f"{busy} of {total} pods in use ({_text(reason, 'pod')}: {inner})"


# -- stuck Pending ------------------------------------------------------------------------------------------


def _stuck_for(reason: Reason) -> str:
    return f"Pending for {duration(_delta(reason, 'stuck'))}: {_words(_reason(reason, 'state'))}"


def _unschedulable(reason: Reason) -> str:
    message = reason.fact("message")  # the scheduler's own words, the best account of what is short
    return "the scheduler finds no node for it" + (f" ({message})" if message else "")


def _fits_later(reason: Reason) -> str:
    once = [str(r) for r in _reasons(reason, "once")]
    more = reason.fact("more") or ""
    return f"{_text(reason, 'node')} could run it once {_listed(once)}{more}"


def _amount(resource: str, amount: float) -> str:
    if resource == "nvidia.com/gpu" or resource.endswith("/gpu"):
        return _count(int(amount), "GPU") if amount == int(amount) else f"{amount:g} GPUs"
    if resource == "cpu":
        return f"{amount:g} CPU {'core' if amount == 1 else 'cores'}"
    if resource == "memory":
        return f"{amount / GIB:.3g} GiB of memory"
    return f"{amount:g} {resource}"


def _never_fits(reason: Reason) -> str:
    """What no node could ever give: a resource it asks more of than the nodes short of it have
    (with the most one of them has), else each other misfit with the nodes it holds for."""
    misfits = _fact(reason, "misfits")
    if not isinstance(misfits, tuple) or not misfits:
        raise _Missing("misfits")
    counted: list[tuple[Reason, int]] = []
    for item in misfits:
        misfit, n = item if isinstance(item, tuple) and len(item) == 2 else (None, None)
        if not isinstance(misfit, Reason) or not isinstance(n, int):
            raise _Missing("misfits")
        counted.append((misfit, n))
    nodes = sum(n for _, n in counted)
    short: dict[str, tuple[float, float, int]] = {}  # resource -> (asks, most a node short of it has, nodes)
    phrases: dict[str, None] = {}
    for misfit, n in counted:
        if misfit.code is Code.MISFIT_RESOURCE:
            resource = _text(misfit, "resource")
            asks, has = _number(misfit, "amount"), _number(misfit, "has")
            _, most, seen = short.get(resource, (asks, has, 0))
            short[resource] = (asks, max(most, has), seen + n)
        else:
            phrases[f"{misfit} ({_count(n, 'node')})"] = None
    for resource, (asks, most, n) in short.items():
        where = "no node has that many" if n == nodes else f"{_count(n, 'node')} have fewer"
        phrases[f"it asks for {_amount(resource, asks)} and {where} (at most {_amount(resource, most)})"] = None
    ordered = sorted(phrases, key=lambda p: not p.startswith("it asks"))
    return f"no node in the cluster could ever run it: {'; '.join(ordered[:3])}"


def _heard(reason: Reason) -> str:
    """What an autoscaler said of a pod that waits for a node."""
    source = _text(reason, "source")
    if reason.code is Code.SCALE_UP_TRIGGERED:
        return f"{source} is adding one ({', '.join(str(g) for g in _tuple(reason, 'groups'))})"
    if reason.code is Code.NODE_NOMINATED:
        return f"{source} is launching one ({', '.join(str(t) for t in _tuple(reason, 'targets'))})"
    if reason.code is Code.AUTOSCALER_SAID:
        said, detail = _text(reason, "said"), _text(reason, "detail")
        return {"limited": f"{source} cannot add one now, a limit is reached ({detail})",
                "not-now": f"{source} is not adding one for now ({detail})"}.get(said, f"{source} said: {detail}")
    if reason.code is Code.AUTOSCALING_ON:
        return "no autoscaler has said whether one will come"
    if reason.code is Code.NEVER_UNSETTLED:
        return (f"{source} says none of the nodes it can add could run it ({_text(reason, 'detail')}); if it keeps "
                "saying so, the pod is treated as one that can never run")
    return str(reason)


def _waits_for_node(reason: Reason) -> str:
    return f"no node can run it now, and it is waiting for a node to be added: {_heard(_reason(reason, 'said'))}"


def _autoscaler_never(reason: Reason) -> str:
    return (f"{_never_fits(_reason(reason, 'never'))}; and {_text(reason, 'source')} cannot add one that could "
            f"({_text(reason, 'detail')})")


def _none_runs(reason: Reason) -> str:
    total, first = int(_number(reason, "total")), _reason(reason, "first")
    if total == 1:
        return _words(first)
    return f"none of its {total} pods runs; {_text(first, 'pod')}: {_words(_reason(first, 'why'))}"


# -- crash-looping ------------------------------------------------------------------------------------------


def _restarts(reason: Reason) -> str:
    restarts = int(_number(reason, "restarts"))
    words = (f"container {_text(reason, 'container')} restarted {_count(restarts, 'time')}; its last run ended "
             f"after {duration(_delta(reason, 'ran'))} ({_text(reason, 'last_exit')})")
    now = reason.fact("now")
    if isinstance(now, Reason):  # "now waiting (CrashLoopBackOff)", "running again since ..."
        words += f"; {now}"
    oom = reason.fact("oom")
    if isinstance(oom, Reason):  # with what the node agent saw and what that means, as the owner must act on it
        words += f"; it ran out of memory ({_text(oom, 'limit')}){_text(oom, 'agent')}; {_text(oom, 'explained')}"
    return words


def _all_looping(reason: Reason) -> str:
    shown = _reasons(reason, "shown")
    pods = [_words(r) if len(shown) == 1 else f"{_text(r, 'pod')}: {_words(r)}" for r in shown]
    return f"crash-looping while holding {_count(int(_number(reason, 'gpus')), 'GPU')}: {'; '.join(pods)}"


# -- stuck: busy on GPU_UTIL, nothing computing --------------------------------------------------------------


def _all_hung(reason: Reason) -> str:
    since = _fact(reason, "since")
    if not isinstance(since, datetime.datetime):
        raise _Missing("since")
    gpus = int(_number(reason, "gpus"))
    return (f"looks stuck since {since.astimezone(datetime.timezone.utc):%H:%M} UTC on {_count(gpus, 'GPU')}: "
            f"the GPUs report busy, but {_text(reason, 'quiet')} idle")


_RENDER: Mapping[Code, Callable[[Reason], str]] = {
    Code.ALL_IDLE: _all_idle,
    Code.POD: lambda r: _words(_reason(r, "why")),
    Code.GPU_IDLE: _gpu,
    Code.GPU_PARTIAL: _gpu,
    Code.GPU_BUSY: _gpu,
    Code.GPU_SIGNALS_IDLE: _signals,
    Code.GPU_SIGNALS_PARTIAL: _signals,
    Code.GPU_SIGNALS_BUSY: _signals,
    Code.CPU_IDLE: _cpu,
    Code.UID_MIXED: lambda r: ("its GPU samples cannot be told apart from those of an earlier pod of the same name "
                               "(the GPU exporter's settings changed meanwhile), so it is not judged on them"),
    Code.UID_OTHER: lambda r: "the GPU samples under its name are an earlier pod's of the same name, none its own",
    Code.UID_BESIDE: lambda r: ("some GPU samples under its name carry another pod's UID while it was running, so "
                                "whose they are cannot be told and it is not judged on them"),
    Code.CPU_BUSY: _cpu,
    Code.IN_USE: _in_use,
    Code.PODS_IN_USE: _pods_in_use,
    Code.POD_STARTING: lambda r: f"pod {_text(r, 'pod')} is starting",
    Code.SOME_RUNNING: lambda r: f"{int(_number(r, 'running'))} of {_count(int(_number(r, 'total')), 'pod')} running",
    Code.NONE_RUNS: _none_runs,
    Code.QUOTA_HELD: lambda r: (f"it has held its Kueue quota for {duration(_delta(r, 'quiet'))} while none of its "
                                "pods runs or waits, so others' jobs queue behind it "
                                f"(Workload {_text(r, 'workload')})"),
    Code.QUOTA_PODS: lambda r: "its pods run again",
    Code.CLAIM_HELD: lambda r: (f"it has held {_text(r, 'devices')} for {duration(_delta(r, 'quiet'))}, "
                                f"{_text(r, 'whom')}, so no other pod can use them"),
    Code.CLAIM_NAMED: lambda r: f"pod {_text(r, 'pod')} uses it",
    Code.CLAIM_FREE: lambda r: "it is in use or holds nothing now",
    Code.STUCK_FOR: _stuck_for,
    Code.SINCE_INIT: lambda r: _words(_reason(r, "state")),
    Code.UNSCHEDULABLE: _unschedulable,
    Code.FITS_LATER: _fits_later,
    Code.NOT_STARTED_YET: lambda r: f"scheduled, but not started ({_text(r, 'reasons')})",
    Code.GATED: lambda r: "held in a queue on purpose (a scheduling gate)",
    Code.NOT_SCHEDULED: lambda r: "not scheduled yet",
    Code.NEVER_FITS: _never_fits,
    Code.WAITS_FOR_NODE: _waits_for_node,
    Code.AUTOSCALER_NEVER: _autoscaler_never,
    Code.ALL_LOOPING: _all_looping,
    Code.RESTARTS: _restarts,
    Code.SOME_LOOPING: lambda r: (f"{int(_number(r, 'looping'))} of its {int(_number(r, 'total'))} GPU pods "
                                  "crash-looping; the others run"),
    Code.NONE_LOOPING: lambda r: "none of its GPU pods is crash-looping now",
    Code.ALL_HUNG: _all_hung,
    Code.NEVER_USED: lambda r: (f"never used since it started {duration(_delta(r, 'life'))} ago: "
                                f"{_words(_reason(r, 'why'))}"),
    Code.GPU_WORKS: lambda r: f"its GPUs compute again ({_text(r, 'detail')})",
    Code.GPU_UTIL_DIPS: lambda r: "its GPUs no longer report busy all the time",
    Code.PODS_NOT_HUNG: lambda r: _words(_reason(r, "why")) if int(_number(r, "total")) == 1 else (
        f"{int(_number(r, 'working'))} of {int(_number(r, 'total'))} pods not stuck ({_text(r, 'pod')}: "
        f"{_words(_reason(r, 'why'))})"),
}


__all__ = ["duration", "plain"]
