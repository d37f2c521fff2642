"""What runs in a sandbox, as a short text report (used by `up`, `demo` and `status`).

It reads only through the same doors a user has: the kubeconfig, Prometheus' HTTP API and the
Slack stand-in's control API, so it works the same for a sandbox in this or another process.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

from kubernetes import client

from devenv import access
from devenv.slack_standin import SlackStandInControl


def _prometheus(url: str, path: str, **params: str) -> dict:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}{path}{query}", timeout=10) as resp:
        return json.load(resp)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(header), *(line(r) for r in rows)])


def _gpus(pod: client.V1Pod) -> int:
    total = 0
    for c in pod.spec.containers:
        limits = (c.resources.limits or {}) if c.resources else {}
        total += sum(int(v) for k, v in limits.items() if k.startswith("nvidia.com/"))
    return total


def kubernetes_section(kubeconfig: Path) -> str:
    with access.api_client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        version = client.VersionApi(api).get_code().git_version
        pods = core.list_pod_for_all_namespaces().items
        used: dict[str, int] = defaultdict(int)
        for p in pods:
            if p.spec.node_name and p.status.phase in ("Pending", "Running"):
                used[p.spec.node_name] += _gpus(p)
        node_rows = []
        for n in core.list_node().items:
            ready = next((c.status for c in n.status.conditions or [] if c.type == "Ready"), "?")
            gpu_keys = [k for k in (n.status.allocatable or {}) if k.startswith("nvidia.com/")]
            gpus = ", ".join(f"{k.removeprefix('nvidia.com/')}={n.status.allocatable[k]}" for k in gpu_keys)
            node_rows.append([n.metadata.name, "Ready" if ready == "True" else f"Ready={ready}",
                              gpus or "-", str(used[n.metadata.name])])
        pod_rows = []
        for p in sorted(pods, key=lambda p: (p.metadata.namespace, p.metadata.name)):
            if p.metadata.namespace == "kube-system":
                continue
            owner = next((f"{o.kind}/{o.name}" for o in p.metadata.owner_references or [] if o.controller), "-")
            state = "Terminating" if p.metadata.deletion_timestamp else p.status.phase
            pod_rows.append([f"{p.metadata.namespace}/{p.metadata.name}", state, p.spec.node_name or "-",
                             str(_gpus(p)), owner])
    parts = [f"Kubernetes {version} (real kube-apiserver, controller-manager, scheduler; kwok nodes)",
             _table(node_rows, ["NODE", "STATUS", "GPUS", "GPUS IN USE"])]
    if pod_rows:
        parts.append(_table(pod_rows, ["POD", "STATUS", "NODE", "GPUS", "OWNER"]))
    return "\n\n".join(parts)


def prometheus_section(url: str) -> str:
    targets = _prometheus(url, "/api/v1/targets")["data"]["activeTargets"]
    by_job: dict[str, list[str]] = defaultdict(list)
    for t in targets:
        by_job[t["labels"]["job"]].append(t["health"])
    rows = [[job, f"{h.count('up')}/{len(h)} up"] for job, h in sorted(by_job.items())]
    util = _prometheus(url, "/api/v1/query", query="DCGM_FI_DEV_GPU_UTIL")["data"]["result"]
    util_rows = []
    for s in util:
        m = s["metric"]
        # Behind a ServiceMonitor (target label `service`), `pod`/`namespace` are the exporter's
        # own and the workload's are `exported_*`; a GPU without a workload has no exported_pod.
        prefix = "exported_" if "service" in m else ""
        pod = m.get(f"{prefix}pod") or "(unassigned)"
        ns = m.get(f"{prefix}namespace", "")
        util_rows.append([f"{ns}/{pod}" if ns else pod, m.get("Hostname") or m.get("hostname", ""),
                          m.get("gpu", ""), s["value"][1]])
    parts = [f"Prometheus {url}", _table(rows, ["JOB", "TARGETS"])]
    if util_rows:
        parts.append(_table(sorted(util_rows), ["GPU POD", "HOST", "GPU", "DCGM_FI_DEV_GPU_UTIL"]))
    return "\n\n".join(parts)


def slack_section(api_url: str) -> str:
    requests = SlackStandInControl(api_url).requests()
    posted = sum(1 for r in requests if r.method == "chat.postMessage")
    return f"Slack stand-in {api_url} ({len(requests)} requests recorded, {posted} messages posted)"


def status(env: dict[str, str]) -> str:
    sections = []
    for title, build in (
        ("kubernetes", lambda: kubernetes_section(Path(env["KUBECONFIG"]))),
        ("prometheus", lambda: prometheus_section(env["PROMETHEUS_URL"])),
        ("slack", lambda: slack_section(env["SLACK_API_URL"])),
    ):
        try:
            sections.append(build())
        except Exception as e:  # a status report names what is down instead of failing whole
            sections.append(f"{title}: NOT REACHABLE ({type(e).__name__}: {e})")
    sections.append(f"KUBECONFIG={env['KUBECONFIG']}")
    return "\n\n".join(sections)
