"""A Job Kueue admits, stopped through its Workload, on the sandbox's apiserver serving Kueue's own
Workload CRD (v1beta1 and v1beta2). No Kueue controller runs: a small loop in the test plays its
part, as its job reconciler does: a Job whose Workload is active is un-suspended, one whose
Workload is deactivated is suspended (evicted as Deactivated, its quota released).

Aspects covered:
- suspending the Job itself does not stick (the loop un-suspends it at once), which is why the
  janitor never does that to a Job Kueue admits;
- an idle Job Kueue admits is marked and warned under a suspend policy, the warning naming the
  command that resumes it: the Workload's `spec.active: true`;
- at the deadline the janitor deactivates the Workload (`spec.active: false`, read back at both API
  versions) and writes nothing to the Job's spec; Kueue's part stops the Job, and it stays stopped;
- the next cycle checks the reclaim on the Workload: it held, the owner hears "done" with the same
  resume command, and never that it was undone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from test_lifecycle import (  # noqa: F401 (alice and prometheus are fixtures)
    ALICE,
    alice,
    gpu_template,
    history,
    janitor_for,
    notes_of,
    prometheus,
    until_due,
    write_policy,
)

from devenv import crds
from devenv.procs import wait_until
from janitor import annotations as a

GROUP, PLURAL = "kueue.x-k8s.io", "workloads"
QUEUE = {"kueue.x-k8s.io/queue-name": "team-gpus"}


@pytest.fixture
def queued_job(kube, namespace: str) -> str:  # noqa: ANN001
    """Job `train` with Kueue's queue label and its Workload (owned by it, as Kueue makes it); the
    Workload's name."""
    crds.install(kube)  # a sandbox started before these CRDs were added gets them here
    job = client.BatchV1Api(kube).create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="train", labels=QUEUE, annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1JobSpec(template=gpu_template("train"))))
    name = f"job-train-{job.metadata.uid[:5]}"
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, "v1beta2", namespace, PLURAL, {
        "apiVersion": f"{GROUP}/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": job.metadata.uid}, "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job.metadata.uid, "controller": True,
            "blockOwnerDeletion": True}]},
        "spec": {"queueName": "team-gpus", "active": True, "podSets": [{"name": "main", "count": 1, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}}]},
    })
    return name


@pytest.fixture
def kueue_part(kube, namespace: str, queued_job: str) -> Iterator[list[str]]:  # noqa: ANN001
    """Kueue's job reconciler, played: the Job follows its Workload's spec.active. Yields what it did."""
    batch, custom, stop, did = client.BatchV1Api(kube), client.CustomObjectsApi(kube), threading.Event(), []

    def loop() -> None:
        while not stop.wait(0.2):
            try:
                workload = custom.get_namespaced_custom_object(GROUP, "v1beta2", namespace, PLURAL, queued_job)
                job = batch.read_namespaced_job("train", namespace)
            except client.ApiException:
                continue
            active = workload["spec"].get("active", True) is not False
            if active == bool(job.spec.suspend):  # admitted and suspended, or deactivated and running
                batch.patch_namespaced_job("train", namespace, {"spec": {"suspend": not active}},
                                           field_manager="kueue")
                did.append("unsuspended" if active else "stopped")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield did
    stop.set()
    thread.join(5)


def texts(slack, channel: str) -> list[str]:  # noqa: ANN001
    return [m.text + str(m.blocks) for m in slack.messages(channel)]


def test_a_job_kueue_admits_is_stopped_through_its_workload_and_stays_stopped(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus,  # noqa: F811
        queued_job, kueue_part) -> None:
    batch, custom = client.BatchV1Api(kube), client.CustomObjectsApi(kube)
    # Suspending the Job itself does not stick: Kueue un-suspends a Job whose Workload is active.
    batch.patch_namespaced_job("train", namespace, {"spec": {"suspend": True}})
    wait_until(lambda: kueue_part == ["unsuspended"], timeout=30, what="Kueue's part un-suspending the Job")
    history(core, namespace, exporter_values, {"train": 0})
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s", action="suspend")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())
    resume = (f"kubectl -n {namespace} patch workloads.kueue.x-k8s.io/{queued_job} --type=merge "
              "-p \\'{\"spec\":{\"active\":true}}\\'")  # as the message's blocks print it

    janitor.run_cycle()
    notes = notes_of(kube, namespace, "train")
    assert notes[a.WARNED_OF].startswith("suspend "), janitor.explain()
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    [warning] = texts(slack, channel)
    assert resume in warning
    until_due(notes)
    janitor.run_cycle()  # the Workload deactivated, the reclaim recorded on the Job

    for version in ("v1beta2", "v1beta1"):  # one object, both versions served
        workload = custom.get_namespaced_custom_object(GROUP, version, namespace, PLURAL, queued_job)
        assert workload["spec"]["active"] is False, (version, janitor.explain())
    job = batch.read_namespaced_job("train", namespace)
    assert a.RECLAIMED in (job.metadata.annotations or {}) and a.POLICY not in (job.metadata.annotations or {})
    assert not any(f.manager == "kube-idle-janitor" and "f:spec" in (f.fields_v1 or {})
                   for f in job.metadata.managed_fields or []), "the janitor wrote the Job's spec"
    wait_until(lambda: bool(batch.read_namespaced_job("train", namespace).spec.suspend), timeout=30,
               what="Kueue's part stopping the Job")
    time.sleep(2)  # it stays stopped: nothing un-suspends a Job whose Workload is deactivated
    assert batch.read_namespaced_job("train", namespace).spec.suspend is True
    assert kueue_part == ["unsuspended", "stopped"]

    janitor.run_cycle()  # the reclaim held: checked on the Workload, "done" said
    assert a.RECLAIMED not in notes_of(kube, namespace, "train"), janitor.explain()
    said = texts(slack, channel)
    assert len(said) == 2 and "was *suspended*" in said[1] and resume in said[1], said
    assert not any("Not held" in t for t in said)
    assert batch.read_namespaced_job("train", namespace).spec.suspend is True and kueue_part[-1] == "stopped"


# -- quota held by a Workload with no pods (reservedQuota) ------------------------------------------------------


def _ago(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds))


def _held_job(kube, namespace: str, name: str, *, held_for: float, suspended: bool = True) -> str:  # noqa: ANN001
    """Job `name` as Kueue leaves one after a PodsReadyTimeout eviction (kueue#14811): suspended, no
    pod, its Workload still QuotaReserved and Admitted (and Evicted) since `held_for` seconds ago,
    counting 4 GPUs. The Workload's name."""
    job = client.BatchV1Api(kube).create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name=name, labels=QUEUE, annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1JobSpec(suspend=suspended, template=gpu_template(name))))
    workload = f"job-{name}-{job.metadata.uid[:5]}"
    custom = client.CustomObjectsApi(kube)
    custom.create_namespaced_custom_object(GROUP, "v1beta2", namespace, PLURAL, {
        "apiVersion": f"{GROUP}/v1beta2", "kind": "Workload",
        "metadata": {"name": workload, "labels": {"kueue.x-k8s.io/job-uid": job.metadata.uid}, "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job.metadata.uid, "controller": True,
            "blockOwnerDeletion": True}]},
        "spec": {"queueName": "team-gpus", "active": True, "podSets": [{"name": "main", "count": 1, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}}]},
    })
    since = _ago(held_for)
    conditions = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in "
         "ClusterQueue team-gpus", "lastTransitionTime": since},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted",
         "lastTransitionTime": since},
        {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout", "message": "Exceeded the PodsReady "
         "timeout", "lastTransitionTime": _ago(held_for / 2)},
    ]
    admission = {"clusterQueue": "team-gpus", "podSetAssignments": [
        {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "a100"}, "resourceUsage": {"nvidia.com/gpu": "4"}}]}
    custom.patch_namespaced_custom_object_status(GROUP, "v1beta2", namespace, PLURAL, workload, {
        "status": {"conditions": conditions, "admission": admission}})
    return workload


def _write_quota_policy(path, namespace: str, action: str) -> object:  # noqa: ANN001
    path.write_text(f"""policies:
- name: reserved-quota
  mode: enforce
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    reservedQuota: {{after: 1h}}
  lifecycle: {{warnBefore: 5s, remindEvery: 0s, action: {action}}}
""")
    return path


def test_quota_held_with_no_pods_is_reported_and_its_workload_deactivated_after_the_warning(
        kube, core, namespace, sandbox, tmp_path, slack, alice, prometheus) -> None:  # noqa: F811
    crds.install(kube)
    custom, batch = client.CustomObjectsApi(kube), client.BatchV1Api(kube)
    stuck = _held_job(kube, namespace, "stuck", held_for=3 * 3600)
    _held_job(kube, namespace, "young", held_for=60)  # held a minute: pods may be on their way
    running = _held_job(kube, namespace, "running", held_for=3 * 3600, suspended=False)  # its pod runs
    wait_until(lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items),
               timeout=60, what="the running Job's pod Running")
    policy = _write_quota_policy(tmp_path / "p.yaml", namespace, "suspend")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    notes = notes_of(kube, namespace, "stuck")
    assert notes.get(a.POLICY) == "reserved-quota" and notes[a.WARNED_OF].startswith("suspend "), janitor.explain()
    assert "has held quota" in notes[a.REASON] and "evicted it without releasing it" in notes[a.REASON]
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    [warning] = texts(slack, channel)
    assert "holding Kueue quota with no pods" in warning and f"workloads.kueue.x-k8s.io/{stuck}" in warning, warning
    for other in ("young", "running"):
        assert not any(k.startswith("janitor/") and k != "janitor/owner" for k in notes_of(kube, namespace, other))

    until_due(notes)
    janitor.run_cycle()  # re-checked fresh, then deactivated through its Workload
    assert custom.get_namespaced_custom_object(GROUP, "v1beta2", namespace, PLURAL, stuck)["spec"]["active"] is False
    assert a.RECLAIMED in notes_of(kube, namespace, "stuck")
    assert custom.get_namespaced_custom_object(GROUP, "v1beta2", namespace, PLURAL, running)["spec"]["active"] is True
    assert batch.read_namespaced_job("running", namespace).spec.suspend is not True

    janitor.run_cycle()  # the Job was stopped already: deactivated holds, its owner hears it is done
    said = texts(slack, channel)
    assert len(said) == 2 and "was *suspended*" in said[1], said


def test_quota_held_is_not_acted_on_when_a_pod_appears_before_the_deadline(
        kube, core, namespace, sandbox, tmp_path, slack, alice, prometheus) -> None:  # noqa: F811
    crds.install(kube)
    custom, batch = client.CustomObjectsApi(kube), client.BatchV1Api(kube)
    stuck = _held_job(kube, namespace, "stuck", held_for=3 * 3600)
    janitor = janitor_for(kube, sandbox, namespace, _write_quota_policy(tmp_path / "p.yaml", namespace, "suspend"),
                          prometheus())
    janitor.run_cycle()
    notes = notes_of(kube, namespace, "stuck")
    assert notes[a.WARNED_OF].startswith("suspend "), janitor.explain()
    batch.patch_namespaced_job("stuck", namespace, {"spec": {"suspend": False}})  # Kueue admitted it again
    wait_until(lambda: any(p.status.phase in ("Pending", "Running")
                           for p in core.list_namespaced_pod(namespace).items), timeout=60, what="its pod back")
    until_due(notes)
    janitor.run_cycle()
    assert custom.get_namespaced_custom_object(GROUP, "v1beta2", namespace, PLURAL, stuck)["spec"]["active"] is True
    assert a.POLICY not in notes_of(kube, namespace, "stuck"), janitor.explain()
