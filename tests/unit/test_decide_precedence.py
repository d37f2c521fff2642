"""The precedence table of docs/policies.md, row by row, on one idle GPU workload.

Each row puts annotations on a Deployment (or its namespace) whose only pod is idle, runs one
plan with an enforcing idle-GPU policy, and checks all three columns: whether the policy
evaluates the workload, what the plain TTL/expiry path does, and what the lifecycle does. The
property suite (test_promises.py) checks the same table on generated clusters.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import replace

import pytest
from factories import NOW, SCRAPED, ago, obj

from janitor import annotations as a
from janitor.decide.evidence import CpuEvidence, CpuUsage, Evidence, EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    NamespaceView,
    ObjectRef,
    Observation,
    OwnerRef,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.rails import Caps, Rails
from janitor.decide.triggers import registry
from janitor.policy.model import IdleGpu, Lifecycle, Mode, Policy

H = datetime.timedelta(hours=1)
RAILS = Rails(protected_namespaces=("kube-system", "ml-protected"), caps=Caps(1000, 1000, 1000, 1000))
KEEP = a.format_expires(NOW + 5 * H)


def mark(uid: str) -> dict[str, str]:
    warned = ago(hours=30)
    return {a.DEADLINE: a.format_expires(ago(hours=6)), a.POLICY: "idle-gpu", a.MARKED_AT: a.format_expires(warned),
            a.MARKED_UID: uid, a.REASON: "idle", a.WARNED_AT: a.format_expires(warned),
            a.WARNED_VIA: f"owner D0ALICE/{warned.timestamp():.6f}",
            a.WARNED_OF: f"delete {a.format_expires(ago(hours=6))}"}


UID = str(uuid.uuid4())
ROWS = [
    # (id, namespace, workload annotations, namespace annotations, honourOptOut,
    #  policy evaluates?, plain TTL/expiry path, the lifecycle's step (None: nothing))
    ("1-protected-namespace", "ml-protected", {a.TTL: "1h"}, {}, True, False, "skip", None),
    ("2-opt-out-honoured", "ml", {a.OPT_OUT: "true", a.TTL: "1h"}, {}, True, False, "skip", None),
    ("2-namespace-opt-out-honoured", "ml", {a.TTL: "1h"}, {a.OPT_OUT: "true"}, True, False, "skip", None),
    ("3-opt-out-not-honoured", "ml", {a.OPT_OUT: "true", a.TTL: "1h"}, {}, False, True, "skip", Step.MARK),
    ("4-ttl-forever", "ml", {a.TTL: "forever"}, {}, True, True, "keep", Step.MARK),
    ("5-user-expires-passed", "ml", {a.EXPIRES: "2026-01-01"}, {}, True, True, "delete", Step.WAIT),
    ("5-user-ttl-passed", "ml", {a.TTL: "1h"}, {}, True, True, "delete", Step.MARK),
    ("6-janitor-mark-due", "ml", mark(UID), {}, True, True, None, Step.ACT),
    # An older mark's deadline is its janitor/expires: never the plain path's; moved to janitor/deadline first.
    ("6-older-mark-due", "ml", {(a.EXPIRES if k == a.DEADLINE else k): v for k, v in mark(UID).items()}, {}, True,
     True, "skip", Step.MOVE),
    # A janitor/expires beside a mark waits while the mark is there: the lifecycle decides.
    ("6-user-expires-beside-mark", "ml", mark(UID) | {a.EXPIRES: "2026-01-01"}, {}, True, True, "skip", Step.ACT),
    ("6-partial-mark", "ml", {k: v for k, v in mark(UID).items() if k != a.POLICY}, {}, True, True, None,
     Step.UNMARK),
    ("6-copied-mark", "ml", mark(str(uuid.uuid4())), {}, True, True, None, Step.DROP_COPY),
    ("7-keep-until", "ml", mark(UID) | {a.KEEP_UNTIL: KEEP}, {}, True, True, None, Step.EXTEND),
    ("8-nothing", "ml", {}, {}, True, True, None, Step.MARK),
]


@pytest.mark.parametrize(("row", "namespace", "notes", "ns_notes", "honour", "evaluated", "ttl_path", "step"), ROWS,
                         ids=[r[0] for r in ROWS])
def test_precedence(row: str, namespace: str, notes: dict[str, str], ns_notes: dict[str, str], honour: bool,
                    evaluated: bool, ttl_path: str | None, step: Step | None) -> None:
    deploy = replace(obj("nb", kind="Deployment", namespace=namespace, created=ago(days=2), uid=UID), annotations=notes)
    rs = obj("nb-1", kind="ReplicaSet", namespace=namespace, owner=deploy, created=ago(days=2))
    pod = PodView(ObjectRef("Pod", "v1", namespace, "nb-1-x", str(uuid.uuid4())), "1", {},
                  OwnerRef("ReplicaSet", "apps/v1", "nb-1", rs.ref.uid), "gpu-node-1", "Running", NOW - 3 * H, 1)
    window = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, datetime.timedelta(seconds=15), NOW)
    cpu = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)
    evidence = Evidence(gpu={("DCGM_FI_DEV_GPU_UTIL", 2 * H): GpuEvidence(
        window, {PodKey(namespace, "nb-1-x"): (GpuSeries("0", 0.0, 480, quality=SCRAPED),)})},
        cpu={(2 * H, ()): CpuEvidence(cpu, {PodKey(namespace, "nb-1-x"): CpuUsage(0.01, 120, SCRAPED)})})
    policy = Policy("idle-gpu", (IdleGpu(),), mode=Mode.ENFORCE, lifecycle=Lifecycle(honour_opt_out=honour))
    observation = Observation(NOW, (deploy, rs), (pod,), {namespace: NamespaceView(namespace, {}, ns_notes)},
                              evidence=evidence)

    decided = plan(observation, [policy], SafetyLedger(), NOW, settings=PlanSettings(rails=RAILS))

    findings = [f for f in decided.findings if f.trigger is TriggerKind.IDLE_GPU]
    assert bool(findings) is evaluated
    if evaluated:
        assert findings[0].workload == deploy.ref and findings[0].state is State.FIRES
    plain = {registry.word(f) for f in decided.findings if f.trigger is TriggerKind.EXPIRY and f.subject == deploy.ref}
    assert plain == ({ttl_path} if ttl_path else set())
    expired = [d.target for d in decided.deletions() if d.trigger is TriggerKind.EXPIRY]
    assert expired == ([deploy.ref] if ttl_path == "delete" else [])
    steps = [c.step for c in decided.changes if c.workload == deploy.ref]
    assert steps == ([step] if step else [])
    reclaims = [x for x in decided.actions if x.rule == "lifecycle"]
    assert [x.target for x in reclaims] == ([deploy.ref] if step is Step.ACT else [])
