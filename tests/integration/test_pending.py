"""Stuck Pending workloads through the lifecycle, on the sandbox's real scheduler and kwok nodes.

Aspects covered:
- a Job that cannot be scheduled (its node is full) is marked after `after` in that state, its
  owner warned with the scheduler's message, and deleted at the deadline;
- a Deployment whose image cannot be pulled goes the same way, ImagePullBackOff quoted;
- a scheduling-gated pod (Kueue style) is left alone;
- a pod asking for 16 GPUs on 4-GPU nodes is reported as never fitting on the first cycle, to its
  owner and in the admins' report.
"""

from __future__ import annotations

import datetime
import time

from kubernetes import client
from runner import Runner
from runner import settings as build

from devenv.nodes import WAITING
from devenv.procs import wait_until
from devenv.slack_standin import SlackStandInControl
from janitor import annotations as a
from janitor.decide.lifecycle import LifecycleSettings

ALICE = ("alice@lab.example", "U0ALICE1", "alice")
NODE = "cpu-node-1"


def container(cpu: str = "100m", gpus: int = 0) -> client.V1Container:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
    return client.V1Container(name="main", image="registry.example/train:1",
                              resources=client.V1ResourceRequirements(requests={"cpu": cpu}, limits=limits))


def pinned(cpu: str, labels: dict[str, str], notes: dict[str, str] | None = None,
           restart: str = "Never") -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels, annotations=notes),
        spec=client.V1PodSpec(restart_policy=restart, node_selector={"kubernetes.io/hostname": NODE},
                              containers=[container(cpu)]))


def test_stuck_pending_workloads_go_through_the_lifecycle(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path, slack: SlackStandInControl) -> None:
    slack.add_user(*ALICE)
    owner = {"janitor/owner": ALICE[0]}
    batch, apps = client.BatchV1Api(kube), client.AppsV1Api(kube)
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="filler"),
        spec=client.V1PodSpec(node_selector={"kubernetes.io/hostname": NODE}, containers=[container("20")])))
    wait_until(lambda: core.read_namespaced_pod("filler", namespace).status.phase == "Running", timeout=60,
               what="the filler pod Running")
    batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="queued", annotations=owner),
        spec=client.V1JobSpec(template=pinned("20", {"app": "queued"}))))
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="pull-stuck", annotations=owner),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "pull-stuck"}),
                                     template=pinned("100m", {"app": "pull-stuck"}, {WAITING: "ImagePullBackOff"},
                                                     "Always"))))
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="gated", annotations=owner),
        spec=client.V1PodSpec(scheduling_gates=[client.V1PodSchedulingGate(name="kueue.x-k8s.io/admission")],
                              containers=[container()])))
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="huge", annotations=owner),
        spec=client.V1PodSpec(containers=[container(gpus=16)])))

    def state(name: str) -> str:
        pods = core.list_namespaced_pod(namespace).items
        found = [p for p in pods if p.metadata.name == name or p.metadata.name.startswith(f"{name}-")]
        conditions = {c.type: c for c in (found[0].status.conditions or [])} if found else {}
        waiting = [c.state.waiting.reason for c in (found[0].status.container_statuses or []) if c.state.waiting] \
            if found else []
        return (conditions.get("PodScheduled").reason or "scheduled") if conditions.get("PodScheduled") and \
            conditions["PodScheduled"].status == "False" else (waiting[0] if waiting else "")

    wait_until(lambda: (state("queued"), state("pull-stuck"), state("gated"), state("huge")) ==
               ("Unschedulable", "ImagePullBackOff", "SchedulingGated", "Unschedulable"),
               timeout=60, what="the pods in their stuck states")

    policy = tmp_path / "pending.yaml"
    policy.write_text(f"""policies:
- name: stuck
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers: {{pending: {{after: 8s}}}}
  lifecycle: {{warnBefore: 6s, remindEvery: 0s}}
""")
    janitor = Runner(kube, build(
        namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
        prometheus_url=sandbox.prometheus_url, slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
        lifecycle=LifecycleSettings(pace=datetime.timedelta(0)), admin_channel="#gpu-admins"))

    def notes(kind: str, name: str) -> dict[str, str]:
        if kind == "job":
            return dict(batch.read_namespaced_job(name, namespace).metadata.annotations or {})
        if kind == "deployment":
            return dict(apps.read_namespaced_deployment(name, namespace).metadata.annotations or {})
        return dict(core.read_namespaced_pod(name, namespace).metadata.annotations or {})

    janitor.run_cycle()  # never fitting: marked and its owner told at once
    huge = notes("pod", "huge")
    assert huge[a.POLICY] == "stuck" and "nvidia.com/gpu: asks 16, a node has 4" in huge[a.REASON]
    assert a.POLICY not in notes("job", "queued") and a.POLICY not in notes("deployment", "pull-stuck")
    texts = " ".join(str(r.params) for r in slack.requests("chat.postMessage"))
    assert "huge" in texts and "asks 16" in texts and "stuck Pending" in texts
    [admins] = slack.messages("C0ADMINS")  # and the admins see it in their report
    assert "Workloads that can never fit" in str(admins.blocks) and f"Pod/{namespace}/huge" in str(admins.blocks)

    time.sleep(9)
    second = janitor.run_cycle()  # the never-fitting pod's deadline (6 s after the warning) has passed
    assert {r.action.target.name: str(r.outcome) for r in second.results} == {"huge": "done"}
    queued, pulling = notes("job", "queued"), notes("deployment", "pull-stuck")
    assert "Insufficient cpu" in queued[a.REASON] and "ImagePullBackOff" in pulling[a.REASON]
    assert a.POLICY not in notes("pod", "gated")
    texts = " ".join(str(r.params) for r in slack.requests("chat.postMessage"))
    assert "Insufficient cpu" in texts and "ImagePullBackOff" in texts

    deadline = max(a.parse_expires(n[a.EXPIRES]) for n in (queued, pulling))
    time.sleep(max(0.0, deadline.timestamp() - time.time()) + 1.5)
    result = janitor.run_cycle()
    done = {r.action.target.name: str(r.outcome) for r in result.results}
    assert done == {"queued": "done", "pull-stuck": "done"}, done
    wait_until(lambda: {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == {"filler", "gated"},
               timeout=60, what="the stuck workloads gone, the gated pod and the filler kept")
