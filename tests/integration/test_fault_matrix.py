"""The idle lifecycle through injected faults: every service x fault x phase, one case each.

docs/fault-matrix.md is the table these cases check. Each case has a namespace of its own with one
idle Job (CPU, 0.002 cores against `idleCpu: {cores: 0.05}`, backfilled), its own Slack user (so
its DM counts only its own messages) and its own janitor (a `Runner`) that reaches the apiserver,
Prometheus and Slack through fresh fault proxies (devenv/faults.py). The janitor runs as the
daemon does by default: with its watch cache, synced before the fault (it observes and plans once,
acting on nothing). An apiserver fault meets the watches too: their connections are dropped as the
fault comes on, so they are opened again into it. A few apiserver faults also run on the path
without the cache (`-lists`: `janitor run --once`, `--no-watch-cache`), where they meet the
cycle's lists instead; at the deadline only, the phase with an action at stake. One service is
faulted for one cycle in one phase of the lifecycle:

- before: the Job is idle and not marked yet;
- between: marked, its owner warned, the deadline an hour away;
- deadline: marked, warned, the deadline passed.

Marks of the later phases are made for all cases at once by one healthy cycle at set-up, as the
daemon would have made them. Then, per case: the fault on, one cycle, the fault cleared, one
more cycle. After each cycle:

1. no wrongful action: nothing acted on before its deadline, while the evidence is unknown (a
   Prometheus fault) or without a delivered warning;
2. no lost mark: a marked Job not acted on still carries janitor/policy, janitor/deadline and
   janitor/marked-uid;
3. no duplicate message: at most one warning and one "done" note in the owner's DM;
4. the cycle survives: `run_cycle` returns a result. When the cluster itself cannot be read
   (an apiserver fault on every request) the cycle fails as the daemon expects a failed cycle
   to: a `janitor.errors.KubeError`, counted under source "kubernetes", nothing else. A watch
   that gets no answer, or only 410s, is said by the cache within one --kube-timeout (its
   `janitor_watch_cache_synced` is 0), and the cycle then does nothing at all (`NotSynced`);
5. recovery within one cycle: before -> marked and warned once; between -> still marked, nothing
   new sent, not acted on; deadline -> acted on, and exactly one "done" note.

Last, no log record of the whole module (DEBUG included, from every library) carries the
apiserver's bearer token, the Slack bot token or the Prometheus password.

Faults are switched per request: on every request through the proxy, on writes only (PATCH,
DELETE and POST), or on watches only for the apiserver; Slack's `lost` faults hit chat.postMessage
only: the message is posted and its answer replaced by a reset or a 503. Before the next cycle the
cache is synced again (as the daemon's next cycles would find it). Delays are longer than the client timeouts
(2-3 s, short so that black holes cost little). Slack is the stand-in of devenv/slack_standin.py,
one of the module's own (with the sandbox's token), so that the DMs it counts are only its own
whatever else runs against the sandbox meanwhile.
"""

from __future__ import annotations

import base64
import datetime
import logging
import secrets
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from runner import Runner
from runner import settings as build
from slack_sdk import WebClient

from devenv.faults import FaultProxy, ProxyTls, repoint_kubeconfig
from devenv.history import prometheus_with_history
from devenv.nodes import STARTED_AT
from devenv.pki import Pki
from devenv.procs import wait_until
from devenv.slack_standin import SlackStandIn
from janitor import annotations as a
from janitor import daemon, errors, kubeapi
from janitor.cycle import CycleResult
from janitor.decide.lifecycle import LifecycleSettings, MarkCaps
from janitor.decide.model import State
from janitor.decide.triggers import registry
from janitor.decide.triggers.spec import Usage
from janitor.observe.cache import ClusterCache, NotSynced
from janitor.settings import Settings, parse_kind

KUBE_TIMEOUT = (2.0, 3.0)  # (connect, read) seconds of every apiserver request
CLIENT_TIMEOUT = datetime.timedelta(seconds=2)  # one Prometheus query's, one Slack call's answer
SLOW = 5.0  # a delay longer than every client timeout
MARGIN = 10.0  # seconds, beyond one --kube-timeout, for the cache to say what it knows on a loaded machine
JOB = "idle"
MARK = (a.POLICY, a.DEADLINE, a.MARKED_UID)  # what must never be lost
WARNED = (*MARK, a.WARNED_AT, a.WARNED_VIA, a.WARNED_OF)
WRITES = ("PATCH", "DELETE", "POST")
PHASES = {"before": "fma", "between": "fmb", "deadline": "fmd"}  # phase -> namespace prefix

POLICIES = """policies:
- name: fm-before
  mode: enforce
  match: {namespaces: {include: ["fma-*"]}}
  triggers: {idleCpu: {cores: 0.05, window: 20m}}
  lifecycle: {warnBefore: 1h, remindEvery: 0s}
- name: fm-between
  mode: enforce
  match: {namespaces: {include: ["fmb-*"]}}
  triggers: {idleCpu: {cores: 0.05, window: 20m}}
  lifecycle: {warnBefore: 1h, remindEvery: 0s}
- name: fm-deadline
  mode: enforce
  match: {namespaces: {include: ["fmd-*"]}}
  triggers: {idleCpu: {cores: 0.05, window: 20m}}
  lifecycle: {warnBefore: 2s, remindEvery: 0s}
"""

Switch = Callable[[FaultProxy], None]


def _writes(fault: Callable[..., int]) -> Switch:
    def switch(proxy: FaultProxy) -> None:
        for method in WRITES:
            fault(proxy, method=method)
    return switch


def _prometheus_error(kind: str) -> str:
    return f'{{"status": "error", "errorType": "{kind}", "error": "fault injected"}}'


FAULTS: dict[str, dict[str, Switch]] = {
    "apiserver": {
        "delay": lambda p: p.delay(SLOW),
        "reset": lambda p: p.reset(),
        "blackhole": lambda p: p.blackhole(),
        "500": lambda p: p.status(500),
        "409": lambda p: p.status(409),
        "429": lambda p: p.status(429),
        "malformed": lambda p: p.malformed(),
        "writes-409": _writes(lambda p, **w: p.status(409, **w)),
        "writes-500": _writes(lambda p, **w: p.status(500, **w)),
        "writes-reset": _writes(lambda p, **w: p.reset(**w)),
        "watch-blackhole": lambda p: p.blackhole(watch=True),
        "watch-silent": lambda p: p.silent(watch=True),
        "watch-cut": lambda p: p.cut(watch=True),
        "watch-410": lambda p: p.gone(watch=True),
        "watch-410-event": lambda p: p.gone(in_stream=True, watch=True),
        "watch-no-bookmarks": lambda p: p.no_bookmarks(watch=True),
        "watch-slow": lambda p: p.slow(SLOW, watch=True),
    },
    "prometheus": {
        "delay": lambda p: p.delay(SLOW),
        "reset": lambda p: p.reset(),
        "blackhole": lambda p: p.blackhole(),
        "503": lambda p: p.status(503, _prometheus_error("unavailable")),
        "429": lambda p: p.status(429, _prometheus_error("too_many_requests")),
        "malformed": lambda p: p.malformed(),
    },
    "slack": {
        "delay": lambda p: p.delay(SLOW),
        "reset": lambda p: p.reset(),
        "blackhole": lambda p: p.blackhole(),
        "500": lambda p: p.status(500, {"ok": False, "error": "internal_error"}),
        "429": lambda p: p.status(429, {"ok": False, "error": "ratelimited"}),
        "malformed": lambda p: p.malformed(),
        "lost": lambda p: p.lost(path="/api/chat.postMessage"),
        "lost-503": lambda p: p.lost(503, path="/api/chat.postMessage"),
    },
}


# Watch faults after which the cache cannot be trusted: no answer, or only 410s (each list is
# followed by a watch the apiserver refuses). The others leave the watch answering: it stays synced.
UNANSWERED_WATCHES = frozenset({"watch-blackhole", "watch-410", "watch-410-event"})
# Of the faults on every request, the one a watch takes as a stream cut short (a 200 whose body is
# no whole event): opened again after pauses, it stays synced, its values those of its last version
# (and stale past the silence bound, as any watch that brings nothing).
CUT_SHORT = frozenset({"malformed"})


@dataclass(frozen=True)
class Case:
    service: str
    fault: str
    phase: str
    path: str = "cache"  # the daemon's default; "lists": without the watch cache (--once, --no-watch-cache)

    def __str__(self) -> str:
        return f"{self.service}-{self.fault}-{self.phase}" + ("-lists" if self.path == "lists" else "")

    @property
    def unreadable_cluster(self) -> bool:
        """The apiserver fails every request: the cycle cannot observe anything."""
        return self.service == "apiserver" and not self.fault.startswith(("writes-", "watch-"))

    @property
    def cached(self) -> bool:
        return self.path == "cache"

    @property
    def unsynced(self) -> bool:
        """The watch cache is not synced while the fault lasts, and says so within one --kube-timeout."""
        return self.cached and ((self.unreadable_cluster and self.fault not in CUT_SHORT)
                                or self.fault in UNANSWERED_WATCHES)

    @property
    def meets_watches(self) -> bool:
        """Its fault meets the watches: they are dropped as it comes on, and opened again into it."""
        return self.cached and self.service == "apiserver" and not self.fault.startswith("writes-")


CASES = [Case(service, fault, phase) for service, faults in FAULTS.items() for fault in faults for phase in PHASES]
# Without the cache, a read fault meets the cycle's own lists; at the deadline, where an action is at stake.
CASES += [Case("apiserver", fault, "deadline", "lists") for fault in FAULTS["apiserver"]
          if not fault.startswith(("writes-", "watch-"))]


@dataclass
class Box:
    """One case's own corner: namespace, Job, Slack user and DM."""

    case: Case
    namespace: str
    email: str
    user: str
    channel: str = ""
    uid: str = ""


class LogWatch(logging.Handler):
    """Every log record of the module, checked for secrets as it is emitted."""

    def __init__(self, watched: dict[str, str]) -> None:
        super().__init__(logging.DEBUG)
        self.secrets = watched
        self.seen = 0
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen += 1
        try:
            text = logging.Formatter().format(record) + repr(vars(record))
        except Exception as e:  # a record that cannot be formatted is still scanned as far as it goes
            text = f"{record.msg!r} {record.args!r} {e!r}"
        for name, secret in self.secrets.items():
            if secret in text:
                self.hits.append(f"{name} in a {record.levelname} record of {record.name}: {record.msg!r}"[:300])


@dataclass
class World:
    kube: client.ApiClient
    sandbox: Any  # tests/conftest.py's SandboxHandle
    slack: SlackStandIn
    pki: Pki
    policy: Path
    password_file: Path
    prometheus_url: str
    boxes: dict[Case, Box]


# ---------------------------------------------------------------------------------------------- set-up


@pytest.fixture(scope="module")
def log_watch(sandbox: Any) -> Iterator[LogWatch]:
    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    watch = LogWatch({"the apiserver token": config["users"][0]["user"]["token"],
                      "the Slack bot token": sandbox.slack_token})
    root = logging.getLogger()
    level = root.level
    root.addHandler(watch)
    root.setLevel(logging.DEBUG)
    yield watch
    root.removeHandler(watch)
    root.setLevel(level)


def _pki(sandbox: Any) -> Pki:
    keys = sandbox.kubeconfig.parent / "pki"
    return Pki(keys / "ca.crt", keys / "ca.key", keys / "apiserver.crt", keys / "apiserver.key",
               keys / "sa.pub", keys / "sa.key")


def _job(box: Box) -> client.V1Job:
    started = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=3)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": JOB}, annotations={STARTED_AT: started}),
        spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(
            name="main", image="x", resources=client.V1ResourceRequirements(requests={"cpu": "10m"}))]))
    return client.V1Job(metadata=client.V1ObjectMeta(name=JOB, annotations={a.OWNER: box.email}),
                        spec=client.V1JobSpec(template=template))


def _settings(world: World, namespaces: tuple[str, ...], state: str, *, prometheus: str, slack: str,
              **extra: Any) -> Settings:
    return build(namespaces=namespaces, state_namespace=state, kinds=(parse_kind("Job"),),
                 policy_paths=(str(world.policy),), prometheus_url=prometheus, prometheus_timeout=CLIENT_TIMEOUT,
                 username="janitor", password_file=str(world.password_file),
                 scrape_interval=datetime.timedelta(seconds=15), slack_token=world.sandbox.slack_token,
                 slack_api_url=slack, slack_timeout=CLIENT_TIMEOUT, notice_retry=datetime.timedelta(0),
                 **({"lifecycle": LifecycleSettings(pace=datetime.timedelta(0))} | extra))


def _selected(request: pytest.FixtureRequest) -> list[Case]:
    """The cases this run selected (`-k`): only they are set up."""
    found = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if item.module is request.module and callspec is not None and "case" in callspec.params:
            found.append(callspec.params["case"])
    return found or CASES


@pytest.fixture(scope="module")
def world(request: pytest.FixtureRequest, sandbox: Any, kube: client.ApiClient, core: client.CoreV1Api,
          log_watch: LogWatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Every selected case's namespace, Job and Slack user; one Prometheus with their history;
    the marks of the later phases, made by one healthy cycle."""
    cases = _selected(request)
    tmp = tmp_path_factory.mktemp("fault-matrix")
    password = secrets.token_urlsafe(24)
    log_watch.secrets |= {"the Prometheus password": password,
                          "the Prometheus basic-auth header": base64.b64encode(f"janitor:{password}".encode()).decode()}
    password_file = tmp / "prometheus-password"
    password_file.write_text(password + "\n")
    policy = tmp / "policies.yaml"
    policy.write_text(POLICIES)
    slack = SlackStandIn(tokens=(sandbox.slack_token,)).start()
    web = WebClient(token=sandbox.slack_token, base_url=slack.base_url)
    run = uuid.uuid4().hex[:4]
    boxes: dict[Case, Box] = {}
    for n, case in enumerate(cases):
        lists = "-l" if case.path == "lists" else ""
        name = f"{PHASES[case.phase]}-{case.service[:4]}-{case.fault}{lists}-{run}"
        boxes[case] = Box(case, name, f"{name}@faults.example", f"U0FM{run.upper()}{n:03}")
    state = f"fm-setup-{run}"
    names = [state, *(b.namespace for b in boxes.values())]
    batch = client.BatchV1Api(kube)
    server = None
    try:
        for name in names:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        for box in boxes.values():
            wait_until(lambda ns=box.namespace: any(sa.metadata.name == "default" for sa in
                                                    core.list_namespaced_service_account(ns).items),
                       timeout=60, what=f"default ServiceAccount in {box.namespace}")
            slack.add_user(box.email, box.user, box.namespace)
            box.channel = web.conversations_open(users=[box.user])["channel"]["id"]
            box.uid = batch.create_namespaced_job(box.namespace, _job(box)).metadata.uid

        def running() -> int:
            return sum(p.status.phase == "Running" for box in boxes.values()
                       for p in core.list_namespaced_pod(box.namespace).items)

        wait_until(lambda: running() == len(boxes), timeout=180, what=f"{len(boxes)} pods Running")
        server, _ = prometheus_with_history(kube, sandbox.exporters_url, hours=0.5, step=15,
                                            work_dir=sandbox.run_dir)
        found = World(kube, sandbox, slack, _pki(sandbox), policy, password_file, server.url, boxes)

        later = tuple(b.namespace for b in boxes.values() if b.case.phase != "before")
        setup = Runner(kubeapi.connect(str(sandbox.kubeconfig)), _settings(
            found, later, state, prometheus=server.url, slack=slack.base_url,
            lifecycle=LifecycleSettings(pace=datetime.timedelta(0), caps=MarkCaps(1000, 10, 1000)),
            send_budget=datetime.timedelta(minutes=2)))
        setup.run_cycle()
        for box in boxes.values():
            if box.case.phase != "before":
                notes = _notes(found, box)
                assert notes is not None and all(k in notes for k in WARNED), (box.namespace, notes)
                assert _kinds(found, box) == ["warning"], box.namespace
        yield found
    finally:
        slack.stop()
        if server is not None:
            server.stop()
        for name in names:
            try:
                core.delete_namespace(name)
            except ApiException:
                pass


# ---------------------------------------------------------------------------------------------- reading


def _notes(world: World, box: Box) -> dict[str, str] | None:
    """The Job's annotations; None once it is acted on (gone, being deleted, or another Job)."""
    try:
        job = client.BatchV1Api(world.kube).read_namespaced_job(JOB, box.namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    if job.metadata.deletion_timestamp is not None or job.metadata.uid != box.uid:
        return None
    return dict(job.metadata.annotations or {})


def _kind(text: str) -> str:
    if "unless used or kept" in text:
        return "warning"
    if " was deleted" in text:
        return "done"
    if "no longer marked" in text:
        return "cancelled"
    return "other"


def _kinds(world: World, box: Box) -> list[str]:
    """What the owner's DM holds, oldest first."""
    return [_kind(m.text) for m in world.slack.messages(box.channel)]


@dataclass
class Seen:
    """The case's state after a cycle, as the owner and `kubectl` see it."""

    outcome: CycleResult | Exception
    notes: dict[str, str] | None
    messages: list[str]

    @property
    def acted(self) -> bool:
        return self.notes is None

    def marked(self) -> bool:
        return self.notes is not None and all(k in self.notes for k in MARK)

    def summary(self) -> str:
        if isinstance(self.outcome, Exception):
            run = f"raised {type(self.outcome).__name__}"
        else:
            run = "returned"
        if self.notes is None:
            state = "acted on"
        elif a.POLICY not in self.notes:
            state = "not marked"
        else:
            state = "marked" + (", warned" if a.WARNED_AT in self.notes else "") + (
                ", send in flight" if a.NOTICE in self.notes else "")
        return f"{run}; {state}; DM: {', '.join(self.messages) or 'nothing'}"


def _cycle(runner: Runner, world: World, box: Box) -> Seen:
    try:
        outcome: CycleResult | Exception = runner.run_cycle()
    except Exception as e:  # judged by the caller: only a KubeError when the cluster cannot be read
        outcome = e
    return Seen(outcome, _notes(world, box), _kinds(world, box))


# ---------------------------------------------------------------------------------------------- a case


@dataclass
class Proxies:
    kube: FaultProxy
    prometheus: FaultProxy
    slack: FaultProxy

    def of(self, service: str) -> FaultProxy:
        return {"apiserver": self.kube, "prometheus": self.prometheus, "slack": self.slack}[service]

    def all(self) -> tuple[FaultProxy, ...]:
        return self.kube, self.prometheus, self.slack


@pytest.fixture
def proxies(world: World) -> Iterator[Proxies]:
    server = yaml.safe_load(world.sandbox.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    started: list[FaultProxy] = []
    try:
        for upstream, tls in ((server, ProxyTls.from_pki(world.pki)), (world.prometheus_url, None),
                              (world.slack.base_url.rstrip("/").removesuffix("/api"), None)):
            started.append(FaultProxy(upstream, tls=tls).start())
        yield Proxies(*started)
    finally:
        for proxy in started:
            proxy.stop()


def _settle(proxy: FaultProxy) -> None:
    """Once cleared, requests a delay held are forwarded late (the client gave up long ago): wait
    until their answers are in, so the next cycle starts on the state they leave behind."""
    wait_until(lambda: all(s.status is not None for s in proxy.requests() if s.fault == "delay"),
               timeout=15, what="the delayed requests to be answered")


class Checks:
    """The case's failed properties, all of them, named."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, ok: bool, what: str) -> None:
        if not ok:
            self.failed.append(what)


def _survived(check: Checks, seen: Seen, when: str, *, may_fail_unread: bool, may_be_unsynced: bool = False) -> None:
    outcome = seen.outcome
    if not isinstance(outcome, Exception):
        return
    allowed = may_fail_unread and isinstance(outcome, errors.KubeError) and daemon.error_source(outcome) == "kubernetes"
    allowed = allowed or (may_be_unsynced and isinstance(outcome, NotSynced))
    package = Path(errors.__file__).parent
    frames = [f for f in traceback.extract_tb(outcome.__traceback__) if Path(f.filename).is_relative_to(package)]
    where = ""
    if frames:
        last = frames[-1]
        where = f" (last janitor frame: {Path(last.filename).relative_to(package)}:{last.lineno} in {last.name})"
    check(allowed, f"{when}: run_cycle raised {type(outcome).__name__}: {outcome}{where}")


def _counted(runner: Runner, metric: str, **labels: str) -> float:
    """The sum of a counter's samples (those with `labels`) in the runner's metrics."""
    return sum(sample.value for family in runner.telemetry.registry.collect() for sample in family.samples
               if sample.name == metric and labels.items() <= sample.labels.items())


def _judged_unknown(seen: Seen, box: Box) -> bool:
    if not isinstance(seen.outcome, CycleResult):
        return False
    mine = [f for f in seen.outcome.plan.findings
            if f.subject.uid == box.uid and registry.spec(f.trigger).usage is Usage.READS]
    return bool(mine) and all(f.state is State.UNKNOWN for f in mine)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_fault(case: Case, world: World, proxies: Proxies, tmp_path: Path) -> None:
    """The fault on for one cycle, then one healthy cycle; every property checked after both."""
    box = world.boxes[case]
    check = Checks()
    kubeconfig = repoint_kubeconfig(world.sandbox.kubeconfig, tmp_path / "proxied.kubeconfig", proxies.kube.url)
    api = kubeapi.connect(str(kubeconfig), timeout=KUBE_TIMEOUT)
    settings = _settings(world, (box.namespace,), box.namespace, prometheus=proxies.prometheus.url,
                         slack=proxies.slack.url + "/api/")
    runner = Runner(api, settings, cache=ClusterCache(api, settings) if case.cached else None)
    try:
        faulty, healed, shown, start, before_messages = _run_case(case, world, proxies, runner, box)
    finally:
        runner.stop()
    print(f"\n{case}: faulty cycle: {faulty.summary()}; {shown}\n{case}: next cycle: {healed.summary()}")

    # 4. the cycle survives: only a cluster that cannot be read fails it, as a KubeError; a watch
    # that gets no answer only makes it do nothing.
    _survived(check, faulty, "faulty cycle", may_fail_unread=case.unreadable_cluster, may_be_unsynced=case.unsynced)
    _survived(check, healed, "next cycle", may_fail_unread=False)
    if case.unsynced and not case.unreadable_cluster:
        check(isinstance(faulty.outcome, NotSynced), f"faulty cycle: ran on a cache that is not synced: "
                                                     f"{faulty.summary()}")
    # 1. no wrongful action.
    if faulty.acted:
        check(case.phase == "deadline", f"faulty cycle: acted on in phase {case.phase}, before the deadline")
        check(case.service != "prometheus", "faulty cycle: acted on while the evidence was unknown")
        check(a.WARNED_AT in start, "faulty cycle: acted on without a delivered warning")
    if case.service == "prometheus":
        check(_judged_unknown(faulty, box), "faulty cycle: the evidence was not judged unknown")
    # What an SRE sees of it, besides the logs (a cycle that raised records no metrics).
    if isinstance(faulty.outcome, CycleResult):
        check(bool(shown["janitor_evidence_failures_total"]) == (case.service == "prometheus"),
              f"faulty cycle: janitor_evidence_failures_total is {shown['janitor_evidence_failures_total']}")
        told = case.service == "slack" and case.phase != "between"
        check(bool(shown["janitor_slack_messages_total"]) == told,
              f"faulty cycle: janitor_slack_messages_total{{result=failed}} is {shown['janitor_slack_messages_total']}")
        refused = case.fault.startswith("writes-") and case.phase == "before"  # the mark's write
        check(bool(shown["janitor_lifecycle_write_failures_total"]) == refused,
              f"faulty cycle: janitor_lifecycle_write_failures_total is "
              f"{shown['janitor_lifecycle_write_failures_total']}")
    # 2. no lost mark.
    if case.phase != "before" and not faulty.acted:
        check(faulty.marked(), f"faulty cycle: the mark was lost: {faulty.notes}")
        check(faulty.notes is not None and faulty.notes.get(a.MARKED_UID) == box.uid,
              "faulty cycle: janitor/marked-uid is not the Job's")
    if not faulty.acted and faulty.notes is not None and a.POLICY in faulty.notes:
        check(faulty.marked(), f"faulty cycle: a partial mark: {faulty.notes}")
    # 3. no duplicate message.
    for seen, when in ((faulty, "faulty cycle"), (healed, "next cycle")):
        check(seen.messages.count("warning") <= 1, f"{when}: more than one warning: {seen.messages}")
        check(seen.messages.count("done") <= 1, f"{when}: more than one done note: {seen.messages}")
        check(set(seen.messages) <= {"warning", "done"}, f"{when}: unexpected messages: {seen.messages}")
    # 5. recovery within one cycle.
    if case.phase == "before":
        check(healed.marked() and a.WARNED_AT in (healed.notes or {}) and a.NOTICE not in (healed.notes or {}),
              f"next cycle: not marked and warned: {healed.notes}")
        check(healed.messages == ["warning"], f"next cycle: the DM holds {healed.messages}, not one warning")
    elif case.phase == "between":
        check(faulty.messages == before_messages, f"faulty cycle: sent {faulty.messages[len(before_messages):]}")
        check(not healed.acted, "next cycle: acted on before the deadline")
        check(healed.notes is not None and all(healed.notes.get(k) == start[k] for k in WARNED)
              and a.NOTICE not in healed.notes, f"next cycle: the mark changed: {start} -> {healed.notes}")
        check(healed.messages == before_messages, f"next cycle: sent {healed.messages[len(before_messages):]}")
    else:
        check(healed.acted, f"next cycle: not acted on: {healed.notes}")
        check(healed.messages == ["warning", "done"],
              f"next cycle: the DM holds {healed.messages}, not one warning and one done note")
    assert not check.failed, f"{case}:\n  " + "\n  ".join(check.failed)


def _run_case(case: Case, world: World, proxies: Proxies, runner: Runner, box: Box
              ) -> tuple[Seen, Seen, dict[str, float], dict[str, str], list[str]]:
    """The fault on for one cycle, cleared, and one more cycle: what each left behind."""
    if case.cached:  # the daemon's cache, synced before the fault; observing and planning acts on nothing
        runner.plan()
        assert runner.synced(), f"{case}: the cache did not sync before the fault"
    start = _notes(world, box)
    assert start is not None
    if case.phase == "deadline":  # due since set-up; waits only if this case runs first
        time.sleep(max(0.0, a.parse_expires(start[a.DEADLINE]).timestamp() - time.time()) + 1)
    before_messages = _kinds(world, box)

    FAULTS[case.service][case.fault](proxies.of(case.service))
    if case.meets_watches:
        proxies.kube.drop_connections()  # as an apiserver restarting: the watches open again, into the fault
    if case.unsynced:
        wait_until(lambda: not runner.synced(), timeout=KUBE_TIMEOUT[1] + MARGIN,
                   what=f"{case}: janitor_watch_cache_synced to say within one --kube-timeout that a kind is not "
                        "synced")
    faulty = _cycle(runner, world, box)
    shown = {name: _counted(runner, name, **labels) for name, labels in (
        ("janitor_evidence_failures_total", {}), ("janitor_slack_messages_total", {"result": "failed"}),
        ("janitor_lifecycle_write_failures_total", {}))}
    for proxy in proxies.all():
        proxy.clear()
    if case.fault == "delay":
        _settle(proxies.of(case.service))
    if case.cached:  # the daemon's next cycles do nothing until it is; the first that acts is the one judged
        wait_until(runner.synced, timeout=60, what=f"{case}: the cache to sync again once the fault is gone")
    healed = _cycle(runner, world, box)
    return faulty, healed, shown, start, before_messages


def test_no_secret_reaches_a_log_line(world: World, log_watch: LogWatch) -> None:
    assert log_watch.seen > 100  # the whole module's records, DEBUG included
    assert not log_watch.hits, "\n".join(log_watch.hits[:20])
