"""Who to tell about a workload: a Slack user, an e-mail to resolve later, a channel, or nobody known.

Kubernetes does not record who created an object, so the owner comes from configured annotation
or label keys, on the workload first and then on its namespace (a Kubeflow Profile's namespace
carries its owner's e-mail in the `owner` annotation). "Unknown owner" is an explicit state: such
workloads are reported to admins instead of being warned about to nobody.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from janitor import annotations as ann

if TYPE_CHECKING:  # model holds an Owner in every finding, so it imports this module
    from janitor.decide.model import NamespaceView, ObjectView

# (where, key): looked up in this order, on the workload and then on its namespace.
DEFAULT_OWNER_KEYS: tuple[tuple[str, str], ...] = (
    ("annotation", ann.OWNER),
    ("label", ann.OWNER),
    ("annotation", "owner"),  # Kubeflow Profiles annotate their namespace with the owner's e-mail
)


class OwnerKind(StrEnum):
    SLACK_USER = "slack-user"  # U0123ABCD
    EMAIL = "email"  # resolved with users.lookupByEmail when a warning is sent
    CHANNEL = "channel"  # #team-ml or C0123ABCD
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Owner:
    kind: OwnerKind
    value: str = ""
    source: str = ""  # where it was found, for `explain` and admins

    def __str__(self) -> str:
        return f"{self.value} ({self.kind})" if self.kind is not OwnerKind.UNKNOWN else "unknown owner"

    @property
    def key(self) -> str:
        """Who it is, as the mark records it (janitor/warned-to, janitor/release): `<kind>:<value>`."""
        return f"{self.kind}:{self.value}"


def classify(value: str) -> OwnerKind | None:
    value = value.strip()
    if "@" in value and "." in value.rsplit("@", 1)[-1] and " " not in value:
        return OwnerKind.EMAIL
    if value.startswith("#") and len(value) > 1:
        return OwnerKind.CHANNEL
    if value[:1] in ("U", "W") and value[1:].isalnum() and value.isupper() and len(value) >= 9:
        return OwnerKind.SLACK_USER
    if value[:1] in ("C", "G") and value[1:].isalnum() and value.isupper() and len(value) >= 9:
        return OwnerKind.CHANNEL
    return None


def _lookup(labels: Mapping[str, str], notes: Mapping[str, str], keys: Sequence[tuple[str, str]],
            where: object) -> Owner | None:
    """`where`: what the labels and annotations are on, written into the owner's source only when
    one is found there (every workload of a cycle is looked up)."""
    for kind, key in keys:
        value = (notes if kind == "annotation" else labels).get(key)
        if not value:
            continue
        found = classify(value)
        if found is not None:
            return Owner(found, value.strip(), f"{where} {kind} {key}")
    return None


def find_owner(workload: ObjectView | None, namespace: NamespaceView | None,
               keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS, *, parent: ObjectView | None = None) -> Owner:
    """The first owner value that reads as a user, an e-mail or a channel, on the workload, then on
    its `parent` (the CronJob of a Job: its annotations never reach its Jobs), then on its
    namespace; unknown otherwise."""
    for view in (workload, parent):
        if view is not None:
            found = _lookup(view.labels, view.annotations, keys, view.ref)
            if found:
                return found
    if namespace is not None:
        found = _lookup(namespace.labels, namespace.annotations, keys, f"Namespace/{namespace.name}")
        if found:
            return found
    return _NO_OWNER


_NO_OWNER = Owner(OwnerKind.UNKNOWN, source="no owner annotation or label on the workload or its namespace")
