"""The precedence table of docs/policies.md, row by row, on one idle GPU workload.

Each row puts annotations on a Deployment whose only pod is idle, then asks the two paths that
exist today: does an idle policy evaluate it (shadow findings), and what does the plain
TTL/expiry path do with it. Rows 7 (keep-until) and the lifecycle column arrive with the
lifecycle work.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import replace

import pytest
from factories import NOW, ago, obj

from janitor import annotations as a
from janitor.decide.evidence import EvidenceWindow, GpuEvidence, GpuSeries, PodKey
from janitor.decide.model import ClusterSnapshot, ObjectRef, OwnerRef, PodView, SafetyLedger
from janitor.decide.plan import plan
from janitor.decide.rails import Caps, Rails
from janitor.decide.shadow import idle_findings
from janitor.policy.model import IdleGpu, Lifecycle, Policy

H = datetime.timedelta(hours=1)
EVIDENCE = {("DCGM_FI_DEV_GPU_UTIL", 2 * H): GpuEvidence(
    EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, datetime.timedelta(seconds=15), NOW),
    {PodKey("ml", "nb-1-x"): (GpuSeries("0", 0.0, 480),)})}
RAILS = Rails(protected_namespaces=("kube-system", "ml-protected"), caps=Caps(1000, 1000, 1000, 1000))

ROWS = [
    # (id, namespace, workload annotations, honourOptOut, idle policy evaluates?, TTL path outcome)
    ("1-protected-namespace", "ml-protected", {a.TTL: "1h"}, True, False, "skip"),
    ("2-opt-out-honoured", "ml", {a.OPT_OUT: "true", a.TTL: "1h"}, True, False, "skip"),
    ("3-opt-out-not-honoured", "ml", {a.OPT_OUT: "true", a.TTL: "1h"}, False, True, "skip"),
    ("4-ttl-forever", "ml", {a.TTL: "forever"}, True, True, "keep"),
    ("5-user-ttl-passed", "ml", {a.TTL: "1h"}, True, True, "delete"),
    ("6-janitor-mark", "ml", {a.EXPIRES: "2026-01-01", a.POLICY: "idle-gpu"}, True, True, "skip"),
    ("8-nothing", "ml", {}, True, True, None),
]


@pytest.mark.parametrize(("row", "namespace", "notes", "honour", "evaluated", "ttl_path"), ROWS, ids=[r[0] for r in ROWS])
def test_precedence(row: str, namespace: str, notes: dict, honour: bool, evaluated: bool, ttl_path: str | None) -> None:
    deploy = replace(obj("nb", kind="Deployment", namespace=namespace, created=ago(days=2)), annotations=notes)
    rs = obj("nb-1", kind="ReplicaSet", namespace=namespace, owner=deploy, created=ago(days=2))
    pod = PodView(ObjectRef("Pod", "v1", namespace, "nb-1-x", str(uuid.uuid4())), "1", {},
                  OwnerRef("ReplicaSet", "apps/v1", "nb-1", rs.ref.uid), "gpu-node-1", "Running", NOW - 3 * H, 1)
    evidence = {k: replace(v, pods={PodKey(namespace, "nb-1-x"): v.pods[PodKey("ml", "nb-1-x")]})
                for k, v in EVIDENCE.items()}
    policy = Policy("idle-gpu", (IdleGpu(),), lifecycle=Lifecycle(honour_opt_out=honour))

    findings = idle_findings([pod], {}, {o.ref.uid: o for o in (deploy, rs)}, [policy], evidence, {}, NOW,
                             protected_namespaces=RAILS.protected_namespaces)
    assert bool(findings) is evaluated
    if evaluated:
        assert findings[0].workload == deploy.ref

    decided = plan(ClusterSnapshot((deploy, rs), apiserver_time=NOW), SafetyLedger(), RAILS, local_now=NOW)
    verdicts = {v.outcome.value for v in decided.verdicts if v.target == deploy.ref}
    if ttl_path is None:
        assert verdicts == set()
    else:
        assert verdicts == {ttl_path}
    assert [d.target for d in decided.deletions()] == ([deploy.ref] if ttl_path == "delete" else [])
