"""The `kubectl janitor` command line: status, explain and keep, for the namespaces a researcher has.

kubectl runs any `kubectl-janitor` on the PATH as `kubectl janitor`, so this is a console script of
the package; it takes kubectl's own flags (--kubeconfig, --context, -n, -A, -o) in kubectl's places.
It reads the workloads of one namespace (or of all with -A) and their Events, nothing cluster-wide:
no ledger, no Prometheus, no policy file; everything it says comes from the annotations the
janitor wrote (`janitor/why`). Its one write is `janitor/keep-until`, guarded by the
resourceVersion it read, after the same check against the policy's cap the janitor makes.
Expected failures (no kubeconfig, 403, not found) are one line and an exit code, no traceback.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence

from janitor import annotations as ann
from janitor import errors, exits, kubeapi, report
from janitor.act import kube
from janitor.decide.model import ObjectView, ResourceKind
from janitor.exits import Exit
from janitor.observe import cluster
from janitor.plugin import entries, render
from janitor.plugin.entries import KINDS, Entry, Event, Kind, UsageError

EVENTS = ResourceKind("", "v1", "Event", "events")
FIELD_MANAGER = "kubectl-janitor"  # its writes are the researcher's own (keep-until), never the janitor's
FORBIDDEN_HINT = ("status and explain need the view role in the namespace, keep needs edit (-A: list rights in "
                  "every namespace; use -n for yours); ask your namespace's admins")

DESCRIPTION = """\
What the cluster's janitor (kube-idle-janitor) says about your workloads, and how to keep one.
The janitor marks a workload it finds idle (or stuck Pending, or crash-looping while holding GPUs),
warns its owner on Slack, and at the deadline deletes, suspends, scales to zero or stops it, unless
it is used again or kept. This reads only the workloads of a namespace and their Events: the view
role there is enough for status and explain, edit for keep."""

EPILOG = """\
examples:
  kubectl janitor status                 my namespace (the context's, else default), soonest first
  kubectl janitor status -n team-a -o wide
                                         with the state, the keep cap and the command to keep each
  kubectl janitor status -A -o json      every namespace I may list, as a janitor/v1 Status document
  kubectl janitor explain job/train      why (the numbers), the deadline, the cap, the janitor's Events
  kubectl janitor keep job/train 2d      not reclaimed for 2 days from now (janitor/keep-until)
  kubectl janitor keep deploy/web 2026-12-01T18:00:00Z -n team-a
                                         until then (UTC), if the policy's cap allows it

Kinds: job, cronjob (cj), deployment (deploy), statefulset (sts), notebook, pod, resourceclaim.
UNTIL: a duration from now (30m, 12h, 2d, 1w) or a UTC time (2026-12-01T18:00:00Z, 2026-12-01T18:00,
2026-12-01). A workload used again loses its mark by itself; nothing to do.

exit codes:
  0  done                                   3  no kubeconfig, a broken one, an unknown context,
  1  done, and refused or not found: a         a cluster CA that does not match (TLS)
     keep past the policy's cap or in the   4  not allowed (HTTP 401/403): status and explain
     past, no such workload, a conflict        need view in the namespace, keep needs edit
  2  wrong arguments                        5  the apiserver did not answer (network, timeout)
Expected failures print one line on stderr saying what failed and what to do; no traceback."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """kubectl's flags, before or after the command: under a command, an absent one keeps the top's."""
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--kubeconfig", default=default, metavar="PATH",
                        help="the kubeconfig (default: $KUBECONFIG, then ~/.kube/config, as kubectl)")
    parser.add_argument("--context", default=default, help="a context of the kubeconfig (default: its current one)")
    parser.add_argument("-n", "--namespace", default=default,
                        help="the namespace (default: the context's, else default, as kubectl)")


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="kubectl janitor", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=raw)
    _options(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    _options(common, suppress=True)

    status = commands.add_parser(
        "status", parents=[common], formatter_class=raw, epilog=EPILOG.split("\n\n")[0],
        help="the workloads the janitor marked, or that carry janitor/ttl, janitor/expires or janitor/keep-until",
        description="The workloads (Jobs, CronJobs, Deployments, StatefulSets, Notebooks, bare Pods) that carry a "
                    "janitor mark, janitor/ttl, janitor/expires or janitor/keep-until: the policy, what happens and "
                    "when (UTC, and how long from now), why in plain words, kept until when, and how to keep it. "
                    "Soonest deadline first; the table is cut to the terminal's width unless -o wide.")
    status.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace you may list")
    status.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table",
                        help="json and yaml: a janitor/v1 Status document (docs/researcher-guide.md)")
    status.set_defaults(func=_status)

    explain = commands.add_parser(
        "explain", parents=[common], formatter_class=raw, epilog=EPILOG.split("\n\n")[0],
        help="everything the janitor says about one workload, with its Events",
        description="What the janitor says about KIND/NAME: its mark, why (plain words and the policy's numbers), "
                    "the deadline, what happens then, the cap of a keep and the command, and the janitor's Events "
                    "on it (an hour of them, as the apiserver keeps them).")
    explain.add_argument("target", metavar="KIND/NAME", help="e.g. job/train, deploy/web, notebook/lab")
    explain.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                         help="json and yaml: a janitor/v1 WorkloadStatus document")
    explain.set_defaults(func=_explain)

    keep = commands.add_parser(
        "keep", parents=[common], formatter_class=raw, epilog=EPILOG.split("\n\n")[0],
        help="keep a workload: janitor/keep-until, within its policy's cap",
        description="Write janitor/keep-until on KIND/NAME: the janitor does not reclaim it before then, up to its "
                    "policy's maxExtension after it was first marked. A time past that cap is refused here, saying "
                    "the cap. Needs the edit role in the namespace.")
    keep.add_argument("target", metavar="KIND/NAME", help="e.g. job/train, deploy/web, notebook/lab")
    keep.add_argument("until", metavar="UNTIL",
                      help="a duration from now (2d, 12h) or a UTC time (2026-12-01T18:00:00Z)")
    keep.set_defaults(func=_keep)
    return parser


def _connect(args: argparse.Namespace) -> tuple[kubeapi.TimedApiClient, str]:
    api = kubeapi.connect(args.kubeconfig, context=args.context)
    return api, args.namespace or kubeapi.context_namespace(args.kubeconfig, context=args.context)


def _pod_of_a_workload(kind: Kind, view: ObjectView) -> bool:
    """A pod its controller made: the janitor judges the workload, never such a pod on its own."""
    return kind.resource.kind == "Pod" and view.controller is not None


def _list(api: kubeapi.TimedApiClient, namespace: str | None, now: datetime.datetime) -> tuple[list[Entry], list[str]]:
    """Every workload with something from the janitor, and the kinds that could not be listed."""
    found: list[Entry] = []
    forbidden: list[tuple[Kind, errors.Forbidden]] = []
    served = 0
    for kind in KINDS:
        try:
            for items, _ in cluster.list_items(api, kind.resource, page_size=250,
                                               namespaces=[namespace] if namespace else None):
                for raw in items:
                    view = cluster.to_view(kind.resource, raw)
                    entry = None if _pod_of_a_workload(kind, view) else entries.read(view, kind, now)
                    if entry is not None:
                        found.append(entry)
        except errors.NotFound:  # not served here (no Kubeflow): nothing of that kind to show
            continue
        except errors.Forbidden as e:
            forbidden.append((kind, e))
        served += 1
    if forbidden and len(forbidden) == served:
        raise forbidden[0][1]  # nothing could be listed: one line and exit 4
    found.sort(key=lambda e: (e.deadline is None, e.deadline or now, e.ref.namespace or "", e.target))
    return found, [f"{kind.resource.plural} not shown: you may not list them" for kind, _ in forbidden]


def _status(args: argparse.Namespace) -> int:
    api, namespace = _connect(args)
    scope = None if args.all_namespaces else namespace
    now = _now()
    found, not_shown = _list(api, scope, now)
    for line in not_shown:
        print(f"kubectl janitor status: {line}" + (f" in {scope}" if scope else ""), file=sys.stderr)
    if args.output in ("json", "yaml"):
        print(render.dump(render.status_document(found, now, scope, not_shown), args.output))
        return Exit.OK
    if not found:
        print(render.nothing(scope))
        return Exit.OK
    show_namespace = args.all_namespaces or namespace != kubeapi.context_namespace(args.kubeconfig,
                                                                                    context=args.context)
    text = render.status_table(found, now, all_namespaces=args.all_namespaces, wide=args.output == "wide",
                               show_namespace=show_namespace)
    print(report.fit(text, report.terminal_width(args.output)))
    return Exit.OK


def _events(api: kubeapi.TimedApiClient, namespace: str, uid: str) -> tuple[list[Event], str]:
    """The janitor's Events on the object with `uid`, oldest first; and a note if they cannot be read."""
    found: list[Event] = []
    try:
        for items, _ in cluster.list_items(api, EVENTS, namespaces=[namespace],
                                           field_selector=f"involvedObject.uid={uid}"):
            found.extend(e for e in (entries.event_of(i) for i in items) if e is not None)
    except errors.Forbidden:
        return [], "its Events are not shown: not allowed to list Events here"
    epoch = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    return sorted(found, key=lambda e: e.at or epoch), ""


def _explain(args: argparse.Namespace) -> int:
    kind, name = entries.parse_target(args.target)
    api, namespace = _connect(args)
    raw, _ = cluster.read_item(api, kind.resource, namespace, name)
    if raw is None:
        print(f"kubectl janitor explain: {kind.short}/{name} not found in namespace {namespace}", file=sys.stderr)
        return Exit.PROBLEMS
    now = _now()
    view = cluster.to_view(kind.resource, raw)
    entry = entries.read(view, kind, now)
    found, unread = _events(api, namespace, view.ref.uid)
    note = unread
    if _pod_of_a_workload(kind, view) and view.controller is not None:
        note = (f"this pod belongs to {view.controller.kind} {view.controller.name}: the janitor marks and keeps "
                f"that workload, not its pods" + (f"; {unread}" if unread else ""))
    if args.output in ("json", "yaml"):
        print(render.dump(render.workload_document(view.ref, entry, found, now, note), args.output))
        return Exit.OK
    show_namespace = namespace != kubeapi.context_namespace(args.kubeconfig, context=args.context)
    print(render.explain_text(f"{kind.short}/{name}", namespace, entry, found, now, note=note,
                              show_namespace=show_namespace))
    return Exit.OK


def _keep(args: argparse.Namespace) -> int:
    kind, name = entries.parse_target(args.target)
    now = _now()
    until = entries.parse_until(args.until, now)
    api, namespace = _connect(args)
    target = f"{kind.short}/{name}"
    shown = ann.format_expires(until)
    for attempt in (1, 2):
        view = cluster.read_by_name(api, kind.resource, namespace, name)
        if view is None:
            print(f"kubectl janitor keep: {target} not found in namespace {namespace}", file=sys.stderr)
            return Exit.PROBLEMS
        decision = entries.decide_keep(entries.read(view, kind, now), target, until, now)
        if decision.refused is not None:
            print(f"kubectl janitor keep: {decision.refused}", file=sys.stderr)
            return Exit.PROBLEMS
        try:
            kube.annotate(api, view.ref, view.resource_version, {ann.KEEP_UNTIL: shown}, kind=kind.resource,
                          field_manager=FIELD_MANAGER)
            break
        except errors.Conflict:  # it changed since the read (a controller's status update): decide again
            if attempt == 2:
                raise
    print(f"{target} in {namespace}: {ann.KEEP_UNTIL}={shown} ({render.relative(until, now)}). The janitor does "
          "not reclaim it before then; janitor/expires shows the deadline in force after its next cycle.")
    for line in decision.notes:
        print(f"  note: {line}")
    return Exit.OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return Exit.USAGE
    return exits.run(f"kubectl janitor {args.command}", lambda: int(args.func(args)), forbidden_hint=FORBIDDEN_HINT,
                     usage=(UsageError,))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
