"""Block Kit messages for the lifecycle's notices: what, why, when, and how to keep it.

One owner gets one digest per cycle, so a researcher reads a single DM that says what is about to
happen to their idle GPUs and the exact command that stops it. Rendering is pure (the cycle's `now`
comes in, plain dicts go out) so tests read exactly what the user would see. Slack rejects a
message rather than trimming it, so every limit is enforced here: a long digest becomes numbered
parts that each repeat the summary, because any part may be the one a user opens first.

The "why" is in plain words (janitor.decide.plain), not the reason's sentence the audit log keeps;
and every part names its cluster (a researcher may use several) and ends with where to ask and
the researcher guide, since a DM from a bot is where questions arise and no one is there to answer.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from janitor.act.slack_buttons import actions
from janitor.decide.notices import Notice, NoticeKind
from janitor.decide.plain import plain
from janitor.policy import endings

MAX_BLOCKS = 50
MAX_SECTION = 3000  # characters of a section's text
MAX_HEADER = 150  # characters of a header's plain_text
MAX_TEXT = 3000  # the fallback; Slack wants under 4000, phones show far less
# Undocumented: Slack answers msg_blocks_too_long at about 13,200 characters of block text.
MAX_BLOCK_CHARS = 12_000
COMPACT_OVER = 200  # more notices than this: shorter `why`, so the parts stay few
WHY_LIMIT, WHY_LIMIT_COMPACT, COMMAND_LIMIT, NAME_LIMIT = 1200, 200, 400, 300  # keep a section < 3000
CLUSTER_LIMIT, CHANNEL_LIMIT, GUIDE_LIMIT = 60, 100, 1000  # the header keeps room; the footer stays < 3000

UTC = datetime.timezone.utc
WHEN = "*When:* "  # a notice's deadline line; a click that moves the deadline edits it (`with_deadline`)
FIRST = " The first deadline is "  # the summary's earliest deadline, edited likewise
PART = "This part shows "  # in the summary of a digest sent in parts: each part holds only some notices
ORDER = (NoticeKind.WARNING, NoticeKind.REMINDER, NoticeKind.DONE, NoticeKind.UNDONE, NoticeKind.CANCELLED)
TITLE = {NoticeKind.WARNING: ":warning: *Warning:*", NoticeKind.REMINDER: ":alarm_clock: *Reminder:*",
         NoticeKind.DONE: ":broom: *Done:*", NoticeKind.UNDONE: ":leftwards_arrow_with_hook: *Not held:*",
         NoticeKind.CANCELLED: ":white_check_mark: *Cancelled:*"}
NOUN = {NoticeKind.WARNING: ("warning", "warnings"), NoticeKind.REMINDER: ("reminder", "reminders"),
        NoticeKind.DONE: ("done", "done"), NoticeKind.UNDONE: ("not held", "not held"),
        NoticeKind.CANCELLED: ("cancelled", "cancelled")}


@dataclass(frozen=True, slots=True)
class MessageContext:
    """Where the messages come from and where their readers can turn (settings.SlackSettings);
    each part is shown only when set."""

    cluster: str | None = None  # "mn2": in the header and the notification
    admin_channel: str | None = None  # "#gpu-admins", "gpu-admins" or a channel ID ("C0ADMINS")
    guide_url: str | None = None  # the researcher guide
    buttons: bool = False  # a receiver takes clicks (Socket Mode or HTTP): only then are buttons shown

    @property
    def cluster_name(self) -> str:
        """The name on one line and short enough for the header; '' when none."""
        return cut(" ".join((self.cluster or "").split()), CLUSTER_LIMIT)


@dataclass(frozen=True, slots=True)
class Message:
    """One chat.postMessage: `text` is the notification and screen-reader fallback."""

    text: str
    blocks: tuple[Mapping[str, Any], ...]


def escape(text: str) -> str:
    """Slack reads `&`, `<` and `>` as markup (links, mentions); user text must not become one."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(text: str, limit: int) -> str:
    """At most `limit` characters, marked with an ellipsis; never splits an `&amp;` entity."""
    if len(text) <= limit:
        return text
    kept = text[:limit - 1]
    amp = kept.rfind("&")
    if amp > len(kept) - 5 and ";" not in kept[amp:]:
        kept = kept[:amp]
    return kept + "…"


def _utc(when: datetime.datetime) -> datetime.datetime:
    """Naive times are taken as UTC, so rendering never depends on the host's zone."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def slack_date(when: datetime.datetime) -> str:
    """Shown in the reader's own time zone by Slack; the fallback (old clients, search) is UTC."""
    at = _utc(when)
    return f"<!date^{int(at.timestamp())}^{{date_short_pretty}} at {{time}}|{at:%Y-%m-%d %H:%M} UTC>"


def relative(delta: datetime.timedelta) -> str:
    """"in 40 min", "in 1 h 30 min", "in 23 h", "in 3 d": as precise as a reader can use; "now" if due."""
    seconds = delta.total_seconds()
    if seconds <= 0:
        return "now"
    minutes = max(1, round(seconds / 60))
    if minutes < 60:
        return f"in {minutes} min"
    if minutes < 120:
        return f"in 1 h {minutes - 60} min" if minutes > 60 else "in 1 h"
    hours = round(minutes / 60)
    return f"in {hours} h" if hours < 48 else f"in {round(hours / 24)} d"


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def _acts(action: str) -> bool:
    ending = endings.find(action)
    return ending is None or ending.acts


def _done_to(action: str) -> str:
    ending = endings.find(action)
    return ending.done if ending is not None else escape(cut(action, 40))


def _ref(notice: Notice) -> str:
    ref = notice.workload
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return escape(cut(f"{ref.kind} {where}", NAME_LIMIT))


def _when(deadline: datetime.datetime, now: datetime.datetime, *, rich: bool) -> str:
    at = slack_date(deadline) if rich else f"{_utc(deadline):%Y-%m-%d %H:%M} UTC"
    return f"{at} ({relative(_utc(deadline) - _utc(now))})"


def _code(command: str) -> str:
    return "```" + cut(escape(command), COMMAND_LIMIT) + "```"


def _sort_key(notice: Notice) -> tuple[int, float, str, str]:
    deadline = _utc(notice.deadline).timestamp() if notice.deadline else float("inf")
    return ORDER.index(notice.kind), deadline, notice.workload.namespace or "", notice.workload.name


def _verbs(notices: Sequence[Notice]) -> str:
    return " or ".join(dict.fromkeys(_done_to(n.action) for n in notices))


def summary(notices: Sequence[Notice], now: datetime.datetime, *, rich: bool = True) -> str:
    """The whole digest in a few sentences; `rich` adds bold and Slack's local-time dates."""
    by = {kind: [n for n in notices if n.kind is kind] for kind in ORDER}
    pending = by[NoticeKind.WARNING] + by[NoticeKind.REMINDER]
    done, cancelled = by[NoticeKind.DONE], by[NoticeKind.CANCELLED]
    parts = []
    if pending:
        many, gpus = len(pending) > 1, sum(n.gpus for n in pending)
        conditions = {n.condition for n in pending}
        if conditions == {"idle", "unused"}:  # never used is idle too, and each item says which
            conditions = {"idle"}
        if conditions == {"idle"}:
            verb = ("hold" if many else "holds") if gpus else ("are" if many else "is")
            state = f"{verb} {_count(gpus, 'GPU')} idle" if gpus else f"{verb} idle"
        else:
            state = f"{'are' if many else 'is'} " + (conditions.pop() if len(conditions) == 1 else "idle or stuck")
        lead = f"{len(pending)} of your workloads {state}"
        acting = [n for n in pending if _acts(n.action)]
        deadlines = [_utc(n.deadline) for n in acting if n.deadline]
        first = f"{FIRST}{_when(min(deadlines), now, rich=rich)}." if deadlines else ""
        then = (f"{'they' if many else 'it'} will be {_verbs(pending)} unless used or kept" if acting else
                f"the janitor only reports {'them' if many else 'it'}")
        parts.append(f"{f'*{lead}*' if rich else lead}: {then}.{first}")
    if done:
        gpus = sum(n.gpus for n in done)
        freed = f", freeing {_count(gpus, 'GPU')}" if gpus else ""
        parts.append(f"{_count(len(done), 'workload')} {'were' if len(done) > 1 else 'was'} {_verbs(done)}{freed}.")
    undone = by[NoticeKind.UNDONE]
    if undone:
        many = len(undone) > 1
        parts.append(f"{_count(len(undone), 'workload')} {'were' if many else 'was'} {_verbs(undone)} and "
                     f"restored by another controller: the janitor does not try again for {'them' if many else 'it'}.")
    if cancelled:
        many = len(cancelled) > 1
        parts.append(f"{_count(len(cancelled), 'workload')} {'are' if many else 'is'} no longer marked: "
                     f"nothing will happen to {'them' if many else 'it'}.")
    counts = " · ".join(_count(len(by[k]), *NOUN[k]) for k in ORDER if by[k])
    return " ".join(parts) + (f"\n{counts}" if rich else f" ({counts})")


def _headline(notices: Sequence[Notice], cluster: str) -> str:
    pending = sum(n.kind in (NoticeKind.WARNING, NoticeKind.REMINDER) for n in notices)
    done = sum(n.kind is NoticeKind.DONE for n in notices)
    lead = "Idle GPUs" if all(n.condition in ("idle", "unused") for n in notices) else "GPU janitor"
    lead += f" on {cluster}" if cluster else ""
    if pending:
        return f"{lead}: {_count(pending, 'workload')} will be reclaimed"
    if done:
        return f"{lead}: {_count(done, 'workload')} reclaimed"
    return f"{lead}: {_count(len(notices), 'workload')} no longer marked"


def notice_text(notice: Notice, now: datetime.datetime, *, compact: bool = False) -> str:
    """One notice as a section's mrkdwn: what, why, when, and the command that keeps or resumes it."""
    policy = f"policy `{escape(cut(notice.policy, 100))}`"
    gpus = _count(notice.gpus, "GPU")
    why = f"*Why:* {cut(escape(plain(notice.why)), WHY_LIMIT_COMPACT if compact else WHY_LIMIT)}"
    title, to = f"{TITLE[notice.kind]} *{_ref(notice)}*", _done_to(notice.action)
    if notice.kind is NoticeKind.CANCELLED:
        then = f"it will not be {to}" if to else "nothing will happen to it"
        lines = [f"{title} is no longer marked ({policy}), so {then}. Nothing to do.", why]
    elif notice.kind is NoticeKind.UNDONE:
        lines = [f"{title} *{_ref(notice)}* was {to} ({policy}), and that did not hold.", why]
        lines.append("Nothing was freed for long. To free its GPUs, change it where it is kept "
                     "(the Git repository, or the autoscaler's minimum), or delete it yourself.")
    elif notice.kind is NoticeKind.DONE:
        lines = [f"{title} was *{to}* ({policy}){f', freeing {gpus}' if notice.gpus else ''}.", why]
        if notice.volumes:
            lines.append(f"*Volumes:* {escape(notice.volumes)}")
        if notice.resume_command:
            lines.append(f"*To bring it back:*\n{_code(notice.resume_command)}")
    else:
        acts = _acts(notice.action)  # a report names no action and no deadline: nothing happens then
        lines = [f"{title} will be *{to}* ({policy}, {gpus}) unless it is used or kept." if acts else
                 f"{title} is {escape(notice.condition)} ({policy}, {gpus}). This policy only reports it: nothing "
                 "will be done to it.", why]
        if notice.deadline and acts:
            lines.append(f"{WHEN}{_when(notice.deadline, now, rich=True)}")
        if notice.volumes:
            lines.append(f"*Volumes:* {escape(notice.volumes)}")
        if notice.managed_by:
            lines.append(f"*Managed by:* {escape(notice.managed_by)}, which would undo a reclaim, so the janitor "
                         "only reports it; to free its GPUs, scale it down where "
                         f"{escape(notice.managed_by)} takes it from")
        if notice.keep_command:
            lines.append(f"*To keep it:*\n{_code(notice.keep_command)}")
        if notice.resume_command and notice.action != "delete" and not compact:
            lines.append(f"*After that, resume with:*\n{_code(notice.resume_command)}")
    return cut("\n".join(lines), MAX_SECTION)  # a guard: the limits above keep it shorter


def with_deadline(blocks: Sequence[Mapping[str, Any]], block_id: str, deadline: datetime.datetime,
                  now: datetime.datetime) -> list[dict[str, Any]]:
    """A sent message's blocks with the deadline in force of the notice whose buttons are
    `block_id` (after a click moved it): its *When:* line, and the summary's first deadline. A
    message edited after a Keep must not show the old deadline above "Kept until ...", nor a first
    deadline later than one in force: when the message holds the whole digest, the first deadline
    is the earliest of its *When:* lines now; a part of a digest sent in parts names the first
    deadline of the whole digest, most of whose *When:* lines are in other messages, so it keeps the
    one it shows, or the clicked deadline when that is earlier (earlier than true is the safe side)."""
    edited = [dict(b) for b in blocks]
    buttons = next((i for i, b in enumerate(edited) if b.get("block_id") == block_id), 0)
    if buttons == 0 or edited[buttons - 1].get("type") != "section":
        return edited
    when = f"{WHEN}{_when(deadline, now, rich=True)}"
    edited[buttons - 1] = _edit(edited[buttons - 1], lambda text: "\n".join(
        when if line.startswith(WHEN) else line for line in text.split("\n")))
    summary = next((i for i, b in enumerate(edited) if b.get("type") == "section" and FIRST in b["text"]["text"]),
                   None)
    said = _FIRST_SAID.search(edited[summary]["text"]["text"]) if summary is not None else None
    if summary is None or said is None:
        return edited
    if PART in edited[summary]["text"]["text"]:
        earliest = min(int(said.group(1)), int(_utc(deadline).timestamp()))
    else:
        earliest = min((int(found.group(1)) for b in edited if b.get("type") == "section"
                        for line in b["text"]["text"].split("\n") if line.startswith(WHEN)
                        for found in [_DATE.search(line)] if found), default=int(said.group(1)))
    first = f"{FIRST}{_when(datetime.datetime.fromtimestamp(earliest, UTC), now, rich=True)}."
    edited[summary] = _edit(edited[summary], lambda text: _FIRST_SAID.sub(lambda _: first, text, count=1))
    return edited


_DATE = re.compile(r"<!date\^(\d+)\^")
_FIRST_SAID = re.compile(re.escape(FIRST) + r"<!date\^(\d+)\^[^>]*> \([^)]*\)\.")


def _edit(section: Mapping[str, Any], change: Callable[[str], str]) -> dict[str, Any]:
    return {**section, "text": {**section["text"], "text": change(section["text"]["text"])}}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, MAX_SECTION)}}


def _channel(name: str) -> str:
    """A channel ID becomes Slack's link to it; a name is shown with its `#`."""
    name = name.strip()
    if name[:1] in ("C", "G") and name.isalnum() and name.isupper():
        return f"<#{name}>"
    return escape(cut("#" + name.lstrip("#"), CHANNEL_LIMIT))


def footer(context: MessageContext) -> dict[str, Any] | None:
    """The last block of every part: where to ask and the guide, whichever are set; None: neither."""
    parts = []
    if context.admin_channel and context.admin_channel.strip().lstrip("#"):
        parts.append(f"Questions? Ask in {_channel(context.admin_channel)}")
    if context.guide_url and context.guide_url.strip():
        parts.append(f"Researcher guide: <{escape(cut(context.guide_url.strip(), GUIDE_LIMIT))}>")
    if not parts:
        return None
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": cut(" · ".join(parts), MAX_SECTION)}]}


def _size(block: Mapping[str, Any]) -> int:
    """What a block costs of the character budget: a section its text, anything else (buttons with
    their values) its whole JSON, to be safe."""
    return len(block["text"]["text"]) if block.get("type") == "section" else len(json.dumps(block))


def _pack(groups: list[list[dict[str, Any]]], *, room: int, chars: int) -> list[list[list[dict[str, Any]]]]:
    """Greedy, in order: a part takes notices (a section and its buttons, never split) until its
    block count or character budget is spent."""
    parts: list[list[list[dict[str, Any]]]] = [[]]
    blocks = used = 0
    for group in groups:
        size = sum(_size(b) for b in group)
        if parts[-1] and (blocks + len(group) > room or used + size > chars):
            parts.append([])
            blocks = used = 0
        parts[-1].append(group)
        blocks += len(group)
        used += size
    return parts


def render_digest(notices: Sequence[Notice], now: datetime.datetime, *,
                  context: MessageContext = MessageContext()) -> list[Message]:
    """One owner's notices as one or more messages (parts); nothing to say gives no message."""
    if not notices:
        return []
    ordered = sorted(notices, key=_sort_key)
    compact = len(ordered) > COMPACT_OVER
    cluster = context.cluster_name
    rich, words, headline = summary(ordered, now), summary(ordered, now, rich=False), _headline(ordered, cluster)
    last = footer(context)
    last_chars = len(last["elements"][0]["text"]) if last else 0
    overhead = 3 + (last is not None)  # header, summary, divider; the footer
    groups = [[_section(notice_text(n, now, compact=compact)), *filter(None, [actions(n) if context.buttons else None])]
              for n in ordered]
    # The budget leaves room for the header (<= 150), the part's span line and the footer.
    parts = _pack(groups, room=MAX_BLOCKS - overhead, chars=MAX_BLOCK_CHARS - len(rich) - last_chars - 200)
    messages, first = [], 0
    for index, part in enumerate(parts, start=1):
        label = f" (part {index} of {len(parts)})" if len(parts) > 1 else ""
        shown = ordered[first:first + len(part)]
        span = f"\n{PART}{first + 1}–{first + len(part)} of {len(ordered)}." if label else ""
        blocks = ({"type": "header", "text": {"type": "plain_text", "emoji": True,
                                              "text": cut(headline, MAX_HEADER - len(label)) + label}},
                  _section(rich + span), {"type": "divider"}, *(b for g in part for b in g),
                  *((last,) if last else ()))
        names = ", ".join(_ref(n) for n in shown)
        on = f" on {escape(cluster)}" if cluster else ""
        text = cut(f"GPU janitor{on}{label}: {words} Workloads: {names}", MAX_TEXT)
        messages.append(Message(text, blocks))
        first += len(part)
    return messages


def render_admin_report(title: str, sections: Sequence[tuple[str, Sequence[str]]], *,
                        lines_per_section: int = 20) -> list[Message]:
    """The admins' report: a header, then one section per topic, long lists cut with a count."""
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": cut(title, 150)}}]
    summary_parts = []
    for name, lines in sections:
        shown = [f"• {escape(line)}" for line in lines[:lines_per_section]]
        if len(lines) > lines_per_section:
            shown.append(f"… and {len(lines) - lines_per_section} more")
        blocks.append(_section(f"*{escape(name)}* ({len(lines)})\n" + "\n".join(shown)))
        summary_parts.append(f"{name}: {len(lines)}")
    text = cut(f"{title}: " + "; ".join(summary_parts), 3000)
    return [Message(text, tuple(blocks[i:i + MAX_BLOCKS])) for i in range(0, len(blocks), MAX_BLOCKS)]
