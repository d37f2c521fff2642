"""Suspends through Kueue: the paths a review found that stopped, or told, what a careful admin would not.

Aspects covered:
- a CronJob whose running Job Kueue admits is not suspended (Kueue would un-suspend the Job);
- the apiserver's guard covers the Workloads the janitor may patch (protected namespaces);
- a Job Kueue admits without its queue label: the warning names the Workload the suspend goes through;
- a Workload already deactivated (by an admin, or by Kueue) is not claimed as the janitor's suspend;
- RayCluster is no default kind: a policy naming no kinds does not start reclaiming RayClusters;
- a switch whose record on the Job cannot be written is switched back: nothing done, nothing told wrong.
"""

from __future__ import annotations

import dataclasses
import pathlib
import uuid
from types import SimpleNamespace

import pytest
import yaml
from factories import NOW
from test_cronjobs import decide as cron_decide
from test_cronjobs import idle as cron_idle
from test_cronjobs import marked as cron_marked
from test_cronjobs import pod as cron_pod
from test_cronjobs import policy as cron_policy
from test_cronjobs import view as cron_view
from test_decide_lifecycle import DAY, H, job, marked, one
from test_kueue import DISCOVERY, FOUND, LIST_PATH, QUEUE, SUSPEND, FakeApi, _workload, due_notes, kjob

from janitor import annotations as a
from janitor import kubeapi
from janitor.act import kube
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    ContainerView,
    NamespaceView,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodView,
    ResourceKind,
    SafetyLedger,
)
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.reasons import Code
from janitor.decide.selection import CronJobMode
from janitor.observe import kueue
from janitor.policy.endings import Queued
from janitor.policy.model import Action as PolicyAction
from janitor.policy.model import IdleGpu, Lifecycle, Mode, Policy
from janitor.settings import DEFAULT_KINDS

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRONJOBS = ResourceKind("batch", "v1", "CronJob", "cronjobs")


# 1. A CronJob's running Jobs that Kueue admits are suspended directly (Kueue un-suspends them).
def test_a_cronjob_suspend_never_writes_spec_suspend_on_a_job_kueue_admits(monkeypatch: pytest.MonkeyPatch) -> None:
    cron = cron_view("CronJob", "nightly", cron_marked("uid-nightly", action="suspend", deadline=NOW - H))
    run = dataclasses.replace(cron_view("Job", "nightly-2901", owner=cron), labels=dict(QUEUE),
                              queued=Queued("v1beta2", "job-nightly-2901-ab12", "uid-wl", active=True))
    decided = cron_decide([cron, run], [cron_pod("nightly-2901-x", run)], cron_policy(PolicyAction.SUSPEND),
                          mode=CronJobMode.CRONJOB)
    assert [x for x in decided.actions if x.rule == "lifecycle"] == []
    [wait] = [c for c in decided.changes if c.workload.name == "nightly"]
    assert wait.step is Step.WAIT and wait.why.code is Code.KUEUE_RUNS and "nightly-2901" in str(wait.why)


# 2. The apiserver-side guard does not cover the new write (Kueue Workloads).
def test_every_resource_the_janitor_may_patch_or_delete_is_under_its_admission_guard() -> None:
    docs = list(yaml.safe_load_all((ROOT / "manifests/base/rbac.yaml").read_text()))
    role = next(d for d in docs
                if d and d.get("kind") == "ClusterRole" and d["metadata"]["name"] == "kube-idle-janitor")
    writable = {(g, r) for rule in role["rules"] if {"patch", "delete"} & set(rule["verbs"])
                for g in rule.get("apiGroups", []) for r in rule.get("resources", [])}
    guard = next(d for d in yaml.safe_load_all((ROOT / "manifests/base/admission-guard.yaml").read_text())
                 if d and d.get("kind") == "ValidatingAdmissionPolicy")
    guarded = {(g, r) for rule in guard["spec"]["matchConstraints"]["resourceRules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    # events, leases, configmaps state are fine to leave out; what this change added is the point here
    missing = sorted(x for x in writable - guarded if x[1] not in ("events", "leases", "nodes/status"))
    assert ("kueue.x-k8s.io", "workloads") not in missing


# 3. The warning names the Job's own resume; the act goes through a Workload found only at the re-check.
def test_the_warning_names_the_object_the_suspend_goes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi({"/apis/kueue.x-k8s.io": DISCOVERY, LIST_PATH: {"items": [_workload("job-train-3f2a1",
                                                                                          "uid-train")]}})
    monkeypatch.setattr(kubeapi, "request", fake.request)
    # Kueue admits it without a queue-name label (manageJobsWithoutQueueName, a prebuilt Workload):
    # its Workload exists and owns it all along.
    [warned] = kueue.attach(None, [job(marked(NOW - H, NOW + DAY))], namespaces={"team-a"})  # the cycle's read
    warning = one(warned, pol=SUSPEND)
    assert warning.step is Step.NOTIFY and warning.notice is not None
    [fresh] = kueue.attach(None, [job(due_notes())], every=True)  # the re-check's read at the deadline
    acted = one(fresh, pol=SUSPEND)
    assert acted.step is Step.ACT and acted.action is not None
    assert acted.action.via is not None and acted.action.via.name in warning.notice.resume_command


# 4. A Workload already deactivated (by an admin or by Kueue) is "suspended" by the janitor, which then
#    tells the owner to re-activate it.
def test_a_workload_already_deactivated_is_not_claimed_as_the_janitors_suspend() -> None:
    off = dataclasses.replace(FOUND, active=False)
    change = one(kjob(due_notes(), queued=off), pol=SUSPEND)
    assert change.step is not Step.ACT, "the janitor 'suspends' what is already inactive, and says how to undo it"


# 5. A policy that names no kinds (the shipped idle-gpu-mig example, whose action defaults to delete) must
#    not start reclaiming RayClusters after an upgrade: their pods stay unknown unless the kind is listed.
def test_a_policy_naming_no_kinds_does_not_start_deleting_rayclusters() -> None:
    assert not any(k.kind == "RayCluster" for k in DEFAULT_KINDS)
    rc = ObjectView(ObjectRef("RayCluster", "ray.io/v1", "team-a", "rc", "uid-rc"), "7", NOW - 3 * DAY, {})
    head = PodView(ObjectRef("Pod", "v1", "team-a", "rc-head", str(uuid.uuid4())), "1", {},
                   OwnerRef("RayCluster", "ray.io/v1", "rc", "uid-rc"), "gpu-node-1", "Running", NOW - 5 * H, 1,
                   containers=(ContainerView("ray-head", 4.0),))
    pol = Policy("idle-gpu-mig", (IdleGpu(),), mode=Mode.ENFORCE, lifecycle=Lifecycle())  # no kinds: any
    assert pol.lifecycle.action is PolicyAction.DELETE
    observation = Observation(NOW, (rc,), (head,), {"team-a": NamespaceView("team-a", {}, {a.OWNER: "x@lab"})},
                              evidence=cron_idle([head]))
    unlisted = plan(dataclasses.replace(observation, objects=()), [pol], SafetyLedger(), NOW, settings=PlanSettings())
    assert not [c for c in unlisted.changes if c.step is Step.MARK], "a RayCluster is reclaimed only where listed"


# 6. The switch went through, the record on the Job did not (a transient error): the next cycle finds a
#    marked Job with no pods (Kueue stopped it) and tells its owner the reclaim is cancelled.
def test_a_switched_workload_whose_record_failed_is_not_announced_as_cancelled(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    from test_kueue import JOBS, _planned

    from janitor import errors
    timeout = errors.KubeError("etcdserver: request timed out")
    fake = FakeApi({}, {"/apis/batch/v1/namespaces/team-a/jobs/train": timeout})
    real = fake.request

    def request(api, method, path, *, query=(), body=None, **kw):  # the probe passes, the real record fails
        if path.startswith("/apis/batch/") and ("dryRun", "All") in list(query):
            fake.sent.append((method, path, body, list(query)))
            return SimpleNamespace(data=b"{}", status=200, headers={})
        return real(api, method, path, query=query, body=body, **kw)
    monkeypatch.setattr(kubeapi, "request", request)
    result = kube.apply(None, _planned(), kind=JOBS)  # type: ignore[arg-type]
    switched = [b["spec"]["active"] for m, p, b, q in fake.sent if "/workloads/" in p and ("dryRun", "All") not in q]
    assert str(result.outcome) == "failed" and "switched back" in result.detail, result.detail
    assert switched == [False, True], "deactivated, then, with no record written, activated again"
