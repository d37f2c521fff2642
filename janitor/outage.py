"""One outage of the apiserver, said once, counted while it lasts, and said again when it ends.

With the apiserver out of reach every part of the daemon fails at once and keeps failing: the
lease every two seconds, each kind's watch, each cycle. Said by each of them, every time, in the
client library's words, that was 60 lines a minute that an admin on call had to read past to
learn one thing. So the client counts its requests that get no answer here, and this says it:
the first failure (why, in words: janitor.transport), then at most every `every` how many failed
since, and a line when a request is answered again. The parts that failed say no more than a
DEBUG line each.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable

from janitor import transport
from janitor.durations import in_words

logger = logging.getLogger(__name__)

EVERY = datetime.timedelta(minutes=5)


class Outage:
    """Thread-safe: the lease, the watches and the cycle share one client."""

    def __init__(self, server: str = "the apiserver", *, every: datetime.timedelta = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.server, self.every, self.clock = server, every, clock
        self._lock = threading.Lock()
        self._began: float | None = None  # the first failure of this outage
        self._said_at = 0.0  # when the last line was said
        self._since_said = 0  # failures since then
        self._failures = 0  # failures in this outage

    @property
    def ongoing(self) -> bool:
        return self._began is not None

    def failed(self, error: BaseException) -> None:
        """A request got no answer (refused, unresolved, timed out, reset, TLS)."""
        now = self.clock()
        with self._lock:
            self._failures += 1
            self._since_said += 1
            if self._began is None:
                self._began, self._said_at, self._since_said = now, now, 0
                said = transport.no_answer(error, self.server)
                logger.error("%s does not answer (%s): nothing is read or changed until it answers; the janitor "
                             "keeps trying and says how often it still fails every %s", self.server, said,
                             in_words(self.every), extra={"outage": self.server, "cause": str(said.cause)})
                return
            if now - self._said_at < self.every.total_seconds():
                return
            said = transport.no_answer(error, self.server)
            logger.warning("%s still does not answer: %d failed requests in the last %s (last: %s)", self.server,
                           self._since_said, in_words(datetime.timedelta(seconds=now - self._said_at)), said,
                           extra={"outage": self.server, "cause": str(said.cause), "failures": self._failures})
            self._said_at, self._since_said = now, 0

    def answered(self) -> None:
        """A request got an answer (any HTTP status): an outage, if there was one, is over."""
        if self._began is None:
            return
        now = self.clock()
        with self._lock:
            if self._began is None:
                return
            lasted = datetime.timedelta(seconds=now - self._began)
            logger.info("%s answers again, after %s without (%d failed requests)", self.server, in_words(lasted),
                        self._failures, extra={"outage": self.server, "failures": self._failures})
            self._began, self._failures, self._since_said = None, 0, 0


__all__ = ["EVERY", "Outage"]
