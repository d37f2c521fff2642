"""Pods stuck Terminating: reported to admins with what holds them, force-deleted only on evidence.

Aspects covered:
- a pod held by a finalizer is reported with its finalizer and never force-deleted;
- a pod whose node's agent reports its processes stuck in D state is reported with "drain and
  reboot", never force-deleted;
- a StatefulSet's pod is never force-deleted;
- a pod whose node agent reported, after the deletion, that nothing of a deleted pod is stuck is
  force-deleted (grace 0) when the policy allows it;
- a GPU with memory in use and no pod shows as a ghost GPU, beside the node agent's leftovers;
- the admin report arrives as one Slack message to the admin channel with those sections, and is
  not repeated while nothing changes.
"""

from __future__ import annotations

import runpy
import time
from pathlib import Path

from kubernetes import client
from runner import Runner
from runner import settings as build

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind
from devenv.nodes import HOLD_TERMINATING
from devenv.procs import wait_until
from devenv.slack_standin import SlackStandInControl
from janitor.node_agent.agent import AgentSettings, NodeAgent

FIXTURES = Path(__file__).parents[1] / "fixtures" / "node"
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


def agent_scan(kube, tmp_path: Path, node: str, stuck_uid: str | None = None) -> None:
    """One node-agent scan of `node` over a fake /proc (with a D-state task of `stuck_uid`)."""
    proc = tmp_path / f"proc-{node}-{time.monotonic_ns()}"
    proc.mkdir()
    if stuck_uid:
        pdir = proc / "4242"
        pdir.mkdir()
        (pdir / "stat").write_text(_fake["stat_line"](4242, "python", "S"))
        (pdir / "cgroup").write_text(f"0::/kubepods/besteffort/pod{stuck_uid}/{'e' * 64}\n")
        _fake["write_task"](pdir, 4242, "python", "D", wchan="nfs_wait_bit_killable")
    NodeAgent(kube, AgentSettings(node, proc, tmp_path / "no-cgroups", sustain=1)).scan_once()


def test_stuck_terminating_pods_reported_and_forced_only_on_evidence(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, slack: SlackStandInControl) -> None:
    held_pod(core, namespace, "finalized", "cpu-node-1", finalizer="example.com/protect")
    held_pod(core, namespace, "clear", "cpu-node-1")
    # A GPU no pod holds (earlier tests' pods may still be going away): the ghost goes there, and
    # the pod whose process is stuck sits on the same node, so the report can put them together.
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
    for name in ("finalized", "clear", "dstate", "db-0"):
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=1)
    time.sleep(2.5)  # all past their grace
    agent_scan(kube, tmp_path, "cpu-node-1")  # after the deletions: nothing of a deleted pod is stuck there
    agent_scan(kube, tmp_path, gnode, stuck_uid)  # the dstate pod's process is stuck
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
        assert outcomes == {"clear": ("force-delete", "done")}, outcomes
        wait_until(lambda: "clear" not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
                   timeout=30, what="the force-deleted pod gone")
        [report] = slack.messages("C0ADMINS")
        shown = report.text + str(report.blocks)
        assert "Pods stuck Terminating" in shown and "finalizers example.com/protect" in shown
        assert f"{namespace}/dstate" in shown and f"drain and reboot {gnode}" in shown
        assert f"{namespace}/db-0" in shown and "Nodes with processes of deleted pods stuck in D state" in shown
        assert f"{gnode} GPU {ghost}: 30000 MiB in use, no pod on it; the node agent reports" in shown
        janitor.run_cycle()  # the force-deleted pod is resolved: the report changed, and is sent again
        assert len(slack.messages("C0ADMINS")) == 2 and f"{namespace}/clear" not in str(slack.messages("C0ADMINS")[1])
        janitor.run_cycle()
        assert len(slack.messages("C0ADMINS")) == 2  # nothing changed: not sent again
        assert {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == {"finalized", "dstate", "db-0"}
    finally:
        ValuesControl(sandbox.exporters_url).unset(Kind.GHOST_GPU, f"{gnode}/{ghost}")
        agent_scan(kube, tmp_path, gnode)
        for name in ("finalized", "dstate", "db-0"):
            core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None,
                                                                     "annotations": {HOLD_TERMINATING: None}}})
