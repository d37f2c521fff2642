"""How one kind of the watch cache stands (`observe.watch`), as /healthz, /readyz, the metrics,
the cycle and the benchmark read it: apart from the watch itself, so that its readers need not
know how it is kept."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    LISTING = "listing"  # its list, or the watch after it, is under way
    WATCHING = "watching"
    POLLING = "polling"  # listed, to be listed again after `relist_seconds` (no watch)
    RETRYING = "retrying"  # the last request failed; the values are those of before the failure
    SKIPPED = "skipped"  # 403 or 404: shown in the plan as a skipped kind, like a list that failed so
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class KindStatus:
    """How one watched kind stands, for /healthz, /readyz, the metrics and the benchmark."""

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
    underway: bool = False  # listing, its request younger than the timeout: worth a cycle's wait
    refreshed: int = 0  # lists of a polled kind after its first (`relist_seconds`)

    @property
    def failing(self) -> bool:
        """Not synced for a reason (a failed request, or stale), not merely on its way."""
        return not self.synced and bool(self.error)

    def __str__(self) -> str:
        return f"{self.key} {self.state.value}{' (' + self.error + ')' if self.error else ''}"
