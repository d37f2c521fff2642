"""The Helm chart (charts/kube-idle-janitor) against the kustomize base and the janitor's own CLI.

Aspects covered:
- `helm lint --strict` passes; the values schema refuses a wrong value with its path;
- the chart's files/ are copies of what the base and monitoring ship (the generated RBAC and
  admission policies, the policies, the rules and the dashboard); JANITOR_UPDATE_MANIFESTS=1
  copies them again;
- with its defaults, release `kube-idle-janitor` in namespace `kube-idle-janitor`, the chart
  renders the same objects as manifests/base, field for field, apart from the labels Helm adds
  (managed-by, helm.sh/chart) and the janitor's Namespace, which Helm leaves to the admin;
- in another namespace every place the base names its namespace by hand follows the release:
  --state-namespace, binding subjects, the admission policies' username and state ConfigMap;
- the admin guide's values file renders args that `janitor run` parses, with its cluster name,
  matchers, credentials from the Secret's files, Slack's Secret and its inline policies, which
  `janitor check` loads; http clicks add the port, the signing secret's file and the Service port;
- monitoring on: ServiceMonitors, the PrometheusRule with manifests/monitoring's groups, the
  dashboard ConfigMap.
helm is built by devenv/helm/ensure.sh (devenv/install.sh runs it); without it these fail in CI.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_manifests import BASE, MONITORING, ROOT, UPDATE, _parse, render

from devenv.helm import cached_helm
from janitor import annotations as ann
from janitor.policy import load

CHART = ROOT / "charts" / "kube-idle-janitor"
HELM = cached_helm()
FILES = {  # the chart's copy -> what it copies
    "files/rbac.yaml": BASE / "rbac.yaml",
    "files/rbac-node-agent.yaml": BASE / "rbac-node-agent.yaml",
    "files/admission-guard.yaml": BASE / "admission-guard.yaml",
    "files/admission-annotations.yaml": BASE / "admission-annotations.yaml",
    "files/admission-marks.yaml": BASE / "admission-marks.yaml",
    "files/prometheusrule.yaml": MONITORING / "prometheusrule.yaml",
    "files/kube-idle-janitor.json": MONITORING / "dashboards" / "kube-idle-janitor.json",
    **{f"files/policies/{p.name}": p for p in sorted((BASE / "policies").glob("*.yaml"))},
}
HELM_LABELS = ("app.kubernetes.io/managed-by", "helm.sh/chart")

pytestmark = pytest.mark.skipif(HELM is None and os.environ.get("CI") != "true",
                                reason="helm not built yet: bash devenv/helm/ensure.sh")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert HELM is not None, "helm is not built: bash devenv/helm/ensure.sh (devenv/install.sh does)"
    out = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def template(*args: str, namespace: str = "kube-idle-janitor", release: str = "kube-idle-janitor") -> list[dict]:
    out = helm("template", release, str(CHART), "-n", namespace, *args)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [hit] = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return hit


def guide_values() -> str:
    text = (ROOT / "docs" / "admin-guide.md").read_text()
    [block] = re.findall(r"```yaml\n(# my-values\.yaml\n.*?)```", text, re.S)
    return block


# ---------------------------------------------------------------------------------------------


def test_chart_files_are_the_base_and_monitoring_files() -> None:
    for copy_, source in FILES.items():
        target = CHART / copy_
        if UPDATE:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source.read_text())
        assert target.exists() and target.read_text() == source.read_text(), (
            f"{target.relative_to(ROOT)} differs from {source.relative_to(ROOT)}; copy it with "
            "JANITOR_UPDATE_MANIFESTS=1 .venv/bin/python -m pytest tests/unit/test_chart.py")
    shipped = {str(p.relative_to(CHART)) for p in (CHART / "files").rglob("*") if p.is_file()}
    assert shipped == set(FILES), "files/ holds something nothing copies"


def test_helm_lint_passes_and_the_schema_refuses_wrong_values() -> None:
    lint = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in lint.stdout
    for setting, where in (("slack.clicks=pigeon", "/slack/clicks"), ("image.digest=latest", "/image/digest"),
                           ("prometheus.url=prometheus:9090", "/prometheus/url"),
                           ("janitor.replicas=0", "/janitor/replicas"), ("nodeAgent.enabeld=false", "/nodeAgent")):
        refused = helm("template", "x", str(CHART), "--set", setting, check=False)
        assert refused.returncode != 0 and where in refused.stderr, (setting, refused.stderr)


def _normal(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    return obj


def test_defaults_render_the_same_objects_as_the_base() -> None:
    chart = {k: _normal(o) for k, o in keyed(template()).items()}
    base = {k: _normal(o) for k, o in keyed(render(BASE)).items()}
    # Helm keeps its release record in the release's namespace before it applies anything: the
    # admin creates and labels that one (docs/admin-guide.md), the chart the node agent's.
    janitor_namespace = base.pop(("Namespace", "", "kube-idle-janitor"))
    assert janitor_namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert sorted(chart) == sorted(base)
    for key, obj in base.items():
        assert chart[key] == obj, key


def test_another_namespace_is_followed_wherever_the_base_names_its_own() -> None:
    objects = template(namespace="gpu-ops")
    text = yaml.safe_dump_all(objects)
    assert "system:serviceaccount:gpu-ops:kube-idle-janitor" in text
    assert "request.namespace == 'gpu-ops' && request.name == 'janitor-state'" in text
    assert "system:serviceaccount:kube-idle-janitor:" not in text and "'kube-idle-janitor'" not in text
    args = _parse(one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.state_namespace == "gpu-ops"
    for obj in objects:
        for subject in obj.get("subjects", []):
            agent = subject["name"].endswith("node-agent")
            assert subject["namespace"] == ("kube-idle-janitor-node-agent" if agent else "gpu-ops"), obj
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass") \
                and not obj["kind"].startswith("ValidatingAdmissionPolicy"):
            assert obj["metadata"]["namespace"] in ("gpu-ops", "kube-idle-janitor-node-agent"), obj["metadata"]


def test_the_admin_guides_values_render_what_the_janitor_runs_with(tmp_path: Path) -> None:
    values = tmp_path / "my-values.yaml"
    values.write_text(guide_values())
    objects = template("-f", str(values))
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    args = _parse(container["args"])
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"registry.example.com/kube-idle-janitor:{app_version}"
    assert args.cluster_name == "gpu-west" and args.prometheus_matcher == ['cluster="gpu-west"']
    assert args.dry_run and args.prometheus_url == "http://prometheus-operated.monitoring.svc:9090"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    token = Path(args.prometheus_bearer_token_file)
    assert volumes["prometheus-auth"]["secret"]["secretName"] == "prometheus-reader" and token.name == "token"
    assert mounts["prometheus-auth"]["mountPath"] == str(token.parent) and mounts["prometheus-auth"]["readOnly"]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
               and "secretKeyRef" in e["valueFrom"]}
    assert secrets["SLACK_BOT_TOKEN"]["name"] == secrets["SLACK_APP_TOKEN"]["name"] == "kube-idle-janitor-slack"
    policies = one(objects, "ConfigMap")
    assert volumes["policies"]["configMap"]["name"] == policies["metadata"]["name"]
    for name, text in policies["data"].items():
        (tmp_path / name).write_text(text)
    loaded = load.from_paths([str(tmp_path / n) for n in policies["data"]], parse_duration=ann.parse_ttl)
    assert not loaded.errors and [p.name for p in loaded.policies] == ["long-pending"]


def test_http_clicks_open_their_port_and_read_the_signing_secret_from_a_file() -> None:
    objects = template("--set", "slack.clicks=http", "--set", "slack.httpPort=3000")
    [container] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = _parse(container["args"])
    assert args.slack_http_port == 3000 and args.slack_signing_secret_file.endswith("/signing-secret")
    assert "SLACK_APP_TOKEN" not in {e["name"] for e in container["env"]}
    assert {"name": "slack-http", "containerPort": 3000} in container["ports"]
    service = one(objects, "Service", "kube-idle-janitor")
    assert {"name": "slack-http", "port": 3000, "targetPort": "slack-http"} in service["spec"]["ports"]
    policy = one(objects, "NetworkPolicy", "kube-idle-janitor")
    assert {"protocol": "TCP", "port": "slack-http"} in policy["spec"]["ingress"][0]["ports"]


def test_monitoring_renders_the_rules_and_dashboard_of_manifests_monitoring() -> None:
    objects = template("--set", "monitoring.serviceMonitor.enabled=true",
                       "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true",
                       "--set", "monitoring.prometheusRule.labels.release=kps")
    shipped = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    rule = one(objects, "PrometheusRule")
    assert rule["spec"] == shipped["spec"] and rule["metadata"]["labels"]["release"] == "kps"
    monitors = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ServiceMonitor"}
    assert monitors == {o["metadata"]["name"]: o["spec"] for o in render(MONITORING) if o["kind"] == "ServiceMonitor"}
    dashboard = one(objects, "ConfigMap", "kube-idle-janitor-dashboard")
    shipped_dashboard = (MONITORING / "dashboards" / "kube-idle-janitor.json").read_text()
    shipped_dashboard = (MONITORING / "dashboards" / "kube-idle-janitor.json").read_text()
    assert dashboard["data"]["kube-idle-janitor.json"] == shipped_dashboard
