"""`janitor plan --policies` in shadow mode, on hours of backfilled GPU history.

Aspects covered:
- an idle GPU Job is judged idle with its numbers and the GPU-hours enforcing would reclaim;
- a busy one is not; a pod whose history has a 40-minute gap is unknown, and says so;
- an idle Deployment pod is attributed to the Deployment;
- nothing is annotated, warned or deleted.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import time

import pytest
from kubernetes import client
from runner import Runner
from runner import settings as build

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind, Segment
from devenv.history import prometheus_with_history
from devenv.nodes import STARTED_AT
from devenv.procs import wait_until

H = 3600


def gpu_template(label: str, started: str, restart: str = "Never") -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": label}, annotations={STARTED_AT: started}),
        spec=client.V1PodSpec(restart_policy=restart, containers=[client.V1Container(
            name="main", image="x", resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]))


@pytest.fixture
def policy_file(tmp_path, namespace: str):
    path = tmp_path / "idle.yaml"
    path.write_text(f"""policies:
- name: idle-mig
  match:
    namespaces: {{include: ["{namespace}"]}}
    podSelector: {{matchLabels: {{app: mig-nb}}}}
  triggers:
    idleGpu: {{signal: DCGM_FI_PROF_GR_ENGINE_ACTIVE, threshold: 0.05, window: 2h}}
- name: idle-gpu
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    idleGpu: {{threshold: 5, window: 2h, minCoverage: 0.8}}
- name: idle-cpu
  match:
    namespaces: {{include: ["{namespace}"]}}
    podSelector: {{matchLabels: {{app: web}}}}
  triggers:
    idleCpu: {{fractionOfRequest: 0.05, window: 2h, ignoreContainers: [istio-proxy]}}
""")
    return path


@pytest.mark.parametrize("dcgm_style", ["servicemonitor", "direct"])
def test_shadow_plan_on_backfilled_history(kube, core: client.CoreV1Api, namespace: str, sandbox, policy_file,
                                           exporter_values: ValuesControl, dcgm_style: str) -> None:
    now = time.time()
    started = datetime.datetime.fromtimestamp(now - 3 * H, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    batch, apps = client.BatchV1Api(kube), client.AppsV1Api(kube)
    for name in ("idle-job", "busy-job", "gappy-job"):
        batch.create_namespaced_job(namespace, client.V1Job(
            metadata=client.V1ObjectMeta(name=name), spec=client.V1JobSpec(template=gpu_template(name, started))))
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="notebook", annotations={"janitor/owner": "alice@lab.example"}),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "notebook"}),
                                     template=gpu_template("notebook", started, "Always"))))
    mig = gpu_template("mig-nb", started, "Always")
    mig.spec.containers[0].resources.limits = {"nvidia.com/mig-3g.40gb": "1"}
    core.create_namespaced_pod(namespace, client.V1Pod(metadata=client.V1ObjectMeta(
        name="mig-nb", labels=mig.metadata.labels, annotations=mig.metadata.annotations), spec=mig.spec))
    # A CPU-only web pod whose app idles while its mesh sidecar is busy.
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="web", labels={"app": "web"}, annotations={STARTED_AT: started}),
        spec=client.V1PodSpec(containers=[
            client.V1Container(name=c, image="x", resources=client.V1ResourceRequirements(requests={"cpu": "1"}))
            for c in ("app", "istio-proxy")])))
    # A pod just (re)created under a name whose series already hold hours of idle history.
    reborn = gpu_template("reborn", started, "Always")
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="reborn", labels=reborn.metadata.labels), spec=reborn.spec))
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == 7,
               timeout=90, what="7 pods Running")
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, "reborn", None), [Segment(now - 3 * H, now, 0)])
    pods = {p.metadata.labels["app"]: p.metadata.name for p in core.list_namespaced_pod(namespace).items}
    # gappy-job: the exporter lost its series for 40 minutes (coverage 67 % < 80 %).
    history = {"idle-job": [(now - 3 * H, now, 0)], "notebook": [(now - 3 * H, now, 0)],
               "busy-job": [(now - 3 * H, now, 90)],
               "gappy-job": [(now - 3 * H, now - 80 * 60, 0), (now - 80 * 60, now - 40 * 60, "absent"),
                             (now - 40 * 60, now, 0)]}
    for app, segments in history.items():
        exporter_values.add_history(Kind.GPU_UTIL, (namespace, pods[app], None), [Segment(*s) for s in segments])
        exporter_values.set_gpu_util(namespace, pods[app], segments[-1][2])

    exporter_values.add_history(Kind.GR_ENGINE_ACTIVE, (namespace, "mig-nb", None), [Segment(now - 3 * H, now, 0.01)])
    for container, cores in (("app", 0.01), ("istio-proxy", 1.5)):
        exporter_values.add_history(Kind.CPU, (namespace, "web", container), [Segment(now - 3 * H, now, cores)])
        exporter_values.set_cpu(namespace, "web", container, cores)
    exporter_values.set_gr_engine_active(namespace, "mig-nb", 0.01)

    server, _ = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir,
                                        dcgm_style=dcgm_style)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "janitor.cli", "plan", "--kubeconfig", str(sandbox.kubeconfig),
             "--namespaces", namespace, "--state-namespace", namespace, "--policies", str(policy_file),
             "--prometheus-url", server.url, "--scrape-interval", "15", "--dcgm-labels", dcgm_style],
            capture_output=True, text=True, timeout=120,
        )
        explained = subprocess.run(
            [sys.executable, "-m", "janitor.cli", "explain", f"Job/{namespace}/gappy-job",
             "--kubeconfig", str(sandbox.kubeconfig), "--namespaces", namespace, "--state-namespace", namespace,
             "--policies", str(policy_file), "--prometheus-url", server.url, "--scrape-interval", "15",
             "--dcgm-labels", dcgm_style],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        server.stop()
    assert explained.returncode == 0, explained.stderr
    assert "idleGpu  UNKNOWN  policy idle-gpu" in explained.stdout
    assert re.search(r"no samples for (39m[345]\ds|40m[01]\ds) at a stretch within the last 2h00m", explained.stdout)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[3]: line for line in out.stdout.splitlines()
            if line.startswith(("idle-gpu ", "idle-mig ", "idle-cpu "))}
    web = rows[f"Pod/{namespace}/web"]
    assert web.startswith("idle-cpu") and "idle " in web and "of its 1-core request" in web  # the sidecar ignored
    assert "idle " in rows[f"Job/{namespace}/idle-job"] and "peak 0" in rows[f"Job/{namespace}/idle-job"]
    assert "busy " in rows[f"Job/{namespace}/busy-job"]
    assert "unknown " in rows[f"Job/{namespace}/gappy-job"] and "at a stretch" in rows[f"Job/{namespace}/gappy-job"]
    assert "idle " in rows[f"Deployment/{namespace}/notebook"]
    assert "alice@lab.example (email)" in rows[f"Deployment/{namespace}/notebook"]
    assert "unknown owner" in rows[f"Job/{namespace}/idle-job"]
    reborn_row = rows[f"Pod/{namespace}/reborn"]
    assert "unknown " in reborn_row and "samples before its start belong to another pod" in reborn_row
    mig_row = rows[f"Pod/{namespace}/mig-nb"]
    assert mig_row.startswith("idle-mig") and "idle " in mig_row and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in mig_row
    assert f"would reclaim 4 GPU-hours: policy idle-gpu, namespace {namespace}" in out.stdout
    assert f"would reclaim 2 GPU-hours: policy idle-mig, namespace {namespace}" in out.stdout
    assert all(not (p.metadata.annotations or {}).get("janitor/expires")
               for p in core.list_namespaced_pod(namespace).items)
    assert len(core.list_namespaced_pod(namespace).items) == 7


def test_daemon_cycle_reports_shadow_metrics_and_keeps_last_good_policies(
    kube, core: client.CoreV1Api, namespace: str, sandbox, policy_file, exporter_values: ValuesControl
) -> None:

    now = time.time()
    started = datetime.datetime.fromtimestamp(now - 3 * H, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    client.BatchV1Api(kube).create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="idle-job"),
        spec=client.V1JobSpec(template=gpu_template("idle-job", started))))
    wait_until(lambda: [p.status.phase for p in core.list_namespaced_pod(namespace).items] == ["Running"],
               timeout=60, what="pod Running")
    pod = core.list_namespaced_pod(namespace).items[0].metadata.name
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, pod, None), [Segment(now - 3 * H, now, 0)])

    server, _ = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir)
    try:
        settings = build(namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy_file),),
                            prometheus_url=server.url, scrape_interval=datetime.timedelta(seconds=15))
        janitor = Runner(kube, settings)
        janitor.run_cycle()
        get = janitor.telemetry.registry.get_sample_value
        assert get("janitor_idle_workloads", {"policy": "idle-gpu", "trigger": "idleGpu", "verdict": "idle"}) == 1
        assert get("janitor_would_reclaim_gpu_seconds", {"policy": "idle-gpu", "namespace": namespace}) == 2 * 3600
        assert get("janitor_policies_broken") == 0

        policy_file.write_text(policy_file.read_text().replace("threshold: 5", "treshold: 5"))
        janitor.run_cycle()
        assert get("janitor_policies_broken") == 1
        assert get("janitor_policy_reloads_total", {"result": "error"}) == 1
        assert get("janitor_idle_workloads", {"policy": "idle-gpu", "trigger": "idleGpu", "verdict": "idle"}) == 1
    finally:
        server.stop()
    assert [p.metadata.deletion_timestamp for p in core.list_namespaced_pod(namespace).items] == [None]


def test_shadow_plan_exporter_down_missing_gpu_series_and_one_busy_worker(
    kube, core: client.CoreV1Api, namespace: str, sandbox, policy_file, exporter_values: ValuesControl
) -> None:
    now = time.time()
    started = datetime.datetime.fromtimestamp(now - 3 * H, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    # A 4-worker job, one worker busy.
    client.BatchV1Api(kube).create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="wide-job"),
        spec=client.V1JobSpec(parallelism=4, completions=4, template=gpu_template("wide-job", started))))
    # Two GPUs, but the exporter has only ever served one of them.
    half = gpu_template("half-seen", started, "Always")
    half.spec.containers[0].resources.limits = {"nvidia.com/gpu": "2"}
    core.create_namespaced_pod(namespace, client.V1Pod(metadata=client.V1ObjectMeta(
        name="half-seen", labels=half.metadata.labels, annotations=half.metadata.annotations), spec=half.spec))
    # An idle MIG notebook on the node whose dcgm-exporter has been down for the last 40 minutes.
    mig = gpu_template("mig-nb", started, "Always")
    mig.spec.containers[0].resources.limits = {"nvidia.com/mig-3g.40gb": "1"}
    core.create_namespaced_pod(namespace, client.V1Pod(metadata=client.V1ObjectMeta(
        name="mig-nb", labels=mig.metadata.labels, annotations=mig.metadata.annotations), spec=mig.spec))
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == 6,
               timeout=90, what="6 pods Running")
    workers = sorted(p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector="app=wide-job").items)
    for i, pod in enumerate(workers):
        util = 85 if i == 2 else 0
        exporter_values.add_history(Kind.GPU_UTIL, (namespace, pod, None), [Segment(now - 3 * H, now, util)])
        exporter_values.set_gpu_util(namespace, pod, util)
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, "half-seen", 0), [Segment(now - 3 * H, now, 0)])
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, "half-seen", 1), [Segment(now - 3 * H, now, "absent")])
    exporter_values.set_absent(Kind.GPU_UTIL, namespace, "half-seen", 1)
    exporter_values.add_history(Kind.GR_ENGINE_ACTIVE, (namespace, "mig-nb", None), [Segment(now - 3 * H, now, 0.0)])
    exporter_values.add_history(Kind.TARGET_DOWN, ("dcgm/mig-node-1",), [Segment(now - 40 * 60, now, 1)])
    exporter_values.set_target_down("dcgm", "mig-node-1")

    try:
        server, _ = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir)
    except BaseException:
        exporter_values.set_target_down("dcgm", "mig-node-1", down=False)
        raise
    try:
        out = subprocess.run(
            [sys.executable, "-m", "janitor.cli", "plan", "--kubeconfig", str(sandbox.kubeconfig),
             "--namespaces", namespace, "--state-namespace", namespace, "--policies", str(policy_file),
             "--prometheus-url", server.url, "--scrape-interval", "15"],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        server.stop()
        exporter_values.set_target_down("dcgm", "mig-node-1", down=False)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[3]: line for line in out.stdout.splitlines() if line.startswith(("idle-gpu ", "idle-mig "))}
    wide = rows[f"Job/{namespace}/wide-job"]
    assert "busy " in wide and "peak 85" in wide, wide
    half_row = rows[f"Pod/{namespace}/half-seen"]
    assert "unknown " in half_row and "1 DCGM_FI_DEV_GPU_UTIL series for 2 requested GPUs" in half_row
    mig_row = rows[f"Pod/{namespace}/mig-nb"]
    assert mig_row.startswith("idle-mig") and "unknown " in mig_row and "at a stretch" in mig_row
    assert "would reclaim" not in out.stdout
