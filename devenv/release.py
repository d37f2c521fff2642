"""The release a commit prepares, and the checks a tag must pass before anything is published.

The git tag `vX.Y.Z` is the version's one source: setuptools-scm stamps the package with it, and
the release workflow (.github/workflows/release.yml) stamps the image, the chart and the krew
manifest. Everything written down that names a version must name the one being released, so
this refuses a release whose CHANGELOG.md, release notes, chart or manifests say otherwise.

    .venv/bin/python -m devenv.release check [--version X.Y.Z]   # what CI runs, without a tag
"""

from __future__ import annotations

import argparse
import re
import sys
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devenv.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="refuse a release whose files do not all name its version")
    check.add_argument("--version", help="X.Y.Z or vX.Y.Z (default: the newest CHANGELOG.md section)")
    args = parser.parse_args(argv)
    version = (args.version or prepared_version()).removeprefix("v")
    found = problems(version)
    for problem in found:
        print(f"release {version}: {problem}", file=sys.stderr)
    if not found:
        print(f"release {version}: CHANGELOG, release notes, chart and manifests agree")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
