"""Where helm comes from: `helm/ensure.sh`, built once per version from its Go module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENSURE = Path(__file__).resolve().parent / "helm" / "ensure.sh"


def cached_helm() -> Path | None:
    """The helm binary of a complete build, if there is one; never builds."""
    result = subprocess.run(["bash", str(ENSURE), "--cached"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, check=False)
    return Path(result.stdout.strip().splitlines()[-1]) / "helm" if result.returncode == 0 and result.stdout.strip() \
        else None


def ensure_helm() -> Path:
    """Build (or find in ~/.cache) helm; its progress goes to our stderr."""
    result = subprocess.run(["bash", str(ENSURE)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True)
    return Path(result.stdout.strip().splitlines()[-1]) / "helm"
