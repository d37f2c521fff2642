"""`python -m devenv populate`: a big cluster's worth of nodes and workloads in a running sandbox.

N kwok GPU nodes `scale-node-00001`... and, on each, a realistic mix: GPU pods of a training Job,
of a Deployment (through its ReplicaSet) and of a Kubeflow Notebook (through its StatefulSet),
bare GPU pods, CPU pods of a Deployment and bare ones, a results ConfigMap and some Jobs with a
`janitor/ttl` a year out (nothing expires), spread over namespaces `team-NN`.

Fast because nothing waits on a controller or the scheduler: pods are created already bound
(`spec.nodeName`), by many connections at once, *before* their owners, which then adopt them (a
ReplicaSet, Job or StatefulSet that found no pods would make its own through the scheduler, and
delete ours as surplus once it saw them; a Deployment adopts the ReplicaSet with its template).
So the real controllers run and are satisfied with what they find. `--delete` removes every
namespace and node populate labelled (whatever run made them).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import requests
import yaml

from devenv.nodes import STARTED_AT, NodeSpec, node_manifest

POPULATED = "devenv.janitor.dev/populated"  # label on everything populate makes (value "true")
NODE_PREFIX = "scale-node-"
TTL = "52w"  # janitor/ttl: a year from creation, so a janitor run never expires anything here
Manifest = dict[str, Any]

# API path (with {ns} for namespaced kinds) of each kind populate creates.
PATHS = {
    "Namespace": "/api/v1/namespaces", "Node": "/api/v1/nodes", "Pod": "/api/v1/namespaces/{ns}/pods",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps", "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments", "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "Notebook": "/apis/kubeflow.org/v1/namespaces/{ns}/notebooks",
}


@dataclasses.dataclass
class NodePlan:
    """Everything populate creates for one node, in the order it must be created."""

    node: Manifest
    namespace: str
    pods: list[Manifest]  # bound to the node, no owners yet
    config_maps: list[Manifest]
    notebooks: list[Manifest]  # owners of the StatefulSets (no controller acts on them)
    adopters: list[Manifest]  # ReplicaSets, Jobs, StatefulSets: adopt the pods
    deployments: list[Manifest]  # adopt the ReplicaSets

    def objects(self) -> int:
        return 1 + sum(map(len, (self.pods, self.config_maps, self.notebooks, self.adopters, self.deployments)))


def namespace_manifest(index: int) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{index:02d}",
                                                                  "labels": {POPULATED: "true"}}}


def _object(api_version: str, kind: str, name: str, ns: str, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, **fields: Any) -> Manifest:
    """A namespaced manifest with the populate label."""
    meta: Manifest = {"name": name, "namespace": ns, "labels": {POPULATED: "true", **(labels or {})},
                      **({"annotations": dict(annotations)} if annotations else {})}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **fields}


def _container(name: str, cpu: str, gpus: int) -> Manifest:
    limits = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"name": name, "image": "registry.example/research:latest",
            "resources": {"requests": {"cpu": cpu, "memory": "4Gi"}, **limits}}


def _pod_spec(container: Manifest, restart: str = "Always", **extra: Any) -> Manifest:
    # No ServiceAccount token: a projected volume per pod is a third of its size and nothing here reads it.
    return {"containers": [container], "restartPolicy": restart, "automountServiceAccountToken": False, **extra}


def _template(labels: dict[str, str], spec: Manifest) -> Manifest:
    return {"metadata": {"labels": labels}, "spec": spec}


def _hash(text: str) -> str:
    """A stand-in for the deployment controller's pod-template-hash (only its shape matters)."""
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def node_plan(index: int, *, pods_per_node: int = 20, gpus_per_node: int = 8, namespaces: int = 50,
              now: datetime.datetime | None = None) -> NodePlan:
    """The objects of node `index` (1-based). Deterministic for a given `now` (pod start times).

    GPUs: a Job of two pods with a quarter of the node's GPUs each, a Notebook's pod and a
    Deployment's pod with one each, bare one-GPU pods for the rest; then CPU pods (up to four of a
    Deployment, the rest bare) until the node has `pods_per_node`. A workload whose pods do not
    all fit is left out whole: its controller would make the missing ones through the scheduler.
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    node, ns = f"{NODE_PREFIX}{index:05d}", f"team-{1 + (index - 1) % namespaces:02d}"
    owner = {"janitor/owner": f"user{index % 7}@{ns}.lab.example"}
    results = _object("v1", "ConfigMap", f"results-{index}", ns, annotations={**owner, "janitor/ttl": TTL},
                      data={"summary": f"node {index}"})
    plan = NodePlan(node_manifest(NodeSpec(node, gpus=gpus_per_node, cpu=128, memory="2Ti")), ns, [], [results],
                    [], [], [])
    plan.node["metadata"]["labels"][POPULATED] = "true"

    def room() -> int:
        return pods_per_node - len(plan.pods)

    def pod(name: str, labels: dict[str, str], spec: Manifest) -> None:
        hours = 1 + (index * 7 + len(plan.pods) * 5) % 48  # running for 1..48 hours
        started = (now - datetime.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
        plan.pods.append(_object("v1", "Pod", name, ns, labels, {**owner, STARTED_AT: started},
                                 spec={**spec, "nodeName": node}))

    gpus = gpus_per_node
    share = gpus_per_node // 4
    if share and room() >= 2:  # a training Job with two workers
        app = {"app": f"train-{index}"}
        spec = _pod_spec(_container("trainer", "8", share), restart="Never")
        for k in range(2):
            pod(f"train-{index}-{k}", app, spec)
        ttl = {"janitor/ttl": TTL} if index % 2 == 0 else {}
        plan.adopters.append(_object("batch/v1", "Job", f"train-{index}", ns, app, {**owner, **ttl}, spec={
            "parallelism": 2, "completions": 2, "backoffLimit": 0, "manualSelector": True,
            "selector": {"matchLabels": app}, "template": _template(app, spec)}))
        gpus -= 2 * share
    if gpus and room():  # a Kubeflow Notebook -> StatefulSet -> pod
        name, app = f"nb-{index}", {"app": f"nb-{index}"}
        spec = _pod_spec(_container("notebook", "4", 1))
        identity = {"statefulset.kubernetes.io/pod-name": f"{name}-0", "apps.kubernetes.io/pod-index": "0"}
        pod(f"{name}-0", {**app, **identity}, {**spec, "hostname": f"{name}-0", "subdomain": name})
        plan.notebooks.append(_object("kubeflow.org/v1", "Notebook", name, ns, None, owner,
                                      spec={"template": _template(app, spec)}))
        # OnDelete: the pod's template revision is not the set's, which must not make it replace the pod.
        plan.adopters.append(_object("apps/v1", "StatefulSet", name, ns, app, owner, spec={
            "replicas": 1, "serviceName": name, "selector": {"matchLabels": app}, "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"}, "template": _template(app, spec)}))
        gpus -= 1
    if gpus and room():  # a model server: Deployment -> ReplicaSet -> pod
        _deployment(plan, f"serve-{index}", _container("server", "4", 1), 1, owner, pod)
        gpus -= 1
    for k in range(min(gpus, room())):  # bare GPU pods: someone's interactive session
        pod(f"dev-{index}-{k}", {"app": f"dev-{index}-{k}"}, _pod_spec(_container("shell", "2", 1)))
    if room():
        _deployment(plan, f"web-{index}", _container("web", "1", 0), min(4, room()), owner, pod)
    for k in range(room()):  # bare CPU pods
        pod(f"batch-{index}-{k}", {"app": f"batch-{index}"}, _pod_spec(_container("worker", "1", 0)))
    return plan


def _deployment(plan: NodePlan, name: str, container: Manifest, replicas: int, owner: dict[str, str],
                pod: Callable[[str, dict[str, str], Manifest], None]) -> None:
    """A Deployment, its ReplicaSet (template hash label) and its pods, named as the controllers would."""
    app = {"app": name}
    spec = _pod_spec(container)
    template_hash = _hash(f"{name}/{spec}")
    hashed = {**app, "pod-template-hash": template_hash}
    rs = f"{name}-{template_hash}"
    for k in range(replicas):
        pod(f"{rs}-{_hash(f'{rs}/{k}')[:5]}", hashed, spec)
    plan.adopters.append(_object("apps/v1", "ReplicaSet", rs, plan.namespace, hashed, owner, spec={
        "replicas": replicas, "selector": {"matchLabels": hashed}, "template": _template(hashed, spec)}))
    plan.deployments.append(_object("apps/v1", "Deployment", name, plan.namespace, app, owner, spec={
        "replicas": replicas, "selector": {"matchLabels": app}, "template": _template(app, spec)}))


def path_of(manifest: Manifest) -> str:
    """Where to POST a manifest."""
    return PATHS[manifest["kind"]].format(ns=manifest["metadata"].get("namespace", ""))


# -- talking to the apiserver ----------------------------------------------------------------------
class Api:
    """A requests session per thread against the sandbox's apiserver (bearer token from its kubeconfig)."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        self.server = config["clusters"][0]["cluster"]["server"]
        self.ca = config["clusters"][0]["cluster"]["certificate-authority"]
        self.token = config["users"][0]["user"]["token"]
        self._local = threading.local()

    def session(self) -> requests.Session:
        if (session := getattr(self._local, "session", None)) is None:
            session = self._local.session = requests.Session()
            session.trust_env = False  # else REQUESTS_CA_BUNDLE or a proxy from the environment wins
            session.verify, session.headers["Authorization"] = self.ca, f"Bearer {self.token}"
        return session

    def request(self, method: str, path: str, body: Manifest | None = None, tries: int = 6,
                **kwargs: Any) -> requests.Response:
        """One call, retried on 429, 5xx and connection errors (the apiserver under load)."""
        for attempt in range(tries):
            try:
                resp = self.session().request(method, self.server + path, json=body, timeout=120, **kwargs)
            except requests.RequestException:  # refused, reset, cut off mid-answer, timed out
                if attempt == tries - 1:
                    raise
            else:
                if resp.status_code != 429 and resp.status_code < 500:
                    return resp
            time.sleep(min(0.2 * 2 ** attempt, 5.0))
        return resp


class Progress:
    """Counts done/existing/failed objects and prints a rate line to stderr now and then."""

    def __init__(self, what: str, total: int, every: float = 2.0) -> None:
        self.what, self.total, self.every = what, total, every
        self.done = self.existed = self.failed = 0
        self.errors: list[str] = []
        self.began = self._last = time.monotonic()
        self.ended: float | None = None
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.began

    def count(self, status: int, text: str) -> None:
        with self._lock:
            if status < 300:
                self.done += 1
            elif status == 409:
                self.existed += 1
            else:
                self.failed += 1
                self.errors = [*self.errors, f"HTTP {status}: {text[:300]}"][:5]
            if time.monotonic() - self._last >= self.every:
                self._last = time.monotonic()
                self.report()

    def report(self, final: bool = False) -> None:
        if final:
            self.ended = time.monotonic()
        n, elapsed = self.done + self.existed + self.failed, self.elapsed()
        print(f"{self.what}: {n}/{self.total} in {elapsed:.0f}s ({n / max(elapsed, 1e-9):.0f}/s)"
              f"{f', {self.existed} existed' if self.existed else ''}{f', {self.failed} FAILED' if self.failed else ''}"
              f"{' done' if final else ''}", file=sys.stderr, flush=True)


def for_each(what: str, items: Iterable[Any], total: int, workers: int, call: Callable[[Any], tuple[int, str]]
             ) -> Progress:
    """`call` (returning HTTP status and text) on every item with `workers` threads, counted."""
    progress = Progress(what, total)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for status, text in pool.map(call, items):
            progress.count(status, text)
    progress.report(final=True)
    return progress


def create_all(api: Api, what: str, manifests: Iterable[Manifest], total: int, workers: int,
               on_created: Callable[[Manifest, Manifest], None] | None = None) -> Progress:
    """POST every manifest with `workers` connections; 409 (exists) counts as done for a re-run."""
    def create(manifest: Manifest) -> tuple[int, str]:
        resp = api.request("POST", path_of(manifest), manifest)
        if on_created is not None and resp.status_code < 300:
            on_created(manifest, resp.json())
        return resp.status_code, resp.text if resp.status_code >= 300 else ""

    return for_each(what, manifests, total, workers, create)


# -- the command -------------------------------------------------------------------------------------
def _owned_by(owner: Manifest, uid: str) -> Manifest:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"], "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def _wait(what: str, done: Callable[[], bool], timeout: float, every: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout:.0f}s")
        time.sleep(every)


def _ready(api: Api, names: set[str]) -> bool:
    """Whether kwok made all of `names` Ready (it plays no pod of a node it has not taken over)."""
    ready = {n["metadata"]["name"] for n in list_metadata(api, "/api/v1/nodes", full=True)
             if any(c == {**c, "type": "Ready", "status": "True"} for c in n["status"].get("conditions") or [])}
    print(f"nodes Ready: {len(names & ready)}/{len(names)}", file=sys.stderr, flush=True)
    return names <= ready


def populate(api: Api, *, nodes: int, first: int = 1, pods_per_node: int = 20, gpus_per_node: int = 8,
             namespaces: int = 50, workers: int = 16, settle: float = 5.0) -> dict[str, Any]:
    """Create the nodes and workloads of `node_plan(first .. first+nodes-1)`; a summary of what it took."""
    began = time.monotonic()
    now = datetime.datetime.now(datetime.timezone.utc)
    plans = [node_plan(i, pods_per_node=pods_per_node, gpus_per_node=gpus_per_node, namespaces=namespaces, now=now)
             for i in range(first, first + nodes)]
    used = sorted({p.namespace for p in plans})
    phases: dict[str, Progress] = {}
    phases["namespaces"] = create_all(api, "namespaces", (namespace_manifest(int(ns.split("-")[1])) for ns in used),
                                      len(used), workers)
    for path in (f"/api/v1/namespaces/{ns}/serviceaccounts/default" for ns in used):  # else pods are refused
        _wait(path, partial(lambda path: api.request("GET", path).status_code == 200, path), 120, 0.5)
    phases["nodes"] = create_all(api, "nodes", (p.node for p in plans), len(plans), workers)
    _wait("nodes Ready", lambda: _ready(api, {p.node["metadata"]["name"] for p in plans}), 900, 3)
    # Node by node, so the exporters fill nodes up as they go rather than all at the end.
    objects = [m for p in plans for m in (*p.pods, *p.config_maps)]
    phases["pods"] = create_all(api, "pods and configmaps", objects, len(objects), workers)
    time.sleep(settle)  # the controllers' informers see every pod before any owner can look for them
    uids: dict[tuple[str, str], str] = {}

    def remember(manifest: Manifest, created: Manifest) -> None:
        uids[(manifest["metadata"]["namespace"], manifest["metadata"]["name"])] = created["metadata"]["uid"]

    notebooks = [n for p in plans for n in p.notebooks]
    phases["notebooks"] = create_all(api, "notebooks", notebooks, len(notebooks), workers, on_created=remember)
    for notebook in (n for n in notebooks if (n["metadata"]["namespace"], n["metadata"]["name"]) not in uids):
        resp = api.request("GET", f"{path_of(notebook)}/{notebook['metadata']['name']}")  # it existed: a re-run
        if resp.status_code == 200:
            remember(notebook, resp.json())
    adopters = []
    for plan in plans:
        for owner in plan.adopters:
            key = (owner["metadata"]["namespace"], owner["metadata"]["name"])
            if owner["kind"] == "StatefulSet" and key in uids:
                notebook = next(n for n in plan.notebooks if n["metadata"]["name"] == key[1])
                refs = [_owned_by(notebook, uids[key])]
                owner = {**owner, "metadata": {**owner["metadata"], "ownerReferences": refs}}
            adopters.append(owner)
    phases["owners"] = create_all(api, "replicasets, jobs, statefulsets", adopters, len(adopters), workers)
    deployments = [d for p in plans for d in p.deployments]
    phases["deployments"] = create_all(api, "deployments", deployments, len(deployments), workers)
    elapsed, total = time.monotonic() - began, sum(p.done + p.existed for p in phases.values())
    return {"nodes": nodes, "pods": sum(len(p.pods) for p in plans), "objects": total,
            "failed": sum(p.failed for p in phases.values()), "seconds": round(elapsed, 1),
            "objects_per_second": round(total / elapsed, 1),
            "phases": {name: {"seconds": round(p.elapsed(), 1), "done": p.done, "existed": p.existed,
                              "failed": p.failed, "errors": p.errors} for name, p in phases.items()}}


_METADATA = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}


def list_metadata(api: Api, path: str, selector: str = f"{POPULATED}=true", full: bool = False) -> list[Manifest]:
    """Metadata (`full`: whole objects) of every object at `path` with the populate label, paged."""
    items: list[Manifest] = []
    token = ""
    while True:
        params = {"labelSelector": selector, "limit": "1000", **({"continue": token} if token else {})}
        resp = api.request("GET", path, params=params, headers={} if full else _METADATA)
        resp.raise_for_status()
        page = resp.json()
        items.extend(page.get("items") or [])
        if not (token := page["metadata"].get("continue") or ""):
            return items


def check_pods(api: Api) -> dict[str, int]:
    """How the controllers took the populated pods: adopted (owned) or not, and pods they made
    themselves (no start-time annotation: that only populate writes) in populated namespaces."""
    namespaces = {n["metadata"]["name"] for n in list_metadata(api, "/api/v1/namespaces")}
    ours = [p["metadata"] for p in list_metadata(api, "/api/v1/pods", selector="")
            if p["metadata"]["namespace"] in namespaces]
    planted = [m for m in ours if STARTED_AT in (m.get("annotations") or {})]
    owned = sum(1 for m in planted if any(o.get("controller") for o in m.get("ownerReferences") or []))
    return {"populated_pods": len(planted), "owned": owned, "made_by_controllers": len(ours) - len(planted)}


def delete(api: Api, workers: int = 16, timeout: float = 1800.0) -> dict[str, Any]:
    """Delete every populated namespace and node, and wait until they are gone.

    Namespaces first: once Terminating they take no new pods, so no controller replaces the pods
    deleted next. Those go with no grace period: a graceful deletion waits for kwok to play it
    (tens per second), and a pod whose node is deleted first is left to the pod GC (about ten per
    second). Nodes go last, once their namespaces and so their pods are gone.
    """
    began = time.monotonic()
    namespaces = [n["metadata"]["name"] for n in list_metadata(api, "/api/v1/namespaces")]
    nodes = [n["metadata"]["name"] for n in list_metadata(api, "/api/v1/nodes")]

    def remove(path: str) -> tuple[int, str]:
        try:
            resp = api.request("DELETE", path, tries=2)
        except requests.RequestException:  # a collection outlasting the request timeout: it goes on
            return 200, ""
        return 200 if resp.status_code in (404, 504) else resp.status_code, resp.text

    def remove_all(what: str, paths: list[str]) -> None:
        for_each(what, paths, len(paths), workers, remove)

    remove_all("deleting namespaces", [f"/api/v1/namespaces/{n}" for n in namespaces])
    remove_all("deleting the pods of each namespace", [f"/api/v1/namespaces/{n}/pods?gracePeriodSeconds=0"
                                                        for n in namespaces])

    def gone() -> bool:
        left = len(list_metadata(api, "/api/v1/namespaces"))
        print(f"{left} namespaces still terminating ({time.monotonic() - began:.0f}s)", file=sys.stderr, flush=True)
        return not left

    _wait("namespaces deleted", gone, timeout, 5)
    remove_all("deleting nodes", [f"/api/v1/nodes/{n}" for n in nodes])
    return {"namespaces": len(namespaces), "nodes": len(nodes), "seconds": round(time.monotonic() - began, 1)}
