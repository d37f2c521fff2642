"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, controller-manager, scheduler.

The binaries come from `devenv/testbin` (built from the k8s.io/kubernetes Go module). With the
controller-manager and scheduler running, the sandbox behaves like a cluster where it matters to
the janitor: Deployments make ReplicaSets and pods, garbage collection cascades, namespaces finish
deleting, the scheduler binds pods to nodes with free `nvidia.com/gpu`. RBAC is on; every client
authenticates with a bearer token from a static token file, which keeps the Python client simple.

`scale=True` is for thousands of nodes and tens of thousands of pods (`python -m devenv up
--scale`): more requests in flight on the apiserver, controllers with a client rate limit that
does not make adopting 30,000 pods take half an hour, and a node monitor grace period that fits
the longer node leases kwok then renews (see `devenv.nodes.kwok_component`).
"""

from __future__ import annotations

import json
import secrets
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from devenv import pki as pki_mod
from devenv.procs import Component, free_port

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
# Scale mode. The apiserver's defaults (400/200) are sized for a real multi-core control plane;
# the admin (populate, kwok) is exempt from priority and fairness anyway, the controllers are not.
# Namespace deletion deletes each kind's collection one object at a time unless given workers.
SCALE_APISERVER_FLAGS = ("--max-requests-inflight=1000", "--max-mutating-requests-inflight=500",
                         "--delete-collection-workers=4")
# Client rate limits of the controllers (defaults 20 qps / 30 burst for the controller-manager,
# 50 / 100 for the scheduler): adoption of populated pods and namespace deletion are one request
# per object. The grace period must outlast kwok's lease renewal (a quarter of its duration).
SCALE_CONTROLLER_FLAGS = ("--kube-api-qps=300", "--kube-api-burst=600", "--node-monitor-grace-period=180s",
                          "--concurrent-replicaset-syncs=10", "--concurrent-job-syncs=10",
                          "--concurrent-statefulset-syncs=10")
SCALE_SCHEDULER_FLAGS = ("--kube-api-qps=300", "--kube-api-burst=600")


@dataclass(frozen=True)
class Credential:
    """A static-token identity known to the apiserver."""

    user: str
    token: str
    groups: tuple[str, ...] = ()


def write_kubeconfig(path: Path, *, server: str, ca: Path, token: str, user: str) -> Path:
    """A kubeconfig with one cluster, one token user and one current context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sandbox", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": user}}],
        "current-context": "sandbox",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


@dataclass
class ControlPlane:
    bin_dir: Path
    work_dir: Path
    components: list[Component] = field(default_factory=list)
    api_port: int = 0
    admin: Credential = field(default_factory=lambda: Credential("admin", secrets.token_hex(16), ("system:masters",)))
    scale: bool = False

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def pki(self) -> pki_mod.Pki:
        return self._pki

    @property
    def admin_kubeconfig(self) -> Path:
        return self.work_dir / "admin.kubeconfig"

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self._pki.ca_cert))

    def api_get(self, path: str, *, token: str | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
        """GET on the apiserver with the admin token (or another); returns status and body."""
        req = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {token or self.admin.token}"}
        )
        try:
            with urllib.request.urlopen(req, context=self._ssl(), timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def start(self, *, timeout: float = 180.0) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        logs = self.work_dir / "logs"
        self._pki = pki_mod.create(self.work_dir / "pki", service_ip=SERVICE_IP)
        kcm = Credential("system:kube-controller-manager", secrets.token_hex(16))
        sched = Credential("system:kube-scheduler", secrets.token_hex(16))
        tokens = self.work_dir / "tokens.csv"
        tokens.write_text(
            "".join(
                f'{c.token},{c.user},uid-{c.user.replace(":", "-")},"{",".join(c.groups)}"\n'
                for c in (self.admin, kcm, sched)
            )
        )
        tokens.chmod(0o600)

        etcd_port, peer_port = free_port(), free_port()
        etcd = Component(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={self.work_dir / 'etcd'}",
                "--unsafe-no-fsync",  # test data: durability costs seconds per write on slow disks
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--log-level=warn",
            ],
            logs / "etcd.log",
        )
        self._start(etcd, lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"), 60)

        self.api_port = free_port()
        apiserver = Component(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                # The endpoint reconciler would publish this host's address for the `kubernetes`
                # Service; nothing in the sandbox needs it, and it rejects loopback addresses.
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={self._pki.serving_cert}",
                f"--tls-private-key-file={self._pki.serving_key}",
                f"--client-ca-file={self._pki.ca_cert}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self._pki.sa_public}",
                f"--service-account-signing-key-file={self._pki.sa_private}",
                "--authorization-mode=Node,RBAC",
                f"--token-auth-file={tokens}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *(SCALE_APISERVER_FLAGS if self.scale else ()),
            ],
            logs / "kube-apiserver.log",
        )
        self._start(apiserver, lambda: self.api_get("/readyz")[0] == 200, timeout)
        write_kubeconfig(
            self.admin_kubeconfig, server=self.server, ca=self._pki.ca_cert,
            token=self.admin.token, user="admin",
        )

        self._start_client_component(
            "kube-controller-manager", kcm,
            # Each controller acts as its own ServiceAccount, as kubeadm clusters do, so the
            # RBAC every controller runs under is the real bootstrap RBAC.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self._pki.sa_private}",
            f"--root-ca-file={self._pki.ca_cert}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--cluster-name=janitor-sandbox",
            *(SCALE_CONTROLLER_FLAGS if self.scale else ()),
        )
        self._start_client_component("kube-scheduler", sched, *(SCALE_SCHEDULER_FLAGS if self.scale else ()))

    def _start_client_component(self, name: str, cred: Credential, *flags: str) -> None:
        """Start the controller-manager or scheduler: a kubeconfig of its own, health on /healthz."""
        config = write_kubeconfig(
            self.work_dir / f"{name}.kubeconfig", server=self.server,
            ca=self._pki.ca_cert, token=cred.token, user=cred.user,
        )
        port = free_port()
        component = Component(
            name,
            [
                str(self.bin_dir / name),
                f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.work_dir / (name + '-certs')}",
                "--leader-elect=false",
                "--v=1",
                *flags,
            ],
            self.work_dir / "logs" / f"{name}.log",
        )
        self._start(component, lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", insecure=True), 120)

    def _start(self, component: Component, check: Callable[[], bool], timeout: float) -> None:
        component.start()
        self.components.append(component)
        component.wait_ready(check, timeout=timeout)

    def version(self) -> str:
        status, body = self.api_get("/version")
        return json.loads(body)["gitVersion"] if status == 200 else "unknown"

    def stop(self) -> None:
        """Stop in reverse start order: clients before the apiserver, the apiserver before etcd."""
        for component in reversed(self.components):
            component.stop()


def _http_ok(url: str, *, insecure: bool = False) -> bool:
    context = None
    if insecure:  # the controllers' self-signed serving certs; only /healthz is read
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=3, context=context) as resp:
        return bool(resp.status == 200)
