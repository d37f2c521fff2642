"""The orphanedClaim trigger: a DRA ResourceClaim that holds devices while nothing uses it.

An allocated claim keeps its devices from every other pod. `decide.claims` says which claims hold
them with no live consumer (reserved for nobody, or only for pods that are gone); this trigger
makes those claims subjects of the lifecycle, as the admin report's section does not: the owner
is marked, warned and reminded, and under an enforcing policy with `action: delete` the claim is
deleted at the deadline, re-checked on a fresh read of the claim and every pod of its namespace.

Its verdict on one claim read at `resource.k8s.io/v1` (claims read at a beta version are in the
admin report only: v1 is the one version they are marked and deleted at):

- *clear* while a pod that runs or waits names it (`spec.resourceClaims`, or generated for it),
  reserved or not, while it is reserved for a pod that is there, and while it holds nothing;
- *unknown* when it is reserved for something that is not a pod, when its status has an odd shape,
  when the pods of its namespace or the nodes were not read, when an object other than a pod owns
  it (controller or not: that owner keeps it, and the garbage collector deletes it with that owner),
  when a process of a deleted pod it was reserved for (or, reserved for nobody, of a deleted pod of
  its namespace) still holds a GPU by any node agent's report (believed or not: a stale report is
  doubt enough), and when when its status was last written is not recorded;
- *fires* once the daemon has seen it hold devices with no consumer, cycle after cycle, for
  `after`, and its status was last written at least that long ago (the count starts again on a
  restart, and after any cycle a working pod named it: `ClaimsRead.seen`, `claims.seen_since`).

The claims are not objects of the cycle (no `janitor/ttl` deletes one unless `--kinds` lists them):
`objects` gives the lifecycle the claims it judges, and those marked once a policy is removed.

Pure.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from janitor.decide import selection
from janitor.decide.claims import Claim, ClaimsRead, Verdict, verdict
from janitor.decide.claims import State as ClaimState
from janitor.decide.governance import Governance
from janitor.decide.holder_notices import believed
from janitor.decide.model import Finding, ObjectView, Observation, PodView, State, TriggerKind
from janitor.decide.owners import DEFAULT_OWNER_KEYS, find_owner
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import Workload
from janitor.decide.triggers.spec import Cycle, NodeScope, Reads, Recheck, Role, TriggerSpec, Usage, duration
from janitor.node_report import HeldGpu
from janitor.policy.model import OrphanedClaim, Policy
from janitor.policy.model import Trigger as PolicyTrigger
from janitor.why_note import Scalar

DONE = frozenset({"Succeeded", "Failed"})
_ZERO = datetime.timedelta(0)


def subjects(observation: Observation, gate: selection.Gate,
             owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS) -> tuple[Workload, ...]:
    """Each claim read at v1 as a workload of its own, with no pods: not one being deleted, nor one
    in a protected namespace; the claim's owner annotation, else its namespace's owner, is told."""
    read = observation.claims
    if read is None or read.problem:
        return ()
    found = []
    for claim in read.claims:
        view = claim.view
        if view is None or view.deleting or gate.protects(claim.ref.namespace):
            continue
        namespace = observation.namespace(claim.ref.namespace)
        found.append(Workload(view.ref, view, (), namespace, view.ref.kind, (view.ref,), selection.managed_by(view),
                              None, selection.opted_out(view.annotations, None)
                              or selection.opted_out({}, namespace), find_owner(view, namespace, owner_keys)))
    return tuple(found)


def judge(claim: Claim, read: ClaimsRead, naming: Sequence[PodView], held: Sequence[tuple[str, HeldGpu]],
          trigger: OrphanedClaim, now: datetime.datetime) -> tuple[State, Reason]:
    """One claim's verdict (see the module's words). `naming`: the pods of its namespace that name
    it; `held`: the GPU holders the node agents report, believed or not (node, holder)."""
    if read.pods is None or not read.pods.covers(claim.ref.namespace):
        return State.UNKNOWN, why(Code.CLAIM_UNSURE, problem="the pods of its namespace were not read, so whether "
                                  "one names it or it is reserved for one is not known")
    working = [p for p in naming if p.phase not in DONE]
    if working:
        pod = working[0]
        return State.CLEAR, why(Code.CLAIM_NAMED, pod=pod.ref.name,
                                phase=f"{pod.phase}, Terminating" if pod.deleting else pod.phase)
    v = verdict(claim, read.pods)
    if v.state is ClaimState.UNKNOWN or (v.state is ClaimState.IN_USE and not v.pods_read):
        return State.UNKNOWN, why(Code.CLAIM_UNSURE, problem=v.words)
    if v.state in (ClaimState.IN_USE, ClaimState.NOT_ALLOCATED):
        return State.CLEAR, why(Code.CLAIM_FREE, words=v.words)
    made = next((o for o in (*((claim.controller,) if claim.controller else ()), *claim.owners)
                 if not (o.kind == "Pod" and o.api_version == "v1")), None)
    if made is not None:  # controller or plain owner: the garbage collector deletes it with that owner
        return State.UNKNOWN, why(Code.CLAIM_UNSURE, problem=f"{made.kind} {made.name} owns it: whether it is "
                                  "still needed is that owner's to say")
    holder = _holder(v, held)
    if holder is not None:
        node, h = holder
        return State.UNKNOWN, why(Code.CLAIM_UNSURE, problem=(
            f"a process of deleted pod {h.namespace or '?'}/{h.name or h.pod_uid} (pid {h.pid}) still holds a GPU "
            f"on {node}: free it first, as until then the device is not free for other pods anyway"))
    written = claim.status_written
    if written is None:
        return State.UNKNOWN, why(Code.CLAIM_UNSURE, problem="when its status was last written is not recorded "
                                  "(managedFields)")
    first = read.seen.get(claim.ref.uid)
    since = max(written, first[1]) if first is not None and first[0] is v.state else now
    quiet = max(now - since, _ZERO)
    devices = ", ".join(str(d) for d in claim.devices) or "its allocation"
    whom = ("reserved for nobody" if v.state is ClaimState.ORPHANED else
            "reserved only for pods that are gone: " + ", ".join(c.name for c in v.gone))
    if quiet < trigger.after:
        return State.TOO_YOUNG, why(Code.CLAIM_HELD_SHORT, devices=devices, whom=whom, since=since, quiet=quiet,
                                    after=trigger.after)
    return State.FIRES, why(Code.CLAIM_HELD, devices=devices, since=since, quiet=quiet, whom=whom)


def _holder(v: Verdict, held: Sequence[tuple[str, HeldGpu]]) -> tuple[str, HeldGpu] | None:
    """A GPU holder of a pod the claim was reserved for; of a claim reserved for nobody, any deleted
    pod's holder in its namespace (which pod it last served is not recorded on it), or whose
    namespace the agent does not know (it never saw that pod listed)."""
    gone = {c.uid for c in v.gone}
    for node, h in held:
        if h.pod_uid in gone or (v.state is ClaimState.ORPHANED and h.namespace in ("", v.claim.ref.namespace)):
            return node, h
    return None


def findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
             now: datetime.datetime) -> list[Finding]:
    """One finding per claim the policy governs for orphanedClaim (`subjects`, `Governance.of_object`)."""
    trigger = policy.trigger(OrphanedClaim)
    read = observation.claims
    assert trigger is not None
    if read is None:
        return []
    by_uid = {c.ref.uid: c for c in read.claims}
    naming = _naming(observation.pods)
    held = _holders(observation, now) if observation.nodes_known else ()
    found = []
    for w in workloads:
        claim = by_uid.get(w.ref.uid)
        if claim is None:
            continue
        if observation.nodes_known:
            state, reason = judge(claim, read, naming.get((claim.ref.namespace, claim.ref.name), ()), held,
                                  trigger, now)
        else:
            state, reason = State.UNKNOWN, why(Code.CLAIM_UNSURE, problem="the nodes were not read, so whether a "
                                               "process of a deleted pod still holds a GPU is not known")
        found.append(Finding(TriggerKind.ORPHANED_CLAIM, policy.name, policy.mode, w.ref, state, reason,
                             source=policy.source, known=True, owner=w.owner, managed_by=w.managed_by))
    return found


def _holders(observation: Observation, now: datetime.datetime) -> tuple[tuple[str, HeldGpu], ...]:
    """The GPU holders the node agents report, believed or not: a report too old or without proven
    sight is not enough to tell an owner of a holder, but it is enough to doubt that a device is free."""
    believed_ = believed(observation.nodes, observation.pods, observation.nodes_at or now)
    reported = tuple((n.name, h) for n in observation.nodes if n.gpu_holders is not None
                     and n.gpu_holders.status is not False for h in n.gpu_holders.message.held)
    return (*believed_, *reported)


def objects(observation: Observation, policies: Sequence[Policy]) -> tuple[ObjectView, ...]:
    """The claims the lifecycle looks at, as objects: every one read at v1 where an orphanedClaim
    policy is loaded, else those carrying a mark (the policy removed: they are unmarked and their
    owners told). None already among the cycle's objects (`--kinds` may list them), and none of
    claims read only for the pods that name them (`ClaimsRead.for_pods`: their marks stay)."""
    read = observation.claims
    if read is None or read.problem or read.for_pods:
        return ()
    judging = any(p.trigger(OrphanedClaim) is not None for p in policies)
    listed = {o.ref.uid for o in observation.objects}
    return tuple(c.view for c in read.claims if c.view is not None and c.view.ref.uid not in listed
                 and (judging or c.view.readings.marked))


def _naming(pods: Sequence[PodView]) -> dict[tuple[str, str], list[PodView]]:
    out: dict[tuple[str, str], list[PodView]] = {}
    for p in pods:
        for name in p.resource_claims:
            out.setdefault((p.ref.namespace or "", name), []).append(p)
    return out


def judged(cycle: Cycle) -> tuple[list[Finding], tuple[Workload, ...]]:
    """The cycle's orphanedClaim findings, and the claims they judged as workloads (for the lifecycle)."""
    policies, observation, now = cycle.policies, cycle.observation, cycle.now
    if not any(p.trigger(OrphanedClaim) is not None for p in policies):
        return [], ()
    every = subjects(observation, cycle.gate, cycle.owner_keys)
    governance = Governance(policies)
    by_policy: dict[str, tuple[Policy, list[Workload]]] = {}
    for w in every:
        policy = governance.of_object(OrphanedClaim, w)
        if policy is not None:
            by_policy.setdefault(policy.name, (policy, []))[1].append(w)
    found = [f for policy, members in by_policy.values() for f in findings(members, observation, policy, now)]
    return found, every


def _facts(trigger: PolicyTrigger) -> dict[str, Scalar]:
    return {"after": duration(trigger.after)} if isinstance(trigger, OrphanedClaim) else {}


def _describe(trigger: PolicyTrigger) -> str:
    assert isinstance(trigger, OrphanedClaim)
    return (f"orphanedClaim: a DRA ResourceClaim holding devices for {duration(trigger.after)} with no consumer "
            "(reserved for nobody, or for pods that are gone)")


def _reads(_: PolicyTrigger) -> Reads:
    return Reads(nodes=True)  # the node agents' GPU holders: a device a gone pod's process holds is not freed


# No pods of its own to judge: `judged` finds its subjects, `objects` gives the lifecycle the claims
# (marked ones too). The re-check reads the claim, every pod of its namespace and every node again;
# usage signals do not bear on a claim.
TRIGGER = TriggerSpec(TriggerKind.ORPHANED_CLAIM, Role.MARKS, Usage.NONE, findings, policy=OrphanedClaim,
                      reads=_reads, recheck=Recheck(pods=True, claims=True, nodes=NodeScope.ALL),
                      condition="holding devices no pod uses", facts=_facts, describe=_describe, subjects=judged,
                      objects=objects)
