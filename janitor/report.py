"""A plan as people read it: the table `janitor plan` prints and `janitor explain`'s verdicts.

The words are the planner's own (`Action.why`, `Verdict.why`), so the table, dry-run output,
Events and the audit log never disagree about the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from janitor import annotations

from janitor.decide.model import ActionType, ObjectRef, Outcome, Plan, Verdict
from janitor.decide.shadow import IdleFinding, reclaim_by


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in [header, *rows]
    )


def plan_table(plan: Plan, *, dry_run: bool) -> str:
    rows = []
    for action in plan.actions:
        verb = action.type.value.upper()
        rows.append([verb + (" (dry-run)" if dry_run else ""), str(action.target), action.rule, action.why])
    for held in plan.held:
        rows.append([f"HOLD ({held.reason})", str(held.action.target), held.action.rule,
                     f"{held.action.why} -- {held.why}"])
    lines = [table(rows, ["ACTION", "OBJECT", "RULE", "WHY"]) if rows else "Nothing to do."]
    lines.append("")
    lines.append(summary(plan))
    lines.extend(f"note: {n}" for n in plan.notices)
    return "\n".join(lines)


def summary(plan: Plan) -> str:
    outcomes = Counter(v.outcome for v in plan.verdicts)
    return (
        f"{len(plan.deletions())} to delete, {len(plan.held)} held, "
        f"{sum(a.type is ActionType.REPORT for a in plan.actions)} to report; "
        f"verdicts: {outcomes[Outcome.DELETE]} expired, {outcomes[Outcome.KEEP]} kept, "
        f"{outcomes[Outcome.SKIP]} skipped, {outcomes[Outcome.INVALID]} invalid "
        f"(at {plan.now:%Y-%m-%d %H:%M:%SZ}, apiserver clock)"
    )


def matches(ref: ObjectRef, kind: str, namespace: str | None, name: str) -> bool:
    return ref.kind.lower() == kind.lower() and ref.name == name and (ref.namespace or None) == (namespace or None)


def explain(plan: Plan, verdicts: Iterable[Verdict], target: str) -> str:
    """Every rule's verdict on one object, and what the rails do with it this cycle."""
    verdicts = list(verdicts)
    if not verdicts:
        return f"{target}: no janitor rule applies (no {', '.join(('janitor/ttl', 'janitor/expires'))} annotation)"
    ref = verdicts[0].target
    lines = [f"{ref} (uid {ref.uid})"]
    for v in verdicts:
        deadline = f" [deadline {v.deadline:%Y-%m-%dT%H:%M:%SZ}]" if v.deadline else ""
        lines.append(f"  {v.rule:<8} {v.outcome.upper():<8} {v.why}{deadline}")
    for action in plan.actions:
        if action.target.uid == ref.uid:
            lines.append(f"  => {action.type.upper()} now: {action.why}")
    for held in plan.held:
        if held.action.target.uid == ref.uid:
            lines.append(f"  => would DELETE, held ({held.reason}): {held.why}")
    return "\n".join(lines)


def idle_table(findings: Sequence[IdleFinding], failures: Sequence[str] = (), silent: Sequence[str] = ()) -> str:
    """The shadow-mode report: every idle policy's verdict per workload, and what enforcing
    would reclaim, in GPU-hours per policy and namespace."""
    order = {"idle": 0, "partially-idle": 1, "unknown": 2, "too-young": 3, "busy": 4}
    rows = [
        [f.policy, f.mode, f.trigger, str(f.workload) if f.workload else "(unknown workload)", f.idleness,
         str(f.gpus_held), f"{f.reclaim_gpu_hours:g}", str(f.owner),
         f.why + (f" [managed by {f.managed_by}]" if f.managed_by else "")]
        for f in sorted(findings, key=lambda f: (order.get(str(f.idleness), 9), f.policy, str(f.workload)))
    ]
    lines = ["Idle policies (mode shadow: reported only; mode enforce: the lifecycle below):"]
    lines.append(table(rows, ["POLICY", "MODE", "TRIGGER", "WORKLOAD", "VERDICT", "GPUS", "GPU-H", "OWNER", "WHY"])
                 if rows else "No workload matched an idle policy.")
    totals = reclaim_by(findings)
    for (policy, namespace), hours in sorted(totals.items()):
        lines.append(f"would reclaim {hours:g} GPU-hours: policy {policy}, namespace {namespace}")
    lines.extend(f"evidence unavailable (nothing judged idle on it): {f}" for f in failures)
    if silent:
        lines.append(f"{len(silent)} running GPU pods have no GPU telemetry: " + ", ".join(silent))
    return "\n".join(lines)


def explain_idle(findings: Sequence[IdleFinding], failures: Sequence[str] = ()) -> str:
    """Each idle policy's verdict on one workload, pod by pod, with the evidence behind it."""
    if not findings:
        return "  idle policies: none matched this workload"
    lines = []
    for f in findings:
        lines.append(f"  {f.trigger:<8} {str(f.idleness).upper():<8} policy {f.policy} ({f.source or 'no source'}, "
                     f"{f.mode}): {f.why}")
        lines.append(f"           owner: {f.owner} [{f.owner.source}]; GPUs held {f.gpus_held}, "
                     f"would reclaim {f.reclaim_gpu_hours:g} GPU-hours")
        for j in f.pods:
            peaks = ", ".join(f"GPU {g} peak {'n/a' if v is None else f'{v:g}'}" for g, v in sorted(j.peaks.items()))
            lines.append(f"           pod {j.pod.pod}: {j.idleness} -- {j.why}" + (f" [{peaks}]" if peaks and peaks not in j.why else ""))
    lines.extend(f"  evidence unavailable: {e}" for e in failures)
    return "\n".join(lines)


def lifecycle_table(changes: Sequence[Any]) -> str:
    """The lifecycle's decision per enforced or marked workload (`decide.lifecycle.Change`)."""
    if not changes:
        return "Lifecycle: no workload under an enforcing policy is idle or marked."
    rows = [[str(c.step), c.policy, str(c.workload),
             annotations.format_expires(c.deadline) if c.deadline else "-", c.why]
            for c in sorted(changes, key=lambda c: (str(c.step), str(c.workload)))]
    return "Lifecycle (policies in mode: enforce):\n" + table(rows, ["STEP", "POLICY", "WORKLOAD", "DEADLINE", "WHY"])
