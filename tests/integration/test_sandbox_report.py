"""`python -m devenv status` tells what runs in the sandbox.

Aspects covered:
- the report names the Kubernetes version, every fake node with its GPUs, a test's pod with its
  node and GPUs, every Prometheus job with its targets up, and the Slack stand-in;
- a part that cannot be reached is named as such instead of failing the whole report.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubernetes import client

from devenv import report
from devenv.procs import wait_until


def test_status_report_shows_nodes_pods_targets(sandbox, core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="shown"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="c", image="x", resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "3"}))]),
    ))
    wait_until(lambda: core.read_namespaced_pod("shown", namespace).status.phase == "Running", timeout=60,
               what="pod Running")
    node = core.read_namespaced_pod("shown", namespace).spec.node_name

    text = report.status(sandbox.env)

    assert "Kubernetes v1.34.4" in text
    for line in ("gpu-node-1  Ready   gpu=4", "mig-node-1  Ready   mig-3g.40gb=2", "cpu-node-1  Ready   -"):
        assert line in text
    # Its row in the Kubernetes section, read again (the Prometheus section may list its GPU's row
    # under the same name once dcgm-exporter was scraped with it).
    pods = report.kubernetes_section(Path(sandbox.env["KUBECONFIG"]))
    [pod_line] = [row for row in pods.splitlines() if row.startswith(f"{namespace}/shown ")]
    assert pod_line.split()[1:4] == ["Running", node, "3"] and pod_line in text.splitlines()
    for job in ("dcgm-exporter", "kube-state-metrics", "kubelet", "node-exporter"):
        [job_line] = [row for row in text.splitlines() if row.startswith(job + " ")]
        up, total = job_line.split()[1].split("/")
        assert up == total != "0", job_line
    assert "Slack stand-in" in text and "NOT REACHABLE" not in text


def test_unreachable_part_is_named(sandbox) -> None:
    text = report.status({**sandbox.env, "PROMETHEUS_URL": "http://127.0.0.1:9"})
    assert "prometheus: NOT REACHABLE" in text
    assert "gpu-node-1" in text  # the rest still reported


def test_status_command_without_sandbox_says_how_to_start(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "devenv", "--run-dir", str(tmp_path), "status"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert "python -m devenv up --detach" in result.stdout
