"""The janitor's RBAC, generated from the same kinds list it cleans up.

One list decides both what the janitor looks at and what it may touch, so the two cannot drift:
a kind added to `--kinds` without a matching ClusterRole rule would only be skipped (and
counted), never half-handled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from janitor.decide.model import ResourceKind

# What the TTL/expiry cleanup needs on each kind: read (snapshot and the re-read before acting),
# patch (the note that a mistake was reported) and delete.
KIND_VERBS = ("get", "list", "delete", "patch")


def cluster_role(kinds: Sequence[ResourceKind], *, name: str = "kube-idle-janitor") -> dict[str, Any]:
    by_group: dict[str, list[str]] = defaultdict(list)
    for kind in kinds:
        if kind.plural not in by_group[kind.group]:
            by_group[kind.group].append(kind.plural)
    rules: list[dict[str, Any]] = [
        {"apiGroups": [group], "resources": sorted(plurals), "verbs": list(KIND_VERBS)}
        for group, plurals in sorted(by_group.items())
    ]
    # Events announce every action; the state ConfigMap (ledger, tripwire) is read and written.
    rules.append({"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]})
    rules.append({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "kube-idle-janitor"}},
        "rules": rules,
    }


def cluster_role_binding(*, name: str, role: str, namespace: str, service_account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
