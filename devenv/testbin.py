"""Where the control-plane binaries come from: `testbin/ensure.sh`, built once per version set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENSURE = Path(__file__).resolve().parent / "testbin" / "ensure.sh"


def ensure_binaries() -> Path:
    """Build (or find in ~/.cache) kube-apiserver, controller-manager, scheduler, etcd and kwok.

    The script's progress goes to our stderr so a cold build (tens of minutes) is visibly alive.
    """
    result = subprocess.run(
        ["bash", str(ENSURE)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True
    )
    return Path(result.stdout.strip().splitlines()[-1])
