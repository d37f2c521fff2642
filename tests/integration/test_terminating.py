"""Pods stuck Terminating: reported to admins with what holds them, force-deleted only on evidence.

Aspects covered:
- a pod held by a finalizer is reported with its finalizer and never force-deleted;
- a pod whose node's agent reports its processes stuck in D state is reported with "drain and
  reboot", never force-deleted;
- a StatefulSet's pod is never force-deleted;
- a pod whose node agent, running since before the deletion and seeing the processes of another
  pod there, saw its process and then reported it gone after the deletion is force-deleted
  (grace 0) when the policy allows it;
- never on anything less (each on a node of its own, the node agent over a fake /proc): an agent
  restarted after the deletion (Unknown below its --sustain scans, though the pod's process is
  in D state; then True; and after the process is gone, still no proof from an agent that did not
  watch it go), a process of the pod alive in S state, a NotReady node (containers running, then
  gone), a report older than the janitor accepts (an agent fallen silent; the bound shortened to
  seconds for the test), an agent that sees no pod's processes but its own (no hostPID: its
  condition Unknown, NodeAgentCannotSee, though the API lists pods running there); `janitor
  explain` and the admin report say which;
- a GPU with memory in use and no pod shows as a ghost GPU, beside the node agent's leftovers,
  joined by PCI bus id (the driver's spelling against DCGM's; its minor is not DCGM's index) with
  the stuck pod's process the node agent found holding it: pid, state, pod and since when;
- the admin report arrives as one Slack message to the admin channel with those sections, and is
  not repeated while nothing changes;
- the owner its namespace names is told once, in a direct message, that the deleted pod's process
  still holds the GPU on that node and what the admins will do: not again in later cycles, nor
  after a restart (what was told is kept in the state ConfigMap).
"""

from __future__ import annotations

import datetime
import hashlib
import runpy
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from runner import Runner
from runner import settings as build

from devenv.exporters.model import pci_bus_id
from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind
from devenv.nodes import HOLD_TERMINATING, KWOK_ANNOTATION, NodeSpec, node_manifest
from devenv.procs import wait_until
from devenv.slack_standin import SlackStandInControl
from janitor import cycle
from janitor.decide.triggers import terminating
from janitor.node_agent.agent import AgentSettings, NodeAgent

FIXTURES = Path(__file__).parents[1] / "fixtures" / "node"
OWNER = ("dana@lab.example", "U0DANA01", "dana")
OWNER_DM = "D" + hashlib.sha1(OWNER[1].encode()).hexdigest()[:10].upper()  # the stand-in's DM id for her
_fake = runpy.run_path(str(FIXTURES / "fake_proc.py"))


def _free_gpus(prometheus_url: str, node: str) -> dict[str, float]:
    """GPU index -> FB_USED of the node's GPUs no pod holds, as Prometheus has them now."""
    import json
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"query": f'DCGM_FI_DEV_FB_USED{{Hostname="{node}",exported_pod=""}}'})
    with urllib.request.urlopen(f"{prometheus_url}/api/v1/query?{query}", timeout=10) as resp:
        return {r["metric"]["gpu"]: float(r["value"][1]) for r in json.load(resp)["data"]["result"]}


def held_pod(core: client.CoreV1Api, namespace: str, name: str, node: str, finalizer: str | None = None) -> str:
    pod = core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={HOLD_TERMINATING: "true"},
                                     finalizers=[finalizer] if finalizer else None),
        spec=client.V1PodSpec(node_name=node, termination_grace_period_seconds=1,
                              containers=[client.V1Container(name="main", image="x")])))
    return pod.metadata.uid


def neighbour(kube, node: str) -> str:
    """A pod of `node` in kube-system, like a DaemonSet's (every real node runs some), owned by the
    Node so it goes with it; its uid."""
    core = client.CoreV1Api(kube)
    owner = client.V1OwnerReference(api_version="v1", kind="Node", name=node, uid=core.read_node(node).metadata.uid)
    pod = core.create_namespaced_pod("kube-system", client.V1Pod(
        metadata=client.V1ObjectMeta(generate_name=f"neighbour-{node}-", owner_references=[owner]),
        spec=client.V1PodSpec(node_name=node, termination_grace_period_seconds=0,
                              containers=[client.V1Container(name="main", image="x")])))
    return pod.metadata.uid


class FakeNode:
    """A node agent over a fake /proc of its own: the host's init, the process of a neighbour pod
    (what shows the agent can see pods' processes at all), and the pods' processes a test puts
    there."""

    def __init__(self, kube, tmp_path: Path, node: str, sustain: int = 1, with_neighbour: bool = True) -> None:
        self.proc = tmp_path / f"proc-{node}-{time.monotonic_ns()}"
        self.proc.mkdir()
        self.node, self.kube, self.tmp_path, self.sustain = node, kube, tmp_path, sustain
        self.process(1, None, "S")  # a /proc without a single process proves nothing
        if with_neighbour:
            self.process(2, neighbour(kube, node), "S")
        self.agent = self.restart()

    def restart(self) -> NodeAgent:
        self.agent = NodeAgent(self.kube, AgentSettings(self.node, self.proc, self.tmp_path / "no-cgroups",
                                                        sustain=self.sustain, dev_root=self.proc.parent / "dev"))
        return self.agent

    def process(self, pid: int, uid: str | None, state: str) -> None:
        pdir = self.proc / str(pid)
        pdir.mkdir(exist_ok=True)
        (pdir / "stat").write_text(_fake["stat_line"](pid, "python" if uid else "systemd", state))  # its main thread
        (pdir / "cgroup").write_text(f"0::/kubepods/besteffort/pod{uid}/{'e' * 64}\n" if uid else "0::/init.scope\n")
        _fake["write_task"](pdir, pid, "python" if uid else "systemd", state, wchan="nfs_wait_bit_killable")

    def gone(self, pid: int) -> None:
        shutil.rmtree(self.proc / str(pid))

    def scan(self, times: int = 1) -> None:
        for _ in range(times):
            self.agent.scan_once()


def admin_reports(slack: SlackStandInControl, namespace: str) -> list:
    """The admin reports about this test's namespace (other tests may post to the channel meanwhile)."""
    return [m for m in slack.messages("C0ADMINS") if namespace in m.text + str(m.blocks)]


def agent_scan(kube, tmp_path: Path, node: str, stuck_uid: str, state: str = "D",
               holds: tuple[int, str] | None = None) -> None:
    """One scan of `node` by a node agent of its own (sustain 1), over a fake /proc with a task of
    `stuck_uid` in `state`; `holds`: the (minor, PCI bus id as the driver writes it) of a GPU the
    task keeps open."""
    fake = FakeNode(kube, tmp_path, node, with_neighbour=False)
    fake.process(4242, stuck_uid, state)
    if holds is not None:
        minor, bus = holds
        (fake.proc / "4242" / "fd").mkdir()
        (fake.proc / "4242" / "fd" / "5").symlink_to(fake.proc.parent / "dev" / f"nvidia{minor}")  # a fake device
        info = fake.proc / "driver" / "nvidia" / "gpus" / bus
        info.mkdir(parents=True)
        info.joinpath("information").write_text(f"Model: \t\t NVIDIA A100\nBus Location: \t {bus}\n"
                                                f"Device Minor: \t {minor}\n")
    fake.scan()


def test_stuck_terminating_pods_reported_and_forced_only_on_evidence(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, slack: SlackStandInControl,
        own_node) -> None:
    # The pod to be force deleted sits on a node of its own: its node agent runs there from before
    # the deletions, and no other test's agent writes that node's condition meanwhile.
    clear_node = FakeNode(kube, tmp_path, own_node[0])
    clear_node.scan()
    time.sleep(2)  # times on the wire are whole seconds: let the agent's start be one before the deletions
    held_pod(core, namespace, "finalized", "cpu-node-1", finalizer="example.com/protect")
    held_pod(core, namespace, "clear", own_node[0])
    # A GPU no pod holds (earlier tests' pods may still be going away): the ghost goes there, and
    # the pod whose process is stuck sits on the same node, so the report can put them together.
    core.patch_namespace(namespace, {"metadata": {"annotations": {"owner": OWNER[0]}}})
    slack.add_user(*OWNER)
    free: dict[str, str] = {}

    def a_free_gpu() -> bool:
        for node in ("gpu-node-2", "gpu-node-1"):
            gpus = _free_gpus(sandbox.prometheus_url, node)
            if gpus:
                free.update(node=node, gpu=sorted(gpus)[-1])
                return True
        return False

    wait_until(a_free_gpu, timeout=120, what="a GPU no pod holds")
    gnode, ghost = free["node"], free["gpu"]
    stuck_uid = held_pod(core, namespace, "dstate", gnode)
    client.AppsV1Api(kube).create_namespaced_stateful_set(namespace, client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name="db"),
        spec=client.V1StatefulSetSpec(service_name="db", replicas=1,
                                      selector=client.V1LabelSelector(match_labels={"app": "db"}),
                                      template=client.V1PodTemplateSpec(
                                          metadata=client.V1ObjectMeta(labels={"app": "db"},
                                                                       annotations={HOLD_TERMINATING: "true"}),
                                          spec=client.V1PodSpec(
                                              node_name="cpu-node-1", termination_grace_period_seconds=1,
                                              containers=[client.V1Container(name="db", image="x")])))))
    wait_until(lambda: len([p for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"]) == 4,
               timeout=60, what="4 pods Running")
    clear_uid = core.read_namespaced_pod("clear", namespace).metadata.uid
    clear_node.process(4300, clear_uid, "S")  # the pod runs: its node agent sees its process
    clear_node.scan()
    for name in ("finalized", "clear", "dstate", "db-0"):
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=1)
    clear_node.gone(4300)  # the kubelet stopped it
    time.sleep(2.5)  # all past their grace
    clear_node.scan(2)  # the pod Terminating in the first scan's list, no process of it in the second
    # The dstate pod's process is stuck, and holds the ghost GPU (by its bus id; minor and index differ).
    bus = pci_bus_id(int(ghost)).lower().replace("00000000:", "0000:")
    agent_scan(kube, tmp_path, gnode, stuck_uid, holds=((int(ghost) + 3) % 8, bus))
    ValuesControl(sandbox.exporters_url).set_ghost_gpu(gnode, int(ghost), 30_000)  # ... and holds GPU memory
    try:
        wait_until(lambda: _free_gpus(sandbox.prometheus_url, gnode).get(ghost) == 30_000, timeout=30,
                   what="Prometheus to scrape the ghost GPU")
    except BaseException:
        ValuesControl(sandbox.exporters_url).unset(Kind.GHOST_GPU, f"{gnode}/{ghost}")
        raise
    time.sleep(2.5)  # the cycle queries at the apiserver's whole-second time: let a sample predate it

    policy = tmp_path / "stuck.yaml"
    policy.write_text(f"""policies:
- name: stuck-terminating
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers: {{terminating: {{after: 1s, forceDelete: true}}}}
""")
    janitor = Runner(kube, build(
        namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
        prometheus_url=sandbox.prometheus_url, slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
        admin_channel="#gpu-admins"))
    try:
        result = janitor.run_cycle()
        outcomes = {r.action.target.name: (str(r.action.type), str(r.outcome)) for r in result.results}
        assert outcomes == {"clear": ("force-delete", "done")}, (outcomes, [str(f.why) for f in result.plan.findings
                                                                 if f.subject.name == "clear"])
        wait_until(lambda: "clear" not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
                   timeout=30, what="the force-deleted pod gone")
        [report] = admin_reports(slack, namespace)
        shown = report.text + str(report.blocks)
        assert "Pods stuck Terminating" in shown and "finalizers example.com/protect" in shown
        assert f"{namespace}/dstate" in shown and f"drain and reboot {gnode}" in shown
        assert f"{namespace}/db-0" in shown and "Nodes with processes of deleted pods stuck in D state" in shown
        assert (f"{gnode} GPU {ghost}: 30000 MiB in use, held by pid 4242 (python, state D) of deleted or "
                f"long-Terminating pod {namespace}/dstate ({OWNER[0]} (email)) since ") in shown
        assert "; the node agent reports processes of deleted pods stuck there" in shown
        [told] = slack.messages(OWNER_DM)
        assert (f"Your pod {namespace}/dstate was deleted, but processes of it still hold GPUs on node {gnode}: "
                "GPU minor ") in told.text and "by pid 4242 (python, state D)" in told.text
        assert "the admins (#gpu-admins)" in told.text and "kills nothing" in told.text
        janitor.run_cycle()  # the force-deleted pod is resolved: the report changed, and is sent again
        assert len(admin_reports(slack, namespace)) == 2
        assert f"{namespace}/clear" not in str(admin_reports(slack, namespace)[1])
        janitor.run_cycle()
        assert len(admin_reports(slack, namespace)) == 2  # nothing changed: not sent again
        restarted = Runner(kube, janitor.settings)
        restarted.run_cycle()
        assert len(slack.messages(OWNER_DM)) == 1  # told once, a restart included
        assert {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == {"finalized", "dstate", "db-0"}
    finally:
        ValuesControl(sandbox.exporters_url).unset(Kind.GHOST_GPU, f"{gnode}/{ghost}")
        agent_scan(kube, tmp_path, gnode, stuck_uid, "S")  # no longer stuck: the condition clears
        for name in ("finalized", "dstate", "db-0"):
            core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None,
                                                                     "annotations": {HOLD_TERMINATING: None}}})


# -- what a force delete needs from the node agent, each case on a node of its own ---------------------------

TEST_ONLY = "janitor.dev/test-only"  # a NoSchedule taint: other tests' pods are never scheduled there


@pytest.fixture
def own_node(core: client.CoreV1Api) -> Iterator[tuple[str, bool]]:
    """A node only this test uses, Ready (kwok stands in for its kubelet): no other test's node agent
    writes its condition meanwhile. Yields (name, True)."""
    yield from _node(core, ready=True)


@pytest.fixture
def not_ready_node(core: client.CoreV1Api) -> Iterator[tuple[str, bool]]:
    """A node only this test uses, NotReady: no kubelet runs for it. Yields (name, False)."""
    yield from _node(core, ready=False)


def _node(core: client.CoreV1Api, ready: bool) -> Iterator[tuple[str, bool]]:
    name = f"proof-{uuid.uuid4().hex[:6]}"
    manifest = node_manifest(NodeSpec(name, cpu=1, memory="1Gi"))
    manifest["metadata"]["labels"] = {"kubernetes.io/hostname": name}
    manifest["spec"] = {"taints": [{"key": TEST_ONLY, "value": "true", "effect": "NoSchedule"}]}
    if not ready:
        del manifest["metadata"]["annotations"][KWOK_ANNOTATION]
    core.create_node(manifest)
    try:
        if ready:
            wait_until(lambda: _ready(core, name) is True, timeout=60, what=f"{name} Ready")
        else:
            core.patch_node_status(name, {"status": {"conditions": [{
                "type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "kubelet stopped posting",
                "lastHeartbeatTime": _stamp(), "lastTransitionTime": _stamp()}]}})
            wait_until(lambda: _ready(core, name) is not None, timeout=30, what=f"{name} NotReady")
        yield name, ready
    finally:
        for pod in core.list_namespaced_pod("kube-system", field_selector=f"spec.nodeName={name}").items:
            core.delete_namespaced_pod(pod.metadata.name, "kube-system", grace_period_seconds=0)  # neighbours
        core.delete_node(name)


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(core: client.CoreV1Api, name: str) -> bool | None:
    found = next((c for c in core.read_node(name).status.conditions or [] if c.type == "Ready"), None)
    return None if found is None else found.status == "True"


def _deleted_pod(core: client.CoreV1Api, namespace: str, node: str, name: str = "stuck", *,
                 running: bool = True) -> str:
    """A pod on `node`, past its 1 s grace in deletion (held Terminating); its uid."""
    uid = held_pod(core, namespace, name, node)
    if running:
        wait_until(lambda: core.read_namespaced_pod(name, namespace).status.phase == "Running", timeout=60,
                   what=f"{name} Running")
    time.sleep(2)  # times on the wire are whole seconds: let the agent's start be one before the deletion
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=1)
    time.sleep(4)  # deletionTimestamp is the request + 1 s; then 1 s of grace and the policy's `after: 1s`
    return uid


def _janitor(kube, namespace: str, tmp_path: Path, sandbox=None, clock=cycle.utc_now, **extra) -> Runner:
    policy = tmp_path / "force.yaml"
    policy.write_text(f"""policies:
- name: stuck-terminating
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers: {{terminating: {{after: 1s, forceDelete: true}}}}
""")
    slack = {} if sandbox is None else dict(slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
                                            admin_channel="#gpu-admins")
    return Runner(kube, build(namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
                              **slack, **extra), clock=clock)


def _forced(runner: Runner) -> list[str]:
    """One cycle: the pods it force deleted (not a force delete the re-check skipped); the pod
    "stuck" must have been judged stuck Terminating."""
    result = runner.run_cycle()
    assert any(f.stuck is not None and f.subject.name == "stuck" for f in result.plan.findings)
    return [r.action.target.name for r in result.results
            if str(r.action.type) == "force-delete" and str(r.outcome) == "done"]


def _explain(sandbox, namespace: str, tmp_path: Path, name: str = "stuck") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "janitor.cli", "explain", f"Pod/{namespace}/{name}", "--kubeconfig",
         str(sandbox.kubeconfig), "--namespaces", namespace, "--state-namespace", namespace,
         "--policies", str(tmp_path / "force.yaml")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _release(core: client.CoreV1Api, namespace: str, name: str = "stuck") -> None:
    """Let kwok finish the pod's deletion, if it is still there."""
    if any(p.metadata.name == name for p in core.list_namespaced_pod(namespace).items):
        core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {HOLD_TERMINATING: None}}})


def test_a_restarted_node_agent_never_proves_a_pod_gone(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, own_node,
        slack: SlackStandInControl) -> None:
    node, _ = own_node
    fake = FakeNode(kube, tmp_path, node, sustain=3)
    uid = _deleted_pod(core, namespace, node)
    fake.process(4242, uid, "D")  # the pod's process hangs in D state ...
    fake.restart()  # ... and the node agent restarts (an upgrade, an OOM kill)
    fake.scan()
    janitor = _janitor(kube, namespace, tmp_path, sandbox)
    try:
        assert _forced(janitor) == []
        [written] = [c for c in core.read_node(node).status.conditions if c.type == "OrphanedDStateProcesses"]
        assert written.status == "Unknown" and written.reason == "NodeAgentStarting"  # below --sustain: no verdict
        assert "not force deleted: the node agent on " + node + " has no verdict yet: 1 of 3 scans" in _explain(
            sandbox, namespace, tmp_path)
        [report] = admin_reports(slack, namespace)
        assert "has no verdict yet: 1 of 3 scans since it started" in report.text + str(report.blocks)

        fake.scan(2)  # sustained: the process is a leftover, and the condition says so
        [written] = [c for c in core.read_node(node).status.conditions if c.type == "OrphanedDStateProcesses"]
        assert written.status == "True" and f"{uid}:d-state" in written.message
        assert _forced(janitor) == []
        assert f"processes stuck in D state on {node}" in _explain(sandbox, namespace, tmp_path)

        fake.gone(4242)  # the process finally went; but this agent did not see the pod's deletion begin
        fake.scan(2)
        assert _forced(janitor) == []
        assert f"the node agent on {node} started at " in _explain(sandbox, namespace, tmp_path)
        assert "after the deletion, so it cannot have watched the pod's processes go" in _explain(
            sandbox, namespace, tmp_path)
        assert core.read_namespaced_pod("stuck", namespace).metadata.uid == uid
    finally:
        _release(core, namespace)


def test_a_live_process_of_the_pod_vetoes_and_its_going_proves(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, own_node) -> None:
    node, _ = own_node
    fake = FakeNode(kube, tmp_path, node, sustain=2)
    fake.scan(2)  # running, and past its --sustain scans, since before the deletion
    uid = _deleted_pod(core, namespace, node)
    fake.process(4242, uid, "S")  # the kubelet has not stopped its container: its process sleeps, not in D
    fake.scan(2)
    janitor = _janitor(kube, namespace, tmp_path)
    try:
        assert _forced(janitor) == []
        assert f"not force deleted: the node agent on {node} saw a process of it alive in its scan at " in _explain(
            sandbox, namespace, tmp_path)
        fake.gone(4242)
        fake.scan()
        assert _forced(janitor) == []  # gone in one scan: not yet sustained (--sustain 2)
        fake.scan()
        assert _forced(janitor) == ["stuck"]
        wait_until(lambda: "stuck" not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
                   timeout=30, what="the force-deleted pod gone")
    finally:
        _release(core, namespace)


def test_a_not_ready_node_never_proves(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, not_ready_node) -> None:
    node, _ = not_ready_node
    fake = FakeNode(kube, tmp_path, node)
    fake.scan(2)
    uid = _deleted_pod(core, namespace, node, running=False)  # no kubelet: Terminating for good
    fake.process(4242, uid, "S")  # kubelet down, the container still running
    fake.scan(2)
    janitor = _janitor(kube, namespace, tmp_path)
    try:
        assert _forced(janitor) == []
        shown = _explain(sandbox, namespace, tmp_path)
        assert f"its node {node} is NotReady" in shown
        assert f"not force deleted: its node {node} is not Ready" in shown
        fake.gone(4242)  # and gone: the agent's word still does not count on a node without a kubelet
        fake.scan(2)
        assert f"{uid}:gone" in str(core.read_node(node).status.conditions)
        assert _forced(janitor) == []
        assert core.read_namespaced_pod("stuck", namespace).metadata.uid == uid
    finally:
        if any(p.metadata.name == "stuck" for p in core.list_namespaced_pod(namespace).items):
            core.delete_namespaced_pod("stuck", namespace, grace_period_seconds=0)  # no kubelet will finish it


def test_polled_nodes_are_judged_as_of_their_list_and_the_recheck_as_of_now(
        kube, core: client.CoreV1Api, namespace: str, tmp_path: Path, own_node,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon lists nodes every --node-refresh: a cycle judges the agent's report as of that list
    (fresh then, it proposes the force delete), and the re-check before it reads the node again and
    judges the report as of now (stale by then, nothing is done until the agent speaks again)."""
    from janitor.observe.cache import ClusterCache

    monkeypatch.setattr(terminating, "MAX_REPORT_AGE", datetime.timedelta(seconds=4), raising=False)
    node, _ = own_node
    fake = FakeNode(kube, tmp_path, node)
    fake.scan()
    uid = _deleted_pod(core, namespace, node)
    fake.process(4242, uid, "S")
    fake.scan()
    fake.gone(4242)
    fake.scan(2)  # the pod reported gone
    janitor = _janitor(kube, namespace, tmp_path, node_refresh=datetime.timedelta(minutes=10))
    cache = janitor.ports.cache = ClusterCache(kube, janitor.settings)
    try:
        cache.ensure(pods=True, nodes=True, oom=True)
        assert cache.wait(30)  # the nodes listed now: the report is fresh in that list
        time.sleep(6)  # ... and 6 s old by the cycle, past the (shortened) 4 s a report counts for
        assert _forced(janitor) == []
        assert janitor.last is not None
        [finding] = [f for f in janitor.last.plan.findings if f.stuck is not None]
        assert finding.proposal is not None  # proposed as of the list; the fresh re-check refused it:
        [skipped] = [r for r in janitor.last.results if str(r.action.type) == "force-delete"]
        assert str(skipped.outcome) == "skipped" and "no longer due on a fresh read" in skipped.detail
        assert "away from when its node was read; a report counts for 4s" in skipped.detail
        fake.scan()  # the agent speaks again; the cache still holds the list of before
        assert _forced(janitor) == ["stuck"]
    finally:
        cache.stop()
        _release(core, namespace)


def test_a_stale_report_never_proves(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, own_node,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The janitor's bound on a report's age (2 minutes) shortened to 4 s, so silence shows in seconds.
    monkeypatch.setattr(terminating, "MAX_REPORT_AGE", datetime.timedelta(seconds=4), raising=False)
    node, _ = own_node
    fake = FakeNode(kube, tmp_path, node)
    fake.scan()
    uid = _deleted_pod(core, namespace, node)
    fake.process(4242, uid, "S")  # its process, seen until the kubelet stops it
    fake.scan()
    fake.gone(4242)
    fake.scan(2)  # the pod reported gone ... and then the agent falls silent
    time.sleep(6)
    janitor = _janitor(kube, namespace, tmp_path)
    try:
        assert _forced(janitor) == []
        assert janitor.last is not None
        [finding] = [f for f in janitor.last.plan.findings if f.stuck is not None]
        assert f"not force deleted: the node agent on {node} last scanned at " in str(finding.why)
        assert "away from when its node was read; a report counts for 4s" in str(finding.why)
        fake.scan()  # it speaks again
        assert _forced(janitor) == ["stuck"]
    finally:
        _release(core, namespace)


def test_a_node_agent_that_cannot_see_pods_processes_never_proves(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, own_node,
        slack: SlackStandInControl) -> None:
    # hostPID dropped: the agent's /proc holds its own processes only, while the API lists a pod
    # running on its node (a DaemonSet's) and the pod to be judged.
    node, _ = own_node
    fake = FakeNode(kube, tmp_path, node, sustain=2, with_neighbour=False)
    neighbour(kube, node)
    fake.scan()
    uid = _deleted_pod(core, namespace, node)
    fake.scan(4)  # past --sustain, every scan after the deletion
    [written] = [c for c in core.read_node(node).status.conditions if c.type == "OrphanedDStateProcesses"]
    assert (written.status, written.reason) == ("Unknown", "NodeAgentCannotSee")
    assert "sees no process of any pod on this node but its own: none of the 2 other pods the API lists here" in (
        written.message)
    assert "hostPID" in written.message and "sandboxed runtime (gVisor, Kata)" in written.message
    assert " sees=0/2 " in written.message and f"{uid}:gone" not in written.message
    assert fake.agent.registry.get_sample_value("janitor_node_agent_pods_visible", {"node": node}) == 0
    janitor = _janitor(kube, namespace, tmp_path, sandbox)
    try:
        assert _forced(janitor) == []
        words = (f"not force deleted: the node agent on {node} saw no process of any other pod on that node in its "
                 "last scan (0 of the 2 other pods listed there), so its 'gone' proves nothing: check that it runs "
                 "with hostPID")
        assert words in _explain(sandbox, namespace, tmp_path)
        [report] = admin_reports(slack, namespace)
        shown = report.text + str(report.blocks)
        assert words in shown and "Node agents that cannot see pods' processes" in shown
        assert core.read_namespaced_pod("stuck", namespace).metadata.uid == uid
    finally:
        _release(core, namespace)
