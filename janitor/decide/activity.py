"""The admins' own "is it in use" checks (a policy's `activity:`), judged on a workload.

The idle triggers read what a GPU or a CPU did; some workloads are in use while both rest: an
inference server answering a request an hour, a notebook whose kernel the researcher just ran.
An admin says so in PromQL (`policy.model.Activity`), and a sample naming any pod of the workload
means in use. Fail closed: a rule that was not evaluated, failed, or answered with samples that
name no pod counts as use for every workload the policy covers, since an admin's check that
broke must never let an idle verdict through. `minRunningSeconds` is a floor: a pod that started
less than that ago is in use.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime

from janitor.decide.evidence import Evidence, PodKey
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import Workload
from janitor.policy.model import Policy

MAX_ERROR = 200  # characters of a rule's error kept in the reason


def in_use(workload: Workload, policy: Policy, evidence: Evidence, now: datetime.datetime) -> Reason | None:
    """Why the policy's activity rules call the workload in use, or None when they do not."""
    act = policy.activity
    if act is None:
        return None
    pods = [p for p in workload.pods if not p.deleting]
    for rule in act.rules:
        answer = evidence.activity.get(rule.expr)
        if answer is None:
            return why(Code.ACTIVITY_UNREAD, rule=rule.name)
        if answer.failed is not None:
            return why(Code.ACTIVITY_FAILED, rule=rule.name, error=answer.failed[:MAX_ERROR])
        if answer.anonymous:
            return why(Code.ACTIVITY_UNATTRIBUTED, rule=rule.name, samples=answer.anonymous)
        for pod in pods:
            uids = answer.pods.get(PodKey(pod.ref.namespace or "", pod.ref.name))
            # A sample with another UID is an earlier pod's of the same name; one with none is this name's.
            if uids and ("" in uids or pod.ref.uid in uids):
                return why(Code.ACTIVITY, rule=rule.name, pod=pod.ref.name)
    if act.min_running:
        for pod in pods:
            if pod.phase == "Running" and pod.started is not None and now - pod.started < act.min_running:
                return why(Code.ACTIVITY_FLOOR, pod=pod.ref.name, running=now - pod.started, floor=act.min_running)
    return None
