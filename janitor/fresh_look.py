"""A first mark or warning, looked at again on a fresh read before it is written.

The cycle decides on what it read, which the watch cache may have kept from minutes ago; the
re-check before an action reads fresh, and so does this, for what starts an owner's countdown: a
new mark and a warning given for the first time (or again). The workload, its owner chain, its
pods, its namespace and its pods' evidence are read now (`scoped.read_scoped`, as for an
action) and decided again (`recheck.still_notices`); a mark or warning that no longer comes out the
same (a namespace opted out since, the workload busy, gone) is not written, and the next cycle
decides again. A read that fails leaves it for the next cycle too: nothing is started on a guess.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from janitor import errors
from janitor.decide import recheck
from janitor.decide.autoscaling import Autoscaling
from janitor.decide.lifecycle import Change
from janitor.decide.model import Action, ActionType, TriggerKind
from janitor.observe import scoped
from janitor.observe.observation import autoscaler_notes, needs
from janitor.observe.prometheus import PrometheusSource

if TYPE_CHECKING:
    from janitor.cycle import Planned, Ports
    from janitor.settings import Settings

logger = logging.getLogger(__name__)


class Beyond:
    """Whether nodes can be added, as the daemon knows it now beyond a re-check's namespace (an
    autoscaler's Events on a pod of any namespace are a sign), asked only by a re-check that reads
    the autoscalers and found no sign in its own namespace: from the watch cache, kept live;
    without one, read fresh across the namespaces the cycle reads, at most `FRESH_FOR` before (one
    list per autoscaler and namespace read, as the cycle's own, shared by the re-checks of that
    while). The re-check reads its own namespace's Events beside it."""

    FRESH_FOR = datetime.timedelta(seconds=60)

    def __init__(self, ports: Ports, settings: Settings, planned: Planned) -> None:
        self.ports, self.settings, self.planned = ports, settings, planned
        self._read: tuple[Autoscaling, datetime.datetime] | None = None

    def __call__(self) -> Autoscaling:
        cache = self.ports.cache
        now = cache.autoscaling_now(self.settings.cluster.node_autoscaling) if cache is not None else None
        if now is not None:
            return now
        at = self.ports.clock()
        if self._read is None or at - self._read[1] >= self.FRESH_FOR:
            need = needs(self.planned.policies)
            self._read = (autoscaler_notes(self.ports.api, self.settings, need, self.settings.cluster.namespaces)[0],
                          at)
        return self._read[0]


def confirmed(ports: Ports, settings: Settings, planned: Planned, source: PrometheusSource | None
              ) -> tuple[Change, ...]:
    """The plan's lifecycle changes, less the first marks and warnings a fresh read does not bear out."""
    decided = planned.plan
    kept: list[Change] = []
    elsewhere = Beyond(ports, settings, planned)
    for change in decided.changes:
        if not recheck.first_notice(change):
            kept.append(change)
            continue
        trigger = next((f.trigger for f in decided.findings
                        if f.subject.uid == change.workload.uid and f.policy == change.policy), TriggerKind.IDLE_GPU)
        probe = Action(ActionType.REPORT, change.workload, change.resource_version, change.policy, trigger,
                       "lifecycle", "FreshLook", change.why)
        try:
            fresh = scoped.read_scoped(ports.api, settings, planned.policies, probe, ports.clock(), source=source,
                                       claims_seen=planned.memory.claims_seen, elsewhere=elsewhere)
        except errors.KubeError as e:
            logger.warning("not %s %s this cycle: it could not be read again first: %s", change.step,
                           change.workload, e)
            continue
        again = recheck.still_notices(change, fresh, planned.policies, ports.clock(), settings.plan())
        if again.change is None:
            logger.info("not %s %s: on a fresh read, %s", change.step, change.workload, again.why,
                        extra={"object": str(change.workload)})
            continue
        kept.append(change)
    return tuple(kept)


def changes(ports: Ports, settings: Settings, planned: Planned, source: PrometheusSource | None
            ) -> Sequence[Change]:
    """`confirmed`, unless nothing in the plan starts a countdown (no read at all then)."""
    if not any(recheck.first_notice(c) for c in planned.plan.changes):
        return planned.plan.changes
    return confirmed(ports, settings, planned, source)
