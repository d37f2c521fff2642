"""`janitor node-agent`: one per node (a DaemonSet), reporting what only the node can see.

Every scan: walk `/proc` for D-state tasks, list this node's pods from the API (field selector,
so the agent's RBAC and load stay small), read each pod cgroup's OOM counters, and report in the
conventions admins already use:

- a Node condition (node-problem-detector style, type `--condition-type`), patched every complete
  scan so `lastHeartbeatTime` tells a silent agent from a healthy node; `lastTransitionTime` moves
  only when the status flips; `Unknown` until the agent has completed `--sustain` scans since it
  started (before that it cannot tell a stuck task from a passing one), then `True` or `False`
  (again after a reboot: the agent starts over). `Unknown` too, with reason `NodeAgentCannotSee`,
  while its last complete scan found no process of any pod the API lists on this node but its
  own (no hostPID, a --proc-root that is not the host's /proc, a sandboxed runtime): then it
  cannot show it sees anything, and says so and why it may be. Its message carries, as data,
  how many of the node's other pods that scan saw, when the agent started, its complete scans
  since, when the last one began, and per Terminating pod of this node what the scan saw of its
  tasks (alive, stuck in D, gone): the janitor's only proof from a node that nothing of a pod is
  left. A scan is complete when /proc was walked (some process found) and the node's pods were
  listed; otherwise the condition keeps its last word, which grows stale;
- a Warning Event on the Node per leftover task (pod, process, time in D, wchan), once per task;
- a second Node condition (`--gpu-condition-type`) on the same rules for GPUs held by processes of
  deleted or long-Terminating pods (any state; an open or mapped `/dev/nvidia<minor>`,
  `janitor.node_agent.holders`), each named by minor, PCI bus id and UUID, with its pod, process
  and since when, and a Warning Event on the Node per holder, once. Nothing is killed;
- a Warning Event on the Pod per new OOM kill reading (so `kubectl describe pod` and the central
  janitor see kills that leave no `OOMKilled` status);
- metrics per node only (no per-pod labels: one series per node keeps Prometheus small).

It talks to the API with the plain typed client: it must not depend on the cluster-side janitor.
What it writes goes through `janitor.node_agent.writer`.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from urllib3.exceptions import HTTPError

from janitor import endpoints, node_report
from janitor.durations import in_words
from janitor.node_agent import cgroups, devices, holders, procfs
from janitor.node_agent.tracker import DStateTracker, Leftover, OomKill, OomTracker, PodOnNode, PodTaskTracker
from janitor.node_agent.writer import NodeWriter, failed, no_answer

logger = logging.getLogger(__name__)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # on a static pod's mirror: the UID its cgroup carries
_STATIC_UID = re.compile(r"[0-9a-f]{32}")  # what a static pod's cgroup carries (any pod may set the annotation)


@dataclass(frozen=True)
class AgentSettings:
    node: str
    proc_root: Path = Path("/proc")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    interval: datetime.timedelta = datetime.timedelta(seconds=30)
    sustain: int = 3  # consecutive scans in D before a task counts as stuck; the condition is Unknown before
    condition_type: str = node_report.CONDITION_TYPE
    pod_uid: str | None = None  # the agent's own pod (downward API metadata.uid): seeing it proves nothing
    dev_root: Path = Path("/dev")  # where the GPU device files are (/dev/nvidia<minor>)
    gpu_condition_type: str = node_report.GPU_CONDITION_TYPE


@dataclass
class ScanReport:
    leftovers: list[Leftover] = field(default_factory=list)
    oom_kills: list[OomKill] = field(default_factory=list)
    pods_known: bool = True
    proc_known: bool = True  # /proc was walked and held processes
    pod_states: dict[str, node_report.PodTaskState] = field(default_factory=dict)  # reported, by pod uid
    condition_written: bool = False
    gpu_holders: list[holders.GpuHolder] = field(default_factory=list)
    gpu_condition_written: bool = False


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry, node: str) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series (process-wide)
        r = registry
        self.node = node
        self.scans = Counter("janitor_node_scans", "Node agent scans, by result", ["node", "result"], registry=r)
        self.scan_seconds = Histogram("janitor_node_scan_seconds", "Wall time of one scan", ["node"], registry=r,
                                      buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.dstate = Gauge("janitor_node_dstate_tasks", "Tasks in D state seen in the last scan", ["node"],
                            registry=r)
        self.leftovers = Gauge("janitor_node_leftover_tasks", "D-state tasks of deleted or long-Terminating pods",
                               ["node"], registry=r)
        self.oom_kills = Counter("janitor_node_oom_kills", "OOM kills in pod cgroups, by kind (group: whole "
                                 "container; process: single processes; unknown)", ["node", "kind"], registry=r)
        self.unreadable = Counter("janitor_node_unreadable_files", "/proc files that exist but could not be read",
                                  ["node"], registry=r)
        self.heartbeat = Gauge("janitor_node_agent_last_scan_timestamp_seconds", "When the last scan finished",
                               ["node"], registry=r)
        self.gpu_holders = Gauge("janitor_node_gpu_holders", "GPUs held by processes of deleted or long-Terminating "
                                 "pods, per GPU and process, in the last complete scan", ["node"], registry=r)
        self.pods_visible = Gauge("janitor_node_agent_pods_visible",
                                  "Pods listed on this node, other than the agent's own, of which the last scan found "
                                  "a process (0: the agent cannot show it sees any pod's processes)", ["node"],
                                  registry=r)
        for result in ("success", "error"):
            self.scans.labels(node=node, result=result)
        for kind in ("group", "process", "unknown"):
            self.oom_kills.labels(node=node, kind=kind)


def own_pod(pod_uid: str | None, self_cgroup: Path = Path("/proc/self/cgroup")) -> frozenset[str]:
    """The agent's own pod: the UID it was given (downward API), and the one in its own cgroup
    path (shown when it shares the host's cgroup namespace, as its processes then are in /proc)."""
    own = {pod_uid} if pod_uid else set()
    try:
        ref = cgroups.pod_of(self_cgroup.read_text())
    except (OSError, UnicodeDecodeError):
        ref = None
    return frozenset(own | ({ref.uid} if ref is not None else set()))


def may_have_run(status: Any) -> bool:
    """Whether the API says the pod has, or had, processes on this node: its phase is Running, a
    container of it (init containers too) runs or ran, or its sandbox is up. A Pending pod can run
    an init container, or one container while another pulls its image; a pod the agent never saw
    such a one of must not be called gone when its processes may sit where the agent cannot see."""
    if status is None:
        return False
    if status.phase == "Running":
        return True
    for c in (*(status.init_container_statuses or ()), *(status.container_statuses or ())):
        state, last = c.state, c.last_state
        if (state is not None and (state.running or state.terminated)) or (last is not None and last.terminated):
            return True
    return any(c.type == "PodReadyToStartContainers" and c.status == "True" for c in status.conditions or ())


class NodeAgent:
    def __init__(self, api: client.ApiClient, settings: AgentSettings, registry: CollectorRegistry | None = None,
                 clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc)) -> None:
        self.writer = NodeWriter(client.CoreV1Api(api), settings.node)
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.metrics = AgentMetrics(self.registry, settings.node)
        self.clock = clock
        self.dstate = DStateTracker(settings.sustain)
        self.own = own_pod(settings.pod_uid)
        self.pod_tasks = PodTaskTracker(settings.sustain, self.own)
        self.holders = holders.HolderTracker(settings.sustain)
        self.oom = OomTracker()
        self.started = clock()  # a restarted agent says so: what it saw before is gone with it
        self.scans = 0  # complete scans since `started`

    @property
    def core(self) -> client.CoreV1Api:
        """The API the agent reads and writes through (the writer's, one client)."""
        return self.writer.core

    @core.setter
    def core(self, core: client.CoreV1Api) -> None:
        self.writer.core = core

    # -- one scan --------------------------------------------------------------------------------
    def scan_once(self) -> ScanReport:
        began = time.monotonic()
        now = self.clock()
        report = ScanReport()
        try:
            result = procfs.scan(self.settings.proc_root, every_cgroup=True)
            pods = self._pods()
            report.pods_known = pods is not None
            report.proc_known = result.processes > 0  # an empty or unreadable /proc is no evidence of anything
            if not report.proc_known:
                logger.warning("no process found under %s: no verdict this scan", self.settings.proc_root)
            report.leftovers = self.dstate.update(result.found, pods if report.proc_known else None, now)
            states = self.pod_tasks.update(result if report.proc_known else None, pods, report.leftovers)
            sight = self.pod_tasks.sight
            if report.pods_known:  # an empty /proc sees no pod either
                self.metrics.pods_visible.labels(node=self.settings.node).set(sight.visible if sight else 0)
            report.gpu_holders, unread = self._gpu_holders(result, pods if report.proc_known else None, now)
            report.oom_kills = self.oom.update(self._oom_states(pods))
            self.metrics.dstate.labels(node=self.settings.node).set(sum(t.state == "D" for t in result.found))
            self.metrics.unreadable.labels(node=self.settings.node).inc(result.unreadable)
            if report.pods_known and report.proc_known:  # else no verdict: the condition keeps its last word
                self.scans += 1
                report.pod_states = states
                self.metrics.leftovers.labels(node=self.settings.node).set(len(report.leftovers))
                report.condition_written = self._condition(report.leftovers, states, sight, now)
                self.writer.leftovers(report.leftovers, now)
                self.metrics.gpu_holders.labels(node=self.settings.node).set(len(report.gpu_holders))
                report.gpu_condition_written = self._gpu_condition(report.gpu_holders, unread, sight, now)
                self.writer.holders(report.gpu_holders, now)
            self._oom_events(report.oom_kills, pods or {})
        except Exception:
            self.metrics.scans.labels(node=self.settings.node, result="error").inc()
            raise
        self.metrics.scans.labels(node=self.settings.node, result="success").inc()
        self.metrics.scan_seconds.labels(node=self.settings.node).observe(time.monotonic() - began)
        self.metrics.heartbeat.labels(node=self.settings.node).set(time.time())
        return report

    def healthy(self) -> tuple[bool, str]:
        """Alive while scans keep finishing: none for three intervals means the agent is stuck."""
        last = self.registry.get_sample_value("janitor_node_agent_last_scan_timestamp_seconds",
                                              {"node": self.settings.node})
        if not last:
            return True, "starting"
        age = time.time() - last
        limit = 3 * self.settings.interval.total_seconds() + 60
        return (age < limit), f"last scan {age:.0f}s ago"

    def serve(self, port: int) -> None:
        """/metrics and /healthz on one port, in background threads."""
        endpoints.serve(self.registry, port, {"/healthz": self.healthy})

    def run_forever(self, stop: Callable[[], bool] = lambda: False) -> None:
        while not stop():
            try:
                report = self.scan_once()
                logger.info("scan: %d leftovers, %d new OOM kill readings", len(report.leftovers),
                            len(report.oom_kills))
            except Exception as e:
                if no_answer(e):  # the outage says it
                    logger.debug("node scan failed, no answer; next scan in %s", in_words(self.settings.interval))
                else:
                    logger.exception("node scan failed; next scan in %s", in_words(self.settings.interval))
            deadline = time.monotonic() + self.settings.interval.total_seconds()
            while not stop() and time.monotonic() < deadline:
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    # -- reading -----------------------------------------------------------------------------------
    def _pods(self) -> dict[str, PodOnNode] | None:
        """This node's pods (paginated); None when they cannot be listed (then nothing is 'gone')."""
        pods: dict[str, PodOnNode] = {}
        token = None
        try:
            while True:
                page = self.core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={self.settings.node}", limit=500, _continue=token)
                for p in page.items:
                    meta = p.metadata
                    if meta is None or not meta.uid:
                        continue
                    grace = datetime.timedelta(seconds=meta.deletion_grace_period_seconds or 0)
                    mirror = (meta.annotations or {}).get(MIRROR_ANNOTATION)
                    mirror = mirror if mirror and _STATIC_UID.fullmatch(mirror) else None  # a static pod's hash only
                    running = may_have_run(p.status)
                    pods[meta.uid] = PodOnNode(meta.uid, meta.namespace or "", meta.name or "", meta.deletion_timestamp,
                                               grace, mirror, running)
                token = page.metadata._continue if page.metadata is not None else None
                if not token:
                    return pods
        except (ApiException, HTTPError, OSError) as e:
            failed(e, "cannot list the pods of node %s", self.settings.node)
            return None

    def _oom_states(self, pods: dict[str, PodOnNode] | None) -> dict[str, cgroups.OomState]:
        """Counters of this node's pods' cgroups; the kubelet's usual places first, then a bounded search."""
        states: dict[str, cgroups.OomState] = {}
        for uid in sorted(pods or {}):
            pod_dir = cgroups.pod_cgroup_dir(self.settings.cgroup_root, cgroups.PodRef(uid, None, cgroups.UNKNOWN_QOS))
            state = cgroups.read_oom(pod_dir) if pod_dir is not None else None
            if state is not None:
                states[uid] = state
        return states

    # -- reporting ---------------------------------------------------------------------------------
    def _condition(self, leftovers: list[Leftover], states: dict[str, node_report.PodTaskState],
                   sight: node_report.Sight | None, now: datetime.datetime) -> bool:
        """The D-state condition; True if written."""
        run = node_report.AgentRun(self.started, self.scans, self.settings.sustain, now)
        if leftovers:
            summary = (f"{len(leftovers)} tasks in D state from {len({f.pod_uid for f in leftovers})} deleted or "
                       "long-Terminating pods: " + "; ".join(f.describe(now) for f in leftovers[:3])
                       + ("; ..." if len(leftovers) > 3 else ""))
        status, reason, summary = self._verdict(bool(leftovers), sight, node_report.REASON_LEFTOVERS,
                                                summary if leftovers else "no D-state processes of deleted pods",
                                                node_report.REASON_CLEAR)
        return self.writer.condition(self.settings.condition_type, status, reason,
                                     node_report.encode_condition(summary, states, run, sight), now)

    def _gpu_condition(self, held: list[holders.GpuHolder], unread: int, sight: node_report.Sight | None,
                       now: datetime.datetime) -> bool:
        """The GPU-holder condition, on the D-state one's rules; True if written. Nothing found
        while some suspect's files could not be read is Unknown, never False."""
        run = node_report.AgentRun(self.started, self.scans, self.settings.sustain, now)
        summary = (f"{len(held)} GPUs held by processes of {len({h.pod_uid for h in held})} deleted or "
                   "long-Terminating pods: " + "; ".join(h.describe(now) for h in held[:2])
                   + ("; ..." if len(held) > 2 else "")) if held else "no GPU held by a process of a deleted pod"
        status, reason, summary = self._verdict(bool(held), sight, node_report.REASON_GPU_HELD, summary,
                                                node_report.REASON_GPU_CLEAR)
        if status == "False" and unread:
            status, reason = "Unknown", node_report.REASON_CANNOT_READ
            summary = (f"the open files or mappings of {unread} processes of deleted or long-Terminating pods could "
                       "not be read, so whether they hold GPUs is unknown: the node agent needs SYS_PTRACE, and no "
                       "security module refusing it /proc/<pid>/fd and maps (janitor_node_unreadable_files_total)")
        data = [node_report.HeldGpu(h.gpu.minor, h.gpu.bus_id, h.pid, h.state, h.since, h.pod_uid, h.namespace,
                                    h.name, h.comm) for h in held]
        return self.writer.condition(self.settings.gpu_condition_type, status, reason,
                                     node_report.encode_holders(summary, data, run, sight), now)

    def _verdict(self, found: bool, sight: node_report.Sight | None, found_reason: str, summary: str,
                 clear_reason: str) -> tuple[str, str, str]:
        """(status, reason, summary): Unknown while the agent cannot show it sees pods' processes
        (unless it found something) or has done fewer than --sustain scans; else True or False."""
        if (sight is None or not sight.proven) and not found:
            return "Unknown", node_report.REASON_CANNOT_SEE, self._cannot_see(sight)
        if self.scans < self.settings.sustain:
            return "Unknown", node_report.REASON_STARTING, (
                f"node agent started at {self.started:%Y-%m-%dT%H:%M:%SZ}: {self.scans} of "
                f"{self.settings.sustain} scans done, no verdict yet")
        return ("True", found_reason, summary) if found else ("False", clear_reason, summary)

    def _cannot_see(self, sight: node_report.Sight | None) -> str:
        listed = sight.listed if sight is not None else 0
        if not listed:
            return ("the node agent sees no process of any pod on this node but its own, and the API lists no other "
                    "pod here, so nothing shows that it can see pods' processes; it proves no pod gone until one runs "
                    "here")
        return (f"the node agent sees no process of any pod on this node but its own: none of the {listed} other pods "
                f"the API lists here. Check that it runs with hostPID, that --proc-root ({self.settings.proc_root}) "
                "is the host's /proc, and that it does not run in a sandboxed runtime (gVisor, Kata); until it sees "
                "them it proves no pod gone and finds no stuck process")

    def _gpu_holders(self, scan: procfs.ScanResult, pods: dict[str, PodOnNode] | None,
                     now: datetime.datetime) -> tuple[list[holders.GpuHolder], int]:
        """This scan's GPU holders among the processes of pods that should be gone, and how many of
        those could not be read whole. When the pods or /proc are unknown, none, and what was
        counted and named so far is kept for the next scan that knows. A failure here is this
        condition's (unread), never the D-state condition's."""
        if pods is None:
            return [], 0
        try:
            self.holders.listed(pods)
            found = holders.suspects(scan.owners, pods, self.own, now)
            held, unreadable = devices.holdings((s.pid for s in found), self.settings.proc_root,
                                                self.settings.dev_root)
            self.metrics.unreadable.labels(node=self.settings.node).inc(unreadable)
            gpus = devices.read_gpus(self.settings.proc_root) if held else {}
            return self.holders.update(found, held, gpus, now), unreadable
        except Exception:
            logger.exception("reading which processes of deleted pods hold GPUs failed; unknown this scan")
            return [], 1

    def _oom_events(self, kills: list[OomKill], pods: dict[str, PodOnNode]) -> None:
        for kill in kills:
            kind = "unknown" if kill.group is None else ("group" if kill.group else "process")
            self.metrics.oom_kills.labels(node=self.settings.node, kind=kind).inc(kill.new_kills)
            pod = pods.get(kill.pod_uid)
            if pod is None:
                continue
            scope = {"group": node_report.OomScope.CONTAINER, "process": node_report.OomScope.PROCESS,
                     "unknown": node_report.OomScope.UNKNOWN}[kind]
            how = {"group": "the whole container was killed (memory.oom.group)",
                   "process": "single processes were killed; the container kept running, so its status shows no "
                              "OOMKilled",
                   "unknown": "whether whole containers or single processes is unknown"}[kind]
            words = (f"{kill.new_kills} OOM kill{'s' if kill.new_kills != 1 else ''} in this pod's memory cgroup "
                     f"({kill.total} since it started): {how}")
            message = node_report.encode_oom(node_report.OomReport(kill.new_kills, kill.total, scope, words))
            involved = {"kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid, "apiVersion": "v1"}
            self.writer.event(pod.namespace, involved, node_report.EVENT_OOM, message)
