"""A plan, or one object's part of it, as a document for `-o json` and `-o yaml`.

Scripts and dashboards read these instead of scraping the tables, so the shape is explicit and
stable (`apiVersion: janitor/v1`), not a dump of the planner's internals: refs carry their UID,
every reason carries its code and facts besides its sentence, times are UTC ISO 8601. The values
are the same ones the tables print, from the same plan.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from janitor.decide.lifecycle import Change
from janitor.decide.model import Action, Finding, ObjectRef, PodJudgement, TriggerKind
from janitor.decide.plan import CyclePlan
from janitor.decide.rails import Held
from janitor.decide.reasons import Reason, Words
from janitor.decide.triggers import registry

API_VERSION = "janitor/v1"
Document = dict[str, Any]


def _time(at: datetime.datetime | None) -> str | None:
    if at is None:
        return None
    at = at.replace(tzinfo=datetime.timezone.utc) if at.tzinfo is None else at.astimezone(datetime.timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _fact(value: Any) -> Any:
    if isinstance(value, Reason):
        return reason(value)
    if isinstance(value, Words):  # words a reason writes from its data when shown: their text
        return str(value)
    if isinstance(value, datetime.datetime):
        return _time(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity
    if isinstance(value, tuple | list):
        return [_fact(v) for v in value]
    return value


def reason(why: Reason) -> Document:
    """The sentence people read, and the code and facts a script branches on."""
    return {"code": str(why.code), "text": str(why), "facts": {name: _fact(value) for name, value in why.facts}}


def ref(of: ObjectRef) -> Document:
    return {"kind": of.kind, "apiVersion": of.api_version, "namespace": of.namespace, "name": of.name, "uid": of.uid}


def action(a: Action) -> Document:
    return {"action": str(a.type), "object": ref(a.target), "policy": a.policy, "trigger": str(a.trigger),
            "rule": a.rule, "eventReason": a.reason, "why": reason(a.why)}


def held(h: Held) -> Document:
    return {**action(h.action), "heldBecause": str(h.reason), "heldWhy": h.why}


def _pod(j: PodJudgement) -> Document:
    return {"pod": ref(j.pod), "state": str(j.state), "why": reason(j.why), "idleGpus": list(j.idle_gpus),
            "peaks": {gpu: _fact(peak) for gpu, peak in sorted(j.peaks.items())}}


def finding(f: Finding) -> Document:
    doc: Document = {"trigger": str(f.trigger), "policy": f.policy, "mode": str(f.mode), "source": f.source or None,
                     "subject": ref(f.subject), "verdict": registry.word(f), "why": reason(f.reason), "known": f.known,
                     "owner": {"kind": str(f.owner.kind), "value": f.owner.value, "source": f.owner.source}}
    if f.trigger is TriggerKind.EXPIRY:
        doc.update(rule=f.rule, deadline=_time(f.deadline))
    else:
        doc.update(gpus=f.gpus, reclaimGpuHours=f.reclaim_gpu_hours, managedBy=f.managed_by,
                   pods=[_pod(j) for j in f.pods])
    return doc


def change(c: Change) -> Document:
    return {"step": str(c.step), "policy": c.policy, "workload": ref(c.workload), "deadline": _time(c.deadline),
            "why": reason(c.why)}


def plan_document(plan: CyclePlan, *, dry_run: bool, objects_read: int) -> Document:
    """The whole plan: what would be done, what the rails hold, every verdict and lifecycle step."""
    return {
        "apiVersion": API_VERSION, "kind": "Plan", "now": _time(plan.now), "dryRun": dry_run,
        "objectsRead": objects_read,
        "actions": [action(a) for a in plan.actions],
        "held": [held(h) for h in plan.held],
        "findings": [finding(f) for f in plan.findings],
        "lifecycle": [change(c) for c in plan.changes],
        "notices": list(plan.notices),
        "evidenceFailures": list(plan.evidence_failures),
        "gpuPodsWithoutTelemetry": [ref(p.ref) for p in plan.silent_gpu_pods],
    }


def explain_document(plan: CyclePlan, subject: ObjectRef | None, findings: Sequence[Finding],
                     changes: Sequence[Change]) -> Document:
    """One object's part of the plan; `subject` None when no rule applies to it."""
    uid = subject.uid if subject else None
    return {
        "apiVersion": API_VERSION, "kind": "Explanation", "now": _time(plan.now),
        "object": ref(subject) if subject else None,
        "findings": [finding(f) for f in findings],
        "actions": [action(a) for a in plan.actions if a.target.uid == uid],
        "held": [held(h) for h in plan.held if h.action.target.uid == uid],
        "lifecycle": [change(c) for c in changes],
        "evidenceFailures": list(plan.evidence_failures) if any(
            f.trigger is not TriggerKind.EXPIRY for f in findings) else [],
    }


def dump(document: Mapping[str, Any], output: str) -> str:
    """`output` is json or yaml."""
    if output == "json":
        return json.dumps(document, indent=2, sort_keys=False)
    import yaml

    return str(yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=True)).rstrip("\n")
