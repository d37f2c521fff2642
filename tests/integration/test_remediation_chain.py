"""The remediation chain on the sandbox: manifests/examples/node-operation-controller.yaml against
node-operation-controller's own CRDs (v0.2.2, devenv/crds.py), and the node agent's condition on a
GPU node going True, False and True again, each status checked against the example's rule.

No node-operation-controller runs (devenv builds none): the test holds the agent's condition to
what that controller reads (docs/node-agent.md): a rule matches conditions by type and status
only, all of them ANDed; a matched condition `Unknown` makes it skip the node; a node without the
condition, or with another status, is OK; it creates one NodeOperation when a node turns bad and
no other until the node has been OK, and deletes the open one when the node is OK again.

Aspects covered:
- every object of the example passes server-side apply with dryRun=All and fieldValidation=Strict,
  and the apiserver's answer holds every field sent (nothing pruned, nothing changed);
- the NodeRemediation and NodeOperation the controller makes from the templates for a GPU node
  (the template's spec and the node's name) pass a dryRun=All create; the hand-off Job passes a
  dryRun=All create in the example's namespace, and its pod is admitted there at Pod Security
  `restricted`;
- the NodeRemediationTemplate's node selector takes the sandbox's GPU nodes and not its CPU node;
  its rule is the agent's default condition type with status True, and nothing else;
- the second pair of templates reads the agent's GPU condition (OrphanedGPUHolders, True) and
  taints only (evictionStrategy None);
- `janitor node-agent` (the CLI, 1 s interval, --sustain 2, its narrow RBAC) over a fake /proc
  for gpu-node-1 writes, every write seen through a watch on the Node: Unknown (starting), False,
  True (a task of a pod held Terminating past its grace in D), False (the task ended), True (a task
  in D of a pod deleted outright), Unknown (the agent restarted, as after a reboot, the task gone),
  False; and no other status in between. The rule's verdict is "remediate" at exactly the True
  writes, "skip" at the Unknown ones and "ok" at the False ones: two separate episodes, each
  closed by an OK, so the controller would open one NodeOperation for each and delete the first
  before the second. The time from each change on the node to the status that shows it is
  printed (pytest -s) and bounded. Each pod's process keeps a GPU device open: the GPU condition
  goes through the same statuses (True while a deleted pod's process holds its GPU, naming pid,
  namespace and pod; a live pod's holder never counts), and its own rule's verdicts match them.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from test_node_agent import _fake, agent_api  # noqa: F401 (agent_api is a fixture)

from devenv import crds
from devenv.nodes import HOLD_TERMINATING
from devenv.procs import free_port, wait_until
from janitor import node_report

EXAMPLE = Path(__file__).parents[2] / "manifests/examples/node-operation-controller.yaml"
GROUP, VERSION = "nodeops.k8s.preferred.jp", "v1alpha1"
PLURALS = {"NodeRemediationTemplate": "noderemediationtemplates", "NodeOperationTemplate": "nodeoperationtemplates",
           "NodeRemediation": "noderemediations", "NodeOperation": "nodeoperations",
           "NodeDisruptionBudget": "nodedisruptionbudgets"}
NODE_ANNOTATION = "nodeops.k8s.preferred.jp/nodename"  # on the Job's pods, naming the node
FIELD_MANAGER = "kube-idle-janitor-tests"
NODE = "gpu-node-1"
CONTAINER = "d" * 64
INTERVAL, SUSTAIN = 1.0, 2


def example() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def rule_of(docs: list[dict[str, Any]], condition_type: str) -> list[dict[str, str]]:
    """The conditions of the NodeRemediationTemplate whose rule reads `condition_type`."""
    [rule] = [c for d in docs if d["kind"] == "NodeRemediationTemplate"
              for c in [d["spec"]["template"]["spec"]["rule"]["conditions"]]
              if any(m["type"] == condition_type for m in c)]
    return rule


def holds(answer: Any, sent: Any, path: str = "") -> None:
    """Every field of `sent` is in `answer` with the same value (the apiserver may add defaults)."""
    if isinstance(sent, dict):
        assert isinstance(answer, dict), path
        for key, value in sent.items():
            assert key in answer, f"{path}.{key} was dropped"
            holds(answer[key], value, f"{path}.{key}")
    elif isinstance(sent, list):
        assert isinstance(answer, list) and len(answer) == len(sent), path
        for i, (a, s) in enumerate(zip(answer, sent, strict=True)):
            holds(a, s, f"{path}[{i}]")
    else:
        assert answer == sent, f"{path}: sent {sent!r}, stored {answer!r}"


def verdict(rule: list[dict[str, str]], conditions: list[dict[str, str]]) -> str:
    """node-operation-controller's reading of a node for one NodeRemediation: "remediate" when
    every matcher finds a condition of its type with its status, "skip" when a condition of a
    matcher's type is Unknown (and not what the matcher asks for), else "ok"."""
    for matcher in rule:
        statuses = [c["status"] for c in conditions if c["type"] == matcher["type"]]
        if matcher["status"] in statuses:
            continue
        return "skip" if "Unknown" in statuses else "ok"
    return "remediate"


# -- the example against the CRDs ------------------------------------------------------------------

def apply_dry(kube: client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply, dryRun=All, unknown fields refused; the apiserver's answer (200 or 201,
    read raw: the typed client maps 200 only)."""
    options = {"dry_run": "All", "field_manager": FIELD_MANAGER, "field_validation": "Strict", "force": True,
               "_content_type": "application/apply-patch+yaml", "_preload_content": False}
    name = obj["metadata"]["name"]
    if obj["kind"] == "Namespace":
        raw = client.CoreV1Api(kube).patch_namespace(name, obj, **options)
    else:
        raw = client.CustomObjectsApi(kube).patch_cluster_custom_object(
            GROUP, VERSION, PLURALS[obj["kind"]], name, obj, **options)
    assert raw.status in (200, 201), (raw.status, raw.data)
    answer: dict[str, Any] = json.loads(raw.data)
    return answer


def create_dry(kube: client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(kube).create_cluster_custom_object(
        GROUP, VERSION, PLURALS[obj["kind"]], obj, dry_run="All", field_validation="Strict")


@pytest.fixture
def example_namespace(core: client.CoreV1Api) -> Iterator[str]:
    """The example's Namespace, created for real (dry runs of namespaced objects need it)."""
    namespace = find(example(), "Namespace")
    name = namespace["metadata"]["name"]
    core.create_namespace(namespace)
    wait_until(lambda: any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items),
               timeout=30, what=f"default ServiceAccount in {name}")
    yield name
    core.delete_namespace(name)


def test_example_passes_node_operation_controllers_crds(kube: client.ApiClient, core: client.CoreV1Api,
                                                         example_namespace: str) -> None:
    try:
        crds.install(kube, crds.NODE_OPERATIONS)
    except crds.Unavailable as e:  # the module proxy does not serve it on this machine: nothing to test against
        pytest.skip(str(e))
    docs = example()
    assert sorted(d["kind"] for d in docs) == sorted(
        ["Namespace", "NodeRemediationTemplate", "NodeRemediationTemplate", "NodeOperationTemplate",
         "NodeOperationTemplate", "NodeDisruptionBudget"])
    for doc in docs:
        answer = apply_dry(kube, doc)
        holds(answer["metadata"]["labels"], doc["metadata"]["labels"])
        if "spec" in doc:
            holds(answer["spec"], doc["spec"])
    rules = {}
    for remediation_template in [d for d in docs if d["kind"] == "NodeRemediationTemplate"]:
        rules.update(the_pair_passes(kube, core, example_namespace, docs, remediation_template))
    # Each of the agent's two conditions by its default type, status True, and nothing else.
    assert rules == {node_report.CONDITION_TYPE: [{"type": node_report.CONDITION_TYPE, "status": "True"}],
                     node_report.GPU_CONDITION_TYPE: [{"type": node_report.GPU_CONDITION_TYPE, "status": "True"}]}
    gpu_operation = find(docs, "NodeOperationTemplate", "kube-idle-janitor-orphaned-gpu-holders")
    assert gpu_operation["spec"]["template"]["spec"]["evictionStrategy"] == "None"  # taint only: its pods stay


def the_pair_passes(kube: client.ApiClient, core: client.CoreV1Api, example_namespace: str,
                    docs: list[dict[str, Any]], remediation_template: dict[str, Any]) -> dict[str, Any]:
    """What the controller makes of one NodeRemediationTemplate and its NodeOperationTemplate for a
    GPU node passes the apiserver; the rule, by the condition type it reads."""
    operation_template = find(docs, "NodeOperationTemplate",
                              remediation_template["spec"]["template"]["spec"]["nodeOperationTemplateName"])
    remediation = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeRemediation",
                   "metadata": {**remediation_template["spec"]["template"]["metadata"],
                                "generateName": f"{remediation_template['metadata']['name']}-{NODE}-"},
                   "spec": {**remediation_template["spec"]["template"]["spec"], "nodeName": NODE}}
    holds(create_dry(kube, remediation)["spec"], remediation["spec"])
    assert remediation["spec"]["nodeOperationTemplateName"] == operation_template["metadata"]["name"]
    operation = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeOperation",
                 "metadata": {**operation_template["spec"]["template"]["metadata"], "generateName": "remediation-"},
                 "spec": {**operation_template["spec"]["template"]["spec"], "nodeName": NODE}}
    holds(create_dry(kube, operation)["spec"], operation["spec"])

    job_template = copy.deepcopy(operation["spec"]["jobTemplate"])
    assert job_template["metadata"]["namespace"] == example_namespace
    assert "ttlSecondsAfterFinished" not in job_template["spec"]  # a vanished Job fails the operation
    pod_template = job_template["spec"]["template"]
    pod_template["metadata"].setdefault("annotations", {})[NODE_ANNOTATION] = NODE
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {**job_template["metadata"], "generateName": "nodeops-remediation-"},
           "spec": job_template["spec"]}
    client.BatchV1Api(kube).create_namespaced_job(example_namespace, job, dry_run="All")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**pod_template["metadata"], "name": "hand-off", "namespace": example_namespace},
           "spec": pod_template["spec"]}
    core.create_namespaced_pod(example_namespace, pod, dry_run="All")  # Pod Security enforces on pods only
    rebooter = copy.deepcopy(pod)  # what a reboot Job of the admin's would need: refused at this level
    rebooter["spec"]["hostPID"] = True
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(example_namespace, rebooter, dry_run="All")
    assert refused.value.status == 403 and "restricted" in refused.value.body

    # The nodes it takes, and its rule.
    selector = ",".join(f"{k}={v}" for k, v in remediation_template["spec"]["nodeSelector"].items())
    taken = {n.metadata.name for n in core.list_node(label_selector=selector).items}
    assert {NODE, "gpu-node-2", "mig-node-1"} <= taken and "cpu-node-1" not in taken
    rule = remediation["spec"]["rule"]["conditions"]
    [ctype] = {m["type"] for m in rule}
    cases = {"True": "remediate", "False": "ok", "Unknown": "skip"}
    for status, expected in cases.items():
        assert verdict(rule, [{"type": ctype, "status": status}]) == expected
    assert verdict(rule, []) == "ok"  # a node the agent never wrote to
    assert verdict(rule, [{"type": "Ready", "status": "True"}]) == "ok"
    return {ctype: rule}


# -- the agent's condition through the chain ----------------------------------------------------

@dataclass(frozen=True)
class Write:
    at: float  # time.monotonic() when the watch delivered it
    status: str
    reason: str
    message: str
    conditions: list[dict[str, str]]  # the node's conditions at that write, as a rule reads them


class ConditionWatch:
    """Every status change of the node's condition, as a watch on the Node delivers them."""

    def __init__(self, core: client.CoreV1Api, node: str, ctype: str) -> None:
        self.core, self.node, self.ctype = core, node, ctype
        self.writes: list[Write] = []
        self.error: Exception | None = None
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        listed = core.list_node(field_selector=f"metadata.name={node}")
        self._version = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._watch.stream(self.core.list_node, field_selector=f"metadata.name={self.node}",
                                            resource_version=self._version, timeout_seconds=600):
                every = event["object"].status.conditions or []
                found = next((c for c in every if c.type == self.ctype), None)
                if found is None:
                    continue
                with self._lock:
                    last = self.writes[-1] if self.writes else None
                    if last is None or (last.status, last.reason) != (found.status, found.reason):
                        self.writes.append(Write(time.monotonic(), found.status, found.reason, found.message,
                                                 [{"type": c.type, "status": c.status} for c in every]))
        except Exception as e:  # a watch cut off may have missed a write: until() says so
            self.error = e

    def until(self, status: str, reason: str, after: float, timeout: float = 30) -> Write:
        """The first write of (status, reason) delivered after `after`."""
        def seen() -> Write | None:
            if self.error is not None:
                raise AssertionError(f"the watch on node {self.node} ended: {self.error}")
            with self._lock:
                return next((w for w in self.writes if w.at >= after and (w.status, w.reason) == (status, reason)),
                            None)
        wait_until(lambda: seen() is not None, timeout=timeout, what=f"{self.ctype}={status} ({reason})")
        found = seen()
        assert found is not None
        return found

    def stop(self) -> None:
        self._watch.stop()
        self.error = self.error or RuntimeError("stopped")


class FakeNode:
    """A fake /proc and cgroup root for one node; every change is atomic, as a scan may run at any time."""

    def __init__(self, root: Path) -> None:
        self.proc, self.cgroup, self.dev = root / "proc", root / "cgroup", root / "dev"
        self.trash = root / "trash"
        for d in (self.proc, self.cgroup, self.dev, self.trash):
            d.mkdir()

    def process(self, pid: int, uid: str, state: str, holds: str | None = None) -> None:
        """Process `pid` of pod `uid` (systemd driver, containerd), its one thread in `state`;
        `holds`: the GPU device it keeps open (nvidia<minor>)."""
        pdir = self.proc / str(pid)
        if not pdir.exists():
            staging = self.trash / f"new-{pid}"
            staging.mkdir()
            if holds is not None:
                (staging / "fd").mkdir()
                (staging / "fd" / "4").symlink_to(self.dev / holds)  # a fake device: any file, by its name
            (staging / "stat").write_text(_fake["stat_line"](pid, "python", "S"))
            (staging / "cgroup").write_text(
                f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice/"
                f"cri-containerd-{CONTAINER}.scope\n")
            _fake["write_task"](staging, pid, "python", "S", wchan="do_select")
            staging.rename(pdir)
        task = pdir / "task" / str(pid)
        for name, text in (("stat", _fake["stat_line"](pid, "python", state)),
                           ("wchan", "nfs_wait_bit_killable" if state == "D" else "do_select")):
            partial = task / f".{name}"
            partial.write_text(text)
            partial.replace(task / name)

    def end(self, pid: int) -> None:
        gone = self.trash / f"gone-{pid}"
        (self.proc / str(pid)).rename(gone)
        shutil.rmtree(gone)


def start_agent(config: Path, node: FakeNode, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "janitor.cli", "node-agent", "--node-name", NODE, "--kubeconfig", str(config),
             "--proc-root", str(node.proc), "--cgroup-root", str(node.cgroup), "--dev-root", str(node.dev),
             "--interval", str(INTERVAL),
             "--sustain", str(SUSTAIN), "--metrics-port", str(free_port())],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def stop_agent(agent: subprocess.Popen[bytes]) -> None:
    agent.terminate()
    try:
        agent.wait(timeout=15)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait(timeout=5)


def pod_on_node(core: client.CoreV1Api, namespace: str, name: str, notes: dict[str, str] | None = None) -> str:
    pod = core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=notes or {}),
        spec=client.V1PodSpec(node_name=NODE, termination_grace_period_seconds=1,
                              tolerations=[client.V1Toleration(operator="Exists")],
                              containers=[client.V1Container(name="main", image="x")])))
    return str(pod.metadata.uid)


def test_condition_true_false_true_matches_the_rule_at_every_write(
        kube: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path: Path, agent_api) -> None:  # noqa: F811
    _, config = agent_api
    rule = rule_of(example(), node_report.CONDITION_TYPE)
    uids = {name: pod_on_node(core, namespace, name, {HOLD_TERMINATING: "true"} if name == "stuck" else None)
            for name in ("serving", "stuck", "lost")}
    wait_until(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items),
               timeout=60, what="pods Running")
    node = FakeNode(tmp_path)
    pids = {name: 4000 + i for i, name in enumerate(uids)}
    for name, pid in pids.items():
        node.process(pid, uids[name], "S", holds=f"nvidia{pid % 8}")  # each keeps a GPU open
    ctype = node_report.CONDITION_TYPE
    conditions = ConditionWatch(core, NODE, ctype)
    gpu_conditions = ConditionWatch(core, NODE, node_report.GPU_CONDITION_TYPE)
    starting, clear, found = node_report.REASON_STARTING, node_report.REASON_CLEAR, node_report.REASON_LEFTOVERS
    timings: dict[str, float] = {}
    began = time.monotonic()
    agent = start_agent(config, node, tmp_path / "agent.log")
    try:
        conditions.until("Unknown", starting, began)
        first_clear = conditions.until("False", clear, began)
        starts = {"agent started -> False": first_clear.at - began}

        # A pod deleted, its process stuck in D (held Terminating, as the kubelet cannot finish it).
        core.delete_namespaced_pod("stuck", namespace, grace_period_seconds=1)
        changed = time.monotonic()
        node.process(pids["stuck"], uids["stuck"], "D")
        stuck = conditions.until("True", found, changed)
        timings["task in D (pod Terminating) -> True"] = stuck.at - changed
        assert f"pod {namespace}/stuck" in stuck.message and "nfs_wait_bit_killable" in stuck.message
        held = gpu_conditions.until("True", node_report.REASON_GPU_HELD, changed)
        [holder] = node_report.decode_holders(held.message).held
        assert (holder.pid, holder.namespace, holder.name) == (pids["stuck"], namespace, "stuck")

        # The process ends by itself (the NFS server came back); the pod then finishes.
        changed = time.monotonic()
        node.end(pids["stuck"])
        timings["task ended -> False"] = conditions.until("False", clear, changed).at - changed
        core.patch_namespaced_pod("stuck", namespace, {"metadata": {"annotations": {HOLD_TERMINATING: None}}})

        # Another pod, deleted outright (gone from the API), leaves a process in D.
        core.delete_namespaced_pod("lost", namespace, grace_period_seconds=0)
        wait_until(lambda: "lost" not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
                   timeout=30, what="pod lost gone from the API")
        changed = time.monotonic()
        node.process(pids["lost"], uids["lost"], "D")
        lost = conditions.until("True", found, changed)
        timings["task in D (pod gone) -> True again"] = lost.at - changed
        assert uids["lost"] in lost.message

        # The admin reboots the node: the agent starts over, the process is gone.
        stop_agent(agent)
        node.end(pids["lost"])
        restarted = time.monotonic()
        agent = start_agent(config, node, tmp_path / "agent.log")
        conditions.until("Unknown", starting, restarted)
        starts["agent restarted -> False"] = conditions.until("False", clear, restarted).at - restarted
    finally:
        stop_agent(agent)
        conditions.stop()
        gpu_conditions.stop()

    # The GPU condition the same way, on its own rule: the held GPUs of the two deleted pods.
    gpu_writes = gpu_conditions.writes
    assert [(w.status, w.reason) for w in gpu_writes] == [
        ("Unknown", starting), ("False", node_report.REASON_GPU_CLEAR), ("True", node_report.REASON_GPU_HELD),
        ("False", node_report.REASON_GPU_CLEAR), ("True", node_report.REASON_GPU_HELD), ("Unknown", starting),
        ("False", node_report.REASON_GPU_CLEAR)], gpu_writes
    gpu_rule = rule_of(example(), node_report.GPU_CONDITION_TYPE)
    assert [verdict(gpu_rule, w.conditions) for w in gpu_writes] == [
        "skip", "ok", "remediate", "ok", "remediate", "skip", "ok"]
    assert all(node_report.decode_holders(w.message).held == () for w in gpu_writes if w.status != "True")
    writes = conditions.writes
    assert [(w.status, w.reason) for w in writes] == [
        ("Unknown", starting), ("False", clear), ("True", found), ("False", clear), ("True", found),
        ("Unknown", starting), ("False", clear)], writes
    # The controller acts on "remediate" (opens a NodeOperation, none while one is open or since the
    # last), "ok" (deletes the open one, re-arms), and does nothing at "skip": two episodes, an OK
    # between them, so two NodeOperations, the first deleted before the second is made.
    verdicts = [verdict(rule, w.conditions) for w in writes]
    assert verdicts == ["skip", "ok", "remediate", "ok", "remediate", "skip", "ok"]
    print("\n" + json.dumps({k: round(v, 1) for k, v in (timings | starts).items()}, indent=1))
    # A task counts after --sustain scans in D (and its pod's grace); a clear node shows at the next scan.
    assert all(v < (SUSTAIN + 2) * INTERVAL + 2 for v in timings.values()), timings
    assert all(v < 30 for v in starts.values()), starts  # a Python process starting, then --sustain scans
