"""What `kubectl janitor` prints: the status table, one workload's explanation, and both as
`janitor/v1` documents (`kind: Status`, `kind: WorkloadStatus`) for `-o json|yaml`.

The words are the janitor's (the plain words of `janitor/why`); here they are only laid out, with
every time in UTC and relative to now ("in 5 h"), because a researcher deciding whether to keep a
workload wants to know how long they have, and a script wants the exact time.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from janitor import annotations as ann
from janitor import report
from janitor.decide.model import ObjectRef
from janitor.decide.notices import kubectl_ref
from janitor.decide.plain import duration
from janitor.documents import API_VERSION, Document
from janitor.plugin.entries import MARKED_STANDINGS, Entry, Event, Standing
from janitor.policy import endings

KEEP_FOR = datetime.timedelta(days=2)  # what the suggested keep asks for, when the cap allows it


def relative(at: datetime.datetime, now: datetime.datetime) -> str:
    """"in 5 h", "3 d 2 h ago", "now"."""
    seconds = (at - now).total_seconds()
    if abs(seconds) < 1:
        return "now"
    words = duration(datetime.timedelta(seconds=abs(seconds)))
    return f"in {words}" if seconds > 0 else f"{words} ago"


def at(when: datetime.datetime | None, now: datetime.datetime) -> str:
    """A time as a person reads it: `2026-11-24 12:00Z (in 21 h)`; "-" for none."""
    if when is None:
        return "-"
    return f"{when.astimezone(datetime.timezone.utc):%Y-%m-%d %H:%M}Z ({relative(when, now)})"


def _ns(entry: Entry, show_namespace: bool) -> str:
    return f" -n {entry.ref.namespace}" if show_namespace and entry.ref.namespace else ""


def keep_command(entry: Entry, now: datetime.datetime, *, show_namespace: bool = False) -> str:
    """The command that keeps it: `kubectl janitor keep job/train 2d` (or up to the cap when that is
    sooner); for its own ttl or expires, the annotation to remove; "" when nothing keeps it."""
    if entry.standing in MARKED_STANDINGS:
        if (entry.cap_known and entry.keep_cap is None) or not entry.cap_trusted:
            return ""
        until = "2d"
        if entry.keep_cap is not None and entry.keep_cap < now + KEEP_FOR:
            if entry.keep_cap <= now:
                return ""
            until = ann.format_expires(entry.keep_cap)
        return f"kubectl janitor keep {entry.target} {until}{_ns(entry, show_namespace)}"
    if entry.standing is Standing.EXPIRES and entry.own is not None and entry.own_deadline is not None:
        ns = f" -n {entry.ref.namespace}" if show_namespace and entry.ref.namespace else ""
        return f"kubectl{ns} annotate {kubectl_ref(entry.ref)} {entry.own.split('=')[0]}-"
    return ""


def _deadline_cell(entry: Entry, now: datetime.datetime) -> str:
    if entry.deadline is None:
        return "-"
    shown = at(entry.deadline, now)
    return shown.replace("(", "(due, ", 1) if entry.standing is Standing.DUE else shown


def _kept_cell(entry: Entry, now: datetime.datetime) -> str:
    if entry.kept_text is not None:
        return f"{entry.kept_text!r} (not a time: to the cap)"
    return at(entry.kept_until, now) if entry.kept_until is not None else "-"


def status_table(entries: Sequence[Entry], now: datetime.datetime, *, all_namespaces: bool, wide: bool,
                 show_namespace: bool) -> str:
    """One row per workload, soonest deadline first; -o wide adds the state, marks, cap and command."""
    header = ["WORKLOAD", "POLICY", "ACTION", "DEADLINE", "KEPT-UNTIL"]
    if wide:
        header += ["STATE", "MARKED", "KEEP-CAP", "TO-KEEP"]
    header.append("WHY")
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    rows = []
    for e in entries:
        row = [e.target, e.policy or "-", e.action or "-", _deadline_cell(e, now), _kept_cell(e, now)]
        if wide:
            row += [str(e.standing), at(e.marked_at, now) if e.marked_at else "-",
                    at(e.keep_cap, now) if e.keep_cap else "-", keep_command(e, now, show_namespace=show_namespace)
                    or "-"]
        row.append(e.words.replace("\n", " ") or "-")
        if all_namespaces:
            row.insert(0, e.ref.namespace or "")
        rows.append(row)
    text = report.table(rows, header)
    marked = next((e for e in entries if e.standing in MARKED_STANDINGS and keep_command(e, now)), None)
    if marked is not None and not wide:
        command = keep_command(marked, now, show_namespace=show_namespace)
        text += (f"\n\nTo keep one: {command} (any time up to its policy's cap). "
                 f"All of it: kubectl janitor explain {marked.target}{_ns(marked, show_namespace)}")
    return text


def nothing(namespace: str | None) -> str:
    where = f"namespace {namespace}" if namespace else "any namespace you can list"
    return (f"No workload in {where} carries a janitor mark, {ann.TTL}, {ann.EXPIRES} or {ann.KEEP_UNTIL}: "
            "the janitor has nothing planned for them.")


def _standing_words(e: Entry, now: datetime.datetime) -> str:
    if e.standing is Standing.MARKED:
        return ("marked; its owner has not been warned yet (Slack), and nothing happens before the warning "
                "arrived and its notice has run")
    if e.action == "report" and e.standing in (Standing.WARNED, Standing.DUE):
        return "warned; nothing happens at the deadline: the policy only reports"
    if e.standing is Standing.WARNED:
        return "its owner was warned; acted on at the deadline if it is still idle then (used again, the mark goes)"
    if e.standing is Standing.DUE:
        return "past the deadline: acted on at the janitor's next cycle if it is still idle (it checks right before)"
    if e.standing is Standing.BROKEN:
        return (f"a broken mark ({'; '.join(e.problems)}): the janitor removes it at its next cycle, and marks "
                "again with a new warning if it is still idle")
    if e.standing is Standing.COPY:
        return "a copy of another object's mark (janitor/marked-uid is not this object's): never acted on"
    if e.standing is Standing.EXPIRES:
        return (f"deleted at {at(e.deadline, now)} by its own annotation" if e.deadline else
                "its own annotation does not delete it")
    return f"not marked; {ann.KEEP_UNTIL} is set"


def _facts(e: Entry) -> str:
    facts = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in e.facts.items())
    measured = f"policy {e.policy}" + (f", trigger {e.trigger}" if e.trigger else "")
    return measured + (f": {facts}" if facts else "") + (f"  [{e.code}]" if e.code else "")


def explain_text(target: str, namespace: str, e: Entry | None, events: Sequence[Event], now: datetime.datetime,
                 *, note: str = "", show_namespace: bool = False) -> str:
    lines = [f"{target} in namespace {namespace}: " + (str(e.standing) if e else "nothing from the janitor")]
    if note:
        lines.append(f"  {note}")
    if e is None:
        lines.append(f"  no janitor mark, {ann.TTL}, {ann.EXPIRES} or {ann.KEEP_UNTIL} on it")
    else:
        rows: list[tuple[str, str]] = [("state", _standing_words(e, now))]
        if e.standing in MARKED_STANDINGS or e.standing is Standing.EXPIRES:
            ending = endings.find(e.action or "")
            what = ending.explained if ending is not None else e.action or "-"
            rows.append(("what happens", f"{what}, at {at(e.deadline, now)}" if e.deadline else what))
            if e.volumes:
                rows.append(("volumes", e.volumes))
        rows.append(("why", e.words or "-"))
        if e.policy:
            rows.append(("judged by", _facts(e)))
        if e.marked_at:
            rows.append(("marked", at(e.marked_at, now)))
        if e.warned_at:
            rows.append(("warned", f"{at(e.warned_at, now)}, on Slack, to "
                                   + ("its owner" if e.warned_to == "owner" else "the admins (no owner reached)")))
        if e.standing in MARKED_STANDINGS or e.kept_until or e.kept_text:
            rows.append(("kept until", _kept_cell(e, now)))
        if e.standing in MARKED_STANDINGS:
            cap = (f"none: {' and '.join(k for k in ann.CAP_KEYS if k in e.foreign)} not written by the janitor"
                   if not e.cap_trusted else
                   "unknown here (a mark without janitor/why): up to the policy's maxExtension after the first mark"
                   if not e.cap_known else
                   f"none: policy {e.policy} lets no one keep a workload" if e.keep_cap is None else
                   f"{at(e.keep_cap, now)}, maxExtension {e.max_extension} after the first mark")
            rows.append(("keep cap", cap))
        command = keep_command(e, now, show_namespace=show_namespace)
        if command:
            rows.append(("to keep it", command))
        if e.own and e.standing is not Standing.EXPIRES:
            rows.append(("also", f"its own {e.own}: deleted at {at(e.own_deadline, now)} whatever the mark says"
                         if e.own_deadline else f"its own {e.own}"))
        if e.sentence and e.sentence != e.words:
            rows.append(("janitor/reason", e.sentence))
        if e.foreign:
            rows.append(("not the janitor's", f"{', '.join(e.foreign)}: someone else wrote them last, so the janitor "
                                              "takes no deadline, cap, warning or release from them"))
        width = max(len(label) for label, _ in rows)
        lines += [f"  {label.ljust(width)}  {value}" for label, value in rows]
    lines.append("")
    if events:
        lines.append("Events from the janitor, oldest first:")
        rows_ = [[at(ev.at, now) if ev.at else "-", ev.type, ev.reason + (f" (x{ev.count})" if ev.count > 1 else ""),
                  ev.message.replace("\n", " ")] for ev in events]
        lines += ["  " + line for line in report.table(rows_, ["TIME", "TYPE", "REASON", "MESSAGE"]).split("\n")]
    else:
        lines.append("No Events from the janitor on it (Events last about an hour).")
    return "\n".join(lines)


# -- documents ----------------------------------------------------------------------------------------------

def _time(when: datetime.datetime | None) -> str | None:
    return ann.format_deadline(when) if when is not None else None


def _ref(ref: ObjectRef) -> Document:
    return {"kind": ref.kind, "apiVersion": ref.api_version, "namespace": ref.namespace, "name": ref.name,
            "uid": ref.uid}


def item(e: Entry, now: datetime.datetime, *, show_namespace: bool = False) -> Document:
    """One workload in a document; every time UTC, `deadlineInSeconds` negative once it passed."""
    return {
        "object": _ref(e.ref), "target": e.target, "state": str(e.standing),
        "policy": e.policy, "trigger": e.trigger, "action": e.action,
        "deadline": _time(e.deadline),
        "deadlineInSeconds": int((e.deadline - now).total_seconds()) if e.deadline else None,
        "why": {"code": e.code, "words": e.words, "facts": dict(e.facts), "sentence": e.sentence or None},
        "markedAt": _time(e.marked_at), "warnedAt": _time(e.warned_at), "warnedTo": e.warned_to,
        "keepCap": _time(e.keep_cap), "maxExtension": e.max_extension,
        "keptUntil": _time(e.kept_until) if e.kept_until else e.kept_text,
        "own": e.own, "ownDeadline": _time(e.own_deadline), "problems": list(e.problems),
        "writtenByOthers": list(e.foreign), "volumes": e.volumes or None,
        "keepCommand": keep_command(e, now, show_namespace=show_namespace) or None,
    }


def status_document(entries: Sequence[Entry], now: datetime.datetime, namespace: str | None,
                    not_shown: Sequence[str]) -> Document:
    return {"apiVersion": API_VERSION, "kind": "Status", "now": _time(now.replace(microsecond=0)),
            "namespace": namespace, "items": [item(e, now, show_namespace=namespace is None) for e in entries],
            "notShown": list(not_shown)}


def event(ev: Event) -> Document:
    return {"time": _time(ev.at.replace(microsecond=0)) if ev.at else None, "type": ev.type, "reason": ev.reason,
            "message": ev.message, "count": ev.count}


def workload_document(ref: ObjectRef, e: Entry | None, events: Sequence[Event], now: datetime.datetime,
                      note: str = "") -> Document:
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "WorkloadStatus",
                           "now": _time(now.replace(microsecond=0)), "object": _ref(ref),
                           "status": item(e, now) if e is not None else None, "events": [event(ev) for ev in events]}
    if note:
        doc["note"] = note
    return doc


def dump(document: Mapping[str, Any], output: str) -> str:
    from janitor import documents

    return documents.dump(document, output)
