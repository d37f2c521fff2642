"""The janitor's settings: one frozen value, grouped by concern, with one set of defaults.

Built once (`from_args`, from the command line and the environment), logged once at start, and
passed down. The command line takes its defaults from these dataclasses, so a default is written
in exactly one place. Every default is safe on its own: protected system namespaces, an honoured
opt-out, caps that bound a bad day to a few dozen deletions, and a tripwire that stops everything
on a sudden jump.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import enum
import os
import urllib.parse
from dataclasses import dataclass, field

from janitor import annotations as ann
from janitor.decide.autoscaling import NodeAutoscaling
from janitor.decide.lifecycle import LifecycleSettings, MarkCaps
from janitor.decide.model import ResourceKind
from janitor.decide.owners import DEFAULT_OWNER_KEYS
from janitor.decide.plan import PlanSettings
from janitor.decide.rails import DEFAULT_PROTECTED_NAMESPACES, Caps, Rails, Tripwire
from janitor.decide.selection import CronJobMode
from janitor.durations import in_words

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


# The kinds of the ML operators' resources whose plural does not spell them: what their objects and
# pods' ownerReferences carry, which policies match and endings apply to (`plural.group` -> Kind).
KNOWN_KINDS: dict[str, str] = {
    "rayclusters.ray.io": "RayCluster", "rayjobs.ray.io": "RayJob", "rayservices.ray.io": "RayService",
    "jobsets.jobset.x-k8s.io": "JobSet", "pytorchjobs.kubeflow.org": "PyTorchJob", "tfjobs.kubeflow.org": "TFJob",
    "mpijobs.kubeflow.org": "MPIJob", "xgboostjobs.kubeflow.org": "XGBoostJob", "jaxjobs.kubeflow.org": "JAXJob",
    "trainjobs.trainer.kubeflow.org": "TrainJob", "inferenceservices.serving.kserve.io": "InferenceService",
}


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
    named = KNOWN_KINDS.get(f"{plural}.{group}") or plural[:1].upper() + plural[1:].rstrip("s")
    return ResourceKind(group, version, named, plural)


@dataclass(frozen=True)
class ClusterSettings:
    kinds: tuple[ResourceKind, ...] = DEFAULT_KINDS
    namespaces: tuple[str, ...] | None = None  # only these (kube-janitor's --include-namespaces); None: all
    state_namespace: str = "kube-idle-janitor"  # the rails' ledger, the tripwire, the lease
    state_name: str = "janitor-state"
    # Objects per list call. Each page is decoded whole while the views kept from it are made, so
    # smaller pages scatter the views over less memory: 50,000 pods cached in 162 MB at 250 a page,
    # 203 MB at 500 (the extra pages cost a request per 250 objects, once, at the first list).
    page_size: int = 250
    cronjob_target: CronJobMode = CronJobMode.JOB  # act on a CronJob's Job, or on the CronJob itself
    owner_keys: tuple[tuple[str, str], ...] = DEFAULT_OWNER_KEYS  # (annotation|label, key), in order
    # Whether nodes can be added: `auto` looks for cluster-autoscaler or Karpenter (a pod that fits
    # no existing node then waits for one, unless the autoscaler says none could run it).
    node_autoscaling: NodeAutoscaling = NodeAutoscaling.AUTO
    # How often the watch cache lists nodes again, instead of watching them: each kubelet's status
    # report is a whole Node object on a watch (every 10 s on some distributions), while a list of
    # every node, compressed, costs the same whatever the kubelets do. Deciding reads nodes as of
    # their last list (at most this old, plus 30 s and a list's time); an action re-reads the nodes
    # it depends on. Zero: watch them.
    node_refresh: datetime.timedelta = datetime.timedelta(minutes=5)
    # DRA ResourceClaims that hold devices with no live consumer go into the admin report once their
    # status has said so this long (a deallocation on its way takes seconds). Zero: claims not read.
    claims_after: datetime.timedelta = datetime.timedelta(minutes=10)


@dataclass(frozen=True)
class PrometheusSettings:
    url: str | None = None
    dcgm_labels: str = "servicemonitor"  # "servicemonitor": exported_pod/...; "direct": pod/...
    hostname_label: str = "Hostname"  # dcgm-exporter before 4.x; newer: "hostname"
    # Coverage and gaps are measured against each job's scrape interval read from Prometheus' targets;
    # this one stands in for jobs it does not list (a store without a targets API, such as Mimir).
    scrape_interval: datetime.timedelta | None = None
    extra_matchers: tuple[str, ...] = ()  # e.g. cluster="mn2" when one Thanos serves several clusters
    timeout: datetime.timedelta = datetime.timedelta(seconds=30)  # one query's answer; connecting gets ≤3 s
    # The samples one usage query may load at once, estimated: a whole read above it is asked in
    # parts (janitor.observe.parts). A tenth of Prometheus' default --query.max-samples; 0: one query.
    query_samples: int = 5_000_000
    # Credentials: files, read each time a connection is made, so a rotated Secret is picked up.
    bearer_token_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    password: str | None = field(default=None, repr=False)  # only from a URL's user:password@, never logged
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None


@dataclass(frozen=True)
class SlackSettings:
    token: str | None = field(default=None, repr=False)  # never logged
    api_url: str | None = None  # None: Slack itself; the sandbox points it at its stand-in
    admin_channel: str | None = None  # owners that cannot be reached, and the admins' report
    # Named in every message: which cluster (a researcher may use several), and the researcher guide.
    cluster_name: str | None = None
    guide_url: str | None = None
    # Buttons: clicks arrive over Socket Mode (an app-level token) and/or a signed HTTP endpoint.
    app_token: str | None = field(default=None, repr=False)  # xapp-...; never logged
    signing_secret_file: str | None = None  # read at start; the HTTP endpoint refuses unsigned requests
    http_port: int = 0  # 0: no HTTP endpoint
    admin_users: tuple[str, ...] = ()  # Slack user ids whose clicks count as an owner's on any workload
    members_release: bool = False  # members of an owning channel may press Release too (anyone can join a public one)
    send_budget: datetime.timedelta = datetime.timedelta(seconds=20)  # Slack time per cycle; the rest waits
    timeout: datetime.timedelta = datetime.timedelta(seconds=10)  # one Web API call's answer
    notice_retry: datetime.timedelta = datetime.timedelta(minutes=5)  # between attempts at one undelivered send
    admin_report_every: datetime.timedelta = datetime.timedelta(hours=1)  # unless what it says changed


@dataclass(frozen=True)
class LeaderSettings:
    elect: bool | None = None  # None: on in-cluster, off with a kubeconfig
    lease_name: str = "kube-idle-janitor"
    lease_duration: datetime.timedelta = datetime.timedelta(seconds=15)


@dataclass(frozen=True)
class Settings:
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    rails: Rails = field(default_factory=Rails)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    slack: SlackSettings = field(default_factory=SlackSettings)
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    policy_paths: tuple[str, ...] = ()  # policy files and directories; empty: the expiry path only
    interval: datetime.timedelta = datetime.timedelta(seconds=60)
    cycle_budget: datetime.timedelta = datetime.timedelta(minutes=10)  # longer: abandoned, fenced, counted

    def plan(self) -> PlanSettings:
        """What deciding needs of these settings."""
        return PlanSettings(self.rails, self.lifecycle, self.cluster.cronjob_target, self.cluster.owner_keys,
                            (self.cluster.state_namespace, self.cluster.state_name), self.cluster.claims_after)


DEFAULTS = Settings()


def _duration(text: str, flag: str) -> datetime.timedelta:
    try:
        value = ann.parse_ttl(text)
    except ValueError as e:
        raise SystemExit(f"{flag} {text!r}: {e}") from e
    if value is None:
        raise SystemExit(f"{flag} {text!r}: give a duration such as 30m or 1h")
    return value


def _owner_keys(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    if not values:
        return DEFAULTS.cluster.owner_keys
    keys = []
    for value in values:
        where, sep, key = value.partition(":")
        if not sep or where not in ("annotation", "label") or not key:
            raise SystemExit(f"--owner-key {value!r}: expected annotation:KEY or label:KEY")
        keys.append((where, key))
    return tuple(keys)


def _guide_url(text: str | None) -> str | None:
    """An http(s) link Slack can show as one (no spaces, no `|` or `>` that end its link markup)."""
    if not text or not text.strip():
        return None
    url = text.strip()
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c in url for c in " \t|<>"):
        raise SystemExit(f"--guide-url {url!r}: give an http(s) URL without spaces, such as "
                         "https://wiki.example.org/gpu-janitor")
    return url


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


class _Args:
    """Typed reads of parsed arguments: a command without an option gets the default."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def raw(self, name: str) -> object:
        return getattr(self.args, name, None)

    def text(self, name: str, default: str) -> str:
        value = self.raw(name)
        return default if value is None else str(value)

    def whole(self, name: str, default: int) -> int:
        value = self.raw(name)
        return default if value is None else int(str(value))

    def seconds(self, name: str, default: datetime.timedelta) -> datetime.timedelta:
        value = self.raw(name)
        return default if value is None else datetime.timedelta(seconds=float(str(value)))

    def optional_seconds(self, name: str) -> datetime.timedelta | None:
        value = self.raw(name)
        return None if value is None else datetime.timedelta(seconds=float(str(value)))

    def number(self, name: str, default: float) -> float:
        value = self.raw(name)
        return default if value is None else float(str(value))

    def texts(self, name: str) -> tuple[str, ...]:
        value = self.raw(name)
        return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _userinfo(url: str | None) -> tuple[str | None, str | None, str | None]:
    """(url without user:password@, user, password): credentials never stay where a URL is shown."""
    if not url:
        return None, None, None
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return (urllib.parse.urlunsplit(parts._replace(netloc=netloc)), urllib.parse.unquote(parts.username or ""),
            urllib.parse.unquote(parts.password or "") if parts.password is not None else None)


def from_args(args: argparse.Namespace) -> Settings:
    """The settings from parsed arguments (each command has only some options; the rest keep their
    defaults) and the environment (PROMETHEUS_URL, SLACK_BOT_TOKEN, SLACK_API_URL, JANITOR_CLUSTER_NAME,
    JANITOR_GUIDE_URL)."""
    a, d = _Args(args), DEFAULTS
    cluster = ClusterSettings(
        kinds=tuple(parse_kind(k) for k in _names(a.text("kinds", ""))) or d.cluster.kinds,
        namespaces=_names(a.text("namespaces", "")) or None,
        state_namespace=a.text("state_namespace", d.cluster.state_namespace),
        cronjob_target=CronJobMode(a.text("cronjob_target", d.cluster.cronjob_target)),
        owner_keys=_owner_keys(list(a.texts("owner_key"))),
        node_autoscaling=NodeAutoscaling(a.text("node_autoscaling", d.cluster.node_autoscaling)),
        node_refresh=a.seconds("node_refresh", d.cluster.node_refresh),
        claims_after=a.seconds("orphaned_claims_after", d.cluster.claims_after),
    )
    protected = a.raw("protected_namespaces")
    caps, trip = d.rails.caps, d.rails.tripwire
    rails = Rails(
        protected_namespaces=_names(str(protected)) if protected is not None else d.rails.protected_namespaces,
        honour_opt_out=not a.raw("ignore_opt_out"),
        caps=Caps(a.whole("max_deletions_per_hour", caps.per_hour), a.whole("max_deletions_per_day", caps.per_day),
                  a.whole("max_deletions_per_namespace_per_hour", caps.per_namespace_per_hour),
                  a.whole("max_deletions_per_namespace_per_day", caps.per_namespace_per_day)),
        tripwire=Tripwire(a.number("tripwire_fraction", trip.fraction), a.whole("tripwire_min_jump", trip.min_jump)),
        dry_run=bool(a.raw("dry_run")),
        max_clock_skew=a.seconds("max_clock_skew", d.rails.max_clock_skew),
    )
    url, user, password = _userinfo(a.text("prometheus_url", "") or os.environ.get("PROMETHEUS_URL") or None)
    prometheus = PrometheusSettings(
        url=url, username=a.text("prometheus_username", "") or user, password=password,
        bearer_token_file=a.text("prometheus_bearer_token_file", "") or None,
        password_file=a.text("prometheus_password_file", "") or None,
        ca_file=a.text("prometheus_ca_file", "") or None,
        client_cert_file=a.text("prometheus_client_cert", "") or None,
        client_key_file=a.text("prometheus_client_key", "") or None,
        dcgm_labels=a.text("dcgm_labels", d.prometheus.dcgm_labels),
        hostname_label=a.text("hostname_label", d.prometheus.hostname_label),
        scrape_interval=a.optional_seconds("scrape_interval"),
        extra_matchers=a.texts("prometheus_matcher"),
        timeout=a.seconds("prometheus_timeout", d.prometheus.timeout),
        query_samples=a.whole("prometheus_query_samples", d.prometheus.query_samples),
    )
    slack = SlackSettings(
        token=a.text("slack_token", "") or os.environ.get("SLACK_BOT_TOKEN") or None,
        api_url=a.text("slack_api_url", "") or os.environ.get("SLACK_API_URL") or None,
        admin_channel=a.text("admin_channel", "") or None,
        cluster_name=a.text("cluster_name", "").strip() or os.environ.get("JANITOR_CLUSTER_NAME", "").strip() or None,
        guide_url=_guide_url(a.text("guide_url", "").strip() or os.environ.get("JANITOR_GUIDE_URL")),
        app_token=a.text("slack_app_token", "") or os.environ.get("SLACK_APP_TOKEN") or None,
        signing_secret_file=a.text("slack_signing_secret_file", "") or None,
        http_port=a.whole("slack_http_port", 0),
        admin_users=_names(a.text("slack_admin_users", "")),
        members_release=bool(a.raw("slack_channel_members_release")),
        send_budget=a.seconds("slack_budget", d.slack.send_budget),
        timeout=a.seconds("slack_timeout", d.slack.timeout),
    )
    pace = a.raw("message_pace")
    marks = d.lifecycle.caps
    lifecycle = LifecycleSettings(
        pace=_duration(str(pace), "--message-pace") if pace is not None else d.lifecycle.pace,
        caps=MarkCaps(a.whole("max_new_marks_per_cycle", marks.per_cycle),
                      a.whole("max_new_marks_per_owner", marks.per_owner),
                      a.whole("max_new_marks_per_namespace", marks.per_namespace)),
    )
    elect = a.raw("leader_elect")
    leader = LeaderSettings(
        elect=elect if isinstance(elect, bool) else None,
        lease_name=a.text("lease_name", d.leader.lease_name),
        lease_duration=a.seconds("lease_duration", d.leader.lease_duration),
    )
    return Settings(cluster, rails, prometheus, slack, lifecycle, leader, policy_paths=a.texts("policies"),
                    interval=a.seconds("interval", d.interval), cycle_budget=a.seconds("cycle_budget", d.cycle_budget))


def logged(settings: Settings) -> list[str]:
    """Every setting as one short `group.key=value` line, for the log at start: what ran, greppable,
    durations in words. A secret (a field with repr=False: the Slack tokens, a password from a URL)
    only shows whether it is set; files that hold secrets show their path, never what is in them."""
    return list(_lines(settings, ""))


def _lines(value: object, prefix: str) -> list[str]:
    found: list[str] = []
    for f in dataclasses.fields(value):  # type: ignore[arg-type]
        item = getattr(value, f.name)
        key = prefix + f.name
        if not f.repr:
            found.append(f"{key}={'(set)' if item else 'none'}")
        elif dataclasses.is_dataclass(item) and not isinstance(item, ResourceKind):
            found.extend(_lines(item, key + "."))
        else:
            found.append(f"{key}={_shown(item, f.name)}")
    return found


def _shown(value: object, name: str) -> str:
    if value is None:
        return "all" if name == "namespaces" else "auto" if name == "elect" else "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.timedelta):
        return in_words(value)
    if isinstance(value, ResourceKind):
        return value.key
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return ",".join(":".join(v) if isinstance(v, tuple) else _shown(v, name) for v in value) or "none"
    return str(value)


__all__ = ["DEFAULTS", "DEFAULT_KINDS", "DEFAULT_PROTECTED_NAMESPACES", "Caps", "ClusterSettings", "LeaderSettings",
           "LifecycleSettings", "MarkCaps", "PrometheusSettings", "Rails", "Settings", "SlackSettings", "Tripwire",
           "from_args", "logged", "parse_kind"]
