"""What the janitor cannot see, it does not change.

Every decision about a workload rests on its pods (idle or busy, covered or not, its owner chain)
and its namespace (opt-outs, owner, time zone). A cycle that could not read every pod, or every
namespace, of what it covers (a 403 after an RBAC edit, one namespace's RoleBinding removed) would
read "no pods" as "no longer covered" and cancel every mark, and miss every namespace's opt-out.
Such a cycle changes nothing: each mark stays as it is (a `WAIT` saying which kind and why), nothing
is marked, warned, cancelled, deleted or reclaimed, until the kind can be read again.
"""

from __future__ import annotations

from collections.abc import Sequence

from janitor.decide.lifecycle import Change, Step
from janitor.decide.model import ObjectView, Observation
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import with_marks

FOUNDATIONS = ("Pod", "Namespace")
"""The kinds every decision rests on."""


def lost(observation: Observation) -> Reason | None:
    """Why this cycle must change nothing, or None: the first foundation kind it could not read."""
    skipped = next((s for s in observation.skipped_kinds if s.kind in FOUNDATIONS), None)
    if skipped is None:
        return None
    return why(Code.SIGHT_LOST, kind=skipped.kind, why=skipped.reason)


def hold(objects: Sequence[ObjectView], reason: Reason) -> tuple[Change, ...]:
    """Every mark on `objects` (those outside protected namespaces) left as it is, each saying why."""
    held = []
    for view in with_marks(objects):
        mark = view.readings.mark
        if mark is not None:
            held.append(Change(Step.WAIT, view.ref, view.resource_version, mark.policy or "", reason))
    return tuple(held)
