"""One kind kept current from the apiserver: listed once, then followed by a watch.

The list is paginated and its final page's resourceVersion starts a watch with bookmarks, so the
apiserver sends only what changed. A watch the server ends (its `timeoutSeconds`), or a connection
that is reset, is opened again from the last version seen: nothing is missed and nothing is listed
again. A watch that goes silent (no event, no bookmark and no end for `FRESH_SECONDS`, while the
server ends every watch within `WATCH_SECONDS`) is not trusted: the kind is listed again, whole, as
it is when the apiserver no longer has that version (410 Gone, as an HTTP status or as an ERROR event).

What is kept is the slim value the caller makes of each object (`slim`), never the object, so a
cache of 50,000 pods holds what deciding reads and nothing more. Kinds that matter only by their
metadata are asked for as `PartialObjectMetadata`: the apiserver sends no spec, status or data.

The watch never decides anything alone: `synced` says whether the values can be trusted now (the
list completed, the last request to the apiserver for this kind succeeded, and it said something
within `FRESH_SECONDS + STALE_MARGIN`), and the cycle does nothing with a kind that is not synced.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from janitor import errors, kubeapi
from janitor.decide.model import ResourceKind

logger = logging.getLogger(__name__)

V = TypeVar("V")

# The server ends a watch after about this long (jittered by up to a fifth), with a bookmark first:
# each end costs one request to open it again from that version. A quiet kind gets no other word
# (an apiserver bookmarks a quiet watch only when its own version moves), so this is what bounds how
# long a watch can stay silent and still be alive.
WATCH_SECONDS = 240
# Nothing at all (no event, no bookmark, no end) for FRESH_SECONDS means the watch is dead (a proxy
# holding a connection open, a half-open TCP connection): the kind is listed again, whole. Past
# FRESH_SECONDS + STALE_MARGIN without word the kind is not synced (stale): the cycle changes nothing.
FRESH_SECONDS = WATCH_SECONDS + 30.0
STALE_MARGIN = 30.0
RETRY_SECONDS = (1.0, 30.0)  # backoff between failed requests, doubling from the first to the second
SKIPPED_RETRY_SECONDS = 300.0  # a kind the apiserver does not serve, or RBAC forbids, is tried again this often
_CHUNK = 65536


class State(StrEnum):
    LISTING = "listing"
    WATCHING = "watching"
    RETRYING = "retrying"  # the last request failed; the values are those of before the failure
    SKIPPED = "skipped"  # 403 or 404: shown in the plan as a skipped kind, like a list that failed so
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class KindStatus:
    """How one watched kind stands, for /readyz, the metrics and the benchmark."""

    key: str
    state: State
    synced: bool
    objects: int
    lists: int  # complete lists: the first, and one after each 410
    expired: int  # lists that a 410 made necessary
    reopened: int  # watches opened again from their version (server timeout, silence, reset)
    failures: int  # requests that failed
    events: int
    error: str = ""


def metadata_accept(*, as_list: bool) -> str:
    """The Accept header asking for metadata only (falling back to the whole object)."""
    kind = "PartialObjectMetadataList" if as_list else "PartialObjectMetadata"
    return f"application/json;as={kind};g=meta.k8s.io;v=v1,application/json"


class KindWatch(Generic[V]):
    """One kind (in one namespace, or all) listed and then watched on a thread of its own.

    `slim` turns an object into the value kept (None: not kept); `keep` filters objects first.
    Values are keyed by UID: a recreated object is a new entry, its predecessor's DELETED removes
    the old one."""

    def __init__(self, api: ApiClient, kind: ResourceKind, slim: Callable[[Mapping[str, Any]], V | None], *,
                 namespace: str | None = None, metadata_only: bool = False, field_selector: str | None = None,
                 keep: Callable[[Mapping[str, Any]], bool] | None = None, page_size: int = 500,
                 connect_timeout: float = 5.0, name: str | None = None,
                 fresh_seconds: float = FRESH_SECONDS, watch_seconds: float = WATCH_SECONDS) -> None:
        self.api, self.kind, self.slim = api, kind, slim
        self.namespace = namespace if kind.namespaced else None
        self.metadata_only, self.field_selector, self.keep = metadata_only, field_selector, keep
        # Lists wait as long as the client's every request does (--kube-timeout); a watch's reads, fresh_seconds.
        self.page_size, self.connect_timeout, self.fresh_seconds = page_size, connect_timeout, fresh_seconds
        self.watch_seconds = watch_seconds
        self._contact = time.monotonic()  # the last word from the apiserver on this watch: a response, an event
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
        self._counts = {"lists": 0, "expired": 0, "reopened": 0, "failures": 0, "events": 0}
        self._response: Any = None
        self._dropped = False

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
        with self._lock:
            return list(self._items.values())

    @property
    def skipped(self) -> errors.KubeError | None:
        return self._skipped if self._state is State.SKIPPED else None

    def status(self) -> KindStatus:
        with self._lock:
            quiet = time.monotonic() - self._contact
            stale = self._state is State.WATCHING and quiet > self.fresh_seconds + STALE_MARGIN
            synced = self._listed and self._state is State.WATCHING and not stale
            error = f"stale: no event or bookmark for {quiet:.0f} s" if stale else self._error
            return KindStatus(self.key, self._state, synced, len(self._items), self._counts["lists"],
                              self._counts["expired"], self._counts["reopened"], self._counts["failures"],
                              self._counts["events"], error)

    # -- the thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        pause = RETRY_SECONDS[0]
        while not self._stop.is_set():
            try:
                if self._version is None:
                    self._list()
                self._watch()
                pause = RETRY_SECONDS[0]
            except errors.Expired:
                logger.info("%s: resourceVersion %s is too old (410); listing again", self.key, self._version)
                with self._lock:
                    self._version = None
                    self._counts["expired"] += 1
                continue
            except (errors.Forbidden, errors.NotFound) as e:
                self._fail(e, State.SKIPPED)
                self._stop.wait(SKIPPED_RETRY_SECONDS)
                continue
            except Exception as e:  # a request, or an object `slim` cannot read: try again, say so meanwhile
                if self._stop.is_set():
                    return
                self._fail(e, State.RETRYING)
                self._stop.wait(pause * random.uniform(0.8, 1.2))
                pause = min(pause * 2, RETRY_SECONDS[1])

    def _fail(self, error: Exception, state: State) -> None:
        text = str(error) if isinstance(error, errors.KubeError) else f"{type(error).__name__}: {error}"
        with self._lock:
            self._state, self._error = state, errors.cut(text)
            self._counts["failures"] += 1
            if state is State.SKIPPED and isinstance(error, errors.KubeError):
                self._skipped = error
        # No answer at all is the client's Outage's to say, once for every kind and request.
        level = logging.INFO if state is State.SKIPPED else logging.DEBUG if kubeapi.no_answer(error) else \
            logging.WARNING
        logger.log(level, "%s: %s; the values kept are not used until it is read again", self.key, text)

    def _list(self) -> None:
        with self._lock:
            self._state = State.LISTING
        found: dict[str, V] = {}
        token: str | None = None
        accept = metadata_accept(as_list=True) if self.metadata_only else "application/json"
        while True:
            query: list[tuple[str, Any]] = [("limit", self.page_size)]
            if self.field_selector:
                query.append(("fieldSelector", self.field_selector))
            if token:
                query.append(("continue", token))
            response = kubeapi.request(self.api, "GET", kubeapi.path(self.kind, self.namespace), query=query,
                                       accept=accept, doing=f"list {self.key}")
            body = json.loads(response.data)
            for item in body.get("items") or []:
                self._put(found, item)
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
        with self._lock:
            self._items, self._version = found, meta.get("resourceVersion") or None
            self._listed = True
            self._counts["lists"] += 1
            self._skipped, self._error = None, ""

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
        query: list[tuple[str, Any]] = [
            ("watch", "true"), ("allowWatchBookmarks", "true"), ("resourceVersion", self._version or ""),
            ("timeoutSeconds", max(1, int(self.watch_seconds * random.uniform(0.8, 1.0))))]
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        accept = metadata_accept(as_list=False) if self.metadata_only else "application/json"
        response = kubeapi.open_stream(self.api, kubeapi.path(self.kind, self.namespace), query=query, accept=accept,
                                       timeout=(self.connect_timeout, self.fresh_seconds), doing=f"watch {self.key}")
        self._response, self._dropped = response, False
        with self._lock:
            self._state, self._error, self._contact = State.WATCHING, "", time.monotonic()
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    return
                self._apply(json.loads(line))
        except Exception as e:
            if not (self._dropped or isinstance(e, urllib3.exceptions.HTTPError | ApiException | OSError)):
                raise
            if _silent(e):
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
            self._close()
        with self._lock:
            self._counts["reopened"] += 1

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind, item = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise errors.from_status(item.get("code"), json.dumps(item), doing=f"watch {self.key}")
        version = (item.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            self._contact = time.monotonic()
            if kind in ("ADDED", "MODIFIED"):
                self._put(self._items, item)
            elif kind == "DELETED":
                self._items.pop((item.get("metadata") or {}).get("uid") or "", None)
            if kind != "BOOKMARK":
                self._counts["events"] += 1
            if version:
                self._version = version

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


def _silent(error: BaseException) -> bool:
    """The read timed out: nothing came for the whole read timeout (urllib3 says so, wrapped or not)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, urllib3.exceptions.ReadTimeoutError | TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON documents of a watch stream, as they arrive."""
    rest = b""
    for chunk in response.stream(_CHUNK, decode_content=True):
        rest += chunk
        *whole, rest = rest.split(b"\n")
        yield from (line for line in whole if line.strip())
    if rest.strip():
        yield rest
