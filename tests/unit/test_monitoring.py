"""What an admin's Prometheus and Grafana get from manifests/monitoring, checked with promtool.

Aspects covered:
- every alert has a summary, a description, a `for:` and a runbook_url (one base, the alert's
  name as anchor) whose section exists in docs/runbooks.md, which holds no section for an alert
  that is gone; docs/admin-guide.md lists exactly the alerts, each linked to its runbook;
- the rules pass `promtool check rules`, and `promtool test rules` with
  manifests/monitoring/tests/alerts-test.yaml, in which every alert fires;
- the janitor's and the node agent's /metrics, as the daemon exposes them after a cycle, pass
  `promtool check metrics` (base units, `_total` counters) and carry no `_created` series;
- promtool is the one the suite runs Prometheus from (`devenv.prometheus_release`), each major in
  turn; where one is missing the test is skipped, except under CI, where it fails.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from factories import NOW
from prometheus_client import CollectorRegistry, generate_latest
from test_decide_lifecycle import ALICE, NS, _idle_gpus, _running_pod, job, marked, policy

from devenv.prometheus_release import NAMES, installed
from janitor.act import kube
from janitor.act.lifecycle import LifecycleOutcome
from janitor.act.slack import Digest, SendResult
from janitor.act.slack_messages import Message
from janitor.annotations import Delivery
from janitor.cycle import CycleResult, Memory, Planned
from janitor.daemon import CacheCollector, record
from janitor.decide.model import NamespaceView, Observation, SafetyLedger, SkipCause, SkippedKind
from janitor.decide.plan import plan
from janitor.node_agent.agent import AgentMetrics
from janitor.observe.kind_status import KindStatus, State
from janitor.observe.prometheus import QueryStat
from janitor.telemetry import Telemetry

H = datetime.timedelta(hours=1)
ROOT = Path(__file__).parents[2]
MONITORING = ROOT / "manifests" / "monitoring"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
# Where every alert's runbook_url points: the project's docs as GitHub shows them.
RUNBOOK_BASE = "https://github.com/kube-idle-janitor/kube-idle-janitor/blob/main/docs/runbooks.md#"
DURATION = re.compile(r"^([0-9]+[smhdw])+$")


@pytest.fixture(scope="module", params=NAMES)
def promtool(request: pytest.FixtureRequest) -> str:
    """The promtool of each Prometheus major the suite runs; CI has both (devenv/install.sh)."""
    found = installed(request.param)
    if found is None:
        message = f"promtool of {request.param} is not installed (bash devenv/install.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found.promtool


class _Cache:
    """What the /metrics collector reads of the watch cache."""

    def status(self) -> list[KindStatus]:
        return [KindStatus("Job", State.WATCHING, True, 3, 2, 1, 4, 0, 17),
                KindStatus("Node", State.POLLING, True, 5, 7, 0, 0, 0, 0, refreshed=6)]


def _a_cycle() -> CycleResult:
    """A cycle that reclaims an idle Job (warned, past its deadline), sends a digest that fails and
    one that is delivered, fails one write and may not list Deployments: every family of the
    janitor's registry gets a sample."""
    pol = policy()
    view = job(marked(NOW - 30 * H, NOW - H, NOW - 26 * H))
    pod = _running_pod("train-x1", view)
    forbidden = SkippedKind("Deployment", "forbidden: deployments.apps is forbidden", SkipCause.FORBIDDEN)
    observation = Observation(NOW, (view,), (pod,), {NS: NamespaceView(NS)}, evidence=_idle_gpus([pod]),
                              skipped_kinds=(forbidden,))
    decided = plan(observation, [pol], SafetyLedger(), NOW)
    [action] = decided.actions
    planned = Planned(observation, decided, (pol,), Memory(policies=(pol,)))
    digest = Digest(ALICE, (), "intent-1", (Message("warning", ()),))
    lifecycle = LifecycleOutcome(failed=["mark Job/team-a/other: 409"],
                                 sent=[SendResult(digest, None, "channel_not_found"),
                                       SendResult(digest, Delivery("D0ALICE", "1.0"))])
    return CycleResult(planned, [kube.ActionResult(action, kube.Outcome.DONE, "")], lifecycle,
                       queries=(QueryStat("query", 0.2, 1000, True), QueryStat("targets", 0.1, 10, True)))


def _after_a_cycle(which: str) -> CollectorRegistry:
    """The daemon's registry after one recorded cycle, or a node agent's after a scan."""
    if which == "node-agent":
        agent = CollectorRegistry()
        metrics = AgentMetrics(agent, "node-1")
        for gauge in (metrics.dstate, metrics.leftovers, metrics.heartbeat, metrics.pods_visible, metrics.gpu_holders):
            gauge.labels(node="node-1").set(1)
        metrics.scan_seconds.labels(node="node-1").observe(0.1)
        metrics.unreadable.labels(node="node-1").inc()
        return agent
    telemetry = Telemetry()
    record(telemetry, _a_cycle())
    telemetry.clicks.labels(button="keep", outcome="done").inc()
    telemetry.silent_gpu_pods.labels(node="gpu-node-2").set(1)  # each needs a cluster of its own
    telemetry.signal_coverage.labels(policy="idle-gpu", signal="DCGM_FI_PROF_GR_ENGINE_ACTIVE").set(0.5)
    telemetry.cycles.labels(result="abandoned").inc()
    telemetry.registry.register(CacheCollector(_Cache()))  # type: ignore[arg-type]
    return telemetry.registry


@pytest.fixture(params=["janitor", "node-agent"])
def registry(request: pytest.FixtureRequest) -> CollectorRegistry:
    return _after_a_cycle(request.param)


def _check_metrics(promtool: str, text: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)


def test_metrics_pass_promtool_check_metrics(promtool: str, registry: CollectorRegistry) -> None:
    text = generate_latest(registry)
    empty = sorted(m.name for m in registry.collect() if not m.samples)
    assert empty == [], "a family without a sample is not checked: give it one in _after_a_cycle"
    out = _check_metrics(promtool, text)
    assert out.returncode == 0, (out.stdout + out.stderr).decode()


def test_the_watch_cache_counts_a_polled_kinds_lists_again_as_refreshes() -> None:
    registry = CollectorRegistry()
    registry.register(CacheCollector(_Cache()))  # type: ignore[arg-type]
    lists = {(s.labels["kind"], s.labels["why"]): s.value for m in registry.collect()
             if m.name == "janitor_watch_cache_lists" for s in m.samples if s.name.endswith("_total")}
    assert lists == {("Job", "first"): 1, ("Job", "expired"): 1, ("Job", "refresh"): 0,
                     ("Node", "first"): 1, ("Node", "expired"): 0, ("Node", "refresh"): 6}


def test_promtool_check_metrics_would_see_a_wrong_unit(promtool: str) -> None:
    """The check above can fail: promtool refuses a metric in hours."""
    hours = b"# HELP x_gpu_hours_total h\n# TYPE x_gpu_hours_total counter\nx_gpu_hours_total 1\n"
    out = _check_metrics(promtool, hours)
    assert out.returncode != 0 and b"seconds" in out.stdout + out.stderr


def test_no_created_series(registry: CollectorRegistry) -> None:
    """A `_created` series per counter and histogram doubles the series and means nothing on a dashboard."""
    created = sorted({s.name for m in registry.collect() for s in m.samples if s.name.endswith("_created")})
    assert created == []


def test_gpu_time_is_counted_in_gpu_seconds_by_policy_and_namespace() -> None:
    """The reclaimed Job had 1 GPU idle over the policy's 2 h window: 7200 GPU-seconds, 2 GPU-hours."""
    registry = _after_a_cycle("janitor")
    where = {"policy": "idle-gpu", "namespace": "team-a"}
    assert registry.get_sample_value("janitor_reclaimed_gpu_seconds_total", where) == 7200
    assert registry.get_sample_value("janitor_would_reclaim_gpu_seconds", where) == 7200



# -- alerts and runbooks -------------------------------------------------------------------------------


def _spec() -> dict[str, Any]:
    rule: dict[str, Any] = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return dict(rule["spec"])


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in _spec()["groups"] for r in g["rules"] if "alert" in r}


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces as '-'."""
    headings = re.findall(r"^#{1,6} +(.+?) *$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("name", sorted(_alerts()))
def test_every_alert_says_what_for_how_long_and_where_its_runbook_is(name: str) -> None:
    rule = _alerts()[name]
    annotations = rule["annotations"]
    assert annotations["summary"].strip() and annotations["description"].strip()
    assert DURATION.match(str(rule.get("for", ""))), f"{name} has no `for:`"
    assert rule["labels"]["severity"] in ("warning", "critical")
    assert annotations["runbook_url"] == RUNBOOK_BASE + name.lower()
    assert name.lower() in github_anchors(RUNBOOKS.read_text()), f"docs/runbooks.md has no section {name}"


def test_runbooks_hold_a_section_per_alert_and_no_other() -> None:
    sections = set(re.findall(r"^## (\S+)$", RUNBOOKS.read_text(), re.M))
    assert sections == set(_alerts())


def test_the_anchor_check_can_fail() -> None:
    assert "kubeidlejanitornotcycling" in github_anchors("## KubeIdleJanitorNotCycling\n")
    assert "kubeidlejanitornotcycling" not in github_anchors("KubeIdleJanitorNotCycling\n## Other\n")


def test_the_admin_guide_lists_every_alert_with_its_runbook() -> None:
    guide = (ROOT / "docs" / "admin-guide.md").read_text()
    listed = re.findall(r"^\| \[`(KubeIdleJanitor\w+)`\]\(runbooks\.md#([\w-]+)\)", guide, re.M)
    assert sorted(name for name, _ in listed) == sorted(_alerts())
    assert all(anchor == name.lower() for name, anchor in listed)


def test_rules_pass_promtool_check_rules(promtool: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(_spec()))
    out = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_fires_under_promtool_test_rules(promtool: str, tmp_path: Path) -> None:
    tests = MONITORING / "tests" / "alerts-test.yaml"
    cases = yaml.safe_load(tests.read_text())
    fired = {t["alertname"] for case in cases["tests"] for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert fired == set(_alerts()), f"never fires in {tests.name}: {sorted(set(_alerts()) - fired)}"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_spec()))
    shutil.copy(tests, tmp_path / tests.name)
    out = subprocess.run([promtool, "test", "rules", tests.name], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


# -- the dashboard and the recording rules -------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MONITORING / "dashboards" / "kube-idle-janitor.json").read_text())
    return data


def _queries() -> dict[str, list[str]]:
    """Each panel's queries, by title."""
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in _dashboard()["panels"]}


_NOT_METRICS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan"}


def metrics_in(expr: str) -> set[str]:
    """The series names a PromQL expression reads: identifiers that are no function, keyword or label."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\$\w+", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = re.findall(r"(?<![\w:.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", text)
    return {n for n in names if n.lower() not in _NOT_METRICS}


def test_metrics_in_finds_series_not_functions_or_labels() -> None:
    assert metrics_in('sum by (policy) (increase(a_total{x="b c"}[1h])) / on() group_left max(b:c:d) > 0') == {
        "a_total", "b:c:d"}


def _exported() -> set[str]:
    return {s.name for which in ("janitor", "node-agent") for m in _after_a_cycle(which).collect() for s in m.samples}


def _recordings() -> set[str]:
    return {r["record"] for g in _spec()["groups"] for r in g["rules"] if "record" in r}


def test_every_recording_rule_feeds_a_panel_or_an_alert() -> None:
    read = {m for exprs in _queries().values() for e in exprs for m in metrics_in(e)}
    read |= {m for rule in _alerts().values() for m in metrics_in(rule["expr"])}
    assert _recordings() and _recordings() <= read, sorted(_recordings() - read)


def test_every_dashboard_query_reads_what_the_janitor_exports_or_a_recording() -> None:
    known = _exported() | _recordings()
    for title, exprs in _queries().items():
        for expr in exprs:
            assert metrics_in(expr) and metrics_in(expr) <= known, (title, sorted(metrics_in(expr) - known))


def test_every_janitor_query_is_scoped_to_the_cluster_variable() -> None:
    names = [v["name"] for v in _dashboard()["templating"]["list"]]
    assert {"cluster", "namespace"} <= set(names)
    for title, exprs in _queries().items():
        for expr in exprs:
            selectors = re.findall(r"\b(?:janitor_\w+|exported_pod_gpu:\w+:\w+)(\{[^}]*\})?", expr)
            assert selectors and all('cluster=~"$cluster"' in s for s in selectors), (title, expr)


def test_reclaimed_gpu_hours_stand_beside_would_reclaim_by_namespace_and_policy() -> None:
    queries = _queries()
    for metric in ("janitor_reclaimed_gpu_seconds_total", "janitor_would_reclaim_gpu_seconds"):
        panels = [t for t, exprs in queries.items() if any(metric in e for e in exprs)]
        assert panels, metric
        for title in panels:
            expr = " ".join(queries[title])
            assert "by (namespace, policy)" in expr and 'namespace=~"$namespace"' in expr and "/ 3600" in expr, title


def test_dashboard_queries_parse(promtool: str, tmp_path: Path) -> None:
    """Each query, its variables given values, as a recording rule: promtool parses it."""
    values = {"$__range": "1d", "$cluster": ".*", "$namespace": ".*"}
    rules = []
    for i, expr in enumerate(e for exprs in _queries().values() for e in exprs):
        for variable, value in values.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:query:{i}", "expr": expr})
    path = tmp_path / "dashboard.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# Labels the Prometheus operator puts on every series of a ServiceMonitor's targets.
TARGET_LABELS = {"namespace", "pod", "service", "container", "endpoint", "job", "instance"}


def test_the_janitors_own_namespace_label_survives_the_scrape() -> None:
    """A janitor series with a label the operator also sets keeps its own only with honorLabels."""
    clashing = {k for m in _after_a_cycle("janitor").collect() for s in m.samples for k in s.labels} & TARGET_LABELS
    assert clashing == {"namespace"}
    monitors = [d for d in yaml.safe_load_all((MONITORING / "servicemonitors.yaml").read_text()) if d]
    [janitor] = [m for m in monitors if m["metadata"]["name"] == "kube-idle-janitor"]
    assert all(e.get("honorLabels") is True for e in janitor["spec"]["endpoints"])
