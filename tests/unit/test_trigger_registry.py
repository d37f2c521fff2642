"""Every trigger is one value (decide.triggers.spec), and everything that lists triggers reads it."""

from __future__ import annotations

import datetime
import typing

from janitor.decide.model import State, TriggerKind
from janitor.decide.triggers import registry
from janitor.decide.triggers.spec import NodeScope, Role, Usage
from janitor.observe.observation import needs
from janitor.policy import model as policy
from janitor.policy.model import CrashLoop, IdleCpu, IdleGpu, Pending, Policy, Terminating


def test_every_trigger_kind_is_one_value_and_every_policy_key_enables_one() -> None:
    assert sorted(t.kind for t in registry.ALL) == sorted(TriggerKind)
    keys = typing.get_args(policy.Trigger)
    assert sorted(k.__name__ for k in keys) == sorted(t.policy.__name__ for t in registry.ALL if t.policy)
    for key in keys:
        assert registry.of_policy(key()).policy is key


def test_what_a_cycle_reads_is_the_union_of_what_each_policys_trigger_says() -> None:
    window = datetime.timedelta(hours=2)
    nothing = needs([Policy("cpu", (IdleCpu(window=window),))])
    assert not (nothing.nodes or nothing.oom or nothing.autoscalers or nothing.ghost_gpus or nothing.gpu)
    assert nothing.cpu == {(window, ())}
    stuck = needs([Policy("p", (Pending(),)), Policy("c", (CrashLoop(),)), Policy("t", (Terminating(),))])
    assert stuck.nodes and stuck.oom and stuck.autoscalers and stuck.ghost_gpus and stuck.pods
    several = needs([Policy("g", (IdleGpu(window=window, also=((policy.GpuSignal.POWER, 1.2),)),))])
    assert several.gpu == {(str(policy.GpuSignal.GPU_UTIL), window), (str(policy.GpuSignal.POWER), window)}
    assert (str(policy.GpuSignal.POWER), window) not in several.gpu_busy_above  # judged per model, no one level


def test_only_usage_triggers_say_in_use_and_only_marking_ones_reach_the_lifecycle() -> None:
    for trigger in registry.ALL:
        assert trigger.in_use(State.CLEAR) is (trigger.usage is Usage.READS)
        assert not trigger.in_use(State.FIRES) and not trigger.in_use(State.UNKNOWN)
        if trigger.role is Role.MARKS:  # the re-check reads the workload's pods and their use
            assert trigger.recheck.pods and (trigger.recheck.usage or trigger.usage is Usage.NONE)
            # It judges pods, or the Kueue Workload of what may have none, or a DRA claim with every pod
            # of its namespace (each read again before acting): one of the three.
            assert [trigger.pods is not None, trigger.recheck.kueue, trigger.recheck.claims].count(True) == 1
        if trigger.policy is not None:  # a policy's trigger judges pods' workloads, or finds its own subjects
            assert (trigger.pods is None) is (trigger.subjects is not None), trigger.kind
    assert [t.kind for t in registry.OBJECT_TRIGGERS] == [TriggerKind.RESERVED_QUOTA, TriggerKind.ORPHANED_CLAIM]
    assert registry.spec(TriggerKind.EXPIRY).word(State.FIRES) == "delete"
    assert registry.spec(TriggerKind.IDLE_GPU).word(State.FIRES) == "idle"
    assert registry.spec(TriggerKind.PENDING).recheck.nodes is NodeScope.ALL
    assert registry.spec(TriggerKind.TERMINATING).daemonsets


def test_a_cycles_usage_queries_cover_the_namespaces_of_every_trigger_that_reads_usage() -> None:
    from janitor.decide.model import NamespaceView
    from janitor.observe.observation import covered_namespaces

    namespaces = {n: NamespaceView(n, {}, {}) for n in ("ml", "web", "ops")}
    only = policy.Match(namespaces=policy.Namespaces(include=("ml",)))
    for trigger in (IdleGpu(), IdleCpu(cores=0.5), policy.Hung()):
        assert covered_namespaces([Policy("p", (trigger,), match=only)], namespaces) == ["ml"], trigger
    assert covered_namespaces([Policy("p", (Pending(),), match=only)], namespaces) == []
