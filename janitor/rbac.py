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
from janitor.policy.endings import KUEUE_GROUP, Action

# What the TTL/expiry cleanup needs on each kind: read (the daemon's watch cache, the re-read
# before acting), patch (the note that a mistake was reported) and delete.
KIND_VERBS = ("get", "list", "watch", "delete", "patch")


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "kube-idle-janitor", "app.kubernetes.io/component": component}


def cluster_role(kinds: Sequence[ResourceKind], *, name: str = "kube-idle-janitor") -> dict[str, Any]:
    verbs: dict[tuple[str, str], list[str]] = defaultdict(list)

    def grant(group: str, resource: str, *wanted: str) -> None:
        verbs[(group, resource)].extend(v for v in wanted if v not in verbs[(group, resource)])

    for kind in kinds:
        grant(kind.group, kind.plural, *KIND_VERBS)
    # Events announce every action; the state ConfigMap (ledger, tripwire) is read and written.
    # list: the node agent's OOMKillInPod Events, and node autoscalers' Events on pods.
    grant("", "events", "create", "patch", "list", "watch")
    # get: also cluster-autoscaler's status ConfigMap, a sign that nodes can be added. Its first
    # `create` is granted in the state namespace only (state_role).
    grant("", "configmaps", "get", "patch")
    # Pending pods are judged against every node (could it ever fit?), and admin reports name nodes.
    grant("", "nodes", "get", "list", "watch")
    # Every cycle reads namespaces (opt-outs, labels, time zones) and, with policies, pods; the
    # re-check before acting reads them too. Read-only unless the kinds list says more.
    grant("", "namespaces", "get", "list", "watch")
    grant("", "pods", "get", "list", "watch")
    # DRA ResourceClaims holding devices with no consumer are reported; under an orphanedClaim policy
    # they are marked (patch) and, where it enforces delete, deleted. No other policy writes them.
    grant("resource.k8s.io", "resourceclaims", "get", "list", "patch", "delete")
    # A suspend of what Kueue admits goes through its Kueue Workload: found by listing, then patched.
    through = Action.SUSPEND.ending.queued
    if through is not None and any(kind.kind in (through.kinds or ()) for kind in kinds):
        grant(KUEUE_GROUP, "workloads", "get", "list", "patch")
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": _labels("janitor")},
        "rules": [
            {"apiGroups": [group], "resources": [resource], "verbs": granted}
            for (group, resource), granted in sorted(verbs.items())
        ],
    }


def state_role(*, namespace: str, name: str = "kube-idle-janitor-state") -> dict[str, Any]:
    """The one object the janitor creates: its state ConfigMap, in its own namespace the first time.
    `create` cannot be limited to a name, so it is limited to that namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels("janitor")},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}],
    }


def role_binding(*, name: str, role: str, namespace: str, service_account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels("janitor")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


def cluster_role_binding(*, name: str, role: str, namespace: str, service_account: str,
                         component: str = "janitor") -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": _labels(component)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


def node_agent_role(*, name: str = "kube-idle-janitor-node-agent") -> dict[str, Any]:
    """What `janitor node-agent` needs and no more: its node's pods (list with a field selector;
    RBAC cannot narrow to one node, so list pods cluster-wide), its Node and the Node's status
    condition (as node-problem-detector's role), and Events on the Node and on Pods."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": _labels("node-agent")},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        ],
    }
