"""The imperative shell: one cycle (observe, plan, act), and the schedule that repeats it.

A cycle reads the clock once and passes that time down. Before each deletion it re-reads the
object and decides again on the fresh copy: a user may have extended the TTL, or deleted and
recreated the object under the same name, since the snapshot. A conflict on the delete
precondition means exactly that, so it re-reads and re-decides once more.
"""

from __future__ import annotations

import datetime
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from wsgiref.simple_server import WSGIRequestHandler, make_server

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.blocking import BlockingScheduler
from kubernetes import client
from prometheus_client import make_wsgi_app

from janitor import annotations, errors
from janitor.act import kube
from janitor.act.slack import Slack
from janitor.decide import expiry, lifecycle
from janitor.decide.model import Action, ActionType, ObjectView, Plan, ResourceKind
from janitor.decide.plan import gate, plan
from janitor.decide.rails import is_tripped, record_deletions
from janitor.observe import cluster
from janitor import shadow_cycle
from janitor.leader import LeaseElector
from janitor.lifecycle_cycle import LifecycleRunner
from janitor.policy.model import Policy
from janitor.shadow_cycle import ShadowReport
from janitor.settings import Settings
from janitor.telemetry import Telemetry, audit

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass
class CycleResult:
    plan: Plan
    results: list[kube.ActionResult] = field(default_factory=list)

    def deleted(self) -> list[Action]:
        return [r.action for r in self.results
                if r.action.type is not ActionType.REPORT and r.outcome is kube.Outcome.DONE]

    def outcomes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.results:
            key = f"{r.action.type}:{r.outcome}"
            counts[key] = counts.get(key, 0) + 1
        return counts


class Janitor:
    def __init__(self, api: client.ApiClient, settings: Settings, telemetry: Telemetry | None = None,
                 clock: Clock = utc_now) -> None:
        self.api = api
        self.settings = settings
        self.telemetry = telemetry or Telemetry()
        self.clock = clock
        self._kinds = {k.kind: k for k in settings.kinds}
        self._snapshot_by_uid: dict[str, ObjectView] = {}
        self._last_notices: set[str] = set()
        self._policies = None  # janitor.shadow_cycle.PolicySet, made on first use
        self.idle = None  # janitor.shadow_cycle.ShadowReport of the last plan_now, with policies
        self.lifecycle = lifecycle.LifecyclePlan(())
        self._fresh: dict[str, ShadowReport] = {}  # namespace -> a fresh look right before acting there
        self._slack: Slack | None = None
        if settings.slack_token:
            self._slack = Slack.connect(settings.slack_token, base_url=settings.slack_api_url,
                                        admin_channel=settings.admin_channel)
        self._runner = LifecycleRunner(api, settings, self._kinds, self._slack)
        self._admin_sent: tuple[str, float] = ("", 0.0)  # the last admin report sent: its key and when
        # Checked before every write: with leader election, "do we still hold the lease?"
        self.fence: Callable[[], bool] = lambda: True
        self._runner.fence = lambda: self.fence()

    def plan_now(self, progress: Callable[[str, int], None] | None = None) -> tuple[Plan, int]:
        """Observe and decide, changing nothing; also what `janitor plan` prints."""
        local_now = self.clock()
        snapshot = cluster.read_snapshot(self.api, self.settings.kinds, page_size=self.settings.page_size,
                                         progress=progress, namespaces=self.settings.namespaces)
        ledger = cluster.read_ledger(self.api, self.settings.state_namespace, self.settings.state_name)
        self._snapshot_by_uid = {o.ref.uid: o for o in snapshot.objects}
        now = snapshot.apiserver_time or local_now
        self.idle = None
        self.lifecycle = lifecycle.LifecyclePlan(())
        if self.settings.policy_paths:
            self.idle = self._idle_report(now)
            self.lifecycle = lifecycle.plan_lifecycle(self.idle.findings, self._snapshot_by_uid, self.policies, now,
                                                      self.settings.lifecycle, self.idle.namespaces,
                                                      self.settings.owner_keys)
        forced = tuple(s.force for s in (self.idle.stuck if self.idle else ()) if s.force is not None)
        decided = plan(snapshot, ledger, self.settings.rails, local_now=local_now,
                       reclaims=self.lifecycle.reclaims() + forced)
        skew = (local_now - snapshot.apiserver_time).total_seconds() if snapshot.apiserver_time else None
        self.telemetry.observe_plan(decided, objects=len(snapshot.objects),
                                    skipped_kinds=len(snapshot.skipped_kinds),
                                    tripped=is_tripped(decided.ledger), skew=skew)
        return decided, len(snapshot.objects)

    @property
    def policies(self) -> tuple[Policy, ...]:
        return self._policies.policies if self._policies is not None else ()

    @property
    def policy_errors(self) -> tuple[str, ...]:
        return self._policies.errors if self._policies is not None else ()

    def _idle_report(self, now: datetime.datetime, namespaces: tuple[str, ...] | None = None) -> ShadowReport:
        """The idle policies' findings now; with `namespaces`, a fresh look before acting there.

        The cycle's own look re-reads the policy files first (keeping the last good ones when a
        file breaks) and logs and exports the findings."""
        settings = self.settings if namespaces is None else replace(self.settings, namespaces=namespaces)
        if namespaces is None:
            if self._policies is None:
                self._policies = shadow_cycle.PolicySet(self.settings.policy_paths)
            ok = self._policies.reload()
            self.telemetry.policy_reloads.labels(result="success" if ok else "error").inc()
            self.telemetry.policies_broken.set(0 if ok else 1)
            for error in self._policies.errors:
                logger.error("policy file error, keeping the last good policies: %s", error)
        with shadow_cycle.prometheus_source(settings) as source:
            idle = shadow_cycle.idle_report(self.api, settings, self.policies, self.owners(), now, source)
        if namespaces is None:
            self.telemetry.observe_idle(idle.findings, len(idle.evidence_failures), idle.silent_nodes)
            for f in idle.findings:
                logger.info("%s %s %s: %s (%s)", f.mode, f.policy, f.workload or "(unknown workload)", f.idleness,
                            f.why, extra={"shadow": f.mode == "shadow", "policy": f.policy, "trigger": f.trigger,
                                          "verdict": str(f.idleness),
                                          "object": str(f.workload) if f.workload else None,
                                          "would_reclaim_gpu_hours": f.reclaim_gpu_hours})
        return idle

    def owners(self) -> list[ObjectView]:
        """The objects of the last snapshot: the workloads pods resolve to."""
        return list(self._snapshot_by_uid.values())

    def run_cycle(self) -> CycleResult:
        began = time.monotonic()
        decided, objects = self.plan_now()
        result = self.act(decided)
        if self.settings.policy_paths:
            self._run_lifecycle(decided, result)
        self.telemetry.cycle_seconds.observe(time.monotonic() - began)
        self.telemetry.cycles.labels(result="success").inc()
        self.telemetry.last_success.set(time.time())
        logger.info(
            "cycle done: %d objects, %d deleted, %d held, %d reported",
            objects, len(result.deleted()), len(decided.held),
            sum(1 for r in result.results if r.action.type is ActionType.REPORT),
            extra={"summary": result.outcomes(), "dry_run": self.settings.rails.dry_run,
                   "seconds": round(time.monotonic() - began, 2)},
        )
        return result

    def act(self, decided: Plan) -> CycleResult:
        """Apply a plan: every deletion re-checked on a fresh read first; store the ledger.

        The ledger is written even when the cycle breaks off half-way, so that deletions that did
        happen always count against the caps."""
        dry_run = self.settings.rails.dry_run
        result = CycleResult(decided)
        try:
            for action in decided.actions:
                if not self.fence():
                    logger.warning("no longer the leader: stopping before %s; the new leader decides again",
                                   action.target)
                    break
                outcome = self._apply(action, decided.now)
                result.results.append(outcome)
                audit(outcome.action, outcome=str(outcome.outcome), dry_run=dry_run, detail=outcome.detail)
                self.telemetry.count(outcome.action, str(outcome.outcome))
        finally:
            if not dry_run and not decided.ledger.unreadable and self.fence():  # never overwrite what an admin
                # must look at, nor what a new leader wrote
                ledger = record_deletions(decided.ledger, result.deleted(), decided.now)
                kube.write_ledger(self.api, self.settings.state_namespace, self.settings.state_name, ledger)
        for held in decided.held:
            logger.info("held %s: %s", held.action.target, held.why,
                        extra={"object": str(held.action.target), "hold": str(held.reason)})
        for notice in decided.notices:
            # Said once while it lasts (the metrics keep showing it): a cluster without Kubeflow
            # would otherwise log "notebooks not served" every minute.
            level = logging.DEBUG if notice in self._last_notices else logging.WARNING
            logger.log(level, "%s", notice, extra={"notice": True})
        self._last_notices = set(decided.notices)
        if decided.tripped_now and not dry_run:  # tell admins once, where they look
            trip = decided.notices[0]
            kube.announce(self.api, self.settings.state_namespace, self.settings.state_name,
                          reason="TripwireTripped",
                          message=f"{trip}. Acknowledge with: kubectl -n {self.settings.state_namespace} "
                                  f"annotate configmap {self.settings.state_name} "
                                  "janitor/acknowledge-tripwire=<now, UTC> --overwrite")
            logger.error("%s", trip, extra={"tripwire": True})
        return result

    def _apply(self, action: Action, now: datetime.datetime) -> kube.ActionResult:
        """One action; a failed read before a deletion fails that action only, never the rest."""
        kind = self._kinds[action.target.kind]
        if action.rule == lifecycle.RULE:
            return self._reclaim_rechecked(action, kind, now)
        if action.type is ActionType.FORCE_DELETE:
            return self._force_rechecked(action, kind)
        if action.type is not ActionType.DELETE:
            return kube.apply(self.api, action, kind=kind, dry_run=self.settings.rails.dry_run)
        try:
            return self._delete_rechecked(action, kind, now)
        except errors.KubeError as e:
            logger.warning("could not re-read %s before deleting it: %s", action.target, e)
            return kube.ActionResult(action, kube.Outcome.FAILED, f"re-read failed: {e}")

    def _reclaim_rechecked(self, action: Action, kind: ResourceKind, now: datetime.datetime) -> kube.ActionResult:
        """An idle workload's action, decided again on a fresh read of it, its pods and the evidence."""
        try:
            again, why = self._runner.recheck(action, self._fresh_idle, self.policies, self._snapshot_by_uid, now)
        except errors.KubeError as e:
            logger.warning("could not re-read %s before acting on it: %s", action.target, e)
            return kube.ActionResult(action, kube.Outcome.FAILED, f"re-read failed: {e}")
        if again is None:
            logger.info("not acting on %s: %s", action.target, why, extra={"object": str(action.target)})
            return kube.ActionResult(action, kube.Outcome.SKIPPED, why)
        return kube.apply(self.api, again, kind=kind, dry_run=self.settings.rails.dry_run)

    def _fresh_idle(self, namespace: str) -> ShadowReport:
        if namespace not in self._fresh:
            self._fresh[namespace] = self._idle_report(self.clock(), namespaces=(namespace,))
        return self._fresh[namespace]

    def _force_rechecked(self, action: Action, kind: ResourceKind) -> kube.ActionResult:
        """A force delete only if a fresh look (pod, its node, the node agent) still gives the evidence."""
        try:
            fresh = self._fresh_idle(action.target.namespace or "")
        except errors.KubeError as e:
            return kube.ActionResult(action, kube.Outcome.FAILED, f"re-read failed: {e}")
        again = next((s.force for s in fresh.stuck if s.pod.uid == action.target.uid and s.force), None)
        if again is None:
            return kube.ActionResult(action, kube.Outcome.SKIPPED, "no longer stuck, or no longer the evidence")
        return kube.apply(self.api, again, kind=kind, dry_run=self.settings.rails.dry_run)

    def _run_lifecycle(self, decided: Plan, result: CycleResult) -> None:
        if not self.fence():
            logger.warning("no longer the leader: the lifecycle's writes and messages are left to the new leader")
            return
        by_uid = {c.workload.uid: c for c in self.lifecycle.changes if c.step is lifecycle.Step.ACT}
        done = [(by_uid[r.action.target.uid], r) for r in result.results
                if r.action.rule == lifecycle.RULE and r.action.target.uid in by_uid]
        for change, result in done:
            if result.outcome is kube.Outcome.DONE and change.notice is not None and change.action is not None:
                self.telemetry.reclaimed_gpus.labels(policy=change.policy, action=str(change.action.type)).inc(
                    change.notice.gpus)
                self.telemetry.reclaimed_gpu_hours.labels(policy=change.policy).inc(change.gpu_hours)
        outcome = self._runner.run(self.lifecycle, done, self.policies, decided.now,
                                   {uid: o.annotations for uid, o in self._snapshot_by_uid.items()})
        self._fresh.clear()
        marked = Counter(o.annotations[annotations.POLICY] for o in self._snapshot_by_uid.values()
                         if annotations.POLICY in o.annotations)
        self.telemetry.observe_lifecycle(self.lifecycle.changes, outcome.sent, outcome.failed, marked)
        self.last_lifecycle = outcome
        if outcome.written or outcome.sent or outcome.failed or outcome.recovered or outcome.unsent:
            logger.info("lifecycle: %s written, %d digests sent (%d delivered), %d sends found on Slack after a "
                        "restart, %d left for the next cycle, %d writes failed",
                        dict(outcome.written) or "nothing", len(outcome.sent),
                        sum(r.delivery is not None for r in outcome.sent), outcome.recovered, outcome.unsent,
                        len(outcome.failed))
        self._admin_report(decided)

    def _admin_report(self, decided: Plan) -> None:
        """One message to the admin channel when its content changed, else at the admin pace."""
        if self.idle is None:
            return
        from janitor.act.slack import Digest
        from janitor.act.slack_messages import render_admin_report
        from janitor.decide.admin_report import admin_report
        from janitor.decide.owners import Owner, OwnerKind

        tripped = decided.notices[0] if is_tripped(decided.ledger) and decided.notices else None
        report = admin_report(self.idle.stuck, self.idle.findings, self.idle.nodes,
                              self.idle.gpu_pods_without_telemetry, tripped, self.idle.ghost_gpus)
        if report.empty:
            return
        for title, lines in report.sections:
            logger.warning("admin report: %s: %d", title, len(lines), extra={"admin_report": title, "items": lines})
        last_key, last_at = self._admin_sent
        due = report.key != last_key or time.monotonic() - last_at >= self.settings.admin_report_every.total_seconds()
        if not due or self._slack is None or not self.settings.admin_channel or self.settings.rails.dry_run:
            return
        channel = Owner(OwnerKind.CHANNEL, self.settings.admin_channel, "--admin-channel")
        messages = render_admin_report(f"GPU janitor: {len(report.sections)} things need an admin", report.sections)
        result = self._slack.send(Digest(channel, (), f"admin-{report.key}-{int(time.time())}", tuple(messages)))
        self.telemetry.messages.labels(result="delivered" if result.delivery else "failed", to="admins").inc()
        if result.delivery is not None:
            self._admin_sent = (report.key, time.monotonic())
        else:
            logger.warning("admin report not delivered: %s", result.error)

    def _redecide(self, fresh: ObjectView, now: datetime.datetime) -> Action | None:
        """The deletion the rules call for on a freshly read object, if they still do."""
        if gate(fresh, self.settings.rails) is not None:
            return None
        by_uid = {**self._snapshot_by_uid, fresh.ref.uid: fresh}
        for _, action in expiry.evaluate(fresh, now, by_uid):
            if action is not None and action.type is ActionType.DELETE:
                return action
        return None

    def _delete_rechecked(self, action: Action, kind: ResourceKind, now: datetime.datetime) -> kube.ActionResult:
        for _ in range(2):  # the snapshot's read, then once more after a conflict
            fresh = cluster.read_object(self.api, action.target, kind)
            if fresh is None:
                return kube.ActionResult(action, kube.Outcome.GONE, "gone or recreated before deletion")
            again = self._redecide(fresh, now)
            if again is None:
                return kube.ActionResult(action, kube.Outcome.SKIPPED, "no longer due on a fresh read")
            result = kube.apply(self.api, again, kind=kind, dry_run=self.settings.rails.dry_run)
            if result.outcome is not kube.Outcome.CONFLICT:
                return result
            action = again
        return result


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


def serve_health_and_metrics(janitor: Janitor, port: int, health: Callable[[], tuple[bool, str]],
                             ready: Callable[[], tuple[bool, str]] | None = None) -> threading.Thread:
    """/metrics (Prometheus), /healthz (200 while cycles succeed) and /readyz (200 once the first
    cycle, or the first stand-by check, is done) on one port."""
    metrics_app = make_wsgi_app(janitor.telemetry.registry)

    def app(environ, start_response):  # type: ignore[no-untyped-def]
        path = environ.get("PATH_INFO")
        if path in ("/healthz", "/readyz"):
            ok, text = health() if path == "/healthz" or ready is None else ready()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [text.encode()]
        return metrics_app(environ, start_response)

    server = make_server("0.0.0.0", port, app, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    return thread


def run_forever(janitor: Janitor, *, metrics_port: int | None, elector: LeaseElector | None = None) -> None:
    """Run a cycle every interval: never two at once, late runs coalesced, misfires logged.

    With an `elector`, only the replica holding the lease runs cycles, and every write is fenced
    on it; the other stands by, ready and healthy, and takes over when the lease is free."""
    state: dict[str, object] = {"last_error": "", "last_success": 0.0, "ready": False}
    interval = janitor.settings.interval.total_seconds()
    if elector is not None:
        janitor.fence = elector.is_leader
        elector.on_change = lambda held: janitor.telemetry.leader.set(1 if held else 0)
        elector.start()

    def job() -> None:
        if elector is not None and not elector.is_leader():
            janitor.telemetry.leader.set(0)
            state["ready"] = True
            return
        janitor.telemetry.leader.set(1)
        try:
            janitor.run_cycle()
            state["last_success"] = time.time()
            state["last_error"] = ""
        except Exception as e:
            janitor.telemetry.cycles.labels(result="error").inc()
            janitor.telemetry.errors.labels(source=error_source(e)).inc()
            state["last_error"] = f"{type(e).__name__}: {e}"
            logger.exception("cycle failed")
        state["ready"] = True

    def health() -> tuple[bool, str]:
        age = time.time() - float(state["last_success"])  # type: ignore[arg-type]
        if state["last_error"] and age > 3 * interval:
            return False, f"last cycle failed: {state['last_error']}"
        if elector is not None and not elector.is_leader():
            return True, "ok, standing by (another replica holds the lease)"
        return True, f"ok, last success {age:.0f}s ago" if state["last_success"] else "ok, starting"

    def ready() -> tuple[bool, str]:
        return (True, "ready") if state["ready"] else (False, "first cycle not done yet")

    def on_event(event: JobExecutionEvent) -> None:
        if event.code == EVENT_JOB_MISSED:
            logger.warning("a cycle was missed (the previous one ran late); the next runs as soon as possible")

    if metrics_port is not None:
        serve_health_and_metrics(janitor, metrics_port, health, ready)
    scheduler = BlockingScheduler(timezone=datetime.timezone.utc)
    scheduler.add_listener(on_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    scheduler.add_job(job, "interval", seconds=interval, next_run_time=utc_now(), max_instances=1,
                      coalesce=True, misfire_grace_time=None, id="cycle")

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    # SIGTERM (a pod being stopped) ends like Ctrl-C: the running cycle finishes its current
    # action (each is fenced), then the lease is handed back and the process exits; no deletion is
    # cut off between its Event and its DELETE.
    signal.signal(signal.SIGTERM, stop)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per run is noise
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        logger.info("stopping: waiting for the running cycle to finish")
        scheduler.shutdown(wait=True)
    finally:
        if elector is not None:
            elector.stop(release=True)


def error_source(error: BaseException) -> str:
    """Which dependency a failed cycle tripped on, for janitor_errors_total{source}."""
    from janitor.observe.prometheus import PrometheusError

    if isinstance(error, errors.KubeError):
        return "kubernetes"
    if isinstance(error, PrometheusError):
        return "prometheus"
    if type(error).__module__.startswith("slack_sdk"):
        return "slack"
    return "janitor"
