"""A crash-looping GPU pod through the lifecycle, its exit reason and the node agent's OOM details quoted.

Aspects covered:
- a Job whose GPU pod restarts over and over (CrashLoopBackOff, last exit OOMKilled) is marked
  and its owner warned with the restarts, the exit reason, the memory limit and what the node
  agent saw (single processes killed, and what singleProcessOOMKill means);
- a GPU pod that runs normally under the same policy is never touched.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from kubernetes import client
from runner import Runner
from runner import settings as build

from devenv.nodes import CRASH
from devenv.procs import wait_until
from devenv.slack_standin import SlackStandInControl
from janitor import annotations as a
from janitor.decide.lifecycle import LifecycleSettings
from janitor.node_agent.agent import AgentSettings, NodeAgent

ALICE = ("alice@lab.example", "U0ALICE1", "alice")


def gpu_job(batch: client.BatchV1Api, namespace: str, name: str, notes: dict[str, str]) -> None:
    batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name=name, annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1JobSpec(backoff_limit=100, template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": name}, annotations=notes),
            spec=client.V1PodSpec(restart_policy="OnFailure", containers=[client.V1Container(
                name="train", image="x", resources=client.V1ResourceRequirements(
                    limits={"nvidia.com/gpu": "1", "memory": "8Gi"}))])))))


def memory_events(root: Path, uid: str, oom_kill: int) -> None:
    pod_dir = root / "kubepods.slice" / f"kubepods-pod{uid.replace('-', '_')}.slice"
    container = pod_dir / f"cri-containerd-{'f' * 64}.scope"
    container.mkdir(parents=True, exist_ok=True)
    (container / "memory.oom.group").write_text("0\n")
    (pod_dir / "memory.events").write_text(f"oom 3\noom_kill {oom_kill}\noom_group_kill 0\n")


def test_crash_looping_gpu_job_is_warned_with_its_exit_and_oom_details(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, slack: SlackStandInControl) -> None:
    slack.add_user(*ALICE)
    batch = client.BatchV1Api(kube)
    gpu_job(batch, namespace, "oomy", {CRASH: "OOMKilled"})
    gpu_job(batch, namespace, "healthy", {})
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == 2,
               timeout=60, what="both pods Running")
    pod = core.list_namespaced_pod(namespace, label_selector="app=oomy").items[0]
    # The node agent saw the kills in the pod's memory cgroup and posted an Event on the Pod.
    agent = NodeAgent(kube, AgentSettings(pod.spec.node_name, tmp_path / "no-proc", tmp_path / "cgroup"))
    memory_events(tmp_path / "cgroup", pod.metadata.uid, 2)
    agent.scan_once()
    memory_events(tmp_path / "cgroup", pod.metadata.uid, 5)
    assert [k.new_kills for k in agent.scan_once().oom_kills] == [3]

    policy = tmp_path / "crash.yaml"
    policy.write_text(f"""policies:
- name: crash-looping-gpu
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers: {{crashLoop: {{restarts: 5, window: 1h}}}}
  lifecycle: {{warnBefore: 1h, action: suspend}}
""")
    janitor = Runner(kube, build(
        namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
        prometheus_url=sandbox.prometheus_url, slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
        lifecycle=LifecycleSettings(pace=datetime.timedelta(0))))
    janitor.run_cycle()
    notes = dict(batch.read_namespaced_job("oomy", namespace).metadata.annotations or {})
    assert notes[a.POLICY] == "crash-looping-gpu"
    assert "7 restarts" in notes[a.REASON] and "OOMKilled, exit code 137" in notes[a.REASON]
    assert a.POLICY not in (batch.read_namespaced_job("healthy", namespace).metadata.annotations or {})
    [post] = slack.requests("chat.postMessage")
    shown = str(post.params)
    assert "crash-looping" in shown and "memory limit 8.0 GiB" in shown
    assert "3 OOM kills" in shown and "singleProcessOOMKill" in shown and "suspend" in shown
