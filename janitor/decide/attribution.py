"""Which of the GPU series read under a pod's namespace and name are the pod's own.

dcgm-exporter names a GPU's pod by namespace and name and, with `--kubernetes-enable-pod-uid`,
by UID too. A name outlives its pod: a StatefulSet's `nb-0` deleted and made again is a new pod
under the old name, and the window still holds the old one's samples. So:

* where series carry UIDs, a series is a pod's only if its UID is the pod's. Another UID is
  another pod, whose samples say nothing of this one, neither idle nor busy;
* series without a UID are matched by name, as before; a pod is judged only once it has run for
  the whole window, which keeps a predecessor's samples out of it;
* another UID beside the pod's own, in a window the pod ran for the whole of, is no predecessor
  (its samples would end before the pod started): a UID label that is not the pod's, whose
  samples may be the pod's, so nothing of that signal is judged idle;
* both kinds under one name (the exporter was restarted with the flag turned on or off within
  the window, or some of the pod's GPUs are mapped without a UID) cannot be told apart: which
  unlabelled samples are this pod's is not known, so nothing of that signal is judged idle.

Pure: the UIDs are plain strings from the evidence and the pod's `metadata.uid`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from janitor.decide.evidence import GpuSeries
from janitor.decide.reasons import Code, Reason, why


@dataclass(frozen=True, slots=True)
class Attributed:
    """The series of a pod for one signal, and why they cannot be judged idle (None: they can)."""

    series: tuple[GpuSeries, ...]  # its own: by UID where the exporter labels UIDs, else by name
    doubt: Reason | None = None


def attribute(pod_uid: str, series: Sequence[GpuSeries], signal: str) -> Attributed:
    """The pod's own series among those of its namespace and name (see the module's rules)."""
    for s in series:  # a loop, not any(): asked of every GPU pod, per signal and trigger
        if s.uid:
            break
    else:  # the exporter labels no UIDs here: by name, as always
        return Attributed(tuple(series))
    own = tuple(s for s in series if s.uid == pod_uid)
    bare = sum(1 for s in series if not s.uid)
    if bare:
        return Attributed(own, why(Code.UID_MIXED, signal=signal, labelled=len(series) - bare, bare=bare))
    if not own:
        return Attributed(own, why(Code.UID_OTHER, signal=signal, others=len(series)))
    if len(own) < len(series):
        # A pod is judged only once it ran for the whole window, so a predecessor of its name has no
        # samples in it: another UID beside its own is a label that is not the pod's (a relabelling
        # that adds the exporter's UID, the flag turned off behind a ServiceMonitor), whose samples
        # may be this pod's.
        return Attributed(own, why(Code.UID_BESIDE, signal=signal, others=len(series) - len(own)))
    return Attributed(own)


def any_candidate(pod_uid: str, series: Sequence[GpuSeries]) -> bool:
    """Whether `candidates` has any, without making them (asked of every running GPU pod)."""
    for s in series:
        if not s.uid or s.uid == pod_uid:
            return True
    return False


def candidates(pod_uid: str, series: Sequence[GpuSeries]) -> tuple[GpuSeries, ...]:
    """The series that may be the pod's: its UID's and those without one (another UID's never are)."""
    return tuple(s for s in series if not s.uid or s.uid == pod_uid)
