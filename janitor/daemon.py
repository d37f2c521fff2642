"""The daemon: the schedule that runs cycles, the lease that lets one replica act, and the HTTP
endpoints (/healthz, /readyz, /metrics). What a cycle does is janitor.cycle; this module only
decides when one runs and reports how it went.
"""

from __future__ import annotations

import datetime
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.blocking import BlockingScheduler
from prometheus_client import CollectorRegistry

from janitor import annotations as ann
from janitor import cycle, endpoints, errors
from janitor.act import kube
from janitor.cycle import CycleResult, Memory, Ports
from janitor.decide.rails import is_tripped
from janitor.leader import LeaseElector
from janitor.settings import Settings
from janitor.telemetry import Telemetry

logger = logging.getLogger(__name__)


def record(telemetry: Telemetry, result: CycleResult) -> None:
    """The metrics of one finished cycle, from its result."""
    planned, decided = result.planned, result.plan
    seen = planned.observation
    if planned.policies_reloaded is not None:
        telemetry.policy_reloads.labels(result="success" if planned.policies_reloaded else "error").inc()
        telemetry.policies_broken.set(0 if planned.policies_reloaded else 1)
    telemetry.observe_plan(decided, objects=len(seen.objects), skipped_kinds=len(seen.skipped_kinds),
                           tripped=is_tripped(decided.ledger), skew=decided.skew_seconds)
    if planned.policies:
        telemetry.observe_idle(decided.findings, len(decided.evidence_failures),
                               [p.node or "" for p in decided.silent_gpu_pods])
    for r in result.results:
        telemetry.count(r.action, str(r.outcome))
        change = decided.change_for(r.action)
        if r.outcome is kube.Outcome.DONE and change is not None and change.notice is not None:
            telemetry.reclaimed_gpus.labels(policy=change.policy, action=str(r.action.type)).inc(change.notice.gpus)
            telemetry.reclaimed_gpu_hours.labels(policy=change.policy).inc(change.gpu_hours)
    if result.lifecycle is not None:
        marked = Counter(o.annotations[ann.POLICY] for o in seen.objects if ann.POLICY in o.annotations)
        telemetry.observe_lifecycle(decided.changes, result.lifecycle.sent, result.lifecycle.failed, marked)
    telemetry.cycle_seconds.observe(result.seconds)
    telemetry.cycles.labels(result="success").inc()
    telemetry.last_success.set(time.time())


def serve_health_and_metrics(registry: CollectorRegistry, port: int, health: Callable[[], tuple[bool, str]],
                             ready: Callable[[], tuple[bool, str]] | None = None) -> threading.Thread:
    """/metrics (Prometheus), /healthz (200 while cycles succeed) and /readyz (200 once the first
    cycle, or the first stand-by check, is done) on one port."""
    return endpoints.serve(registry, port, {"/healthz": health, "/readyz": ready or health})


def run_forever(ports: Ports, settings: Settings, telemetry: Telemetry, *, metrics_port: int | None,
                elector: LeaseElector | None = None) -> None:
    """Run a cycle every interval: never two at once, late runs coalesced, misfires logged.

    With an `elector`, only the replica holding the lease runs cycles, and every write is fenced
    on it; the other stands by, ready and healthy, and takes over when the lease is free."""
    state: dict[str, object] = {"last_error": "", "last_success": 0.0, "ready": False}
    memory = Memory()
    interval = settings.interval.total_seconds()
    if elector is not None:
        ports.fence = elector.is_leader
        elector.on_change = lambda held: telemetry.leader.set(1 if held else 0)
        elector.start()

    def job() -> None:
        nonlocal memory
        if elector is not None and not elector.is_leader():
            telemetry.leader.set(0)
            state["ready"] = True
            return
        telemetry.leader.set(1)
        try:
            result = cycle.run_cycle(ports, settings, memory)
            memory = result.memory
            record(telemetry, result)
            state["last_success"] = time.time()
            state["last_error"] = ""
        except Exception as e:
            telemetry.cycles.labels(result="error").inc()
            telemetry.errors.labels(source=error_source(e)).inc()
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
        serve_health_and_metrics(telemetry.registry, metrics_port, health, ready)
    scheduler = BlockingScheduler(timezone=datetime.timezone.utc)
    scheduler.add_listener(on_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    scheduler.add_job(job, "interval", seconds=interval, next_run_time=cycle.utc_now(), max_instances=1,
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
