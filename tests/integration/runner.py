"""Running the janitor's cycles on the sandbox, as the daemon runs them.

`Runner` keeps what the daemon keeps between cycles (the cycle memory, the metrics, and with
`cache` its watch cache, whose state is in the metrics as the daemon exports it) so a test can run
several cycles and read the metrics; `settings` builds the grouped `Settings` from the few values
the sandbox tests vary.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from kubernetes.client import ApiClient

from janitor import cycle, daemon, report
from janitor.act.slack import Slack
from janitor.cycle import CycleResult, Memory, Planned, Ports
from janitor.observe.cache import ClusterCache
from janitor.settings import ClusterSettings, PrometheusSettings, Settings, SlackSettings
from janitor.telemetry import Telemetry

_GROUPS = {
    "cluster": (ClusterSettings, {}),
    "prometheus": (PrometheusSettings, {"prometheus_url": "url", "prometheus_timeout": "timeout"}),
    "slack": (SlackSettings, {"slack_token": "token", "slack_api_url": "api_url", "slack_timeout": "timeout"}),
}


def settings(**values: Any) -> Settings:
    """`Settings` from flat keywords: cluster fields (namespaces, state_namespace, kinds, ...),
    prometheus_url / scrape_interval / ..., slack_token / slack_api_url / admin_channel / ..., and
    the top-level ones (rails, lifecycle, policy_paths, interval)."""
    groups: dict[str, dict[str, Any]] = {name: {} for name in _GROUPS}
    top: dict[str, Any] = {}
    for key, value in values.items():
        for group, (kind, renamed) in _GROUPS.items():
            name = renamed.get(key, key)
            if name == "timeout" and key == "timeout":
                continue  # ambiguous: prometheus_timeout or slack_timeout
            if name in {f.name for f in fields(kind)}:
                groups[group][name] = value
                break
        else:
            top[key] = value
    built = {group: kind(**groups[group]) for group, (kind, _) in _GROUPS.items()}
    return Settings(**built, **top)


class Runner:
    def __init__(self, api: ApiClient, settings: Settings,
                 clock: Callable[[], datetime.datetime] = cycle.utc_now, *, cache: ClusterCache | None = None) -> None:
        slack = None
        if settings.slack.token:
            slack = Slack.connect(settings.slack.token, base_url=settings.slack.api_url,
                                  admin_channel=settings.slack.admin_channel,
                                  timeout=settings.slack.timeout.total_seconds())
        self.settings = settings
        self.ports = Ports(api, slack, clock=clock, cache=cache)
        self.memory = Memory()
        self.telemetry = Telemetry()
        if cache is not None:
            self.telemetry.registry.register(daemon.CacheCollector(cache))
        self.last: CycleResult | None = None

    def stop(self) -> None:
        """Stop the watch cache's threads, if there is one."""
        if self.ports.cache is not None:
            self.ports.cache.stop()

    def synced(self) -> bool:
        """Whether the watch cache says every kind is synced (`janitor_watch_cache_synced`)."""
        found = [s.value for family in self.telemetry.registry.collect() for s in family.samples
                 if s.name == "janitor_watch_cache_synced"]
        return bool(found) and all(v == 1 for v in found)

    @property
    def api(self) -> ApiClient:
        return self.ports.api

    def run_cycle(self) -> CycleResult:
        result = cycle.run_cycle(self.ports, self.settings, self.memory)
        return self._done(result)

    def plan_then_act(self, between: Callable[[], None]) -> CycleResult:
        """One cycle with `between()` changing the cluster after the cycle's read and before it acts."""
        memory, reloaded = cycle.load_policies(self.settings, self.memory)
        with cycle.prometheus(self.settings, memory.policies or ()) as source:
            planned = cycle.observe_and_plan(self.ports, self.settings, memory, source=source, reloaded=reloaded)
            between()
            return self._done(cycle.apply(self.ports, self.settings, planned, source=source))

    def plan(self) -> Planned:
        memory, reloaded = cycle.load_policies(self.settings, self.memory)
        with cycle.prometheus(self.settings, memory.policies or ()) as source:
            return cycle.observe_and_plan(self.ports, self.settings, memory, source=source, reloaded=reloaded)

    def explain(self) -> str:
        """What the last cycle saw and decided, for an assertion's message: a cycle that quietly did
        not act says here whether it lacked the object, the evidence or the rails' leave. The
        decisions are shown with the tables `janitor plan` prints."""
        if self.last is None:
            return "no cycle ran"
        seen, plan = self.last.planned.observation, self.last.plan
        return "\n".join([
            f"objects: {sorted(f'{o.ref.kind}/{o.ref.name}' for o in seen.objects)}",
            f"pods: {[(p.ref.name, p.phase, p.controller and p.controller.kind) for p in seen.pods]}",
            f"skipped kinds: {seen.skipped_kinds}",
            report.idle_table(plan), report.lifecycle_table(plan.changes), report.plan_table(plan, dry_run=False),
            *(f"result: {r.action.type} {r.action.target} {r.outcome} {r.detail}" for r in self.last.results),
        ])

    def _done(self, result: CycleResult) -> CycleResult:
        self.memory = result.memory
        self.last = result
        daemon.record(self.telemetry, result)
        return result
