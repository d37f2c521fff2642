"""Benchmark: what nodes cost the janitor, watched (each kubelet status report comes whole) or
listed again every --node-refresh (the daemon's way), at the kubelet cadences clusters run.

Run on purpose, never from the tests:

    .venv/bin/python bench/node_updates.py --nodes 2500

It starts its own sandbox (run dir `.devenv-bench-nodes`), creates N nodes the size of a real GPU
node's object (node-feature-discovery's labels, the images a node holds, node-problem-detector's
conditions: about 14 KB of JSON before the apiserver's managedFields), which kwok leaves alone,
and measures two things, each in a child process that does only that (so its CPU is the
janitor's alone), behind the pass-through proxy that counts the bytes on the wire:

- watched: the watch cache's node watch, while the parent posts `--reports` status reports as a
  kubelet does (a Ready condition with a new heartbeat time): CPU and wire bytes per report;
- listed: `--lists` lists of every node, as the cache makes them every --node-refresh (pages of
  twice --page-size, compressed by the apiserver): CPU and wire bytes per list.

From these, per minute at N nodes: the watch at a real kubelet's cadence (a status report every
5 minutes, `nodeStatusReportFrequency`, more on any change) and at the 10 s some distributions set
(`nodeStatusUpdateFrequency` inherited), against the list every --node-refresh, which costs the
same whatever the kubelets do. CPU is given as a share of one core.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PREFIX = "bench-node-"
REAL_KUBELET_REPORT_SECONDS = 300.0  # nodeStatusReportFrequency's default: a report with no change
SHORT_REPORT_SECONDS = 10.0


def node_object(i: int) -> dict[str, Any]:
    """A GPU node as a lab's cluster holds it: NFD and GPU feature labels, the images it pulled,
    node-problem-detector's conditions beside the kubelet's."""
    name = f"{PREFIX}{i:05d}"
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "node.kubernetes.io/instance-type": "p4d.24xlarge", "topology.kubernetes.io/zone": "zone-a",
              "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
              "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920", "nvidia.com/cuda.driver.major": "550",
              "nvidia.com/gpu.deploy.dcgm-exporter": "true", "nvidia.com/mig.capable": "true"}
    labels |= {f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in (
        "AVX", "AVX2", "AVX512F", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512VL", "AVX512VNNI", "FMA3", "SHA",
        "VAES", "VPCLMULQDQ", "ADX", "AESNI", "CMPXCHG8", "FXSR", "HYPERVISOR", "MOVBE", "OSXSAVE", "X87")}
    labels |= {f"feature.node.kubernetes.io/{k}": v for k, v in (
        ("kernel-version.full", "5.15.0-105-generic"), ("kernel-version.major", "5"), ("pci-10de.present", "true"),
        ("system-os_release.ID", "ubuntu"), ("system-os_release.VERSION_ID", "22.04"), ("memory-numa", "true"),
        ("network-sriov.capable", "true"), ("storage-nonrotationaldisk", "true"))}
    images = [{"names": [f"registry.example.org/ml/image-{j}@sha256:{(i * 97 + j * 31) % 10**6:064d}",
                         f"registry.example.org/ml/image-{j}:v{j}.{i % 7}"], "sizeBytes": 1_000_000_000 + j}
              for j in range(40)]
    heartbeat = "2026-11-28T00:00:00Z"
    kubelet = [("MemoryPressure", "False", "KubeletHasSufficientMemory"), ("DiskPressure", "False",
               "KubeletHasNoDiskPressure"), ("PIDPressure", "False", "KubeletHasSufficientPID"),
               ("Ready", "True", "KubeletReady")]
    npd = [(t, "False", f"No{t}") for t in (
        "KernelDeadlock", "ReadonlyFilesystem", "FrequentKubeletRestart", "FrequentDockerRestart",
        "FrequentContainerdRestart", "CorruptDockerOverlay2", "GpuXidError", "NvlinkDown")]
    conditions = [{"type": t, "status": s, "reason": r, "message": f"{r} on {name}", "lastHeartbeatTime": heartbeat,
                   "lastTransitionTime": heartbeat} for t, s, r in kubelet + npd]
    resources = {"cpu": "96", "memory": "1152Gi", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "7Ti",
                 "hugepages-1Gi": "0", "hugepages-2Mi": "0", "rdma/ib": "4"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {
            "nfd.node.kubernetes.io/feature-labels": ",".join(k.split("/", 1)[1] for k in labels
                                                              if k.startswith("feature.node")),
            "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{i:017x}"}),
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24", "providerID": f"aws:///zone-a/i-{i:017x}"},
        "status": {"capacity": resources, "allocatable": resources, "conditions": conditions, "images": images,
                   "addresses": [{"type": "InternalIP", "address": f"10.1.{i // 256 % 256}.{i % 256}"},
                                 {"type": "Hostname", "address": name}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {"machineID": f"{i:032x}", "systemUUID": f"{i:032x}", "bootID": f"{i:032x}",
                                "kernelVersion": "5.15.0-105-generic", "osImage": "Ubuntu 22.04.4 LTS",
                                "containerRuntimeVersion": "containerd://1.7.13", "kubeletVersion": "v1.34.1",
                                "kubeProxyVersion": "v1.34.1", "operatingSystem": "linux", "architecture": "amd64"}},
    }


def report(i: int) -> dict[str, Any]:
    """What a kubelet's status report changes: the heartbeat times of its conditions."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": now}]}}


# -- the child: one way of reading nodes, measured -----------------------------------------------------------


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    from devenv.fault_rules import FaultControl
    from devenv.procs import wait_until
    from janitor import kubeapi
    from janitor.observe import cluster, views
    from janitor.observe.cache import ClusterCache
    from janitor.observe.watch import KindWatch
    from janitor.settings import DEFAULTS

    api = kubeapi.connect(args.kubeconfig, (5.0, 60.0))
    proxy = FaultControl(args.control)
    slim = ClusterCache._slim(views.NODES, False)
    page = cluster.page_size_of(views.NODES, DEFAULTS.cluster.page_size)
    relist = 0.05 if args.way == "listed" else None
    kind = KindWatch(api, views.NODES, slim, page_size=page, relist_seconds=relist, timeout=(5.0, 60.0))
    began_bytes = sum(s.bytes for s in proxy.requests())
    kind.start()
    wait_until(lambda: kind.status().synced, timeout=600, interval=0.05, what="nodes listed")
    first = sum(s.bytes for s in proxy.requests()) - began_bytes
    cpu, at = time.process_time(), sum(s.bytes for s in proxy.requests())
    if args.way == "listed":
        lists0 = kind.status().lists
        wait_until(lambda: kind.status().lists >= lists0 + args.count, timeout=1800, interval=0.05, what="lists")
        done = kind.status().lists - lists0
    else:
        print("ready", flush=True)  # the parent posts the reports now
        events0 = kind.status().events
        wait_until(lambda: kind.status().events >= events0 + args.count, timeout=1800, interval=0.05,
                   what="the reports seen")
        done = kind.status().events - events0
    spent, moved = time.process_time() - cpu, sum(s.bytes for s in proxy.requests()) - at
    kind.stop()
    return {"way": args.way, "count": done, "cpu_each": spent / done, "bytes_each": moved / done,
            "first_list_bytes": first, "objects": kind.status().objects}


# -- the parent ---------------------------------------------------------------------------------------------


def _child(args: argparse.Namespace, proxy: Any, kubeconfig: Path, way: str, count: int,
           post: Any = None) -> dict[str, Any]:
    argv = [sys.executable, __file__, "measure", "--control", proxy.control_url, "--kubeconfig", str(kubeconfig),
            "--way", way, "--count", str(count)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        if post is not None:
            assert child.stdout.readline().strip() == "ready"
            post()
        out = child.stdout.read()
    if child.returncode:
        raise SystemExit(f"the {way} measurement failed ({child.returncode})")
    return dict(json.loads(out.strip().splitlines()[-1]))


def _per_minute(n: int, refresh: float, watched: dict[str, Any], listed: dict[str, Any]) -> list[str]:
    lines = [f"{n} nodes; a node object {listed['first_list_bytes'] / n / 1024:.2f} KB on the wire in a list, "
             f"{watched['bytes_each'] / 1024:.2f} KB as a watch event",
             f"{'':44}{'CPU, % of a core':>18}{'wire, MB/min':>14}"]
    for label, every in (("watched, kubelets report every 5 min", REAL_KUBELET_REPORT_SECONDS),
                         ("watched, kubelets report every 10 s", SHORT_REPORT_SECONDS)):
        per_s = n / every
        lines.append(f"{label:44}{100 * per_s * watched['cpu_each']:>18.2f}"
                     f"{per_s * 60 * watched['bytes_each'] / 1e6:>14.2f}")
    lines.append(f"{f'listed every {refresh:g} s (either cadence)':44}{100 * listed['cpu_each'] / refresh:>18.3f}"
                 f"{listed['bytes_each'] * 60 / refresh / 1e6:>14.2f}")
    lines.append(f"per report watched: {watched['cpu_each'] * 1e6:.0f} µs CPU; per list of every node: "
                 f"{listed['cpu_each'] * 1e3:.0f} ms CPU, {listed['bytes_each'] / 1e6:.2f} MB "
                 f"(measured: {watched['count']} reports, {listed['count']} lists)")
    return lines


def _run(args: argparse.Namespace) -> int:
    import counting_proxy
    from kubernetes import client

    from devenv.faults import repoint_kubeconfig
    from devenv.sandbox import read_env_file
    from janitor import kubeapi
    from janitor.settings import DEFAULTS

    run_dir = ROOT / args.run_dir
    python = [sys.executable, "-m", "devenv", "--run-dir", str(run_dir)]
    if not args.keep_sandbox or not (run_dir / "sandbox.env").exists():
        subprocess.run([*python, "up", "--detach", "--scale"], check=True, cwd=ROOT)
    try:
        env = read_env_file(run_dir / "sandbox.env")
        core = client.CoreV1Api(kubeapi.connect(env["KUBECONFIG"], (5.0, 60.0)))
        have = {n.metadata.name for n in core.list_node().items if n.metadata.name.startswith(PREFIX)}
        began = time.monotonic()
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda i: core.create_node(node_object(i)), [i for i in range(args.nodes)  # type: ignore[arg-type]
                                                                      if f"{PREFIX}{i:05d}" not in have]))
        print(f"{args.nodes} nodes there ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)


        def post() -> None:
            t = time.monotonic()
            with ThreadPoolExecutor(args.workers) as pool:
                list(pool.map(lambda i: core.patch_node_status(f"{PREFIX}{i % args.nodes:05d}", report(i)),
                              range(args.reports)))
            print(f"{args.reports} reports posted ({args.reports / (time.monotonic() - t):.0f}/s)",
                  file=sys.stderr, flush=True)

        with counting_proxy.in_front_of(Path(env["KUBECONFIG"])) as proxy:
            proxied = repoint_kubeconfig(Path(env["KUBECONFIG"]), run_dir / "bench.kubeconfig", proxy.url)
            watched = _child(args, proxy, proxied, "watched", args.reports, post)
            listed = _child(args, proxy, proxied, "listed", args.lists)
        print("\n".join(_per_minute(args.nodes, DEFAULTS.cluster.node_refresh.total_seconds(), watched, listed)))
    finally:
        if not args.keep_sandbox:
            subprocess.run([*python, "down"], cwd=ROOT)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    measure = sub.add_parser("measure", help="(internal) the child: one way of reading nodes, measured")
    for flag in ("--control", "--kubeconfig", "--way"):
        measure.add_argument(flag, required=True)
    measure.add_argument("--count", type=int, required=True)
    parser.add_argument("--nodes", type=int, default=2500, help="how many nodes (%(default)s)")
    parser.add_argument("--reports", type=int, default=5000, help="status reports posted while watched (%(default)s)")
    parser.add_argument("--lists", type=int, default=5, help="lists of every node measured (%(default)s)")
    parser.add_argument("--workers", type=int, default=8, help="concurrent requests creating nodes and posting "
                                                              "reports (%(default)s)")
    parser.add_argument("--run-dir", default=".devenv-bench-nodes", help="the sandbox's run dir (%(default)s)")
    parser.add_argument("--keep-sandbox", action="store_true", help="use a running sandbox there, leave it running")
    args = parser.parse_args()
    if args.command == "measure":
        print(json.dumps(_measure(args)))
        return 0
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
