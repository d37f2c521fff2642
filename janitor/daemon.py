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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.blocking import BlockingScheduler
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from janitor import cycle, endpoints, errors, heap, kubeapi
from janitor.act import kube
from janitor.act.slack_inbound import HttpReceiver, SocketReceiver
from janitor.clicks import Clicks
from janitor.cycle import CycleResult, Memory, Ports
from janitor.decide import neighbours, selection
from janitor.decide.model import ObjectRef
from janitor.decide.rails import is_tripped
from janitor.leader import LeaseElector
from janitor.observe.cache import ClusterCache, NotSynced
from janitor.observe.carry import BusyCarry, Full
from janitor.observe.kind_status import KindStatus
from janitor.policy.model import Policy
from janitor.settings import Settings
from janitor.telemetry import GPU_HOUR, Telemetry

logger = logging.getLogger(__name__)


def record(telemetry: Telemetry, result: CycleResult) -> None:
    """The metrics of one finished cycle, from its result."""
    planned, decided = result.planned, result.plan
    seen = planned.observation
    if planned.policies_reloaded is not None:
        telemetry.policy_reloads.labels(result="success" if planned.policies_reloaded else "error").inc()
        telemetry.policies_broken.set(0 if planned.policies_reloaded else 1)
    telemetry.policies_loaded.set(0 if planned.memory.policies is None else 1)
    telemetry.observe_plan(decided, objects=len(seen.objects), skipped_kinds=seen.skipped_kinds,
                           tripped=is_tripped(decided.ledger), skew=decided.skew_seconds)
    telemetry.observe_intervals(seen.evidence)
    if planned.policies:
        telemetry.observe_idle(decided.findings, len(decided.evidence_failures) + len(seen.evidence.exporting_failures),
                               [p.node or "" for p in decided.silent_gpu_pods])
    if result.ledger_contended:
        telemetry.ledger_contended.inc()
    for r in result.results:
        telemetry.count(r.action, str(r.outcome))
        change = decided.change_for(r.action)
        if r.outcome is kube.Outcome.DONE and change is not None and change.notice is not None:
            telemetry.reclaimed_gpus.labels(policy=change.policy, action=str(r.action.type)).inc(change.notice.gpus)
            telemetry.reclaimed_gpu_seconds.labels(policy=change.policy, namespace=change.workload.namespace or "").inc(
                change.gpu_hours * GPU_HOUR)
    if result.lifecycle is not None:
        marked = selection.marks_per_policy(seen)
        telemetry.observe_lifecycle(decided.changes, result.lifecycle.sent, result.lifecycle.failed, marked)
    for q in result.queries:
        telemetry.prometheus_seconds.labels(api=q.api).observe(q.seconds)
        telemetry.prometheus_bytes.labels(api=q.api).inc(q.bytes)
    phases = result.phases
    for phase, seconds in (("observe", phases.observe), ("decide", phases.decide), ("act", phases.act)):
        telemetry.phase_seconds.labels(phase=phase).observe(seconds)
    telemetry.decide_cpu.inc(phases.decide_cpu)
    telemetry.cycle_seconds.observe(result.seconds)
    telemetry.cycles.labels(result="success").inc()
    telemetry.last_success.set(time.time())


def serve_health_and_metrics(registry: CollectorRegistry, port: int, health: Callable[[], tuple[bool, str]],
                             ready: Callable[[], tuple[bool, str]] | None = None) -> threading.Thread:
    """/metrics (Prometheus), /healthz (200 while cycles succeed) and /readyz (200 once the first
    cycle, or the first stand-by check, is done) on one port."""
    return endpoints.serve(registry, port, {"/healthz": health, "/readyz": ready or health})


STOP_GRACE = 10.0  # seconds SIGTERM waits for the request in flight before the process exits anyway
_WATCH_EVERY = 0.2  # seconds between looks at a running cycle
_MAX_ABANDONED = 2  # abandoned cycles still waiting on a request; no new cycle starts beyond these


class _Cycles:
    """Runs each cycle on its own thread under a time budget.

    Every request has a timeout, but a cycle of many slow requests can still run far past its
    interval. One past its budget is abandoned: its fence closes, so it writes nothing more even
    when its request returns; it is counted; /healthz fails until a cycle succeeds again; and a
    leader steps down, so a standby that can reach the apiserver takes over."""

    def __init__(self, ports: Ports, settings: Settings, telemetry: Telemetry, elector: LeaseElector | None) -> None:
        self.ports, self.settings, self.telemetry, self.elector = ports, settings, telemetry, elector
        self.memory = Memory()
        self.stopping = threading.Event()
        self.last_error = ""
        self.abandoned_last = False  # the last cycle ran past its budget: unhealthy until one succeeds
        self.last_success = 0.0
        self.ready = False
        self.beside: tuple[ObjectRef, ...] = ()  # where kube-janitor runs, as the last cycle saw
        self.abandoned: list[threading.Thread] = []
        self.running: threading.Thread | None = None
        self.slack_error = ""
        self.intervals_notice: str | None = None  # the last cycle's evidence had no scrape intervals: why
        self.unsynced_said: frozenset[str] = frozenset()  # the kinds not synced the last skipped cycle named
        self.heap = heap.Heap()  # what lives on after a cycle, frozen out of the collector's walk
        telemetry.heap_frozen.set_function(heap.Heap.frozen)

    def check_slack(self) -> None:
        """At start, and every cycle while it fails: does Slack take the token?"""
        if self.ports.slack is None:
            return
        self.slack_error = self.ports.slack.check_token()
        self.telemetry.slack_token_valid.set(0 if self.slack_error else 1)
        if self.slack_error:
            logger.error("Slack does not accept the bot token (%s): no warning can be sent, so nothing is "
                         "reclaimed until it does", self.slack_error)

    def fence(self, cancelled: threading.Event) -> Callable[[], bool]:
        elector = self.elector
        return lambda: not cancelled.is_set() and (elector is None or elector.is_leader())

    def job(self) -> None:
        if self.elector is not None and not self.elector.is_leader():
            # What this replica saw of claims while it led says nothing of the time since: its count
            # starts again if it leads again (decide.claims.seen_since).
            self.memory = replace(self.memory, claims_seen={})
            self.telemetry.leader.set(0)
            self.ready = True
            self.heap.settle()  # the collector on, whatever an abandoned cycle's own pause left
            return
        self.abandoned = [t for t in self.abandoned if t.is_alive()]
        if len(self.abandoned) >= _MAX_ABANDONED:
            logger.error("%d abandoned cycles still wait on their requests; not starting another",
                         len(self.abandoned))
            self.heap.settle()
            return
        self.telemetry.leader.set(1)  # this replica acts (the only one without an elector)
        if self.slack_error:
            self.check_slack()
        cancelled, done = threading.Event(), threading.Event()
        outcome: dict[str, object] = {}
        ports = replace(self.ports, fence=self.fence(cancelled))

        def work() -> None:
            try:
                outcome["result"] = cycle.run_cycle(ports, self.settings, self.memory)
            except Exception as e:  # reported below, on the scheduler's thread
                outcome["error"] = e
            finally:
                done.set()

        thread = threading.Thread(target=work, name="cycle", daemon=True)
        self.running = thread
        began = time.monotonic()
        budget = self.settings.cycle_budget.total_seconds()
        # The collector off while the cycle runs and its result is handled (janitor.heap): a
        # collection would walk the plan and the evidence only to see them freed when it is dropped.
        with self.heap.cycle():
            thread.start()
            while not done.wait(_WATCH_EVERY):
                if self.stopping.is_set() or time.monotonic() - began > budget:
                    break
            if done.is_set():
                self.running = None
                self._finished(outcome)
            else:
                cancelled.set()
                if not self.stopping.is_set():
                    self._abandon(thread, budget)
            outcome.clear()  # the plan and the evidence go now, by reference counting, before the heap settles
        self.heap.settle()

    def _abandon(self, thread: threading.Thread, budget: float) -> None:
        self.abandoned.append(thread)
        self.running = None
        self.telemetry.cycles.labels(result="abandoned").inc()
        self.abandoned_last = True
        self.last_error = f"the last cycle was abandoned after its budget of {budget:g}s (a request without answer?)"
        logger.error("cycle abandoned after %gs: it acts no further; the next starts on schedule", budget)
        if self.elector is not None:
            self.elector.step_down()

    def _finished(self, outcome: dict[str, object]) -> None:
        error = outcome.get("error")
        # While the apiserver does not answer, its Outage says so (once, then every few minutes);
        # each cycle that fails or waits for it says so at DEBUG only.
        outage = getattr(self.ports.api, "outage", None)
        quiet = outage is not None and outage.ongoing
        if isinstance(error, NotSynced):
            self.telemetry.cycles.labels(result="unsynced").inc()
            self.last_error = str(error)
            # Said when the kinds not synced change; the cycles after it skip for the same, at DEBUG
            # (each kind says its own trouble once; /healthz, /readyz and the metrics keep showing it).
            cache = self.ports.cache
            kinds = frozenset(s.key for s in cache.unsynced()) if cache is not None else frozenset()
            said, self.unsynced_said = self.unsynced_said == kinds, kinds
            logger.log(logging.DEBUG if quiet or said else logging.WARNING, "cycle skipped, nothing done: %s", error)
        elif isinstance(error, Exception):
            self.memory = replace(self.memory, claims_seen={})  # a cycle that failed saw nothing
            self.telemetry.cycles.labels(result="error").inc()
            self.telemetry.errors.labels(source=error_source(error)).inc()
            self.last_error = f"{type(error).__name__}: {error}"
            if kubeapi.no_answer(error):
                logger.log(logging.DEBUG if quiet else logging.ERROR, "cycle failed, nothing done: %s", error)
            else:
                logger.error("cycle failed", exc_info=error)
        else:
            result = outcome["result"]
            assert isinstance(result, CycleResult)
            self.memory = result.memory
            record(self.telemetry, result)
            beside = result.plan.beside
            if beside and not self.beside:
                logger.warning(neighbours.beside_line(beside))
            self.beside = beside
            self.intervals_notice = result.planned.observation.evidence.intervals_notice
            self.last_success = time.time()
            self.last_error = ""
            self.abandoned_last = False
            self.unsynced_said = frozenset()
        self.ready = True

    def health(self) -> tuple[bool, str]:
        age = time.time() - self.last_success
        interval = self.settings.interval.total_seconds()
        if self.abandoned_last:
            return False, self.last_error
        if self.elector is not None and not self.elector.is_leader():
            return True, "ok, standing by (another replica holds the lease)"
        # Read live, not from the last cycle: a kind that cannot sync shows within one --kube-timeout,
        # whether a cycle has ended meanwhile or not.
        failing = self.ports.cache.failing() if self.ports.cache is not None else []
        stale = not self.last_success or age > 3 * interval
        if failing:
            said = unsynced_words(failing)
            return (False, said) if stale else (True, f"ok, last success {age:.0f}s ago; {said}")
        if self.last_error and age > 3 * interval:
            return False, f"last cycle failed: {self.last_error}"
        return True, f"ok, last success {age:.0f}s ago" if self.last_success else "ok, starting"

    def readiness(self) -> tuple[bool, str]:
        if self.slack_error:
            return False, f"Slack does not accept the bot token: {self.slack_error}"
        cache = self.ports.cache
        if not self.ready:
            failing = cache.failing() if cache is not None else []
            return False, unsynced_words(failing) if failing else "first cycle not done yet"
        unsynced = cache.unsynced() if cache is not None else []
        if unsynced:
            return False, unsynced_words(unsynced)
        standing_by = self.elector is not None and not self.elector.is_leader()
        if self.memory.policies is None and not standing_by:
            errors_now = "; ".join(self.memory.policy_errors) or "not read yet"
            return False, f"no valid policy set read yet, so acting on nothing: {errors_now}"
        # Ready all the same: each says so where an admin looks.
        details = [neighbours.beside_line(self.beside)] if self.beside else []
        details += [self.intervals_notice] if self.intervals_notice else []
        return True, "; ".join(["ready", *details])

    def stop(self) -> None:
        """Close every fence, then give the request in flight STOP_GRACE to return."""
        self.stopping.set()
        running = self.running
        if running is not None and running.is_alive():
            running.join(STOP_GRACE)
            if running.is_alive():
                logger.warning("stopping with a cycle still waiting on a request; it writes nothing more")


def run_forever(ports: Ports, settings: Settings, telemetry: Telemetry, *, metrics_port: int | None,
                elector: LeaseElector | None = None) -> None:
    """Run a cycle every interval: never two at once, late runs coalesced, misfires logged.

    With an `elector`, only the replica holding the lease runs cycles, and every write is fenced
    on it; the other stands by, ready and healthy, and takes over when the lease is free."""
    cycles = _Cycles(ports, settings, telemetry, elector)
    cycles.check_slack()
    if elector is not None:
        elector.on_change = lambda held: telemetry.leader.set(1 if held else 0)
        elector.start()

    def on_event(event: JobExecutionEvent) -> None:
        if event.code == EVENT_JOB_MISSED:
            logger.warning("a cycle was missed (the previous one ran late); the next runs as soon as possible")

    if ports.cache is not None:
        telemetry.registry.register(CacheCollector(ports.cache))
    if ports.busy is not None:
        telemetry.registry.register(CarryCollector(ports.busy))
    if metrics_port is not None:
        serve_health_and_metrics(telemetry.registry, metrics_port, cycles.health, cycles.readiness)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per run (and per job added) is noise
    scheduler = BlockingScheduler(timezone=datetime.timezone.utc)
    scheduler.add_listener(on_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    scheduler.add_job(cycles.job, "interval", seconds=settings.interval.total_seconds(), next_run_time=cycle.utc_now(),
                      max_instances=1, coalesce=True, misfire_grace_time=None, id="cycle")

    receivers = _receivers(ports, settings, telemetry, lambda: cycles.memory.policies or (),
                           wake=lambda: scheduler.modify_job("cycle", next_run_time=cycle.utc_now()))

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    # SIGTERM (a pod being stopped) ends like Ctrl-C: the running cycle's fence closes, so it starts
    # no further write; the write in flight gets STOP_GRACE to finish (no deletion is cut off
    # between its Event and its DELETE unless its request hangs); then the lease is handed back.
    signal.signal(signal.SIGTERM, stop)
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        logger.info("stopping: the running cycle writes nothing more")
        cycles.stop()
        scheduler.shutdown(wait=True)
    finally:
        for receiver in receivers:
            receiver.stop()
        if elector is not None:
            elector.stop(release=True)
        if ports.cache is not None:
            ports.cache.stop()


def _receivers(ports: Ports, settings: Settings, telemetry: Telemetry, policies: Callable[[], Sequence[Policy]],
               wake: Callable[[], None]) -> list[SocketReceiver | HttpReceiver]:
    """The buttons' way in: Socket Mode with an app token, the signed HTTP endpoint with a port and
    a signing secret; none without a bot token (nothing could answer a click)."""
    s = settings.slack
    if ports.slack is None or not (s.app_token or s.http_port):
        return []
    clicks = Clicks(ports.api, ports.slack, settings, policies, telemetry, wake)
    started: list[SocketReceiver | HttpReceiver] = []
    if s.app_token:
        socket = SocketReceiver(s.app_token, clicks.handle, base_url=s.api_url, timeout=s.timeout.total_seconds())
        # Exported only with an app token, so its alert never fires where buttons are not set up.
        connected = Gauge("janitor_slack_socket_connected", "1 while the Socket Mode connection for the buttons is "
                          "up", registry=telemetry.registry)
        connected.set_function(lambda: 1.0 if socket.connected() else 0.0)
        started.append(socket)
    if s.http_port:
        if not s.signing_secret_file:
            logger.error("--slack-http-port without --slack-signing-secret-file: no HTTP endpoint (every request "
                         "must be verified)")
        else:
            with open(s.signing_secret_file) as f:
                secret = f.read().strip()
            started.append(HttpReceiver(secret, clicks.handle, clicks.refused, port=s.http_port))
    for receiver in started:
        receiver.start()
    logger.info("Slack buttons: %s", ", ".join(type(r).__name__ for r in started) or "none")
    return started


class CacheCollector(Collector):
    """The watch cache's state, read at each scrape: synced and objects kept per kind, and the
    lists, 410s, re-opened watches and failed requests since start."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        statuses = self.cache.status()
        synced = GaugeMetricFamily("janitor_watch_cache_synced", "1 while the kind is listed and its watch "
                                   "connected (a polled kind: its last list is fresh); 0: cycles do nothing",
                                   labels=["kind"])
        objects = GaugeMetricFamily("janitor_watch_cache_objects", "Objects kept, by kind", labels=["kind"])
        lists = CounterMetricFamily("janitor_watch_cache_lists", "Complete lists, by kind and why (first: at "
                                    "start or when added; expired: the apiserver answered 410; refresh: a polled "
                                    "kind, nodes, listed again)", labels=["kind", "why"])
        reopened = CounterMetricFamily("janitor_watch_cache_watches_reopened", "Watches opened again from their "
                                       "resourceVersion (server timeout, silence, reset)", labels=["kind"])
        failures = CounterMetricFamily("janitor_watch_cache_failures", "Requests of the watch cache that failed",
                                       labels=["kind"])
        for s in statuses:
            synced.add_metric([s.key], 1 if s.synced else 0)
            objects.add_metric([s.key], s.objects)
            lists.add_metric([s.key, "expired"], s.expired)
            lists.add_metric([s.key, "first"], s.lists - s.expired - s.refreshed)
            lists.add_metric([s.key, "refresh"], s.refreshed)
            reopened.add_metric([s.key], s.reopened)
            failures.add_metric([s.key], s.failures)
        yield from (synced, objects, lists, reopened, failures)


class CarryCollector(Collector):
    """What the carried busy verdicts spared Prometheus (janitor.observe.carry), read at each scrape:
    the pods the last cycle carried busy and read whole, and the cycles that read everything whole."""

    def __init__(self, carry: BusyCarry) -> None:
        self.carry = carry

    def collect(self) -> Iterator[Metric]:
        stats = self.carry.stats
        carried = GaugeMetricFamily("janitor_usage_pods_carried", "Pods (per usage query) the last cycle carried "
                                    "busy from earlier cycles instead of reading their whole window")
        whole = GaugeMetricFamily("janitor_usage_pods_read_whole", "Pods (per usage query) whose whole window the "
                                  "last cycle read")
        reads = CounterMetricFamily("janitor_usage_whole_reads", "Cycles that read every pod's whole window, carrying "
                                    "nothing, by why (start, pause, prometheus-restart, prometheus-start-unknown, "
                                    "unreadable)", labels=["why"])
        carried.add_metric([], stats.carried)
        whole.add_metric([], stats.read_whole)
        for why in Full:
            reads.add_metric([str(why)], self.carry.full_reads.get(why, 0))
        yield from (carried, whole, reads)


def unsynced_words(kinds: Sequence[KindStatus]) -> str:
    """What /healthz and /readyz say of kinds not synced: each with its state and why."""
    return "watch cache not synced, so cycles do nothing: " + ", ".join(str(s) for s in kinds)


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
