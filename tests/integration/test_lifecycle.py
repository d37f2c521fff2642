"""The idle lifecycle end to end: marks, Slack warnings, reminders and actions on the sandbox.

Policies here use seconds instead of hours (warnBefore 20s) so that a test sees a whole
lifecycle; the evidence is still two hours of backfilled history plus live scrapes.

Aspects covered:
- an idle GPU Job is marked, its owner DMed with the numbers and the keep command, reminded, and
  deleted at the deadline with an Event and a "done" message; a busy Job is never touched;
- a Deployment under a scale-to-zero policy is scaled to zero and the message says how to scale back;
- a marked Job that wakes up is unmarked, and its owner told;
- with Slack failing for longer than the whole grace nothing is acted on, and once Slack recovers
  the deadline moves to delivery + grace (written into janitor/deadline);
- a kill -9 of the janitor between Slack accepting a warning and its record: no second message;
- Slack down at the deadline: the warned Job is deleted, and its "done" note waits in the state
  ConfigMap until Slack is back, then arrives once; the same for a "cancelled" note when a
  workload wakes up while Slack is down;
- a user's own janitor/expires is never shortened or marked over;
- keep-until delays the action, but not past maxExtension after the first mark;
- `janitor keep` and `janitor unmark` as owners and admins use them;
- 200 idle workloads on a first start: new marks capped, one digest per owner, then paced;
- a Kubeflow Notebook (Notebook -> StatefulSet -> Pod) is stopped with Kubeflow's annotation.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from runner import Runner
from runner import settings as build

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Kind, Segment
from devenv.history import prometheus_with_history
from devenv.nodes import STARTED_AT
from devenv.procs import wait_until
from devenv.slack_standin import SlackStandInControl
from janitor import annotations as a
from janitor.decide.lifecycle import LifecycleSettings
from janitor.why_note import WhyNote

H = 3600
ALICE = ("alice@lab.example", "U0ALICE1", "alice")


def started() -> str:
    return datetime.datetime.fromtimestamp(time.time() - 3 * H, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_template(label: str, restart: str = "Never") -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": label}, annotations={STARTED_AT: started()}),
        spec=client.V1PodSpec(restart_policy=restart, containers=[client.V1Container(
            name="main", image="x", resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]))


def write_policy(path: Path, namespace: str, **lifecycle: str) -> Path:
    settings = {"warnBefore": "20s", "remindEvery": "0s", **lifecycle}
    body = ", ".join(f"{k}: {v}" for k, v in settings.items())
    path.write_text(f"""policies:
- name: idle-gpu
  mode: enforce
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    idleGpu: {{threshold: 5, window: 2h, minCoverage: 0.8}}
  lifecycle: {{{body}}}
""")
    return path


def create_job(kube, namespace: str, name: str, owner: str | None = ALICE[0],
               notes: dict[str, str] | None = None) -> None:
    meta = client.V1ObjectMeta(name=name, annotations={**({"janitor/owner": owner} if owner else {}), **(notes or {})})
    client.BatchV1Api(kube).create_namespaced_job(namespace, client.V1Job(
        metadata=meta, spec=client.V1JobSpec(template=gpu_template(name))))


def history(core: client.CoreV1Api, namespace: str, values: ValuesControl, utils: dict[str, float]) -> None:
    """Pods of each app idle (or busy) for the last 3 hours, live and backfilled."""
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items)
               == len(utils), timeout=90, what=f"{len(utils)} pods Running")
    now = time.time()
    for pod in core.list_namespaced_pod(namespace).items:
        util = utils[pod.metadata.labels["app"]]
        values.add_history(Kind.GPU_UTIL, (namespace, pod.metadata.name, None), [Segment(now - 3 * H, now, util)])
        values.set_gpu_util(namespace, pod.metadata.name, util)


@pytest.fixture
def prometheus(kube, sandbox) -> Iterator[callable]:
    servers = []

    def start() -> str:
        server, _ = prometheus_with_history(kube, sandbox.exporters_url, step=15, work_dir=sandbox.run_dir)
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.stop()


def scraped_busy(url: str, namespace: str, pod: str) -> None:
    """Wait until the history Prometheus (scraping every 15 s, as it was backfilled) holds a busy sample
    at least 2 s old: a cycle evaluates at the apiserver's Date, which is cut to the second."""
    query = urllib.parse.urlencode({"query": f'max_over_time(DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}",'
                                             f'exported_pod="{pod}"}}[1m] offset 2s) > 50'})

    def seen() -> bool:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
            return bool(json.load(answer)["data"]["result"])
    wait_until(seen, timeout=60, what=f"a busy sample of {pod} in Prometheus")


@pytest.fixture
def alice(slack: SlackStandInControl) -> str:
    slack.add_user(*ALICE)
    return ALICE[1]


def janitor_for(kube, sandbox, namespace: str, policy: Path, prometheus_url: str, **extra) -> Runner:
    settings = build(namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
                        prometheus_url=prometheus_url, scrape_interval=datetime.timedelta(seconds=15),
                        slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
                        lifecycle=LifecycleSettings(pace=datetime.timedelta(0), held_after=datetime.timedelta(0)),
                        notice_retry=datetime.timedelta(0), **extra)
    return Runner(kube, settings)


def notes_of(kube, namespace: str, name: str, kind: str = "job") -> dict[str, str]:
    if kind == "job":
        obj = client.BatchV1Api(kube).read_namespaced_job(name, namespace)
    else:
        obj = client.AppsV1Api(kube).read_namespaced_deployment(name, namespace)
    return dict(obj.metadata.annotations or {})


def events(core: client.CoreV1Api, namespace: str, name: str) -> list[str]:
    return [e.reason for e in core.list_namespaced_event(namespace).items if e.involved_object.name == name]


def jobs(kube, namespace: str) -> set[str]:
    return {j.metadata.name for j in client.BatchV1Api(kube).list_namespaced_job(namespace).items
            if j.metadata.deletion_timestamp is None}


def until_due(notes: dict[str, str]) -> None:
    """Sleep past the janitor/expires deadline on the object."""
    deadline = a.parse_expires(notes[a.DEADLINE]).timestamp()
    time.sleep(max(0.0, deadline - time.time()) + 1.5)


def test_idle_job_is_marked_warned_reminded_and_deleted_a_busy_one_never(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    create_job(kube, namespace, "idle-job")
    create_job(kube, namespace, "busy-job")
    history(core, namespace, exporter_values, {"idle-job": 0, "busy-job": 90})
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="20s", remindEvery="8s")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    notes = notes_of(kube, namespace, "idle-job")
    assert notes[a.POLICY] == "idle-gpu" and "peak 0" in notes[a.REASON]
    note = WhyNote.parse(notes[a.WHY])  # the same reason as data, with the deadline the warning named
    assert note is not None and note.words.endswith("peaked at 0 % over the last 2 h") and note.action == "delete"
    assert note.deadline == a.parse_expires(notes[a.DEADLINE]) and note.facts["window"] == "2h"
    assert a.WARNED_AT in notes and notes[a.WARNED_VIA].startswith("owner D") and a.NOTICE not in notes
    assert "IdleMarked" in events(core, namespace, "idle-job")
    assert not any(k.startswith("janitor/") and k != "janitor/owner" for k in notes_of(kube, namespace, "busy-job"))
    [warning] = slack.messages(notes[a.WARNED_VIA].split()[1].split("/")[0])
    shown = warning.text + str(warning.blocks)
    assert "idle-job" in shown and "peaked at 0 % over the last 2 h" in shown and "janitor/keep-until=" in shown
    assert "busy-job" not in shown

    time.sleep(9)
    janitor.run_cycle()  # a reminder: 8 s since the warning
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    assert len(slack.messages(channel)) == 2 and "reminder" in str(slack.messages(channel)[1].blocks).lower()
    assert a.REMINDED_AT in notes_of(kube, namespace, "idle-job")
    assert "idle-job" in jobs(kube, namespace)

    until_due(notes_of(kube, namespace, "idle-job"))
    result = janitor.run_cycle()
    assert [str(r.outcome) for r in result.results if r.action.target.name == "idle-job"] == ["done"]
    assert jobs(kube, namespace) == {"busy-job"}
    assert "IdleReclaimed" in events(core, namespace, "idle-job")
    assert "deleted" in (slack.messages(channel)[-1].text + str(slack.messages(channel)[-1].blocks)).lower()
    get = janitor.telemetry.registry.get_sample_value
    assert get("janitor_reclaimed_gpus_total", {"policy": "idle-gpu", "action": "delete"}) == 1
    # 1 GPU idle over the 2 h window
    assert get("janitor_reclaimed_gpu_seconds_total", {"policy": "idle-gpu", "namespace": namespace}) == 2 * 3600
    assert get("janitor_actions_total", {"action": "delete", "rule": "lifecycle", "policy": "idle-gpu",
                                         "outcome": "done"}) == 1
    assert not any(k.startswith("janitor/") and k != "janitor/owner" for k in notes_of(kube, namespace, "busy-job"))


def test_deployment_is_scaled_to_zero_and_told_how_to_scale_back(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    apps = client.AppsV1Api(kube)
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="notebook", annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "notebook"}),
                                     template=gpu_template("notebook", "Always"))))
    history(core, namespace, exporter_values, {"notebook": 0})
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="10s", action="scale-to-zero")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    janitor.run_cycle()
    notes = notes_of(kube, namespace, "notebook", kind="deployment")
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    until_due(notes)
    janitor.run_cycle()
    deployment = apps.read_namespaced_deployment("notebook", namespace)
    assert deployment.spec.replicas == 0
    assert not any(k in (deployment.metadata.annotations or {}) for k in (a.POLICY, a.DEADLINE, a.EXPIRES, a.WARNED_AT))
    assert len(slack.messages(channel)) == 1  # "done" once the next cycle saw the scale-to-zero hold
    janitor.run_cycle()
    assert a.RECLAIMED not in (apps.read_namespaced_deployment("notebook", namespace).metadata.annotations or {})
    warning, done = slack.messages(channel)  # one warning, one "done": nothing twice
    assert "scale" in warning.text and f"kubectl -n {namespace} scale deployment/notebook --replicas=1" in (
        done.text + str(done.blocks))
    # The ReplicaSet carries a copy of the mark (the Deployment controller copies annotations): not the janitor's.
    assert not [e for e in core.list_namespaced_event(namespace).items
                if e.reason == "IdleUnmarked" and e.involved_object.kind == "ReplicaSet"]


def test_a_job_that_wakes_up_is_unmarked_and_its_owner_told(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    create_job(kube, namespace, "sleepy")
    history(core, namespace, exporter_values, {"sleepy": 0})
    url = prometheus()
    janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace, warnBefore="1h"), url)
    janitor.run_cycle()
    channel = notes_of(kube, namespace, "sleepy")[a.WARNED_VIA].split()[1].split("/")[0]

    # A reminder was in flight when it woke up (its record never written): the unmark clears it too.
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    client.BatchV1Api(kube).patch_namespaced_job("sleepy", namespace, {"metadata": {"annotations": {
        a.NOTICE: f"reminder abc-1 {a.format_expires(now)}"}}})
    pod = core.list_namespaced_pod(namespace).items[0].metadata.name
    exporter_values.set_gpu_util(namespace, pod, 75)
    scraped_busy(url, namespace, pod)
    janitor.run_cycle()
    assert not [k for k in notes_of(kube, namespace, "sleepy") if k.startswith("janitor/") and k != "janitor/owner"]
    assert "IdleUnmarked" in events(core, namespace, "sleepy")
    last = slack.messages(channel)[-1]
    assert len(slack.messages(channel)) == 2 and "no longer marked" in (last.text + str(last.blocks))
    assert "sleepy" in jobs(kube, namespace)


def test_slack_down_longer_than_the_grace_acts_on_nothing_and_moves_the_deadline(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    create_job(kube, namespace, "unwarned")
    history(core, namespace, exporter_values, {"unwarned": 0})
    janitor = janitor_for(kube, sandbox, namespace,
                          write_policy(tmp_path / "p.yaml", namespace, warnBefore="10s"), prometheus())
    slack.fail("server_error", count=10_000, method="chat.postMessage", status=503)
    janitor.run_cycle()
    marked = notes_of(kube, namespace, "unwarned")
    assert a.POLICY in marked and a.WARNED_AT not in marked and a.NOTICE in marked
    first_deadline = a.parse_expires(marked[a.DEADLINE])
    until_due(marked)
    time.sleep(10)  # now past the mark's deadline by more than the whole grace
    janitor.run_cycle()
    assert "unwarned" in jobs(kube, namespace) and a.WARNED_AT not in notes_of(kube, namespace, "unwarned")

    slack.recover()  # Slack is back
    before = time.time()
    janitor.run_cycle()
    notes = notes_of(kube, namespace, "unwarned")
    delivered = a.parse_expires(notes[a.WARNED_AT]).timestamp()
    assert delivered >= before - 1
    assert a.parse_expires(notes[a.DEADLINE]).timestamp() >= delivered + 10 - 1 > first_deadline.timestamp()
    assert "unwarned" in jobs(kube, namespace)
    janitor.run_cycle()
    assert "unwarned" in jobs(kube, namespace)  # still within delivery + grace


def said(slack: SlackStandInControl, channel: str, words: str) -> int:
    return sum(words in (m.text + str(m.blocks)) for m in slack.messages(channel))


def test_a_done_note_waits_for_slack_and_arrives_once(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    create_job(kube, namespace, "finished")
    history(core, namespace, exporter_values, {"finished": 0})
    janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s"),
                          prometheus())
    janitor.run_cycle()
    notes = notes_of(kube, namespace, "finished")
    channel = notes[a.WARNED_VIA].split()[1].split("/")[0]
    until_due(notes)
    slack.fail("server_error", count=10_000, method="chat.postMessage", status=503)
    janitor.run_cycle()  # warned a grace ago: acted on, though the note cannot go out now
    assert "finished" not in jobs(kube, namespace)
    assert len(slack.messages(channel)) == 1  # the warning only
    janitor.run_cycle()
    assert len(slack.messages(channel)) == 1

    slack.recover()
    janitor.run_cycle()
    janitor.run_cycle()
    assert said(slack, channel, "was *deleted*") == 1 and len(slack.messages(channel)) == 2
    state = core.read_namespaced_config_map("janitor-state", namespace).data or {}
    assert state.get("notes.json") == "[]"


def test_a_cancelled_note_waits_for_slack_and_arrives_once(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    create_job(kube, namespace, "sleepy")
    history(core, namespace, exporter_values, {"sleepy": 0})
    url = prometheus()
    janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace, warnBefore="1h"), url)
    janitor.run_cycle()
    channel = notes_of(kube, namespace, "sleepy")[a.WARNED_VIA].split()[1].split("/")[0]
    pod = core.list_namespaced_pod(namespace).items[0].metadata.name
    exporter_values.set_gpu_util(namespace, pod, 75)
    scraped_busy(url, namespace, pod)
    slack.fail("server_error", count=10_000, method="chat.postMessage", status=503)
    janitor.run_cycle()
    assert not [k for k in notes_of(kube, namespace, "sleepy") if k.startswith("janitor/") and k != "janitor/owner"]
    assert len(slack.messages(channel)) == 1

    slack.recover()
    janitor.run_cycle()
    janitor.run_cycle()
    assert said(slack, channel, "no longer marked") == 1 and len(slack.messages(channel)) == 2


def test_kill_9_between_send_and_record_sends_no_second_message(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    create_job(kube, namespace, "crashy")
    history(core, namespace, exporter_values, {"crashy": 0})
    policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="1h")
    url = prometheus()
    slack.fail("slow", count=1, method="chat.postMessage", delay=60)
    env = {**os.environ, "SLACK_BOT_TOKEN": sandbox.slack_token, "SLACK_API_URL": sandbox.slack_api_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "janitor.cli", "run", "--once", "--kubeconfig", str(sandbox.kubeconfig),
         "--namespaces", namespace, "--state-namespace", namespace, "--policies", str(policy),
         "--prometheus-url", url, "--scrape-interval", "15", "--message-pace", "1s"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: slack.requests("chat.postMessage"), timeout=90, what="the warning to reach Slack")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    notes = notes_of(kube, namespace, "crashy")
    assert a.NOTICE in notes and a.WARNED_AT not in notes  # the send happened, its record did not

    janitor = janitor_for(kube, sandbox, namespace, policy, url)
    janitor.run_cycle()
    janitor.run_cycle()
    assert len(slack.requests("chat.postMessage")) == 1
    notes = notes_of(kube, namespace, "crashy")
    [message] = slack.messages(notes[a.WARNED_VIA].split()[1].split("/")[0])
    assert notes[a.WARNED_VIA].endswith(f"/{message.ts}") and a.NOTICE not in notes


def test_users_own_expires_is_never_shortened_and_keep_until_is_capped(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    create_job(kube, namespace, "users-own", notes={a.EXPIRES: "2099-01-01T00:00:00Z"})
    create_job(kube, namespace, "kept")
    history(core, namespace, exporter_values, {"users-own": 0, "kept": 0})
    janitor = janitor_for(kube, sandbox, namespace,
                          write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s", maxExtension="25s"),
                          prometheus())
    janitor.run_cycle()
    own = notes_of(kube, namespace, "users-own")
    assert own[a.EXPIRES] == "2099-01-01T00:00:00Z" and a.POLICY not in own
    marked = notes_of(kube, namespace, "kept")
    cap = a.parse_expires(marked[a.MARKED_AT]) + datetime.timedelta(seconds=25)
    client.BatchV1Api(kube).patch_namespaced_job("kept", namespace, {"metadata": {"annotations": {
        a.KEEP_UNTIL: "2099-01-01T00:00:00Z"}}})
    until_due(marked)
    janitor.run_cycle()
    notes = notes_of(kube, namespace, "kept")
    assert a.parse_expires(notes[a.DEADLINE]) == cap  # extended, to the cap and no further
    assert "kept" in jobs(kube, namespace)
    until_due(notes)
    janitor.run_cycle()
    assert jobs(kube, namespace) == {"users-own"}
    assert notes_of(kube, namespace, "users-own")[a.EXPIRES] == "2099-01-01T00:00:00Z"


def test_unmark_removes_only_the_janitors_marks_and_keep_writes_keep_until(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    create_job(kube, namespace, "marked")
    create_job(kube, namespace, "users-own", notes={a.EXPIRES: "2099-01-01T00:00:00Z"})
    history(core, namespace, exporter_values, {"marked": 0, "users-own": 0})
    janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace, warnBefore="1h"),
                          prometheus())
    janitor.run_cycle()
    assert a.POLICY in notes_of(kube, namespace, "marked") and a.WHY in notes_of(kube, namespace, "marked")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "janitor.cli", *args, "--kubeconfig", str(sandbox.kubeconfig)],
                              capture_output=True, text=True, timeout=60)

    kept = cli("keep", f"Job/{namespace}/marked", "2d")
    assert kept.returncode == 0, kept.stderr
    keep_until = a.parse_expires(notes_of(kube, namespace, "marked")[a.KEEP_UNTIL])
    assert abs(keep_until.timestamp() - (time.time() + 2 * 86400)) < 120
    listed = cli("unmark", "--namespaces", namespace, "--state-namespace", namespace, "--dry-run")
    assert listed.returncode == 0 and f"Job/{namespace}/marked  policy idle-gpu: would remove" in listed.stdout
    assert "users-own" not in listed.stdout and a.POLICY in notes_of(kube, namespace, "marked")
    done = cli("unmark", "--namespaces", namespace, "--state-namespace", namespace, "--policy", "idle-gpu")
    assert done.returncode == 0 and "1 marks removed." in done.stdout, done.stdout + done.stderr
    notes = notes_of(kube, namespace, "marked")
    assert not any(k in notes for k in (a.POLICY, a.DEADLINE, a.EXPIRES, a.WARNED_AT, a.WARNED_VIA, a.MARKED_AT,
                                        a.REASON, a.WHY))
    assert a.KEEP_UNTIL in notes  # the owner's
    assert notes_of(kube, namespace, "users-own")[a.EXPIRES] == "2099-01-01T00:00:00Z"
    assert "IdleUnmarked" in events(core, namespace, "marked")


def test_first_start_with_200_idle_workloads_caps_marks_and_paces_digests(
        kube, core, namespace, sandbox, tmp_path, slack, prometheus) -> None:
    owners = [f"user{i}@lab.example" for i in range(4)]
    for i, email in enumerate(owners):
        slack.add_user(email, f"U0USER{i:04}", f"user{i}")
    for i in range(200):
        core.create_namespaced_pod(namespace, client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"w{i:03}", labels={"app": "idle-cpu"},
                                         annotations={STARTED_AT: started(), "janitor/owner": owners[i % 4]}),
            spec=client.V1PodSpec(containers=[client.V1Container(
                name="app", image="x", resources=client.V1ResourceRequirements(requests={"cpu": "10m"}))])))
    wait_until(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items) == 200,
               timeout=180, what="200 pods Running")
    server, _ = prometheus_with_history(kube, sandbox.exporters_url, hours=0.5, step=15, work_dir=sandbox.run_dir)
    policy = tmp_path / "cpu.yaml"
    policy.write_text(f"""policies:
- name: idle-cpu
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers: {{idleCpu: {{cores: 0.05, window: 20m}}}}
  lifecycle: {{warnBefore: 1h}}
""")
    try:
        settings = build(namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
                            prometheus_url=server.url, slack_token=sandbox.slack_token,
                            slack_api_url=sandbox.slack_api_url)  # default caps and a 1 h message pace
        janitor = Runner(kube, settings)
        janitor.run_cycle()
        marked = [p.metadata.name for p in core.list_namespaced_pod(namespace).items
                  if a.POLICY in (p.metadata.annotations or {})]
        assert len(marked) == 20  # the per-namespace cap on new marks per cycle
        posts = slack.requests("chat.postMessage")
        assert len(posts) == 4  # one digest per owner
        for post in posts:
            assert "5 of your workloads" in str(post.params.get("text")) or "5 workloads" in str(post.params)
        get = janitor.telemetry.registry.get_sample_value
        assert get("janitor_lifecycle_steps_total", {"step": "held", "policy": "idle-cpu"}) == 180

        janitor.run_cycle()  # 20 more marks; their owners heard from the janitor a moment ago
        marked = [p for p in core.list_namespaced_pod(namespace).items if a.POLICY in (p.metadata.annotations or {})]
        assert len(marked) == 40
        assert len(slack.requests("chat.postMessage")) == 4
        assert sum(a.WARNED_AT in p.metadata.annotations for p in marked) == 20
    finally:
        server.stop()
    assert len(core.list_namespaced_pod(namespace).items) == 200


def test_a_notebook_is_stopped_through_its_statefulset_chain(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    crs = client.CustomObjectsApi(kube)
    notebook = crs.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "notebooks", {
        "apiVersion": "kubeflow.org/v1", "kind": "Notebook",
        "metadata": {"name": "nb", "annotations": {"janitor/owner": ALICE[0]}},
        "spec": {"template": {"spec": {"containers": [{"name": "nb", "image": "jupyter"}]}}}})
    owner = client.V1OwnerReference(api_version="kubeflow.org/v1", kind="Notebook", name="nb",
                                    uid=notebook["metadata"]["uid"], controller=True, block_owner_deletion=True)
    client.AppsV1Api(kube).create_namespaced_stateful_set(namespace, client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name="nb", owner_references=[owner]),
        spec=client.V1StatefulSetSpec(service_name="nb", replicas=1,
                                      selector=client.V1LabelSelector(match_labels={"app": "nb"}),
                                      template=gpu_template("nb", "Always"))))
    history(core, namespace, exporter_values, {"nb": 0})
    policy = tmp_path / "nb.yaml"
    policy.write_text(f"""policies:
- name: idle-notebooks
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}, kinds: [Notebook]}}
  triggers: {{idleGpu: {{window: 2h}}}}
  lifecycle: {{warnBefore: 5s, remindEvery: 0s, action: stop}}
""")
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())
    janitor.run_cycle()

    def nb_notes() -> dict[str, str]:
        return crs.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "notebooks", "nb")["metadata"].get(
            "annotations", {})

    assert nb_notes().get(a.POLICY) == "idle-notebooks", janitor.explain()
    until_due(nb_notes())
    janitor.run_cycle()
    notes = nb_notes()
    assert a.NOTEBOOK_STOPPED in notes and a.POLICY not in notes
    assert a.WARNED_VIA not in notes and a.DEADLINE not in notes  # the mark went with the stop, in one write
    done = [m for r in slack.requests("chat.postMessage") for m in [r.params] if "stopped" in str(m.get("text"))]
    assert done and f"kubectl -n {namespace} annotate notebook.kubeflow.org/nb kubeflow-resource-stopped-" in str(
        done[-1])
    janitor.run_cycle()  # stopped: not marked again while its pods go away
    assert a.POLICY not in nb_notes()


def test_a_workload_without_an_owner_is_reported_to_admins_and_never_acted_on(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, prometheus) -> None:
    create_job(kube, namespace, "orphan", owner=None)
    history(core, namespace, exporter_values, {"orphan": 0})
    janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace, warnBefore="5s"),
                          prometheus(), admin_channel="#gpu-admins")
    janitor.run_cycle()
    notes = notes_of(kube, namespace, "orphan")
    assert notes[a.WARNED_VIA].startswith("admins C0ADMINS/")
    [report] = slack.messages("C0ADMINS")
    assert "orphan" in report.text + str(report.blocks)
    until_due(notes)
    janitor.run_cycle()
    janitor.run_cycle()
    assert "orphan" in jobs(kube, namespace) and len(slack.messages("C0ADMINS")) == 1


def due_mark(uid: str, action: str) -> dict[str, str]:
    """A mark whose warning (naming `action`) reached its owner two hours ago, due a minute ago."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    warned, deadline = now - datetime.timedelta(hours=2), now - datetime.timedelta(minutes=1)
    return {a.POLICY: "idle-gpu", a.DEADLINE: a.format_expires(deadline), a.MARKED_AT: a.format_expires(warned),
            a.REASON: "idle", a.WARNED_AT: a.format_expires(warned),
            a.WARNED_VIA: f"owner D0ALICE/{warned.timestamp():.6f}", a.MARKED_UID: uid,
            a.WARNED_OF: f"{action} {a.format_expires(deadline)}"}


def idle_deployment_due(kube, core, namespace: str, exporter_values: ValuesControl) -> client.V1Deployment:
    """An idle notebook Deployment whose owner was warned of scale-to-zero, now due."""
    apps = client.AppsV1Api(kube)
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="notebook", annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "notebook"}),
                                     strategy=client.V1DeploymentStrategy(
                                         type="RollingUpdate", rolling_update=client.V1RollingUpdateDeployment(
                                             max_surge=1, max_unavailable=0)),
                                     template=gpu_template("notebook", "Always"))))
    history(core, namespace, exporter_values, {"notebook": 0})
    uid = apps.read_namespaced_deployment("notebook", namespace).metadata.uid
    apps.patch_namespaced_deployment("notebook", namespace,
                                     {"metadata": {"annotations": due_mark(uid, "scale-to-zero")}})
    return apps.read_namespaced_deployment("notebook", namespace)


def plan_then_act(janitor: Runner, between) -> list:
    """One cycle, with `between()` changing the cluster after the cycle's read and before it acts."""
    return janitor.plan_then_act(between).results


def test_a_pod_of_a_replicaset_created_since_the_cycles_read_stops_the_reclaim(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    """A new rollout starts between the read and the action: its pod (of a ReplicaSet the cycle never
    saw) is starting, so the workload is in use again."""
    idle_deployment_due(kube, core, namespace, exporter_values)
    janitor = janitor_for(kube, sandbox, namespace,
                          write_policy(tmp_path / "p.yaml", namespace, warnBefore="20s", action="scale-to-zero"),
                          prometheus())
    apps = client.AppsV1Api(kube)

    def roll_out() -> None:
        apps.patch_namespaced_deployment("notebook", namespace, {"spec": {"template": {"metadata": {
            "annotations": {"devenv.janitor.dev/waiting": "ContainerCreating"}}}}})
        wait_until(lambda: any(p.status.phase == "Pending" for p in core.list_namespaced_pod(namespace).items),
                   timeout=30, what="the new ReplicaSet's pod")

    results = plan_then_act(janitor, roll_out)
    assert [str(r.outcome) for r in results if r.action.target.name == "notebook"] == ["skipped"]
    assert apps.read_namespaced_deployment("notebook", namespace).spec.replicas == 1


def test_an_opt_out_added_to_the_namespace_since_the_cycles_read_stops_the_reclaim(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:
    idle_deployment_due(kube, core, namespace, exporter_values)
    janitor = janitor_for(kube, sandbox, namespace,
                          write_policy(tmp_path / "p.yaml", namespace, warnBefore="20s", action="scale-to-zero"),
                          prometheus())

    def opt_out() -> None:
        core.patch_namespace(namespace, {"metadata": {"annotations": {a.OPT_OUT: "true"}}})

    results = plan_then_act(janitor, opt_out)
    assert [str(r.outcome) for r in results if r.action.target.name == "notebook"] == ["skipped"]
    assert client.AppsV1Api(kube).read_namespaced_deployment("notebook", namespace).spec.replicas == 1
