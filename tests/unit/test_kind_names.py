"""Custom resources named in `--kinds` as plural.group/version get the kind their objects carry:
the kind is what policies match (`match.kinds`), what the endings apply to (a RayCluster or JobSet
suspended, through Kueue where it admits them) and what pods' ownerReferences name. A plural that
does not spell its kind (rayclusters: RayCluster, not Raycluster) is taken from what the project
knows of the ML operators; any other from the plural, as before."""

from __future__ import annotations

import pytest

from janitor.observe import kueue
from janitor.policy.endings import Action
from janitor.settings import parse_kind


@pytest.mark.parametrize("text,kind", [
    ("rayclusters.ray.io/v1", "RayCluster"),
    ("rayjobs.ray.io/v1", "RayJob"),
    ("jobsets.jobset.x-k8s.io/v1alpha2", "JobSet"),
    ("notebooks.kubeflow.org/v1", "Notebook"),
    ("pytorchjobs.kubeflow.org/v1", "PyTorchJob"),
    ("widgets.example.com/v1", "Widget"),
])
def test_a_custom_resource_gets_the_kind_its_objects_carry(text: str, kind: str) -> None:
    assert parse_kind(text).kind == kind


def test_jobsets_and_rayclusters_listed_are_suspended_and_looked_up_in_kueue() -> None:
    for text in ("rayclusters.ray.io/v1", "jobsets.jobset.x-k8s.io/v1alpha2"):
        kind = parse_kind(text).kind
        assert Action.SUSPEND.applies_to(kind) and kind in kueue.KINDS, kind
