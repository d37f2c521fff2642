"""One cycle, read top-down: observe, plan, apply. A value goes in, a value comes out.

    observation = observe.read(...)          # each kind listed once, the evidence queried once
    plan        = decide.plan(observation, policies, ledger, now)    # pure
    result      = apply(plan)                # each action re-checked on a fresh scoped read first

The result is what the CLI prints, the metrics count and the logs summarise; `Memory` is the
little a cycle leaves for the next (the last good policies, when the admins' report was sent).
The daemon only schedules cycles, holds the lease and serves the HTTP endpoints.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kubernetes.client import ApiClient

from janitor import annotations as ann
from janitor import fresh_look, heap
from janitor.act import holder_notices, kube
from janitor.act.executor import Executor, Fresh
from janitor.act.ledger_writer import LedgerWriter
from janitor.act.lifecycle import LifecycleOutcome, LifecycleRun, UnknownKind
from janitor.act.notes import DATA_KEY as NOTES_KEY
from janitor.act.notes import NoteBox
from janitor.act.slack import Digest, Slack
from janitor.act.slack_messages import MessageContext, render_admin_report
from janitor.decide import recheck, sight
from janitor.decide.claims import State as ClaimState
from janitor.decide.claims import named_by, seen_since
from janitor.decide.lifecycle import Change, Step
from janitor.decide.model import (
    Action,
    ActionType,
    ObjectRef,
    ObjectView,
    Observation,
    ResourceKind,
    SafetyLedger,
)
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.plan import CyclePlan, plan
from janitor.decide.selection import carries_mark, pod_as_object
from janitor.decide.triggers import registry
from janitor.observe import cluster, observation, scoped
from janitor.observe.cache import ClusterCache
from janitor.observe.carry import BusyCarry
from janitor.observe.prometheus import PrometheusSource, QueryStat
from janitor.policy import load
from janitor.policy.model import Policy
from janitor.settings import Settings
from janitor.telemetry import audit, log_verdicts

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass
class Ports:
    """The outside world a cycle talks to."""

    api: ApiClient
    slack: Slack | None = None
    fence: Callable[[], bool] = lambda: True  # with leader election: do we still hold the lease?
    clock: Clock = utc_now
    cache: ClusterCache | None = None  # the daemon's watch cache; None: each cycle lists every kind
    busy: BusyCarry | None = None  # the daemon's busy verdicts carried between cycles; None: every read whole


@dataclass(frozen=True)
class Memory:
    """What one cycle leaves for the next."""

    policies: tuple[Policy, ...] | None = None  # the last good policies; None: never loaded
    policy_errors: tuple[str, ...] = ()  # the policy files' errors now (the last good set is in use)
    admin_sent: tuple[str, datetime.datetime] | None = None  # the admins' report last sent: its key and when
    notices: frozenset[str] = frozenset()  # said last cycle (said again at debug level only)
    verdicts: Mapping[tuple[str, str, str], str] | None = None  # (policy, trigger, uid) -> verdict last cycle
    # DRA claims holding devices with no live consumer: since when each was seen so (decide.claims)
    claims_seen: Mapping[str, tuple[ClaimState, datetime.datetime]] = field(default_factory=dict)


@dataclass(frozen=True)
class Phases:
    """Where a cycle's time went, wall seconds per phase, and the CPU seconds of deciding (the one
    phase that is all computation): at scale an SRE must see which phase grows."""

    observe: float = 0.0
    decide: float = 0.0
    act: float = 0.0
    decide_cpu: float = 0.0


@dataclass(frozen=True)
class Planned:
    observation: Observation
    plan: CyclePlan
    policies: tuple[Policy, ...]
    memory: Memory
    policies_reloaded: bool | None = None  # True/False: the files were read, and were (not) good
    phases: Phases = Phases()
    ledger_read: SafetyLedger | None = None  # the ledger as this cycle read it: writes go only over it

    @functools.cached_property
    def objects_by_uid(self) -> dict[str, ObjectView]:
        """The objects the plan was made on, with the marked pods not listed among them: with Pod not
        in `--kinds`, a bare pod is still a workload the lifecycle marks and deletes, and its "done"
        note names its mark. DRA claims the lifecycle looked at are among them too."""
        listed = {o.ref.uid: o for o in (*self.observation.objects,
                                         *registry.objects(self.observation, self.policies))}
        return {**{p.ref.uid: pod_as_object(p) for p in self.observation.pods
                   if p.ref.uid not in listed and carries_mark(p.annotations)}, **listed}


@dataclass
class CycleResult:
    planned: Planned
    results: list[kube.ActionResult] = field(default_factory=list)
    lifecycle: LifecycleOutcome | None = None
    memory: Memory = field(default_factory=Memory)
    seconds: float = 0.0
    queries: tuple[QueryStat, ...] = ()  # the requests to Prometheus this cycle made
    act_seconds: float = 0.0
    rechecked: dict[tuple[str, ActionType, str], Change] = field(default_factory=dict)  # as the re-check decided
    ledger_contended: bool = False  # another janitor wrote the ledger during this cycle: it deleted no more

    @property
    def phases(self) -> Phases:
        return replace(self.planned.phases, act=self.act_seconds)

    @property
    def plan(self) -> CyclePlan:
        return self.planned.plan

    def deleted(self) -> list[Action]:
        return [r.action for r in self.results if r.action.type.deletes and r.outcome is kube.Outcome.DONE]

    def outcomes(self) -> dict[str, int]:
        return dict(Counter(f"{r.action.type}:{r.outcome}" for r in self.results))


def load_policies(settings: Settings, memory: Memory) -> tuple[Memory, bool | None]:
    """Read the policy files again; a broken file keeps the last good set (and says so)."""
    if not settings.policy_paths:
        return replace(memory, policies=(), policy_errors=()), None
    loaded = load.from_paths(settings.policy_paths)
    errors_now = tuple(str(e) for e in loaded.errors)
    for error in errors_now:
        logger.error("policy file error, keeping the last good policies: %s", error)
    if loaded.errors:
        return replace(memory, policy_errors=errors_now), False
    return replace(memory, policies=loaded.policies, policy_errors=()), True


@contextlib.contextmanager
def prometheus(settings: Settings, policies: Sequence[Policy]) -> Iterator[PrometheusSource | None]:
    need = observation.needs(policies)
    if not need.prometheus:
        yield None
        return
    try:
        opened = observation.prometheus_source(settings)
    except ValueError as e:  # no URL, an unreadable credentials file: every idle verdict is unknown
        logger.error("Prometheus cannot be queried this cycle, so nothing is judged idle: %s", e)
        yield None
        return
    with opened as source:
        yield source


def observe_and_plan(ports: Ports, settings: Settings, memory: Memory, *, source: PrometheusSource | None = None,
                     progress: observation.Progress | None = None, reloaded: bool | None = None) -> Planned:
    """Observe and decide with the policies in `memory`, changing nothing."""
    policies = memory.policies or ()
    now = ports.clock()
    c = settings.cluster
    began = time.monotonic()
    if ports.cache is not None:
        ledger, at = cluster.read_ledger_at(ports.api, c.state_namespace, c.state_name)
        seen = observation.read_cached(ports.cache, settings, policies, at or cluster.server_date(ports.api), now,
                                       source=source, first_sync=settings.cycle_budget.total_seconds() / 2,
                                       carry=ports.busy)
    else:
        seen = observation.read(ports.api, settings, policies, now, source=source, progress=progress)
        ledger = cluster.read_ledger(ports.api, c.state_namespace, c.state_name)
    claims_seen = claims_memory(seen, memory.claims_seen, now)
    if seen.claims is not None:
        seen = replace(seen, claims=replace(seen.claims, seen=claims_seen))
    observed, cpu = time.monotonic(), time.thread_time()
    # Python's cyclic collector off while planning: a plan of 50,000 pods makes ~300,000 small acyclic
    # values (reference counting frees them), and the collections they trigger walk the whole
    # observation, about a third of the plan's time (bench/plan_scale.py). In the daemon it is off
    # for the whole cycle already (janitor.heap).
    with heap.collector_paused():
        decided = plan(seen, policies, ledger, now, settings=settings.plan())
    phases = Phases(observed - began, time.monotonic() - observed, decide_cpu=time.thread_time() - cpu)
    verdicts = log_verdicts(decided.findings, memory.verdicts)
    return Planned(seen, decided, policies, replace(memory, verdicts=verdicts, claims_seen=claims_seen), reloaded,
                   phases, ledger)


class _Annotator:
    """The lifecycle's writes, on the apiserver (act.kube), with the re-read a conflict needs (observe)."""

    def __init__(self, api: ApiClient, kinds: Mapping[str, ResourceKind]) -> None:
        self.api, self.kinds = api, kinds

    def annotate(self, ref: ObjectRef, resource_version: str, notes: Mapping[str, str | None], *,
                 event: tuple[str, str] | None = None) -> str:
        return kube.annotate(self.api, ref, resource_version, notes, kind=self.kinds[ref.kind], event=event)

    def read(self, ref: ObjectRef) -> ObjectView | None:
        kind = self.kinds.get(ref.kind)
        if kind is None:  # a note kept while its kind was among --kinds
            raise UnknownKind(ref.kind)
        return cluster.read_object(self.api, ref, kind)


def claims_memory(seen: Observation, before: Mapping[str, tuple[ClaimState, datetime.datetime]],
                  now: datetime.datetime) -> dict[str, tuple[ClaimState, datetime.datetime]]:
    """Since when each DRA claim has been seen holding devices with no consumer, after this cycle's
    read (`decide.claims.seen_since`). Blind (pods or namespaces unread), nothing is seen of what uses
    a claim: every count starts again."""
    if sight.lost(seen) is not None:
        return {}
    return seen_since(seen.claims, before, seen.at or now, named=named_by(seen.pods))


def kinds(settings: Settings) -> dict[str, ResourceKind]:
    """The kinds the janitor reads and writes, by name: those of `--kinds`, pods, namespaces, and DRA
    ResourceClaims at v1 (objects of a cycle only where an orphanedClaim policy judges them)."""
    from janitor.observe import claims, views

    return {k.kind: k for k in (views.PODS, views.NAMESPACES, claims.CLAIMS, *settings.cluster.kinds)}


class _StateLedger:
    """The ledger in the state ConfigMap, for `LedgerWriter`: read with its version, written over it only."""

    def __init__(self, api: ApiClient, settings: Settings) -> None:
        self.api, self.namespace, self.name = api, settings.cluster.state_namespace, settings.cluster.state_name

    def read(self) -> tuple[SafetyLedger, str | None]:
        return cluster.read_ledger_versioned(self.api, self.namespace, self.name)

    def write(self, ledger: SafetyLedger, version: str | None) -> None:
        kube.write_ledger(self.api, self.namespace, self.name, ledger, version, exclusive=True)


class _StateFile:
    """One data key of the state ConfigMap: read with its version, written over it only."""

    def __init__(self, api: ApiClient, settings: Settings, key: str, what: str) -> None:
        self.api, self.key, self.what = api, key, what
        self.namespace, self.name = settings.cluster.state_namespace, settings.cluster.state_name

    def read(self) -> tuple[str | None, str | None]:
        return cluster.read_state_versioned(self.api, self.namespace, self.name, self.key)

    def write(self, text: str, version: str | None) -> str | None:
        return kube.write_state(self.api, self.namespace, self.name, {self.key: text}, what=self.what,
                                resource_version=version, exclusive=True)


def note_box(api: ApiClient, settings: Settings, *, fence: Callable[[], bool] = lambda: True) -> NoteBox:
    """The notes waiting in the state ConfigMap (act.notes), read now; `fence` guards every write."""
    c = settings.cluster
    return NoteBox(_StateFile(api, settings, NOTES_KEY, "notes"), fence=fence,
                   where=f"ConfigMap {c.state_namespace}/{c.state_name}", context=_context(settings))


def _context(settings: Settings) -> MessageContext:
    """What every message to an owner names besides its notices: the cluster, where to ask, the guide."""
    s = settings.slack
    return MessageContext(s.cluster_name, s.admin_channel, s.guide_url,
                          buttons=bool(s.app_token or (s.http_port and s.signing_secret_file)))


def _executor(ports: Ports, settings: Settings, planned: Planned, notes: NoteBox | None,
              source: PrometheusSource | None) -> Executor:
    """The write order (act.executor) over the real ports: the re-check reads fresh (observe), the
    ledger and the writes go to the apiserver (act.kube)."""
    by_kind, dry_run = kinds(settings), settings.rails.dry_run
    elsewhere = fresh_look.Beyond(ports, settings, planned)

    def still_due(action: Action) -> Fresh:
        fresh = scoped.read_scoped(ports.api, settings, planned.policies, action, ports.clock(), source=source,
                                   claims_seen=planned.memory.claims_seen,
                                   elsewhere=elsewhere)
        return Fresh(recheck.still_due(action, fresh, planned.policies, ports.clock(), settings.plan()),
                     gone=fresh is None)

    def apply_one(action: Action) -> kube.ActionResult:
        return kube.apply(ports.api, action, kind=by_kind[action.target.kind], dry_run=dry_run, fence=ports.fence)

    ledger = LedgerWriter(_StateLedger(ports.api, settings), planned.plan.ledger, planned.ledger_read,
                          clock=ports.clock, fence=ports.fence, dry_run=dry_run)
    return Executor(planned.plan, planned.objects_by_uid, still_due, apply_one, ledger, notes, ports.clock,
                    ports.fence, dry_run)


def apply(ports: Ports, settings: Settings, planned: Planned, *, source: PrometheusSource | None = None) -> CycleResult:
    """Apply a plan: every action re-checked and recorded in the ledger first; then the lifecycle's
    writes and messages."""
    began = time.monotonic()
    result = _apply(ports, settings, planned, source)
    result.act_seconds = time.monotonic() - began
    return result


def _apply(ports: Ports, settings: Settings, planned: Planned, source: PrometheusSource | None) -> CycleResult:
    decided, dry_run = planned.plan, settings.rails.dry_run
    result = CycleResult(planned, memory=planned.memory)
    if planned.memory.policies is None:
        logger.error("the policies were never read successfully: acting on nothing, marking, unmarking and "
                     "telling nothing until they are: %s", "; ".join(planned.memory.policy_errors))
        result.memory = replace(result.memory, notices=frozenset(decided.notices))
        return result
    notes = None if dry_run else note_box(ports.api, settings, fence=ports.fence)

    def done(outcome: kube.ActionResult) -> None:
        result.results.append(outcome)
        audit(outcome.action, outcome=str(outcome.outcome), dry_run=dry_run, detail=outcome.detail)

    executor = _executor(ports, settings, planned, notes, source)
    result.rechecked = executor.rechecked
    executor.run(decided.actions, done)  # the ledger stored at the end, whatever happened
    result.ledger_contended = executor.ledger.contended
    _log_plan(ports, settings, decided, result)
    if notes is not None and ports.fence():
        result.lifecycle = _lifecycle(ports, settings, planned, result, notes, source)
        notes.store(ports.clock())
        result.memory = _admin_report(ports, settings, planned, result.memory)
        if planned.plan.holder_notices and ports.slack is not None:
            told, slack = _StateFile(ports.api, settings, holder_notices.DATA_KEY, "told"), ports.slack
            holder_notices.tell(planned.plan.holder_notices, told, slack, ports.clock(), _context(settings),
                                ports.fence, retry=settings.slack.notice_retry,
                                budget=settings.slack.send_budget.total_seconds(),
                                find=lambda owner, sent, since: slack.find_sent(owner, sent, since=since))
    elif dry_run:
        for change in decided.changes:
            if change.step not in (Step.WAIT, Step.ACT):
                logger.info("DRY-RUN lifecycle %s %s: %s", change.step, change.workload, change.why)
    result.memory = replace(result.memory, notices=frozenset(decided.notices))
    return result


def _log_plan(ports: Ports, settings: Settings, decided: CyclePlan, result: CycleResult) -> None:
    for held in decided.held:
        logger.info("held %s: %s", held.action.target, held.why,
                    extra={"object": str(held.action.target), "hold": str(held.reason)})
    for notice in decided.notices:
        # Said once while it lasts (the metrics keep showing it): a cluster without Kubeflow
        # would otherwise log "notebooks not served" every minute.
        level = logging.DEBUG if notice in result.memory.notices else logging.WARNING
        logger.log(level, "%s", notice, extra={"notice": True})
    if decided.tripped_now and not settings.rails.dry_run:  # tell admins once, where they look
        c = settings.cluster
        trip = decided.notices[0]
        kube.announce(ports.api, c.state_namespace, c.state_name, reason="TripwireTripped",
                      message=f"{trip}. Acknowledge with: kubectl -n {c.state_namespace} annotate configmap "
                              f"{c.state_name} {ann.ACKNOWLEDGE_TRIPWIRE}=<now, UTC> --overwrite")
        logger.error("%s", trip, extra={"tripwire": True})


def _lifecycle(ports: Ports, settings: Settings, planned: Planned, result: CycleResult,
               notes: NoteBox, source: PrometheusSource | None = None) -> LifecycleOutcome:
    decided = planned.plan
    done = [c for r in result.results if r.outcome is kube.Outcome.DONE
            for c in [result.rechecked.get(r.action.key) or decided.change_for(r.action)] if c is not None]
    seen = {o.ref.uid: o.annotations for o in planned.observation.objects}
    seen |= {p.ref.uid: p.annotations for p in planned.observation.pods}
    run = LifecycleRun(_Annotator(ports.api, kinds(settings)), ports.slack, {p.name: p for p in planned.policies},
                       decided.now, seen, ports.fence, settings.slack.send_budget, settings.slack.notice_retry,
                       notes=notes, context=_context(settings))
    outcome = run.run(fresh_look.changes(ports, settings, planned, source), done)
    if outcome.written or outcome.sent or outcome.failed or outcome.recovered or outcome.unsent:
        logger.info("lifecycle: %s written, %d digests sent (%d delivered), %d sends found on Slack after a "
                    "restart, %d left for the next cycle, %d writes failed",
                    dict(outcome.written) or "nothing", len(outcome.sent),
                    sum(r.delivery is not None for r in outcome.sent), outcome.recovered, outcome.unsent,
                    len(outcome.failed))
    return outcome


def _admin_report(ports: Ports, settings: Settings, planned: Planned, memory: Memory) -> Memory:
    """One message to the admin channel when its content changed, else at the admin pace."""
    report = planned.plan.admin_report
    if report.empty:
        return memory
    for title, lines in report.sections:
        logger.warning("admin report: %s: %d", title, len(lines), extra={"admin_report": title, "items": lines})
    now = ports.clock()
    due = (memory.admin_sent is None or report.key != memory.admin_sent[0]
           or now - memory.admin_sent[1] >= settings.slack.admin_report_every)
    if not due or ports.slack is None or not settings.slack.admin_channel:
        return memory
    channel = Owner(OwnerKind.CHANNEL, settings.slack.admin_channel, "--admin-channel")
    cluster = _context(settings).cluster_name
    on = f" on {cluster}" if cluster else ""
    messages = render_admin_report(f"GPU janitor{on}: {len(report.sections)} things need an admin", report.sections)
    sent = ports.slack.send(Digest(channel, (), f"admin-{report.key}-{int(time.time())}", tuple(messages)))
    if sent.delivery is None:
        logger.warning("admin report not delivered: %s", sent.error)
        return memory
    return replace(memory, admin_sent=(report.key, now))


def plan_once(ports: Ports, settings: Settings, *, progress: observation.Progress | None = None) -> Planned:
    """What `janitor plan` and `explain` print: the policies read, the cluster observed, the plan made."""
    memory, reloaded = load_policies(settings, Memory())
    with prometheus(settings, memory.policies or ()) as source:
        return observe_and_plan(ports, settings, memory, source=source, progress=progress, reloaded=reloaded)


def run_cycle(ports: Ports, settings: Settings, memory: Memory) -> CycleResult:
    """One whole cycle; its result carries the memory for the next."""
    began = time.monotonic()
    memory, reloaded = load_policies(settings, memory)
    with prometheus(settings, memory.policies or ()) as source:
        planned = observe_and_plan(ports, settings, memory, source=source, reloaded=reloaded)
        result = apply(ports, settings, planned, source=source)
        result.queries = tuple(source.stats) if source is not None else ()
    result.seconds = time.monotonic() - began
    logger.info(
        "cycle done: %d objects, %d deleted, %d held, %d reported",
        len(planned.observation.objects), len(result.deleted()), len(planned.plan.held),
        sum(1 for r in result.results if r.action.type is ActionType.REPORT),
        extra={"summary": result.outcomes(), "dry_run": settings.rails.dry_run, "seconds": round(result.seconds, 2)},
    )
    return result


__all__ = ["Change", "Clock", "CycleResult", "Memory", "Phases", "Planned", "Ports", "apply", "load_policies",
           "note_box", "observe_and_plan", "plan_once", "run_cycle", "utc_now"]
