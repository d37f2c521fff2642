"""The admins' activity rules (`activity:` in a policy), each asked once per cycle as written.

A rule is the admin's PromQL; the janitor only reads which pods its answer names. It adds no
scope of its own: a rule's expression may join series any way it likes, and narrowing it could
change what it means. A re-check asks every rule again, right before acting, so a request that
arrived since the cycle's read still counts.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from datetime import datetime

from janitor.decide.evidence import ActivityEvidence, PodKey
from janitor.observe.prometheus import PrometheusError, PrometheusSource

logger = logging.getLogger(__name__)

# Where each sample names its pod: behind a ServiceMonitor without honor_labels the target's own
# labels take `namespace` and `pod` (the exporter's pod) and the workload's move to `exported_*`.
NAMES = (("exported_namespace", "exported_pod"), ("namespace", "pod"))
UID_LABELS = ("pod_uid", "uid")  # dcgm-exporter's and kube-state-metrics' names for the pod UID
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # what Kubernetes gives a pod


def read(source: PrometheusSource, expressions: Iterable[str], at: datetime) -> dict[str, ActivityEvidence]:
    """Each expression's answer at `at`; never raises for Prometheus trouble (the answer says `failed`)."""
    return {expr: rule_evidence(source, expr, at) for expr in sorted(set(expressions))}


def rule_evidence(source: PrometheusSource, expr: str, at: datetime) -> ActivityEvidence:
    try:
        result = source.instant(expr, at)
    except PrometheusError as error:
        logger.warning("an activity rule could not be evaluated, so every workload its policy covers counts as "
                       "in use: %s: %s", expr, error)
        return ActivityEvidence(failed=str(error))
    if result.partial:
        return ActivityEvidence(failed="a partial answer: " + "; ".join(result.warnings))
    if result.result_type != "vector":
        return ActivityEvidence(failed=f"a {result.result_type} answer, not an instant vector naming pods")
    pods, anonymous = pods_named(s.labels for s in result.series)
    return ActivityEvidence(pods, anonymous)


def pods_named(samples: Iterable[Mapping[str, str]]) -> tuple[dict[PodKey, frozenset[str]], int]:
    """The pods the samples' labels name, each with the UIDs they carry ("" for a sample with none, or
    with a label that is no pod UID: then the name alone counts), and how many samples name no pod."""
    pods: dict[PodKey, set[str]] = {}
    anonymous = 0
    for labels in samples:
        named = next(((labels[ns], labels[pod]) for ns, pod in NAMES if labels.get(ns) and labels.get(pod)), None)
        if named is None:
            anonymous += 1
            continue
        uid = next((labels[k] for k in UID_LABELS if _UID.fullmatch(labels.get(k, ""))), "")
        pods.setdefault(PodKey(*named), set()).add(uid)
    return {k: frozenset(v) for k, v in pods.items()}, anonymous
