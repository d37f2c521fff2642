"""Owners told, once, that their deleted pod's processes still hold GPUs (decide.holder_notices).

The keys told are kept in the janitor's state ConfigMap (`told.json`, beside the ledger and the
notes) with when, so a restart or a new leader does not tell again. It is read only in a cycle
that has a notice (a steady cycle without one asks nothing more of the apiserver), and written
only over the version read (another replica's write in between: not written, and the next cycle
may tell again, rather than lose what the other wrote). A notice is recorded once Slack has it:
a crash between the send and the write tells the owner twice, never not at all. A key stays while
its holders are reported and for `KEEP_FOR` after (the holder may come back: told once is enough).
Nothing is sent to the admins from here: their report lists every holder.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from janitor import errors
from janitor.act.slack import Digest, Sender
from janitor.act.slack_messages import Message, MessageContext, cut, escape
from janitor.decide.holder_notices import HolderNotice

logger = logging.getLogger(__name__)

DATA_KEY = "told.json"
KEEP_FOR = datetime.timedelta(days=30)
MAX_TEXT = 3000


class ToldStore(Protocol):
    def read(self) -> tuple[str | None, str | None]: ...  # (told.json, the ConfigMap's resourceVersion)

    def write(self, text: str, version: str | None) -> str | None: ...


def _told(text: str | None) -> dict[str, datetime.datetime]:
    """What was told, by key; an unreadable record tells nobody again (logged), as one lost would."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        return {str(k): datetime.datetime.fromisoformat(str(v)) for k, v in dict(raw).items()}
    except (ValueError, TypeError) as e:
        logger.error("%s in the state ConfigMap cannot be read (%s): owners of GPU holders may be told again",
                     DATA_KEY, e)
        return {}


def message(notice: HolderNotice, context: MessageContext) -> Message:
    on = f" on {context.cluster_name}" if context.cluster_name else ""
    words = notice.words(context.admin_channel)
    text = cut(f"GPU janitor{on}: {words}", MAX_TEXT)
    return Message(text, ({"type": "section", "text": {"type": "mrkdwn", "text": escape(text)}},))


def tell(notices: Sequence[HolderNotice], store: ToldStore, slack: Sender, now: datetime.datetime,
         context: MessageContext, fence: Callable[[], bool] = lambda: True) -> int:
    """Send the notices not told yet; how many Slack took. Failures are logged, never raised."""
    if not notices or not fence():
        return 0
    try:
        text, version = store.read()
    except errors.KubeError as e:
        logger.warning("cannot read %s (%s): owners of GPU holders are told in a later cycle", DATA_KEY, e)
        return 0
    told = _told(text)
    sent = 0
    for notice in notices:
        if notice.key in told or not fence():
            continue
        intent = "held-gpu-" + hashlib.sha1(notice.key.encode()).hexdigest()[:12]
        result = slack.send(Digest(notice.owner, (), intent, (message(notice, context),), admin_fallback=False))
        if result.delivery is None:
            logger.warning("GPU holder notice for %s/%s not sent to %s: %s", notice.namespace, notice.pod,
                           notice.owner, result.error)
            continue
        told[notice.key] = now
        sent += 1
    current = {n.key for n in notices}
    kept = {k: at for k, at in told.items() if k in current or now - at < KEEP_FOR}
    if (sent or len(kept) < len(told)) and fence():
        try:
            store.write(json.dumps({k: at.isoformat() for k, at in sorted(kept.items())}), version)
        except errors.KubeError as e:
            logger.warning("cannot record the GPU holder notices sent (%s): they may be sent again", e)
    return sent
