"""A crash-looping GPU pod through the lifecycle, its exit reason and the node agent's OOM details quoted.

Aspects covered:
- a Job whose GPU pod restarts over and over (CrashLoopBackOff, last exit OOMKilled) is marked
  and its owner warned with the restarts, the exit reason, the memory limit and what the node
  agent saw (single processes killed, and what singleProcessOOMKill means);
- a GPU pod that runs normally under the same policy is never touched;
- restarts are judged per container, as the kubelet reports them, never summed: a trainer with
  four old restarts beside a native sidecar that restarted once is not crash-looping, nor one
  beside a sidecar the policy lists in ignoreContainers (unlisted, that sidecar is judged like any
  container), nor a trainer with seven restarts from long ago whose last run lasted days;
  `janitor explain` says which applied, and the crash-looping Job's warning names its container.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def gpu_job(batch: client.BatchV1Api, namespace: str, name: str, notes: dict[str, str],
            sidecars: Sequence[client.V1Container] = (), init: Sequence[client.V1Container] = ()) -> None:
    batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name=name, annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1JobSpec(backoff_limit=100, template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": name}, annotations=notes),
            spec=client.V1PodSpec(restart_policy="OnFailure", init_containers=list(init) or None, containers=[
                client.V1Container(name="train", image="x", resources=client.V1ResourceRequirements(
                    limits={"nvidia.com/gpu": "1", "memory": "8Gi"})), *sidecars])))))


def stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def container_status(name: str, restarts: int, running_since: datetime.datetime,
                     last_run: tuple[datetime.datetime, datetime.datetime] | None = None) -> dict[str, Any]:
    """A running container's status as the kubelet reports it; `last_run` is its last run's start and end."""
    status: dict[str, Any] = {"name": name, "image": "x", "imageID": "", "ready": True, "started": True,
                              "restartCount": restarts, "state": {"running": {"startedAt": stamp(running_since)}}}
    if last_run:
        status["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": stamp(last_run[0]),
                                              "finishedAt": stamp(last_run[1])}}
    return status


def kubelet_reports(core: client.CoreV1Api, namespace: str, app: str, containers: list[dict[str, Any]],
                    init: list[dict[str, Any]] | None = None) -> None:
    """Write a pod's container statuses through the apiserver, as its kubelet would (kwok plays the
    kubelet only for the states its stages know)."""
    [pod] = core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
    status: dict[str, Any] = {"containerStatuses": containers}
    if init is not None:
        status["initContainerStatuses"] = init
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": status})


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


def crash_policy(tmp_path: Path, namespace: str, extra: str = "") -> Path:
    policy = tmp_path / "crash.yaml"
    policy.write_text(f"""policies:
- name: crash-looping-gpu
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers: {{crashLoop: {{restarts: 5, window: 1h{extra}}}}}
  lifecycle: {{warnBefore: 1h, action: suspend}}
""")
    return policy


def cycle_marks(kube, sandbox, namespace: str, policy: Path) -> set[str]:
    """One cycle under the policy; the Jobs it marked."""
    janitor = Runner(kube, build(
        namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
        prometheus_url=sandbox.prometheus_url, slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
        lifecycle=LifecycleSettings(pace=datetime.timedelta(0))))
    janitor.run_cycle()
    return {job.metadata.name for job in client.BatchV1Api(kube).list_namespaced_job(namespace).items
            if a.POLICY in (job.metadata.annotations or {})}


def explain(sandbox, namespace: str, policy: Path, job: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "janitor.cli", "explain", f"Job/{namespace}/{job}", "--kubeconfig",
         str(sandbox.kubeconfig), "--namespaces", namespace, "--state-namespace", namespace,
         "--policies", str(policy), "--prometheus-url", sandbox.prometheus_url],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def running(core: client.CoreV1Api, namespace: str, count: int) -> None:
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == count,
               timeout=60, what=f"{count} pods Running")


MINUTE = datetime.timedelta(minutes=1)


def flapping(name: str, now: datetime.datetime) -> dict[str, Any]:
    """A sidecar restarted 9 times, the last a moment ago, running again."""
    return container_status(name, 9, now - MINUTE, (now - 3 * MINUTE, now - 2 * MINUTE))


def test_a_native_sidecars_restarts_or_an_old_count_never_make_a_crash_loop(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, slack: SlackStandInControl) -> None:
    batch = client.BatchV1Api(kube)
    gpu_job(batch, namespace, "native", {}, init=[client.V1Container(name="proxy", image="x", restart_policy="Always")])
    gpu_job(batch, namespace, "veteran", {})
    gpu_job(batch, namespace, "looping", {CRASH: "Error"})
    running(core, namespace, 3)
    now = datetime.datetime.now(datetime.timezone.utc)
    # Its trainer restarted four times two days ago and runs since; its proxy restarted once just now.
    days_ago = now - datetime.timedelta(days=2)
    trainer = container_status("train", 4, days_ago, (days_ago - 10 * MINUTE, days_ago - 5 * MINUTE))
    proxy = container_status("proxy", 1, now - MINUTE, (now - 3 * MINUTE, now - 2 * MINUTE))
    kubelet_reports(core, namespace, "native", [trainer], init=[proxy])
    # Seven restarts when its node kept failing days ago, then three days of training, one failure
    # two minutes ago, and running again since.
    days_long = (now - datetime.timedelta(days=3), now - 2 * MINUTE)
    kubelet_reports(core, namespace, "veteran", [container_status("train", 7, now - MINUTE, days_long)])

    policy = crash_policy(tmp_path, namespace)
    slack.add_user(*ALICE)
    assert cycle_marks(kube, sandbox, namespace, policy) == {"looping"}
    [post] = [str(r.params) for r in slack.requests("chat.postMessage") if namespace in str(r.params)]
    assert "container train restarted 7 times" in post and "now waiting (CrashLoopBackOff)" in post

    native, veteran = explain(sandbox, namespace, policy, "native"), explain(sandbox, namespace, policy, "veteran")
    for shown in (native, veteran):
        assert "restarted, but none of its 1 GPU pods is crash-looping" in shown, shown
    assert "not crash-looping: container train: 4 restarts, fewer than 5; sidecar restarts not counted: " \
           "proxy (1 restart)" in native
    assert "container train: 7 restarts in its life, but its last run lasted 2d23h" in veteran
    assert "a failure, not a loop" in veteran


def test_a_sidecar_the_policy_lists_is_not_counted(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path) -> None:
    batch = client.BatchV1Api(kube)
    gpu_job(batch, namespace, "meshed", {}, sidecars=[client.V1Container(name="istio-proxy", image="x")])
    running(core, namespace, 1)
    now = datetime.datetime.now(datetime.timezone.utc)
    kubelet_reports(core, namespace, "meshed", [container_status("train", 0, now - 30 * MINUTE),
                                                flapping("istio-proxy", now)])
    listed = crash_policy(tmp_path, namespace, ", ignoreContainers: [istio-proxy]")
    shown = explain(sandbox, namespace, listed, "meshed")
    assert "sidecar restarts not counted: istio-proxy (9 restarts)" in shown, shown
    assert cycle_marks(kube, sandbox, namespace, listed) == set()
    # Unlisted, it is a container like any other: its nine restarts within the hour are a loop.
    unlisted = crash_policy(tmp_path, namespace)
    assert "container istio-proxy: 9 restarts" in explain(sandbox, namespace, unlisted, "meshed")
