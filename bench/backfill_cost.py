"""What a history backfill costs at a size, without a sandbox: time, samples, disk, memory.

    .venv/bin/python bench/backfill_cost.py --nodes 50 200 --hours 1

For each size it makes the pods and nodes `python -m devenv populate` would (`node_plan`, as the
apiserver would list them: bound, running since their backdated start), renders every exporter
at every 15 s step of the last `--hours` and has promtool write the blocks
(`devenv.prometheus.backfill`, what `devenv.history.prometheus_with_history` and
`bench/cluster_scale.py --history` run), in a scratch directory removed after. Prints, per size:
seconds to render and write the OpenMetrics text and for promtool, samples, MB of OpenMetrics
text (on disk while promtool reads it) and of blocks, and promtool's peak RSS; then samples and
seconds per node-hour, to project bigger sizes from.
"""

from __future__ import annotations

import argparse
import datetime
import resource
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cluster(nodes: int) -> tuple[list[Any], list[Any]]:
    from devenv.nodes import STARTED_AT
    from devenv.podviews import node_view_from_dict, pod_view_from_dict
    from devenv.populate import node_plan

    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    pods, views = [], []
    for index in range(1, nodes + 1):
        plan = node_plan(index, now=now)
        views.append(node_view_from_dict(plan.node))
        for manifest in plan.pods:
            meta = {**manifest["metadata"], "uid": str(uuid.uuid4()), "creationTimestamp": stamp}
            started = meta["annotations"][STARTED_AT]
            pods.append(pod_view_from_dict({**manifest, "metadata": meta,
                                            "status": {"phase": "Running", "startTime": started}}))
    return pods, views


def measure(nodes: int, hours: float, step: float, work: Path) -> dict[str, float]:
    from devenv import prometheus
    from devenv.exporters.values import Values

    pods, views = _cluster(nodes)
    data_dir = work / f"blocks-{nodes}"
    promtool = {"seconds": 0.0}
    run = prometheus.subprocess.run

    def timed(*a: Any, **k: Any) -> Any:  # promtool's share of the time
        began = time.monotonic()
        try:
            return run(*a, **k)
        finally:
            promtool["seconds"] += time.monotonic() - began

    prometheus.subprocess.run = timed  # type: ignore[assignment]
    end = time.time()
    began = time.monotonic()
    try:
        report = prometheus.backfill(Values(), pods, views, end - hours * 3600, end, step, data_dir,
                                     dcgm_style="servicemonitor", keep_openmetrics=True)
    finally:
        prometheus.subprocess.run = run  # type: ignore[assignment]
    took = time.monotonic() - began
    assert report.openmetrics is not None
    text_mb = report.openmetrics.stat().st_size / 2**20
    report.openmetrics.unlink()
    blocks_mb = sum(f.stat().st_size for f in data_dir.rglob("*") if f.is_file()) / 2**20
    shutil.rmtree(data_dir)
    return {"nodes": nodes, "pods": len(pods), "hours": hours, "samples": report.samples, "seconds": took,
            "promtool_seconds": promtool["seconds"], "text_mb": text_mb, "blocks_mb": blocks_mb,
            "promtool_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[50, 200], help="sizes (%(default)s)")
    parser.add_argument("--hours", type=float, default=1.0, help="history to write (%(default)s)")
    parser.add_argument("--step", type=float, default=15.0, help="seconds between samples (%(default)s)")
    parser.add_argument("--work-dir", help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="backfill-cost-", dir=args.work_dir))
    try:
        for nodes in args.nodes:
            found = measure(nodes, args.hours, args.step, work)
            node_hours = found["nodes"] * found["hours"]
            print(f"{nodes} nodes, {found['pods']} pods, {args.hours:g} h: {found['samples']:,.0f} samples in "
                  f"{found['seconds']:.1f} s ({found['promtool_seconds']:.1f} s promtool); "
                  f"{found['text_mb']:.0f} MB OpenMetrics, {found['blocks_mb']:.0f} MB blocks, "
                  f"promtool peak RSS {found['promtool_peak_rss_mb']:.0f} MB; per node-hour "
                  f"{found['samples'] / node_hours:,.0f} samples, {found['seconds'] / node_hours:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
