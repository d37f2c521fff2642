"""What users install: the wheel and the image's runtime, built as the release builds them.

Aspects covered:
- the wheel holds the `janitor` package and its metadata only (no devenv/, tests/, bench/), with
  the Apache-2.0 license expression and file, the two console scripts (`janitor`,
  `kubectl-janitor`) and a version from git;
- the image's runtime (packaging/runtime-venv.sh, which the Dockerfile runs): every janitor module
  imports with exactly requirements.lock installed, `janitor --version` runs, and it holds no
  pip, setuptools, nor the dependencies' parts the janitor never imports (dateparser, aiohttp,
  the kubernetes client's asyncio API);
  its size is printed for the release notes;
- where docker can build (not on every CI machine), the image itself: its OCI labels, `janitor
  --version` in it, and no pip.

Both build from this tree with pip and the package index, as CI does (about 30 s).
"""

from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    [found] = out.glob("kube_idle_janitor-*.whl")
    return found


def test_the_wheel_holds_janitor_only_with_its_license_and_scripts(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        [meta_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(zf.read(meta_name))
        [entry_points] = [zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")]
    tops = {n.split("/", 1)[0] for n in names}
    dist_info = meta_name.split("/", 1)[0]
    assert tops == {"janitor", dist_info}, tops
    assert meta["License-Expression"] == "Apache-2.0"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "janitor = janitor.cli:main" in entry_points
    assert "kubectl-janitor = janitor.plugin.main:main" in entry_points
    assert meta["Version"] not in ("", "0.0.0+unknown"), "the version comes from git"


def test_the_image_runtime_imports_every_module_from_the_lock_without_pip(tmp_path: Path) -> None:
    target = tmp_path / "opt-janitor"
    built = subprocess.run(["sh", str(ROOT / "packaging" / "runtime-venv.sh"), str(target), sys.executable],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "modules import" in built.stdout
    version = subprocess.run([str(target / "bin" / "janitor"), "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("janitor "), version.stderr
    [site] = target.glob("lib/python3*/site-packages")
    present = {p.name.split("-")[0].lower() for p in site.iterdir()}
    for absent in ("pip", "setuptools", "setuptools_scm", "dateparser", "regex", "aiohttp", "yarl"):
        assert absent not in present, absent
    assert not (target / "bin" / "pip").exists()
    assert not (site / "kubernetes" / "aio").exists()  # the asyncio client, which needs aiohttp
    print(f"\nimage runtime /opt/janitor: {_du(target) / 2**20:.1f} MiB")


def _docker() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _docker(), reason="no image builder here (docker info fails); the runtime test above "
                                          "runs what the Dockerfile runs")
def test_the_image_builds_with_its_labels_and_no_pip() -> None:
    tag = "kube-idle-janitor:test-packaging"
    built = subprocess.run(["docker", "build", "--build-arg", "VERSION=0.0.0", "--build-arg", "REVISION=test",
                            "-t", tag, str(ROOT)], capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-3000:]
    labels = subprocess.run(["docker", "image", "inspect", tag, "--format", "{{json .Config.Labels}}"],
                            capture_output=True, text=True, timeout=60)
    assert '"org.opencontainers.image.version":"0.0.0"' in labels.stdout
    for probe in (["--version"], ["--help"]):
        assert subprocess.run(["docker", "run", "--rm", tag, *probe], capture_output=True, timeout=120).returncode == 0
    pip = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python3", tag, "-m", "pip", "--version"],
                         capture_output=True, timeout=120)
    assert pip.returncode != 0, "pip is in the image"
