"""`kubectl janitor`: what the janitor says about my workloads, for a researcher with `view` or `edit`
in a namespace.

The `janitor` command reads the whole cluster (its plan and explain need every policy, the ledger
and Prometheus), which a researcher may not. This plugin reads only the workloads of the namespace
and their Events, so `view` is enough to see the marks and `edit` to keep a workload:

* `entries.py`: kubectl's kind names, KIND/NAME and UNTIL, one workload's standing read from its
  annotations (the janitor's `janitor/why` note, never the words of `janitor/reason`), the keep
  decision against the policy's cap; pure;
* `render.py`: the status table, the explanation, the `janitor/v1` Status documents;
* `main.py`: the command line (console script `kubectl-janitor`), the reads and the one write.
"""
