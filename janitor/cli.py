"""The `janitor` command: thin argument parsing that calls into the package.

`--help` is the first documentation most admins read, so it explains what the janitor does and
what each command is for, with examples, rather than only listing flags.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from janitor import __version__, annotations

DESCRIPTION = """\
kube-idle-janitor keeps shared GPU clusters clean. It finds pods that hold GPUs or CPUs and do
nothing (from Prometheus: dcgm-exporter, cAdvisor, kube-state-metrics), pods Pending or
Terminating for too long, and objects whose janitor/ttl or janitor/expires has passed. It marks
the workload that owns them, warns the owner on Slack, and only when the warning period is over
deletes, suspends or scales it to zero, unless it became active again or the owner extended it.

The annotation contract (kube-janitor compatible):
  janitor/ttl: 7d              delete when the object is older than this
                               (<integer><unit>, unit s m h d w; or 'forever')
  janitor/expires: 2026-12-24  delete after this time, in UTC
                               (YYYY-MM-DD, YYYY-MM-DDTHH:MM, YYYY-MM-DDTHH:MM:SSZ)
"""

EPILOG = """\
examples:
  janitor annotation janitor/ttl=7d
      explain what a value means, or why it is rejected (exit 1), before you set it
  janitor annotation janitor/expires=2026-12-24T18:00 janitor/ttl=36h

Run 'janitor COMMAND --help' for the options of one command.
"""


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
            print(f"{key}={value}: {_meaning(key, value)}")
        except ValueError as e:
            print(f"{key}={value}: {e}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


def _meaning(key: str, value: str) -> str:
    if key == annotations.TTL:
        ttl = annotations.parse_ttl(value)
        if ttl is None:
            return "never deleted for its age (forever)"
        return f"deleted once older than {ttl} ({int(ttl.total_seconds())} s after creation)"
    if key == annotations.EXPIRES:
        when = annotations.parse_expires(value)
        return f"deleted after {when.isoformat()} ({annotations.format_expires(when)})"
    raise ValueError(f"not an annotation users set; use {annotations.TTL} or {annotations.EXPIRES}")


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
        help="explain janitor/ttl and janitor/expires values, or why they are rejected",
        description=(
            "Parse annotation values exactly as the janitor does and say what they mean. "
            "Exits 1 if any value is invalid; an invalid value on a real object is reported "
            "as an Event and the object is kept."
        ),
    )
    annotation.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    annotation.set_defaults(func=_cmd_annotation)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

