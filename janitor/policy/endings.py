"""The lifecycle's endings (a policy's `lifecycle.action`), each said in one place.

An ending is a set of promises that must agree with each other: the patch that carries it out, the
check the next cycle makes that it still holds, the command the owner is given to undo it, what it
does to a StatefulSet's volumes, and the words Slack and `kubectl janitor` use for it. Spread over
the layers that use them, a change to one ending had to find every copy, and a new ending could
forget one; here a missing promise is a missing field, and `Ending.__post_init__` refuses a
reclaim that cannot be checked or undone.

It sits in the policy layer, below the deciding and acting layers that read it, so it works on
plain values only: strings, counts and mappings, never a client library's objects.
"""

from __future__ import annotations

import datetime as _dt
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from janitor import annotations as ann

__all__ = ["ENDINGS", "KUEUE_GROUP", "KUEUE_QUEUE_LABEL", "KUEUE_VERSIONS", "Action", "Ending", "PatchTarget",
           "Queued", "Seen", "find"]


class Action(enum.StrEnum):
    """What the lifecycle finally does to an idle workload; `ENDINGS` says what each one means."""

    DELETE = "delete"
    SUSPEND = "suspend"
    SCALE_TO_ZERO = "scale-to-zero"
    STOP = "stop"
    REPORT = "report"  # mark, warn and remind, and never act: for trying a policy out on real owners

    @property
    def ending(self) -> Ending:
        return ENDINGS[self]

    def applies_to(self, kind: str) -> bool:
        """Whether this action means anything for a workload of `kind` (delete: always)."""
        return self.ending.applies_to(kind)


class PatchTarget(enum.StrEnum):
    """Which object an ending's patch is sent to.

    Most patches go to the workload itself. Kueue owns the `spec.suspend` of a workload it admits
    (it un-suspends a Job whose Workload is admitted), so such a workload is stopped through its
    Kueue Workload (`spec.active: false`): the acting layer patches the Workload the plan's action
    names (`decide.model.Action.via`), and refuses an action that names none.
    """

    WORKLOAD = "workload"
    KUEUE_WORKLOAD = "kueue-workload"  # the Kueue Workload whose controller owner is the workload


KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # set by the user on a workload Kueue is to admit
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # the Workload API versions read, preferred first


@dataclass(frozen=True, slots=True)
class Queued:
    """What was read of the Kueue Workload that admits a workload (the Workload whose controller
    ownerReference is the workload). `name` is "" when none was found or it could not be read, and
    `problem` says which; nothing is then done through it, nor directly (Kueue would undo that)."""

    version: str = ""  # the Kueue API version it was read at: "v1beta2" or "v1beta1"
    name: str = ""
    uid: str = ""
    active: bool | None = None  # spec.active (absent: true); None when not read
    problem: str = ""
    # Since when it holds quota: the later lastTransitionTime of its QuotaReserved and Admitted
    # conditions that are True (kueue#14811 leaves both True with no pod); None when neither is.
    reserved_since: _dt.datetime | None = None
    evicted: bool = False  # its Evicted condition is True (with quota still reserved: Kueue's known fault)
    status_problem: str = ""  # why its conditions cannot be read: then nothing is known of its quota
    gpus: int = 0  # the GPUs its admission counts against the quota (status.admission), as far as read
    finished: bool = False  # Finished True: its ClusterQueue no longer counts its quota
    elsewhere: str = ""  # why its pods may run elsewhere or be on their way (MultiKueue, admission checks)
    stopped_at: _dt.datetime | None = None  # the later of Evicted turning True and PodsReady turning False

    @property
    def found(self) -> bool:
        return bool(self.name and self.uid and self.version) and self.active is not None

    @property
    def ref(self) -> str:
        """How kubectl names it."""
        return f"workloads.{KUEUE_GROUP}/{self.name}"


class Seen(Protocol):
    """What the next cycle reads of a reclaimed object to tell whether the reclaim still holds
    (`decide.model.ObjectView` has these)."""

    @property
    def replicas(self) -> int | None: ...

    @property
    def suspended(self) -> bool: ...

    @property
    def annotations(self) -> Mapping[str, str]: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def queued(self) -> Queued | None: ...  # None: no Kueue Workload admits it, as far as was read


def kueue_managed(seen: Seen) -> bool:
    """Whether Kueue admits `seen`: its queue label says so, or a Workload owned by it was looked for
    (and found, or could not be read: then it may be)."""
    return KUEUE_QUEUE_LABEL in seen.labels or seen.queued is not None


Patch = Callable[[_dt.datetime], dict[str, Any]]  # a merge patch, given the time it is applied
Holds = Callable[[Seen], bool | None]  # None: the object does not say (no replicas field read)
# The `-n ns ` flag ("" for a cluster-scoped object), the workload's `kind/name` as kubectl takes it,
# its replicas before the reclaim, and the `kind/name` of each object reclaimed with it.
Resume = Callable[[str, str, int | None, Sequence[str]], str]


@dataclass(frozen=True, slots=True)
class Ending:
    """One action and everything that follows from it.

    `done` is the short past tense Slack uses ("will be suspended", "was suspended"); `explained`
    is what `kubectl janitor explain` shows, with the detail a reader at a terminal wants. A
    reclaim keeps the object and takes its pods: it has a patch, a way to tell it still holds, and
    a command that undoes it. `volumes` is the StatefulSet retention rule the action meets
    (`decide.volumes`); `carries_runs` means a CronJob's running Jobs get the same patch.
    """

    action: Action
    done: str
    explained: str
    kinds: tuple[str, ...] | None = None  # the workload kinds it means anything for; None: any
    acts: bool = True  # False: the lifecycle marks, warns and reminds, and never changes the object
    reclaims: bool = False
    patch: Patch | None = None
    target: PatchTarget = PatchTarget.WORKLOAD
    holds: Holds | None = None
    resume: Resume | None = None
    volumes: str | None = None
    carries_runs: bool = False
    # The same action on a workload Kueue admits, whose switch is its Kueue Workload; None: no other way.
    queued: Ending | None = None

    def __post_init__(self) -> None:
        if self.reclaims and (self.patch is None or self.holds is None or self.resume is None):
            raise ValueError(f"{self.action}: a reclaim needs a patch, a check that it holds and a resume command")
        if self.reclaims and not self.acts:
            raise ValueError(f"{self.action}: a reclaim acts")
        if self.queued is not None and (self.queued.action is not self.action
                                        or self.queued.target is not PatchTarget.KUEUE_WORKLOAD):
            raise ValueError(f"{self.action}: its Kueue way is the same action, through the Workload")

    def applies_to(self, kind: str) -> bool:
        return self.kinds is None or kind in self.kinds

    def on(self, seen: Seen) -> Ending:
        """This ending as it is carried out on `seen`: through its Kueue Workload where Kueue admits it."""
        return self.queued if self.queued is not None and kueue_managed(seen) else self

    def held(self, seen: Seen) -> bool | None:
        """Whether the reclaim still holds on `seen`; None when it cannot be told (or is no reclaim)."""
        ending = self.on(seen)
        return ending.holds(seen) if ending.holds is not None else None

    def resume_command(self, namespace_flag: str, ref: str, replicas: int | None, also: Sequence[str] = (),
                       seen: Seen | None = None) -> str:
        """The command that undoes it on `seen` (the workload `ref`); "" for an ending that leaves
        nothing to undo. Through a Kueue Workload, it names the Workload (a placeholder where none was read)."""
        ending = self.on(seen) if seen is not None else self
        if ending.target is PatchTarget.KUEUE_WORKLOAD:
            queued = seen.queued if seen is not None else None
            ref = queued.ref if queued is not None and queued.name else \
                f"workloads.{KUEUE_GROUP}/<the Workload of {ref}>"
        return ending.resume(namespace_flag, ref, replicas, also) if ending.resume is not None else ""


_RESUME_SUSPEND = "--type=merge -p '{\"spec\":{\"suspend\":false}}'"


def _resume_suspended(ns: str, ref: str, replicas: int | None, also: Sequence[str]) -> str:
    # Each Job suspended with a CronJob too: resuming the CronJob alone leaves its runs suspended,
    # and a Forbid schedule blocked behind them.
    return " && ".join(f"kubectl {ns}patch {r} {_RESUME_SUSPEND}" for r in (ref, *also))


def _resume_scaled(ns: str, ref: str, replicas: int | None, also: Sequence[str]) -> str:
    return f"kubectl {ns}scale {ref} --replicas={replicas if replicas else 1}"


def _resume_stopped(ns: str, ref: str, replicas: int | None, also: Sequence[str]) -> str:
    return f"kubectl {ns}annotate {ref} {ann.NOTEBOOK_STOPPED}-"


def _stop(now: _dt.datetime) -> dict[str, Any]:
    # Kubeflow's notebook controller scales a Notebook to zero while this annotation is set.
    return {"metadata": {"annotations": {ann.NOTEBOOK_STOPPED: now.strftime("%Y-%m-%dT%H:%M:%SZ")}}}


def _resume_active(ns: str, ref: str, replicas: int | None, also: Sequence[str]) -> str:
    return f"kubectl {ns}patch {ref} --type=merge -p '{{\"spec\":{{\"active\":true}}}}'"


def _deactivated(seen: Seen) -> bool | None:
    """Checked on the Workload: active again is undone. Deactivated holds once Kueue has stopped the
    workload too (its spec.suspend); until then, a moment after the patch or with no Kueue controller
    running, it cannot be told: neither "done" nor "undone" is said."""
    queued = seen.queued
    if queued is None or not queued.found:
        return None
    if queued.active:
        return False
    return True if seen.suspended else None


# Kueue evicts a deactivated Workload (Evicted, reason Deactivated), stops what it admitted (a Job:
# spec.suspend), releases its quota and does not admit it again until spec.active is true again.
_THROUGH_KUEUE = Ending(
    Action.SUSPEND, "suspended", "suspended through its Kueue Workload (spec.active: false; Kueue stops its pods "
    "and releases its quota; the object stays)", kinds=("Job", "JobSet", "RayCluster"), reclaims=True,
    patch=lambda now: {"spec": {"active": False}}, target=PatchTarget.KUEUE_WORKLOAD, holds=_deactivated,
    resume=_resume_active)


def _scaled_to_zero(seen: Seen) -> bool | None:
    return None if seen.replicas is None else seen.replicas == 0


ENDINGS: Mapping[Action, Ending] = MappingProxyType({
    # Deleting the StatefulSet (or what owns it, which the garbage collector follows down) meets
    # its whenDeleted rule.
    Action.DELETE: Ending(Action.DELETE, "deleted", "deleted", volumes="whenDeleted"),
    Action.SUSPEND: Ending(
        Action.SUSPEND, "suspended", "suspended (spec.suspend: true; its pods stop, the Job stays)",
        kinds=("Job", "JobSet", "CronJob", "RayCluster"), reclaims=True, patch=lambda now: {"spec": {"suspend": True}},
        holds=lambda seen: seen.suspended, resume=_resume_suspended, carries_runs=True, queued=_THROUGH_KUEUE),
    Action.SCALE_TO_ZERO: Ending(
        Action.SCALE_TO_ZERO, "scaled to zero", "scaled to zero replicas",
        kinds=("Deployment", "StatefulSet"), reclaims=True, patch=lambda now: {"spec": {"replicas": 0}},
        holds=_scaled_to_zero, resume=_resume_scaled, volumes="whenScaled"),
    # Stopping a Notebook scales its StatefulSet to zero: its whenScaled rule.
    Action.STOP: Ending(
        Action.STOP, "stopped", "stopped (the Kubeflow way; its volume stays)",
        kinds=("Notebook",), reclaims=True, patch=_stop,
        holds=lambda seen: ann.NOTEBOOK_STOPPED in seen.annotations, resume=_resume_stopped, volumes="whenScaled"),
    Action.REPORT: Ending(Action.REPORT, "reported (this policy does nothing to it)", "nothing", acts=False),
})


def find(action: str) -> Ending | None:
    """The ending an action's name stands for, as read back from an annotation or a notice; None for
    a name no ending has (written by another version, or by hand)."""
    try:
        return ENDINGS[Action(action)]
    except ValueError:
        return None
