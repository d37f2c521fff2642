"""`janitor node-agent` on the sandbox, under its own narrow RBAC, over fake /proc and cgroup trees.

Aspects covered:
- the Node condition is Unknown (reason NodeAgentStarting) until the agent has completed --sustain
  scans since it started;
- a pod held Terminating past its grace whose UID a D-state task carries in its cgroup path gives
  the Node condition (True, naming the pod, process and wchan, the pod listed d-state) and a
  Warning Event on the Node, after --sustain scans; the condition goes back to False when the
  task is gone, the pod listed gone after --sustain scans without it, and its heartbeat moves
  every scan; the message carries
  the agent's start, its complete scans and its last scan's time; a running pod is not listed;
- a scan over a /proc without a single process writes nothing (the condition keeps its last word);
- a new oom_kill in the pod cgroup's memory.events gives a Warning Event on that Pod, saying
  single processes were killed (memory.oom.group 0);
- the message carries how many of the node's other pods the scan saw a process of (`sees=`);
- /healthz and /metrics (per node, the counts the scans caused, the pods it sees) on one port;
- the agent's ServiceAccount may not delete pods or read Secrets;
- `janitor node-agent --once` runs the same scan from the command line;
- a process of a deleted pod that keeps a (fake) GPU device open is named on the GPU condition
  (True, with the GPU's bus id, the pod's namespace and name as last listed, the process) and in
  one Warning Event on the Node, after --sustain scans; a live pod's holder is not; the
  condition goes False once the process is gone.
"""

from __future__ import annotations

import runpy
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devenv import access
from devenv.nodes import HOLD_TERMINATING
from devenv.procs import wait_until
from janitor import node_report, rbac
from janitor.node_agent.agent import AgentSettings, NodeAgent

NODE = "cpu-node-1"
CONDITION = "OrphanedDStateProcesses"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "node"
_fake = runpy.run_path(str(FIXTURES / "fake_proc.py"))
CONTAINER = "c" * 64


@pytest.fixture
def agent_api(kube: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path: Path):
    rbac_api = client.RbacAuthorizationV1Api(kube)
    name = f"node-agent-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name="node-agent")))
    rbac_api.create_cluster_role(rbac.node_agent_role(name=name))
    rbac_api.create_cluster_role_binding(
        rbac.cluster_role_binding(name=name, role=name, namespace=namespace, service_account="node-agent"))
    config = access.service_account_kubeconfig(kube, namespace, "node-agent", tmp_path / "agent.kubeconfig")
    api = access.api_client(config)
    yield api, config
    api.close()
    rbac_api.delete_cluster_role_binding(name)
    rbac_api.delete_cluster_role(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pod_on_node(core: client.CoreV1Api, namespace: str, name: str, notes: dict[str, str] | None = None) -> str:
    pod = core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=notes or {}),
        spec=client.V1PodSpec(node_name=NODE, termination_grace_period_seconds=1,
                              containers=[client.V1Container(name="main", image="x")])))
    return pod.metadata.uid


def fake_process(proc: Path, pid: int, uid: str, state: str) -> None:
    """A process of pod `uid` (systemd driver, containerd) whose one thread is in `state`."""
    pdir = proc / str(pid)
    if pdir.exists():
        shutil.rmtree(pdir)
    pdir.mkdir(parents=True)
    (pdir / "stat").write_text(_fake["stat_line"](pid, "python", "S"))
    (pdir / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice/"
        f"cri-containerd-{CONTAINER}.scope\n")
    _fake["write_task"](pdir, pid, "python", state, wchan="nfs_wait_bit_killable")


def pod_cgroup(root: Path, uid: str, oom_kill: int) -> None:
    pod_dir = (root / "kubepods.slice/kubepods-besteffort.slice"
               / f"kubepods-besteffort-pod{uid.replace('-', '_')}.slice")
    container = pod_dir / f"cri-containerd-{CONTAINER}.scope"
    container.mkdir(parents=True, exist_ok=True)
    (container / "memory.oom.group").write_text("0\n")
    (pod_dir / "memory.events").write_text(f"low 0\nhigh 0\nmax 4\noom 1\noom_kill {oom_kill}\noom_group_kill 0\n")


def condition(core: client.CoreV1Api):
    node = core.read_node(NODE)
    return next((c for c in node.status.conditions or [] if c.type == CONDITION), None)


def warnings(core: client.CoreV1Api, namespace: str, reason: str, name: str) -> list[str]:
    return [e.message for e in core.list_namespaced_event(namespace).items
            if e.reason == reason and e.involved_object.name == name]


def test_leftover_d_state_and_oom_kills_reported_under_narrow_rbac(
        kube, core: client.CoreV1Api, namespace: str, tmp_path: Path, agent_api) -> None:
    api, config = agent_api
    stuck = pod_on_node(core, namespace, "stuck", {HOLD_TERMINATING: "true"})
    oomy = pod_on_node(core, namespace, "oomy")
    wait_until(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items),
               timeout=60, what="pods Running")
    core.delete_namespaced_pod("stuck", namespace, grace_period_seconds=1)
    time.sleep(2)  # past its 1 s grace; kwok holds it Terminating
    assert core.read_namespaced_pod("stuck", namespace).metadata.deletion_timestamp is not None

    proc, cgroup_root = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    fake_process(proc, 4242, stuck, "D")
    fake_process(proc, 5151, oomy, "D")  # a live pod's D state is not a leftover
    pod_cgroup(cgroup_root, oomy, oom_kill=0)
    agent = NodeAgent(api, AgentSettings(NODE, proc, cgroup_root, sustain=2, condition_type=CONDITION))

    first = agent.scan_once()
    assert first.leftovers == [] and first.condition_written
    starting = condition(core)
    assert (starting.status, starting.reason) == ("Unknown", "NodeAgentStarting")  # 1 of 2 scans: no verdict yet
    assert "1 of 2 scans done" in starting.message and " scans=1/2 " in starting.message
    assert f"{stuck}:alive" in starting.message  # Terminating, its task in D for one scan only
    second = agent.scan_once()
    assert [f.pod_uid for f in second.leftovers] == [stuck]
    found = condition(core)
    assert found.status == "True" and f"pod {namespace}/stuck" in found.message
    assert f"{stuck}:d-state" in found.message and oomy not in found.message  # a running pod is not listed
    assert "nfs_wait_bit_killable" in found.message and "python" in found.message
    sight = node_report.decode_condition(found.message).sight
    assert sight is not None and sight.visible == 2 and sight.listed >= 2  # its pods' processes: it can see
    [event] = [m for m in warnings(core, "default", "DStateProcessOfDeletedPod", NODE) if namespace in m]
    assert f"pod {namespace}/stuck" in event and "pid 4242" in event
    agent.scan_once()
    assert len([m for m in warnings(core, "default", "DStateProcessOfDeletedPod", NODE) if namespace in m]) == 1

    pod_cgroup(cgroup_root, oomy, oom_kill=1)
    report = agent.scan_once()
    assert [(k.pod_uid, k.new_kills, k.group) for k in report.oom_kills] == [(oomy, 1, False)]
    [oom_event] = warnings(core, namespace, "OOMKillInPod", "oomy")
    assert "single processes were killed" in oom_event
    assert agent.registry.get_sample_value("janitor_node_oom_kills_total", {"node": NODE, "kind": "process"}) == 1

    heartbeat = condition(core).last_heartbeat_time
    shutil.rmtree(proc / "4242")  # the stuck process finally went away
    time.sleep(1.1)
    agent.scan_once()
    cleared = condition(core)
    assert cleared.status == "False" and cleared.last_heartbeat_time > heartbeat
    assert stuck not in cleared.message  # no task of it in one scan: not yet gone (--sustain 2)
    agent.scan_once()
    cleared = condition(core)
    assert f"{stuck}:gone" in cleared.message and " scans=6/2 " in cleared.message
    assert f"scanned={cleared.last_heartbeat_time:%Y-%m-%dT%H:%M:%SZ}" in cleared.message
    assert agent.registry.get_sample_value("janitor_node_leftover_tasks", {"node": NODE}) == 0
    empty = tmp_path / "empty-proc"
    empty.mkdir()
    blind = NodeAgent(api, AgentSettings(NODE, empty, cgroup_root, sustain=1, condition_type=CONDITION))
    assert not blind.scan_once().condition_written
    assert condition(core).message == cleared.message

    port = _free_port()
    agent.serve(port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as health:
        assert health.status == 200 and health.read().startswith(b"last scan")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as metrics:
        text = metrics.read().decode()
    assert f'janitor_node_leftover_tasks{{node="{NODE}"}} 0.0' in text
    assert f'janitor_node_oom_kills_total{{kind="process",node="{NODE}"}} 1.0' in text
    assert f'janitor_node_agent_pods_visible{{node="{NODE}"}} 1.0' in text  # oomy; stuck's process is gone

    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(api).delete_namespaced_pod("oomy", namespace)
    assert denied.value.status == 403
    with pytest.raises(ApiException) as secrets:
        client.CoreV1Api(api).list_namespaced_secret(namespace)
    assert secrets.value.status == 403

    once = subprocess.run(
        [sys.executable, "-m", "janitor.cli", "node-agent", "--once", "--node-name", NODE, "--kubeconfig", str(config),
         "--proc-root", str(proc), "--cgroup-root", str(cgroup_root), "--sustain", "1"],
        capture_output=True, text=True, timeout=60)
    assert once.returncode == 0, once.stderr
    core.patch_namespaced_pod("stuck", namespace, {"metadata": {"annotations": {HOLD_TERMINATING: None}}})


def holding_process(proc: Path, dev: Path, pid: int, uid: str, device: str) -> None:
    fake_process(proc, pid, uid, "S")
    (proc / str(pid) / "fd").mkdir()
    (proc / str(pid) / "fd" / "3").symlink_to(dev / "nvidiactl")
    (proc / str(pid) / "fd" / "4").symlink_to(dev / device)


def test_a_deleted_pods_gpu_holder_is_named_on_the_gpu_condition(
        kube, core: client.CoreV1Api, namespace: str, tmp_path: Path, agent_api) -> None:
    api, _ = agent_api
    trainer = pod_on_node(core, namespace, "trainer")
    server = pod_on_node(core, namespace, "server")
    wait_until(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items),
               timeout=60, what="pods Running")
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    gpu = proc / "driver/nvidia/gpus/0000:3b:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: \t\t NVIDIA A100-SXM4-80GB\nGPU UUID: \t GPU-0a1b2c3d-test\n"
                                     "Bus Location: \t 0000:3b:00.0\nDevice Minor: \t 3\n")
    dev.mkdir()
    for name in ("nvidiactl", "nvidia0", "nvidia3"):
        (dev / name).touch()
    holding_process(proc, dev, 6001, trainer, "nvidia3")
    holding_process(proc, dev, 6002, server, "nvidia0")  # a live pod's holder is its business
    agent = NodeAgent(api, AgentSettings(NODE, proc, tmp_path / "cgroup", sustain=2, condition_type=CONDITION,
                                         dev_root=dev))
    assert agent.scan_once().gpu_holders == []  # both listed, running
    core.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)
    wait_until(lambda: [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["server"],
               timeout=60, what="the trainer pod gone from the API")
    agent.scan_once()
    [held] = agent.scan_once().gpu_holders
    assert (held.pid, held.gpu.uuid, held.namespace, held.name) == (6001, "GPU-0a1b2c3d-test", namespace, "trainer")
    said = next(c for c in core.read_node(NODE).status.conditions if c.type == node_report.GPU_CONDITION_TYPE)
    assert (said.status, said.reason) == ("True", node_report.REASON_GPU_HELD)
    [entry] = node_report.decode_holders(said.message).held
    assert (entry.minor, entry.bus_id, entry.pid, entry.pod_uid, entry.namespace, entry.name) == (
        3, "0000:3b:00.0", 6001, trainer, namespace, "trainer")
    [event] = [m for m in warnings(core, "default", node_report.EVENT_GPU_HELD, NODE) if namespace in m]
    assert f"pod {namespace}/trainer" in event and "pid 6001" in event and "GPU-0a1b2c3d-test" in event
    shutil.rmtree(proc / "6001")
    agent.scan_once()
    cleared = next(c for c in core.read_node(NODE).status.conditions if c.type == node_report.GPU_CONDITION_TYPE)
    assert (cleared.status, cleared.reason) == ("False", node_report.REASON_GPU_CLEAR)
    assert agent.registry.get_sample_value("janitor_node_gpu_holders", {"node": NODE}) == 0
