"""The architecture of DESIGN.md holds: layers, and a pure core that never reads the clock.

Aspects covered:
- the import-linter contracts in pyproject.toml are kept (layers, no client library in the core,
  observe and act independent, node agent apart);
- no module of the pure core (decide/, policy/, annotations.py) reads the clock;
- the clock scanner itself finds each way of reading the clock (so the check above can fail).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE_CORE = [ROOT / "janitor" / "decide", ROOT / "janitor" / "policy", ROOT / "janitor" / "annotations.py"]
CLOCK_CALLS = {
    ("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today"),
    ("time", "time"), ("time", "time_ns"), ("time", "monotonic"), ("time", "localtime"),
    ("time", "gmtime"),
}


def clock_reads(source: str) -> list[int]:
    """Line numbers where `source` reads the clock (X.now(), time.time(), ...)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
            if (owner_name, node.func.attr) in CLOCK_CALLS:
                lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            if any(alias.name in {"time", "monotonic", "time_ns"} for alias in node.names):
                lines.append(node.lineno)
    return lines


def test_import_contracts_are_kept() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run(
        [lint, "--no-logo", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_pure_core_never_reads_the_clock() -> None:
    files = [p for base in PURE_CORE for p in ([base] if base.is_file() else base.rglob("*.py"))]
    assert files, "pure core modules not found"
    offenders = {str(f.relative_to(ROOT)): clock_reads(f.read_text()) for f in files}
    assert {f: lines for f, lines in offenders.items() if lines} == {}


@pytest.mark.parametrize(
    "snippet",
    [
        "import datetime\ndatetime.datetime.now(datetime.timezone.utc)",
        "from datetime import datetime\ndatetime.utcnow()",
        "import time\ntime.time()",
        "import time\ntime.monotonic()",
        "from time import time",
        "from datetime import date\ndate.today()",
    ],
    ids=["datetime.now", "utcnow", "time.time", "monotonic", "from-time-import", "date.today"],
)
def test_clock_scanner_finds_clock_reads(snippet: str) -> None:
    assert clock_reads(snippet)


def test_clock_scanner_accepts_time_arithmetic() -> None:
    assert clock_reads("import datetime\nnow + datetime.timedelta(hours=1)") == []
