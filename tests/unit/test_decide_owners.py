"""Who owns a workload, from configured annotations and labels on it or on its namespace.

Aspects covered:
- the workload's own annotation wins over its namespace's;
- a Kubeflow Profile namespace's `owner` annotation (an e-mail) is found;
- values read as an e-mail, a Slack user id, or a channel (#name or id); anything else is skipped;
- nothing found is an explicit unknown owner, with where it looked.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import obj

from janitor.decide.model import NamespaceView
from janitor.decide.owners import OwnerKind, classify, find_owner


@pytest.mark.parametrize(
    ("value", "kind"),
    [("alice@lab.example", OwnerKind.EMAIL), ("U04ABCD1234", OwnerKind.SLACK_USER), ("#ml-team", OwnerKind.CHANNEL),
     ("C0123ABCDE", OwnerKind.CHANNEL), ("alice", None), ("alice@localhost", None), ("#", None)],
    ids=["email", "slack-user", "channel-name", "channel-id", "bare-name", "no-domain", "empty-channel"],
)
def test_classify(value: str, kind: OwnerKind | None) -> None:
    assert classify(value) == kind


def test_workload_annotation_wins_over_namespace() -> None:
    deploy = replace(obj("nb", kind="Deployment"), annotations={"janitor/owner": "bob@lab.example"})
    ns = NamespaceView("team-a", annotations={"owner": "alice@lab.example"})
    owner = find_owner(deploy, ns)
    assert (owner.kind, owner.value) == (OwnerKind.EMAIL, "bob@lab.example")
    assert owner.source == "Deployment/team-a/nb annotation janitor/owner"


def test_kubeflow_profile_namespace_owner() -> None:
    namespace = NamespaceView("kubeflow-alice", annotations={"owner": "alice@lab.example"})
    owner = find_owner(obj("nb", kind="Notebook"), namespace)
    assert (owner.kind, owner.value) == (OwnerKind.EMAIL, "alice@lab.example")
    assert owner.source.startswith("Namespace/kubeflow-alice")


def test_label_owner_and_unreadable_values_skipped() -> None:
    deploy = replace(obj("nb", kind="Deployment"), annotations={"owner": "someone"},
                     labels={"janitor/owner": "U04ABCD1234"})
    assert find_owner(deploy, None).kind is OwnerKind.SLACK_USER


def test_unknown_owner_is_explicit() -> None:
    owner = find_owner(obj("nb", kind="Deployment"), NamespaceView("team-a"))
    assert owner.kind is OwnerKind.UNKNOWN and str(owner) == "unknown owner" and "no owner" in owner.source
