"""Where the control-plane binaries come from: `testbin/ensure.sh`, built once per version set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENSURE = Path(__file__).resolve().parent / "testbin" / "ensure.sh"


def cached_binaries() -> Path | None:
    """The directory of a complete build for the current version set, if there is one; never builds."""
    result = subprocess.run(["bash", str(ENSURE), "--cached"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, check=False)
    return Path(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 and result.stdout.strip() else None


def ensure_binaries() -> Path:
    """Build (or find in ~/.cache) kube-apiserver, controller-manager, scheduler, kubectl, etcd and kwok.

    The script's progress goes to our stderr so a cold build (tens of minutes) is visibly alive.
    """
    result = subprocess.run(
        ["bash", str(ENSURE)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True
    )
    return Path(result.stdout.strip().splitlines()[-1])
