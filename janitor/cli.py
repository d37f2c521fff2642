"""The `janitor` command: thin argument parsing that calls into the package.

`--help` is the first documentation most admins read, so it explains what the janitor does and
what each command is for, with examples, rather than only listing flags.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from janitor import __version__, cli_options, exits, node_report, words
from janitor import annotations as ann
from janitor.admission import JANITOR_USER
from janitor.exits import HELP as EXIT_HELP
from janitor.exits import Exit
from janitor.settings import DEFAULT_KINDS, Settings, from_args, logged, parse_kind
from janitor.settings import DEFAULTS as D

if TYPE_CHECKING:
    from janitor.cycle import Planned, Ports
    from janitor.decide.model import ObjectView
    from janitor.kubeapi import TimedApiClient

DESCRIPTION = """\
kube-idle-janitor keeps shared GPU clusters clean. It deletes objects whose janitor/ttl or
janitor/expires annotation has passed (kube-janitor compatible), on the kinds you list, behind
safety rails; every deletion is announced by an Event on the object and one audit log line.
Idle GPU/CPU detection from Prometheus follows policy files: in mode: shadow it reports what it
would reclaim; in mode: enforce it marks idle workloads (janitor/expires, janitor/policy), warns
their owners on Slack, reminds them, and deletes, suspends, scales to zero or stops the workload
once a delivered warning's notice has run out, unless it is in use again or kept.

The annotation contract (kube-janitor compatible):
  janitor/ttl: 7d              delete when the object is older than this
                               (<integer><unit>, unit s m h d w; or 'forever')
  janitor/expires: 2026-12-24  delete after this time, in UTC
                               (YYYY-MM-DD, YYYY-MM-DDTHH:MM, YYYY-MM-DDTHH:MM:SSZ)
"""

EPILOG = """\
examples:
  janitor plan                          what would be deleted now and why; changes nothing
  janitor explain Job/ml-team/train-7   every rule's verdict on one object, with the numbers
  janitor run --once --dry-run          one full cycle that deletes nothing (Events neither)
  janitor run                           the daemon: a cycle every --interval seconds
  janitor annotation janitor/ttl=7d     what a value means, or why it is rejected (exit 1)
  janitor check policies/               validate policy files: file:line: field: what is wrong
  janitor plan --policies policies/ --prometheus-url http://prometheus:9090
                                        add the idle GPU/CPU findings, the GPU-hours enforcing would
                                        reclaim, and the lifecycle's next step per workload
  janitor keep Job/team-a/train 2d      keep an idle workload (janitor/keep-until, within its cap)
  janitor unmark --dry-run              list (then remove) the janitor's own marks
  janitor rbac | kubectl apply -f -     the ClusterRole for the kinds the janitor cleans up
  janitor admission policies/ | kubectl apply -f -
                                        refuse at apply time a keep-until past a policy's cap

Safety rails on every deletion: protected namespaces (kube-system, kube-public,
kube-node-lease), the janitor/opt-out: "true" annotation, caps per hour and per day (in total
and per namespace), and a tripwire that stops all deletions when the number of candidates jumps;
resume after a trip with
  kubectl -n kube-idle-janitor annotate configmap janitor-state \\
      janitor/acknowledge-tripwire=$(date -u +%Y-%m-%dT%H:%M:%SZ) --overwrite
Deadlines are compared with the apiserver's clock; deletions pause while ours is off by more
than --max-clock-skew.

Run 'janitor COMMAND --help' for the options of one command.

""" + EXIT_HELP


def _cmd_annotation(args: argparse.Namespace) -> int:
    """Explain annotation values the way the janitor will read them."""
    failed = False
    for item in args.assignments:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"{item}: expected KEY=VALUE, e.g. janitor/ttl=7d", file=sys.stderr)
            failed = True
            continue
        try:
            print(f"{key}={value}: {words.meaning(key, value)}")
        except ValueError as e:
            print(f"{key}={value}: {e}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


def _json_logs(args: argparse.Namespace) -> bool:
    """--log-format, else as each command always logged: the daemons JSON (text with --once), the
    other commands text."""
    if args.log_format:
        return bool(args.log_format == "json")
    return args.command in cli_options.DAEMONS and not getattr(args, "once", False)


def _api(args: argparse.Namespace) -> TimedApiClient:
    """The client of --kubeconfig, $KUBECONFIG, ~/.kube/config or the in-cluster ServiceAccount."""
    from janitor import kubeapi

    read = getattr(args, "kube_timeout", None) or kubeapi.DEFAULT_TIMEOUT[1]
    return kubeapi.connect(args.kubeconfig, (min(5.0, read), read), context=getattr(args, "context", None))


def _ports(args: argparse.Namespace, settings: Settings, api: TimedApiClient | None = None) -> Ports:
    from janitor.act.slack import Slack
    from janitor.cycle import Ports

    slack = None
    if settings.slack.token:
        slack = Slack.connect(settings.slack.token, base_url=settings.slack.api_url,
                              admin_channel=settings.slack.admin_channel,
                              timeout=settings.slack.timeout.total_seconds())
    return Ports(api or _api(args), slack)


def _progress(kind: str, count: int) -> None:
    print(f"\rlisting {kind}: {count} objects ...".ljust(60), end="", file=sys.stderr, flush=True)


def _plan(args: argparse.Namespace, api: TimedApiClient | None = None) -> tuple[Settings, Planned] | None:
    """Observe and decide once; None (after printing them) when the policy files have errors."""
    from janitor.cycle import plan_once

    settings = from_args(args)
    planned = plan_once(_ports(args, settings, api), settings, progress=_progress if sys.stderr.isatty() else None)
    if sys.stderr.isatty():
        print("\r".ljust(60), end="\r", file=sys.stderr)
    for error in planned.memory.policy_errors:
        print(error, file=sys.stderr)
    return None if planned.memory.policy_errors else (settings, planned)


def _cmd_plan(args: argparse.Namespace) -> int:
    from janitor import report

    done = _plan(args)
    if done is None:
        return 1
    settings, planned = done
    dry_run, read = settings.rails.dry_run, len(planned.observation.objects)
    if args.output in ("json", "yaml"):
        from janitor import documents

        print(documents.dump(documents.plan_document(planned.plan, dry_run=dry_run, objects_read=read), args.output))
        return Exit.OK
    width = report.terminal_width(args.output)
    if args.output == "wide":
        print(report.plan_table(planned.plan, dry_run=dry_run))
    else:
        print(report.fit(report.plan_groups(planned.plan, dry_run=dry_run), width))
        print()
        print(report.plan_footer(planned.plan, width))
    print(f"{read} objects read.")
    if planned.policies:
        print()
        print(report.fit(report.idle_table(planned.plan), width))
        print()
        print(report.fit(report.lifecycle_table(planned.plan.changes), width))
    return Exit.OK


def _cmd_explain(args: argparse.Namespace) -> int:
    from janitor import report

    parts = args.object.split("/")
    if len(parts) not in (2, 3):
        print("name the object as KIND/NAMESPACE/NAME (or KIND/NAME if cluster-scoped)", file=sys.stderr)
        return 2
    kind, namespace, name = (parts[0], None, parts[1]) if len(parts) == 2 else parts
    api = _api(args)
    done = _plan(args, api)
    if done is None:
        return 1
    _, planned = done
    missing = _missing(api, planned, kind, namespace, name)
    if missing:
        print(f"janitor explain: {args.object}: {missing}", file=sys.stderr)
        return Exit.PROBLEMS
    if args.output in ("json", "yaml"):
        from janitor import documents

        ref, found, changes = report.subject(planned.plan, kind, namespace, name)
        print(documents.dump(documents.explain_document(planned.plan, ref, found, changes), args.output))
        return Exit.OK
    explained = report.explain(planned.plan, kind, namespace, name, args.object)
    print(report.fit(explained, report.terminal_width(args.output)))
    return Exit.OK


def _missing(api: TimedApiClient, planned: Planned, kind: str, namespace: str | None, name: str) -> str:
    """Why `explain` has nothing to say of an object no rule applies to, if it is not there at all
    ('' when it is): "no janitor rule applies" would read as "it is there, and safe"."""
    from janitor import report
    from janitor.observe import cluster

    if report.subject(planned.plan, kind, namespace, name)[0] is not None or any(
            report.matches(o.ref, kind, namespace, name) for o in planned.observation.objects):
        return ""
    known = next((k for k in DEFAULT_KINDS if kind.lower() in (k.kind.lower(), k.key.lower(), k.plural)), None)
    try:
        resource = known or parse_kind(kind)
    except ValueError as e:
        return str(e)
    if resource.namespaced and not namespace:
        return f"{resource.kind} is namespaced: name it as {resource.kind}/NAMESPACE/{name}"
    if cluster.read_by_name(api, resource, namespace if resource.namespaced else None, name) is not None:
        return ""
    where = f" in namespace {namespace}" if resource.namespaced else ""
    return f"there is no {resource.kind} named {name}{where}"


def _cmd_unmark(args: argparse.Namespace) -> int:
    from janitor.unmark import unmark

    settings = from_args(args)
    done = unmark(_api(args), settings, policy=args.policy, dry_run=args.dry_run)
    for item in done:
        print(f"{item.ref}  policy {item.policy}: {item.result}")
    failed = [d for d in done if d.result.startswith("not removed")]
    verb = "would be removed" if args.dry_run else "removed"
    print(f"{len(done) - len(failed)} marks {verb}" + (f", {len(failed)} failed" if failed else "") + ".")
    return 1 if failed else 0


def _keep_refused(view: ObjectView, target: str, until: datetime.datetime) -> str | None:
    """Why the janitor would not honour keeping `view` until then, or None. Said now, before the
    write: an admin who keeps a workload past its cap would otherwise learn at the deadline that it
    was not kept. The cap is the one the mark's janitor/why counts, as `kubectl janitor keep` reads
    it, so the command needs no policy files; without a note (an older janitor's mark) it writes."""
    from janitor.decide import why_notes
    from janitor.decide.deadlines import keep_cap

    notes = view.annotations
    mark = ann.read_mark(notes, view.foreign_marks)
    if mark is None or not mark.belongs_to(view.ref.uid) or mark.problems:
        return None  # not marked (or a mark the janitor removes): capped when it is marked
    if not mark.cap_trusted:
        keys = " and ".join(k for k in ann.CAP_KEYS if k in mark.foreign)
        return (f"{keys} on it was not written by the janitor (someone else wrote it last), so the janitor honours "
                "no keep-until on this mark; `janitor unmark` starts the mark again")
    note = why_notes.of_mark(mark, notes, view.foreign_marks)
    if note is None:
        return None
    cap = keep_cap(mark.marked_at, note.extension)
    if cap is None:
        return (f"policy {mark.policy} lets no one keep a workload (maxExtension {note.max_extension or '0s'}); "
                "raise its maxExtension to allow keeping")
    if until > cap:
        shown = ann.format_expires(cap)
        return (f"{ann.format_expires(until)} is past the cap of policy {mark.policy}, {shown} (maxExtension "
                f"{note.max_extension} after it was first marked); keep it until then at most: janitor keep "
                f"{target} {shown}")
    return None


def _cmd_keep(args: argparse.Namespace) -> int:
    """Write janitor/keep-until as an absolute UTC time, from a duration or a time."""
    from janitor import errors
    from janitor.act import kube
    from janitor.observe import cluster

    parts = args.object.split("/")
    if len(parts) != 3:
        print("name the workload as KIND/NAMESPACE/NAME, e.g. Job/team-a/train", file=sys.stderr)
        return 2
    try:
        kind = parse_kind(parts[0])
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        relative = ann.parse_ttl(args.until)
    except ValueError:
        relative = None
    try:
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        until = now + relative if relative else ann.parse_expires(args.until)
    except ValueError:
        print(f"{args.until!r}: give a duration from now (3d, 12h) or a UTC time (2026-12-01T18:00:00Z)",
              file=sys.stderr)
        return 2
    api = _api(args)
    try:
        view = cluster.read_by_name(api, kind, parts[1], parts[2])
        if view is None:
            print(f"{args.object} not found", file=sys.stderr)
            return 1
        refused = _keep_refused(view, args.object, until)
        if refused is not None:
            print(f"janitor keep: {args.object}: {refused}", file=sys.stderr)
            return Exit.PROBLEMS
        kube.annotate(api, view.ref, view.resource_version,
                      {ann.KEEP_UNTIL: ann.format_expires(until)}, kind=kind)
    except (errors.NotFound, errors.Conflict) as e:  # the rest (403, no answer) is one line from main()
        print(f"{args.object}: {e}", file=sys.stderr)
        return 1
    print(f"{args.object}: {ann.KEEP_UNTIL}={ann.format_expires(until)}. The janitor keeps it "
          "until then, at most its policy's maxExtension after it was first marked; janitor/expires shows the "
          "deadline in force after its next cycle.")
    return 0


def _cmd_node_agent(args: argparse.Namespace) -> int:
    from pathlib import Path

    from prometheus_client import CollectorRegistry

    from janitor import telemetry
    from janitor.node_agent.agent import AgentSettings, NodeAgent

    telemetry.configure_logging(args.log_level, json_lines=_json_logs(args))
    node = args.node_name or os.environ.get("NODE_NAME")
    if not node:
        print("--node-name (or $NODE_NAME, from the downward API's spec.nodeName) is required", file=sys.stderr)
        return 2
    settings = AgentSettings(node=node, proc_root=Path(args.proc_root), cgroup_root=Path(args.cgroup_root),
                             interval=datetime.timedelta(seconds=args.interval), sustain=args.sustain,
                             condition_type=args.condition_type, pod_uid=args.pod_uid or os.environ.get("POD_UID"),
                             dev_root=Path(args.dev_root), gpu_condition_type=args.gpu_condition_type)
    registry = CollectorRegistry()
    api = _api(args)
    if not args.once:
        from janitor.outage import Outage

        api.outage = Outage("the apiserver")  # an apiserver out of reach: one line, not one per request and scan
    agent = NodeAgent(api, settings, registry)
    if args.once:
        report = agent.scan_once()
        for leftover in report.leftovers:
            print(f"leftover: {leftover.describe(agent.clock())}")
        for holder in report.gpu_holders:
            print(f"gpu held: {holder.describe(agent.clock())}")
        for kill in report.oom_kills:
            print(f"oom: pod uid {kill.pod_uid}: {kill.new_kills} new kills ({kill.total} in all)")
        return 0
    if args.metrics_port:
        agent.serve(args.metrics_port)
    stopping = {"now": False}

    def stop(signum: int, frame: object) -> None:
        stopping["now"] = True

    import signal

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.run_forever(stop=lambda: stopping["now"])
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import logging

    from janitor import cycle, daemon, report, telemetry

    telemetry.configure_logging(args.log_level, json_lines=_json_logs(args))
    settings = from_args(args)
    api = _api(args)  # a kubeconfig it cannot use is one line, before anything is logged
    # Every setting once, at start, one per line and no secret, so a log shows what ran.
    logging.getLogger("janitor").info("kube-idle-janitor %s starting", __version__)
    for line in logged(settings):
        key, _, value = line.partition("=")
        logging.getLogger("janitor.settings").info("%s", line, extra={"setting": key, "value": value})
    if api.insecure:
        logging.getLogger("janitor.kubeapi").warning("%s", api.insecure)
    ports = _ports(args, settings, api)
    metrics = telemetry.Telemetry()
    if args.once:
        slack_error = ports.slack.check_token() if ports.slack is not None else ""
        if slack_error:
            print(f"janitor run: Slack does not accept the bot token ({slack_error}): no warning can be sent, so "
                  "nothing idle is reclaimed -- check --slack-token or $SLACK_BOT_TOKEN", file=sys.stderr)
        result = cycle.run_cycle(ports, settings, cycle.Memory())
        daemon.record(metrics, result)
        print(report.plan_table(result.plan, dry_run=settings.rails.dry_run))
        failed = [r for r in result.results if str(r.outcome) in ("failed", "forbidden")]
        if result.memory.policies is None:
            print("no valid policy set: nothing was done (see `janitor check`)", file=sys.stderr)
        if failed or result.memory.policies is None:
            return Exit.PROBLEMS
        return Exit.DENIED if slack_error else Exit.OK
    from janitor.heap import fewer_arenas, fixed_mmap_threshold
    from janitor.outage import Outage

    fewer_arenas()  # before the watch threads start: they share two malloc arenas (janitor.heap)
    fixed_mmap_threshold()  # big blocks are mappings, handed back when freed
    api.outage = Outage("the apiserver")  # an apiserver out of reach: one line, not one per request
    if args.watch_cache:
        from janitor.observe.cache import ClusterCache

        ports.cache = ClusterCache(ports.api, settings)  # every request of it waits --kube-timeout at most
        from janitor.observe.carry import BusyCarry

        # Two missed cycles, or one that ran past its budget, and the next reads everything whole.
        ports.busy = BusyCarry(max_pause=2 * settings.interval + settings.cycle_budget)
    elector = None
    if settings.leader.elect if settings.leader.elect is not None else api.in_cluster:
        import socket

        from janitor.leader import LeaseElector, LeaseSettings

        duration = settings.leader.lease_duration
        elector = LeaseElector(ports.api, LeaseSettings(
            namespace=settings.cluster.state_namespace, name=settings.leader.lease_name,
            identity=os.environ.get("POD_NAME") or socket.gethostname(), lease_duration=duration,
            renew_deadline=duration * 2 / 3, retry_period=duration / 7))
    daemon.run_forever(ports, settings, metrics, metrics_port=args.metrics_port, elector=elector)
    return 0


def _cmd_rbac(args: argparse.Namespace) -> int:
    import yaml

    from janitor import rbac

    if args.node_agent:
        role = rbac.node_agent_role(name=args.name)
    else:
        kinds = tuple(parse_kind(k.strip()) for k in args.kinds.split(",") if k.strip())
        role = rbac.cluster_role(kinds, name=args.name)
    docs = [role, rbac.cluster_role_binding(name=args.name, role=args.name, namespace=args.namespace,
                                            service_account=args.service_account,
                                            component="node-agent" if args.node_agent else "janitor")]
    if not args.node_agent:  # the state ConfigMap's first create, in the janitor's namespace only
        state = f"{args.name}-state"
        docs += [rbac.state_role(namespace=args.namespace, name=state),
                 rbac.role_binding(name=state, role=state, namespace=args.namespace,
                                   service_account=args.service_account)]
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    """Validate policy files; print every error (stderr, exit 1) or the policies in match order."""
    from janitor.policy import load

    loaded = load.from_paths(args.paths, parse_duration=ann.parse_ttl)
    for error in loaded.errors:
        print(error, file=sys.stderr)
    if loaded.errors:
        print(f"{len(loaded.errors)} error(s); the format is in docs/policies.md", file=sys.stderr)
        return 1

    for line in words.policy_lines(loaded.policies):
        print(line)
    files = len(loaded.files)
    print(f"OK: {len(loaded.policies)} policies in {files} file{'s' if files != 1 else ''}, in first-match order.")
    return 0


def _cmd_admission(args: argparse.Namespace) -> int:
    """Print the admission policies that hold everyone but the janitor to its contract at apply time:
    its own annotations stay its own and, from policy files, the policies' caps."""
    import yaml

    from janitor import admission
    from janitor.policy import load

    kinds = tuple(parse_kind(k.strip()) for k in args.kinds.split(",") if k.strip())
    documents = []
    if args.paths:
        loaded = load.from_paths(args.paths, parse_duration=ann.parse_ttl)
        for error in loaded.errors:
            print(error, file=sys.stderr)
        if loaded.errors:
            return Exit.PROBLEMS
        documents += admission.caps_policy(loaded.policies, [k for k in kinds if k.namespaced], name=args.name,
                                           admin_channel=args.admin_channel)
    documents += admission.marks_policy(kinds, janitor=args.janitor_user, admin_channel=args.admin_channel)
    print(yaml.safe_dump_all(documents, sort_keys=False, width=1000), end="")
    return Exit.OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="janitor",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    annotation = commands.add_parser(
        "annotation",
        help="explain the values of the annotations users set (janitor/ttl, expires, keep-until, opt-out, "
             "owner, time-zone), or why they are rejected",
        description=(
            "Parse annotation values exactly as the janitor does and say what they mean. "
            "Exits 1 if any value is invalid; an invalid value on a real object is reported "
            "as an Event and the object is kept."
        ),
    )
    annotation.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    annotation.set_defaults(func=_cmd_annotation)

    check = commands.add_parser(
        "check",
        help="validate policy files; print file:line: field: problem for each mistake",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Validate policy files (YAML) and print each mistake as file:line: field: what is wrong, with
the accepted forms (exit 1), or a summary of the policies in the order they are matched (exit 0).
A directory means its *.yaml and *.yml files, sorted by name; policies keep their order within
a file. The daemon reads policies the same way.

First match wins, per trigger: for each trigger kind (idleGpu, idleCpu, pending, terminating)
the first policy in that order that defines it and whose match selects a workload decides for
that workload; later policies are not consulted for that trigger. Put narrow policies (one team,
Notebooks only) before broad ones (every namespace).

New policies run in mode: shadow (report only) unless they say mode: enforce. The examples in
policies/ match no namespace until you list yours. The file format, defaults and how policies
interact with janitor/ttl, janitor/expires and janitor/opt-out: docs/policies.md.""",
        epilog="examples:\n  janitor check policies/\n  janitor check policies/idle-gpu.yaml my-team.yaml",
    )
    check.add_argument("paths", nargs="+", metavar="PATH", help="policy files or directories")
    check.set_defaults(func=_cmd_check)

    plan = commands.add_parser("plan", help="show what would happen now and why; changes nothing",
                               description="Read the cluster, decide, and print the plan as a table. "
                                           "Nothing is changed.")
    cli_options.output(plan)
    cli_options.cluster(plan)
    cli_options.idle(plan)
    plan.set_defaults(func=_cmd_plan)

    explain = commands.add_parser("explain", help="every rule's verdict on one object",
                                  description="Explain what the janitor thinks of one object and why. An object "
                                              "that does not exist is said to be missing, and exits 1.")
    explain.add_argument("object", metavar="KIND/NAMESPACE/NAME")
    cli_options.output(explain)
    cli_options.cluster(explain)
    cli_options.idle(explain)
    explain.set_defaults(func=_cmd_explain)

    unmark_cmd = commands.add_parser(
        "unmark", help="remove the janitor's own marks (all, or one policy's)",
        description="Remove janitor/expires, janitor/policy, janitor/reason and the warning records from every "
                    "object the janitor marked (with --policy, only that policy's marks). A user's own "
                    "janitor/expires (without janitor/policy) and janitor/keep-until are never touched. Use it "
                    "before uninstalling, or after a policy marked what it should not have; an enforcing "
                    "policy that still finds the workload idle marks it again on its next cycle.")
    unmark_cmd.add_argument("--policy", help="only marks of this policy")
    unmark_cmd.add_argument("--dry-run", action="store_true", help="list what would be removed, change nothing")
    cli_options.cluster(unmark_cmd)
    unmark_cmd.set_defaults(func=_cmd_unmark)

    keep_cmd = commands.add_parser(
        "keep", help="keep an idle workload a while longer (writes janitor/keep-until)",
        description="Write janitor/keep-until on a workload so the janitor does not reclaim it before then. "
                    "UNTIL is a duration from now (3d, 12h) or a UTC time (2026-12-01T18:00:00Z). The policy "
                    "caps it at maxExtension after the first mark: on a marked workload a later time is refused "
                    "(exit 1, nothing written), saying the cap its janitor/why records. Using the workload again "
                    "removes the mark altogether.",
        epilog="example:\n  janitor keep Job/team-a/train 2d")
    keep_cmd.add_argument("object", metavar="KIND/NAMESPACE/NAME")
    keep_cmd.add_argument("until", metavar="UNTIL")
    cli_options.kube(keep_cmd)
    keep_cmd.set_defaults(func=_cmd_keep)

    agent = commands.add_parser(
        "node-agent", help="run on every node (DaemonSet): D-state leftovers and GPU holders of deleted pods, OOM "
                           "kills per pod",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Scan /proc (threads included) for tasks in D state and map each to its pod through its cgroup
path; a task of a pod that is gone, or Terminating past its grace, that stays in D for
--sustain scans is a leftover: the Node gets condition --condition-type=True (cleared when they
are gone; its lastHeartbeatTime moves every scan, so a silent agent shows) and a Warning Event
naming pod, process, time in D and wchan. New OOM kills in a pod's memory cgroup (cgroup v2
memory.events) become a Warning Event on the Pod, saying whether the whole container or single
processes were killed. An agent that finds no process of any other pod the API lists on its
node (no hostPID, a --proc-root that is not the host's /proc, a sandboxed runtime) sets the
condition Unknown (NodeAgentCannotSee) and proves no pod gone. A process of such a pod (in any
state) that keeps a GPU device (/dev/nvidia<minor> under --dev-root) open or mapped for
--sustain scans sets --gpu-condition-type=True, naming the GPU (minor, PCI bus id, UUID), the
pod, the process and since when, with a Warning Event on the Node; nothing is killed. Metrics
are per node. Run with hostPID, /proc and /sys/fs/cgroup mounted read-only, and the narrow RBAC
of manifests/ (list pods, get and patch-status nodes, events).""")
    agent.add_argument("--node-name", help="this node (default: $NODE_NAME)")
    agent.add_argument("--pod-uid", help="the agent's own pod, whose processes prove nothing about what it can see "
                                         "(default: $POD_UID, from the downward API's metadata.uid)")
    agent.add_argument("--proc-root", default="/proc", help="the host's /proc (%(default)s)")
    agent.add_argument("--cgroup-root", default="/sys/fs/cgroup", help="the host's cgroup mount (%(default)s)")
    agent.add_argument("--interval", type=float, default=30.0, help="seconds between scans (%(default)s)")
    agent.add_argument("--sustain", type=int, default=3,
                       help="scans a task must stay in D before it counts (%(default)s)")
    agent.add_argument("--condition-type", default=node_report.CONDITION_TYPE, help="(%(default)s)")
    agent.add_argument("--gpu-condition-type", default=node_report.GPU_CONDITION_TYPE,
                       help="the condition for GPUs held by processes of deleted pods (%(default)s)")
    agent.add_argument("--dev-root", default="/dev", help="where the GPU device files are, as the processes "
                                                         "opened them (%(default)s)")
    agent.add_argument("--metrics-port", type=int, default=9101,
                       help="/metrics and /healthz (%(default)s; 0: none)")
    agent.add_argument("--once", action="store_true", help="one scan, print what it found, exit")
    agent.add_argument("--log-level", default="INFO")
    cli_options.kube(agent)
    agent.set_defaults(func=_cmd_node_agent)

    admission_cmd = commands.add_parser(
        "admission", help="print the admission policies that refuse, at apply time, what the janitor would not "
                          "honour",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Generate ValidatingAdmissionPolicies (and bindings), so the apiserver refuses at `kubectl apply`
time, saying what to do instead and whom to ask:
  - kube-idle-janitor-marks: a change to the janitor's own annotations (its mark: janitor/policy,
    janitor/marked-at, janitor/warned-*, ..., and janitor/expires on a marked object) by anyone but
    the janitor (--janitor-user) and cluster admins (who may delete this policy); a controller's
    copy (a ReplicaSet copying its Deployment's annotations) is left alone. manifests/base has it.
  - kube-idle-janitor-caps, from policy files: janitor/keep-until on a marked workload later than
    its policy's maxExtension after the first mark; janitor/opt-out: "true" on a workload whose
    governing policy enforces with honourOptOut: false. Apply it again whenever the files change.
Admission has no clock: a keep-until on a workload not yet marked is capped when it is marked.
Needs Kubernetes 1.30+ (ValidatingAdmissionPolicy v1).""",
        epilog="example:\n  janitor admission policies/ --admin-channel '#gpu-admins' | kubectl apply -f -")
    admission_cmd.add_argument("paths", nargs="*", metavar="PATH",
                               help="policy files or directories (none: only kube-idle-janitor-marks)")
    admission_cmd.add_argument("--janitor-user", default=JANITOR_USER,
                               help="the username the janitor writes as, the only one (besides cluster admins) "
                                    "that may change its annotations (default: %(default)s, as manifests/base "
                                    "deploys it)")
    admission_cmd.add_argument("--admin-channel", help="named in every refusal as where to ask, e.g. #gpu-admins")
    admission_cmd.add_argument("--kinds", default=",".join(k.key for k in DEFAULT_KINDS),
                               help="the kinds it checks: those the janitor cleans up (default: %(default)s)")
    admission_cmd.add_argument("--name", default="kube-idle-janitor-caps", help="(%(default)s)")
    admission_cmd.set_defaults(func=_cmd_admission)

    rbac_cmd = commands.add_parser(
        "rbac", help="print the ClusterRole (and binding) the janitor needs for --kinds, and its state Role",
        description="The janitor's RBAC comes from the same kinds list it cleans up: get, list, patch and "
                    "delete on each kind, Events, and its state ConfigMap (created in --namespace only, by a "
                    "Role there). A kind left out of the role is "
                    "skipped and counted, never half-handled. Apply with: janitor rbac | kubectl apply -f -",
    )
    rbac_cmd.add_argument("--kinds", default=",".join(k.key for k in DEFAULT_KINDS), help="(default: %(default)s)")
    rbac_cmd.add_argument("--name", default="kube-idle-janitor", help="ClusterRole and binding name (%(default)s)")
    rbac_cmd.add_argument("--namespace", default="kube-idle-janitor",
                          help="the ServiceAccount's namespace (%(default)s)")
    rbac_cmd.add_argument("--service-account", default="kube-idle-janitor", help="(%(default)s)")
    rbac_cmd.add_argument("--node-agent", action="store_true",
                          help="the node agent's narrow role instead (list pods, get nodes, patch nodes/status, "
                               "create events); give --name and --service-account for it")
    rbac_cmd.set_defaults(func=_cmd_rbac)

    run = commands.add_parser("run", help="run the janitor (a cycle every --interval, or --once)",
                              description="Observe, decide and act on a schedule. Every action is an "
                                          "Event on the object and one audit log line.")
    run.add_argument("--once", action="store_true", help="one cycle, print the plan, exit (1 if an action failed)")
    run.add_argument("--dry-run", action="store_true",
                     help="decide and validate against the apiserver (dryRun=All), change nothing")
    run.add_argument("--interval", type=float, default=D.interval.total_seconds(),
                     help="seconds between cycles (%(default)s)")
    run.add_argument("--cycle-budget", type=float, default=D.cycle_budget.total_seconds(),
                     help="seconds a cycle may take; one that takes longer is abandoned (it acts no further, "
                          "/healthz fails, the lease is let go) and counted (%(default)s)")
    run.add_argument("--metrics-port", type=int, default=8080, help="/metrics, /healthz and /readyz (%(default)s)")
    run.add_argument("--watch-cache", action=argparse.BooleanOptionalAction, default=True,
                     help="list each kind once, then follow it with a watch, so a steady cycle reads what changed, "
                          "not the cluster (what an action depends on is still read fresh first); a cycle while a "
                          "kind is not synced does nothing and says so on /readyz (default: on; not with --once)")
    run.add_argument("--node-refresh", type=float, default=D.cluster.node_refresh.total_seconds(),
                     help="with the watch cache, seconds between lists of the nodes, which are listed (compressed) "
                          "rather than watched: a watch brings every kubelet status report whole, a list costs the "
                          "same however often kubelets report. Deciding reads nodes as of their last list (at most "
                          "this old, plus 30 s and a list's time; a node agent's report is judged as of the list); "
                          "an action re-reads the nodes it depends on first. 0: watch nodes (%(default)s)")
    run.add_argument("--orphaned-claims-after", type=float, default=D.cluster.claims_after.total_seconds(),
                     help="seconds a DRA ResourceClaim must have held its devices with no live consumer (allocated and "
                          "reserved for nobody, or only for pods that are gone) before the admin report lists it; it "
                          "is never changed. 0: ResourceClaims are not read (%(default)s)")
    run.add_argument("--log-level", default="INFO")
    leader = run.add_argument_group(
        "leader election", "Run two replicas: the one holding a coordination.k8s.io Lease in the state namespace acts, "
        "the other stands by and takes over within a lease duration of the leader dying (at once when it stops "
        "cleanly). The leader stops writing as soon as it cannot prove it still holds the lease.")
    leader.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=None,
                        help="default: on in-cluster, off with a kubeconfig")
    leader.add_argument("--lease-name", default=D.leader.lease_name, help="(%(default)s)")
    leader.add_argument("--lease-duration", type=float, default=D.leader.lease_duration.total_seconds(),
                        help="seconds; the leader fences itself after 2/3 of it without a renewal (%(default)s)")
    cli_options.cluster(run)
    cli_options.idle(run)  # with `run`, policies are re-read every cycle; findings go to logs and metrics
    cli_options.lifecycle(run)
    run.set_defaults(func=_cmd_run)
    for name, command in commands.choices.items():
        cli_options.log_format(command, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return Exit.USAGE
    if args.command not in cli_options.DAEMONS:
        import logging

        # What these commands could log (a kind skipped for RBAC) is in their output; only errors here.
        if _json_logs(args):
            from janitor import telemetry

            telemetry.configure_logging("ERROR")
        else:
            logging.basicConfig(level=logging.ERROR, format="janitor: %(message)s")
    return exits.run(f"janitor {args.command}", lambda: int(args.func(args)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

