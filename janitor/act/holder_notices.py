"""Owners told, once, that their deleted pod's processes still hold GPUs (decide.holder_notices).

What was told is kept in the janitor's state ConfigMap (`told.json`, beside the ledger and the
notes), per notice key: when it was told, when a send was last tried, when it was last reported.
A restart or a new leader then tells no one again. It is read only in a cycle that has a notice
(a steady cycle without one asks nothing more of the apiserver), and written only over the
version read (another replica's write in between: not written, and the next cycle may tell
again rather than lose what the other wrote).

- A notice is recorded as told once Slack has it. A send whose answer did not come (Slack may
  have posted it) is recorded as tried, and not tried again before `retry` has passed; then, where
  Slack can be asked, the janitor looks for a message of that send's intent first, as for a
  warning whose answer was lost (act.slack `find_sent`), and sends only when there is none.
- Sends stop when `budget` is spent; what was sent so far is recorded, the rest waits.
- A key is forgotten once it has not been reported for `KEEP_FOR`: a holder missing from one
  cycle (an agent restarting, a message cut to fit) is not told again when it comes back.
- An unreadable record (a hand edit, a time without its zone) is logged and read as empty:
  owners may be told again, the cycle goes on. Nothing here raises into the cycle.
Nothing is sent to the admins from here: their report lists every holder believed.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from janitor.act.slack import Digest, Sender
from janitor.act.slack_messages import Message, MessageContext, cut, escape
from janitor.annotations import Delivery
from janitor.decide.holder_notices import HolderNotice
from janitor.decide.owners import Owner

logger = logging.getLogger(__name__)

DATA_KEY = "told.json"
KEEP_FOR = datetime.timedelta(days=30)
MAX_TEXT = 3000
SEEN_EVERY = datetime.timedelta(days=1)  # how stale a key's "reported" time may get before it is written again


class ToldStore(Protocol):
    def read(self) -> tuple[str | None, str | None]: ...  # (told.json, the ConfigMap's resourceVersion)

    def write(self, text: str, version: str | None) -> str | None: ...


Finder = Callable[[Owner, str, datetime.datetime], Delivery | None]  # (owner, intent, since): a send on Slack


@dataclass
class _Entry:
    told: datetime.datetime | None  # when Slack had it; None: tried, not known to be delivered
    tried: datetime.datetime
    seen: datetime.datetime  # when a cycle last had this notice

    def dump(self) -> dict[str, Any]:
        return {"told": self.told.isoformat() if self.told else None, "tried": self.tried.isoformat(),
                "seen": self.seen.isoformat()}


def _time(value: Any) -> datetime.datetime:
    at = datetime.datetime.fromisoformat(str(value))
    if at.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    return at


def _read(text: str | None) -> dict[str, _Entry]:
    if not text:
        return {}
    try:
        raw = json.loads(text)
        return {str(k): _Entry(_time(v["told"]) if v.get("told") else None, _time(v["tried"]), _time(v["seen"]))
                for k, v in dict(raw).items()}
    except Exception as e:  # any shape, any depth: read as empty, said once per cycle
        logger.error("%s in the state ConfigMap cannot be read (%s): owners of GPU holders may be told again",
                     DATA_KEY, str(e)[:200])
        return {}


def message(notice: HolderNotice, context: MessageContext) -> Message:
    on = f" on {context.cluster_name}" if context.cluster_name else ""
    text = cut(f"GPU janitor{on}: {notice.words(context.admin_channel)}", MAX_TEXT)
    return Message(text, ({"type": "section", "text": {"type": "mrkdwn", "text": escape(text)}},))


def intent(notice: HolderNotice) -> str:
    return "held-gpu-" + hashlib.sha1(notice.key.encode()).hexdigest()[:12]


def tell(notices: Sequence[HolderNotice], store: ToldStore, slack: Sender, now: datetime.datetime,
         context: MessageContext, fence: Callable[[], bool] = lambda: True, *,
         retry: datetime.timedelta = datetime.timedelta(minutes=5), budget: float = 20.0,
         find: Finder | None = None, clock: Callable[[], float] = time.monotonic) -> int:
    """Send the notices not told yet; how many Slack took. Failures are logged, never raised."""
    if not notices or not fence():
        return 0
    try:
        return _tell(notices, store, slack, now, context, fence, retry, budget, find, clock)
    except Exception:
        logger.exception("telling owners of GPU holders failed; a later cycle tries again")
        return 0


def _tell(notices: Sequence[HolderNotice], store: ToldStore, slack: Sender, now: datetime.datetime,
          context: MessageContext, fence: Callable[[], bool], retry: datetime.timedelta, budget: float,
          find: Finder | None, clock: Callable[[], float]) -> int:
    text, version = store.read()
    record = _read(text)
    changed = False
    for n in notices:  # reported now: kept, its time refreshed now and then
        entry = record.get(n.key)
        if entry is not None and now - entry.seen >= SEEN_EVERY:
            entry.seen, changed = now, True
    began, sent = clock(), 0
    for n in notices:
        entry = record.get(n.key)
        if entry is not None and (entry.told is not None or now - entry.tried < retry):
            continue
        if clock() - began > budget or not fence():
            break
        if entry is not None and find is not None:
            try:
                found = find(n.owner, intent(n), entry.tried - retry)
            except Exception as e:  # Slack cannot say: not sent again blind
                logger.warning("cannot look for the GPU holder notice tried for %s/%s (%s)", n.namespace, n.pod, e)
                continue
            if found is not None:
                entry.told, changed = entry.tried, True  # its answer was lost, not the message
                continue
        result = slack.send(Digest(n.owner, (), intent(n), (message(n, context),), admin_fallback=False))
        record[n.key] = _Entry(now if result.delivery is not None else None, now, now)
        changed = True
        if result.delivery is None:
            logger.warning("GPU holder notice for %s/%s not sent to %s: %s", n.namespace, n.pod, n.owner,
                           result.error)
            continue
        sent += 1
    kept = {k: e for k, e in record.items() if now - e.seen < KEEP_FOR}
    if (changed or len(kept) < len(record)) and fence():
        try:
            store.write(json.dumps({k: e.dump() for k, e in sorted(kept.items())}), version)
        except Exception as e:
            logger.warning("cannot record the GPU holder notices sent (%s): they may be sent again", e)
    return sent
