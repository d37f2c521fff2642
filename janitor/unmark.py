"""`janitor unmark`: the janitor's own marks removed, for uninstalling and for mistakes."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kubernetes.client import ApiClient

from janitor import annotations as ann
from janitor import cycle, errors
from janitor.act import kube
from janitor.decide.model import ObjectRef
from janitor.observe import claims, observation
from janitor.settings import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unmarked:
    ref: str
    policy: str
    result: str  # "removed", "would remove" or why not


def unmark(api: ApiClient, settings: Settings, *, policy: str | None = None, dry_run: bool = False) -> list[Unmarked]:
    """Remove the janitor's own marks (all, or one policy's): for uninstalling, and for mistakes.

    Only marks are touched (any janitor mark key present); a user's own `janitor/expires` and their
    `janitor/keep-until` stay. Each write is guarded by the resourceVersion it was read at. A "done"
    note kept for a mark removed goes from the state ConfigMap with it: the action it announces
    never happened (one that happens takes the mark with it), and must not be announced later."""
    seen = observation.read(api, settings, (), cycle.utc_now())
    kinds = cycle.kinds(settings)
    # DRA claims an orphanedClaim policy marked are not among a cycle's objects: read them too (at v1,
    # the one version they are marked at; not served, or not readable: there are none to unmark).
    held = claims.read(api, settings.cluster.namespaces, page_size=settings.cluster.page_size)
    listed = {o.ref.uid for o in seen.objects}
    marked_claims = [c.view for c in held.claims if c.view is not None and c.view.ref.uid not in listed]
    done: list[Unmarked] = []
    for obj in (*seen.objects, *marked_claims):
        if not ann.carries_mark(obj.annotations):
            continue
        marked_by = obj.annotations.get(ann.POLICY, "")
        if policy is not None and marked_by != policy:
            continue
        notes: dict[str, str | None] = dict.fromkeys(ann.mark_keys_on(obj.annotations))
        if dry_run:
            done.append(Unmarked(str(obj.ref), marked_by, "would remove"))
            continue
        try:
            kube.annotate(api, obj.ref, obj.resource_version, notes, kind=kinds[obj.ref.kind],
                          event=("IdleUnmarked", f"mark of policy {marked_by} removed by `janitor unmark`"))
        except errors.KubeError as e:
            done.append(Unmarked(str(obj.ref), marked_by, f"not removed: {e}"))
            continue
        _drop_done_notes(api, settings, obj.ref, obj.annotations.get(ann.MARKED_AT, ""))
        done.append(Unmarked(str(obj.ref), marked_by, "removed"))
    return done


def _drop_done_notes(api: ApiClient, settings: Settings, ref: ObjectRef, marked_at: str) -> None:
    """The "done" notes about the mark removed, out of the state ConfigMap. Read right before the
    write, and written over the version read only: the running janitor writes there too, and a
    note it kept meanwhile is merged in, not written over (act.notes). One that cannot be read or
    written is logged; the janitor drops the note itself once it sees the workload still there
    (act.notes.weigh)."""
    waiting = cycle.note_box(api, settings)
    if waiting.broken:
        logger.warning("the notes waiting to be sent cannot be read, so those about the mark removed from %s "
                       "stay until the janitor sees it was not acted on: %s", ref, waiting.broken)
    elif waiting.unmarked(ref, marked_at):
        waiting.flush()
