"""Demo workloads for `python -m devenv demo`: what a shared GPU cluster looks like on a Monday.

A notebook holding a GPU and doing nothing, a training Job with one busy and one idle GPU, a
sweep that asks for more GPUs than any node has (Pending), and a MIG notebook. The exporters get
usage values for them, so Prometheus shows the same picture the janitor will read.

Then the janitor at work. Its TTL/expiry cleanup on objects users annotated: an old sweep Job
whose `janitor/expires` has passed, scratch results with a short `janitor/ttl`, and a typo it
reports instead of acting on. And the idle lifecycle, on a minutes scale instead of hours (the
policy file is printed): the idle notebook is marked, its owner alice gets a Slack DM (on the
sandbox's stand-in, printed here) with buttons, presses "Why?" (over Socket Mode, as in a real
workspace) and reads the answer in the thread, and a minute after that it is scaled to zero; the
busy training Job is never touched. The demo prints the plan, runs a cycle, and keeps running cycles.
"""

from __future__ import annotations

import datetime
import json
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from kubernetes import client

from devenv.procs import wait_until
from devenv.sandbox import SLACK_TOKEN, Sandbox
from devenv.slack_interactive import APP_TOKEN
from janitor import annotations, report
from janitor import cycle as cycles
from janitor.act.slack import Slack
from janitor.act.slack_inbound import SocketReceiver
from janitor.clicks import Clicks
from janitor.decide.lifecycle import LifecycleSettings, Step
from janitor.decide.model import TriggerKind
from janitor.settings import ClusterSettings, PrometheusSettings, Settings, SlackSettings
from janitor.telemetry import Telemetry

NAMESPACE = "demo"


def _container(name: str, resource: str, count: int) -> client.V1Container:
    return client.V1Container(
        name=name,
        image="registry.example/research:latest",
        resources=client.V1ResourceRequirements(requests={"cpu": "2"}, limits={resource: str(count)}),
    )


def _template(
    labels: dict[str, str], container: client.V1Container, restart: str = "Always"
) -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels),
        spec=client.V1PodSpec(restart_policy=restart, containers=[container]),
    )


def create_workloads(api: client.ApiClient) -> None:
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    wait_until(lambda: bool(core.list_namespaced_service_account(NAMESPACE).items), timeout=30,
               what="default ServiceAccount")
    apps.create_namespaced_deployment(NAMESPACE, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="notebook", annotations={"owner": "alice@lab.example"}),
        spec=client.V1DeploymentSpec(
            replicas=1, selector=client.V1LabelSelector(match_labels={"app": "notebook"}),
            template=_template({"app": "notebook"}, _container("jupyter", "nvidia.com/gpu", 1)))))
    batch.create_namespaced_job(NAMESPACE, client.V1Job(
        metadata=client.V1ObjectMeta(name="train-llm", annotations={"owner": "bob@lab.example"}),
        spec=client.V1JobSpec(backoff_limit=0, template=_template(
            {"app": "train-llm"}, _container("trainer", "nvidia.com/gpu", 2), restart="Never"))))
    core.create_namespaced_pod(NAMESPACE, client.V1Pod(
        metadata=client.V1ObjectMeta(name="big-sweep", labels={"app": "big-sweep"}),
        spec=client.V1PodSpec(containers=[_container("sweep", "nvidia.com/gpu", 16)])))
    core.create_namespaced_pod(NAMESPACE, client.V1Pod(
        metadata=client.V1ObjectMeta(name="mig-notebook", labels={"app": "mig-notebook"}),
        spec=client.V1PodSpec(containers=[_container("jupyter", "nvidia.com/mig-3g.40gb", 1)])))


def create_expiring(api: client.ApiClient) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(NAMESPACE, client.V1Job(
        metadata=client.V1ObjectMeta(name="old-sweep", annotations={annotations.EXPIRES: "2026-01-31"}),
        spec=client.V1JobSpec(backoff_limit=0, template=_template(
            {"app": "old-sweep"}, _container("sweep", "nvidia.com/gpu", 1), restart="Never"))))
    for name, value in (("scratch-results", "40s"), ("typo", "2 hours"), ("keep-me", "forever")):
        core.create_namespaced_config_map(NAMESPACE, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, annotations={annotations.TTL: value})))


def _series_count(prometheus_url: str, query: str) -> int:
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return len(json.load(resp)["data"]["result"])


def run(sandbox: Sandbox) -> None:
    print("Creating demo workloads in namespace 'demo' ...", file=sys.stderr, flush=True)
    create_workloads(sandbox.admin)
    core = client.CoreV1Api(sandbox.admin)

    def running() -> list[client.V1Pod]:
        return [p for p in core.list_namespaced_pod(NAMESPACE).items if p.status.phase == "Running"]

    wait_until(lambda: len(running()) == 3, timeout=90, what="3 demo pods Running")
    by_app = {p.metadata.labels["app"]: p.metadata.name for p in running()}
    values = sandbox.values
    values.set_gpu_util(NAMESPACE, by_app["notebook"], 0)
    values.set_gpu_util(NAMESPACE, by_app["train-llm"], 97, gpu=0)
    values.set_gpu_util(NAMESPACE, by_app["train-llm"], 0, gpu=1)
    values.set_gr_engine_active(NAMESPACE, by_app["mig-notebook"], 0.0)
    values.set_cpu(NAMESPACE, by_app["notebook"], "jupyter", 0.01)
    values.set_cpu(NAMESPACE, by_app["train-llm"], "trainer", 7.5)
    assert sandbox.prometheus is not None
    wait_until(
        lambda: _series_count(sandbox.prometheus.url, 'DCGM_FI_DEV_GPU_UTIL{exported_namespace="demo"}') == 3,
        timeout=60, what="Prometheus to scrape the demo GPU series",
    )


POLICY = f"""\
policies:
  # Demo timing: minutes instead of the hours a real policy would use.
  - name: idle-notebooks
    description: A notebook whose GPU did nothing for a minute is scaled to zero a minute after its owner heard.
    mode: enforce
    match: {{namespaces: {{include: [{NAMESPACE}]}}, kinds: [Deployment]}}
    triggers: {{idleGpu: {{threshold: 5, window: 1m, minPodAge: 1m}}}}
    lifecycle: {{warnBefore: 1m, remindEvery: 0s, action: scale-to-zero, maxExtension: 1h}}
  - name: idle-gpu-report
    description: Everything else with a GPU, reported only.
    mode: shadow
    match: {{namespaces: {{include: [{NAMESPACE}]}}}}
    triggers: {{idleGpu: {{window: 1m, minPodAge: 1m}}}}
"""


@dataclass
class DemoJanitor:
    """The janitor as the daemon runs it: its ports, its settings, and what one cycle leaves the next."""

    ports: cycles.Ports
    settings: Settings
    memory: cycles.Memory = field(default_factory=cycles.Memory)
    receiver: SocketReceiver | None = None  # the buttons' way in
    pressed: set[str] = field(default_factory=set)  # messages alice has pressed "Why?" on


def janitor_demo(sandbox: Sandbox) -> DemoJanitor:
    """Show `janitor plan` and one cycle on the demo namespace; return the janitor for more cycles."""
    create_expiring(sandbox.admin)
    assert sandbox.prometheus is not None and sandbox.slack is not None
    sandbox.slack.add_user("alice@lab.example", "U0ALICE", "alice")
    policy = sandbox.run_dir / "demo-policies.yaml"
    policy.write_text(POLICY)
    print(f"\n$ cat {policy}\n{POLICY}")
    settings = Settings(
        cluster=ClusterSettings(namespaces=(NAMESPACE,), state_namespace=NAMESPACE),
        prometheus=PrometheusSettings(url=sandbox.prometheus.url, scrape_interval=datetime.timedelta(seconds=2)),
        slack=SlackSettings(token=SLACK_TOKEN, api_url=sandbox.slack.base_url, app_token=APP_TOKEN),
        lifecycle=LifecycleSettings(pace=datetime.timedelta(0)), policy_paths=(str(policy),))
    janitor = DemoJanitor(cycles.Ports(sandbox.admin, Slack.connect(SLACK_TOKEN, base_url=sandbox.slack.base_url)),
                          settings)
    assert janitor.ports.slack is not None
    clicks = Clicks(sandbox.admin, janitor.ports.slack, settings, lambda: janitor.memory.policies or (), Telemetry(),
                    wake=lambda: None)
    janitor.receiver = SocketReceiver(APP_TOKEN, clicks.handle, base_url=sandbox.slack.base_url)
    janitor.receiver.start()
    planned = cycles.plan_once(janitor.ports, settings)
    print(f"$ janitor plan --namespaces {NAMESPACE} --policies {policy}   "
          f"({len(planned.observation.objects)} objects read)")
    print(report.plan_table(planned.plan, dry_run=False))
    if planned.policies:
        print(report.idle_table(planned.plan))
    cycle(janitor, sandbox)
    return janitor


def cycle(janitor: DemoJanitor, sandbox: Sandbox | None = None) -> None:
    """One janitor cycle, printed as what happened to which object and what Slack received."""
    seen = len(sandbox.slack.requests("chat.postMessage")) if sandbox and sandbox.slack else 0
    result = cycles.run_cycle(janitor.ports, janitor.settings, janitor.memory)
    janitor.memory = result.memory
    changes = result.plan.changes
    stamp = f"{result.plan.now:%H:%M:%S}"
    for r in result.results:
        print(f"{stamp} janitor: {r.action.type} {r.action.target}: {r.outcome} -- {r.action.why}", flush=True)
    for change in changes:
        if change.step not in (Step.WAIT, Step.ACT):
            print(f"{stamp} janitor: {change.step} {change.workload}: {change.why}", flush=True)
        elif change.step is Step.WAIT and change.deadline:
            print(f"{stamp} janitor: {change.workload}: {change.why}", flush=True)
    if sandbox and sandbox.slack:
        for posted in sandbox.slack.requests("chat.postMessage")[seen:]:
            if posted.error is None:
                text = str(posted.params.get("text", ""))
                print(f"{stamp} slack -> {posted.params.get('channel')}: {text[:300]}", flush=True)
                _press_why(janitor, sandbox, posted.params, stamp)
    if not result.results and not changes:
        waiting = [f for f in result.plan.findings
                   if f.trigger is TriggerKind.EXPIRY and f.deadline and f.deadline > result.plan.now]
        nxt = min(waiting, key=lambda f: f.deadline or result.plan.now, default=None)
        hint = f"; next: {nxt.subject} at {nxt.deadline:%H:%M:%S}" if nxt and nxt.deadline else ""
        print(f"{stamp} janitor: nothing due{hint}", flush=True)


def _press_why(janitor: DemoJanitor, sandbox: Sandbox, params: dict, stamp: str) -> None:
    """Show a message's buttons; the first time a warning has them, alice presses "Why?"."""
    assert sandbox.slack is not None
    blocks = params.get("blocks") or []
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    buttons = [e["text"]["text"] for b in blocks if b.get("type") == "actions" for e in b.get("elements", [])]
    if not buttons:
        return
    print(f"{stamp} slack    buttons: {' | '.join(dict.fromkeys(buttons))}", flush=True)
    channel = str(params.get("channel") or "")  # the DM's id, as conversations.open gave it
    message = next((m for m in reversed(sandbox.slack.messages(channel)) if m.blocks == blocks), None)
    if message is None or message.ts in janitor.pressed or janitor.receiver is None:
        return
    janitor.pressed.add(message.ts)
    try:
        wait_until(janitor.receiver.connected, timeout=10, what="the Socket Mode connection")
        sandbox.slack.click("U0ALICE", channel, message.ts, "janitor.why")
        wait_until(lambda: any(m.thread_ts == message.ts for m in sandbox.slack.messages(channel)), timeout=10,
                   what="the answer in the thread")
    except TimeoutError as err:
        print(f"{stamp} slack    (the click was not answered: {err})", flush=True)
        return
    answer = next(m for m in sandbox.slack.messages(channel) if m.thread_ts == message.ts)
    print(f"{stamp} alice presses Why? -> in the thread: {answer.text[:300]}", flush=True)
