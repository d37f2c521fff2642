"""The node agent says whether it can see pods' processes, over a fake /proc and a stand-in API.

Aspects covered:
- an agent whose /proc shows the processes of no pod the API lists on its node but its own (no
  hostPID, a wrong --proc-root, a sandboxed runtime) sets its condition Unknown with reason
  NodeAgentCannotSee, says what it sees and the likely causes, carries `sees=0/<listed>` as
  data, reports no Terminating pod gone, and its metric janitor_node_agent_pods_visible is 0;
- its own pod does not count, whether it finds itself by --pod-uid or in its own cgroup;
- once it sees another pod's processes it reports as before: False, the pod gone, `sees=1/2`;
- on a node whose only other pod is the one it saw go, it still says it cannot see (nothing tells
  "gone" from "out of sight" then), and the janitor does not force delete that pod;
- its log says a condition that needs a look (leftovers, cannot see) as a WARNING, and one that is
  routine (starting, all clear) as INFO.
"""

from __future__ import annotations

import datetime
import logging
import runpy
import shutil
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from janitor import node_report
from janitor.decide import selection
from janitor.decide.model import AgentCondition, NamespaceView, NodeInfo, ObjectRef, Observation, PodState, PodView
from janitor.decide.rails import Rails
from janitor.decide.triggers import terminating
from janitor.node_agent.agent import AgentSettings, NodeAgent, own_pod
from janitor.node_report import PodTaskState, Sight
from janitor.policy.model import Match, Mode, Namespaces, Policy, Terminating

FIXTURES = Path(__file__).parents[1] / "fixtures" / "node"
_fake = runpy.run_path(str(FIXTURES / "fake_proc.py"))
NODE = "gpu-7"
NOW = datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.timezone.utc)
STUCK = "0b6c1f2e-7d3a-4c58-9a1e-2f4b6d8c0a11"
NEIGHBOUR = "5e4d3c2b-1a09-4f8e-8d7c-6b5a49382716"
OWN = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"


class StandInCore:
    """What the agent calls of CoreV1Api: this node's pods, the node, its status patches, Events."""

    def __init__(self, pods: list[client.V1Pod]) -> None:
        self.pods = pods
        self.conditions: list[client.V1NodeCondition] = []

    def list_pod_for_all_namespaces(self, **_: Any) -> client.V1PodList:
        return client.V1PodList(items=self.pods, metadata=client.V1ListMeta())

    def read_node(self, name: str) -> client.V1Node:
        return client.V1Node(metadata=client.V1ObjectMeta(name=name, uid="node-uid"),
                             status=client.V1NodeStatus(conditions=list(self.conditions)))

    def patch_node_status(self, name: str, body: dict[str, Any]) -> None:
        """Merged by type, as the apiserver merges a strategic patch of conditions."""
        [c] = body["status"]["conditions"]
        self.conditions = [k for k in self.conditions if k.type != c["type"]] + [client.V1NodeCondition(
            type=c["type"], status=c["status"], reason=c["reason"], message=c["message"],
            last_transition_time=datetime.datetime.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))]

    def create_namespaced_event(self, namespace: str, body: object) -> None:
        pass

    @property
    def condition(self) -> client.V1NodeCondition:
        """The D-state condition."""
        [c] = [c for c in self.conditions if c.type == node_report.CONDITION_TYPE]
        return c

    @property
    def gpu_condition(self) -> client.V1NodeCondition:
        [c] = [c for c in self.conditions if c.type == node_report.GPU_CONDITION_TYPE]
        return c


def pod(uid: str, name: str, *, deleting: bool = False, namespace: str = "ml") -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(uid=uid, name=name, namespace=namespace,
                                     deletion_timestamp=NOW - datetime.timedelta(minutes=5) if deleting else None,
                                     deletion_grace_period_seconds=30 if deleting else None),
        status=client.V1PodStatus(phase="Pending" if deleting else "Running"))


def process(proc: Path, pid: int, cgroup: str, comm: str = "python") -> None:
    pdir = proc / str(pid)
    pdir.mkdir(parents=True)
    (pdir / "stat").write_text(_fake["stat_line"](pid, comm, "S"))
    (pdir / "cgroup").write_text(cgroup)
    _fake["write_task"](pdir, pid, comm, "S", wchan="do_epoll_wait")


def of_pod(uid: str) -> str:
    return f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/" \
           f"cri-containerd-{'c' * 64}.scope\n"


def agent_over(proc: Path, tmp_path: Path, pods: list[client.V1Pod], pod_uid: str | None = None,
               ) -> tuple[NodeAgent, StandInCore]:
    agent = NodeAgent(client.ApiClient(), AgentSettings(NODE, proc, tmp_path / "no-cgroups", sustain=2,
                                                        pod_uid=pod_uid), clock=lambda: NOW)
    core = StandInCore(pods)
    agent.core = core  # type: ignore[assignment]
    return agent, core


def listed() -> list[client.V1Pod]:
    """The API's view of the node: a DaemonSet's pod running, a pod stuck Terminating (it never started)."""
    return [pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system"), pod(STUCK, "train-0", deleting=True)]


def test_an_agent_that_sees_no_pods_processes_says_so_and_reports_nothing_gone(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    process(proc, 1, "0::/\n", "janitor")  # no hostPID: its own process, at the root of its cgroup namespace
    process(proc, 7, "0::/\n", "sh")
    agent, core = agent_over(proc, tmp_path, listed())
    for _ in range(5):
        report = agent.scan_once()
        assert report.condition_written and report.pod_states == {}
    said = core.condition
    assert (said.status, said.reason) == ("Unknown", node_report.REASON_CANNOT_SEE)
    message = node_report.decode_condition(said.message)
    assert message.sight == Sight(visible=0, listed=2) and message.pods == {} and message.agent is not None
    assert message.summary.startswith("the node agent sees no process of any pod on this node but its own: "
                                      "none of the 2 other pods the API lists here")
    for cause in ("hostPID", f"--proc-root ({proc})", "sandboxed runtime (gVisor, Kata)"):
        assert cause in message.summary
    assert agent.registry.get_sample_value("janitor_node_agent_pods_visible", {"node": NODE}) == 0


def test_its_own_pod_does_not_count(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    process(proc, 1, of_pod(OWN), "janitor")  # the host's cgroup namespace: its own pod's cgroup, by UID
    own = pod(OWN, "kube-idle-janitor-node-agent-q8z4m", namespace="kube-idle-janitor")
    agent, core = agent_over(proc, tmp_path, [*listed(), own], pod_uid=OWN)
    for _ in range(3):
        agent.scan_once()
    assert core.condition.reason == node_report.REASON_CANNOT_SEE
    assert node_report.decode_condition(core.condition.message).sight == Sight(visible=0, listed=2)


def test_an_agent_that_sees_another_pods_processes_reports_as_before(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    process(proc, 1, "0::/init.scope\n", "systemd")
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    agent, core = agent_over(proc, tmp_path, listed())
    states = [agent.scan_once().pod_states for _ in range(4)]
    assert states[-1] == {STUCK: PodTaskState.GONE}
    said = core.condition
    assert (said.status, said.reason) == ("False", node_report.REASON_CLEAR)
    assert node_report.decode_condition(said.message).sight == Sight(visible=1, listed=2)
    assert agent.registry.get_sample_value("janitor_node_agent_pods_visible", {"node": NODE}) == 1


def test_a_routine_condition_is_logged_as_info_one_that_needs_a_look_as_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="janitor")
    proc = tmp_path / "proc"
    process(proc, 1, "0::/init.scope\n", "systemd")
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    agent, _ = agent_over(proc, tmp_path, listed())
    for _ in range(4):
        agent.scan_once()
    said = {r.getMessage().split(" on node ")[0]: r.levelname for r in caplog.records if "on node" in r.getMessage()}
    assert said == {f"{kind}={status}": "INFO" for kind in (agent.settings.condition_type,  # starting, then clear
                                                           agent.settings.gpu_condition_type)
                    for status in ("Unknown", "False")}
    blind = tmp_path / "blind"
    process(blind, 1, "0::/\n", "janitor")
    caplog.clear()
    agent_over(blind, tmp_path, listed())[0].scan_once()
    assert [r.levelname for r in caplog.records if "=Unknown on node" in r.getMessage()] == ["WARNING", "WARNING"]


def test_the_agent_finds_its_own_pod_by_uid_and_in_its_own_cgroup(tmp_path: Path) -> None:
    mine = tmp_path / "cgroup"
    mine.write_text(of_pod(OWN))  # the host's cgroup namespace (cgroup v1 hosts, or cgroupns: host)
    assert own_pod(None, mine) == {OWN}
    assert own_pod(NEIGHBOUR, mine) == {OWN, NEIGHBOUR}
    mine.write_text("0::/\n")  # its own cgroup namespace: its processes are not in a pod's cgroup to /proc either
    assert own_pod(None, mine) == frozenset()
    assert own_pod(OWN, tmp_path / "missing") == {OWN}


def test_a_node_whose_only_other_pod_is_the_one_gone_proves_nothing(tmp_path: Path) -> None:
    """The agent saw the pod's process, then saw it go, but with it went the last other pod it
    could see: nothing tells "gone" from "out of sight" any more, and no force delete follows."""
    proc = tmp_path / "proc"
    process(proc, 1, "0::/init.scope\n", "systemd")
    process(proc, 4242, of_pod(STUCK))
    running = pod(STUCK, "train-0")
    agent, core = agent_over(proc, tmp_path, [running])
    clock = {"now": NOW - datetime.timedelta(minutes=10)}
    agent.clock = lambda: clock["now"]
    agent.started = clock["now"]
    agent.scan_once()
    deleted = pod(STUCK, "train-0", deleting=True)
    deleted.status.phase = "Running"
    core.pods = [deleted]
    for minutes in (4, 3):
        clock["now"] = NOW - datetime.timedelta(minutes=minutes)
        assert agent.scan_once().pod_states == {STUCK: PodTaskState.ALIVE}
    shutil.rmtree(proc / "4242")
    for minutes in (2, 1):
        clock["now"] = NOW - datetime.timedelta(minutes=minutes)
        states = agent.scan_once().pod_states
    assert states == {STUCK: PodTaskState.GONE}  # it did see it go ...
    said = core.condition
    assert (said.status, said.reason) == ("Unknown", node_report.REASON_CANNOT_SEE)  # ... and says it sees nothing now
    message = node_report.decode_condition(said.message)
    assert message.sight == Sight(visible=0, listed=1) and message.state(STUCK) is PodTaskState.GONE

    view = PodView(ObjectRef("Pod", "v1", "ml", "train-0", STUCK), "7", {}, None, NODE, "Running", None, 0,
                   deleting=True, state=PodState(deleting_since=NOW - datetime.timedelta(minutes=5),
                                                 grace_seconds=30))
    seen = Observation(NOW, pods=(view,), namespaces={"ml": NamespaceView("ml")}, nodes_known=True,
                       nodes=(NodeInfo(NODE, ready=True, agent=AgentCondition(None, message)),))
    policy = Policy("stuck", (Terminating(after=datetime.timedelta(minutes=1), force_delete=True),),
                    match=Match(namespaces=Namespaces(("*",))), mode=Mode.ENFORCE)
    [found] = terminating.findings(selection.workloads(seen, Rails()), seen, policy, NOW)
    assert found.proposal is None
    assert "saw no process of any other pod on that node in its last scan (0 of the 1 other pods" in str(found.why)


def test_a_pod_the_api_says_runs_but_no_scan_found_is_never_gone(tmp_path: Path) -> None:
    """A pod in a sandboxed runtime beside runc pods: the agent sees the others, never this one."""
    proc = tmp_path / "proc"
    process(proc, 1, "0::/init.scope\n", "systemd")
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    kata = pod(STUCK, "train-0", deleting=True)
    kata.status.phase = "Running"
    agent, core = agent_over(proc, tmp_path, [pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system"), kata])
    assert [agent.scan_once().pod_states for _ in range(6)] == [{}] * 6
    assert core.condition.status == "False"  # it sees pods' processes, just not this pod's


def test_a_pod_whose_containers_ever_started_counts_as_having_had_processes() -> None:
    """A Pending pod with an init container running (or one container up and another pulling its
    image), or whose sandbox is ready, has processes somewhere: a Kata pod among them, out of the
    agent's sight, must never be reported gone just because its phase never said Running."""
    from kubernetes import client

    from janitor.node_agent.agent import may_have_run

    def status(phase: str, **extra) -> client.V1PodStatus:
        return client.V1PodStatus(phase=phase, **extra)

    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    waiting = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="ImagePullBackOff"))
    init = client.V1ContainerStatus(name="fetch", image="x", image_id="", ready=False, restart_count=0, state=running)
    pulling = client.V1ContainerStatus(name="main", image="x", image_id="", ready=False, restart_count=0,
                                       state=waiting)
    sandbox = client.V1PodCondition(type="PodReadyToStartContainers", status="True")
    assert may_have_run(status("Running"))
    assert may_have_run(status("Pending", init_container_statuses=[init]))
    assert may_have_run(status("Pending", container_statuses=[pulling], conditions=[sandbox]))
    assert not may_have_run(status("Pending", container_statuses=[pulling]))
    assert not may_have_run(status("Pending"))
