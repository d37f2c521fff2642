"""What users install: the wheel and the image's runtime, built as the release builds them.

Aspects covered:
- the wheel holds the `janitor` package and its metadata only (no devenv/, tests/, bench/), with
  the Apache-2.0 license expression and file, the two console scripts (`janitor`,
  `kubectl-janitor`) and a version from git;
- the image's runtime (packaging/runtime-venv.sh, which the Dockerfile runs): every janitor module
  imports with exactly requirements.lock installed, `janitor --version` runs, and it holds no
  pip, setuptools, nor the dependencies' parts the janitor never imports (dateparser, aiohttp,
  the kubernetes client's asyncio API);
  its size is printed for the release notes.

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
