"""The admins' activity rules (`activity:` in a policy), each asked once per cycle as written.

A rule is the admin's PromQL; the janitor only reads which pods its answer names. It adds no
scope of its own: a rule's expression may join series any way it likes, and narrowing it could
change what it means. A re-check asks every rule again, right before acting, so a request that
arrived since the cycle's read still counts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from janitor.decide.evidence import ActivityEvidence, PodKey
from janitor.observe.prometheus import PrometheusError, PrometheusSource

logger = logging.getLogger(__name__)

NAMESPACE, POD = "namespace", "pod"
UID_LABELS = ("uid", "pod_uid")  # kube-state-metrics' and dcgm-exporter's names for the pod UID


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
    pods: dict[PodKey, set[str]] = {}
    anonymous = 0
    for series in result.series:
        namespace, pod = series.labels.get(NAMESPACE, ""), series.labels.get(POD, "")
        if not namespace or not pod:
            anonymous += 1
            continue
        uid = next((series.labels[k] for k in UID_LABELS if series.labels.get(k)), "")
        pods.setdefault(PodKey(namespace, pod), set()).add(uid)
    return ActivityEvidence({k: frozenset(v) for k, v in pods.items()}, anonymous)
