"""A plan as people read it: the tables `janitor plan` prints and what `janitor explain` says.

The words are the planner's own (each `Reason` rendered once), so the tables, dry-run output,
Events, Slack and the audit log never disagree about why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from janitor import annotations as ann
from janitor.decide.lifecycle import Change
from janitor.decide.model import ActionType, Finding, ObjectRef, State, TriggerKind
from janitor.decide.plan import CyclePlan
from janitor.decide.triggers import registry
from janitor.decide.triggers.idle import reclaim_by

_VERDICT_ORDER = {"idle": 0, "partially-idle": 1, "unknown": 2, "too-young": 3, "busy": 4}


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def terminal_width(output: str) -> int | None:
    """The terminal's width ($COLUMNS first) to `fit` a table to; None (whole lines) for -o wide, and
    when the output goes to a pipe or a file, where a script reads it."""
    import shutil
    import sys

    if output == "wide" or not sys.stdout.isatty():
        return None
    columns = shutil.get_terminal_size(fallback=(0, 0)).columns
    return None if columns <= 0 else max(columns, 40)


def fit(text: str, width: int | None) -> str:
    """Every line at most `width` characters, cut with an ellipsis; None keeps them whole (-o wide)."""
    if width is None:
        return text
    return "\n".join(line if len(line) <= width else line[:width - 1] + "…" for line in text.split("\n"))


def plan_groups(plan: CyclePlan, *, dry_run: bool) -> str:
    """The plan for a terminal: one heading per action, rule and kind of reason, then its objects.

    A hundred ConfigMaps past their janitor/ttl read as one heading and a list, not a hundred
    copies of the same sentence."""
    groups: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for a in plan.actions:
        verb = a.type.value.upper() + (" (dry-run)" if dry_run else "")
        groups.setdefault((verb, a.rule, str(a.why.code)), []).append((str(a.target), str(a.why)))
    for h in plan.held:
        verb = f"HOLD {h.action.type.value.upper()} ({h.reason})"
        groups.setdefault((verb, h.action.rule, h.why), []).append((str(h.action.target), str(h.action.why)))
    lines = []
    for (verb, rule, code), rows in groups.items():
        held = verb.startswith("HOLD")
        count = f"{len(rows)} object{'s' if len(rows) != 1 else ''}"
        lines.append(f"{verb}  {count}  rule {rule}" + (f": {code}" if held else ""))
        lines.extend("  " + line for line in table(rows, ["OBJECT", "WHY"]).split("\n"))
        lines.append("")
    return "\n".join(lines[:-1] or ["Nothing to do."])


def plan_footer(plan: CyclePlan, width: int | None) -> str:
    """The counts and the notes, wrapped (not cut) to `width`: every word of them matters."""
    import textwrap

    paragraphs = [summary(plan), *(f"note: {n}" for n in plan.notices)]
    if width is None:
        return "\n".join(paragraphs)
    return "\n".join(textwrap.fill(p, width, subsequent_indent="  ", break_on_hyphens=False) for p in paragraphs)


def plan_table(plan: CyclePlan, *, dry_run: bool) -> str:
    rows = []
    for action in plan.actions:
        verb = action.type.value.upper()
        rows.append([verb + (" (dry-run)" if dry_run else ""), str(action.target), action.rule, str(action.why)])
    for held in plan.held:
        rows.append([f"HOLD ({held.reason})", str(held.action.target), held.action.rule,
                     f"{held.action.why} -- {held.why}"])
    lines = [table(rows, ["ACTION", "OBJECT", "RULE", "WHY"]) if rows else "Nothing to do."]
    lines.append("")
    lines.append(summary(plan))
    lines.extend(f"note: {n}" for n in plan.notices)
    return "\n".join(lines)


def summary(plan: CyclePlan) -> str:
    expiry = [f for f in plan.findings if f.trigger is TriggerKind.EXPIRY]
    states = Counter(f.state for f in expiry)
    return (
        f"{sum(a.type.deletes for a in plan.actions)} to delete or reclaim, {len(plan.held)} held, "
        f"{sum(a.type is ActionType.REPORT for a in plan.actions)} to report; "
        f"verdicts: {states[State.FIRES]} expired, {states[State.CLEAR]} kept, "
        f"{states[State.SKIPPED]} skipped, {states[State.INVALID]} invalid "
        f"(at {plan.now:%Y-%m-%d %H:%M:%SZ}, apiserver clock)"
    )


def matches(ref: ObjectRef, kind: str, namespace: str | None, name: str) -> bool:
    return ref.kind.lower() == kind.lower() and ref.name == name and (ref.namespace or None) == (namespace or None)


def subject(plan: CyclePlan, kind: str, namespace: str | None,
            name: str) -> tuple[ObjectRef | None, list[Finding], list[Change]]:
    """The object of that kind and name as the plan knows it (None: no rule applies), with its
    findings and lifecycle steps."""
    found = [f for f in plan.findings if matches(f.subject, kind, namespace, name)]
    changes = [c for c in plan.changes if matches(c.workload, kind, namespace, name)]
    ref = found[0].subject if found else changes[0].workload if changes else None
    return ref, found, changes


def explain(plan: CyclePlan, kind: str, namespace: str | None, name: str, target: str) -> str:
    """Every rule's and every policy's verdict on one object, and what happens to it this cycle."""
    ref, found, changes = subject(plan, kind, namespace, name)
    if ref is None:
        return (f"{target}: no janitor rule applies (no {ann.TTL} or {ann.EXPIRES} annotation, and no policy "
                "selects it)")
    lines = [f"{ref} (uid {ref.uid})"]
    for f in (f for f in found if f.trigger is TriggerKind.EXPIRY):
        deadline = f" [deadline {f.deadline:%Y-%m-%dT%H:%M:%SZ}]" if f.deadline else ""
        lines.append(f"  {f.rule:<8} {registry.word(f).upper():<8} {f.why}{deadline}")
    for action in plan.actions:
        if action.target.uid == ref.uid:
            lines.append(f"  => {action.type.upper()} now: {action.why}")
    for held in plan.held:
        if held.action.target.uid == ref.uid:
            lines.append(f"  => would {held.action.type.upper()}, held ({held.reason}): {held.why}")
    policies = [f for f in found if f.trigger is not TriggerKind.EXPIRY]
    if policies:
        lines.append(explain_findings(policies, plan.evidence_failures))
    elif any(f.trigger is TriggerKind.EXPIRY for f in found):
        lines.append("  policies: none selected this workload")
    lines.extend(f"  lifecycle  {c.step}  policy {c.policy}: {c.why}" for c in changes)
    return "\n".join(lines)


def explain_findings(findings: Sequence[Finding], failures: Sequence[str] = ()) -> str:
    """Each policy's verdict on one workload, pod by pod, with the evidence behind it."""
    lines = []
    for f in findings:
        lines.append(f"  {f.trigger:<8} {registry.word(f).upper():<8} policy {f.policy} ({f.source or 'no source'}, "
                     f"{f.mode}): {f.why}")
        lines.append(f"           owner: {f.owner} [{f.owner.source}]; GPUs held {f.gpus}, "
                     f"would reclaim {f.reclaim_gpu_hours:g} GPU-hours")
        for j in f.pods:
            peaks = ", ".join(f"GPU {g} peak {'n/a' if v is None else f'{v:g}'}" for g, v in sorted(j.peaks.items()))
            shown = str(j.why)
            lines.append(f"           pod {j.pod.name}: {j.state} -- {shown}"
                         + (f" [{peaks}]" if peaks and not j.idle_gpus and j.state is not State.CLEAR else ""))
    lines.extend(f"  evidence unavailable: {e}" for e in failures)
    return "\n".join(lines)


def idle_table(plan: CyclePlan) -> str:
    """Every policy's verdict per workload (shadow mode: reported only), and what enforcing would
    reclaim, in GPU-hours per policy and namespace."""
    findings = [f for f in plan.findings if registry.marks(f)]
    rows = [
        [f.policy, str(f.mode), str(f.trigger), str(f.workload) if f.workload else "(unknown workload)",
         registry.word(f), str(f.gpus), f"{f.reclaim_gpu_hours:g}", str(f.owner),
         f.why + (f" [managed by {f.managed_by}]" if f.managed_by else "")]
        for f in sorted(findings, key=lambda f: (_VERDICT_ORDER.get(registry.word(f), 9), f.policy, str(f.workload)))
    ]
    lines = ["Idle policies (mode shadow: reported only; mode enforce: the lifecycle below):"]
    lines.append(table(rows, ["POLICY", "MODE", "TRIGGER", "WORKLOAD", "VERDICT", "GPUS", "GPU-H", "OWNER", "WHY"])
                 if rows else "No workload matched an idle policy.")
    for (policy, namespace), hours in sorted(reclaim_by(findings).items()):
        lines.append(f"would reclaim {hours:g} GPU-hours: policy {policy}, namespace {namespace}")
    lines.extend(f"evidence unavailable (nothing judged idle on it): {f}" for f in plan.evidence_failures)
    silent = sorted(f"{p.ref.namespace}/{p.ref.name} on {p.node}" for p in plan.silent_gpu_pods)
    if silent:
        lines.append(f"{len(silent)} running GPU pods have no GPU telemetry: " + ", ".join(silent))
    return "\n".join(lines)


def lifecycle_table(changes: Sequence[Change]) -> str:
    """The lifecycle's decision per enforced or marked workload."""
    if not changes:
        return "Lifecycle: no workload under an enforcing policy is idle or marked."
    rows = [[str(c.step), c.policy, str(c.workload), ann.format_deadline(c.deadline) if c.deadline else "-", str(c.why)]
            for c in sorted(changes, key=lambda c: (str(c.step), str(c.workload)))]
    return "Lifecycle (policies in mode: enforce):\n" + table(rows, ["STEP", "POLICY", "WORKLOAD", "DEADLINE", "WHY"])
