"""Activity rules on the sandbox, asked of a real Prometheus (2.x or 3.x).

Aspects covered:
- a rule whose answer names a pod keeps its workload although its GPU has idled for hours, while
  an idle workload the rule does not name is marked;
- a rule that errors (a PromQL syntax error: Prometheus answers 400 bad_data) counts as use for every
  workload of its policy: the marked one is unmarked and, past its old deadline, not deleted.
"""

from __future__ import annotations

from pathlib import Path

from test_lifecycle import (  # noqa: F401 (alice and prometheus are fixtures)
    alice,
    create_job,
    history,
    janitor_for,
    jobs,
    notes_of,
    prometheus,
    until_due,
)

from janitor import annotations as a
from janitor.decide.model import TriggerKind
from janitor.decide.reasons import Code


def served(namespace: str) -> str:
    """The `served` Job's pod, named by `namespace` and `pod` labels as an exporter of requests would."""
    picked = f'max by (exported_namespace, exported_pod) (DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{namespace}", ' \
             'exported_pod=~"served-.*"})'
    return (f'label_replace(label_replace({picked}, "namespace", "$1", "exported_namespace", "(.*)"), '
            '"pod", "$1", "exported_pod", "(.*)")')


def write(path: Path, namespace: str, *exprs: str) -> Path:
    rules = "\n".join(f"    - name: rule-{i}\n      expr: '{e}'" for i, e in enumerate(exprs))
    path.write_text(f"""policies:
- name: serving
  mode: enforce
  match:
    namespaces: {{include: ["{namespace}"]}}
  triggers:
    idleGpu: {{threshold: 5, window: 2h}}
  activity:
    rules:
{rules}
  lifecycle: {{warnBefore: 20s, remindEvery: 0s}}
""")
    return path


def verdicts(result, name: str) -> list[tuple[str, Code]]:
    return [(str(f.state), f.reason.code) for f in result.plan.findings
            if f.trigger is TriggerKind.IDLE_GPU and f.subject.name == name and f.policy == "serving"]


def test_a_rule_naming_a_pod_keeps_it_and_a_rule_that_errors_keeps_every_workload(
        kube, core, namespace, sandbox, tmp_path, exporter_values, slack, alice, prometheus) -> None:  # noqa: F811
    create_job(kube, namespace, "quiet")
    create_job(kube, namespace, "served")
    history(core, namespace, exporter_values, {"quiet": 0, "served": 0})
    policy = write(tmp_path / "p.yaml", namespace, served(namespace))
    janitor = janitor_for(kube, sandbox, namespace, policy, prometheus())

    first = janitor.run_cycle()
    assert verdicts(first, "served") == [("clear", Code.ACTIVITY)], [
        (f.subject.name, f.state, str(f.reason)) for f in first.plan.findings]
    assert verdicts(first, "quiet") == [("fires", Code.ALL_IDLE)]
    marked = notes_of(kube, namespace, "quiet")
    assert marked.get(a.POLICY) == "serving"
    assert a.POLICY not in notes_of(kube, namespace, "served")

    write(policy, namespace, served(namespace), "sum(rate(http_requests_total[5m])")  # one ( too many
    second = janitor.run_cycle()
    assert verdicts(second, "served") == [("clear", Code.ACTIVITY)]  # the first rule still names it
    assert verdicts(second, "quiet") == [("clear", Code.ACTIVITY_FAILED)]
    failed = next(f for f in second.plan.findings if f.subject.name == "quiet" and f.policy == "serving")
    assert "rule-1" in str(failed.reason) and "bad_data" in str(failed.reason)
    assert a.POLICY not in notes_of(kube, namespace, "quiet"), "an erroring rule unmarks: in use, as far as it knows"

    until_due(marked)
    third = janitor.run_cycle()
    assert not [r for r in third.results if r.action.target.name in ("quiet", "served")]
    assert jobs(kube, namespace) == {"quiet", "served"}
