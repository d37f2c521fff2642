"""Words are written where a reason is shown, from the data it carries (decide/reasons.py `Words`).

Aspects covered:
- words stand for their text: `str()`, equality with the text and with other words of it, the
  hash, the repr; they are written once, however often shown;
- judging a pod writes none of its GPU verdict's details; the sentence, `plan -o json` and a
  reason's equality with one built from the text read the same as when they were written while
  deciding (idle GPUs, and the hung trigger's three details).
"""

from __future__ import annotations

import datetime
import uuid

from factories import NOW, SCRAPED

from janitor import documents
from janitor.decide.evidence import EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.model import ContainerView, ObjectRef, PodView, State
from janitor.decide.reasons import Code, Reason, Words, why
from janitor.decide.triggers.hung import HungJudge
from janitor.decide.triggers.idle import judge_gpu
from janitor.policy.model import GpuSignal, Hung, IdleGpu

H = datetime.timedelta(hours=1)
STEP = datetime.timedelta(seconds=15)


def test_words_stand_for_their_text_and_are_written_once() -> None:
    calls: list[tuple[int, ...]] = []

    def render(*data: int) -> str:
        calls.append(data)
        return "+".join(map(str, data))

    words = Words(render, 1, 2)
    assert not words.written and calls == []
    assert str(words) == "1+2" and str(words) == "1+2" and calls == [(1, 2)] and words.written
    assert words == "1+2" and "1+2" == words and words != "1+3"
    assert words == Words(render, 1, 2) and words != Words(render, 2, 1)
    assert hash(words) == hash("1+2") and repr(words) == "'1+2'"
    assert len({words, "1+2"}) == 1
    assert (words == 12) is False


def _pod(gpus: int) -> PodView:
    return PodView(ObjectRef("Pod", "v1", "ml", "train-0", str(uuid.uuid4())), "1", {}, None, "node-1", "Running",
                   NOW - 3 * H, gpus, (ContainerView("main", 4.0),))


def _series(gpu: str, peak: float | None, samples: int = 120, low: float | None = None) -> GpuSeries:
    return GpuSeries(gpu, peak, samples, "node-1", SCRAPED, False, "NVIDIA A100-SXM4-80GB", "", low)


def test_an_idle_gpu_verdict_writes_its_detail_only_when_shown() -> None:
    evidence = GpuEvidence(EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, STEP, NOW),
                           {PodKey("ml", "train-0"): (_series("1", 97.5, 480), _series("0", 0.25, 480))})
    judged = judge_gpu(_pod(2), evidence, IdleGpu(), NOW)
    detail = judged.why.fact("detail")
    assert judged.state is State.PARTIAL and isinstance(detail, Words) and not detail.written
    written = Reason(judged.why.code, tuple((k, str(v) if k == "detail" else v) for k, v in judged.why.facts))
    assert judged.why == written and str(judged.why) == str(written)
    assert str(judged.why) == ("1 of 2 GPUs idle: GPU 0 peak 0.25, GPU 1 peak 97.5 "
                               "(DCGM_FI_DEV_GPU_UTIL <= 5 over 2 h)")
    assert documents.reason(judged.why)["facts"]["detail"] == "GPU 0 peak 0.25, GPU 1 peak 97.5"


def _hung(util: tuple[GpuSeries, ...], sm: tuple[GpuSeries, ...], power: tuple[GpuSeries, ...]) -> Reason:
    trigger = Hung(window=datetime.timedelta(minutes=30), power=1.5, idle_power=(("NVIDIA A100*", 55.0),))
    read = {GpuSignal.GPU_UTIL: util, GpuSignal.SM_ACTIVE: sm, GpuSignal.POWER: power}
    evidence = {(str(s), trigger.window): GpuEvidence(EvidenceWindow(str(s), trigger.window, STEP, NOW),
                                                      {PodKey("ml", "train-0"): found})
                for s, found in read.items()}
    judged = HungJudge(evidence, trigger, NOW)(_pod(2))
    detail = judged.why.fact("detail")
    assert isinstance(detail, Words) and not detail.written
    return judged.why


def test_the_hung_details_read_as_they_did_when_written_while_deciding() -> None:
    spinning = (_series("0", 100.0, low=97.0), _series("1", 100.0, low=98.0))
    quiet_sm = (_series("0", 0.03), _series("1", 0.01))
    quiet_power = (_series("0", 70.0), _series("1", 60.0))
    hung = _hung(spinning, quiet_sm, quiet_power)
    assert hung.code is Code.GPU_HUNG
    assert hung.fact("detail") == ("GPU 0 GPU_UTIL low 97, SM_ACTIVE 0.03, power 1.3x idle; "
                                   "GPU 1 GPU_UTIL low 98, SM_ACTIVE 0.01, power 1.1x idle")
    works = _hung(spinning, (_series("0", 0.6), _series("1", 0.7)), (_series("0", 300.0), _series("1", 60.0)))
    assert works == why(Code.GPU_WORKS, detail="GPU 0 SM_ACTIVE 0.6 > 0.2; GPU 1 SM_ACTIVE 0.7 > 0.2")
    dips = _hung((_series("1", 100.0, low=0.0), _series("0", 100.0, low=3.5)), quiet_sm, quiet_power)
    assert dips.code is Code.GPU_UTIL_DIPS and dips.fact("detail") == "GPU 0 low 3.5, GPU 1 low 0"
    assert documents.reason(dips)["facts"]["detail"] == "GPU 0 low 3.5, GPU 1 low 0"
