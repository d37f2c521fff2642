"""The buttons under each warning and reminder: Keep 1 day, Keep 3 days, Release now, Why?

A researcher answers in one click instead of `kubectl annotate` and edit rights (gpu-pruner's Keep
buttons, JupyterHub's "your server will stop" notice). Each button carries the workload's UID and
the mark the message is about (`decide.clicks.ButtonValue`), so a click on an old message does
nothing; what a click may do is judged when it arrives (`decide.clicks.judge`). Keep buttons are
shown only where the policy's cap leaves room, and never promise more than it: "Keep 1 day" becomes
"Keep until <the cap>" when the cap is nearer.
"""

from __future__ import annotations

import datetime
from typing import Any

from janitor.decide.clicks import ButtonValue
from janitor.decide.notices import Notice, NoticeKind
from janitor.policy import endings

BLOCK_PREFIX = "janitor:"  # + the workload's UID: the block a click's answer replaces
DAY = datetime.timedelta(days=1)


def _button(text: str, action_id: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "button", "text": {"type": "plain_text", "text": text, "emoji": True},
            "action_id": action_id, "value": value, **extra}


def actions(notice: Notice) -> dict[str, Any] | None:
    """The actions block under one notice; None for notices nobody can answer (done, cancelled)."""
    if notice.kind not in (NoticeKind.WARNING, NoticeKind.REMINDER) or notice.marked_at is None:
        return None
    value = ButtonValue.of(notice.workload, notice.marked_at, notice.action).encode()
    now, cap, deadline = notice.now, notice.cap, notice.deadline
    elements = []
    if cap is not None and (deadline is None or cap > deadline) and cap > now:
        label = "Keep 1 day" if cap >= now + DAY else f"Keep until {cap:%a %H:%M} UTC"
        elements.append(_button(label, "janitor.keep.1d", value, style="primary"))
        if cap >= now + 3 * DAY:
            elements.append(_button("Keep 3 days", "janitor.keep.3d", value))
    ending = endings.find(notice.action)
    if ending is not None and ending.acts:  # a report-only policy has nothing to release it to
        elements.append(_button("Release now", "janitor.release", value, confirm={
            "title": {"type": "plain_text", "text": "Release it now?"},
            "text": {"type": "mrkdwn", "text": f"{notice.workload.kind} {notice.workload.name} will be "
                                               f"{ending.done} within a minute."},
            "confirm": {"type": "plain_text", "text": "Release"},
            "deny": {"type": "plain_text", "text": "Cancel"}}))
    elements.append(_button("Why?", "janitor.why", value))
    return {"type": "actions", "block_id": (BLOCK_PREFIX + notice.workload.uid)[:255], "elements": elements}
