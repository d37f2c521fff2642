"""reservedQuota: the paths by which it could reclaim what a careful admin would keep (a finished
Job, one MultiKueue runs elsewhere, one waiting for its admission checks, a gap between two pods, a
policy's exemption by pod labels), each one a test. Workloads are built the way
`observe.kueue.owned` reads them from a real Kueue Workload's JSON, so the conditions are Kueue's own.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from factories import NOW
from test_reserved_quota import NS, H, due_notes, kjob, pod_of, quota, quota_policy, verdicts

from janitor.decide.lifecycle import Step
from janitor.decide.model import State
from janitor.observe import kueue
from janitor.policy.endings import Action, Queued
from janitor.policy.model import LabelSelector, Match, Namespaces


def _at(delta: datetime.timedelta) -> str:
    return (NOW - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_workload(conditions: list[tuple[str, str, datetime.timedelta, str]], **status: Any) -> Queued:
    """A Workload owned by Job `train` (uid-train), read as `kueue.attach` reads it."""
    item = {"metadata": {"name": "job-train-3f2a1", "uid": "uid-wl", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-train", "controller": True}]},
        "spec": {"active": True, "queueName": "gpus"},
        "status": {"conditions": [{"type": t, "status": s, "lastTransitionTime": _at(ago), "reason": r}
                                  for t, s, ago, r in conditions],
                   "admission": {"clusterQueue": "cq", "podSetAssignments": [
                       {"name": "main", "count": 1, "resourceUsage": {"nvidia.com/gpu": "8"}}]},
                   **status}}
    found = kueue.owned([item], "uid-train", "v1beta2")
    assert found is not None and found.found
    return found


SUSPEND = quota_policy(action=Action.SUSPEND)


# 1. A finished Job: Kueue leaves QuotaReserved and Admitted True and adds Finished (pkg/workload/finish
#    Finish only sets Finished); its ClusterQueue no longer counts it (HasActiveQuotaReservation).
def test_a_finished_workload_holds_no_quota_and_is_not_deactivated() -> None:
    done = read_workload([("QuotaReserved", "True", 5 * H, "QuotaReserved"), ("Admitted", "True", 5 * H, "Admitted"),
                          ("PodsReady", "False", 3 * H, "PodsReady"), ("Finished", "True", 3 * H, "Succeeded")])
    job = kjob(queued=done)
    pods = [pod_of(job, "Succeeded")]
    state, reason = verdicts(quota([job], pods))["train"]
    assert state is not State.FIRES, f"a finished Job is said to hold quota: {reason}"


def test_a_finished_workload_is_not_deactivated_at_the_deadline() -> None:
    done = read_workload([("QuotaReserved", "True", 9 * H, "QuotaReserved"), ("Admitted", "True", 9 * H, "Admitted"),
                          ("Finished", "True", 8 * H, "Succeeded")])
    job = kjob(queued=done, notes=due_notes("suspend"))
    decision = quota([job], [pod_of(job, "Succeeded")], policies=[SUSPEND])
    assert not decision.due, f"deactivates the Workload of a finished Job: {decision.due}"


# 2. Two-phase admission: quota is reserved, then AdmissionChecks (ProvisioningRequest) run while the
#    Job stays suspended (reconciler step 7 unsuspends only when Admitted). A Job waiting hours for the
#    autoscaler's capacity has no pod, and is about to start.
def test_a_job_waiting_for_its_provisioning_request_is_not_deactivated() -> None:
    waiting = read_workload([("QuotaReserved", "True", 9 * H, "QuotaReserved"),
                             ("Admitted", "False", 9 * H, "UnsatisfiedChecks")],
                            admissionChecks=[{"name": "dws-prov", "state": "Pending", "lastTransitionTime": _at(9 * H),
                                              "message": "Waiting for resources. Currently there are not enough "
                                                         "resources available to fulfill the request."}])
    job = dataclasses.replace(kjob(queued=waiting, notes=due_notes("suspend")), suspended=True)
    decision = quota([job], [], policies=[SUSPEND])
    state, reason = verdicts(decision)["train"]
    assert state is not State.FIRES and not decision.due, f"{state}: {reason}; due: {decision.due}"


# 3. MultiKueue: the manager cluster's Workload is QuotaReserved and Admitted while the Job runs on a
#    worker cluster (status.clusterName); the manager's Job has no pods there by design.
def test_a_job_multikueue_runs_on_a_worker_cluster_is_not_deactivated() -> None:
    remote = read_workload([("QuotaReserved", "True", 9 * H, "QuotaReserved"), ("Admitted", "True", 9 * H, "Admitted")],
                           clusterName="worker-1",
                           admissionChecks=[{"name": "multikueue", "state": "Ready", "lastTransitionTime": _at(9 * H),
                                             "message": 'The workload got reservation on "worker-1"'}])
    job = kjob(queued=remote, notes=due_notes("suspend"))
    decision = quota([job], [], policies=[SUSPEND])
    state, reason = verdicts(decision)["train"]
    assert state is not State.FIRES and not decision.due, f"{state}: {reason}; due: {decision.due}"


# 4. `after` is measured from the reservation, not from when the pods stopped: a Job admitted hours
#    ago whose pod failed a moment ago (the Job controller recreates it after a backoff of up to 6 min)
#    fires at once, and its owner is warned it "has held quota for 3 h while none of its pods runs".
def test_a_momentary_gap_between_pods_is_not_quota_held_for_after() -> None:
    held = read_workload([("QuotaReserved", "True", 3 * H, "QuotaReserved"), ("Admitted", "True", 3 * H, "Admitted")])
    job = kjob(queued=held)
    failed = dataclasses.replace(pod_of(job, "Failed"), started=NOW - datetime.timedelta(minutes=2))
    decision = quota([job], [failed], policies=[SUSPEND])
    state, reason = verdicts(decision)["train"]
    marks = [c for c in decision.changes if c.step is Step.MARK]
    assert state is not State.FIRES and not marks, f"{state}: {reason}; marked and warned: {marks}"


# 5. A policy exempting some jobs by pod labels (first match wins) never selects a podless workload,
#    so the next, broader policy takes it: the exemption is silently bypassed.
def test_a_pod_selector_exemption_placed_first_keeps_its_jobs() -> None:
    keep = quota_policy(name="research-report-only", action=Action.REPORT,
                        match=Match(namespaces=Namespaces(include=(NS,)),
                                    pod_selector=LabelSelector((("app", "train"),))))
    broad = quota_policy(name="reserved-quota", action=Action.SUSPEND)
    # Its pod template says app=train (the exemption's label); its pods are gone (kueue#14811), which is
    # when reservedQuota judges it at all.
    job = kjob(notes=due_notes("suspend"))
    decision = quota([job], [], policies=[keep, broad])
    assert not decision.due, f"the exempted job is deactivated by {[a.policy for a in decision.due]}"
