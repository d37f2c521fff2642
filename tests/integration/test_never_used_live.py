"""The never-used window on the sandbox: a job idle since it started gets the shorter notice.

Aspects covered:
- with dcgm-exporter labelling series with pod UIDs, a Job whose pod started 45 minutes ago and
  whose GPU and CPU stayed idle since is marked "unused", its owner warned in those words, with the
  never-used notice (1 minute); a Job idle for 3 hours is marked with the lifecycle's (10 minutes);
- past the shorter deadline the never-used Job is deleted and the other is not;
- both read from a real Prometheus (2.x or 3.x) over backfilled history and live scrapes.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from kubernetes import client
from test_lifecycle import (  # noqa: F401 (alice and prometheus are fixtures)
    alice,
    janitor_for,
    jobs,
    notes_of,
    prometheus,
    until_due,
)

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import ALL_NODES, Kind, Segment
from devenv.nodes import STARTED_AT
from devenv.procs import wait_until
from janitor import annotations as a
from janitor.why_note import WhyNote

H, M = 3600, 60
OWNER = "alice@lab.example"


def create_job(kube, namespace: str, name: str, started_ago: float) -> None:
    started = datetime.datetime.fromtimestamp(time.time() - started_ago, datetime.timezone.utc)
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": name},
                                     annotations={STARTED_AT: started.strftime("%Y-%m-%dT%H:%M:%SZ")}),
        spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(
            name="main", image="x", resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]))
    client.BatchV1Api(kube).create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name=name, annotations={"janitor/owner": OWNER}),
        spec=client.V1JobSpec(template=template)))


def write(path: Path, namespace: str) -> Path:
    path.write_text(f"""policies:
- name: idle-gpu
  mode: enforce
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    idleGpu: {{threshold: 5, window: 2h, neverUsed: {{after: 30m, warnBefore: 1m}}}}
  lifecycle: {{warnBefore: 10m, remindEvery: 0s}}
""")
    return path


def test_a_job_never_used_gets_the_shorter_notice(
        kube, core, namespace, sandbox, tmp_path, exporter_values: ValuesControl, slack, alice,  # noqa: F811
        prometheus) -> None:  # noqa: F811
    create_job(kube, namespace, "fresh", 45 * M)
    create_job(kube, namespace, "worked", 3 * H)
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == 2,
               timeout=90, what="2 pods Running")
    now = time.time()
    exporter_values.add_history(Kind.POD_UID, (ALL_NODES,), [Segment(now - 4 * H, now + H, 1)])
    for pod in core.list_namespaced_pod(namespace).items:
        exporter_values.add_history(Kind.GPU_UTIL, (namespace, pod.metadata.name, None), [Segment(now - 4 * H, now, 0)])
        exporter_values.set_gpu_util(namespace, pod.metadata.name, 0)
    janitor = janitor_for(kube, sandbox, namespace, write(tmp_path / "p.yaml", namespace), prometheus())

    first = janitor.run_cycle()
    shown = [(f.subject.name, f.policy, str(f.trigger), str(f.state), str(f.reason)[:300])
             for f in first.plan.findings]
    shown += [(c.workload.name, str(c.step), str(c.why)[:300]) for c in first.plan.changes]
    fresh, worked = notes_of(kube, namespace, "fresh"), notes_of(kube, namespace, "worked")
    assert fresh.get(a.POLICY) == "idle-gpu" and worked.get(a.POLICY) == "idle-gpu", shown
    marked_at = a.parse_expires(fresh[a.MARKED_AT])
    assert a.parse_expires(fresh[a.DEADLINE]) - marked_at <= datetime.timedelta(minutes=2), fresh
    assert a.parse_expires(worked[a.DEADLINE]) - a.parse_expires(worked[a.MARKED_AT]) >= datetime.timedelta(
        minutes=10), worked
    note = WhyNote.parse(fresh[a.WHY])
    assert note is not None and note.words.startswith("never used since it started 4"), note
    channel = fresh[a.WARNED_VIA].split()[1].split("/")[0]
    text = " ".join(m.text + str(m.blocks) for m in slack.messages(channel))
    assert "never used since it started" in text and "2 of your workloads hold 2 GPUs idle" in text, text

    until_due(notes_of(kube, namespace, "fresh"))
    second = janitor.run_cycle()
    assert [str(r.outcome) for r in second.results if r.action.target.name == "fresh"] == ["done"]
    assert jobs(kube, namespace) == {"worked"}
