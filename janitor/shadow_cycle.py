"""Observing for the idle policies: pods, owners and Prometheus evidence, into shadow findings.

Shadow mode is how admins meet the idle triggers: on a live cluster it reads everything the
enforcing path would read and reports what it would reclaim, and changes nothing. Evidence is
read once per distinct (signal, window) the policies need, never once per pod.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubernetes.client import ApiClient

from janitor.decide import crashloop, pending, shadow, terminating
from janitor.decide.evidence import CpuEvidence, GpuEvidence
from janitor.decide.model import NamespaceView, NodeInfo, ObjectView, PodView
from janitor.observe import evidence, pods
from janitor.observe.prometheus import HONOR_LABELS, SERVICE_MONITOR, Matcher, PrometheusConfig, PrometheusSource
from janitor.policy.model import CrashLoop, Pending, Policy, Terminating
from janitor.settings import Settings


@dataclass(frozen=True)
class ShadowReport:
    findings: tuple[shadow.IdleFinding, ...]
    evidence_failures: tuple[str, ...]  # queries that failed or answered partially this cycle
    gpu_pods_without_telemetry: tuple[str, ...] = ()
    silent_nodes: tuple[str, ...] = ()  # the node of each of those pods, for the gauge by node
    pods: tuple[PodView, ...] = ()  # as read this cycle: the lifecycle's re-check looks for starting pods
    namespaces: Mapping[str, NamespaceView] = field(default_factory=dict)  # by name, as read this cycle
    stuck: tuple[terminating.StuckPod, ...] = ()  # pods stuck Terminating under a `terminating` policy
    nodes: tuple[NodeInfo, ...] = ()  # read when a pending or terminating policy needs them
    ghost_gpus: tuple[tuple[str, str, float], ...] = ()  # (node, gpu, MiB) in use with no pod mapped


def prometheus_source(settings: Settings) -> PrometheusSource:
    if not settings.prometheus_url:
        raise ValueError("the idle policies need --prometheus-url")
    labels = SERVICE_MONITOR if settings.dcgm_labels == "servicemonitor" else HONOR_LABELS
    return PrometheusSource(PrometheusConfig(
        settings.prometheus_url, label_map=labels,
        extra_matchers=tuple(Matcher.parse(m) for m in settings.extra_matchers),
    ))


def idle_report(
    api: ApiClient, settings: Settings, policies: Sequence[Policy], owners: Sequence[ObjectView],
    now: datetime.datetime, source: PrometheusSource,
) -> ShadowReport:
    """Findings of every idle policy now; `owners` are the workload objects from this cycle's snapshot."""
    pod_views = pods.read_pods(api, settings.namespaces, page_size=settings.page_size)
    namespaces = {n.name: n for n in pods.read_namespaces(api, page_size=settings.page_size)}
    gpu: dict[shadow.GpuKey, GpuEvidence] = {}
    for signal, window in sorted(shadow.gpu_evidence_needed(policies), key=str):
        gpu[(signal, window)] = evidence.gpu_evidence(
            source, signal=signal, window=window, step=settings.scrape_interval, at=now,
            labels=source.config.label_map, hostname_label=settings.hostname_label)
    cpu: dict[shadow.CpuKey, CpuEvidence] = {}
    for window, ignore in sorted(shadow.cpu_evidence_needed(policies), key=str):
        cpu[(window, ignore)] = evidence.cpu_evidence(
            source, window=window, step=datetime.timedelta(minutes=1), at=now, ignore_containers=ignore)
    findings = shadow.idle_findings(pod_views, namespaces, {o.ref.uid: o for o in owners}, policies, gpu, cpu, now,
                                    protected_namespaces=settings.rails.protected_namespaces,
                                    cronjob_mode=settings.cronjob_target, owner_keys=settings.owner_keys)
    nodes = pods.read_nodes(api, page_size=settings.page_size) if any(
        p.trigger(Pending) or p.trigger(Terminating) for p in policies) else []
    stuck = terminating.stuck_pods(pod_views, nodes, namespaces, policies, now,
                                   protected_namespaces=settings.rails.protected_namespaces)
    ghosts = evidence.ghost_gpus(source, at=now, labels=source.config.label_map,
                                 hostname_label=settings.hostname_label) if any(
        p.trigger(Terminating) for p in policies) else None
    if any(p.trigger(CrashLoop) for p in policies):
        findings += crashloop.crash_findings(
            pod_views, namespaces, {o.ref.uid: o for o in owners}, policies, now,
            pods.read_pod_events(api, "OOMKillInPod", settings.namespaces, page_size=settings.page_size),
            cronjob_mode=settings.cronjob_target, protected_namespaces=settings.rails.protected_namespaces,
            owner_keys=settings.owner_keys)
    if any(p.trigger(Pending) for p in policies):
        findings += pending.pending_findings(
            pod_views, namespaces, {o.ref.uid: o for o in owners}, policies, nodes, now,
            cronjob_mode=settings.cronjob_target, protected_namespaces=settings.rails.protected_namespaces,
            owner_keys=settings.owner_keys)
    failures = tuple(sorted({e.failed for e in [*gpu.values(), *cpu.values()] if e.failed}))
    seen = {(k.namespace, k.pod) for e in gpu.values() for k in e.pods}
    silent_pods = [p for p in pod_views
                   if p.gpus and p.phase == "Running" and (p.ref.namespace, p.ref.name) not in seen and gpu
                   and not any(e.failed for e in gpu.values())]
    silent = tuple(sorted(f"{p.ref.namespace}/{p.ref.name} on {p.node}" for p in silent_pods))
    return ShadowReport(tuple(findings), failures, silent, tuple(p.node or "" for p in silent_pods), tuple(pod_views),
                        namespaces, tuple(stuck), tuple(nodes), ghosts or ())


class PolicySet:
    """The policies in use: re-read every cycle, and the last good set kept when a file breaks
    (a log line and the janitor_policies_broken gauge say so), so a typo never stops the janitor."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = tuple(paths)
        self.policies: tuple[Policy, ...] = ()
        self.errors: tuple[str, ...] = ()

    def reload(self) -> bool:
        from janitor.policy import load

        loaded = load.from_paths(self.paths)
        self.errors = tuple(str(e) for e in loaded.errors)
        if loaded.errors:
            return False
        self.policies = loaded.policies
        return True
