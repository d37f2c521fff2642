"""What the lifecycle tells people: one `Notice` per workload and message kind, with its commands.

A notice is a plain value the planner produces and the Slack side renders; it carries the facts
(what, why, when, how to keep it, how to undo the action), never presentation. Notices of one
owner in one cycle are sent together as one digest; the send's `Intent` (janitor.annotations)
names it, so a crash between the send and its record can be recognised on Slack, not repeated.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from janitor import annotations as ann
from janitor.annotations import NoticeKind
from janitor.decide.model import ObjectRef, ObjectView
from janitor.decide.owners import Owner
from janitor.decide.reasons import Reason
from janitor.policy.model import Action as PolicyAction

__all__ = ["Notice", "NoticeKind", "keep_command", "kubectl_ref", "resume_command"]


@dataclass(frozen=True, slots=True)
class Notice:
    kind: NoticeKind
    workload: ObjectRef
    policy: str
    owner: Owner
    action: str  # the policy's action: delete | suspend | scale-to-zero | stop | report
    why: Reason  # the measured numbers and the window
    now: datetime.datetime
    deadline: datetime.datetime | None = None  # when the action happens (WARNING, REMINDER)
    keep_command: str = ""  # the exact command that keeps it (WARNING, REMINDER)
    resume_command: str = ""  # how to undo suspend/scale-to-zero/stop (DONE, and in warnings)
    gpus: int = 0  # GPUs the workload holds, for the summary line
    condition: str = "idle"  # what is wrong, in words: "idle", "stuck Pending", "crash-looping"
    admins_told: bool = False  # the owner could not be reached and the admins heard: not again
    # The mark this notice is about (its janitor/marked-at) and how long the owner may keep it: the
    # buttons carry the first, so a click on an old message does nothing; "Keep" never passes the second.
    marked_at: datetime.datetime | None = None
    cap: datetime.datetime | None = None
    volumes: str = ""  # what the action does to a StatefulSet's volumes, in words (decide.volumes.fate)
    volumes_lost: bool = False  # ... and whether it deletes them: a warning records that it said so
    managed_by: str = ""  # the tool that restores it ("Argo CD", "Flux", "KEDA"): reported, not acted on


def kubectl_ref(ref: ObjectRef) -> str:
    group = ref.api_version.split("/")[0] if "/" in ref.api_version else ""
    kind = ref.kind.lower() if group in ("", "apps", "batch") else f"{ref.kind.lower()}.{group}"
    return f"{kind}/{ref.name}"


def _ns(ref: ObjectRef) -> str:
    return f"-n {ref.namespace} " if ref.namespace else ""


def keep_command(ref: ObjectRef, until: datetime.datetime | None) -> str:
    if until is None:
        return ""
    return (f"kubectl {_ns(ref)}annotate {kubectl_ref(ref)} "
            f"{ann.KEEP_UNTIL}={ann.format_deadline(until)} --overwrite")


def resume_command(ref: ObjectRef, action: PolicyAction, replicas: int | None,
                   also: Sequence[ObjectRef] = (), seen: ObjectView | None = None) -> str:
    """What undoes the action, for the objects it changed: the workload and, for a suspend, each
    Job suspended with it, or the Kueue Workload of one Kueue admits, as `seen` was read
    (policy.endings says the command)."""
    return action.ending.resume_command(_ns(ref), kubectl_ref(ref), replicas, [kubectl_ref(r) for r in also], seen)
