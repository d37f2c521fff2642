"""Busy verdicts carried between cycles, on the sandbox's real Prometheus (janitor.observe.carry).

Aspects covered:
- the daemon's first cycle reads every pod's whole window; the next carries the GPU busy since,
  reads the others whole, and calls each pod what a read of every whole window calls it at the
  same moment (busy, idle, and busy ten minutes ago but not since);
- a cycle late past the pause limit, and a Prometheus restart, read everything whole again, and
  the metrics say why;
- all against a real Prometheus (2.x or 3.x) over backfilled history and live scrapes.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client import generate_latest
from runner import Runner
from runner import settings as build
from test_lifecycle import create_job

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind, Segment
from devenv.history import prometheus_with_history
from devenv.procs import wait_until
from devenv.prometheus import PrometheusServer
from janitor import kubeapi
from janitor.daemon import CarryCollector
from janitor.observe.cache import ClusterCache
from janitor.observe.carry import BusyCarry, Full

H, M = 3600, 60
WINDOW = "30m"


def policy(path: Path, namespace: str) -> Path:
    path.write_text(f"""policies:
- name: idle-gpu
  mode: shadow
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    idleGpu: {{threshold: 5, window: {WINDOW}, minPodAge: {WINDOW}}}
""")
    return path


@pytest.fixture
def serve(kube, sandbox) -> Iterator[Callable[[], PrometheusServer]]:  # noqa: ANN001
    """Start a Prometheus over the history set so far; its data is kept over a restart."""
    servers: list[PrometheusServer] = []

    def start() -> PrometheusServer:
        server, _ = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir)
        server.throwaway = False
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.throwaway = True
        server.stop()


@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    """The runners a test made: their watch caches are stopped after it."""
    made: list[Runner] = []
    yield made
    for run in made:
        if run.ports.cache is not None:
            run.ports.cache.stop()


def runner(sandbox, namespace: str, policy_path: Path, url: str, *, carry: bool) -> Runner:  # noqa: ANN001
    config = build(namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy_path),),
                   prometheus_url=url, scrape_interval=datetime.timedelta(seconds=15))
    api = kubeapi.connect(sandbox.env["KUBECONFIG"], (3.0, 10.0))
    run = Runner(api, config)
    run.ports.cache = ClusterCache(api, config)
    if carry:
        run.ports.busy = BusyCarry(max_pause=datetime.timedelta(minutes=3))
        run.telemetry.registry.register(CarryCollector(run.ports.busy))
    return run


class Verdicts(dict[str, str]):
    """Each workload's verdict; `why` holds each one's reasons, pod by pod, for a failure's message."""

    why: str = ""


def verdicts(run: Runner) -> Verdicts:
    plan = run.plan().plan
    found = [f for f in plan.findings if f.policy == "idle-gpu"]
    said = Verdicts({f.subject.name: str(f.state) for f in found})
    said.why = "\n".join(f"{f.subject.name}: {f.state} {f.why}; "
                         + "; ".join(f"{j.pod.name} {j.state} {j.why}" for j in f.pods) for f in found)
    return said


def metric(run: Runner, line: str) -> float:
    text = generate_latest(run.telemetry.registry).decode()
    found = [row.rsplit(" ", 1)[1] for row in text.splitlines() if row.startswith(line + " ")]
    assert found, f"{line} not in\n{text}"
    return float(found[0])


def scraped_after(url: str, namespace: str, moment: float) -> None:
    """Wait until Prometheus holds a sample of the busy pod's GPU later than `moment` (a cycle's
    read) and at least 2 s old, so the next cycle's span since it holds it: a cycle evaluates at
    the apiserver's Date, which is cut to the second."""
    busy = f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}",exported_pod=~"busy-.*"}}'
    query = urllib.parse.urlencode({"query": f"max(timestamp({busy}))"})

    def seen() -> bool:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
            result = json.load(answer)["data"]["result"]
        return bool(result) and moment + 1 < float(result[0]["value"][1]) < time.time() - 2
    wait_until(seen, timeout=60, what="a GPU sample after the last cycle's read")


def hold_devices(exporters_url: str, control: ValuesControl, pods: list[client.V1Pod]) -> None:
    """Wait until the live exporter serves each pod on its devices. The backfill puts a pod's
    history on the devices the exporter gave it; a pod given none yet (another test's pod still
    leaving its node) would get devices of the backfill's choosing, and its live series, on others
    later, would be a second series of minutes."""
    def held() -> bool:
        for node in {p.spec.node_name for p in pods}:
            with urllib.request.urlopen(f"{exporters_url.rstrip('/')}/dcgm/{node}/metrics", timeout=10):
                pass
        return {p.metadata.uid for p in pods} <= set(control.get().get("gpu_slots", {}))
    wait_until(held, timeout=90, what="the live exporter to give each pod its GPU", interval=1.0)


def test_a_steady_cycle_carries_busy_and_judges_as_a_whole_read_does(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path,  # noqa: ANN001
        exporter_values: ValuesControl, serve: Callable[[], PrometheusServer], runners: list[Runner]) -> None:
    for name in ("busy", "idle", "was-busy"):
        create_job(kube, namespace, name)
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == 3,
               timeout=90, what="3 pods Running")
    now = time.time()
    for pod in core.list_namespaced_pod(namespace).items:
        app = pod.metadata.labels["app"]
        key = (namespace, pod.metadata.name, None)
        if app == "was-busy":  # busy until ten minutes ago: busy over the window, not since
            exporter_values.add_history(Kind.GPU_UTIL, key, [Segment(now - 3 * H, now - 10 * M, 90),
                                                             Segment(now - 10 * M, now + H, 0)])
        else:
            exporter_values.add_history(Kind.GPU_UTIL, key, [Segment(now - 3 * H, now + H, 90 if app == "busy" else 0)])
        exporter_values.set_gpu_util(namespace, pod.metadata.name, 90 if app == "busy" else 0)
    served = serve()
    rules = policy(tmp_path / "p.yaml", namespace)
    steady = runner(sandbox, namespace, rules, served.url, carry=True)
    whole = runner(sandbox, namespace, rules, served.url, carry=False)
    runners += [steady, whole]
    carry = steady.ports.busy
    assert carry is not None
    expected = {"busy": "clear", "idle": "fires", "was-busy": "clear"}

    first = verdicts(steady)
    assert first == expected, first.why
    assert carry.stats.full is Full.START and carry.stats.carried == 0
    scraped_after(served.url, namespace, time.time())
    assert verdicts(steady) == expected == verdicts(whole)
    assert (carry.stats.full, carry.stats.carried, carry.stats.read_whole) == (None, 1, 2)
    assert metric(steady, "janitor_usage_pods_carried") == 1

    # A cycle late past the pause limit reads everything whole.
    carry.max_pause = datetime.timedelta(seconds=1)
    time.sleep(2.5)
    assert verdicts(steady) == expected
    assert (carry.stats.full, carry.stats.carried) == (Full.PAUSE, 0)
    assert metric(steady, 'janitor_usage_whole_reads_total{why="pause"}') == 1
    carry.max_pause = datetime.timedelta(minutes=3)
    scraped_after(served.url, namespace, time.time())
    assert verdicts(steady) == expected and carry.stats.carried == 1

    # Prometheus restarts (its data kept): everything is read whole again.
    served.stop()
    served.start()
    served.wait_ready(timeout=60)
    served.wait_for_targets_up(timeout=60)
    assert verdicts(steady)["idle"] != "clear"
    assert (carry.stats.full, carry.stats.carried) == (Full.RESTART, 0)
    assert metric(steady, 'janitor_usage_whole_reads_total{why="prometheus-restart"}') == 1
