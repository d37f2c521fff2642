"""The option groups several `janitor` commands share: output, kubeconfig, cluster and rails, idle
policies, lifecycle. One definition each, so `plan`, `explain` and `run` read the same flags the
same way and the admin guide documents one set (its test checks every `run` flag is there).
"""

from __future__ import annotations

import argparse

from janitor import annotations as ann
from janitor.settings import DEFAULT_KINDS
from janitor.settings import DEFAULTS as D


def _samples(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of samples, 0 or more")
    return value


def output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table",
                   help="table: grouped by reason, lines cut to the terminal's width; wide: every line whole; "
                        "json, yaml: the whole plan as data, every reason with its code and facts (%(default)s)")


DAEMONS = ("run", "node-agent")  # they log as a service does; the other commands print their results


def log_format(p: argparse.ArgumentParser, command: str) -> None:
    default = "json; text with --once" if command in DAEMONS else "text"
    p.add_argument("--log-format", choices=("json", "text"), default=None,
                   help="json: one JSON object per line, its fields as keys, for a log collector; text: one line "
                        f"per record, for a person (default: {default})")


def kube(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--kubeconfig", metavar="PATH",
                   help="default: $KUBECONFIG, else ~/.kube/config, else the in-cluster ServiceAccount")
    p.add_argument("--context", help="the kubeconfig context to use (default: its current-context)")


def cluster(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster and rails")
    kube(g)
    g.add_argument("--kube-timeout", type=float, default=30.0,
                   help="seconds to wait for the apiserver's answer to one request; connecting gets at most 5 "
                        "(%(default)s)")
    g.add_argument("--kinds", default=",".join(k.key for k in DEFAULT_KINDS),
                   help="kinds to clean up, comma-separated; custom resources as plural.group/version "
                        "(default: %(default)s)")
    g.add_argument("--namespaces", default="",
                   help="only these namespaces, comma-separated (default: the whole cluster)")
    g.add_argument("--protected-namespaces", default=",".join(D.rails.protected_namespaces),
                   help="never touched (default: %(default)s)")
    g.add_argument("--ignore-opt-out", action="store_true",
                   help=f"act even on objects annotated {ann.OPT_OUT}: \"true\"")
    caps = D.rails.caps
    g.add_argument("--max-deletions-per-hour", type=int, default=caps.per_hour,
                   help="rolling hour, all namespaces (%(default)s)")
    g.add_argument("--max-deletions-per-day", type=int, default=caps.per_day,
                   help="rolling day, all namespaces (%(default)s)")
    g.add_argument("--max-deletions-per-namespace-per-hour", type=int, default=caps.per_namespace_per_hour,
                   help="(%(default)s)")
    g.add_argument("--max-deletions-per-namespace-per-day", type=int, default=caps.per_namespace_per_day,
                   help="(%(default)s)")
    g.add_argument("--tripwire-fraction", type=float, default=D.rails.tripwire.fraction,
                   help="stop all deletions when candidates grow by more than this fraction (%(default)s)")
    g.add_argument("--tripwire-min-jump", type=int, default=D.rails.tripwire.min_jump,
                   help="... and by at least this many objects (%(default)s)")
    g.add_argument("--max-clock-skew", type=float, default=D.rails.max_clock_skew.total_seconds(),
                   help="seconds our clock may differ from the apiserver's before deletions pause (%(default)s)")
    g.add_argument("--state-namespace", default=D.cluster.state_namespace,
                   help="namespace of the janitor-state ConfigMap (deletion ledger, tripwire) (%(default)s)")


def idle(p: argparse.ArgumentParser) -> None:
    idle = p.add_argument_group("idle policies (shadow report)")
    idle.add_argument("--policies", action="append", metavar="PATH",
                      help="policy file or directory (repeatable); adds the idle findings, with their evidence")
    idle.add_argument("--prometheus-url", help="default: $PROMETHEUS_URL (a user:password@ in it is used for basic "
                                               "auth and never shown; prefer the files below)")
    idle.add_argument("--prometheus-bearer-token-file", metavar="FILE", help="a bearer token, read each cycle")
    idle.add_argument("--prometheus-username", help="basic auth user, with --prometheus-password-file")
    idle.add_argument("--prometheus-password-file", metavar="FILE", help="basic auth password, read each cycle")
    idle.add_argument("--prometheus-ca-file", metavar="FILE", help="CA bundle to verify Prometheus' TLS certificate")
    idle.add_argument("--prometheus-client-cert", metavar="FILE", help="TLS client certificate (with --prometheus-"
                                                                       "client-key)")
    idle.add_argument("--prometheus-client-key", metavar="FILE", help="TLS client key")
    idle.add_argument("--dcgm-labels", choices=("servicemonitor", "direct"), default=D.prometheus.dcgm_labels,
                      help="servicemonitor: workload labels are exported_pod/exported_namespace (the "
                           "dcgm-exporter chart's default); direct: pod/namespace (%(default)s)")
    idle.add_argument("--hostname-label", default=D.prometheus.hostname_label,
                      help="Hostname, or hostname on newer dcgm-exporter (%(default)s)")
    idle.add_argument("--scrape-interval", type=float, default=None, metavar="SECONDS",
                      help="scrape interval for jobs Prometheus' targets API does not list (a store without "
                           "one, such as Mimir); otherwise each job's own interval is read from Prometheus")
    idle.add_argument("--prometheus-timeout", type=float, default=D.prometheus.timeout.total_seconds(),
                      help="seconds to wait for one query's answer; Prometheus is told a little less, so it "
                           "gives up first and says so (%(default)s)")
    idle.add_argument("--prometheus-query-samples", type=_samples, default=D.prometheus.query_samples,
                      metavar="N", help="the samples one usage query may load at once, as estimated from the "
                      "pods' GPUs (or pods, for CPU), the window and the step: a read above it is asked in parts, by "
                      "namespace or by pod, so none comes near Prometheus' --query.max-samples; 0: always one "
                      "query (%(default)s, a tenth of Prometheus' default)")
    idle.add_argument("--prometheus-matcher", action="append", metavar='LABEL="VALUE"',
                      help='added to every query, e.g. cluster="mn2" (repeatable)')
    idle.add_argument("--cronjob-target", choices=("job", "cronjob"), default=str(D.cluster.cronjob_target),
                      help="the workload of a CronJob's pods: this run's Job, or the CronJob (%(default)s)")
    idle.add_argument("--node-autoscaling", choices=("auto", "present", "none"),
                      default=str(D.cluster.node_autoscaling),
                      help="whether nodes can be added (a GPU pool scaled to zero): auto looks for cluster-autoscaler "
                           "and Karpenter; where they can, a pod that fits no existing node waits for one unless the "
                           "autoscaler says none could run it (%(default)s)")
    idle.add_argument("--owner-key", action="append", metavar="annotation:KEY|label:KEY",
                      help="where owners are read, in order, on the workload then its namespace "
                           "(default: annotation:janitor/owner, label:janitor/owner, annotation:owner)")


def lifecycle(p: argparse.ArgumentParser) -> None:
    life = p.add_argument_group(
        "lifecycle (policies in mode: enforce)",
        "An idle workload is marked (janitor/expires, janitor/policy, janitor/reason), its owner warned on "
        "Slack, reminded, and only acted on once a warning reached them and the deadline passed.")
    life.add_argument("--slack-token", help="bot token (default: $SLACK_BOT_TOKEN); without one nothing is "
                                            "warned, so nothing idle is ever acted on")
    life.add_argument("--slack-api-url", help="Web API base URL (default: $SLACK_API_URL, else Slack's)")
    life.add_argument("--admin-channel", help="where warnings for owners that cannot be reached go, e.g. "
                                              "#gpu-admins (they count as delivered only where a policy says so)")
    life.add_argument("--cluster-name", help="named in every Slack message, so a researcher on several clusters "
                                             "knows which one wrote (default: $JANITOR_CLUSTER_NAME)")
    life.add_argument("--guide-url", help="a link to your researcher guide, at the end of every Slack message "
                                          "(default: $JANITOR_GUIDE_URL)")
    life.add_argument("--slack-app-token", help="app-level token (xapp-..., scope connections:write; default: "
                                                "$SLACK_APP_TOKEN): the buttons on warnings work over Socket Mode, an "
                                                "outbound WebSocket, so no ingress is needed")
    life.add_argument("--slack-http-port", type=int, default=0,
                      help="also take clicks as Slack's signed HTTP requests on this port, path /slack/actions "
                           "(default 0: off; needs --slack-signing-secret-file)")
    life.add_argument("--slack-signing-secret-file", metavar="FILE",
                      help="the app's signing secret: requests without its valid signature, or older than 5 "
                           "minutes, or seen before, are refused")
    life.add_argument("--slack-admin-users", default="", metavar="U1,U2",
                      help="Slack user ids whose clicks count like an owner's on any workload (default: none)")
    life.add_argument("--slack-channel-members-release", action="store_true",
                      help="let the members of a channel that owns a workload press Release now too (default: they "
                           "may Keep and ask Why; Release needs the owner user or an admin, as anyone can join a "
                           "public channel)")
    life.add_argument("--message-pace", default=ann.format_duration(D.lifecycle.pace),
                      help="at most one warning or reminder per owner this often (%(default)s)")
    marks = D.lifecycle.caps
    life.add_argument("--max-new-marks-per-cycle", type=int, default=marks.per_cycle, help="(%(default)s)")
    life.add_argument("--max-new-marks-per-owner", type=int, default=marks.per_owner, help="per cycle (%(default)s)")
    life.add_argument("--max-new-marks-per-namespace", type=int, default=marks.per_namespace,
                      help="per cycle (%(default)s)")
    life.add_argument("--slack-timeout", type=float, default=D.slack.timeout.total_seconds(),
                      help="seconds to wait for one Slack Web API answer; a post whose answer is lost is "
                           "not posted again, the next cycle asks Slack whether it arrived (%(default)s)")
    life.add_argument("--slack-budget", type=float, default=D.slack.send_budget.total_seconds(),
                      help="seconds of Slack sending per cycle; the rest goes next cycle (%(default)s)")
