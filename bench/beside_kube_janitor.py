"""kube-janitor beside the janitor in the benchmarks: one `--once --dry-run` cycle of it on the same
cluster, through the same counting proxy, so "first cycle on the wire" has something to stand against.

kube-janitor is not on PyPI: point `--kube-janitor PATH` (bench/cluster_scale.py) at a checkout of its
source, tag 20.10.0 (codeberg.org/hjacobs/kube-janitor, formerly github.com/hjacobs/kube-janitor), the
directory holding `kube_janitor/`. Its dependencies (pykube-ng, jmespath, PyYAML) go into a virtualenv of
their own, made once under `~/.cache/janitor-bench/`. It runs as its Deployment does: every namespace but
kube-system, every resource type but events and controllerrevisions, annotations only (no rules file).
Each of its cycles lists everything, so its one cycle is every cycle it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

DEPENDENCIES = ("pykube-ng==23.6.0", "jmespath==1.0.1", "PyYAML")
CACHE = Path.home() / ".cache" / "janitor-bench" / ("kube-janitor-deps-" + "-".join(DEPENDENCIES[:2]))

# Runs kube-janitor's own main() and says, at exit, the CPU it took and its peak RSS.
_WRAPPER = """
import atexit, json, resource, sys
def said():
    used = resource.getrusage(resource.RUSAGE_SELF)
    hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')) / 1024
    print('KUBE-JANITOR-MEASURED ' + json.dumps({'cpu': used.ru_utime + used.ru_stime, 'peak_rss_mb': hwm}),
          file=sys.__stderr__, flush=True)
atexit.register(said)
sys.argv = ['kube-janitor', *sys.argv[1:]]
from kube_janitor.main import main
main()
"""


def python() -> Path:
    """The virtualenv's Python, made on first use."""
    found = CACHE / "bin" / "python"
    if not found.exists():
        subprocess.run([sys.executable, "-m", "venv", str(CACHE)], check=True)
        subprocess.run([str(found), "-m", "pip", "install", "-q", *DEPENDENCIES], check=True)
    return found


def one_cycle(source: Path, kubeconfig: Path, proxy: Any, log: Path) -> dict[str, Any]:
    """One kube-janitor cycle through `proxy` (a FaultProxy or FaultControl): requests, bytes on the
    wire, CPU seconds and peak RSS, as the janitor's own are counted."""
    if not (source / "kube_janitor" / "main.py").exists():
        raise SystemExit(f"--kube-janitor {source}: no kube_janitor/main.py there (a checkout of its 20.10.0 tag)")
    before = [s.bytes for s in proxy.requests()]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(source)}
    began = time.monotonic()
    with open(log, "a") as out:
        done = subprocess.run([str(python()), "-c", _WRAPPER, "--once", "--dry-run"], env=env, stdout=out,
                              stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.monotonic() - began
    out_lines = done.stderr.splitlines()
    with open(log, "a") as out:
        out.write("\n".join(line for line in out_lines if not line.startswith("KUBE-JANITOR-MEASURED")) + "\n")
    measured = [json.loads(line.split(" ", 1)[1]) for line in out_lines if line.startswith("KUBE-JANITOR-MEASURED")]
    if done.returncode or not measured:
        raise SystemExit(f"kube-janitor's cycle failed ({done.returncode}); its log: {log}")
    seen = proxy.requests()
    requests: Counter[str] = Counter()
    moved = 0
    for i, s in enumerate(seen):
        moved += s.bytes - (before[i] if i < len(before) else 0)
        if i >= len(before):
            requests[s.method] += 1
    return {"requests": sum(requests.values()), "bytes": moved, "cpu": measured[-1]["cpu"],
            "peak_rss_mb": measured[-1]["peak_rss_mb"], "seconds": seconds}
