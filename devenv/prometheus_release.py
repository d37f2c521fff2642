"""Which Prometheus the sandbox runs: Debian's 2.x (the default) or 3.x built from its Go module.

Why two: labs run Prometheus 3, whose range selectors are left-open (a sample exactly on a
range's left edge, a subquery step there, or a last sample exactly `lookback_delta` old is no
longer seen). The janitor's evidence queries must read the same on both, so their tests run on
each; everything else keeps the 2.x that Debian installs.

Chosen per server (`PrometheusServer(release=...)`, `backfill(release=...)`) or for a whole run
with `JANITOR_PROMETHEUS=prom3` (e.g. `JANITOR_PROMETHEUS=prom3 python -m devenv up`). The 3.x
pair comes from `prometheus3/ensure.sh`, built once per version set into ~/.cache.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ENV = "JANITOR_PROMETHEUS"
ENSURE = Path(__file__).resolve().parent / "prometheus3" / "ensure.sh"
NAMES = ("prom2", "prom3")


@dataclass(frozen=True)
class Release:
    """A `prometheus` and `promtool` of one major version."""

    major: int
    prometheus: str
    promtool: str

    @property
    def name(self) -> str:
        return f"prom{self.major}"


DEBIAN = Release(2, "/usr/bin/prometheus", "/usr/bin/promtool")


def release(choice: Release | str | None = None) -> Release:
    """The release named by `choice` ("prom2"/"prom3", or "2"/"3"), else by $JANITOR_PROMETHEUS,
    else Debian's 2.x. Asking for 3.x builds it on first use (minutes) and finds it cached after."""
    if isinstance(choice, Release):
        return choice
    name = (choice or os.environ.get(ENV) or "prom2").strip().lower()
    name = name if name.startswith("prom") else f"prom{name}"
    if name == "prom2":
        return DEBIAN
    if name == "prom3":
        return prometheus3()
    raise ValueError(f"unknown Prometheus release {choice or os.environ.get(ENV)!r}: expected one of {NAMES}")


@functools.cache
def prometheus3() -> Release:
    """Prometheus 3 from `prometheus3/ensure.sh` (once per process: the script's cache check
    itself asks Go and both binaries for their versions). Its progress goes to our stderr, so a
    cold build is visibly alive."""
    done = subprocess.run(["bash", str(ENSURE)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True)
    out = Path(done.stdout.strip().splitlines()[-1])
    return Release(3, str(out / "prometheus"), str(out / "promtool"))


def installed(choice: str) -> Release | None:
    """The release named by `choice` ("prom2"/"prom3") if both its binaries are already here:
    Debian's installed, 3.x built into the cache. Never installs or builds, so a quick test can
    ask without waiting minutes."""
    name = choice.strip().lower()
    if name == "prom2":
        found = DEBIAN
    elif name == "prom3":
        done = subprocess.run(["bash", str(ENSURE), "--cached"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, check=False)
        if done.returncode != 0 or not done.stdout.strip():
            return None
        out = Path(done.stdout.strip().splitlines()[-1])
        found = Release(3, str(out / "prometheus"), str(out / "promtool"))
    else:
        raise ValueError(f"unknown Prometheus release {choice!r}: expected one of {NAMES}")
    return found if all(os.access(b, os.X_OK) for b in (found.prometheus, found.promtool)) else None
