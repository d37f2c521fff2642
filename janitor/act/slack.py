"""Sending the lifecycle's notices on Slack: one digest per owner and cycle, and proof of sending.

Owners are resolved to a conversation here (an e-mail through users.lookupByEmail, a user through
conversations.open), with both lookups cached for `cache_ttl`, misses included: a misspelt address
would otherwise cost one lookup per cycle, forever. Only definitive misses are cached and only they
send a digest to the admin channel; a throttled or unreachable Slack fails the send instead, so a
Slack outage neither floods the admins nor loses the owner's message for good.

Every message carries Slack message metadata naming the digest's `intent` and the workloads it
tells of (their uids). A janitor killed after Slack accepted a message and before recording it can
then ask Slack (`find_sent`) instead of sending it twice. One intent names all of one owner's
notices of one cycle, which may go out as more than one digest (a kept note is sent alone), so a
lookup for one workload's note asks for a message about that workload (`uid`).

Retries of single calls are slack_sdk's retry handlers (`connect`); nothing here loops on a failed
call, the next cycle does, and `Outbox` bounds how long a cycle waits.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.error import URLError

import slack_sdk
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)

from janitor.act.slack_messages import Message
from janitor.annotations import Delivery
from janitor.decide.notices import Notice
from janitor.decide.owners import Owner, OwnerKind

logger = logging.getLogger(__name__)

EVENT_TYPE = "janitor_notice"  # the metadata event_type of every message the janitor posts
HISTORY_PAGE = 200  # messages per conversations.history page
HISTORY_PAGES = 5  # find_sent reads at most this many pages, newest first
CHANNEL_PAGES = 10  # pages of conversations.list read to find a "#name"'s id
MEMBERS_PAGE, MEMBER_PAGES = 1000, 5  # conversations.members: a team channel's members, up to 5,000
# Answers that will not change by asking again: the owner cannot be reached, tell the admins.
UNREACHABLE = frozenset({"users_not_found", "user_not_found", "user_disabled", "cannot_dm_bot",
                         "channel_not_found", "not_in_channel", "is_archived", "unknown_owner"})


class SlackUnavailable(Exception):
    """Slack could not be asked, so whether something was sent is unknown: hold off resending."""


class _Failed(Exception):
    """A Slack call failed; `code` is Slack's error code ("" for no answer), args[0] in words."""

    def __init__(self, text: str, code: str = "") -> None:
        super().__init__(text)
        self.code = code


@dataclass(frozen=True, slots=True)
class Digest:
    """One message to one owner: the notices of one cycle, sent together."""

    owner: Owner
    notices: tuple[Notice, ...]
    intent: str  # unique id of this send; put in message metadata so a crash can be recognised
    messages: tuple[Message, ...]  # already rendered
    admin_fallback: bool = True  # False: the admins already heard about these; only the owner now
    about: tuple[str, ...] = ()  # the workloads (uids) of messages rendered earlier, without their notices

    @property
    def uids(self) -> tuple[str, ...]:
        """The workloads it tells of, in every message's metadata: what a later lookup matches."""
        return tuple(dict.fromkeys((*(n.workload.uid for n in self.notices), *self.about)))

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError(f"digest {self.intent} for {self.owner} has no messages to send")


@dataclass(frozen=True, slots=True)
class SendResult:
    """`delivery` None: not delivered and `error` says why. Both set: the first message went out
    but a later one of the digest did not (the owner was told; do not send it all again)."""

    digest: Digest
    delivery: Delivery | None
    error: str = ""


class Slack:
    """The janitor's Slack: destinations, sends and the check for an earlier send."""

    def __init__(self, client: slack_sdk.WebClient, *, admin_channel: str | None = None,
                 allow_admin_fallback: bool = True,
                 cache_ttl: datetime.timedelta = datetime.timedelta(hours=1),
                 clock: Callable[[], float] = time.monotonic,
                 poster: slack_sdk.WebClient | None = None) -> None:
        self._client = client
        self._poster = poster or client
        self._admin_channel = admin_channel
        self._fallback = allow_admin_fallback and bool(admin_channel)
        self._ttl = cache_ttl.total_seconds()
        self._clock = clock
        # key ("email:...", "user:...", "channel:...") -> (expires at, channel id or None, error)
        self._cache: dict[str, tuple[float, str | None, str]] = {}

    @classmethod
    def connect(cls, token: str, *, base_url: str | None = None, timeout: float = 10.0,
                admin_channel: str | None = None, max_retries: int = 2) -> Slack:
        """Reads retry lost connections, 429s (after Retry-After) and 500/503s. Posts retry only
        429s: after a lost connection or a 5xx Slack may have posted the message, and a second
        post would be a second message; the janitor's own recovery (the intent in the message's
        metadata) finds out instead, on the next cycle."""
        def client(*handlers: Any) -> slack_sdk.WebClient:
            # slack_sdk types the timeout as int, but passes it to urllib as it is: fractions work.
            return slack_sdk.WebClient(token=token, timeout=timeout,  # type: ignore[arg-type]
                                       retry_handlers=list(handlers),
                                       **({"base_url": base_url} if base_url else {}))  # type: ignore[arg-type]
        rate_limited = RateLimitErrorRetryHandler(max_retry_count=max_retries)
        reads = client(ConnectionErrorRetryHandler(max_retry_count=max_retries), rate_limited,
                       ServerErrorRetryHandler(max_retry_count=max_retries))
        return cls(reads, admin_channel=admin_channel, poster=client(rate_limited))

    def check_token(self) -> str:
        """'' if Slack accepts the token (auth.test); else why not, so a wrong token shows at start
        instead of when the first warning is due."""
        try:
            self._call("auth_test", "the bot token")
        except _Failed as err:
            return str(err)
        return ""

    # ----- answering a click -------------------------------------------------------------
    def is_owner(self, owner: Owner, user_id: str) -> bool:
        """Is the Slack user `user_id` this owner? A team channel owns on behalf of its members; an
        owner Slack cannot resolve, or a channel too large to read whole, is nobody (admins still can)."""
        try:
            if owner.kind is OwnerKind.SLACK_USER:
                return owner.value == user_id
            if owner.kind is OwnerKind.EMAIL:
                return self._cached(f"email:{owner.value.lower()}", owner.value, self._lookup_email) == user_id
            if owner.kind is OwnerKind.CHANNEL:
                channel = self._channel_id(owner.value) if owner.value.startswith("#") else owner.value
                pages = self._pages("conversations_members", channel, channel=channel, limit=MEMBERS_PAGE)
                return any(user_id in page.get("members", ()) for page in _take(pages, MEMBER_PAGES, channel))
        except _Failed:
            return False
        return False

    def update(self, channel: str, ts: str, blocks: list[dict[str, Any]], text: str) -> str:
        """Edit a message in place; '' when done, else why not."""
        return self._quietly("chat_update", channel, channel=channel, ts=ts, blocks=blocks, text=text)

    def tell(self, channel: str, user_id: str, text: str) -> str:
        """A message only `user_id` sees, in the channel they clicked in; '' when done."""
        return self._quietly("chat_postEphemeral", channel, channel=channel, user=user_id, text=text)

    def reply(self, channel: str, thread_ts: str, text: str) -> str:
        """A reply in the message's thread; '' when done."""
        return self._quietly("chat_postMessage", channel, channel=channel, thread_ts=thread_ts, text=text,
                             client_=self._poster)

    def _quietly(self, method: str, subject: str, **params: Any) -> str:
        try:
            self._call(method, subject, **params)
        except _Failed as err:
            logger.warning("Slack: %s to %s failed: %s", method, subject, err)
            return str(err)
        return ""

    # ----- destinations ------------------------------------------------------------------
    def destination(self, owner: Owner) -> tuple[str, bool] | str:
        """(channel, to_admins) to post the owner's digest to, or why there is none."""
        try:
            return self._destination(owner)
        except _Failed as err:
            return str(err)

    def _destination(self, owner: Owner, fallback: bool = True) -> tuple[str, bool]:
        """Raises `_Failed`: Slack is unwell (try later), or unreachable and no admins to tell."""
        try:
            if owner.kind is OwnerKind.SLACK_USER:
                return self._dm(owner.value), False
            if owner.kind is OwnerKind.EMAIL:
                return self._dm(self._cached(f"email:{owner.value.lower()}", owner.value,
                                             self._lookup_email)), False
            if owner.kind is OwnerKind.CHANNEL:
                self._cached(f"channel:{owner.value}", owner.value, lambda _: owner.value)
                return owner.value, False
            raise _Failed("unknown owner", "unknown_owner")
        except _Failed as err:
            if err.code not in UNREACHABLE or not self._fallback or not fallback:
                raise  # a throttled or unreachable Slack is no reason to bother the admins
            logger.info("Slack: %s cannot be reached (%s); telling the admins", owner, err)
            return str(self._admin_channel), True

    def _dm(self, user_id: str) -> str:
        return str(self._cached(f"user:{user_id}", user_id, lambda u: self._call(
            "conversations_open", u, users=[u])["channel"]["id"]))

    def _lookup_email(self, email: str) -> str:
        return str(self._call("users_lookupByEmail", email, email=email)["user"]["id"])

    def _cached(self, key: str, subject: str, resolve: Callable[[str], str]) -> str:
        """`resolve(subject)`, remembered for the ttl when it answers or definitively fails."""
        now = self._clock()
        hit = self._cache.get(key)
        if hit is None or hit[0] <= now:
            try:
                hit = (now + self._ttl, resolve(subject), "")
            except _Failed as err:
                if err.code not in UNREACHABLE:
                    raise
                hit = (now + self._ttl, None, err.code)
            self._cache[key] = hit
        if hit[1] is None:
            raise _Failed(f"{hit[2]}: {subject}", hit[2])
        return hit[1]

    def _forget(self, owner: Owner, code: str) -> None:
        """The owner's conversation turned out unreachable at post time; remember it as a miss."""
        key = f"channel:{owner.value}" if owner.kind is OwnerKind.CHANNEL else (
            f"email:{owner.value.lower()}" if owner.kind is OwnerKind.EMAIL else f"user:{owner.value}")
        self._cache[key] = (self._clock() + self._ttl, None, code)

    # ----- sending -----------------------------------------------------------------------
    def send(self, digest: Digest) -> SendResult:
        """Post the digest's messages; Slack failures become the result's `error`."""
        where: tuple[str, bool] | None = None
        try:
            where = self._destination(digest.owner, digest.admin_fallback)
            first = self._post(where[0], digest.messages[0], digest)
        except _Failed as err:
            if where is None or where[1] or err.code not in UNREACHABLE:
                logger.warning("Slack: digest %s for %s not sent: %s", digest.intent, digest.owner, err)
                return SendResult(digest, None, str(err))
            self._forget(digest.owner, err.code)  # e.g. "#team" was archived: the admins next
            return self.send(digest)
        delivery = Delivery(first["channel"], first["ts"], to_admins=where[1])
        for number, message in enumerate(digest.messages[1:], start=2):
            try:
                self._post(delivery.channel, message, digest)
            except _Failed as err:
                error = f"message {number} of {len(digest.messages)} not posted: {err}"
                logger.warning("Slack: digest %s for %s: %s", digest.intent, digest.owner, error)
                return SendResult(digest, delivery, error)
        logger.info("Slack: digest %s (%d notices) for %s sent: %s", digest.intent,
                    len(digest.notices), digest.owner, delivery)
        return SendResult(digest, delivery)

    def _post(self, channel: str, message: Message, digest: Digest) -> dict[str, Any]:
        kinds = dict.fromkeys(str(n.kind) for n in digest.notices)
        metadata = {"event_type": EVENT_TYPE, "event_payload": {
            "intent": digest.intent, "uids": list(digest.uids),
            "kind": ",".join(kinds)}}
        return self._call("chat_postMessage", channel, channel=channel, text=message.text,
                          blocks=[dict(b) for b in message.blocks], metadata=metadata, client_=self._poster)

    # ----- recognising an earlier send ---------------------------------------------------
    def find_sent(self, owner: Owner, intent: str, *, since: datetime.datetime,
                  uid: str | None = None) -> Delivery | None:
        """The first message of the send named `intent` (and telling of the workload `uid`, when
        given), if it reached the owner's destination after `since` (aware); None if it did not.
        Raises SlackUnavailable when Slack cannot say."""
        if since.tzinfo is None:
            raise ValueError("since must be an aware datetime")
        where: tuple[str, bool] | None = None
        try:
            where = self._destination(owner)
            channel, to_admins = where
            channel_id = self._channel_id(channel) if channel.startswith("#") else channel
            found = self._find(channel_id, intent, since, uid)
        except _Failed as err:
            if where is None and err.code in UNREACHABLE:
                return None  # nowhere it could have gone: the owner is unreachable, no admins
            if where is None or where[1] or err.code not in UNREACHABLE:
                raise SlackUnavailable(f"cannot tell whether {intent} reached {owner}: {err}") from err
            self._forget(owner, err.code)  # nothing reached it; the admins may have got it
            return self.find_sent(owner, intent, since=since, uid=uid)
        return None if found is None else Delivery(channel_id, found, to_admins)

    def _find(self, channel: str, intent: str, since: datetime.datetime, uid: str | None) -> str | None:
        """The oldest ts carrying `intent` (a digest's first message), searching newest first; with
        `uid`, only among the messages that name it (every part of a digest names all its workloads)."""
        found: str | None = None
        pages = self._pages("conversations_history", channel, channel=channel,
                            oldest=f"{since.timestamp():.6f}", include_all_metadata=True,
                            limit=HISTORY_PAGE)
        for page in _take(pages, HISTORY_PAGES, f"history of {channel}"):
            for msg in page.get("messages", []):
                meta = msg.get("metadata") or {}
                payload = meta.get("event_payload") or {}
                if meta.get("event_type") == EVENT_TYPE and payload.get("intent") == intent and \
                        (uid is None or uid in (payload.get("uids") or ())):
                    found = msg["ts"]
        return found

    def _channel_id(self, name: str) -> str:
        """conversations.history takes ids only; a "#name" is looked up (and cached) first."""
        def resolve(_: str) -> str:
            pages = self._pages("conversations_list", name, types="public_channel,private_channel",
                                exclude_archived=True, limit=HISTORY_PAGE)
            for page in _take(pages, CHANNEL_PAGES, "channel list"):
                for channel in page.get("channels", []):
                    if channel.get("name") == name.lstrip("#"):
                        return str(channel["id"])
            raise _Failed(f"channel_not_found: {name}", "channel_not_found")
        return self._cached(f"id:{name}", name, resolve)

    def _pages(self, method: str, subject: str, **params: Any) -> Iterator[dict[str, Any]]:
        cursor = None
        while True:
            page = self._call(method, subject, cursor=cursor, **params)
            yield page
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return

    def _call(self, method: str, subject: str, client_: slack_sdk.WebClient | None = None,
              **params: Any) -> dict[str, Any]:
        """One Web API call (retried by the client's handlers); any failure is `_Failed`."""
        try:
            return dict(getattr(client_ or self._client, method)(**params).data)
        except SlackApiError as err:
            code = str(err.response.get("error") or f"HTTP {err.response.status_code}")
            # Who was not found matters; for the rest (auth, throttling) the code says it all.
            raise _Failed(f"{code}: {subject}" if code in UNREACHABLE else code, code) from err
        except TimeoutError as err:
            raise _Failed("timed out") from err
        except URLError as err:
            reason = "timed out" if isinstance(err.reason, TimeoutError) else err.reason
            raise _Failed(f"cannot reach Slack: {reason}") from err
        except (SlackClientError, OSError) as err:
            raise _Failed(f"cannot reach Slack: {err}") from err
        except ValueError as err:  # a cut-off or non-JSON answer, which slack_sdk decodes itself
            raise _Failed(f"Slack's answer could not be read ({err})") from err


def _take(pages: Iterator[dict[str, Any]], most: int, what: str) -> Iterator[dict[str, Any]]:
    for number, page in enumerate(pages, start=1):
        yield page
        if number >= most and (page.get("response_metadata") or {}).get("next_cursor"):
            logger.warning("Slack: %s longer than %d pages; the rest is not searched", what, most)
            return


class Sender(Protocol):
    def send(self, digest: Digest) -> SendResult: ...


class Outbox:
    """Digests waiting to be sent; flush sends until a time budget is spent, so one slow Slack does
    not stall the cycle."""

    def __init__(self, slack: Sender, clock: Callable[[], float] = time.monotonic) -> None:
        self._slack = slack
        self._clock = clock
        self._queue: deque[Digest] = deque()

    @property
    def pending(self) -> int:
        return len(self._queue)

    def add(self, digest: Digest) -> None:
        self._queue.append(digest)

    def flush(self, budget_seconds: float) -> list[SendResult]:
        """Send in FIFO order, starting no send after `budget_seconds`; a send that failed is
        returned, not queued again (the caller knows whether it still matters)."""
        started = self._clock()
        results: list[SendResult] = []
        while self._queue and self._clock() - started < budget_seconds:
            results.append(self._slack.send(self._queue.popleft()))
        if self._queue:
            logger.warning("Slack: %d digests wait for the next flush (budget %.1fs spent)",
                           len(self._queue), budget_seconds)
        return results
