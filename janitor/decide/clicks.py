"""A button pressed on a warning, judged: what it may change, and what its presser is told.

Buttons are how a researcher answers a warning in one click ("Keep 1 day", "Keep 3 days", "Release
now", "Why?"). A click is a request from outside, so it is judged like any other evidence, purely:
the workload read fresh when the click arrived, who pressed (the owner, an admin, or neither), the
policy that marked it and the time. Each button's value names the workload's UID and the mark the
message was sent for (its `janitor/marked-at`): a click on an old message, after the workload was
unmarked and marked again or deleted and re-created under its name, changes nothing. A keep never
goes past the policy's cap (`maxExtension` after the first mark); a release never skips the rails,
it only tells the lifecycle the owner is done (see `RELEASE` in janitor/annotations.py).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from enum import StrEnum

from janitor import annotations as ann
from janitor.decide.deadlines import deadline_in_force, keep_cap
from janitor.decide.model import ObjectRef, ObjectView
from janitor.decide.owners import Owner
from janitor.policy.model import Policy
from janitor.why_note import WhyNote


class Op(StrEnum):
    KEEP = "keep"
    RELEASE = "release"
    WHY = "why"


# action_id -> (what, days kept); the ids are the messages' and the stand-in's.
BUTTONS: dict[str, tuple[Op, int]] = {
    "janitor.keep.1d": (Op.KEEP, 1), "janitor.keep.3d": (Op.KEEP, 3),
    "janitor.release": (Op.RELEASE, 0), "janitor.why": (Op.WHY, 0),
}


class Outcome(StrEnum):
    DONE = "done"
    NOT_ALLOWED = "not-allowed"  # neither the owner nor an admin
    STALE = "stale"  # the message is about a mark, or an object, that is no longer there
    NO_ROOM = "no-room"  # the cap has passed: nothing left to keep it for
    FAILED = "failed"  # the write or the reply failed (set by the shell)
    FORGED = "forged"  # a request Slack did not sign, or signed too long ago (set by the receiver)
    REPLAYED = "replayed"  # a request seen before (set by the receiver)


@dataclass(frozen=True, slots=True)
class ButtonValue:
    """What a button carries back: the workload (with its UID) and the mark it was sent for."""

    kind: str
    api_version: str
    namespace: str | None
    name: str
    uid: str
    marked_at: str  # janitor/marked-at as the message saw it
    action: str = ""  # what the message said would happen ("": a message from before buttons said it)

    def encode(self) -> str:
        return json.dumps({"k": self.kind, "a": self.api_version, "n": self.namespace, "o": self.name,
                           "u": self.uid, "m": self.marked_at, "x": self.action}, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> ButtonValue | None:
        try:
            raw = json.loads(text)
            value = cls(str(raw["k"]), str(raw["a"]), raw["n"] if raw["n"] is None else str(raw["n"]), str(raw["o"]),
                        str(raw["u"]), str(raw["m"]), str(raw.get("x") or ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return value

    @classmethod
    def of(cls, ref: ObjectRef, marked_at: datetime.datetime, action: str = "") -> ButtonValue:
        return cls(ref.kind, ref.api_version, ref.namespace, ref.name, ref.uid, ann.format_expires(marked_at), action)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Presser:
    """Who pressed, and what they are to the workload."""

    user: str  # Slack user id
    owner: bool  # the owner (a user, or the user an owner e-mail names)
    admin: bool
    member: bool = False  # a member of the channel that owns it


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a click changes (a merge patch of annotations, empty for none) and what is said."""

    op: Op
    outcome: Outcome
    said: str  # to the presser (refusals) or, for DONE, in place of the buttons
    annotations: dict[str, str | None] = field(default_factory=dict)
    until: datetime.datetime | None = None  # KEEP: the keep-until written
    capped: bool = False  # KEEP: cut to the policy's cap
    deadline: datetime.datetime | None = None  # KEEP: the deadline in force after it, for the edited message


def judge(op: Op, days: int, value: ButtonValue, view: ObjectView | None, presser: Presser, owner: Owner,
          policy: Policy | None, now: datetime.datetime, *, members_release: bool = False) -> Verdict:
    """The verdict on one click, from the workload as it is now. The members of an owning channel
    may keep it and ask why; releasing it needs the owner, an admin, or `members_release`: anyone
    can join a public channel."""
    now = now.replace(microsecond=0)  # annotations hold whole seconds
    if view is None or view.ref.uid != value.uid:
        return Verdict(op, Outcome.STALE, f"{value} was deleted or re-created since this message; nothing changed.")
    mark = view.readings.mark  # read when the view was built
    if mark is None or not mark.belongs_to(value.uid) or mark.marked_at is None or \
            ann.format_expires(mark.marked_at) != value.marked_at:
        return Verdict(op, Outcome.STALE, f"{value} is no longer marked as this message says (it was unmarked, or "
                                          "marked again since); nothing changed.")
    if not (presser.owner or presser.admin or presser.member):
        return Verdict(op, Outcome.NOT_ALLOWED, f"Only the owner of {value} ({owner.value or 'unknown'}) or a "
                                                "cluster admin can do this; nothing changed.")
    if op is Op.RELEASE and not (presser.owner or presser.admin or members_release):
        return Verdict(op, Outcome.NOT_ALLOWED, f"{value} belongs to {owner.value}: its members can keep it, but "
                                                "only a cluster admin can release it; nothing changed.")
    if op is Op.WHY:
        note = WhyNote.parse(view.annotations.get(ann.WHY, ""))
        rule = ", ".join(f"{k} {v}" for k, v in note.facts.items()) if note is not None else ""
        said = (f"{note.words}\nPolicy {note.policy} ({note.trigger}: {rule}), marked at "
                f"{ann.format_expires(note.marked_at)}.\nThe numbers: {mark.reason}") if note is not None else \
            mark.reason or "no reason recorded"
        return Verdict(op, Outcome.DONE, said)
    if op is Op.RELEASE:
        if mark.warned_of is None or mark.warned_at is None:
            return Verdict(op, Outcome.STALE, f"No warning about {value} is on record as delivered yet; nothing "
                                              "changed.")
        if value.action and value.action != mark.warned_of.action:
            return Verdict(op, Outcome.STALE, f"This message said {value.action}; the warning in force about {value} "
                                              f"says {mark.warned_of.action}: release it from that one. Nothing "
                                              "changed.")
        release = ann.Release(mark.marked_at, now, presser.user, mark.warned_of.action, mark.warned_at, owner.key)
        return Verdict(op, Outcome.DONE, f"Released by <@{presser.user}>", {ann.RELEASE: str(release)})
    if policy is None:
        return Verdict(op, Outcome.NO_ROOM, f"{value} was marked by policy {mark.policy}, which is no longer "
                                            "configured; nothing changed.")
    if not mark.cap_trusted:
        keys = " and ".join(k for k in ann.CAP_KEYS if k in mark.foreign)
        return Verdict(op, Outcome.NO_ROOM, f"{keys} on {value} was not written by the janitor (someone else wrote "
                                            "it last), so this mark's cap cannot be counted and nothing can be kept; "
                                            "ask a cluster admin.")
    honoured = keep_cap(mark.marked_at, policy.lifecycle.max_extension)
    cap = honoured or mark.marked_at  # a policy that keeps nothing: its cap is the first mark itself, long past
    until = min(now + datetime.timedelta(days=days), cap)
    # A keep that would not move the deadline in force (an earlier keep already did, say) adds nothing,
    # and writing it would cut that earlier keep short.
    in_force = deadline_in_force(mark, view.readings.keep, honoured)
    if until <= now or (in_force is not None and until <= in_force):
        if ann.RELEASE in view.annotations:  # no time to add, but the keep still withdraws a release
            stays = f"; the deadline stays {ann.format_expires(in_force)}" if in_force is not None else ""
            return Verdict(op, Outcome.DONE, f"Release withdrawn by <@{presser.user}>{stays}", {ann.RELEASE: None},
                           deadline=in_force)
        return Verdict(op, Outcome.NO_ROOM, f"Policy {policy.name} keeps {value} at most "
                                            f"{ann.format_duration(policy.lifecycle.max_extension)} after it was "
                                            f"first marked ({ann.format_expires(cap)}): nothing to add.")
    capped = " (the policy's cap)" if until == cap else ""
    # A keep withdraws a release pressed before it (the owner changed their mind, or an admin stepped in).
    return Verdict(op, Outcome.DONE, f"Kept until {ann.format_expires(until)}{capped} by <@{presser.user}>",
                   {ann.KEEP_UNTIL: ann.format_expires(until)} | ({ann.RELEASE: None} if ann.RELEASE in view.annotations
                                                                   else {}), until, capped=until == cap,
                   deadline=deadline_in_force(mark, ann.format_expires(until), honoured))
