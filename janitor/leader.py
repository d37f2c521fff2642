"""One leader at a time, on a coordination.k8s.io/v1 Lease, with every write fenced.

Why not the Python client's elector: it keeps running after losing the lease, writes local time
with a `Z`, and configures logging on import. This one is small and does three things right:

- **Nobody trusts anybody's wall clock.** A candidate takes over a lease only after it has seen
  the lease record unchanged for `lease_duration` of its *own* monotonic time, as client-go does;
  `renewTime` is written (in real UTC) for people and tools, never compared across machines.
- **The leader fences itself.** It counts as leader only until `renew_deadline` (shorter than
  `lease_duration`) after the *start* of its last successful renewal. A leader cut off from the
  apiserver therefore stops acting before any other replica can have seen its lease expire.
  `is_leader()` is what the daemon checks before each cycle and each write.
- **It lets go.** On shutdown the lease is released (holder cleared, duration 1 s) so the other
  replica takes over at once instead of after a full lease duration.

Optimistic concurrency (resourceVersion on update, create-if-absent) decides races: of two
candidates updating the same record, the apiserver accepts one and answers 409 to the other.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from janitor import transport

# What a request can fail with: an answer (ApiException) or no answer (urllib3, the OS).
_FAILURES = (ApiException, urllib3.exceptions.HTTPError, OSError)

logger = logging.getLogger(__name__)


def _answered(error: BaseException) -> bool:
    return isinstance(error, ApiException) and bool(error.status)


def _level(error: BaseException) -> int:
    """An answer (a 409 from a race, a 403) is said here; no answer is the client's Outage's to say."""
    return logging.WARNING if _answered(error) else logging.DEBUG


def _said(error: BaseException) -> str:
    if _answered(error):
        assert isinstance(error, ApiException)
        return f"HTTP {error.status} {error.reason}"
    return str(transport.no_answer(error, "the apiserver"))


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str = "kube-idle-janitor"
    identity: str = ""
    lease_duration: datetime.timedelta = datetime.timedelta(seconds=15)
    renew_deadline: datetime.timedelta = datetime.timedelta(seconds=10)
    retry_period: datetime.timedelta = datetime.timedelta(seconds=2)

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("a leader election identity is required (the pod name)")
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")


def _micro(now: datetime.datetime) -> Any:
    """A MicroTime as the apiserver wants it (UTC, microseconds, `Z`); the client's models type it as
    datetime, but a string is serialised as it is, which is the point."""
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(self, api: client.ApiClient, settings: LeaseSettings,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
                 on_change: Callable[[bool], None] | None = None) -> None:
        self.leases = client.CoordinationV1Api(api)
        self.settings = settings
        self.monotonic = monotonic
        self.wall = wall
        self.on_change = on_change
        self._renewed_at: float | None = None  # monotonic start of our last successful write
        self._observed: tuple[str, str, str] | None = None  # (holder, renewTime, resourceVersion) last seen
        self._observed_at = 0.0  # monotonic time that record was first seen
        self._was_leader = False
        self._stop = threading.Event()
        # A hung request must not hold the election loop; the fence is time-based either way.
        self._timeout = settings.retry_period.total_seconds() * 2
        self._thread: threading.Thread | None = None
        self._hold_off_until = 0.0  # monotonic; after stepping down, no attempt before it
        self._term = 0  # bumped on stepping down: a renewal begun before it does not count
        self._leaving = False  # stopping or stepping down: the lease is let go of on purpose
        self._refusal: str | None = None  # the last refusal said, until a write succeeds

    # -- the fence ---------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        held = self._renewed_at is not None and (
            self.monotonic() - self._renewed_at < self.settings.renew_deadline.total_seconds())
        if held != self._was_leader:
            self._was_leader = held
            # Taking the lease is news; losing it while running is worth a look; letting it go on
            # the way out (stop, step_down) is said by the caller.
            level = logging.INFO if held or self._leaving else logging.WARNING
            logger.log(level, "leader election: %s lease %s/%s as %s",
                       "acquired" if held else "let go of" if self._leaving else "lost",
                       self.settings.namespace, self.settings.name, self.settings.identity)
            if self.on_change:
                self.on_change(held)
        return held

    # -- one attempt -------------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One read-and-write round; True if we hold the lease after it."""
        started = self.monotonic()
        term = self._term
        s = self.settings
        try:
            lease = self.leases.read_namespaced_lease(s.name, s.namespace, _request_timeout=self._timeout)
        except ApiException as e:
            if e.status != 404:
                self._failed(f"cannot read lease {s.namespace}/{s.name}", e)
                return self.is_leader()
            return self._create(started)
        except (urllib3.exceptions.HTTPError, OSError) as e:  # the client's Outage says it, once
            logger.debug("leader election: no answer: %s", transport.no_answer(e, "the apiserver"))
            return self.is_leader()
        spec = lease.spec or client.V1LeaseSpec()
        version = lease.metadata.resource_version if lease.metadata is not None else None
        record = (spec.holder_identity or "", str(spec.renew_time or ""), version or "")
        if record != self._observed:
            self._observed, self._observed_at = record, started
        ours = spec.holder_identity == s.identity
        unchanged_for = started - self._observed_at
        expired = not spec.holder_identity or (unchanged_for >= (spec.lease_duration_seconds or 0)
                                               and unchanged_for >= s.lease_duration.total_seconds())
        if not ours and not expired:
            self._renewed_at = None
            return self.is_leader()
        now = _micro(self.wall())
        transitions = (spec.lease_transitions or 0) + (0 if ours else 1)
        lease.spec = client.V1LeaseSpec(
            holder_identity=s.identity, lease_duration_seconds=int(s.lease_duration.total_seconds()),
            acquire_time=spec.acquire_time if ours else now, renew_time=now, lease_transitions=transitions)
        try:
            # The lease read carries its resourceVersion: a race with another candidate is a 409.
            self.leases.replace_namespaced_lease(s.name, s.namespace, lease, _request_timeout=self._timeout)
        except _FAILURES as e:
            self._failed(f"could not {'renew' if ours else 'take over'} lease", e)
            return self.is_leader()
        self._renewed(started, term)
        return self.is_leader()

    def _renewed(self, started: float, term: int) -> None:
        self._refusal = None
        if term == self._term:
            self._renewed_at = started

    def _failed(self, what: str, error: BaseException) -> None:
        """An answer that refuses is said once until it changes or a write succeeds (a missing state
        namespace would otherwise be said every retry period); no answer is the client's Outage's."""
        said = f"leader election: {what}: {_said(error)}"
        level = _level(error) if said != self._refusal else logging.DEBUG
        if level > logging.DEBUG:
            self._refusal = said
        logger.log(level, "%s", said)

    def _create(self, started: float) -> bool:
        s = self.settings
        term = self._term
        now = _micro(self.wall())
        body = client.V1Lease(metadata=client.V1ObjectMeta(name=s.name, namespace=s.namespace),
                              spec=client.V1LeaseSpec(holder_identity=s.identity,
                                                      lease_duration_seconds=int(s.lease_duration.total_seconds()),
                                                      acquire_time=now, renew_time=now, lease_transitions=0))
        try:
            self.leases.create_namespaced_lease(s.namespace, body, _request_timeout=self._timeout)
        except _FAILURES as e:
            self._failed("could not create lease", e)
            return self.is_leader()
        self._renewed(started, term)
        return self.is_leader()

    # -- in the background ---------------------------------------------------------------------------
    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                if self.monotonic() >= self._hold_off_until:
                    self.try_acquire_or_renew()
                self._stop.wait(self.settings.retry_period.total_seconds())

        self._thread = threading.Thread(target=loop, name="leader-election", daemon=True)
        self._thread.start()

    def step_down(self) -> None:
        """Stop counting as leader now, hand the lease back, and make no attempt for one lease
        duration: a replica whose cycle hangs must not keep the lease a healthy one could use."""
        self._term += 1
        self._hold_off_until = self.monotonic() + self.settings.lease_duration.total_seconds()
        held = self._renewed_at is not None
        self._renewed_at = None
        self._leaving = True
        self.is_leader()
        self._leaving = False
        logger.warning("leader election: stepping down from lease %s/%s for %gs", self.settings.namespace,
                       self.settings.name, self.settings.lease_duration.total_seconds())
        if held:
            self._release()

    def stop(self, release: bool = True) -> None:
        """Stop renewing; with `release`, hand the lease back so another replica takes over now."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.retry_period.total_seconds() + 5)
        held = self.is_leader()
        self._renewed_at = None
        self._leaving = True
        self.is_leader()
        if release and held:
            self._release()

    def _release(self) -> None:
        s = self.settings
        try:
            lease = self.leases.read_namespaced_lease(s.name, s.namespace, _request_timeout=self._timeout)
            if lease.spec and lease.spec.holder_identity == s.identity:
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                lease.spec.renew_time = _micro(self.wall())
                self.leases.replace_namespaced_lease(s.name, s.namespace, lease, _request_timeout=self._timeout)
                logger.info("leader election: released lease %s/%s", s.namespace, s.name)
        except _FAILURES as e:
            logger.warning("leader election: could not release the lease: %s", _said(e))
