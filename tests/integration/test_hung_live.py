"""A stuck job on the sandbox: GPU_UTIL at 100 % while SM activity and power stay idle.

Aspects covered:
- under an enforcing hung policy that names no action, a stuck Job is marked and its owner warned
  in plain words ("looks stuck since ... on 1 GPU: the GPUs report busy, but compute and power are
  idle"), with no deadline's action named; past its deadline it is not suspended or deleted;
- a Job at 100 % GPU_UTIL whose SMs work is not marked;
- both read from Prometheus (2.x or 3.x) over the backfilled history and live scrapes.
"""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client
from test_lifecycle import (  # noqa: F401 (alice and prometheus are fixtures)
    alice,
    create_job,
    janitor_for,
    jobs,
    notes_of,
    prometheus,
    until_due,
)

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind, Segment
from devenv.procs import wait_until
from janitor import annotations as a
from janitor.why_note import WhyNote

H = 3600


def write_hung(path: Path, namespace: str) -> Path:
    path.write_text(f"""policies:
- name: stuck
  mode: enforce
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    hung: {{window: 30m, smActive: 0.2, power: 1.5, idlePowerWatts: {{"NVIDIA A100*": 55}}}}
  lifecycle: {{warnBefore: 10s, remindEvery: 0s}}
""")
    return path


def signals(core: client.CoreV1Api, namespace: str, values: ValuesControl, sm: dict[str, float]) -> None:
    """Every pod at 100 % GPU_UTIL and idle power for the last 3 hours; SM activity per app."""
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items)
               == len(sm), timeout=90, what=f"{len(sm)} pods Running")
    now = time.time()
    for pod in core.list_namespaced_pod(namespace).items:
        key, level = (namespace, pod.metadata.name, None), sm[pod.metadata.labels["app"]]
        for kind, value in ((Kind.GPU_UTIL, 100.0), (Kind.SM_ACTIVE, level), (Kind.POWER, 58.0)):
            values.add_history(kind, key, [Segment(now - 3 * H, now, value)])
            values.set(kind, key, value)


def test_a_stuck_job_is_reported_and_warned_and_not_reclaimed_by_default(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:  # noqa: F811
    create_job(kube, namespace, "stuck-job")
    create_job(kube, namespace, "working-job")
    signals(core, namespace, exporter_values, {"stuck-job": 0.02, "working-job": 0.7})
    url = prometheus()
    janitor = janitor_for(kube, sandbox, namespace, write_hung(tmp_path / "p.yaml", namespace), url)

    first = janitor.run_cycle()
    notes = notes_of(kube, namespace, "stuck-job")
    assert notes.get(a.POLICY) == "stuck", [(f.subject.name, f.state, str(f.reason)) for f in first.plan.findings]
    note = WhyNote.parse(notes[a.WHY])
    assert note is not None and note.action == "report" and note.trigger == "hung"
    assert "on 1 GPU: the GPUs report busy, but compute and power are idle" in note.words
    assert not any(k.startswith("janitor/") and k != "janitor/owner" for k in notes_of(kube, namespace, "working-job"))
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    [warning] = slack.messages(channel)
    shown = warning.text + str(warning.blocks)
    assert "stuck-job" in shown and "looks stuck since" in shown and "compute and power are idle" in shown
    assert "This policy only reports it: nothing will be done to it." in shown and "working-job" not in shown

    until_due(notes)
    result = janitor.run_cycle()
    assert not [r for r in result.results if r.action.target.name == "stuck-job"]
    assert jobs(kube, namespace) == {"stuck-job", "working-job"}
    job = client.BatchV1Api(kube).read_namespaced_job("stuck-job", namespace)
    assert not job.spec.suspend
    assert notes_of(kube, namespace, "stuck-job").get(a.POLICY) == "stuck"  # still marked, still reported
