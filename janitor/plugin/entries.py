"""One workload as the janitor left it, read from its annotations alone; kubectl's names for the
kinds; UNTIL; whether a keep is within what the policy allows. Pure: the time comes from the caller.

A researcher's rights stop at the namespace: no policy file, no ledger, no Prometheus. So all this
knows is what the janitor wrote on the object, which is why every mark carries `janitor/why` (the
policy, the trigger's numbers, the deadline, the keep cap) beside the words of `janitor/reason`. A
mark written before that key existed still shows, with its words and without a cap.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from janitor import annotations as ann
from janitor.decide import volumes, why_notes
from janitor.decide.deadlines import deadline_in_force, keep_cap
from janitor.decide.model import ObjectRef, ObjectView, ResourceKind
from janitor.policy.model import Action as PolicyAction
from janitor.why_note import Scalar

COMPONENT = "kube-idle-janitor"  # the Events' source: the janitor and its node agent


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind the janitor reclaims, and how kubectl spells it."""

    resource: ResourceKind
    short: str  # the name kubectl prints: job, deployment, notebook
    names: tuple[str, ...]  # every spelling accepted, lower case


KINDS: tuple[Kind, ...] = (
    Kind(ResourceKind("batch", "v1", "Job", "jobs"), "job", ("job", "jobs", "job.batch", "jobs.batch")),
    Kind(ResourceKind("batch", "v1", "CronJob", "cronjobs"), "cronjob",
         ("cronjob", "cronjobs", "cj", "cronjob.batch", "cronjobs.batch")),
    Kind(ResourceKind("apps", "v1", "Deployment", "deployments"), "deployment",
         ("deployment", "deployments", "deploy", "deployment.apps", "deployments.apps")),
    Kind(ResourceKind("apps", "v1", "StatefulSet", "statefulsets"), "statefulset",
         ("statefulset", "statefulsets", "sts", "statefulset.apps", "statefulsets.apps")),
    Kind(ResourceKind("kubeflow.org", "v1", "Notebook", "notebooks"), "notebook",
         ("notebook", "notebooks", "notebook.kubeflow.org", "notebooks.kubeflow.org")),
    Kind(ResourceKind("", "v1", "Pod", "pods"), "pod", ("pod", "pods", "po")),
    # DRA claims an orphanedClaim policy marks (not served before 1.34: nothing to show, no word said)
    Kind(ResourceKind("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims"), "resourceclaim",
         ("resourceclaim", "resourceclaims", "resourceclaim.resource.k8s.io", "resourceclaims.resource.k8s.io")),
)
KIND_NAMES = "job, cronjob (cj), deployment (deploy), statefulset (sts), notebook, pod, resourceclaim"


class UsageError(ValueError):
    """Arguments that name nothing the command can work on: exit 2, and the line says the forms."""


def kind_of(text: str) -> Kind:
    wanted = text.lower()
    for kind in KINDS:
        if wanted in kind.names:
            return kind
    raise UsageError(f"{text!r} is not a kind the janitor reclaims; use {KIND_NAMES}")


def parse_target(text: str) -> tuple[Kind, str]:
    """KIND/NAME, as kubectl takes it (`job/train`, `deploy/web`); the namespace comes from -n."""
    kind, slash, name = text.partition("/")
    if not slash or not kind or not name or "/" in name:
        raise UsageError(f"{text!r}: name the workload as KIND/NAME, e.g. job/train (its namespace with -n)")
    return kind_of(kind), name


def parse_until(text: str, now: datetime.datetime) -> datetime.datetime:
    """UNTIL: a duration from now (`2d`, `12h`, written as janitor/ttl is) or a UTC time (as
    janitor/expires is), so both the relative and the absolute habit work."""
    try:
        delta = ann.parse_ttl(text)
    except ValueError:
        delta = None
    else:
        if delta is None or not delta:
            raise UsageError(f"{text!r}: a keep has an end; give how long (2d, 12h) or until when (a UTC time)")
        return now.replace(microsecond=0) + delta
    try:
        return ann.parse_expires(text)
    except ValueError:
        raise UsageError(f"{text!r}: give a duration from now (2d, 12h) or a UTC time (2026-12-01T18:00:00Z, "
                         "2026-12-01T18:00 or 2026-12-01)") from None


class Standing(StrEnum):
    """Where the workload is in the janitor's lifecycle, as its annotations show it."""

    MARKED = "marked"  # found idle (or stuck); nothing happens before the warning reached its owner
    WARNED = "warned"  # the owner was warned: the action comes at the deadline if it is still idle
    DUE = "due"  # warned and past the deadline: the janitor's next cycle acts if it is still idle
    BROKEN = "broken-mark"  # part of a mark, or one that does not read: the janitor removes it
    COPY = "copy"  # another object's mark copied onto this one: never acted on
    EXPIRES = "expires"  # its own janitor/ttl or janitor/expires: deleted when that passes
    KEPT = "kept"  # only a janitor/keep-until: not marked


MARKED_STANDINGS = (Standing.MARKED, Standing.WARNED, Standing.DUE)


@dataclass(frozen=True)
class Entry:
    """One workload and what the janitor has on it."""

    ref: ObjectRef
    kind: Kind
    standing: Standing
    policy: str | None = None
    trigger: str | None = None  # idleGpu, idleCpu, pending, crashLoop; expiry for its own ttl/expires
    action: str | None = None  # delete, suspend, scale-to-zero, stop, report
    deadline: datetime.datetime | None = None  # the deadline in force, as far as the object shows it
    words: str = ""  # why, in plain words
    code: str | None = None  # the reason's code, from janitor/why
    facts: Mapping[str, Scalar] = field(default_factory=dict)
    sentence: str = ""  # janitor/reason: the janitor's own sentence, with every number
    marked_at: datetime.datetime | None = None
    warned_at: datetime.datetime | None = None
    warned_to: str | None = None  # "owner", or "admins" when the owner could not be reached
    keep_cap: datetime.datetime | None = None
    max_extension: str | None = None
    cap_known: bool = False  # the mark carries janitor/why, so keep_cap None means "no keeping"
    kept_until: datetime.datetime | None = None
    kept_text: str | None = None  # janitor/keep-until as written, when it is not a time
    own: str | None = None  # the owner's own janitor/ttl or janitor/expires, "janitor/ttl=7d"
    own_deadline: datetime.datetime | None = None
    problems: tuple[str, ...] = ()
    foreign: tuple[str, ...] = ()  # keys of the mark someone other than the janitor wrote last: nothing from them
    volumes: str = ""  # what the action does to a StatefulSet's volumes, in words

    @property
    def target(self) -> str:
        return f"{self.kind.short}/{self.ref.name}"

    @property
    def cap_trusted(self) -> bool:
        """The cap is counted from what the janitor wrote (marked-at and policy are its own)."""
        return not any(k in self.foreign for k in ann.CAP_KEYS)


def _own(view: ObjectView, marked: bool) -> tuple[str | None, datetime.datetime | None, str]:
    """The owner's own expiry: (key=value, when, what it means). Beside a mark, EXPIRES is the janitor's."""
    notes = view.annotations
    expires = None if marked else notes.get(ann.EXPIRES)
    ttl = notes.get(ann.TTL)
    if expires:
        try:
            return f"{ann.EXPIRES}={expires}", ann.parse_expires(expires), f"its own {ann.EXPIRES} ({expires})"
        except ValueError:
            return (f"{ann.EXPIRES}={expires}", None,
                    f"its own {ann.EXPIRES} {expires!r} is not a time: the janitor keeps it and reported that")
    if ttl:
        try:
            lifetime = ann.parse_ttl(ttl)
        except ValueError:
            return (f"{ann.TTL}={ttl}", None,
                    f"its own {ann.TTL} {ttl!r} is not a duration: the janitor keeps it and reported that")
        if lifetime is None or not lifetime:
            return f"{ann.TTL}={ttl}", None, f"its own {ann.TTL} {ttl}: never deleted for its age"
        return (f"{ann.TTL}={ttl}", view.created + lifetime,
                f"its own {ann.TTL} ({ttl} after it was created, {ann.format_expires(view.created)})")
    return None, None, ""


def _volumes(action: str | None, view: ObjectView) -> str:
    try:
        return volumes.fate(PolicyAction(action), view.claims) if action else ""
    except ValueError:
        return ""


def read(view: ObjectView, kind: Kind, now: datetime.datetime) -> Entry | None:
    """What the janitor has on `view`; None when nothing (no mark, own expiry or keep-until)."""
    notes = view.annotations
    mark = ann.read_mark(notes, view.foreign_marks)
    own, own_deadline, own_words = _own(view, marked=mark is not None)
    keep = notes.get(ann.KEEP_UNTIL)
    if mark is None and own is None and keep is None:
        return None
    kept_until: datetime.datetime | None = None
    if keep is not None:
        try:
            kept_until = ann.parse_expires(keep)
        except ValueError:
            pass
    base = Entry(view.ref, kind, Standing.KEPT, kept_until=kept_until,
                 kept_text=keep if keep is not None and kept_until is None else None, own=own,
                 own_deadline=own_deadline)
    if mark is None:
        if own is None:
            return base
        return replace(base, standing=Standing.EXPIRES, trigger="expiry",
                        action="delete" if own_deadline is not None else None, deadline=own_deadline,
                        words=own_words, volumes=_volumes("delete", view))
    note = why_notes.of_mark(mark, notes, view.foreign_marks)
    sentence = mark.reason
    common: dict[str, Any] = dict(policy=mark.policy, sentence=sentence, marked_at=mark.marked_at,
                                  words=note.words if note is not None else sentence,
                                  foreign=tuple(k for k in ann.MARK_READ_KEYS if k in mark.foreign))
    if mark.uid is not None and not mark.belongs_to(view.ref.uid):
        return replace(base, standing=Standing.COPY, **common)
    if mark.problems:
        return replace(base, standing=Standing.BROKEN, problems=mark.problems, **common)
    # The janitor wrote the grace after delivery into the mark's deadline; the cap is the one its note counts.
    cap = keep_cap(mark.marked_at, note.extension, trusted=mark.cap_trusted) if note is not None else None
    deadline = deadline_in_force(mark, keep, cap)
    standing = Standing.MARKED
    if mark.warned and deadline is not None:
        standing = Standing.DUE if deadline <= now else Standing.WARNED
    action = mark.warned_of.action if mark.warned and mark.warned_of else (note.action if note else None)
    return replace(base, standing=standing, trigger=note.trigger if note else None, action=action,
                    deadline=deadline, code=note.code if note else None, facts=dict(note.facts) if note else {},
                    warned_at=mark.warned_at,
                    warned_to=("admins" if mark.warned_via.to_admins else "owner") if mark.warned_via else None,
                    keep_cap=cap, max_extension=note.max_extension if note else None, cap_known=note is not None,
                    volumes=_volumes(action, view), **common)


@dataclass(frozen=True)
class KeepDecision:
    """A keep to write (`refused` None) or the one line saying why not; `notes` go after the write."""

    until: datetime.datetime
    refused: str | None = None
    notes: tuple[str, ...] = ()


def decide_keep(entry: Entry | None, target: str, until: datetime.datetime,
                now: datetime.datetime) -> KeepDecision:
    """Refuse what the janitor would not honour (a time past the policy's cap, when the mark says
    what it is; a time already past), so the researcher learns it now and not at the deadline."""
    shown = ann.format_expires(until)
    if until <= now:
        return KeepDecision(until, f"{target}: {shown} has already passed; give a later time or a duration (2d)")
    notes: list[str] = []
    untrusted = [k for k in ann.CAP_KEYS if entry is not None and k in entry.foreign]
    if entry is not None and entry.standing in MARKED_STANDINGS and untrusted:
        return KeepDecision(until, f"{target}: {' and '.join(untrusted)} on it was not written by the janitor "
                                   "(someone else wrote it last), so the janitor honours no keep-until on this mark; "
                                   "ask your cluster admins (`janitor unmark` starts the mark again)")
    if entry is not None and entry.standing in MARKED_STANDINGS and entry.cap_known:
        if entry.keep_cap is None:
            return KeepDecision(until, f"{target}: policy {entry.policy} lets no one keep a workload "
                                       f"(maxExtension {entry.max_extension or '0s'}); ask your cluster admins")
        if until > entry.keep_cap:
            cap = ann.format_expires(entry.keep_cap)
            return KeepDecision(until, f"{target}: {shown} is past the cap of policy {entry.policy}, {cap} "
                                       f"(maxExtension {entry.max_extension} after it was first marked); keep it "
                                       f"until then at most: kubectl janitor keep {target} {cap}")
    if entry is not None and entry.standing in MARKED_STANDINGS and entry.deadline is not None \
            and until <= entry.deadline:
        notes.append(f"the deadline in force, {ann.format_expires(entry.deadline)}, is later already")
    elif entry is not None and entry.standing in MARKED_STANDINGS and not entry.cap_known:
        notes.append("the janitor honours it up to its policy's maxExtension after the first mark")
    elif entry is None or entry.standing not in MARKED_STANDINGS:
        notes.append("not marked now; if it is marked later, the janitor keeps it until then, up to the "
                     "policy's maxExtension after that mark")
    if entry is not None and entry.own is not None and entry.own_deadline is not None:
        notes.append(f"its own {entry.own} still deletes it at {ann.format_expires(entry.own_deadline)}: "
                     f"janitor/keep-until does not change that (change or remove {entry.own.split('=')[0]})")
    return KeepDecision(until, None, tuple(notes))


@dataclass(frozen=True, slots=True)
class Event:
    """One of the janitor's Events on the workload."""

    at: datetime.datetime | None
    type: str
    reason: str
    message: str
    count: int = 1


def _time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=datetime.timezone.utc)


def event_of(item: Mapping[str, Any]) -> Event | None:
    """A core/v1 Event as an `Event`; None when another component posted it."""
    source = (item.get("source") or {}).get("component") or item.get("reportingComponent") or ""
    if not str(source).startswith(COMPONENT):
        return None
    meta = item.get("metadata") or {}
    at = (_time(item.get("lastTimestamp")) or _time(item.get("eventTime")) or _time(item.get("firstTimestamp"))
          or _time(meta.get("creationTimestamp")))
    count = item.get("count")
    return Event(at, str(item.get("type") or ""), str(item.get("reason") or ""), str(item.get("message") or ""),
                 count if isinstance(count, int) and count > 0 else 1)
