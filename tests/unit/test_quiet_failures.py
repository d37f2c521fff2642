"""Failures that leave the janitor doing less without a word, as its metrics, log and /readyz show them.

Aspects covered:
- a configured kind RBAC forbids is never cleaned: `janitor_kinds_skipped{kind,reason}` names it,
  `reason="forbidden"` apart from a kind the apiserver does not serve; gone once it is listed;
- deletions paused by the clock-skew rail (or an unknown apiserver clock) show in
  `janitor_deletions_paused{reason="clock-skew"}` whether or not a deletion was due;
- a warning or note Slack did not take, a lifecycle write the apiserver refused: counted;
- Prometheus' targets API failing, or answering without scrape intervals (a wrong shape): counted
  in `janitor_prometheus_targets_failures_total`; without --scrape-interval every pod judged on
  Prometheus is unknown, which `janitor_scrape_intervals_unknown` says; the cause is one line, said
  once while it lasts (a plan notice), and /readyz carries it while staying 200.
"""

from __future__ import annotations

import datetime
import logging
from datetime import datetime as DateTime
from typing import Any

import pytest
from factories import NOW, obj
from test_decide_lifecycle import ALICE, NS, policy

from janitor import cycle, errors
from janitor.act.slack import Digest, SendResult
from janitor.act.slack_messages import Message
from janitor.annotations import Delivery
from janitor.cycle import CycleResult, Memory, Planned, Ports
from janitor.daemon import _Cycles, record
from janitor.decide.evidence import Evidence
from janitor.decide.model import NamespaceView, Observation, ResourceKind, SafetyLedger
from janitor.decide.plan import plan
from janitor.decide.rails import Rails
from janitor.observe import cluster, observation, targets
from janitor.observe.prometheus import (
    ErrorKind,
    PrometheusConfig,
    PrometheusError,
    PrometheusSource,
    QueryResult,
    RowSink,
    parse_answer,
)
from janitor.settings import PrometheusSettings, Settings
from janitor.telemetry import Telemetry

S = datetime.timedelta(seconds=1)
DEPLOYMENTS = ResourceKind("apps", "v1", "Deployment", "deployments")
NOTEBOOKS = ResourceKind("kubeflow.org", "v1", "Notebook", "notebooks")
DRY_RUN = Settings(rails=Rails(dry_run=True))  # a cycle that writes nothing


def _recorded(telemetry: Telemetry, seen: Observation, now: DateTime = NOW) -> Planned:
    planned = Planned(seen, plan(seen, (), SafetyLedger(), now), (), Memory(policies=()))
    record(telemetry, CycleResult(planned))
    return planned


def _observation(**fields: Any) -> Observation:
    return Observation(NOW, (obj("cm"),), (), {NS: NamespaceView(NS)}, **fields)


# -- kinds RBAC forbids -------------------------------------------------------------------------------


def test_a_kind_rbac_forbids_is_named_apart_from_one_not_served() -> None:
    forbidden = cluster.skipped(DEPLOYMENTS, errors.Forbidden("deployments.apps is forbidden", status=403))
    unserved = cluster.skipped(NOTEBOOKS, errors.NotFound("the server could not find the requested resource"))
    telemetry = Telemetry()
    _recorded(telemetry, _observation(skipped_kinds=(forbidden, unserved)))
    get = telemetry.registry.get_sample_value
    assert get("janitor_kinds_skipped", {"kind": "Deployment", "reason": "forbidden"}) == 1
    assert get("janitor_kinds_skipped", {"kind": "notebooks.kubeflow.org", "reason": "not-served"}) == 1

    _recorded(telemetry, _observation())  # RBAC fixed: listed again
    assert get("janitor_kinds_skipped", {"kind": "Deployment", "reason": "forbidden"}) is None


# -- deletions paused ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("apiserver", "paused"), [
    (NOW - 2 * datetime.timedelta(minutes=1), 1),  # 120 s off, more than --max-clock-skew's 30 s
    (NOW - 10 * S, 0),
    (None, 1),  # no Date header: its clock is unknown
])
def test_a_clock_skew_pause_shows_with_nothing_due(apiserver: DateTime | None, paused: int) -> None:
    telemetry = Telemetry()
    seen = Observation(apiserver, (obj("cm"),), (), {NS: NamespaceView(NS)})
    planned = _recorded(telemetry, seen)
    assert planned.plan.actions == () and planned.plan.held == ()
    get = telemetry.registry.get_sample_value
    assert get("janitor_deletions_paused", {"reason": "clock-skew"}) == paused
    assert get("janitor_deletions_paused", {"reason": "tripwire"}) == 0
    assert get("janitor_deletions_paused", {"reason": "ledger-unreadable"}) == 0


def test_an_unreadable_ledger_pauses_deletions() -> None:
    telemetry = Telemetry()
    seen = _observation()
    planned = Planned(seen, plan(seen, (), SafetyLedger(unreadable=True), NOW), (), Memory(policies=()))
    record(telemetry, CycleResult(planned))
    assert telemetry.registry.get_sample_value("janitor_deletions_paused", {"reason": "ledger-unreadable"}) == 1


# -- messages and writes -------------------------------------------------------------------------------


def test_a_message_slack_refused_and_a_refused_write_are_counted() -> None:
    digest = Digest(ALICE, (), "intent-1", (Message("warning", ()),))
    telemetry = Telemetry()
    telemetry.observe_lifecycle((), [SendResult(digest, None, "channel_not_found"),
                                     SendResult(digest, Delivery("D0ALICE", "1.0"))],
                                ["mark Job/team-a/train: HTTP 403: forbidden"], {})
    get = telemetry.registry.get_sample_value
    assert get("janitor_slack_messages_total", {"result": "failed", "to": "owner"}) == 1
    assert get("janitor_slack_messages_total", {"result": "delivered", "to": "owner"}) == 1
    assert get("janitor_lifecycle_write_failures_total") == 1


# -- the targets API ----------------------------------------------------------------------------------


class _Prometheus(PrometheusSource):
    """A Prometheus whose targets API answers `targets` (or fails with it) and whose queries find nothing."""

    def __init__(self, targets: list[Any] | PrometheusError) -> None:
        super().__init__(PrometheusConfig(url="http://127.0.0.1:9"))
        self.targets = targets

    def active_targets(self) -> list[Any]:
        if isinstance(self.targets, PrometheusError):
            raise self.targets
        return self.targets

    def instant(self, query: str, at: DateTime, sink: RowSink | None = None) -> QueryResult:
        return parse_answer(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}', query, sink)


NOT_FOUND = PrometheusError(ErrorKind.MALFORMED, "no targets answer: HTTP 404", status=404)
# A Prometheus before 2.37, or a proxy answering for it: targets, but none says its interval.
NO_INTERVALS = [{"labels": {"job": "dcgm-exporter"}, "health": "up"}, {"labels": {"job": "kubelet"}}]


def _evidence(answer: list[Any] | PrometheusError, fallback: datetime.timedelta | None = None) -> Evidence:
    settings = Settings(prometheus=PrometheusSettings(url="http://127.0.0.1:9", scrape_interval=fallback))
    need = observation.needs([policy()])
    return observation.read_evidence(_Prometheus(answer), settings, need, NOW)


def test_a_wrong_shape_answer_is_no_interval_and_says_why() -> None:
    read = targets.scrape_intervals(_Prometheus(NO_INTERVALS))
    assert read.jobs is None and read.error is not None
    assert "2 active targets" in read.error and "scrapeInterval" in read.error
    fine = targets.scrape_intervals(_Prometheus([{"labels": {"job": "kubelet"}, "scrapeInterval": "15s"}]))
    assert fine.jobs == {"kubelet": 15 * S} and fine.error is None


@pytest.mark.parametrize("answer", [NOT_FOUND, NO_INTERVALS], ids=["failed", "wrong-shape"])
def test_without_intervals_every_verdict_is_unknown_and_it_is_counted(answer: list[Any] | PrometheusError) -> None:
    evidence = _evidence(answer)
    assert evidence.targets_error is not None and evidence.intervals_unknown
    telemetry = Telemetry()
    for _ in range(2):
        _recorded(telemetry, _observation(evidence=evidence))
    get = telemetry.registry.get_sample_value
    assert get("janitor_prometheus_targets_failures_total") == 2
    assert get("janitor_scrape_intervals_unknown") == 1
    notice = evidence.intervals_notice
    assert notice is not None and "\n" not in notice and "unknown" in notice and "--scrape-interval" in notice


def test_with_a_scrape_interval_given_a_failing_targets_api_is_counted_not_unknown() -> None:
    evidence = _evidence(NOT_FOUND, fallback=30 * S)
    assert evidence.targets_error is not None and not evidence.intervals_unknown
    telemetry = Telemetry()
    _recorded(telemetry, _observation(evidence=evidence))
    assert telemetry.registry.get_sample_value("janitor_prometheus_targets_failures_total") == 1
    assert telemetry.registry.get_sample_value("janitor_scrape_intervals_unknown") == 0


def test_an_answering_targets_api_is_no_failure() -> None:
    evidence = _evidence([{"labels": {"job": "dcgm-exporter"}, "scrapeInterval": "15s"}])
    assert evidence.targets_error is None and evidence.intervals_notice is None
    telemetry = Telemetry()
    _recorded(telemetry, _observation(evidence=evidence))
    assert telemetry.registry.get_sample_value("janitor_prometheus_targets_failures_total") == 0


def test_the_cause_is_logged_once_while_it_lasts(caplog: pytest.LogCaptureFixture) -> None:
    evidence = _evidence(NO_INTERVALS)
    memory = Memory(policies=())
    logged = []
    for _ in range(3):
        seen = _observation(evidence=evidence)
        planned = Planned(seen, plan(seen, (), SafetyLedger(), NOW), (), memory)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            result = cycle.apply(Ports(api=None), DRY_RUN, planned)  # type: ignore[arg-type]
        logged.append([r.getMessage() for r in caplog.records if "scrape intervals" in r.getMessage()])
        memory = result.memory
    assert logged[0] == [evidence.intervals_notice] and logged[1:] == [[], []]


def test_readyz_says_it_and_stays_ready() -> None:
    settings = Settings(prometheus=PrometheusSettings(url="http://127.0.0.1:9"))
    cycles = _Cycles(Ports(api=None), settings, Telemetry(), None)  # type: ignore[arg-type]
    seen = _observation(evidence=_evidence(NOT_FOUND))
    planned = Planned(seen, plan(seen, (), SafetyLedger(), NOW), (), Memory(policies=()))
    cycles._finished({"result": CycleResult(planned, memory=planned.memory)})
    ok, text = cycles.readiness()
    assert ok and text.startswith("ready; ") and "scrape intervals unknown" in text and "404" in text

    seen = _observation(evidence=_evidence([{"labels": {"job": "kubelet"}, "scrapeInterval": "15s"}]))
    planned = Planned(seen, plan(seen, (), SafetyLedger(), NOW), (), Memory(policies=()))
    cycles._finished({"result": CycleResult(planned, memory=planned.memory)})
    assert cycles.readiness() == (True, "ready")
