"""Wrongful actions the janitor must not take, on the sandbox: a real apiserver, Prometheus and the
Slack stand-in, cycles as the daemon runs them.

Aspects covered:
- in use is a fact about the workload: an enforcing idle-CPU policy (and no idle-GPU policy) never
  marks a Job whose GPU is busy, while an idle one beside it is marked;
- owners who change: a Job warned to alice and handed to bob before its deadline is not reclaimed
  at the deadline; bob gets a warning of his own (his first message is never "done");
- CronJobs: with `--cronjob-target job`, a CronJob's `janitor/opt-out` keeps its Jobs from being
  marked; with `--cronjob-target cronjob`, suspending a CronJob suspends the Job it is running
  (its pods stop) and the owner is told once.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from kubernetes import client
from test_lifecycle import (  # noqa: F401
    ALICE,
    create_job,
    events,
    gpu_template,
    history,
    janitor_for,
    jobs,
    notes_of,
    prometheus,
    until_due,
    write_policy,
)

from devenv.procs import wait_until
from janitor import annotations as a
from janitor.decide.selection import CronJobMode
from janitor.decide.triggers import registry

BOB = ("bob@lab.example", "U0BOB0001", "bob")


def cpu_policy(path: Path, namespace: str) -> Path:
    path.write_text(f"""policies:
- name: idle-cpu
  mode: enforce
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    idleCpu: {{cores: 1, window: 2h, minCoverage: 0.8}}
  lifecycle: {{warnBefore: 1h, remindEvery: 0s}}
""")
    return path


def janitor_marks(notes: dict[str, str]) -> list[str]:
    return [k for k in notes if k.startswith("janitor/") and k != "janitor/owner" and k != a.OPT_OUT]


def test_an_idle_cpu_policy_never_marks_a_busy_gpu_no_policy_reads(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, prometheus) -> None:  # noqa: F811
    slack.add_user(*ALICE)
    create_job(kube, namespace, "busy-gpu")
    create_job(kube, namespace, "idle-gpu")
    history(core, namespace, exporter_values, {"busy-gpu": 97, "idle-gpu": 0})  # both use ~0 CPU
    janitor = janitor_for(kube, sandbox, namespace, cpu_policy(tmp_path / "p.yaml", namespace), prometheus())

    result = janitor.run_cycle()
    assert janitor_marks(notes_of(kube, namespace, "busy-gpu")) == []
    assert notes_of(kube, namespace, "idle-gpu").get(a.POLICY) == "idle-cpu"
    busy = [f for f in result.plan.findings if f.subject.name == "busy-gpu" and f.policy == "idle-cpu/in-use"]
    assert [(str(f.trigger), registry.word(f)) for f in busy] == [("idleGpu", "busy")]


def test_a_workload_handed_to_another_owner_is_not_reclaimed_before_they_are_warned(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, prometheus) -> None:  # noqa: F811
    slack.add_user(*ALICE)
    slack.add_user(*BOB)
    create_job(kube, namespace, "train")
    history(core, namespace, exporter_values, {"train": 0})
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="15s", minGrace="15s")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    notes = notes_of(kube, namespace, "train")
    assert notes[a.WARNED_TO] == f"email:{ALICE[0]}"
    client.BatchV1Api(kube).patch_namespaced_job("train", namespace, {"metadata": {"annotations": {
        "janitor/owner": BOB[0]}}})  # the Job is handed over to bob
    until_due(notes)

    result = janitor.run_cycle()
    assert "train" in jobs(kube, namespace)
    assert not [r for r in result.results if r.action.target.name == "train"]
    told = notes_of(kube, namespace, "train")
    assert told[a.WARNED_TO] == f"email:{BOB[0]}"
    bobs = slack.messages(told[a.WARNED_VIA].split()[1].split("/")[0])
    assert len(bobs) == 1 and "will be deleted" in bobs[0].text
    assert a.parse_expires(told[a.DEADLINE]) >= a.parse_expires(told[a.WARNED_AT]) + datetime.timedelta(seconds=15)

    until_due(told)
    janitor.run_cycle()  # bob was warned with the full grace: now it is due
    assert "train" not in jobs(kube, namespace)


def create_cronjob(kube, namespace: str, name: str, notes: dict[str, str]) -> client.V1CronJob:
    """A CronJob that runs at new year only, and the run it started: a Job it controls, running a GPU pod."""
    batch = client.BatchV1Api(kube)
    cron = batch.create_namespaced_cron_job(namespace, client.V1CronJob(
        metadata=client.V1ObjectMeta(name=name, annotations={"janitor/owner": ALICE[0], **notes}),
        spec=client.V1CronJobSpec(schedule="0 0 1 1 *", job_template=client.V1JobTemplateSpec(
            spec=client.V1JobSpec(template=gpu_template(name))))))
    owner = client.V1OwnerReference(api_version="batch/v1", kind="CronJob", name=name, uid=cron.metadata.uid,
                                    controller=True, block_owner_deletion=True)
    batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name=f"{name}-29000000", owner_references=[owner]),
        spec=client.V1JobSpec(template=gpu_template(name))))
    return cron


def test_an_opted_out_cronjobs_run_is_never_marked(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, prometheus) -> None:  # noqa: F811
    slack.add_user(*ALICE)
    create_cronjob(kube, namespace, "nightly", {a.OPT_OUT: "true"})
    history(core, namespace, exporter_values, {"nightly": 0})
    janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace), prometheus())
    janitor.run_cycle()
    assert janitor_marks(notes_of(kube, namespace, "nightly-29000000")) == []
    assert "IdleMarked" not in events(core, namespace, "nightly-29000000")


def test_suspending_a_cronjob_stops_the_run_it_left_going(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, prometheus) -> None:  # noqa: F811
    slack.add_user(*ALICE)
    create_cronjob(kube, namespace, "nightly", {})
    history(core, namespace, exporter_values, {"nightly": 0})
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="10s", action="suspend")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus(), cronjob_target=CronJobMode.CRONJOB)
    batch = client.BatchV1Api(kube)

    janitor.run_cycle()
    notes = dict(batch.read_namespaced_cron_job("nightly", namespace).metadata.annotations or {})
    assert notes.get(a.POLICY) == "idle-gpu"
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    until_due(notes)
    result = janitor.run_cycle()
    acted = [(r.action.target.name, str(r.outcome), [j.name for j in r.action.also]) for r in result.results]
    assert acted == [("nightly", "done", ["nightly-29000000"])]
    assert batch.read_namespaced_cron_job("nightly", namespace).spec.suspend is True
    assert batch.read_namespaced_job("nightly-29000000", namespace).spec.suspend is True
    wait_until(lambda: not [p for p in core.list_namespaced_pod(namespace).items
                            if p.metadata.deletion_timestamp is None], timeout=60, what="the run's pods gone")
    time.sleep(1)
    janitor.run_cycle()  # nothing more: not marked again for the run it stopped
    warning, done = slack.messages(channel)
    assert "suspended" in (done.text + str(done.blocks)).lower()
    assert janitor_marks(dict(batch.read_namespaced_cron_job("nightly", namespace).metadata.annotations or {})) == []
