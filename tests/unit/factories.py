"""Small builders of decide/ values for the unit tests (valid by construction)."""

from __future__ import annotations

import datetime
import uuid

from janitor.decide.evidence import Quality
from janitor.decide.model import ObjectRef, ObjectView, OwnerRef

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def ago(**delta: float) -> datetime.datetime:
    return NOW - datetime.timedelta(**delta)


def obj(
    name: str = "thing",
    *,
    kind: str = "ConfigMap",
    namespace: str | None = "team-a",
    created: datetime.datetime | None = None,
    annotations: dict[str, str] | None = None,
    owner: ObjectView | None = None,
    template: dict[str, str] | None = None,
    deleting: bool = False,
    uid: str | None = None,
) -> ObjectView:
    api_version = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "Job": "batch/v1"}.get(kind, "v1")
    return ObjectView(
        ref=ObjectRef(kind, api_version, namespace, name, uid or str(uuid.uuid4())),
        resource_version="100",
        created=created or ago(hours=1),
        annotations=annotations or {},
        deleting=deleting,
        controller=OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid) if owner else None,
        template_annotations=template or {},
    )


SCRAPED = Quality(interval=datetime.timedelta(seconds=15), gap=datetime.timedelta(seconds=15))
"""Samples every 15 s with no gap and no NaN: evidence the idle triggers may judge."""


def scraped_every(interval: datetime.timedelta) -> Quality:
    return Quality(interval=interval, gap=interval)
