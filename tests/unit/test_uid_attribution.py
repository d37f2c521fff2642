"""GPU series attributed to pods by UID where dcgm-exporter labels them (`--kubernetes-enable-pod-uid`).

Aspects covered:
- a re-created pod of the same name is never judged idle on its predecessor's idle series (another
  UID), whether or not series of its own are there, and never busy on its predecessor's busy ones;
- another UID beside the pod's own inside a window it ran for the whole of is no predecessor's:
  never idle (unknown), while its own busy samples still count (busy beats unknown);
- two groups of the answer under one key (an exporter restart behind a relabelling that adds its
  own UID) merge towards use, whichever comes first;
- some series of a name with a UID and some without (the exporter's flag changed within the
  window) is unknown, never idle, with its own reason code, even when everything reads 0;
- no UID label anywhere is today's matching by name and start time, verdict for verdict;
- several signals: a predecessor's series on one signal leave no GPU idle, busy on another of the
  pod's own still counts;
- the answer's UID labels: `pod_uid` directly, `exported_pod_uid` before `pod_uid` behind a
  ServiceMonitor, and one GPU under two UIDs as two series;
- a pod with only a predecessor's series counts as a GPU pod without telemetry.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import replace

import pytest
from factories import NOW, SCRAPED

from janitor.decide.attribution import attribute, candidates
from janitor.decide.evidence import Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.model import ContainerView, ObjectRef, Observation, PodView, State
from janitor.decide.plain import plain
from janitor.decide.plan import silent_gpu_pods
from janitor.decide.reasons import Code
from janitor.decide.triggers.idle import judge_gpu
from janitor.decide.triggers.signals import SignalsJudge, left_of
from janitor.observe.answers import QueryResult, Series
from janitor.observe.evidence import fold_gpu
from janitor.observe.prometheus import HONOR_LABELS, SERVICE_MONITOR
from janitor.policy.model import GpuSignal, IdleGpu

H = datetime.timedelta(hours=1)
UTIL, SM = GpuSignal.GPU_UTIL, GpuSignal.SM_ACTIVE
WINDOW = EvidenceWindow(str(UTIL), 2 * H, datetime.timedelta(seconds=15), NOW)  # 480 samples
KEY = PodKey("ml", "nb-0")
NEW, OLD = "5c2e0a4e-new", "0f9d1b77-old"


def nb0(uid: str = NEW, gpus: int = 1, started: datetime.timedelta = 3 * H) -> PodView:
    """`nb-0` as the pod triggers read it: old enough that name and start time alone let it be judged."""
    return PodView(ObjectRef("Pod", "v1", "ml", "nb-0", uid), "1", {}, None, "gpu-node-1", "Running", NOW - started,
                   gpus, (ContainerView("main", 4.0),))


def gpu(peak: float | None, uid: str = "", samples: int = 480, index: str = "0") -> GpuSeries:
    return GpuSeries(index, peak, samples, "gpu-node-1", SCRAPED, uid=uid)


def read(*series: GpuSeries) -> GpuEvidence:
    return GpuEvidence(WINDOW, {KEY: series} if series else {})


def judged(*series: GpuSeries, pod: PodView | None = None):
    return judge_gpu(pod or nb0(), read(*series), IdleGpu(), NOW)


# -- the rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("series, own, code", [
    ((gpu(0), gpu(3, index="1")), (gpu(0), gpu(3, index="1")), None),  # no UID labels: every series, by name
    ((gpu(0, NEW),), (gpu(0, NEW),), None),
    # Another UID beside its own in a window it ran for the whole of: no predecessor (its samples
    # end before the pod started) but a label that is not the pod's, whose samples may be its own.
    ((gpu(0, OLD), gpu(40, NEW)), (gpu(40, NEW),), Code.UID_BESIDE),
    ((gpu(0, OLD),), (), Code.UID_OTHER),
    ((gpu(0, NEW), gpu(0)), (gpu(0, NEW),), Code.UID_MIXED),
    ((gpu(0, OLD), gpu(0)), (), Code.UID_MIXED),  # the unlabelled ones may be the predecessor's too
])
def test_attribution_rules(series, own, code) -> None:
    found = attribute(NEW, series, str(UTIL))
    assert found.series == own
    assert (found.doubt.code if found.doubt else None) is code
    assert candidates(NEW, series) == tuple(s for s in series if s.uid in ("", NEW))


# -- one signal ---------------------------------------------------------------------------------------


def test_a_recreated_pod_is_not_idle_on_its_predecessors_idle_series() -> None:
    """`nb-0` deleted and made again: two hours of the old pod reading 0 under the old UID, and the
    new one old enough by its start time. By name those samples would show it idle."""
    alone = judged(gpu(0, OLD))
    assert alone.state is State.UNKNOWN and alone.why.code is Code.UID_OTHER
    assert "another pod's UID" in str(alone.why) and "earlier pod" in plain(alone.why)
    # With a few minutes of its own beside them: whose the others are cannot be told (a pod judged
    # ran for the whole window, so they are no predecessor's), never idle.
    beside = judged(gpu(0, OLD), gpu(0, NEW, samples=20))
    assert beside.state is State.UNKNOWN and beside.why.code is Code.UID_BESIDE
    # By name (no UID labels) the same samples make it idle: what the UID labels prevent.
    assert judged(gpu(0)).state is State.FIRES


def test_a_predecessors_busy_series_do_not_make_the_pod_busy() -> None:
    beside = judged(gpu(97, OLD), gpu(0, NEW))  # in its window: not a predecessor's, nor idle
    assert beside.state is State.UNKNOWN and beside.why.code is Code.UID_BESIDE
    assert judged(gpu(97, OLD)).state is State.UNKNOWN
    assert judged(gpu(0, OLD), gpu(97, NEW)).state is State.CLEAR


def test_own_series_are_judged_as_before() -> None:
    two = nb0(gpus=2)
    assert judged(gpu(0, NEW), gpu(0, NEW, index="1"), pod=two).state is State.FIRES
    partial = judged(gpu(0, NEW), gpu(60, NEW, index="1"), pod=two)
    assert partial.state is State.PARTIAL and partial.idle_gpus == ("0",)
    # Beside another UID's series its own busy GPU still counts; its idle one is not judged idle.
    beside = judged(gpu(0, NEW), gpu(60, NEW, index="1"), gpu(0, OLD), gpu(0, OLD, index="1"), pod=two)
    assert beside.state is State.CLEAR and beside.idle_gpus == ()
    count = judged(gpu(0, NEW), pod=two)
    assert count.state is State.UNKNOWN and count.why.code is Code.SERIES_COUNT


def test_series_with_and_without_a_uid_are_unknown() -> None:
    """The exporter restarted with `--kubernetes-enable-pod-uid` within the window: the GPU's first
    samples have no UID, the later ones the pod's. Whose the first were cannot be told."""
    mixed = judged(gpu(0, samples=300), gpu(0, NEW, samples=180))
    assert mixed.state is State.UNKNOWN and mixed.why.code is Code.UID_MIXED
    assert dict(mixed.why.facts) == {"signal": str(UTIL), "labelled": 1, "bare": 1}
    assert "cannot be told" in str(mixed.why)
    busy_unlabelled = judged(gpu(97), gpu(0, NEW))
    assert busy_unlabelled.state is State.UNKNOWN and busy_unlabelled.why.code is Code.UID_MIXED


def test_too_young_still_applies_with_uids() -> None:
    young = judged(gpu(0, NEW), pod=nb0(started=H))
    assert young.state is State.TOO_YOUNG


@pytest.mark.parametrize("peaks", [(0.0,), (97.0,), (0.0, 3.0), (None,)])
def test_without_uid_labels_nothing_changes(peaks) -> None:
    """No UID label anywhere: the verdict of today's matching by name, for each kind of answer."""
    pod = nb0(gpus=len(peaks))
    series = tuple(gpu(p, index=str(i)) for i, p in enumerate(peaks))
    mine = judge_gpu(pod, read(*series), IdleGpu(), NOW)
    assert attribute(pod.ref.uid, series, str(UTIL)).series == series and mine.state in State
    labelled = judge_gpu(pod, read(*(replace(s, uid=pod.ref.uid) for s in series)), IdleGpu(), NOW)
    assert (labelled.state, labelled.why) == (mine.state, mine.why)


# -- several signals ----------------------------------------------------------------------------------


def several(**read_: tuple[GpuSeries, ...]) -> dict:
    out = {}
    for signal in (UTIL, SM):
        found = read_.get(signal.name)
        out[(str(signal), 2 * H)] = GpuEvidence(replace(WINDOW, signal=str(signal)), {KEY: found} if found else {})
    return out


def test_several_signals_never_idle_on_a_predecessor() -> None:
    trigger = IdleGpu(signal=UTIL, threshold=5, also=((SM, 0.05),))
    idle = SignalsJudge(several(GPU_UTIL=(gpu(0, NEW),), SM_ACTIVE=(gpu(0.0, OLD),)), trigger, NOW)(nb0())
    assert idle.state is State.UNKNOWN and idle.why.code is Code.UID_OTHER
    mixed = SignalsJudge(several(GPU_UTIL=(gpu(0, NEW),), SM_ACTIVE=(gpu(0.0), gpu(0.0, NEW))), trigger, NOW)(nb0())
    assert mixed.state is State.UNKNOWN and mixed.why.code is Code.UID_MIXED
    busy = SignalsJudge(several(GPU_UTIL=(gpu(90, NEW),), SM_ACTIVE=(gpu(0.0, OLD),)), trigger, NOW)(nb0())
    assert busy.state is State.CLEAR  # its own use on another signal counts
    # Its own busy samples on a signal whose other series carry another UID: use, all the same.
    own_busy = SignalsJudge(several(GPU_UTIL=(gpu(90, NEW), gpu(0, OLD)), SM_ACTIVE=(gpu(0.0, NEW),)), trigger,
                            NOW)(nb0())
    assert own_busy.state is State.CLEAR, own_busy.why
    # Unknown, it still says which signal its node does not export (the in-use check reads
    # GPU_UTIL beside a policy that read no work signal on the pod).
    elsewhere = replace(gpu(0.0, "other-pod"), node="gpu-node-9")
    unsure = SignalsJudge({**several(GPU_UTIL=(gpu(0, NEW), gpu(0, OLD))),
                           (str(SM), 2 * H): GpuEvidence(replace(WINDOW, signal=str(SM)), {
                               PodKey("ml", "other"): (elsewhere,)})}, trigger, NOW)(nb0())
    assert unsure.state is State.UNKNOWN and unsure.why.code is Code.UID_BESIDE
    assert [x[0] for x in left_of(unsure)] == [str(SM)]
    # Another UID's busy series beside its own idle ones: not its own use, nor its idleness.
    beside = SignalsJudge(several(GPU_UTIL=(gpu(0, NEW), gpu(90, OLD)), SM_ACTIVE=(gpu(0.0, NEW), gpu(0.9, OLD))),
                          trigger, NOW)(nb0())
    assert beside.state is State.UNKNOWN and beside.why.code is Code.UID_BESIDE


# -- the answer's labels ------------------------------------------------------------------------------


def row(stat: str, value: float, **labels: str) -> Series:
    return Series(labels={**labels, "stat": stat, "gpu": "0", "Hostname": "gpu-node-1"},
                  samples=((NOW.timestamp(), value),))


def answer(*rows: Series) -> QueryResult:
    return QueryResult("q", "vector", rows, ())


def test_fold_reads_pod_uid_directly() -> None:
    pod = {"namespace": "ml", "pod": "nb-0"}
    found = fold_gpu(answer(row("peak", 0, **pod, pod_uid=OLD), row("count", 480, **pod, pod_uid=OLD),
                            row("peak", 50, **pod, pod_uid=NEW), row("count", 12, **pod, pod_uid=NEW),
                            row("peak", 0, **pod), row("count", 10, **pod)), WINDOW, HONOR_LABELS)
    assert sorted((s.uid, s.peak, s.samples) for s in found.pods[KEY]) == [("", 0, 10), (OLD, 0, 480), (NEW, 50, 12)]


def test_fold_behind_a_service_monitor_prefers_exported_pod_uid() -> None:
    pod = {"exported_namespace": "ml", "exported_pod": "nb-0", "pod": "dcgm-exporter-x", "namespace": "gpu-operator"}
    found = fold_gpu(answer(
        row("peak", 0, **pod, pod_uid=OLD), row("count", 480, **pod, pod_uid=OLD),  # the chart's ServiceMonitor
        row("peak", 7, **pod, exported_pod_uid=NEW, pod_uid="exporter-uid"),  # a relabelling added pod_uid
        row("count", 480, **pod, exported_pod_uid=NEW, pod_uid="exporter-uid"),
    ), WINDOW, SERVICE_MONITOR)
    assert sorted((s.uid, s.peak) for s in found.pods[KEY]) == [(OLD, 0.0), (NEW, 7.0)]
    assert fold_gpu(answer(row("peak", 0, **pod), row("count", 480, **pod)), WINDOW,
                    SERVICE_MONITOR).pods[KEY][0].uid == ""


def test_another_uid_beside_its_own_is_never_idle() -> None:
    """Behind a ServiceMonitor whose relabelling adds the exporter pod's UID as `pod_uid`, turning
    the exporter's UID flag off makes the pod's later (busy) samples carry the exporter's UID: they
    are not a predecessor's, so the pod's own idle part alone never makes it idle, whatever maxGap."""
    own = replace(gpu(0, NEW, samples=432), quality=replace(SCRAPED, gap=12 * datetime.timedelta(minutes=1)))
    exporter = replace(gpu(97, "exporter-pod-uid", samples=48), quality=replace(SCRAPED, gap=108 * datetime.timedelta(
        minutes=1)))
    for trigger in (IdleGpu(), IdleGpu(max_gap=datetime.timedelta(minutes=15))):
        verdict = judge_gpu(nb0(), read(own, exporter), trigger, NOW)
        assert verdict.state is State.UNKNOWN and verdict.why.code is Code.UID_BESIDE, verdict.why
    assert "not its own" in str(verdict.why) and "cannot be told" in plain(verdict.why)


@pytest.mark.parametrize("busy_first", [True, False])
def test_two_groups_under_one_key_merge_towards_use(busy_first: bool) -> None:
    """The exporter restarted 90 s ago behind that relabelling: one GPU of one pod in two groups
    (old and new exporter UID under `pod_uid`, the pod's own under `exported_pod_uid`). Whichever
    comes first in the answer, the GPU keeps the busy half's peak and the fewer samples."""
    pod = {"exported_namespace": "ml", "exported_pod": "nb-0", "exported_pod_uid": NEW}
    idle = [row(stat, v, **pod, pod_uid="exporter-old") for stat, v in (("peak", 0), ("count", 474), ("points", 474))]
    busy = [row(stat, v, **pod, pod_uid="exporter-new") for stat, v in (("peak", 97), ("count", 6), ("points", 6))]
    found = fold_gpu(answer(*(busy + idle if busy_first else idle + busy)), WINDOW, SERVICE_MONITOR)
    assert [(s.uid, s.peak, s.samples) for s in found.pods[KEY]] == [(NEW, 97.0, 6)]
    assert judge_gpu(nb0(), found, IdleGpu(), NOW).state is State.CLEAR


@pytest.mark.parametrize("unusable", [math.nan, 9.223372036854775e18])
@pytest.mark.parametrize("busy_first", [True, False])
def test_a_merged_peak_beside_an_unusable_one_stays_busy(unusable: float, busy_first: bool) -> None:
    """One group's peak a NaN or a DCGM sentinel, the other's 97: the GPU is busy (a peak that is no
    number hides no use); an idle peak beside an unusable one is no idle GPU."""
    pod = {"exported_namespace": "ml", "exported_pod": "nb-0", "exported_pod_uid": NEW}
    odd = [row(stat, v, **pod, pod_uid="exporter-old") for stat, v in (("peak", unusable), ("count", 474),
                                                                      ("points", 474))]
    for other, expected in ((97, State.CLEAR), (0, State.UNKNOWN)):
        rest = [row(stat, v, **pod, pod_uid="exporter-new") for stat, v in (("peak", other), ("count", 474),
                                                                          ("points", 480))]
        found = fold_gpu(answer(*(rest + odd if busy_first else odd + rest)), WINDOW, SERVICE_MONITOR,
                         fallback=WINDOW.step)
        verdict = judge_gpu(nb0(), found, IdleGpu(), NOW)
        assert verdict.state is expected, (other, found.pods[KEY], verdict.why)


# -- around the judges --------------------------------------------------------------------------------


def test_a_pod_with_only_a_predecessors_series_has_no_telemetry() -> None:
    def silent(*series: GpuSeries) -> tuple[PodView, ...]:
        return silent_gpu_pods(Observation(NOW, pods=(nb0(),), evidence=Evidence({(str(UTIL), 2 * H): read(*series)})))

    assert silent(gpu(0, OLD)) == (nb0(),)
    assert silent(gpu(0, NEW), gpu(0, OLD)) == silent(gpu(0)) == ()
