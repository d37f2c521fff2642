"""Benchmark: one cycle's `plan()` on realistic observations of 5,000, 20,000 and 50,000 pods.

Run on purpose (`.venv/bin/python bench/plan_scale.py`), never from the tests. Deciding is pure
and runs once per cycle on everything the janitor read, so its cost must grow linearly with the
cluster: this prints the CPU time of one plan at each size (best of 3, each begun after a full
collection, once the observation is built; CPU time, since other work on a shared machine
distorts wall time), the microseconds per pod, and the ratio of the largest size to the
smallest, so a claim about 50,000 pods rests on a measurement made in one run on this machine. A
ratio near the ratio of the sizes (10 for 50k/5k) is linear; more is something quadratic, or the
garbage collector.

The collector gets its own columns, because it is not deciding's work yet is paid inside it: a
plan's findings, judgements and reasons (about 6 live objects a pod) are enough for CPython's
collector to walk the whole heap once, observation included, at 20,000 pods and more, and not at
5,000. `gc s` is the time spent in the collector during the plan, `full` its full collections,
`w/o gc` the rest. `--freeze` moves the observation out of the collector's sight first
(`gc.freeze()`), as a daemon can right after its read.

Every size has the same shape, drawn from a seeded generator: ~50 namespaces (some labelled for
the idle-CPU policy, some with a Kubeflow-style owner, one opted out, kube-system with DaemonSet
pods), one node per 100 pods in three pools (A100s, tainted H100s, CPU nodes; a few cordoned, one
NotReady), and workloads of 1-8 pods owned by Deployments (through ReplicaSets), Jobs,
StatefulSets and DaemonSets, or bare pods. Pods are GPU-idle, busy, young, Pending (some could
never fit), crash looping or stuck Terminating; every running pod has CPU evidence and every
running GPU pod a series per GPU. Some workloads carry a warned mark past its deadline, some Jobs
and ConfigMaps a `janitor/ttl` (expired, not yet, malformed). The policies are the examples in
policies/, made to enforce in every namespace. The run checks that the plan at each size has
findings of every trigger, lifecycle reclaims and actions, so it measures real work.

By default 3 workloads in 4 hold GPUs, asking for some 35 times the GPUs the nodes have: the
costliest case, since every running GPU pod is judged on both signals. With `--gpu-share 0.02`
the running pods ask for about the GPUs the nodes have. With `--ttl-share 1` every object and pod
also carries a `janitor/ttl` a year out (as `devenv populate` writes them: nothing expires), the
TTL-heavy case, where the expiry trigger judges every object every cycle. `--profile N` prints the hottest
functions of one plan at N pods (cProfile) instead.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import datetime
import gc
import pickle
import pstats
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from janitor import annotations as ann  # noqa: E402
from janitor.decide import evidence as ev  # noqa: E402
from janitor.decide import model as m  # noqa: E402
from janitor.decide import usage  # noqa: E402
from janitor.decide.lifecycle import Step  # noqa: E402
from janitor.decide.plan import CyclePlan, PlanSettings, plan  # noqa: E402
from janitor.decide.rails import Rails  # noqa: E402
from janitor.policy.load import from_paths  # noqa: E402
from janitor.policy.model import IdleCpu, IdleGpu, Mode, Namespaces, Policy  # noqa: E402

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
M, H, DAY = datetime.timedelta(minutes=1), datetime.timedelta(hours=1), datetime.timedelta(days=1)
SIZES = (5_000, 20_000, 50_000)
NAMESPACES = 50
SCRAPE = datetime.timedelta(seconds=15)
GOOD = ev.Quality(SCRAPE, SCRAPE)
GAPPY = ev.Quality(SCRAPE, 30 * M)
API = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
       "Job": "batch/v1", "Pod": "v1", "ConfigMap": "v1", "Namespace": "v1"}
KINDS = ("Deployment",) * 8 + ("Job",) * 5 + ("StatefulSet",) * 3 + ("Pod",) * 3 + ("DaemonSet",)
STORIES = ("idle",) * 6 + ("busy",) * 9 + ("young", "pending", "pending", "never-fits", "crash-loop",
                                            "crash-loop", "terminating", "mixed")
GPU_TOLERATION = ("nvidia.com/gpu", "Exists", "", "NoSchedule")
GPU_SHARE = 0.75  # of workloads holding 1-8 GPUs a pod: more than the nodes have, the costliest case to judge


def load_policies() -> tuple[Policy, ...]:
    """The example policies, enforcing in every namespace but kube-*."""
    loaded = from_paths([ROOT / "policies"])
    if loaded.errors:
        raise SystemExit("\n".join(str(e) for e in loaded.errors))
    return tuple(dataclasses.replace(p, mode=Mode.ENFORCE, match=dataclasses.replace(
        p.match, namespaces=Namespaces(("*",), p.match.namespaces.exclude))) for p in loaded.policies)


class Builder:
    """One observation of `pods` pods, drawn from a seeded generator so every run sees the same one."""

    def __init__(self, pods: int, policies: tuple[Policy, ...], seed: int = 7, gpu_share: float = GPU_SHARE,
                 ttl_share: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.ttl_rng = random.Random(seed + 1)  # its own draws: the shape at --ttl-share 0 stays as it was
        self.ttl_share = ttl_share
        self.target = pods
        self.gpu_share = gpu_share
        self.policies = policies
        self.serial = 0
        self.objects: list[m.ObjectView] = []
        self.pods: list[m.PodView] = []
        self.gpu_peaks: dict[ev.PodKey, tuple[float, ...]] = {}
        self.cpu_peaks: dict[ev.PodKey, float] = {}
        self.gappy: set[ev.PodKey] = set()
        self.namespaces = self._namespaces()
        self.nodes = self._nodes(max(50, pods // 100))

    def ttl(self, notes: dict[str, str]) -> dict[str, str]:
        """`notes` with a janitor/ttl a year out, for `--ttl-share` of the objects and pods."""
        if self.ttl_share and ann.TTL not in notes and self.ttl_rng.random() < self.ttl_share:
            return notes | {ann.TTL: "52w"}
        return notes

    def uid(self, what: str) -> str:
        self.serial += 1
        return f"{what}-{self.serial:08d}"

    def _namespaces(self) -> dict[str, m.NamespaceView]:
        out = {}
        for i in range(NAMESPACES):
            name = f"team-{i:02d}"
            labels = {"example.com/tier": "interactive"} if i % 3 == 0 else {}
            notes = {"owner": f"lead{i}@lab.example"} if i % 4 == 0 else {}
            if i == 7:
                notes[ann.OPT_OUT] = "true"
            if i % 10 == 1:
                notes[ann.TIME_ZONE] = "Europe/Berlin"
            out[name] = m.NamespaceView(name, labels, notes)
        out["kube-system"] = m.NamespaceView("kube-system")
        return out

    def _nodes(self, count: int) -> tuple[m.NodeInfo, ...]:
        nodes = []
        for i in range(count):
            pool = ("a100", "a100", "h100", "cpu")[i % 4]
            labels = {"kubernetes.io/hostname": f"{pool}-{i}", "pool": pool}
            allocatable = {"cpu": 96.0, "memory": 768.0 * 2**30, "pods": 110.0}
            taints: tuple[tuple[str, str, str], ...] = ()
            if pool != "cpu":
                labels |= {"nvidia.com/gpu.product": pool.upper(), "nvidia.com/gpu.count": "8"}
                allocatable["nvidia.com/gpu"] = 8.0 if i % 37 else 6.0  # a device plugin restarting
            if pool == "h100":
                taints = (("nvidia.com/gpu", "present", "NoSchedule"),)
            nodes.append(m.NodeInfo(f"{pool}-{i}", labels, taints, allocatable, ready=i % 97 != 5,
                                  capacity=dict(allocatable), unschedulable=i % 53 == 3))
        return tuple(nodes)

    def _object(self, kind: str, namespace: str, name: str, *, controller: m.ObjectView | None = None,
                notes: dict[str, str] | None = None, created: datetime.datetime = NOW - 3 * DAY,
                template: dict[str, str] | None = None, replicas: int | None = None) -> m.ObjectView:
        owner = (m.OwnerRef(controller.ref.kind, controller.ref.api_version, controller.ref.name, controller.ref.uid)
                 if controller is not None else None)
        view = m.ObjectView(m.ObjectRef(kind, API[kind], namespace, name, self.uid(kind.lower())), str(self.serial),
                          created, self.ttl(notes or {}), {"app": name}, controller=owner,
                          template_annotations=template or {}, replicas=replicas)
        self.objects.append(view)
        return view

    def _mark(self, uid: str, gpus: int) -> dict[str, str]:
        """A mark by the idle policy for the workload (idle-gpu, or idle-cpu without GPUs), warned a
        day and a half ago of the policy's action, past its deadline."""
        policy, action = ("idle-gpu", "delete") if gpus else ("idle-cpu", "scale-to-zero")
        marked = warned = NOW - 30 * H
        deadline = marked + 24 * H
        return {ann.DEADLINE: ann.format_deadline(deadline), ann.POLICY: policy, ann.REASON: "idle",
                ann.MARKED_AT: ann.format_deadline(marked), ann.MARKED_UID: uid,
                ann.WARNED_AT: ann.format_deadline(warned),
                ann.WARNED_VIA: str(ann.Delivery("D0OWNER", f"{warned.timestamp():.6f}", False)),
                ann.WARNED_OF: str(ann.WarnedOf(action, deadline))}

    def _state(self, story: str, gpus: int) -> tuple[str, datetime.datetime | None, m.PodState]:
        requests = {"cpu": 4.0 * max(gpus, 1), "memory": 32.0 * 2**30}
        if gpus:
            requests["nvidia.com/gpu"] = float(gpus)
        tolerations = (GPU_TOLERATION,) if gpus and self.rng.random() < 0.5 else ()
        selector = {"nvidia.com/gpu.product": "A100"} if gpus and self.rng.random() < 0.3 else {}
        base = m.PodState(scheduled=True, scheduled_changed=NOW - 3 * DAY, requests=requests,
                        limits=dict(requests), node_selector=selector, tolerations=tolerations)
        if story in ("pending", "never-fits"):
            if story == "never-fits":
                requests = requests | ({"nvidia.com/gpu": 16.0} if gpus else {"cpu": 512.0})
            since = NOW - self.rng.choice((10 * M, 5 * H, 2 * DAY))
            return "Pending", None, dataclasses.replace(
                base, scheduled=False, schedule_reason="Unschedulable", scheduled_changed=since, requests=requests,
                schedule_message="0/400 nodes are available: 400 Insufficient nvidia.com/gpu.")
        if story == "crash-loop":
            return "Running", NOW - 2 * H, dataclasses.replace(base, containers=(m.ContainerStatus(
                "main", restarts=7, state="waiting", reason="CrashLoopBackOff", last_exit="Error, exit code 1",
                last_started=NOW - 11 * M, last_exit_at=NOW - 10 * M),))
        if story == "terminating":
            return "Running", NOW - 3 * DAY, dataclasses.replace(
                base, deleting_since=NOW - 2 * H, finalizers=("example.com/hold",) if self.rng.random() < 0.3 else ())
        started = NOW - (30 * M if story == "young" else self.rng.choice((5 * H, 3 * DAY)))
        return "Running", started, base

    def _pod(self, namespace: str, name: str, controller: m.ObjectView | None, story: str, gpus: int,
             template: dict[str, str]) -> None:
        phase, started, state = self._state(story, gpus)
        node = None if phase == "Pending" else self.nodes[self.rng.randrange(len(self.nodes))].name
        owner = (m.OwnerRef(controller.ref.kind, controller.ref.api_version, controller.ref.name, controller.ref.uid)
                 if controller is not None else None)
        ref = m.ObjectRef("Pod", "v1", namespace, name, self.uid("pod"))
        containers = (m.ContainerView("main", 4.0 * max(gpus, 1)), m.ContainerView("istio-proxy", 0.5))
        labels = {"app": name.rsplit("-", 1)[0]}
        deleting = state.deleting_since is not None
        pod = m.PodView(ref, str(self.serial), labels, owner, node, phase, started, gpus, containers, deleting,
                      self.ttl(dict(template)), state, (started or NOW) - M)
        self.pods.append(pod)
        self.objects.append(m.ObjectView(ref, pod.resource_version, pod.created or NOW, pod.annotations, labels,
                                       deleting, owner))
        if phase != "Running":
            return
        key = ev.PodKey(namespace, name)
        busy = story in ("busy", "crash-loop") or (story == "mixed" and self.rng.random() < 0.5)
        self.cpu_peaks[key] = self.rng.uniform(2.0, 30.0) if busy else self.rng.uniform(0.0, 0.05)
        if gpus:
            self.gpu_peaks[key] = tuple(self.rng.uniform(40, 100) if busy else self.rng.uniform(0, 2)
                                        for _ in range(gpus))
        if self.rng.random() < 0.03:
            self.gappy.add(key)

    def _workload(self, index: int) -> None:
        rng = self.rng
        kind = rng.choice(KINDS)
        namespace = "kube-system" if kind == "DaemonSet" and rng.random() < 0.5 else f"team-{rng.randrange(50):02d}"
        name = f"w{index}"
        story = rng.choice(STORIES)
        gpus = rng.choice((1, 1, 2, 4, 8)) if rng.random() < self.gpu_share else 0
        notes = {ann.OWNER: f"user{rng.randrange(400)}@lab.example"} if rng.random() < 0.7 else {}
        count = 1 if kind == "Pod" else rng.randint(1, 8)
        template: dict[str, str] = {}
        parent: m.ObjectView | None = None
        if kind == "Deployment":
            top = self._object("Deployment", namespace, name, notes=notes, replicas=count)
            if rng.random() < (0.3 if story == "idle" else 0.03):  # the controller copies it to the ReplicaSet
                notes = notes | self._mark(top.ref.uid, gpus)
                top = self.objects[-1] = dataclasses.replace(top, annotations=notes)
            parent = self._object("ReplicaSet", namespace, f"{name}-7d9f", controller=top, notes=dict(notes),
                                  replicas=count)
        elif kind == "Job":
            if rng.random() < 0.2:
                notes[ann.TTL] = rng.choice(("1d", "1d", "30d", "8 hours"))
            if rng.random() < 0.03:
                template = {ann.TTL: "1h"}
            parent = self._object("Job", namespace, name, notes=notes, template=template)
        elif kind in ("StatefulSet", "DaemonSet"):
            parent = self._object(kind, namespace, name, notes=notes, replicas=count)
        for i in range(count):
            self._pod(namespace, f"{name}-{i}", parent, story if story != "mixed" or i else "pending", gpus, template)

    def _config_maps(self) -> None:
        for i in range(self.target // 10):
            notes = {}
            if i % 3 == 0:
                notes[ann.TTL] = ("7d", "1h", "forever", "2 days")[i % 4]
            if i % 29 == 0:
                notes[ann.EXPIRES] = "2026-11-01T00:00:00Z"
            self._object("ConfigMap", f"team-{i % NAMESPACES:02d}", f"cm-{i}", notes=notes, created=NOW - 2 * DAY)

    def _evidence(self) -> ev.Evidence:
        gpu: dict[tuple[str, datetime.timedelta], ev.GpuEvidence] = {}
        cpu: dict[tuple[datetime.timedelta, tuple[str, ...]], ev.CpuEvidence] = {}
        for policy in self.policies + usage.companions(self.policies):  # the in-use checks read too
            g = policy.trigger(IdleGpu)
            if g is not None:
                window = ev.EvidenceWindow(str(g.signal), g.window, SCRAPE, NOW)
                samples = window.expected_at(SCRAPE)
                scale = g.signal.maximum / 100
                gpu[(str(g.signal), g.window)] = ev.GpuEvidence(window, {
                    key: tuple(ev.GpuSeries(str(i), peak * scale, samples, "", GAPPY if key in self.gappy else GOOD)
                               for i, peak in enumerate(peaks)) for key, peaks in self.gpu_peaks.items()})
            c = policy.trigger(IdleCpu)
            if c is not None:
                window = ev.EvidenceWindow("cpu", c.window, M, NOW)
                cpu[(c.window, tuple(sorted(c.ignore_containers)))] = ev.CpuEvidence(window, {
                    key: ev.CpuUsage(peak, window.expected_samples, GAPPY if key in self.gappy else GOOD)
                    for key, peak in self.cpu_peaks.items()})
        return ev.Evidence(gpu, cpu, ())

    def build(self) -> m.Observation:
        for name in self.namespaces:
            self.objects.append(m.ObjectView(m.ObjectRef("Namespace", "v1", None, name, f"ns-{name}"), "1",
                                           NOW - 400 * DAY, self.namespaces[name].annotations,
                                           self.namespaces[name].labels))
        index = 0
        while len(self.pods) < self.target:
            self._workload(index)
            index += 1
        self._config_maps()
        return m.Observation(NOW, tuple(self.objects), tuple(self.pods), self.namespaces, self.nodes, True,
                           self._evidence())


SETTINGS = PlanSettings(rails=Rails())


def run(observation: m.Observation, policies: tuple[Policy, ...]) -> CyclePlan:
    return plan(observation, policies, m.SafetyLedger(), NOW + datetime.timedelta(seconds=2), settings=SETTINGS)


class Collector:
    """CPU seconds the cyclic garbage collector ran, and its full collections, while it is on."""

    def __init__(self) -> None:
        self.seconds, self.full, self.began = 0.0, 0, 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.began = time.process_time()
        else:
            self.seconds += time.process_time() - self.began
            self.full += info["generation"] == 2

    def __enter__(self) -> Collector:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def best_of(observation: m.Observation, policies: tuple[Policy, ...], runs: int,
            freeze: bool) -> tuple[float, Collector, CyclePlan]:
    """The fastest of `runs` plans, each begun after a full collection, as a cycle's plan would be
    after its read: with `freeze`, the observation is moved out of the collector's sight first."""
    best, collected, result = float("inf"), Collector(), None
    for _ in range(runs):
        result = None
        gc.collect()
        if freeze:
            gc.freeze()
        with Collector() as collector:
            began = time.process_time()
            result = run(observation, policies)
            seconds = time.process_time() - began
        if freeze:
            gc.unfreeze()
        if seconds < best:
            best, collected = seconds, collector
    assert result is not None
    return best, collected, result


def check(result: CyclePlan, pods: int) -> str:
    """The plan must be real work: findings of every trigger, lifecycle reclaims and actions."""
    triggers = {str(f.trigger) for f in result.findings}
    wanted = {"expiry", "idleGpu", "idleCpu", "pending", "crashLoop", "terminating"}
    acts = sum(1 for c in result.changes if c.step is Step.ACT)
    if not wanted <= triggers or not acts or not (result.actions or result.held):
        raise SystemExit(f"the plan at {pods} pods is trivial: triggers {sorted(triggers)}, "
                         f"{acts} lifecycle actions, {len(result.actions)} actions")
    return (f"{len(result.findings)} findings, {len(result.changes)} changes ({acts} act), "
            f"{len(result.actions)} actions, {len(result.held)} held")


def profile(observation: m.Observation, policies: tuple[Policy, ...], top: int,
            now: datetime.datetime = NOW) -> None:
    """The hottest functions of one plan, made as the cycle makes it: after a first plan and a full
    collection, with the collector paused."""
    plan(observation, policies, m.SafetyLedger(), now, settings=SETTINGS)
    gc.collect()
    gc.disable()
    profiler = cProfile.Profile()
    profiler.enable()
    plan(observation, policies, m.SafetyLedger(), now, settings=SETTINGS)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    gc.enable()


def kept_observation(path: str, runs: int, top: int | None) -> None:
    """`plan()` on an observation a cycle of the scale sandbox read (`bench/cluster_scale.py
    --keep-observation`): best of `runs`, each after a full collection, with the collector paused
    as the cycle pauses it; with `top`, its profile instead."""
    observation, policies, now = pickle.loads(Path(path).read_bytes())
    if top is not None:
        profile(observation, policies, top, now)
        return
    best = float("inf")
    for _ in range(runs):
        gc.collect()
        gc.disable()
        began = time.process_time()
        plan(observation, policies, m.SafetyLedger(), now, settings=SETTINGS)
        best = min(best, time.process_time() - began)
        gc.enable()
    print(f"{path}: {len(observation.pods)} pods, {len(observation.objects)} objects, {len(observation.nodes)} nodes; "
          f"plan {best:.3f} s, {best / len(observation.pods) * 1e6:.1f} us/pod (collector paused, best of {runs})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="pods per observation")
    parser.add_argument("--runs", type=int, default=3, help="plans timed per size (the best counts)")
    parser.add_argument("--profile", type=int, metavar="PODS", help="profile one plan at this size instead")
    parser.add_argument("--top", type=int, default=30, help="functions shown with --profile")
    parser.add_argument("--gpu-share", type=float, default=GPU_SHARE,
                        help="share of workloads whose pods hold GPUs (0.02: about the GPUs the nodes have)")
    parser.add_argument("--ttl-share", type=float, default=0.0,
                        help="share of objects and pods with a janitor/ttl a year out (1: the TTL-heavy case)")
    parser.add_argument("--freeze", action="store_true",
                        help="gc.freeze() the observation before each plan (what a daemon can do after its read)")
    parser.add_argument("--observation", metavar="PATH", help="plan a kept observation of the scale sandbox "
                        "instead (`bench/cluster_scale.py --keep-observation`); with --profile N, profile it")
    args = parser.parse_args()
    if args.observation:
        kept_observation(args.observation, args.runs, args.top if args.profile else None)
        return
    policies = load_policies()
    if args.profile:
        profile(Builder(args.profile, policies, gpu_share=args.gpu_share, ttl_share=args.ttl_share).build(), policies,
                args.top,
                NOW + datetime.timedelta(seconds=2))
        return
    sizes = sorted(args.sizes)
    figures: dict[int, float] = {}
    without: dict[int, float] = {}
    print(f"{'pods':>7} {'objects':>8} {'nodes':>6} {'plan s':>8} {'us/pod':>7} {'gc s':>6} {'full':>4} "
          f"{'w/o gc':>7}  plan")
    for pods in sizes:
        observation = Builder(pods, policies, gpu_share=args.gpu_share, ttl_share=args.ttl_share).build()
        seconds, collector, result = best_of(observation, policies, args.runs, args.freeze)
        figures[pods] = seconds
        without[pods] = seconds - collector.seconds
        print(f"{len(observation.pods):>7} {len(observation.objects):>8} {len(observation.nodes):>6} "
              f"{seconds:>8.3f} {seconds / len(observation.pods) * 1e6:>7.1f} {collector.seconds:>6.3f} "
              f"{collector.full:>4} {without[pods]:>7.3f}  {check(result, pods)}")
        del observation, result
    small, large = sizes[0], sizes[-1]
    if large != small:
        print(f"ratio {large}/{small}: {figures[large] / figures[small]:.2f}, without the collector "
              f"{without[large] / without[small]:.2f} ({large / small:.2f} would be exactly linear)")
    print(f"{large} pods plan in {figures[large]:.3f} s (best of {args.runs}"
          f"{', observation frozen' if args.freeze else ''}), {without[large]:.3f} s of it outside the collector")


if __name__ == "__main__":
    main()
