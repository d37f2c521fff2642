"""The pass-through proxy the benchmarks read the janitor's requests and bytes through: one in front
of a sandbox's apiserver, with its TLS from the sandbox's own keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def in_front_of(kubeconfig: Path) -> Any:
    """A FaultProxy (not started) in front of the apiserver `kubeconfig` names."""
    import yaml

    from devenv.faults import FaultProxy, ProxyTls
    from devenv.pki import Pki

    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    keys = kubeconfig.parent / "pki"
    pki = Pki(keys / "ca.crt", keys / "ca.key", keys / "apiserver.crt", keys / "apiserver.key",
              keys / "sa.pub", keys / "sa.key")
    return FaultProxy(server, tls=ProxyTls.from_pki(pki))
