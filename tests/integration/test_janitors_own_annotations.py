"""The janitor's own annotations on the real apiserver: refused at apply time, and ignored by the daemon.

Aspects covered:
- with kube-idle-janitor-marks applied (as `janitor admission` generates it, for the janitor's
  ServiceAccount): a researcher's `kubectl annotate` that forward-dates janitor/marked-at together
  with janitor/keep-until is refused, naming the key, saying only the janitor writes it and what to
  do instead; so are a changed janitor/expires on the mark, a mark re-created from a saved manifest,
  a write under the janitor's field manager name, and a rewrite of the record of who wrote a key
  (managedFields: claimed, or emptied); a keep-until, `kubectl janitor keep`, and a user's own
  janitor/expires on an unmarked Job (set and removed) pass;
- the janitor's own writes (mark, delivery record, keep-until and release as the Slack buttons
  write them, and removing them) pass, and so does `janitor unmark` by a cluster admin; the
  Deployment controller's copies of a marked Deployment's annotations onto a new ReplicaSet pass;
- without the policy, the daemon (a real cycle, Prometheus and the Slack stand-in) marks and warns
  an idle Job; the apiserver's record shows the janitor's field manager on its keys; a researcher
  forward-dates janitor/marked-at and sets janitor/keep-until a day ahead: the plan says the
  keep-until is not honoured and why, and the Job is deleted at the deadline it was warned of,
  while a Job whose owner only set a keep-until within the cap is kept until then.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_kubectl_plugin_live import PLUGIN, kubectl
from test_lifecycle import (  # noqa: F401 - fixtures
    alice,
    create_job,
    history,
    janitor_for,
    jobs,
    notes_of,
    prometheus,
    until_due,
    write_policy,
)

from devenv import access
from devenv.procs import wait_until
from janitor import admission, errors
from janitor import annotations as a
from janitor.act import kube as act
from janitor.decide.lifecycle import Step
from janitor.decide.model import ObjectRef, ResourceKind
from janitor.decide.reasons import Code

JOBS = ResourceKind("batch", "v1", "Job", "jobs")
MARKED_AT = "2026-11-20T10:00:00Z"


def stamp(when: float) -> str:
    return datetime.datetime.fromtimestamp(int(when), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    tool = kubectl()
    assert tool is not None, "no kubectl"
    return subprocess.run([tool, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60)


def job(batch: client.BatchV1Api, namespace: str, name: str) -> str:
    made = batch.create_namespaced_job(namespace, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                        "containers": [{"name": "c", "image": "x"}]}}}})
    return str(made.metadata.uid)


def as_janitor(api: client.ApiClient, namespace: str, name: str, notes: dict[str, str | None]) -> None:
    """A write as the janitor's own code makes it (kube.annotate: its field manager, guarded by the
    resourceVersion read; read again when the Job controller updated the Job in between)."""
    for attempt in range(5):
        found = client.BatchV1Api(api).read_namespaced_job(name, namespace)
        ref = ObjectRef("Job", "batch/v1", namespace, name, found.metadata.uid)
        try:
            act.annotate(api, ref, found.metadata.resource_version, notes, kind=JOBS)
            return
        except errors.Conflict:
            if attempt == 4:
                raise


def mark(api: client.ApiClient, namespace: str, name: str, uid: str) -> None:
    as_janitor(api, namespace, name, {a.POLICY: "idle-gpu", a.MARKED_AT: MARKED_AT, a.MARKED_UID: uid,
                                      a.DEADLINE: "2026-11-21T10:00:00Z", a.REASON: "idle"})


def managers(kube: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """annotation key -> the field manager that owns it, from the apiserver's record."""
    owners: dict[str, str] = {}
    for entry in raw_job(kube, namespace, name)["metadata"].get("managedFields") or ():
        for key in ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations") or {}:
            if key.startswith("f:"):
                owners[key[2:]] = entry["manager"]
    return owners


def raw_job(kube: client.ApiClient, namespace: str, name: str) -> dict:
    answer = client.BatchV1Api(kube).read_namespaced_job(name, namespace, _preload_content=False)
    return json.loads(answer.data)


@pytest.fixture
def accounts(kube, namespace: str, tmp_path: Path) -> Iterator[tuple[client.ApiClient, Path]]:
    """The janitor's ServiceAccount (edit in the namespace, as its ClusterRole lets it annotate) and a
    researcher's kubeconfig (edit in the namespace)."""
    janitor_config = access.namespaced_account(kube, namespace, "janitor", "edit", tmp_path / "janitor.kubeconfig")
    researcher = access.namespaced_account(kube, namespace, "researcher", "edit", tmp_path / "researcher.kubeconfig")
    janitor = access.api_client(janitor_config)
    yield janitor, researcher
    janitor.close()


@pytest.fixture
def marks_policy(kube, namespace: str, accounts) -> Iterator[str]:
    """kube-idle-janitor-marks for the janitor's ServiceAccount of `namespace`, bound to it only, in force."""
    name = f"marks-{uuid.uuid4().hex[:6]}"
    vap, binding = admission.marks_policy(
        [JOBS, ResourceKind("apps", "v1", "Deployment", "deployments"),
         ResourceKind("apps", "v1", "ReplicaSet", "replicasets")],
        janitor=f"system:serviceaccount:{namespace}:janitor", name=name, admin_channel="#gpu-admins")
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": namespace}}}
    api = client.AdmissionregistrationV1Api(kube)
    api.create_validating_admission_policy(vap)
    api.create_validating_admission_policy_binding(binding)
    janitor, researcher = accounts
    batch = client.BatchV1Api(kube)
    uid = job(batch, namespace, "probe")
    mark(janitor, namespace, "probe", uid)
    years = iter(range(2030, 9000))

    def in_force() -> bool:  # a new value each time: one left as it was would pass
        done = run("-n", namespace, "annotate", "--overwrite", "job/probe", f"{a.REASON}=r{next(years)}",
                   kubeconfig=researcher)
        return done.returncode != 0 and name in done.stderr

    wait_until(in_force, timeout=60, what="the marks policy to be in force")
    yield name
    api.delete_validating_admission_policy_binding(name)
    api.delete_validating_admission_policy(name)


def written(write) -> bool:
    """True once `write` went through; False on a conflict with a controller's update (try again)."""
    try:
        write()
    except errors.Conflict:
        return False
    return True


def refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    assert "forbidden" in done.stderr.lower(), done.stderr
    return done.stderr


def test_a_forward_dated_marked_at_with_a_keep_until_is_refused_at_apply_time(
        kube, namespace: str, accounts, marks_policy: str, tmp_path: Path) -> None:
    janitor, researcher = accounts
    batch = client.BatchV1Api(kube)
    mark(janitor, namespace, "train", job(batch, namespace, "train"))
    said = refused(run("-n", namespace, "annotate", "--overwrite", "job/train", f"{a.MARKED_AT}=2027-01-01T00:00:00Z",
                       f"{a.KEEP_UNTIL}=2027-01-05T00:00:00Z", kubeconfig=researcher))
    assert "janitor/marked-at: only the janitor writes this annotation (part of its mark)" in said
    assert "For more time set janitor/keep-until" in said and "a cluster admin runs `janitor unmark`" in said
    assert "Ask in #gpu-admins." in said and marks_policy in said
    assert notes_of(kube, namespace, "train")[a.MARKED_AT] == MARKED_AT and a.KEEP_UNTIL not in notes_of(
        kube, namespace, "train")

    # What the researcher should do instead passes: a keep-until, by hand or with the plugin.
    done = run("-n", namespace, "annotate", "--overwrite", "job/train", f"{a.KEEP_UNTIL}=2026-11-22T00:00:00Z",
               kubeconfig=researcher)
    assert done.returncode == 0, done.stderr
    kept = subprocess.run([str(PLUGIN), "keep", "job/train", "2d", "--kubeconfig", str(researcher)],
                          capture_output=True, text=True, timeout=60)
    assert kept.returncode == 0, kept.stderr
    assert managers(kube, namespace, "train")[a.KEEP_UNTIL] == "kubectl-janitor"

    # The mark's deadline, a re-created mark and the janitor's name are refused too.
    said = refused(run("-n", namespace, "annotate", "--overwrite", "job/train", f"{a.EXPIRES}=2030-01-01",
                       kubeconfig=researcher))
    assert "janitor/expires: on a marked object only the janitor writes it" in said
    refused(run("-n", namespace, "annotate", "job/train", f"{a.DEADLINE}-", kubeconfig=researcher))
    said = refused(run("-n", namespace, "annotate", "--overwrite", "job/train", f"{a.MARKED_AT}=2027-01-01T00:00:00Z",
                       "--field-manager", a.FIELD_MANAGER, kubeconfig=researcher))
    assert "janitor/marked-at: only the janitor writes" in said
    saved = batch.read_namespaced_job("train", namespace).metadata.annotations
    copy = json.dumps({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "again", "annotations": saved},
                       "spec": {"suspend": True, "template": {"spec": {
                           "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}})
    path = tmp_path / "again.json"
    path.write_text(copy)
    said = refused(run("-n", namespace, "create", "-f", str(path), kubeconfig=researcher))
    assert "only the janitor writes these annotations (its mark)" in said and "leave these keys out of it" in said

    # A user's own janitor/expires on an unmarked Job is theirs: set, changed and removed.
    job(batch, namespace, "own")
    for change in (f"{a.EXPIRES}=2030-01-01", f"{a.EXPIRES}=2031-01-01", f"{a.EXPIRES}-"):
        done = run("-n", namespace, "annotate", "--overwrite", "job/own", change, kubeconfig=researcher)
        assert done.returncode == 0, done.stderr


def test_the_record_of_who_wrote_a_key_cannot_be_rewritten(kube, namespace: str, accounts, marks_policy: str) -> None:
    janitor, researcher = accounts
    batch = client.BatchV1Api(kube)
    mark(janitor, namespace, "train", job(batch, namespace, "train"))
    assert managers(kube, namespace, "train")[a.MARKED_AT] == a.FIELD_MANAGER
    researchers = client.BatchV1Api(access.api_client(researcher))
    record = raw_job(kube, namespace, "train")["metadata"]["managedFields"]
    for entry in record:  # the janitor's marked-at, handed to someone else, value unchanged
        ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations", {}).pop(f"f:{a.MARKED_AT}", None)
    record.append({"manager": "kubectl-annotate", "operation": "Update", "apiVersion": "batch/v1",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{a.MARKED_AT}": {}}}}})
    for forged in (record, [{}]):  # handed over, or emptied
        with pytest.raises(ApiException) as e:
            researchers.patch_namespaced_job("train", namespace, {"metadata": {"managedFields": forged}})
        assert e.value.status == 403 and "metadata.managedFields: the record of who wrote" in str(e.value.body)
    assert managers(kube, namespace, "train")[a.MARKED_AT] == a.FIELD_MANAGER


def test_the_janitors_own_writes_a_cluster_admins_unmark_and_a_deployments_copies_pass(
        kube, namespace: str, accounts, marks_policy: str, sandbox) -> None:
    janitor, researcher = accounts
    batch = client.BatchV1Api(kube)
    mark(janitor, namespace, "train", job(batch, namespace, "train"))
    as_janitor(janitor, namespace, "train", {a.NOTICE: f"warning abc-1 {MARKED_AT} delete 2026-11-21T10:00:00Z"})
    as_janitor(janitor, namespace, "train", {a.NOTICE: None, a.WARNED_AT: MARKED_AT,
                                             a.WARNED_VIA: "owner D0ALICE/1700000000.000100",
                                             a.WARNED_OF: "delete 2026-11-21T10:00:00Z"})
    # The Slack buttons: the daemon writes keep-until and release as itself.
    as_janitor(janitor, namespace, "train", {a.KEEP_UNTIL: "2026-11-22T00:00:00Z"})
    as_janitor(janitor, namespace, "train", {a.RELEASE: f"{MARKED_AT} 2026-11-20T12:00:00Z U0ALICE1"})
    as_janitor(janitor, namespace, "train", {a.DEADLINE: "2026-11-21T12:00:00Z"})

    unmarked = subprocess.run([sys.executable, "-m", "janitor.cli", "unmark", "--namespaces", namespace,
                               "--state-namespace", namespace, "--kubeconfig", str(sandbox.kubeconfig)],
                              capture_output=True, text=True, timeout=60)
    assert unmarked.returncode == 0 and "marks removed." in unmarked.stdout, unmarked.stdout + unmarked.stderr
    left = notes_of(kube, namespace, "train")
    assert not any(k in left for k in a.MARK_KEYS) and left[a.KEEP_UNTIL] == "2026-11-22T00:00:00Z"

    apps = client.AppsV1Api(kube)
    made = apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    ref = ObjectRef("Deployment", "apps/v1", namespace, "web", made.metadata.uid)
    deployments = ResourceKind("apps", "v1", "Deployment", "deployments")
    wait_until(lambda: written(lambda: act.annotate(
        janitor, ref, apps.read_namespaced_deployment("web", namespace).metadata.resource_version,
        {a.POLICY: "idle-gpu", a.MARKED_AT: MARKED_AT, a.MARKED_UID: made.metadata.uid,
         a.DEADLINE: "2026-11-21T10:00:00Z"}, kind=deployments)), timeout=30, what="the Deployment marked")

    def copies() -> list[dict[str, str]]:
        return [dict(rs.metadata.annotations or {}) for rs in apps.list_namespaced_replica_set(namespace).items]

    wait_until(lambda: any(c.get(a.MARKED_UID) == made.metadata.uid for c in copies()), timeout=60,
               what="the Deployment controller's copy of the mark on its ReplicaSet")
    done = run("-n", namespace, "set", "image", "deployment/web", "c=y", kubeconfig=researcher)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: sum(c.get(a.MARKED_UID) == made.metadata.uid for c in copies()) == 2, timeout=60,
               what="a new ReplicaSet, created with the copy")


def test_without_the_policy_the_daemon_takes_no_cap_from_a_marked_at_it_did_not_write(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus,  # noqa: F811
        accounts) -> None:
    _, researcher = accounts
    create_job(kube, namespace, "forged")
    create_job(kube, namespace, "kept")
    history(core, namespace, exporter_values, {"forged": 0, "kept": 0})
    janitor = janitor_for(kube, sandbox, namespace,
                          write_policy(tmp_path / "p.yaml", namespace, warnBefore="20s", maxExtension="40s"),
                          prometheus())
    janitor.run_cycle()
    marked = {name: notes_of(kube, namespace, name) for name in ("forged", "kept")}
    for name, notes in marked.items():
        assert a.WARNED_AT in notes, janitor.explain()
        owners = managers(kube, namespace, name)
        assert {owners[k] for k in (a.POLICY, a.MARKED_AT, a.DEADLINE, a.WARNED_AT)} == {a.FIELD_MANAGER}, owners

    tomorrow = stamp(time.time() + 86400)
    done = run("-n", namespace, "annotate", "--overwrite", "job/forged", f"{a.MARKED_AT}={tomorrow}",
               f"{a.KEEP_UNTIL}={tomorrow}", kubeconfig=researcher)
    assert done.returncode == 0, done.stderr
    assert managers(kube, namespace, "forged")[a.MARKED_AT] == "kubectl-annotate"
    within = a.parse_expires(marked["kept"][a.MARKED_AT]) + datetime.timedelta(seconds=35)
    done = run("-n", namespace, "annotate", "--overwrite", "job/kept", f"{a.KEEP_UNTIL}={a.format_expires(within)}",
               kubeconfig=researcher)
    assert done.returncode == 0, done.stderr

    planned = janitor.plan().plan
    [change] = [c for c in planned.changes if c.workload.name == "forged"]
    assert Code.KEEP_UNTRUSTED in change.why.codes(), janitor.explain()
    assert "janitor/keep-until is not honoured: janitor/marked-at on this mark was not written by the janitor" in str(
        change.why)
    assert change.deadline == a.parse_expires(marked["forged"][a.DEADLINE])
    [kept] = [c for c in planned.changes if c.workload.name == "kept"]
    assert kept.step is Step.EXTEND and kept.deadline == within

    until_due(marked["forged"])
    janitor.run_cycle()
    assert "forged" not in jobs(kube, namespace), janitor.explain()
    assert "kept" in jobs(kube, namespace) and a.parse_expires(notes_of(kube, namespace, "kept")[a.DEADLINE]) == within
