"""What the lifecycle tells people: one `Notice` per workload and message kind.

A notice is a plain value the planner produces and the Slack side renders; it carries the facts
in words and numbers (what, why, when, how to keep it), never presentation. Notices of one owner
in one cycle are sent together as one digest; `intent` names that send, so a crash between the
send and its record can be recognised on Slack instead of repeated.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import StrEnum

from janitor.decide.model import ObjectRef
from janitor.decide.owners import Owner


class NoticeKind(StrEnum):
    WARNING = "warning"  # marked: it will be reclaimed at the deadline unless used or kept
    REMINDER = "reminder"  # still idle, the deadline is near
    CANCELLED = "cancelled"  # in use again (or no longer covered): the mark is gone
    DONE = "done"  # the action was taken


@dataclass(frozen=True, slots=True)
class Notice:
    kind: NoticeKind
    workload: ObjectRef
    policy: str
    owner: Owner
    action: str  # the policy's action: delete | suspend | scale-to-zero | stop
    why: str  # the measured numbers and the window, one sentence
    now: datetime.datetime
    deadline: datetime.datetime | None = None  # when the action happens (WARNING, REMINDER)
    keep_command: str = ""  # the exact command that keeps it (WARNING, REMINDER)
    resume_command: str = ""  # how to undo suspend/scale-to-zero/stop (DONE, and in warnings)
    gpus: int = 0  # GPUs the workload holds, for the summary line
    condition: str = "idle"  # what is wrong, in words: "idle", "stuck Pending", "crash-looping"


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where a message went and Slack's timestamp for it (also its send time)."""

    channel: str
    ts: str
    to_admins: bool = False  # the owner could not be reached; the admin channel got it instead

    @property
    def at(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(float(self.ts), datetime.timezone.utc)

    def __str__(self) -> str:
        return f"{'admins' if self.to_admins else 'owner'} {self.channel}/{self.ts}"

    @classmethod
    def parse(cls, text: str) -> Delivery | None:
        """The `__str__` form back; None if it is not one (then the delivery is unknown)."""
        who, _, rest = text.strip().partition(" ")
        channel, _, ts = rest.partition("/")
        if who not in ("owner", "admins") or not channel or not ts:
            return None
        try:
            float(ts)
        except ValueError:
            return None
        return cls(channel, ts, who == "admins")
