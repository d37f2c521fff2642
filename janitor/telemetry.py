"""The janitor's own metrics and its structured logs, including the audit trail.

Every action is one JSON log line with `"audit": true` (policy, rule, reason, evidence, outcome,
dry-run), besides its Event; metrics count outcomes, not attempts, with bounded labels only
(object names go to logs and Events). Nothing registers at import time: `Telemetry` owns its
registry, so tests and the daemon each build their own.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from janitor.decide.evidence import Evidence
from janitor.decide.model import Action, Finding, SkippedKind, TriggerKind
from janitor.decide.plan import CyclePlan
from janitor.decide.rails import HoldReason
from janitor.decide.triggers import registry as triggers
from janitor.decide.triggers.idle import reclaim_by
from janitor.decide.triggers.signals import coverage

AUDIT = logging.getLogger("janitor.audit")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra` fields become keys, so logs can be queried."""

    RESERVED = set(vars(logging.makeLogRecord({})))

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in self.RESERVED and not k.startswith("_")})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO", *, json_lines: bool = True) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The client libraries' own lines ("Retrying ... after connection broken by ...") say in their
    # words what the janitor says in its own (janitor.outage); they show at DEBUG only.
    quiet = logging.DEBUG if root.getEffectiveLevel() <= logging.DEBUG else logging.ERROR
    for name in ("urllib3", "kubernetes"):
        logging.getLogger(name).setLevel(quiet)
    logging.captureWarnings(True)  # a library's warning is a log record too, not a raw line on stderr


verdict_logger = logging.getLogger("janitor.cycle")  # where the verdicts were always logged


def log_verdicts(findings: Sequence[Finding], before: Mapping[tuple[str, str, str], str] | None
                 ) -> dict[tuple[str, str, str], str]:
    """One line per verdict that is new or changed since the last cycle (every one, the first
    time), the others at debug level: a cluster of 50,000 pods has some 20,000 verdicts a cycle,
    nearly all as they were a minute ago. The verdicts now, for the next cycle."""
    now: dict[tuple[str, str, str], str] = {}
    debug = verdict_logger.isEnabledFor(logging.DEBUG)
    for f in findings:
        if f.trigger is TriggerKind.EXPIRY:
            continue
        key = (f.policy, str(f.trigger), f.subject.uid)
        verdict = now[key] = triggers.word(f)
        was = before.get(key) if before is not None else None
        same = was == verdict
        if same and not debug:
            continue
        verdict_logger.log(logging.DEBUG if same else logging.INFO, "%s %s %s: %s (%s)", f.mode, f.policy,
                           f.workload or "(unknown workload)", verdict, f.why,
                           extra={"shadow": f.mode == "shadow", "policy": f.policy, "trigger": str(f.trigger),
                                  "verdict": verdict, "was": was, "object": str(f.workload) if f.workload else None,
                                  "would_reclaim_gpu_hours": f.reclaim_gpu_hours})
    return now


def audit(action: Action, *, outcome: str, dry_run: bool, detail: str = "") -> None:
    AUDIT.info(
        "%s %s: %s", action.type, action.target, action.why,
        extra={
            "audit": True,
            "action": str(action.type),
            "object": str(action.target),
            "uid": action.target.uid,
            "policy": action.policy,
            "trigger": str(action.trigger),
            "rule": action.rule,
            "reason": action.reason,
            "why": str(action.why),
            "why_code": str(action.why.code),
            "evidence": dict(action.evidence),
            "outcome": outcome,
            "dry_run": dry_run,
            "detail": detail,
        },
    )


PAUSES = (HoldReason.CLOCK_SKEW, HoldReason.TRIPWIRE, HoldReason.LEDGER)  # rails that stop every deletion
GPU_HOUR = 3600.0  # GPU-seconds per GPU-hour: the metrics are in base units, the decisions in hours


class Telemetry:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # A `_created` series beside every counter and histogram doubles what Prometheus stores and
        # tells nothing a dashboard shows (the process start time is there already). Process-wide.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it unannotated
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycles = Counter("janitor_cycles", "Cycles run, by result", ["result"], registry=r)
        self.cycle_seconds = Histogram(
            "janitor_cycle_duration_seconds", "Time one cycle took", registry=r,
            buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300),
        )
        self.actions = Counter("janitor_actions", "Actions applied, by type, rule, policy (ttl-expiry for "
                               "janitor/ttl and janitor/expires) and outcome", ["action", "rule", "policy", "outcome"],
                               registry=r)
        self.policies_loaded = Gauge("janitor_policies_loaded", "1 once a valid policy set was read; 0: the janitor "
                                     "acts on nothing, marks, unmarks and tells nothing", registry=r)
        self.slack_token_valid = Gauge("janitor_slack_token_valid", "1 while Slack accepts the bot token (auth.test); "
                                       "0: no warning can reach anyone", registry=r)
        self.held = Counter("janitor_deletions_held", "Deletions the rails held back, by reason",
                            ["reason"], registry=r)
        self.objects = Gauge("janitor_objects_seen", "Objects in the last snapshot", registry=r)
        self.sight_lost = Gauge("janitor_sight_lost", "1 while the last cycle could not read pods or namespaces "
                                "(it then changes nothing)", registry=r)
        self.kube_janitor = Gauge("janitor_kube_janitor_beside", "kube-janitor Deployments (or pods) seen running "
                                  "beside the janitor in the last cycle", registry=r)
        self.skipped_kinds = Gauge("janitor_kinds_skipped", "Configured kinds the last cycle could not list, by "
                                   "kind and reason (forbidden: RBAC, so never cleaned; not-served: no such API "
                                   "here)", ["kind", "reason"], registry=r)
        self.tripped = Gauge("janitor_tripwire_tripped", "1 while the tripwire stops deletions", registry=r)
        self.paused = Gauge("janitor_deletions_paused", "1 while every deletion pauses, due or not, by the rail "
                            "that pauses them (clock-skew: the janitor's clock is off the apiserver's, or the "
                            "latter unknown; tripwire; ledger-unreadable)", ["reason"], registry=r)
        self.skew = Gauge("janitor_clock_skew_seconds", "Janitor clock minus apiserver clock", registry=r)
        self.last_success = Gauge("janitor_last_success_timestamp_seconds", "When a cycle last succeeded",
                                  registry=r)
        self.idle_workloads = Gauge("janitor_idle_workloads", "Workloads per idle policy, trigger and verdict",
                                    ["policy", "trigger", "verdict"], registry=r)
        self.would_reclaim = Gauge("janitor_would_reclaim_gpu_seconds",
                                   "GPU-seconds enforcing would reclaim now (GPUs x idle window), per policy and "
                                   "namespace", ["policy", "namespace"], registry=r)
        self.silent_gpu_pods = Gauge("janitor_gpu_pods_without_telemetry", "Running GPU pods with no GPU series",
                                     ["node"], registry=r)
        self.signal_coverage = Gauge("janitor_gpu_signal_coverage_ratio", "Of the GPU pods an idle-GPU policy "
                                     "reading several signals judged, the share whose GPUs had this signal (the "
                                     "rest were judged on the others)", ["policy", "signal"], registry=r)
        self.evidence_failures = Counter("janitor_evidence_failures", "Evidence queries that failed or were partial",
                                         registry=r)
        self.targets_failures = Counter("janitor_prometheus_targets_failures", "Cycles in which Prometheus' targets "
                                        "API failed or answered without scrape intervals (each job's interval then "
                                        "comes from --scrape-interval, or is unknown)", registry=r)
        self.intervals_unknown = Gauge("janitor_scrape_intervals_unknown", "1 while the last cycle knew no scrape "
                                       "interval (the targets API gave none, no --scrape-interval): every pod "
                                       "judged on Prometheus is unknown, never idle", registry=r)
        self.policy_reloads = Counter("janitor_policy_reloads", "Policy file loads, by result", ["result"], registry=r)
        self.policies_broken = Gauge("janitor_policies_broken", "1 while the policy files have errors and the "
                                     "last good policies are in use", registry=r)
        self.lifecycle_steps = Counter("janitor_lifecycle_steps", "Lifecycle decisions per cycle, by step and policy",
                                       ["step", "policy"], registry=r)
        self.marked = Gauge("janitor_marked_workloads", "Workloads carrying the janitor's mark at the start of "
                            "the cycle, by policy", ["policy"], registry=r)
        self.messages = Counter("janitor_slack_messages", "Digests sent to Slack, by result and recipient",
                                ["result", "to"], registry=r)
        self.lifecycle_write_failures = Counter("janitor_lifecycle_write_failures",
                                                "Marks and records that could not be written", registry=r)
        self.leader = Gauge("janitor_leader", "1 while this replica holds the lease and acts", registry=r)
        self.ledger_contended = Counter("janitor_ledger_contended", "Cycles in which another janitor wrote the safety "
                                        "ledger (merged; no more deletions in that cycle)", registry=r)
        self.errors = Counter("janitor_errors", "Failed cycles, by the dependency that failed", ["source"], registry=r)
        self.reclaimed_gpus = Counter("janitor_reclaimed_gpus", "GPUs freed by lifecycle actions, by policy and "
                                      "action", ["policy", "action"], registry=r)
        self.reclaimed_gpu_seconds = Counter("janitor_reclaimed_gpu_seconds", "Idle GPU-seconds proven on "
                                             "workloads the lifecycle then reclaimed (GPUs x window), by policy and "
                                             "namespace", ["policy", "namespace"], registry=r)
        self.prometheus_seconds = Histogram("janitor_prometheus_request_duration_seconds", "Time one request to "
                                            "Prometheus took, by API (query, query_range, targets)", ["api"],
                                            registry=r, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.prometheus_bytes = Counter("janitor_prometheus_response_bytes", "Bytes Prometheus answered, by API",
                                        ["api"], registry=r)
        self.phase_seconds = Histogram("janitor_cycle_phase_seconds", "Time one phase of a cycle took: observe "
                                       "(read the cluster and Prometheus), decide (plan), act", ["phase"],
                                       registry=r, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.clicks = Counter("janitor_slack_clicks", "Buttons pressed on the janitor's messages, by button and "
                              "outcome (done, not-allowed, stale, no-room, failed; forged and replayed requests "
                              "as button unknown)", ["button", "outcome"], registry=r)
        self.decide_cpu = Counter("janitor_decide_cpu_seconds", "CPU seconds spent deciding (plan)", registry=r)
        self.heap_frozen = Gauge("janitor_heap_frozen_objects", "Objects the daemon froze out of Python's cyclic "
                                 "collector after its last cycle (janitor.heap; thawed and collected hourly)",
                                 registry=r)
        for source in ("kubernetes", "prometheus", "slack", "janitor"):
            self.errors.labels(source=source)
        for reason in HoldReason:
            self.held.labels(reason=str(reason))
        for reason in PAUSES:
            self.paused.labels(reason=str(reason))
        for result in ("success", "error"):
            self.cycles.labels(result=result)
            self.policy_reloads.labels(result=result)

    def observe_idle(self, findings: Sequence[Finding], failures: int, silent_nodes: Sequence[str]) -> None:
        """Gauges describe the current cycle only: cleared first so vanished workloads disappear."""
        self.idle_workloads.clear()
        judged = [f for f in findings if triggers.marks(f)]
        tally = Tally((f.policy, str(f.trigger), triggers.word(f)) for f in judged)
        for (policy, trigger, verdict), n in tally.items():
            self.idle_workloads.labels(policy=policy, trigger=trigger, verdict=verdict).set(n)
        self.would_reclaim.clear()
        for (policy, namespace), hours in reclaim_by(findings).items():
            self.would_reclaim.labels(policy=policy, namespace=namespace).set(hours * GPU_HOUR)
        self.signal_coverage.clear()
        for (policy, signal), (read, total) in coverage(findings).items():
            self.signal_coverage.labels(policy=policy, signal=signal).set(read / total)
        self.silent_gpu_pods.clear()
        for node, n in Tally(silent_nodes).items():
            self.silent_gpu_pods.labels(node=node).set(n)
        self.evidence_failures.inc(failures)
        self.errors.labels(source="prometheus").inc(failures)

    def observe_intervals(self, evidence: Evidence) -> None:
        """Whether the cycle's evidence could be judged at all: the queries may all answer while no
        scrape interval is known, and then every verdict is unknown with nothing else moving."""
        if evidence.targets_error is not None:
            self.targets_failures.inc()
        self.intervals_unknown.set(1 if evidence.intervals_unknown else 0)

    def observe_lifecycle(self, changes: Sequence[Any], sent: Sequence[Any], failed: Sequence[str],
                          marked: Mapping[str, int]) -> None:
        """`changes` are decide.lifecycle.Change, `sent` act.slack.SendResult; `marked` counts the
        marks per policy the cycle started with."""
        for change in changes:
            self.lifecycle_steps.labels(step=str(change.step), policy=change.policy).inc()
        self.marked.clear()
        for policy, n in marked.items():
            self.marked.labels(policy=policy).set(n)
        for result in sent:
            to = "admins" if result.delivery is not None and result.delivery.to_admins else "owner"
            self.messages.labels(result="delivered" if result.delivery else "failed", to=to).inc()
            if result.delivery is None:
                self.errors.labels(source="slack").inc()
        self.lifecycle_write_failures.inc(len(failed))
        self.errors.labels(source="kubernetes").inc(len(failed))

    def observe_plan(self, plan: CyclePlan, *, objects: int, skipped_kinds: Sequence[SkippedKind], tripped: bool,
                     skew: float | None) -> None:
        for held in plan.held:
            self.held.labels(reason=str(held.reason)).inc()
        self.objects.set(objects)
        self.skipped_kinds.clear()
        for skipped in skipped_kinds:
            self.skipped_kinds.labels(kind=skipped.kind, reason=str(skipped.cause)).set(1)
        for reason in PAUSES:
            self.paused.labels(reason=str(reason)).set(1 if plan.paused is reason else 0)
        self.sight_lost.set(0 if plan.blind is None else 1)
        self.kube_janitor.set(len(plan.beside))
        self.tripped.set(1 if tripped else 0)
        if skew is not None:
            self.skew.set(skew)

    def count(self, action: Action, outcome: str) -> None:
        self.actions.labels(action=str(action.type), rule=action.rule, policy=action.policy, outcome=outcome).inc()


def counts(registry: CollectorRegistry) -> Mapping[str, float]:
    """Sample name -> value, for the end-of-cycle summary line and tests."""
    return {
        f"{s.name}{json.dumps(s.labels, sort_keys=True) if s.labels else ''}": s.value
        for metric in registry.collect() for s in metric.samples
    }
