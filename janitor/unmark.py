"""`janitor unmark`: the janitor's own marks removed, for uninstalling and for mistakes."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes.client import ApiClient

from janitor import annotations as ann
from janitor import cycle, errors
from janitor.act import kube
from janitor.observe import observation
from janitor.settings import Settings


@dataclass(frozen=True)
class Unmarked:
    ref: str
    policy: str
    result: str  # "removed", "would remove" or why not


def unmark(api: ApiClient, settings: Settings, *, policy: str | None = None, dry_run: bool = False) -> list[Unmarked]:
    """Remove the janitor's own marks (all, or one policy's): for uninstalling, and for mistakes.

    Only marks are touched (any janitor mark key present); a user's own `janitor/expires` and their
    `janitor/keep-until` stay. Each write is guarded by the resourceVersion it was read at."""
    seen = observation.read(api, settings, (), cycle.utc_now())
    kinds = cycle.kinds(settings)
    done: list[Unmarked] = []
    for obj in seen.objects:
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
        done.append(Unmarked(str(obj.ref), marked_by, "removed"))
    return done
