"""The node agent with its apiserver out of reach: one line in the project's words, not one per
request per scan.

Aspects covered:
- the agent scanning every second against an apiserver nobody listens on says the outage once
  (janitor.outage), with no raw urllib3 text and no traceback; its scans' failures to list pods,
  read the node or post Events say no more than DEBUG lines; at most one other warning.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_daemon_logs import dead_kubeconfig
from test_node_agent_sight import of_pod, process


def test_the_agent_says_an_outage_once_in_its_words(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    process(proc, 1, "0::/init.scope\n", comm="systemd")
    process(proc, 4121, of_pod("3f2a7c1e-5b8d-4e6f-9a01-2b3c4d5e6f70"))
    (tmp_path / "cgroup").mkdir()
    agent = subprocess.Popen([sys.executable, "-m", "janitor.cli", "node-agent", "--kubeconfig",
                              str(dead_kubeconfig(tmp_path)), "--node-name", "gpu-node-1",
                              "--proc-root", str(proc), "--cgroup-root", str(tmp_path / "cgroup"), "--interval", "1",
                              "--metrics-port", "0"], stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        time.sleep(7)  # some six scans
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert records, err[-2000:]
    said = [r for r in records if "setting" not in r]
    for raw in ("urllib3", "Retrying", "HTTPSConnectionPool", "Max retries", "Errno", "Traceback"):
        assert not [r for r in said if raw in json.dumps(r)], (raw, said)
    outage = [r["message"] for r in said if r["logger"] == "janitor.outage"]
    assert len(outage) == 1 and "does not answer" in outage[0], outage
    loud = [r["message"] for r in said if r["level"] in ("WARNING", "ERROR") and r["logger"] != "janitor.outage"]
    assert len(loud) <= 1, loud
