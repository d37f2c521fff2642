"""`python -m devenv up | demo | status | down | populate`: the local sandbox from the command line.

`up` runs the sandbox in the foreground (Ctrl-C stops everything it started); `up --detach`
leaves it running in the background for other terminals, which find it through the env file.
`up --scale` sizes it for thousands of nodes, which `populate --nodes N` then creates.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from devenv import report
from devenv.prometheus_release import ENV, NAMES
from devenv.sandbox import Sandbox, read_env_file

DEFAULT_RUN_DIR = Path(__file__).resolve().parent.parent / ".devenv"


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop()


def _serve(sandbox: Sandbox, *, demo: bool, exit_after: bool) -> int:
    signal.signal(signal.SIGTERM, _raise_stop)
    started = time.monotonic()
    print(f"Starting the sandbox in {sandbox.run_dir} ...", file=sys.stderr, flush=True)
    try:
        sandbox.start()
        print(f"Sandbox ready in {time.monotonic() - started:.0f}s {sandbox.timings}", flush=True)
        janitor = None
        if demo:
            from devenv import demo as demo_mod

            demo_mod.run(sandbox)
            print(report.status(sandbox.environment()), flush=True)
            janitor = demo_mod.janitor_demo(sandbox)
        else:
            print(report.status(sandbox.environment()), flush=True)
        print(f"\nEnvironment: source {sandbox.env_file}", flush=True)
        if exit_after:
            return 0
        print("Running. Ctrl-C (or `python -m devenv down`) stops it.", flush=True)
        while True:
            time.sleep(15 if janitor else 3600)
            if janitor:
                demo_mod.cycle(janitor, sandbox)
    except (KeyboardInterrupt, _Stop):
        print("\nStopping the sandbox ...", file=sys.stderr)
        return 0
    finally:
        # A second Ctrl-C (or SIGTERM) must not abort the orderly stop and leak an apiserver.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sandbox.stop()
        sandbox.env_file.unlink(missing_ok=True)


def _detach(run_dir: Path, demo: bool, options: list[str]) -> int:
    """Start `up` in its own session and return once its env file appears (or it dies)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env_file = run_dir / "sandbox.env"
    env_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "devenv", "--run-dir", str(run_dir), "demo" if demo else "up", *options]
    with open(run_dir / "sandbox.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    while not env_file.exists():
        if proc.poll() is not None:
            print(f"The sandbox failed to start; see {run_dir / 'sandbox.log'}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    print(report.status(read_env_file(env_file)))
    print(f"\nEnvironment: source {env_file}")
    return 0


def _running(run_dir: Path) -> int | None:
    """The pid of the sandbox running in `run_dir`, if one is: two would share its etcd data."""
    env_file = run_dir / "sandbox.env"
    if not env_file.exists():
        return None
    try:
        pid = int(read_env_file(env_file)["SANDBOX_PID"])
        os.kill(pid, 0)
    except (KeyError, ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass  # alive, another user's
    return pid


def _down(run_dir: Path) -> int:
    env_file = run_dir / "sandbox.env"
    if not env_file.exists():
        print("No sandbox is running here.")
        return 0
    pid = int(read_env_file(env_file)["SANDBOX_PID"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        env_file.unlink(missing_ok=True)
        print("The sandbox had already stopped.")
        return 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            print("Sandbox stopped.")
            return 0
        time.sleep(0.3)
    print(f"Sandbox process {pid} did not stop within 60s", file=sys.stderr)
    return 1


def _populate(env_file: Path, args: argparse.Namespace) -> int:
    from devenv import populate

    if not env_file.exists():
        print("No sandbox is running here. Start one with: python -m devenv up --scale --detach", file=sys.stderr)
        return 1
    env = read_env_file(env_file)
    api = populate.Api(Path(env["KUBECONFIG"]))
    if args.delete:
        print(json.dumps(populate.delete(api, workers=args.workers), indent=2))
        return 0
    if args.nodes <= 0:
        print("populate needs --nodes N (or --delete)", file=sys.stderr)
        return 2
    if "SANDBOX_SCALE" not in env:
        print("note: this sandbox was not started with --scale: its exporters and Prometheus cover only the "
              "nodes it started with", file=sys.stderr)
    summary = populate.populate(api, nodes=args.nodes, first=args.first, pods_per_node=args.pods_per_node,
                                gpus_per_node=args.gpus_per_node, namespaces=args.namespaces, workers=args.workers)
    if args.check:
        summary["check"] = populate.check_pods(api)
    print(json.dumps(summary, indent=2))
    return 1 if summary["failed"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devenv",
        description=(
            "The local sandbox: a real kube-apiserver, etcd, controller-manager and scheduler "
            "(built from Go modules), kwok fake GPU nodes, synthetic dcgm-exporter/cAdvisor/"
            "kube-state-metrics/node-exporter scraped by a real Prometheus, and a Slack Web API "
            "stand-in, all on 127.0.0.1."
        ),
    )
    parser.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="default: %(default)s")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in (
        ("up", "start the sandbox and keep it running (Ctrl-C stops it)"),
        ("demo", "start the sandbox, create demo workloads and show what runs"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--detach", action="store_true", help="run in the background and return")
        p.add_argument("--exit", action="store_true", help="stop again after showing the status")
        p.add_argument("--scale", action="store_true",
                       help="size the sandbox for thousands of nodes (control-plane flags, watched pods, one "
                            "scrape target per exporter kind, 15 s scrape interval); see `populate`")
        p.add_argument("--scrape-interval", help="Prometheus' scrape interval (default 2s, 15s with --scale)")
        p.add_argument("--prometheus", choices=NAMES, default=None,
                       help=f"Debian's Prometheus 2.x or 3.x built from its Go module once (default: ${ENV}, "
                            "else prom2)")
    sub.add_parser("status", help="show what runs in a started sandbox")
    sub.add_parser("down", help="stop a detached sandbox")
    pop = sub.add_parser("populate", help="create many kwok GPU nodes and workloads in a running sandbox",
                         description="Create N kwok GPU nodes scale-node-00001... and a realistic workload mix on "
                                     "each, in namespaces team-NN; --delete removes them again.")
    pop.add_argument("--nodes", type=int, default=0, help="how many nodes to create")
    pop.add_argument("--first", type=int, default=1, help="index of the first node (to add more later)")
    pop.add_argument("--pods-per-node", type=int, default=20)
    pop.add_argument("--gpus-per-node", type=int, default=8)
    pop.add_argument("--namespaces", type=int, default=50)
    pop.add_argument("--workers", type=int, default=16, help="concurrent connections to the apiserver")
    pop.add_argument("--check", action="store_true", help="afterwards, count the pods the controllers adopted")
    pop.add_argument("--delete", action="store_true", help="delete every populated namespace and node")
    args = parser.parse_args(argv)

    if args.command in ("up", "demo"):
        running = _running(args.run_dir)
        if running is not None:
            print(f"A sandbox is already running in {args.run_dir} (pid {running}); stop it first with: "
                  f"python -m devenv --run-dir {args.run_dir} down, or use another --run-dir", file=sys.stderr)
            return 1
        if args.detach:
            options = [*(["--scale"] if args.scale else []),
                       *(["--scrape-interval", args.scrape_interval] if args.scrape_interval else []),
                       *(["--prometheus", args.prometheus] if args.prometheus else [])]
            return _detach(args.run_dir, demo=args.command == "demo", options=options)
        interval = args.scrape_interval or ("15s" if args.scale else "2s")
        box = Sandbox(args.run_dir, scale=args.scale, scrape_interval=interval, prometheus_release=args.prometheus)
        return _serve(box, demo=args.command == "demo", exit_after=args.exit)
    env_file = args.run_dir / "sandbox.env"
    if args.command == "populate":
        return _populate(env_file, args)
    if args.command == "status":
        if not env_file.exists():
            print("No sandbox is running here. Start one with: python -m devenv up --detach")
            return 1
        print(report.status(read_env_file(env_file)))
        return 0
    return _down(args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
