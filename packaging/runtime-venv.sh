#!/bin/sh
# The janitor's runtime: a virtualenv at $1 with the janitor and exactly the packages of
# requirements.lock, and no pip, setuptools or build tools in it. The Dockerfile runs this, and
# tests/unit/test_packaging.py runs it too, so what the image holds is what the tests import.
#
#   sh packaging/runtime-venv.sh /opt/janitor [PYTHON]
#
# The janitor's version comes from git (setuptools-scm); a tree without .git (the image build)
# takes it from SETUPTOOLS_SCM_PRETEND_VERSION. Needs a package index (or PIP_FIND_LINKS).
set -eu
unset PYTHONPATH  # the target sees only what is installed in it, not a source tree on the path
target=$1
python=${2:-python3}
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=${PIP_NO_CACHE_DIR:-1}

# The build tools live in a throwaway venv; pip installs into the target from outside it.
"$python" -m venv "$build/tools"
"$build/tools/bin/pip" install -q setuptools==80.9.0 setuptools-scm==10.3.4
"$build/tools/bin/pip" wheel -q --no-deps --no-build-isolation -w "$build/wheel" "$src"
"$python" -m venv --without-pip "$target"
# --no-deps: exactly the lock. It leaves out what the janitor never imports (the lock's header
# names them), so `pip check` would list those; the import of every module below is the check.
"$build/tools/bin/pip" --python "$target/bin/python" install -q --no-deps -r "$src/requirements.lock"
"$build/tools/bin/pip" --python "$target/bin/python" install -q --no-deps "$build"/wheel/*.whl
# The kubernetes client's asyncio twin (kubernetes.aio, 68 MB with its bytecode) needs aiohttp,
# which the lock leaves out: it could not even be imported. The janitor uses the synchronous client.
site=$("$target/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$site/kubernetes/aio"
"$target/bin/python" - <<'PY'
import importlib, pkgutil, janitor
names = [m.name for m in pkgutil.walk_packages(janitor.__path__, "janitor.")]
for name in names:
    importlib.import_module(name)
print(f"runtime: janitor {janitor.__version__}, {len(names)} modules import")
PY
"$target/bin/janitor" --version >/dev/null
