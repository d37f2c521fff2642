"""One kind kept current from the apiserver: listed once, then followed by a watch.

The list is paginated and its final page's resourceVersion starts a watch with bookmarks, so the
apiserver sends only what changed. A watch the server ends (its `timeoutSeconds`), or a connection
that is reset, is opened again from the last version seen: nothing is missed and nothing is listed
again. A watch that goes silent (no event, no bookmark and no end for `FRESH_SECONDS`, while the
server ends every watch within `WATCH_SECONDS`) is not trusted: the kind is listed again, whole, as
it is when the apiserver no longer has that version (410 Gone, as an HTTP status or as an ERROR event).

Every request waits for its answer as long as the client's every request does (--kube-timeout):
a list page, and the head of a watch. Only then may a watch's stream stay quiet for minutes (a
quiet kind has nothing to say). A request without an answer in that time fails like any other:
the kind is not synced, says why ("the apiserver did not answer the watch within 10s"), and is
asked again after a pause that doubles while it keeps failing. So is a watch that delivers
nothing before it ends, or one the apiserver answers 410 from the version it has just listed:
never a loop of requests. Its failures are the kind's to say (once, and when it is read again),
not the apiserver outage's (`kubeapi.own_words`): a kind that gets no answer while the apiserver
answers all else is no outage.

What is kept is the slim value the caller makes of each object (`slim`), never the object, so a
cache of 50,000 pods holds what deciding reads and nothing more. Kinds that matter only by their
metadata are asked for as `PartialObjectMetadata`: the apiserver sends no spec, status or data.

A kind whose every object changes all the time while the janitor reads little of it (nodes: each
kubelet's status report is a whole Node event) may be listed again every `relist_seconds` instead
of watched (`State.POLLING`): a list of every object, compressed, costs the same however often
they change. Its values are those of the last list; the next list replaces them whole, and the
kind stays synced meanwhile while the last list is younger than `relist_seconds + STALE_MARGIN`.

The watch never decides anything alone: `synced` says whether the values can be trusted now (the
list completed, the last request to the apiserver for this kind succeeded, and it said something
within `FRESH_SECONDS + STALE_MARGIN`), and the cycle does nothing with a kind that is not synced.
"""

from __future__ import annotations

import datetime
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from janitor import errors, kubeapi, transport
from janitor.decide.model import ResourceKind
from janitor.durations import in_words
from janitor.observe import watch_stream
from janitor.observe.kind_status import KindStatus, State

logger = logging.getLogger(__name__)

V = TypeVar("V")

# The server ends a watch after about this long (jittered by up to a fifth), with a bookmark first:
# each end costs one request to open it again from that version. A quiet kind gets no other word
# (an apiserver bookmarks a quiet watch only before it ends it), so this is what bounds how long a
# watch can stay silent and still be alive.
WATCH_SECONDS = 240
# Nothing at all (no event, no bookmark, no end) for FRESH_SECONDS means the watch is dead (a proxy
# holding a connection open, a half-open TCP connection): the kind is listed again, whole. Past
# FRESH_SECONDS + STALE_MARGIN without word the kind is not synced (stale): the cycle changes nothing.
FRESH_SECONDS = WATCH_SECONDS + 30.0
STALE_MARGIN = 30.0
RETRY_SECONDS = (1.0, 30.0)  # backoff between failed requests, doubling from the first to the second
SKIPPED_RETRY_SECONDS = 300.0  # a kind the apiserver does not serve, or RBAC forbids, is tried again this often


def metadata_accept(*, as_list: bool) -> str:
    """The Accept header asking for metadata only (falling back to the whole object)."""
    kind = "PartialObjectMetadataList" if as_list else "PartialObjectMetadata"
    return f"application/json;as={kind};g=meta.k8s.io;v=v1,application/json"


class _Barren(Exception):
    """A watch that ended having delivered nothing, soon after it opened: wait before the next."""


class _ListExpired(Exception):
    """A list's page answered 410: its continue token outlived the apiserver's compaction. Unlike a
    watch's 410 it says nothing about the version a watch could start from: list again, at once."""

    def __init__(self, error: errors.Expired) -> None:
        super().__init__(str(error))
        self.error = error


class KindWatch(Generic[V]):
    """One kind (in one namespace, or all) listed and then watched on a thread of its own.

    `slim` turns an object into the value kept (None: not kept); `keep` filters objects first.
    Values are keyed by UID: a recreated object is a new entry, its predecessor's DELETED removes
    the old one. `timeout` (connect, read) bounds every request's wait for its answer."""

    def __init__(self, api: ApiClient, kind: ResourceKind, slim: Callable[[Mapping[str, Any]], V | None], *,
                 namespace: str | None = None, metadata_only: bool = False, field_selector: str | None = None,
                 keep: Callable[[Mapping[str, Any]], bool] | None = None, page_size: int = 500,
                 timeout: kubeapi.Timeout = kubeapi.DEFAULT_TIMEOUT, name: str | None = None,
                 fresh_seconds: float = FRESH_SECONDS, watch_seconds: float = WATCH_SECONDS,
                 relist_seconds: float | None = None) -> None:
        self.api, self.kind, self.slim = api, kind, slim
        self.namespace = namespace if kind.namespaced else None
        self.metadata_only, self.field_selector, self.keep = metadata_only, field_selector, keep
        self.page_size, self.timeout, self.relist_seconds = page_size, timeout, relist_seconds
        # Listed every relist_seconds: a list older than that (and the margin) is stale.
        self.fresh_seconds = fresh_seconds if relist_seconds is None else relist_seconds
        self.watch_seconds = watch_seconds
        self._contact = time.monotonic()  # the last word from the apiserver: a list, an event, a watch's end
        self._asked: tuple[float, str] | None = None  # the request waiting for its answer: when it was sent, which
        self.key = name or kind.key + (f"@{self.namespace}" if self.namespace else "")
        self._items: dict[str, V] = {}
        self._version: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = State.LISTING
        self._listed = False
        self._error = ""
        self._skipped: errors.KubeError | None = None
        self._counts = {"lists": 0, "expired": 0, "reopened": 0, "failures": 0, "events": 0, "refreshed": 0}
        self._response: Any = None
        self._dropped = False
        self._trouble: tuple[float, str, bool] | None = None  # since when it fails, what was said, said aloud
        self._expired_in_a_row = 0  # a watch's 410s with no event in between
        self._list_expired = 0  # lists in a row cut short by a 410 (a continue token gone)
        self._listed_at: datetime.datetime | None = None  # when the last complete list began (UTC)
        self._streams = 0  # counts watch streams opened and ended: which one a pending proof is about

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> KindWatch[V]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch {self.key}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._close()
        with self._lock:
            self._state = State.STOPPED

    # -- what the cycle reads ----------------------------------------------------------------------
    def values(self) -> list[V]:
        return self.values_at()[0]

    def values_at(self) -> tuple[list[V], datetime.datetime | None]:
        """The values, and when the list they come from began (a polled kind's are as of then)."""
        with self._lock:
            return list(self._items.values()), self._listed_at

    @property
    def skipped(self) -> errors.KubeError | None:
        return self._skipped if self._state is State.SKIPPED else None

    def status(self) -> KindStatus:
        with self._lock:
            now = time.monotonic()
            quiet = now - self._contact
            known = self._state in (State.WATCHING, State.POLLING)
            stale = known and quiet > self.fresh_seconds + STALE_MARGIN
            # A request past its timeout is as good as failed (it fails at that moment, or soon after).
            late = self._asked is not None and now - self._asked[0] > self.timeout[1]
            synced = self._listed and known and not stale and not late
            error = f"stale: no event or bookmark for {quiet:.0f} s" if stale else self._error
            if late and not error and self._asked is not None:
                error = self._unanswered(self._asked[1])
            underway = self._state is State.LISTING and not error
            return KindStatus(self.key, self._state, synced, len(self._items), self._counts["lists"],
                              self._counts["expired"], self._counts["reopened"], self._counts["failures"],
                              self._counts["events"], error, underway, self._counts["refreshed"])

    # -- the thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        kubeapi.own_words()  # this thread's failures are said below, per kind, not as the apiserver's outage
        pause = RETRY_SECONDS[0]
        while not self._stop.is_set():
            try:
                if self._version is None or self.relist_seconds is not None:
                    self._list()
                if self.relist_seconds is not None:
                    self._rest(self.relist_seconds)
                else:
                    self._watch()
                pause = RETRY_SECONDS[0]
                continue
            except errors.Expired as e:
                with self._lock:
                    self._version = None
                    self._counts["expired"] += 1
                    self._expired_in_a_row += 1
                if self._expired_in_a_row == 1:  # the version of a watch that worked is gone: list again at once
                    logger.info("%s: resourceVersion too old (410); listing again", self.key)
                    continue
                # 410 again, to a watch from the version just listed, before any event: it cannot be watched now.
                self._fail(e, State.RETRYING, pause, why="the apiserver answered 410 Gone again, to a watch from the "
                                                         f"version it had just listed ({e.server_message})")
            except _ListExpired as e:
                with self._lock:
                    self._counts["expired"] += 1
                    self._list_expired += 1
                if self._list_expired == 1:
                    logger.info("%s: a list's next page is gone (410); listing again", self.key)
                    continue
                self._fail(e.error, State.RETRYING, pause, why="the apiserver answered 410 Gone to a list's next "
                                                               f"page twice in a row ({e.error.server_message})")
            except _Barren:
                pass  # said at DEBUG where it ended; waits like a failure, without being one
            except (errors.Forbidden, errors.NotFound) as e:
                self._fail(e, State.SKIPPED, SKIPPED_RETRY_SECONDS)
                self._stop.wait(SKIPPED_RETRY_SECONDS)
                continue
            except Exception as e:  # a request, or an object `slim` cannot read: try again, say so meanwhile
                if self._stop.is_set():
                    return
                self._fail(e, State.RETRYING, pause)
            self._stop.wait(pause * random.uniform(0.8, 1.2))
            pause = min(pause * 2, RETRY_SECONDS[1])

    def _fail(self, error: Exception, state: State, pause: float, *, why: str | None = None) -> None:
        why = why or self._why(error)
        with self._lock:
            asked = self._asked[0] if self._asked is not None else time.monotonic()
            self._state, self._error, self._asked = state, errors.cut(why), None
            self._counts["failures"] += 1
            if state is State.SKIPPED and isinstance(error, errors.KubeError):
                self._skipped = error
            began, said, aloud = self._trouble or (asked, "", False)  # since the first request that failed
            # Said once while it lasts (again if the reason changes): /readyz and the metrics keep
            # showing it. Not while the apiserver's outage is said: no answer to anyone is one line.
            outage = getattr(self.api, "outage", None)
            loud = why != said and not (outage is not None and outage.ongoing)
            self._trouble = (began, why if loud else said, aloud or loud)
        if state is State.SKIPPED:
            logger.log(logging.INFO if loud else logging.DEBUG, "%s: %s; shown as a skipped kind, asked again "
                       "every %s", self.key, why, in_words(datetime.timedelta(seconds=pause)))
        else:
            logger.log(logging.WARNING if loud else logging.DEBUG, "%s: %s; the watch cache is not synced, so cycles "
                       "do nothing until it is read again (the janitor keeps asking)", self.key, why)

    def _why(self, error: Exception) -> str:
        """What went wrong, in words: how long the apiserver was waited for, why there was no answer,
        or its answer (never a client library's text)."""
        if not isinstance(error, errors.KubeError):
            return f"{type(error).__name__}: {error}"
        if error.status is not None:
            return str(error)
        request = "the watch" if error.doing.startswith("watch") else "the list"
        said = transport.no_answer(error, "the apiserver")
        if said.cause is transport.Cause.TIMEOUT:
            return self._unanswered(request)
        return f"the apiserver did not answer {request} ({said})"

    def _unanswered(self, request: str) -> str:
        return f"the apiserver did not answer {request} within {self.timeout[1]:g}s"

    def _proven(self, stream: int) -> None:
        """The watch opened after a failure is still open after the timeout: it answers."""
        with self._lock:
            open_now = self._streams == stream and self._state is State.WATCHING
        if open_now:
            self._answered()

    def _answered(self) -> None:
        """The kind is read again (a list, a watch's event, a watch open for the timeout): a failure
        that was said is over, and said to be. A watch's head alone is not enough: one that then
        brings a 410 or nothing at all would say it again at each try."""
        with self._lock:
            trouble, self._trouble = self._trouble, None
        if trouble is not None:
            began, _, aloud = trouble
            lasted = in_words(datetime.timedelta(seconds=time.monotonic() - began))
            logger.log(logging.INFO if aloud else logging.DEBUG, "%s: read again, after %s without", self.key, lasted)

    def _rest(self, seconds: float) -> None:
        """Polled: the list just made is known until the next one, `seconds` later (jittered, so
        that replicas and restarts do not list together). A failure it ends is over."""
        with self._lock:
            self._state = State.POLLING
        self._answered()
        self._stop.wait(seconds * random.uniform(0.9, 1.0))

    def _list(self) -> None:
        with self._lock:
            if self._state is not State.POLLING:  # a polled kind's last list stays known while the next runs
                self._state = State.LISTING
        found: dict[str, V] = {}
        token: str | None = None
        began = datetime.datetime.now(datetime.timezone.utc)
        accept = metadata_accept(as_list=True) if self.metadata_only else "application/json"
        while True:
            query: list[tuple[str, Any]] = [("limit", self.page_size)]
            if self.field_selector:
                query.append(("fieldSelector", self.field_selector))
            if token:
                query.append(("continue", token))
            self._asked = (time.monotonic(), "the list")
            try:
                response = kubeapi.request(self.api, "GET", kubeapi.path(self.kind, self.namespace), query=query,
                                           accept=accept, timeout=self.timeout, doing=f"list {self.key}")
            except errors.Expired as e:
                self._asked = None
                raise _ListExpired(e) from e
            self._asked = None
            body = json.loads(response.data)
            for item in body.get("items") or []:
                self._put(found, item)
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
        with self._lock:
            self._items, self._version = found, meta.get("resourceVersion") or None
            self._counts["refreshed"] += self._listed and self.relist_seconds is not None
            self._listed, self._list_expired, self._listed_at = True, 0, began
            self._counts["lists"] += 1
            self._skipped, self._error, self._contact = None, "", time.monotonic()

    def _put(self, into: dict[str, V], item: Mapping[str, Any]) -> None:
        meta = item.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        value = self.slim(item) if self.keep is None or self.keep(item) else None
        if value is None:
            into.pop(uid, None)
        else:
            into[uid] = value

    def _watch(self) -> None:
        """Open the watch from the version reached and apply its events until it ends. Raises when it
        cannot be opened, and `_Barren` when it ended soon, having delivered nothing."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"), ("allowWatchBookmarks", "true"), ("resourceVersion", self._version or ""),
            ("timeoutSeconds", max(1, int(self.watch_seconds * random.uniform(0.8, 1.0))))]
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        accept = metadata_accept(as_list=False) if self.metadata_only else "application/json"
        opened = time.monotonic()
        self._asked = (opened, "the watch")
        response = kubeapi.open_stream(self.api, kubeapi.path(self.kind, self.namespace), query=query, accept=accept,
                                       timeout=self.timeout, read_timeout=self.fresh_seconds, doing=f"watch {self.key}")
        self._response, self._dropped = response, False
        with self._lock:
            self._state, self._error, self._asked = State.WATCHING, "", None
            self._streams += 1
            stream, troubled = self._streams, self._trouble is not None
        if troubled:  # over once it proves itself: an event, or staying open for the timeout
            proof = threading.Timer(self.timeout[1], self._proven, args=(stream,))
            proof.daemon = True
            proof.start()
        delivered = 0
        try:
            for line in watch_stream.lines(response):
                if self._stop.is_set():
                    return
                self._apply(watch_stream.event(line, self.key))
                delivered += 1
            if delivered or time.monotonic() - opened >= self.timeout[1]:
                with self._lock:
                    self._contact = time.monotonic()  # the server ended it in its time: word, as an event is
        except Exception as e:
            if not (self._dropped or isinstance(e, urllib3.exceptions.HTTPError | ApiException | OSError)):
                raise
            if watch_stream.silent(e):
                # Not even a bookmark for fresh_seconds: whatever this connection held back is not
                # trusted; the kind is listed again, whole.
                logger.warning("%s: no event or bookmark for %.0f s; listing again", self.key, self.fresh_seconds)
                with self._lock:
                    self._version = None
            else:
                # A reset connection: open the watch again from the version reached; a failure to
                # open it is what marks the kind as not synced.
                logger.debug("%s: watch ended (%s); opening it again from %s", self.key, e, self._version)
        finally:
            with self._lock:
                self._streams += 1  # this stream is over: its proof, if pending, proves nothing
            self._close()
        with self._lock:
            self._counts["reopened"] += 1
        if not delivered and time.monotonic() - opened < self.timeout[1] and not self._stop.is_set():
            logger.debug("%s: the watch ended without an event; waiting before opening it again", self.key)
            raise _Barren()

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind, item = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise errors.from_status(item.get("code"), json.dumps(item), doing=f"watch {self.key}")
        version = (item.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            self._contact, self._expired_in_a_row = time.monotonic(), 0
            troubled = self._trouble is not None
            if kind in ("ADDED", "MODIFIED"):
                self._put(self._items, item)
            elif kind == "DELETED":
                self._items.pop((item.get("metadata") or {}).get("uid") or "", None)
            if kind != "BOOKMARK":
                self._counts["events"] += 1
            if version:
                self._version = version
        if troubled:
            self._answered()

    def _close(self) -> None:
        """Drop the open watch, from any thread: the read blocked on it wakes at once (a close would
        wait for that read), and the watch is opened again from the version reached."""
        self._dropped = True
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # urllib3 >= 2.3: shuts the socket down under the blocked read
            except Exception:  # a connection that is already gone
                pass
