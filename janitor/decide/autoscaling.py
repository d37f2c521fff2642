"""What node autoscalers said about a pending pod, and what that proves about "never fits".

A pod that no existing node could run may still get a node: cluster-autoscaler scales a node group
up (from zero, as labs do with GPU pools), Karpenter launches a NodeClaim. So where nodes can be
added, fitting no node that exists is no proof that the pod never runs; only the autoscaler can
say that no node it could add would run the pod, and it says so on the pod, in Events that
`observe` reads and classifies once (janitor.observe.autoscalers) into the values here.

The rule (docs/policies.md, "Never fits"): where nodes can be added (`Autoscaling.present`), a pod
that fits no existing node is *waiting* for a node, judged after `after` like any unschedulable
pod, unless every autoscaler that spoke about it, and every one found running here, last said that
none of its node groups or NodePools could run it, said it again at least `NEVER_SETTLE` after it
first did (both repeat themselves every 5 minutes at most, so one word alone may be a moment's
view, such as a node group not discovered yet), and last said it within `NEVER_FRESH` of now,
either way (one that stopped saying it may have changed its mind without a word: a scale-up
triggered for other pods in the same loop posts nothing on this one; a time far ahead is a clock
not to be trusted). Anything else (a scale-up triggered, a node nominated, a limit reached,
backoff, words not understood, an autoscaler running and silent, or nothing said at all) means
waiting, and the owner reads what it waits for. Pure: `now` is passed in.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from janitor.decide.reasons import Code, Reason, why

# A "never" must be said again this long after it was first said (both autoscalers repeat it
# every 5 minutes while it holds), and last said within NEVER_FRESH of now.
NEVER_SETTLE = datetime.timedelta(minutes=4)
NEVER_FRESH = datetime.timedelta(minutes=15)


class NodeAutoscaling(StrEnum):
    """The admin's word on whether nodes can be added (`--node-autoscaling`)."""

    AUTO = "auto"  # look for signs of an autoscaler; none found means none
    PRESENT = "present"  # nodes can be added: a pod fitting no node waits unless an autoscaler says never
    NONE = "none"  # the nodes that exist are all there will be


class Said(StrEnum):
    """What an autoscaler's Event on a pod says, classified from its reason and words."""

    COMING = "coming"  # a node is on its way: cluster-autoscaler TriggeredScaleUp, Karpenter Nominated
    LIMITED = "limited"  # none for now, a limit is reached: max group size, max total nodes, quota, NodePool limits
    NOT_NOW = "not-now"  # none this time, for a reason that passes: backoff, group not ready, offerings
    NEVER = "never"  # every node group (NodePool) it could add rejects the pod on the pod's own constraints
    UNKNOWN = "unknown"  # words not known here, or none: never taken as "never"


@dataclass(frozen=True, slots=True)
class AutoscalerNote:
    """The newest Event of one kind (source and reason) an autoscaler posted on a pod."""

    source: str  # the Event's source component: "cluster-autoscaler", "karpenter"
    reason: str  # TriggeredScaleUp, NotTriggerScaleUp, Nominated, FailedScheduling
    said: Said
    first: datetime.datetime | None  # when it first said this (the earliest of its Events of this kind saying it)
    last: datetime.datetime | None  # when it last said it
    detail: str = ""  # its words after the fixed part, shown as they are: "1 max node group size reached"
    targets: tuple[str, ...] = ()  # COMING: "gpu-pool 0->1 (max: 4)" per node group, or "nodeclaim/gpu-x7k2"


@dataclass(frozen=True, slots=True)
class Autoscaling:
    """Whether nodes can be added to this cluster, as observed: what says so (empty: nothing does,
    the nodes that exist are all there will be)."""

    signs: tuple[str, ...] = ()
    # Autoscalers known (or not ruled out) to run here, by the Event source they speak as: a
    # "never" is proof only when each of them said it.
    sources: tuple[str, ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.signs)


def _newest(notes: Sequence[AutoscalerNote]) -> AutoscalerNote:
    return max(notes, key=lambda n: (n.last is not None, n.last or datetime.datetime.min.replace(
        tzinfo=datetime.timezone.utc)))


def _never_since(note: AutoscalerNote, others: Sequence[AutoscalerNote]) -> datetime.datetime | None:
    """Since when `note` (a "never") is known to have been said with nothing else said by its
    source in between: its first saying, or only its last when another word came after the first."""
    if note.first is None or note.last is None:
        return None
    if any(o.last is not None and note.first < o.last <= note.last for o in others):
        return note.last
    return note.first


def _proof(note: AutoscalerNote, others: Sequence[AutoscalerNote], misfit: Reason,
           now: datetime.datetime) -> Reason:
    """AUTOSCALER_NEVER when `note` proves never, else why it does not (yet)."""
    since = _never_since(note, others)
    if note.last is not None and abs(now - note.last) > NEVER_FRESH:  # long ago, or a clock far ahead
        return why(Code.NEVER_STALE, source=note.source, detail=note.detail, at=note.last)
    if since is None or note.last is None or note.last - since < NEVER_SETTLE:
        return why(Code.NEVER_UNSETTLED, source=note.source, detail=note.detail, first=since or note.last,
                   settle=NEVER_SETTLE)
    return why(Code.AUTOSCALER_NEVER, never=misfit, source=note.source, detail=note.detail, first=since)


def _said(note: AutoscalerNote) -> Reason:
    if note.said is Said.COMING and note.reason == "Nominated":
        return why(Code.NODE_NOMINATED, source=note.source, targets=note.targets, at=note.last)
    if note.said is Said.COMING:
        return why(Code.SCALE_UP_TRIGGERED, source=note.source, groups=note.targets, at=note.last)
    return why(Code.AUTOSCALER_SAID, source=note.source, said=str(note.said), detail=note.detail, at=note.last)


def _heard(notes: Sequence[AutoscalerNote], sources: Sequence[str], misfit: Reason,
           now: datetime.datetime) -> Reason:
    """AUTOSCALER_NEVER when the autoscalers proved that no node they add could run the pod, else
    what the pod waits on."""
    by_source: dict[str, list[AutoscalerNote]] = {}
    for note in notes:
        by_source.setdefault(note.source, []).append(note)
    newest = {source: _newest(said) for source, said in sorted(by_source.items())}
    coming = [n for n in newest.values() if n.said is Said.COMING]
    if coming:
        return _said(_newest(coming))
    if all(n.said is Said.NEVER for n in newest.values()):
        silent = tuple(source for source in sources if source not in newest)
        if silent:
            n = _newest(list(newest.values()))
            return why(Code.NEVER_NOT_ALL, source=n.source, detail=n.detail, silent=silent)
        proofs = [_proof(n, [o for o in by_source[s] if o is not n], misfit, now) for s, n in newest.items()]
        return next((p for p in proofs if p.code is not Code.AUTOSCALER_NEVER), proofs[0])
    return _said(_newest([n for n in newest.values() if n.said is not Said.NEVER]))


def judge(misfit: Reason, state: Reason, notes: Sequence[AutoscalerNote], autoscaling: Autoscaling,
          now: datetime.datetime) -> tuple[bool, Reason]:
    """For a pod that no existing node could run (`misfit`, a NEVER_FITS reason; `state`, its
    stuck state): (True, why) when it never gets a node, (False, why) when it waits for one."""
    if not notes and not autoscaling.present:
        return True, misfit  # no node can be added: the nodes that exist decide
    heard = (_heard(notes, autoscaling.sources, misfit, now) if notes
             else why(Code.AUTOSCALING_ON, signs=autoscaling.signs))
    if heard.code is Code.AUTOSCALER_NEVER:
        return True, heard
    return False, why(Code.WAITS_FOR_NODE, shown=misfit.fact("shown"), misfits=misfit.fact("misfits"), said=heard,
                      state=state)
