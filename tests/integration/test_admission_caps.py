"""`janitor admission`: the policies' caps, refused by the real apiserver at apply time.

Aspects covered:
- a janitor/keep-until on a marked Job later than its policy's maxExtension after the first mark is
  refused, with the cap, the time it ends and the admin channel; one within the cap is accepted,
  and so is an update that leaves an over-the-cap value as it was;
- `janitor keep` past the cap ends in that one line (exit 4), not a traceback;
- janitor/opt-out: "true" (and janitor/ttl: forever, taken for an exemption) on a Job whose
  governing policy enforces with honourOptOut: false is refused, naming the policy; on a kind that
  policy does not govern both are accepted, and so is a real TTL;
- a keep-until on an object not yet marked passes (admission has no clock; the janitor caps it
  when it marks).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devenv.procs import wait_until
from janitor import admission
from janitor import annotations as a
from janitor.policy import load
from janitor.settings import DEFAULT_KINDS

MARKED_AT = "2026-11-20T10:00:00Z"


def job(batch: client.BatchV1Api, namespace: str, name: str, notes: dict[str, str]) -> None:
    batch.create_namespaced_job(namespace, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "annotations": notes},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                        "containers": [{"name": "c", "image": "x"}]}}}})


def annotate(batch: client.BatchV1Api, namespace: str, name: str, notes: dict[str, str]) -> None:
    batch.patch_namespaced_job(name, namespace, {"metadata": {"annotations": notes}})


def refused(call) -> str:
    try:
        call()
    except ApiException as e:
        assert e.status in (403, 422), e
        return str(e.body)
    raise AssertionError("accepted")


@pytest.fixture
def caps(kube, namespace: str, tmp_path: Path):
    """The caps policy generated from two policies covering `namespace`, applied and in force."""
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(yaml.safe_dump({"policies": [
        {"name": "jobs-strict", "mode": "enforce", "match": {"namespaces": {"include": [namespace]}, "kinds": ["Job"]},
         "triggers": {"idleGpu": {"window": "1h"}},
         "lifecycle": {"action": "suspend", "maxExtension": "3d", "honourOptOut": False}},
        {"name": "idle-gpu", "mode": "enforce", "match": {"namespaces": {"include": ["*"]}},
         "triggers": {"idleGpu": {"window": "2h"}}, "lifecycle": {"maxExtension": "7d"}},
    ]}))
    loaded = load.from_paths([str(policy_file)], parse_duration=a.parse_ttl)
    assert not loaded.errors, loaded.errors
    name = f"caps-{uuid.uuid4().hex[:6]}"
    vap, binding = admission.caps_policy(loaded.policies, DEFAULT_KINDS, name=name, admin_channel="#gpu-admins")
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": namespace}}}  # other tests' namespaces are not touched
    api = client.AdmissionregistrationV1Api(kube)
    api.create_validating_admission_policy(vap)
    api.create_validating_admission_policy_binding(binding)
    batch = client.BatchV1Api(kube)
    job(batch, namespace, "probe", {a.POLICY: "jobs-strict", a.MARKED_AT: MARKED_AT})

    years = iter(range(2030, 9000))

    def in_force() -> bool:  # a new value each time: one left as it was would pass
        try:
            annotate(batch, namespace, "probe", {a.KEEP_UNTIL: f"{next(years)}-01-01"})
        except ApiException:
            return True
        return False

    wait_until(in_force, timeout=60, what="the caps policy to be in force")
    yield policy_file
    api.delete_validating_admission_policy_binding(name)
    api.delete_validating_admission_policy(name)


def test_keep_until_past_the_cap_of_the_marking_policy_is_refused(caps, kube, namespace: str, sandbox) -> None:
    batch = client.BatchV1Api(kube)
    job(batch, namespace, "train", {a.POLICY: "jobs-strict", a.MARKED_AT: MARKED_AT})
    said = refused(lambda: annotate(batch, namespace, "train", {a.KEEP_UNTIL: "2026-11-23T10:00:01Z"}))
    assert "janitor/keep-until: 2026-11-23T10:00:01Z is past the cap of policy jobs-strict: at most 3d" in said
    assert "until 2026-11-23T10:00:00Z" in said and "Ask in #gpu-admins" in said

    annotate(batch, namespace, "train", {a.KEEP_UNTIL: "2026-11-23T10:00"})  # exactly the cap
    annotate(batch, namespace, "train", {a.KEEP_UNTIL: "2026-11-21"})

    job(batch, namespace, "other", {a.POLICY: "idle-gpu", a.MARKED_AT: MARKED_AT})
    annotate(batch, namespace, "other", {a.KEEP_UNTIL: "2026-11-26T10:00:00Z"})  # 6 d: within idle-gpu's 7 d
    said = refused(lambda: annotate(batch, namespace, "other", {a.KEEP_UNTIL: "2026-11-28"}))
    assert "cap of policy idle-gpu: at most 1w" in said

    out = subprocess.run([sys.executable, "-m", "janitor.cli", "keep", f"Job/{namespace}/train", "30d",
                          "--kubeconfig", str(sandbox.kubeconfig)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 4, out.stderr
    [line] = out.stderr.splitlines()
    assert "is past the cap of policy jobs-strict" in line and line.endswith("Ask in #gpu-admins if you need more.")
    assert "ask your cluster admins for this right" not in line


def test_a_value_left_as_it_was_and_an_unmarked_object_pass(caps, kube, namespace: str) -> None:
    batch = client.BatchV1Api(kube)
    job(batch, namespace, "before", {a.KEEP_UNTIL: "2030-01-01"})  # not marked: no cap to compare with yet
    annotate(batch, namespace, "before", {a.POLICY: "jobs-strict", a.MARKED_AT: MARKED_AT})  # marking it passes
    annotate(batch, namespace, "before", {"note": "unrelated"})  # keep-until unchanged: passes
    assert refused(lambda: annotate(batch, namespace, "before", {a.KEEP_UNTIL: "2031-01-01"}))


def test_opt_out_where_the_governing_policy_ignores_it_is_refused(caps, kube, core, namespace: str) -> None:
    batch = client.BatchV1Api(kube)
    job(batch, namespace, "notebook-ish", {})
    said = refused(lambda: annotate(batch, namespace, "notebook-ish", {a.OPT_OUT: "true"}))
    assert "janitor/opt-out: policy jobs-strict does not honour opt-out here" in said
    assert "use janitor/keep-until" in said and "#gpu-admins" in said
    annotate(batch, namespace, "notebook-ish", {a.OPT_OUT: "false"})
    said = refused(lambda: annotate(batch, namespace, "notebook-ish", {a.TTL: "Forever"}))
    assert "janitor/ttl: forever only means no age limit" in said and "from policy jobs-strict" in said
    annotate(batch, namespace, "notebook-ish", {a.TTL: "30d"})  # a real age limit is the TTL path's business

    # A Deployment is governed by idle-gpu (kinds: any), which honours opt-out.
    client.AppsV1Api(kube).create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "annotations": {a.OPT_OUT: "true", a.TTL: "forever"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
