"""The release a commit prepares, and the checks a tag must pass before anything is published.

The git tag `vX.Y.Z` is the version's one source: setuptools-scm stamps the package with it, and
the release workflow (.github/workflows/release.yml) stamps the image, the chart and the krew
manifest. Everything written down that names a version must name the one being released, so
this refuses a release whose CHANGELOG.md, release notes, chart or manifests say otherwise.

    .venv/bin/python -m devenv.release check [--version X.Y.Z]   # the files agree
    .venv/bin/python -m devenv.release build --out dist [--version X.Y.Z]
        # every artifact but the image, as the release workflow builds them before it uploads:
        # wheel and sdist, the chart package, the krew archive and manifest, and SHA256SUMS
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
NOTES = ROOT / "docs" / "releases"
CHART = ROOT / "charts" / "kube-idle-janitor"
BASE = ROOT / "manifests" / "base"
_SECTION = re.compile(r"^## (\d+\.\d+\.\d+)\b", re.M)
SEMVER = re.compile(r"\d+\.\d+\.\d+")


def prepared_version(changelog: str | None = None) -> str:
    """The newest version CHANGELOG.md has a section for: the next release, or the last one."""
    text = CHANGELOG.read_text() if changelog is None else changelog
    found = _SECTION.search(text)
    if not found:
        raise ValueError("CHANGELOG.md has no '## X.Y.Z' section")
    return found.group(1)


def problems(version: str) -> list[str]:
    """Why `version` cannot be released from this tree; empty when it can."""
    found: list[str] = []
    if not SEMVER.fullmatch(version):
        return [f"{version!r} is not a version X.Y.Z"]
    if version not in _SECTION.findall(CHANGELOG.read_text()):
        found.append(f"CHANGELOG.md has no section '## {version}'")
    notes = NOTES / f"{version}.md"
    if not notes.exists():
        found.append(f"no release notes: {notes.relative_to(ROOT)}")
    else:
        text = notes.read_text()
        if not text.startswith(f"# kube-idle-janitor {version}\n"):
            found.append(f"{notes.relative_to(ROOT)} does not start with '# kube-idle-janitor {version}'")
        if "## Upgrading" not in text:
            found.append(f"{notes.relative_to(ROOT)} has no '## Upgrading' section")
    chart = CHART / "Chart.yaml"
    if chart.exists():
        meta = yaml.safe_load(chart.read_text())
        for key in ("version", "appVersion"):
            if str(meta.get(key)) != version:
                found.append(f"charts/kube-idle-janitor/Chart.yaml {key} is {meta.get(key)!r}, not {version!r}")
    for path in sorted(BASE.glob("*.yaml")):
        for image in re.findall(r"image: kube-idle-janitor:(\S+)", path.read_text()):
            if image != version:
                found.append(f"{path.relative_to(ROOT)} names image kube-idle-janitor:{image}")
    labels = re.findall(r'app.kubernetes.io/version: "?([^"\s]+)"?', (BASE / "kustomization.yaml").read_text())
    if labels != [version]:
        found.append(f"manifests/base/kustomization.yaml labels version {labels}, not {version!r}")
    return found


REPOSITORY = "https://github.com/kube-idle-janitor/kube-idle-janitor"
KREW = ROOT / "packaging" / "krew"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def krew_manifest(version: str, archive: Path) -> dict[str, object]:
    """krew's Plugin manifest: one archive for every platform, since the plugin is Python."""
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "janitor"},
        "spec": {
            "version": f"v{version}",
            "homepage": REPOSITORY,
            "shortDescription": "See and keep what kube-idle-janitor marked in your namespace",
            "description": "Lists the workloads kube-idle-janitor marked (idle GPUs, long Pending, expiring), why, "
                           "their deadline and how to keep them, and keeps one within the policy's cap. Needs only "
                           "view (edit to keep) in your namespace.",
            "caveats": "Needs Python 3.11 or newer as python3. The first run installs the plugin into "
                       "~/.cache/kubectl-janitor/ from the package index (pip).",
            "platforms": [{
                "selector": {"matchExpressions": [{"key": "os", "operator": "In", "values": ["linux", "darwin"]}]},
                "uri": f"{REPOSITORY}/releases/download/v{version}/{archive.name}",
                "sha256": _sha256(archive),
                "bin": "kubectl-janitor",
                "files": [{"from": "*", "to": "."}],
            }],
        },
    }


def build(version: str, out: Path, *, helm: str) -> list[Path]:
    """Every artifact but the image, stamped with `version`; refuses when the files disagree."""
    found = problems(version)
    if found:
        raise SystemExit("\n".join(f"release {version}: {p}" for p in found))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": version}
    for step in ([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
                 [helm, "package", str(CHART), "--version", version, "--app-version", version,
                  "--destination", str(out)]):
        done = subprocess.run(step, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            output = done.stdout[-3000:] + done.stderr[-3000:]
            raise SystemExit(f"release {version}: {' '.join(step[:3])} failed:\n{output}")
    [wheel] = out.glob(f"kube_idle_janitor-{version}-*.whl")
    archive = out / f"kubectl-janitor-{version}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(KREW / "kubectl-janitor", arcname="kubectl-janitor")
        tar.add(wheel, arcname=wheel.name)
        tar.add(ROOT / "LICENSE", arcname="LICENSE")
    manifest = out / "janitor.yaml"
    manifest.write_text(yaml.safe_dump(krew_manifest(version, archive), sort_keys=False))
    artifacts = sorted(p for p in out.iterdir() if p.is_file() and p.name != "SHA256SUMS")
    (out / "SHA256SUMS").write_text("".join(f"{_sha256(p)}  {p.name}\n" for p in artifacts))
    return artifacts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devenv.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="refuse a release whose files do not all name its version")
    check.add_argument("--version", help="X.Y.Z or vX.Y.Z (default: the newest CHANGELOG.md section)")
    make = sub.add_parser("build", help="build every artifact but the image into --out")
    make.add_argument("--version", help="X.Y.Z or vX.Y.Z (default: the newest CHANGELOG.md section)")
    make.add_argument("--out", type=Path, default=ROOT / "dist")
    make.add_argument("--helm", default="helm", help="the helm binary (default: helm on PATH)")
    args = parser.parse_args(argv)
    version = (args.version or prepared_version()).removeprefix("v")
    if args.command == "build":
        for path in build(version, args.out, helm=args.helm):
            print(path)
        return 0
    found = problems(version)
    for problem in found:
        print(f"release {version}: {problem}", file=sys.stderr)
    if not found:
        print(f"release {version}: CHANGELOG, release notes, chart and manifests agree")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
