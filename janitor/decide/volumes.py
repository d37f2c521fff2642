"""What an action does to a StatefulSet's volumes.

A StatefulSet's claims from its `volumeClaimTemplates` outlive its pods by default, but its
`persistentVolumeClaimRetentionPolicy` can have the StatefulSet controller delete them: every
claim when the StatefulSet is deleted (`whenDeleted: Delete`), the claims of the replicas scaled
away (`whenScaled: Delete`; scaling to zero is all of them). The janitor's scale-to-zero and
delete promise that a researcher's data stays unless an admin's policy says otherwise
(`lifecycle.deleteVolumes`), so an action that would lose volumes does not fit by default, and
every message about it says what happens to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from janitor.policy.model import Action

DELETE = "Delete"
RETAIN = "Retain"


@dataclass(frozen=True, slots=True)
class ClaimTemplates:
    """A StatefulSet's claim templates and its retention policy, as the apiserver stores it
    (both fields default to Retain). A value other than Retain or Delete is read as Delete: a
    retention the janitor does not know is not one it can promise."""

    names: tuple[str, ...]
    when_scaled: str = RETAIN
    when_deleted: str = RETAIN


def lost_under(action: Action, claims: ClaimTemplates | None) -> str | None:
    """The retention rule under which `action` deletes the workload's claims ("whenScaled: Delete"),
    or None when its volumes stay (no claim templates, Retain, or an action that deletes nothing)."""
    rule = action.ending.volumes
    if claims is None or not claims.names or rule is None:
        return None
    value = claims.when_scaled if rule == "whenScaled" else claims.when_deleted
    return None if value == RETAIN else f"{rule}: {value}"


def fate(action: Action, claims: ClaimTemplates | None) -> str:
    """What happens to the volumes, in words for the warning, the "done" note and `explain`; ""
    when the workload has no claims from templates."""
    if claims is None or not claims.names:
        return ""
    names = ", ".join(claims.names)
    rule = lost_under(action, claims)
    if rule is not None:
        return f"its volumes (claims from templates {names}) are deleted with it ({rule})"
    kept = action.ending.volumes
    return f"its volumes (claims from templates {names}) stay" + (f" ({kept}: {RETAIN})" if kept else "")
