"""A release, rehearsed: every artifact the release workflow uploads, built here from this tree.

Aspects covered:
- `python -m devenv.release check` refuses a version that CHANGELOG.md, the release notes (which
  must name it and have upgrade steps), the chart or the manifests do not name, and accepts the
  version the tree prepares (the newest CHANGELOG section);
- `python -m devenv.release build` (what .github/workflows/release.yml runs before uploading)
  gives the wheel and sdist at that version, the chart package with that version and
  appVersion, the krew archive (the plugin's launcher, the wheel, the license) with a manifest
  whose sha256 is the archive's, and SHA256SUMS of them all;
- krew's launcher installs the plugin from the wheel it ships on first use, into the cache
  directory, and runs it (`kubectl janitor --help`); a second run reuses that install;
- the workflow runs exactly those two commands, and pushes the image by digest with the labels.
"""

from __future__ import annotations

import email
import hashlib
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from devenv import release
from devenv.helm import cached_helm

ROOT = Path(__file__).parents[2]
HELM = cached_helm()
VERSION = release.prepared_version()


def test_check_accepts_the_prepared_version_and_refuses_others() -> None:
    assert release.problems(VERSION) == []
    major, minor, patch = (int(x) for x in VERSION.split("."))
    other = f"{major}.{minor}.{patch + 1}"
    found = release.problems(other)
    assert f"CHANGELOG.md has no section '## {other}'" in found
    assert f"no release notes: docs/releases/{other}.md" in found
    assert any("Chart.yaml version" in p for p in found) and any("names image kube-idle-janitor:" in p for p in found)
    assert release.problems("latest") == ["'latest' is not a version X.Y.Z"]
    assert subprocess.run([sys.executable, "-m", "devenv.release", "check", "--version", f"v{other}"], cwd=ROOT,
                          capture_output=True, timeout=60).returncode == 1


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if HELM is None and os.environ.get("CI") != "true":
        pytest.skip("helm not built yet: bash devenv/helm/ensure.sh")
    assert HELM is not None, "helm is not built: bash devenv/helm/ensure.sh (devenv/install.sh does)"
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "devenv.release", "build", "--out", str(out), "--helm", str(HELM)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_build_gives_every_artifact_at_the_version(dist: Path) -> None:
    names = sorted(p.name for p in dist.iterdir())
    assert names == sorted(["SHA256SUMS", "janitor.yaml", f"kube-idle-janitor-{VERSION}.tgz",
                            f"kube_idle_janitor-{VERSION}-py3-none-any.whl", f"kube_idle_janitor-{VERSION}.tar.gz",
                            f"kubectl-janitor-{VERSION}.tar.gz"])
    with zipfile.ZipFile(dist / f"kube_idle_janitor-{VERSION}-py3-none-any.whl") as zf:
        [meta] = [n for n in zf.namelist() if n.endswith("METADATA")]
        assert email.message_from_bytes(zf.read(meta))["Version"] == VERSION
    with tarfile.open(dist / f"kube-idle-janitor-{VERSION}.tgz") as chart:
        meta = yaml.safe_load(chart.extractfile("kube-idle-janitor/Chart.yaml").read())  # type: ignore[union-attr]
        assert (meta["version"], meta["appVersion"]) == (VERSION, VERSION)
        assert "kube-idle-janitor/values.schema.json" in chart.getnames()
    sums = dict(reversed(line.split("  ")) for line in (dist / "SHA256SUMS").read_text().splitlines())
    for name, digest in sums.items():
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest, name
    assert set(sums) == set(names) - {"SHA256SUMS"}


def test_the_krew_manifest_points_at_the_archive_and_its_launcher_runs_the_plugin(dist: Path, tmp_path: Path) -> None:
    archive = dist / f"kubectl-janitor-{VERSION}.tar.gz"
    manifest = yaml.safe_load((dist / "janitor.yaml").read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "janitor"
    assert manifest["spec"]["version"] == f"v{VERSION}"
    [platform] = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"].endswith(f"/releases/download/v{VERSION}/{archive.name}")
    installed = tmp_path / "krew-store"
    with tarfile.open(archive) as tar:
        tar.extractall(installed, filter="data")
    assert (installed / "LICENSE").exists()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "KUBECTL_JANITOR_PYTHON": sys.executable}
    first = subprocess.run([str(installed / platform["bin"]), "--help"], env=env, capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 0, first.stderr
    assert "status" in first.stdout and "first use, installing" in first.stderr
    again = subprocess.run([str(installed / platform["bin"]), "--help"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and "installing" not in again.stderr
    assert (tmp_path / "cache" / "kubectl-janitor" / VERSION / ".complete").exists()


def test_the_workflow_builds_what_ci_rehearses_and_pushes_the_image_by_digest() -> None:
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert "python -m devenv.release check --version" in text and "python -m devenv.release build --version" in text
    assert "steps.image.outputs.digest" in text and "REVISION=${{ github.sha }}" in text
    assert "--notes-file docs/releases/" in text and "helm push" in text
