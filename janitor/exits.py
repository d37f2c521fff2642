"""What the `janitor` command exits with, and the one line it prints when it cannot do its work.

A researcher who runs `janitor keep` on a laptop without a kubeconfig, or with `edit` rights only,
should read what failed and what to do, not a client library's traceback. So every failure the
command can expect (no or a broken kubeconfig, an unknown context, a cluster CA that does not
match, refused credentials, 403, an apiserver that does not answer, a file that cannot be read) is
turned here into an exit code and one line. Why there was no answer is read from the exception
chain (janitor.transport), never from a client library's message text: a TLS failure is a
kubeconfig problem (3), saying what to check, not a network one (5). Anything else is a bug in
the janitor and keeps its traceback.

The codes are documented in `janitor --help`, so scripts can tell "found problems" (1) from
"could not look" (3 to 5).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from enum import IntEnum

import urllib3
from kubernetes.client.exceptions import ApiException

from janitor import errors, kubeapi, transport


class Exit(IntEnum):
    OK = 0
    PROBLEMS = 1  # the command ran and found problems: invalid values, failed actions, policy errors
    USAGE = 2  # wrong arguments (argparse's own code)
    CONFIG = 3  # no kubeconfig, a broken one, an unknown context, a cluster CA that does not match (TLS), a file
    # that cannot be read
    DENIED = 4  # credentials refused (401), not allowed (403), Slack refused the bot token
    UNREACHABLE = 5  # the apiserver (or Slack) did not answer in time, or not at all
    INTERRUPTED = 130


HELP = """\
exit codes:
  0  done                              3  no kubeconfig, a broken one, an unknown context,
  1  done, and found problems             a cluster CA that does not match (TLS), or a
     (invalid values, failed actions,     file that cannot be read
     policy errors)                    4  credentials refused or not allowed (HTTP 401/403)
  2  wrong arguments                   5  the apiserver did not answer (network, timeout)
Expected failures print one line on stderr saying what failed and what to do; no traceback."""

FORBIDDEN_HINT = ("ask your cluster admins for this right; `janitor plan`, `explain`, `unmark` and `run` read the "
                  "whole cluster (the janitor's ClusterRole: `janitor rbac`)")


def failure(error: BaseException, *, forbidden_hint: str = FORBIDDEN_HINT) -> tuple[Exit, str] | None:
    """(exit code, one line) for a failure a user can meet and fix; None for a bug. `forbidden_hint`
    says what to do about a 403 (the `janitor` command's reads need the cluster, `kubectl janitor`'s
    only the namespace)."""
    if isinstance(error, KeyboardInterrupt):
        return Exit.INTERRUPTED, "interrupted"
    if isinstance(error, errors.ConfigError):
        return Exit.CONFIG, str(error)
    if transport.tls_error(error) is not None:  # it answered, with a certificate we do not trust
        said = transport.no_answer(error, "the apiserver")
        doing = error.doing if isinstance(error, errors.KubeError) and error.doing else ""
        return Exit.CONFIG, f"{doing + ': ' if doing else ''}{said} -- {said.advice}"
    if isinstance(error, ApiException | urllib3.exceptions.HTTPError):
        error = kubeapi.failed(error, doing="")
    if isinstance(error, errors.Unauthorized):
        return Exit.DENIED, f"{error} -- the apiserver does not accept these credentials: log in again or check " \
                            "the kubeconfig's user"
    if isinstance(error, errors.Forbidden) and "denied request" in error.server_message:
        return Exit.DENIED, str(error)  # an admission policy said no, and says why and whom to ask
    if isinstance(error, errors.Forbidden):
        return Exit.DENIED, f"{error} -- {forbidden_hint}"
    if isinstance(error, errors.KubeError) and error.temporary:
        return Exit.UNREACHABLE, f"{error} -- the apiserver did not answer; check the network (VPN?) and the " \
                                 "kubeconfig's server, or try again"
    if isinstance(error, errors.KubeError):
        return Exit.PROBLEMS, str(error)
    if isinstance(error, OSError) and error.filename:
        return Exit.CONFIG, f"{error.filename}: {error.strerror or error}"
    return None


def run(prog: str, command: Callable[[], int], *, forbidden_hint: str = FORBIDDEN_HINT,
        usage: tuple[type[Exception], ...] = ()) -> int:
    """Run one command of `prog` ("janitor plan"): its exit code, or the one line and the code of an
    expected failure; a bug keeps its traceback."""
    try:
        return int(command())
    except BrokenPipeError:  # `janitor plan | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    except usage as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return Exit.USAGE
    except BaseException as error:  # noqa: BLE001 - expected failures become one line; bugs are re-raised
        known = failure(error, forbidden_hint=forbidden_hint)
        if known is None:
            raise
        code, line = known
        if sys.stderr.isatty():
            print("\r".ljust(60), end="\r", file=sys.stderr)  # a progress line may be showing
        print(f"{prog}: {line}", file=sys.stderr)
        return code
