"""Daemon settings: one frozen value, built once from flags and environment, logged once.

Every default is safe on its own: protected system namespaces, an honoured opt-out, caps that
bound a bad day to a few dozen deletions, and a tripwire that stops everything on a sudden jump.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from janitor.decide.lifecycle import LifecycleSettings, MarkCaps
from janitor.decide.model import ResourceKind
from janitor.decide.owners import DEFAULT_OWNER_KEYS
from janitor.decide.rails import DEFAULT_PROTECTED_NAMESPACES, Caps, Rails
from janitor.decide.workloads import CronJobMode

# The kinds the TTL/expiry cleanup looks at. The deployment generates the janitor's ClusterRole
# from this same list, so a kind it may not list is skipped and counted, not an error.
DEFAULT_KINDS: tuple[ResourceKind, ...] = (
    ResourceKind("apps", "v1", "Deployment", "deployments"),
    ResourceKind("apps", "v1", "StatefulSet", "statefulsets"),
    ResourceKind("apps", "v1", "DaemonSet", "daemonsets"),
    ResourceKind("apps", "v1", "ReplicaSet", "replicasets"),
    ResourceKind("batch", "v1", "Job", "jobs"),
    ResourceKind("batch", "v1", "CronJob", "cronjobs"),
    ResourceKind("", "v1", "Pod", "pods"),
    ResourceKind("", "v1", "ConfigMap", "configmaps"),
    ResourceKind("", "v1", "Service", "services"),
    ResourceKind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False),
    ResourceKind("kubeflow.org", "v1", "Notebook", "notebooks"),
)

def parse_kind(text: str) -> ResourceKind:
    """`Kind`, or `plural.group/version` for custom resources (e.g. `notebooks.kubeflow.org/v1`)."""
    for kind in DEFAULT_KINDS:
        if text in (kind.kind, kind.key, kind.plural):
            return kind
    name, slash, version = text.partition("/")
    plural, dot, group = name.partition(".")
    if not (slash and dot and plural and group and version):
        raise ValueError(
            f"{text!r} is not a known kind; name a built-in kind (e.g. Deployment) or a custom "
            "resource as plural.group/version (e.g. notebooks.kubeflow.org/v1)"
        )
    return ResourceKind(group, version, plural[:1].upper() + plural[1:].rstrip("s"), plural)


@dataclass(frozen=True)
class Settings:
    kinds: tuple[ResourceKind, ...] = DEFAULT_KINDS
    rails: Rails = field(default_factory=Rails)
    # Where the rails keep their memory (deletion ledger, tripwire) and admins acknowledge trips.
    state_namespace: str = "kube-idle-janitor"
    state_name: str = "janitor-state"
    interval: datetime.timedelta = datetime.timedelta(seconds=60)
    page_size: int = 500  # objects per list call: bounded memory and apiserver load on big clusters
    # Only these namespaces (kube-janitor's --include-namespaces); None = the whole cluster.
    namespaces: tuple[str, ...] | None = None
    # The idle triggers: policy files (empty = none) and where their evidence comes from.
    policy_paths: tuple[str, ...] = ()
    prometheus_url: str | None = None
    dcgm_labels: str = "servicemonitor"  # "servicemonitor": exported_pod/...; "direct": pod/...
    hostname_label: str = "Hostname"  # dcgm-exporter before 4.x renamed it: "hostname"
    scrape_interval: datetime.timedelta = datetime.timedelta(seconds=30)  # coverage is measured against it
    extra_matchers: tuple[str, ...] = ()  # e.g. cluster="mn2" when one Thanos serves several clusters
    cronjob_target: CronJobMode = CronJobMode.JOB  # act on a CronJob's Job, or on the CronJob itself
    owner_keys: tuple[tuple[str, str], ...] = DEFAULT_OWNER_KEYS  # (annotation|label, key), in order
    # The lifecycle (policies in mode: enforce): where warnings go and how fast.
    slack_token: str | None = field(default=None, repr=False)  # never logged
    slack_api_url: str | None = None  # None: Slack itself; the sandbox points it at its stand-in
    admin_channel: str | None = None  # owners that cannot be reached are reported here
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)  # pace, caps on new marks
    send_budget: datetime.timedelta = datetime.timedelta(seconds=20)  # Slack time per cycle; the rest waits
    notice_retry: datetime.timedelta = datetime.timedelta(minutes=5)  # between attempts at one undelivered send
    # The admins' report (stuck pods, leftovers, never-fits, silent GPUs): sent when it changes, else at this pace.
    admin_report_every: datetime.timedelta = datetime.timedelta(hours=1)


__all__ = ["Caps", "DEFAULT_KINDS", "DEFAULT_PROTECTED_NAMESPACES", "LifecycleSettings", "MarkCaps", "Rails",
           "Settings", "parse_kind"]
