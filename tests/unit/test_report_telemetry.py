"""What people read: the plan table, `explain`, the audit line and the metrics.

Aspects covered:
- the plan table lists deletions, reports and held deletions with the planner's own words,
  and a summary with counts and the apiserver time;
- explain shows every rule's verdict with its deadline, and what the rails do with it;
- the audit line is one JSON object with audit: true, object, policy, trigger, rule, the reason's
  code and words, evidence, outcome, dry_run;
- metrics count outcomes by bounded labels and pre-create the held-reason series at zero.
"""

from __future__ import annotations

import json
import logging

from factories import NOW, ago, obj

from janitor import annotations as a
from janitor import report
from janitor.decide.model import Finding, ObjectRef, Observation, SafetyLedger, SkippedKind, State, TriggerKind
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.rails import Caps, Rails
from janitor.decide.reasons import Code, why
from janitor.policy.model import Mode
from janitor.telemetry import JsonFormatter, Telemetry, audit, log_verdicts


def sample_plan(dry_run: bool = False):
    objects = (
        obj("old", annotations={a.TTL: "1h"}, created=ago(hours=3)),
        obj("young", annotations={a.TTL: "7d"}),
        obj("typo", annotations={a.TTL: "2 hours"}),
        obj("over-cap", namespace="team-b", annotations={a.EXPIRES: "2026-11-01"}),
    )
    rails = Rails(caps=Caps(per_hour=1), dry_run=dry_run)
    return plan(Observation(NOW, objects), (), SafetyLedger(), NOW, settings=PlanSettings(rails=rails))


def test_plan_table_reads_well() -> None:
    text = report.plan_table(sample_plan(), dry_run=False)
    lines = text.splitlines()
    assert lines[0].split() == ["ACTION", "OBJECT", "RULE", "WHY"]
    assert any(line.startswith("REPORT") and "ConfigMap/team-a/typo" in line for line in lines)
    assert any(line.startswith("DELETE") and "ConfigMap/team-b/over-cap" in line and "passed" in line for line in lines)
    assert any(line.startswith("HOLD (cap)") and "ConfigMap/team-a/old" in line and "per hour" in line
               for line in lines)
    assert "1 to delete or reclaim, 1 held, 1 to report" in text and "2026-11-23 12:00:00Z" in text


def test_dry_run_rows_say_so() -> None:
    text = report.plan_table(sample_plan(dry_run=True), dry_run=True)
    assert text.count("HOLD (dry-run)") == 2


def test_explain_shows_rules_deadlines_and_rails() -> None:
    p = sample_plan()
    text = report.explain(p, "ConfigMap", "team-a", "young", "ConfigMap/team-a/young")
    assert "ttl      KEEP" in text and "[deadline 2026-11-30T11:00:00Z]" in text
    text = report.explain(p, "ConfigMap", "team-a", "old", "ConfigMap/team-a/old")
    assert "ttl      DELETE" in text and "would DELETE, held (cap)" in text
    assert "no janitor rule applies" in report.explain(p, "ConfigMap", "team-a", "plain", "ConfigMap/team-a/plain")


def test_audit_line_is_one_json_object(caplog) -> None:
    action = sample_plan().deletions()[0]
    with caplog.at_level(logging.INFO, logger="janitor.audit"):
        audit(action, outcome="done", dry_run=False, detail="deleted")
    line = json.loads(JsonFormatter().format(caplog.records[-1]))
    assert line["audit"] is True and line["object"] == "ConfigMap/team-b/over-cap"
    assert line["rule"] == "expires" and line["evidence"]["janitor/expires"] == "2026-11-01"
    assert (line["policy"], line["trigger"], line["why_code"]) == ("ttl-expiry", "expiry", "expires-passed")
    assert line["why"].startswith("janitor/expires 2026-11-01 passed")
    assert (line["outcome"], line["dry_run"]) == ("done", False)


def test_metrics_count_outcomes_with_bounded_labels() -> None:
    t = Telemetry()
    p = sample_plan()
    unserved = SkippedKind("notebooks.kubeflow.org", "not served (kubeflow.org/v1 notebooks)")
    t.observe_plan(p, objects=4, skipped_kinds=(unserved,), tripped=False, skew=0.4)
    t.count(p.deletions()[0], "done")
    get = t.registry.get_sample_value
    assert get("janitor_actions_total", {"action": "delete", "rule": "expires", "policy": "ttl-expiry",
                                         "outcome": "done"}) == 1
    assert get("janitor_deletions_held_total", {"reason": "cap"}) == 1
    assert get("janitor_deletions_held_total", {"reason": "tripwire"}) == 0
    assert get("janitor_kinds_skipped", {"kind": "notebooks.kubeflow.org", "reason": "not-served"}) == 1
    assert get("janitor_clock_skew_seconds") == 0.4


def _verdict(uid: str, state: State) -> Finding:
    ref = ObjectRef("Deployment", "apps/v1", "team-a", f"train-{uid}", uid)
    return Finding(TriggerKind.IDLE_GPU, "idle-gpu", Mode.SHADOW, ref, state, why(Code.NO_PODS))


def test_a_steady_daemon_logs_the_verdicts_that_changed_not_every_verdict(caplog) -> None:
    """The first cycle logs every verdict; the next ones only what is new or changed (with what it
    was), so 20,000 unchanged verdicts a minute do not flood the logs. At debug level all show."""
    first = [_verdict("a", State.FIRES), _verdict("b", State.CLEAR), _verdict("c", State.UNKNOWN)]
    with caplog.at_level(logging.INFO, logger="janitor.cycle"):
        seen = log_verdicts(first, None)
    assert len(caplog.records) == 3
    caplog.clear()
    second = [_verdict("a", State.FIRES), _verdict("b", State.FIRES), _verdict("d", State.CLEAR)]
    with caplog.at_level(logging.INFO, logger="janitor.cycle"):
        seen = log_verdicts(second, seen)
    changed = {r.object: r.was for r in caplog.records}  # type: ignore[attr-defined]
    assert changed == {"Deployment/team-a/train-b": "busy", "Deployment/team-a/train-d": None}
    assert all(r.levelno == logging.INFO for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="janitor.cycle"):
        log_verdicts(second, seen)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG] * 3
