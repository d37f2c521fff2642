"""A Prometheus that already holds hours of history, for tests of "idle for the last 2 hours".

Prometheus accepts backfilled blocks only for times before its first scrape, so history cannot
be added to the sandbox's running Prometheus without waiting for its next block reload. Instead
a test describes the past on the sandbox's exporters (`ValuesControl.add_history`), and gets a
second Prometheus, backfilled from those same values and then started, scraping the same
exporters: backfilled and live samples form one series (counters included), as if the workload
had been running, and measured, for hours.
"""

from __future__ import annotations

import math
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from kubernetes import client

from devenv.exporters.model import NodeView, PodView
from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Values
from devenv.podviews import node_view, pod_view
from devenv.procs import wait_until
from devenv.prometheus import BackfillReport, DcgmStyle, PrometheusServer, backfill, scrape_config, scrape_targets
from devenv.prometheus_release import Release
from devenv.prometheus_release import release as choose_release

CATCH_UP_ROUNDS = 3


def prometheus_with_history(
    api: client.ApiClient,
    exporters_url: str,
    *,
    hours: float = 2.0,
    step: float = 15.0,
    dcgm_style: DcgmStyle = "servicemonitor",
    scrape_interval: str | None = None,
    work_dir: Path | None = None,
    release: Release | str | None = None,
    aggregate: bool = False,
    flags: Sequence[str] = (),
) -> tuple[PrometheusServer, BackfillReport]:
    """Backfill the last `hours` for the pods that exist now, then start Prometheus.

    It scrapes every `step` unless told otherwise, as the backfill wrote: the janitor reads each
    job's scrape interval from Prometheus and measures the history against it.

    The caller stops the returned server. Pods and nodes are read from the apiserver, so the
    series carry the same names, UIDs and GPU slots the live exporters serve. `release` picks the
    Prometheus major version (`devenv.prometheus_release`; $JANITOR_PROMETHEUS or 2.x by default).
    `aggregate`: scrape the exporters' aggregate targets, as the scale sandbox's Prometheus does
    (`scrape_config(aggregate=True)`); the backfilled series carry the same stored labels.
    `flags`: more of Prometheus' flags (such as `--query.max-samples=N`).
    """
    release = choose_release(release)
    core = client.CoreV1Api(api)
    pods = [pod_view(p) for p in core.list_pod_for_all_namespaces().items]
    nodes = [node_view(n) for n in core.list_node().items]
    history = Values.from_json(_with_live_gpu_slots(exporters_url, pods, nodes))
    data_dir = Path(tempfile.mkdtemp(prefix="prometheus-history-", dir=work_dir))
    start = time.time() - hours * 3600
    report = _backfill_until_now(history, pods, nodes, start, step, data_dir, dcgm_style, release)
    server = PrometheusServer(
        data_dir, scrape_config(exporters_url, nodes, dcgm_style=dcgm_style,
                                interval=scrape_interval or f"{step:g}s", aggregate=aggregate),
        throwaway=True,  # hundreds of tests each start one: their blocks would pile up in the sandbox
        release=release, extra_flags=flags,
    )
    server.start()
    try:
        server.wait_ready(timeout=60)
        down = 0 if aggregate else sum(history.target_down(t.exporter, t.node, time.time())
                                       for t in scrape_targets(nodes, dcgm_style=dcgm_style))
        server.wait_for_targets_up(timeout=60, down=down)
    except BaseException:
        server.stop()
        raise
    return server, report


def _backfill_until_now(history: Values, pods: list[PodView], nodes: list[NodeView], start: float, step: float,
                        data_dir: Path, dcgm_style: DcgmStyle, release: Release) -> BackfillReport:
    """Backfill from `start` on the grid of `step` up to within a step of now.

    Hours of hundreds of pods take tens of seconds to write, and the first live scrape comes only
    after that (plus Prometheus' own start). A history that stopped where the backfill began would
    leave a gap that long before the live samples, and the janitor rightly counts a gap longer
    than its limit as missing evidence. Each round here covers only the time the one before
    took, so it is quicker, and a few rounds leave a gap of about a step.
    """
    end = time.time()
    report = backfill(history, pods, nodes, start, end, step, data_dir, dcgm_style=dcgm_style, release=release)
    for _ in range(CATCH_UP_ROUNDS):
        resume = start + math.ceil((end - start) / step) * step  # the grid's next point: no sample twice
        now = time.time()
        if now - resume < step:
            break
        more = backfill(history, pods, nodes, resume, now, step, data_dir, dcgm_style=dcgm_style, release=release)
        report = replace(report, samples=report.samples + more.samples,
                         timestamps=report.timestamps + more.timestamps, blocks=report.blocks + more.blocks,
                         promtool_output=report.promtool_output + more.promtool_output)
        end = now
    return report


def _with_live_gpu_slots(exporters_url: str, pods: list[PodView], nodes: list[NodeView],
                         timeout: float = 10.0) -> dict:
    """The exporters' values once they have given every current GPU pod its devices.

    The backfill must put each pod on the devices the live exporter serves it on; otherwise, at
    past times when today's neighbours did not exist yet, it would hand out other indices and the
    pod's history and live samples would become two series. Rendering each node's dcgm page makes
    the live exporter assign them; a pod that fits nowhere never gets devices, so this waits a
    bounded time and then goes on with what there is.
    """
    control = ValuesControl(exporters_url)
    wanted = {p.uid for p in pods if p.gpus and p.node and p.phase in ("Pending", "Running")}
    state: dict = {}

    def assigned() -> bool:
        for node in nodes:
            if node.gpus:
                with urllib.request.urlopen(f"{exporters_url.rstrip('/')}/dcgm/{node.name}/metrics", timeout=10):
                    pass
        state.update(control.get())
        return wanted <= set(state.get("gpu_slots", {}))

    try:
        wait_until(assigned, timeout=timeout, what="the live exporters to assign every GPU pod its devices",
                   interval=0.5)
    except TimeoutError:
        pass  # pods that fit on no node: they have no series live either
    return state or control.get()
