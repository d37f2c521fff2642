"""A first mark or warning is looked at again on a fresh read before it is written (the sandbox).

Aspects covered:
- a namespace opted out after the cycle's read, before its writes: the idle Job is not marked and
  its owner hears nothing; the next cycle, deciding on what it reads, leaves it alone too;
- nothing changed meanwhile: the same plan marks and warns.
"""

from __future__ import annotations

from kubernetes import client
from test_lifecycle import (  # noqa: F401 (alice and prometheus are fixtures)
    alice,
    create_job,
    history,
    janitor_for,
    notes_of,
    prometheus,
    write_policy,
)

from janitor import annotations as a
from janitor.decide.lifecycle import Step


def test_a_namespace_opted_out_after_the_read_gets_no_mark_and_no_warning(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:  # noqa: F811
    create_job(kube, namespace, "idle-job")
    history(core, namespace, exporter_values, {"idle-job": 0})
    janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace), prometheus())

    def opt_out() -> None:  # after the cycle's read, before its writes
        core.patch_namespace(namespace, {"metadata": {"annotations": {a.OPT_OUT: "true"}}})

    result = janitor.plan_then_act(opt_out)
    assert [c.step for c in result.plan.changes if c.workload.name == "idle-job"] == [Step.MARK]
    assert a.POLICY not in notes_of(kube, namespace, "idle-job")
    assert not result.lifecycle or not result.lifecycle.sent
    janitor.run_cycle()
    assert a.POLICY not in notes_of(kube, namespace, "idle-job")


def test_nothing_changed_meanwhile_marks_and_warns(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:  # noqa: F811
    create_job(kube, namespace, "idle-job")
    history(core, namespace, exporter_values, {"idle-job": 0})
    janitor = janitor_for(kube, sandbox, namespace, write_policy(tmp_path / "p.yaml", namespace), prometheus())
    result = janitor.plan_then_act(lambda: None)
    notes = notes_of(kube, namespace, "idle-job")
    assert notes.get(a.POLICY) == "idle-gpu" and a.WARNED_VIA in notes
    assert result.lifecycle is not None and len(result.lifecycle.sent) == 1
    assert a.OPT_OUT not in (client.CoreV1Api(kube).read_namespace(namespace).metadata.annotations or {})
