"""Evidence the janitor can stand behind: `janitor plan` and `janitor explain` on hours of history.

Each pod below idled at 0 % for 3 h, as far as its numbers go; only the first may be called idle.
The history Prometheus scrapes every 15 s, as dcgm-exporter commonly is; `janitor plan` runs with
its defaults (no `--scrape-interval`), so the interval is what Prometheus says.

Aspects covered, each read by a user in the plan's rows and in `explain`:
- clean: idle on every sample: idle (so the others are unknown for their own reasons);
- a 20-minute hole in the middle of the 2 h window (83 % coverage, above the default 80 %):
  unknown, "no samples for 20m at a stretch";
- the last hour NaN: unknown, "NaN or infinite samples", never "peak 0";
- a busy MIG slice under the default signal, which dcgm-exporter exports as 0 for MIG: unknown,
  "does not measure MIG slices";
- every other scrape missing (samples 30 s apart on a 15 s scrape): coverage 50 %, unknown (a
  30 s flag would have called it complete);
and nothing is marked. It runs on Prometheus 2.x and 3.x (ids `prom2`, `prom3`).
"""

from __future__ import annotations

import datetime
import math
import re
import subprocess
import sys
import time
from pathlib import Path

from kubernetes import client

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import ABSENT, Kind, Segment
from devenv.history import prometheus_with_history
from devenv.nodes import STARTED_AT
from devenv.procs import wait_until
from devenv.prometheus_release import Release

H = 3600
PODS = ("clean", "holey", "nan", "mig", "half")


def _pod(core: client.CoreV1Api, namespace: str, name: str, started: str, resource: str = "nvidia.com/gpu") -> None:
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={STARTED_AT: started}),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="main", image="registry.example/train:1",
            resources=client.V1ResourceRequirements(limits={resource: "1"}))])))


def _janitor(command: str, *args: str, sandbox, namespace: str, policies: Path, url: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "janitor.cli", command, *args, "--kubeconfig", str(sandbox.kubeconfig),
         "--namespaces", namespace, "--state-namespace", namespace, "--policies", str(policies),
         "--prometheus-url", url],
        capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_only_evidence_without_holes_nan_or_blind_signals_is_idle(
        core: client.CoreV1Api, kube, namespace: str, sandbox, tmp_path: Path,
        exporter_values: ValuesControl, prometheus_release: Release) -> None:
    policies = tmp_path / "idle.yaml"
    policies.write_text(f"""policies:
- name: idle-gpu
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers:
    idleGpu: {{window: 2h}}
""")
    now = time.time()
    started = datetime.datetime.fromtimestamp(now - 3 * H, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in PODS:
        _pod(core, namespace, name, started, "nvidia.com/mig-3g.40gb" if name == "mig" else "nvidia.com/gpu")
    wait_until(lambda: {p.metadata.name for p in core.list_namespaced_pod(namespace).items
                        if p.status.phase == "Running"} == set(PODS), timeout=90, what="all pods Running")

    until = now + H  # the live scrapes after the backfill continue the same story
    for name in ("clean", "holey", "nan", "half"):
        exporter_values.add_history(Kind.GPU_UTIL, (namespace, name, None), [Segment(now - 3 * H, until, 0)])
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, "holey", None),
                                [Segment(now - 70 * 60, now - 50 * 60, ABSENT)])
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, "nan", None), [Segment(now - H, until, math.nan)])
    exporter_values.add_history(Kind.GPU_UTIL, (namespace, "half", None), [
        Segment(t, t + 15, ABSENT) for t in range(int(now - 3 * H), int(until), 30)])
    exporter_values.add_history(Kind.GR_ENGINE_ACTIVE, (namespace, "mig", None), [Segment(now - 3 * H, until, 0.7)])

    server, _ = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir,
                                        release=prometheus_release)
    try:
        plan = _janitor("plan", sandbox=sandbox, namespace=namespace, policies=policies, url=server.url)
        holey = _janitor("explain", f"Pod/{namespace}/holey", sandbox=sandbox, namespace=namespace,
                         policies=policies, url=server.url)
    finally:
        server.stop()

    rows = {line.split()[3]: line for line in plan.splitlines() if line.startswith("idle-gpu ")}
    row = {name: rows[f"Pod/{namespace}/{name}"] for name in PODS}
    verdicts = {name: line.split()[4] for name, line in row.items()}
    assert verdicts == {"clean": "idle", "holey": "unknown", "nan": "unknown", "mig": "unknown", "half": "unknown"}, \
        "\n".join(row.values())
    assert "peak 0" in row["clean"], row["clean"]
    assert re.search(r"no samples for (19m[3-5]\ds|20m[0-2]\ds) at a stretch", row["holey"]), row["holey"]
    assert "NaN or infinite samples" in row["nan"] and "peak 0" not in row["nan"], row["nan"]
    assert "does not measure MIG slices" in row["mig"], row["mig"]
    assert "samples cover 5" in row["half"], row["half"]  # 50 % (or 51 % with the live part)
    assert "idleGpu  UNKNOWN  policy idle-gpu" in holey
    assert "it may have been busy then" in holey
    assert all(not (p.metadata.annotations or {}).get("janitor/expires")
               for p in core.list_namespaced_pod(namespace).items)
