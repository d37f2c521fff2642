"""Why a request got no answer, read from its exception chain and said in the project's words.

A client library reports a failed connection as text of its own ("HTTPSConnectionPool(host=...):
Max retries exceeded with url: ... (Caused by SSLError(SSLCertVerificationError(1, '[SSL:
CERTIFICATE_VERIFY_FAILED] ..."). Parsing that text breaks with each release and cuts messages in
half; the exceptions themselves say it all: each error's `__cause__` and `__context__`, urllib3's
`reason` (of a MaxRetryError) and the errors it wraps in its `args` (ProtocolError). So the chain is
walked, and what is found there is classified by type: a refused connection, a name that does not
resolve, a timeout, a reset, a TLS failure (the certificate not trusted, or the handshake refused).

A TLS failure is not a network problem: the server answered, with a certificate the kubeconfig
does not trust, and trying again changes nothing; the CLI says what to check and exits 3, as for
any other kubeconfig problem (janitor.exits). Pure: the standard library only, no client library.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

_DEPTH = 20  # a chain longer than this is not a client library's


class Cause(StrEnum):
    REFUSED = "refused"
    UNRESOLVED = "unresolved"
    TIMEOUT = "timeout"
    RESET = "reset"
    TLS = "tls"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """Why there was no answer: the cause, the server ("host:port", when the chain names it), and
    the words for it ("connection refused")."""

    cause: Cause
    where: str
    words: str
    advice: str = ""  # for TLS: what to check

    def __str__(self) -> str:
        return f"{self.where}: {self.words}" if self.where else self.words


def chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and every error behind it, each once, nearest first."""
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo and len(seen) < _DEPTH:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        behind: list[object] = [current.__cause__, current.__context__, getattr(current, "reason", None),
                                *current.args]
        todo.extend(e for e in behind if isinstance(e, BaseException))


def tls_error(error: BaseException) -> ssl.SSLError | None:
    """The TLS failure behind `error`, if there is one."""
    return next((e for e in chain(error) if isinstance(e, ssl.SSLError)), None)


def no_answer(error: BaseException, server: str = "the server") -> NoAnswer:
    """What went wrong with a request that got no HTTP answer, in words; `server` names it in a
    TLS failure ("the apiserver")."""
    errors = list(chain(error))
    where = _where(errors)
    tls = next((e for e in errors if isinstance(e, ssl.SSLError)), None)
    if tls is not None:
        return _tls(tls, where, server)
    names = {type(e).__name__ for e in errors}
    first = next((e for e in errors if isinstance(e, ConnectionRefusedError)), None)
    if first is not None:
        return NoAnswer(Cause.REFUSED, where, "connection refused")
    unresolved = next((e for e in errors if isinstance(e, socket.gaierror)), None)
    if unresolved is not None:
        return NoAnswer(Cause.UNRESOLVED, where, f"the name does not resolve ({unresolved.strerror or unresolved})")
    if "ConnectTimeoutError" in names:
        return NoAnswer(Cause.TIMEOUT, where, "no connection within the connect timeout")
    if "ReadTimeoutError" in names or any(isinstance(e, TimeoutError) for e in errors):
        return NoAnswer(Cause.TIMEOUT, where, "no answer within the timeout")
    if any(isinstance(e, http.client.RemoteDisconnected) for e in errors):
        return NoAnswer(Cause.RESET, where, "the server closed the connection without answering")
    if any(isinstance(e, ConnectionResetError | BrokenPipeError) for e in errors):
        return NoAnswer(Cause.RESET, where, "the connection was reset")
    os_error = next((e for e in reversed(errors) if isinstance(e, OSError) and e.strerror), None)
    if os_error is not None:
        return NoAnswer(Cause.OTHER, where, str(os_error.strerror).lower())
    last = errors[-1]
    said = " ".join(str(last).split())
    return NoAnswer(Cause.OTHER, where, f"{type(last).__name__}: {said[:200]}" if said else type(last).__name__)


def _where(errors: list[BaseException]) -> str:
    """"host:port" of the connection pool or connection the chain names, else ""."""
    for e in errors:
        for holder in (getattr(e, "pool", None), getattr(e, "conn", None)):
            host, port = getattr(holder, "host", None), getattr(holder, "port", None)
            if isinstance(host, str) and host:
                return f"{host}:{port}" if port else host
    return ""


_HOSTNAME = 62  # X509_V_ERR_HOSTNAME_MISMATCH
_IP_ADDRESS = 64  # X509_V_ERR_IP_ADDRESS_MISMATCH
_EXPIRED = 10  # X509_V_ERR_CERT_HAS_EXPIRED
_NOT_YET = 9  # X509_V_ERR_CERT_NOT_YET_VALID


def _tls(error: ssl.SSLError, where: str, server: str) -> NoAnswer:
    if isinstance(error, ssl.SSLCertVerificationError):
        why = error.verify_message or _reason(error)
        words = f"TLS: {server}'s certificate is not trusted (certificate verify failed: {why})"
        if error.verify_code in (_HOSTNAME, _IP_ADDRESS):
            advice = (f"the kubeconfig's server must be a name or address {server}'s certificate is for; check "
                      "it, or pick the right cluster with --context")
        elif error.verify_code in (_EXPIRED, _NOT_YET):
            advice = (f"{server}'s certificate is out of date, or this machine's clock is wrong; check the clock, "
                      "then the cluster's certificates")
        else:
            advice = ("check the kubeconfig's certificate-authority-data (or certificate-authority): it must hold "
                      "the cluster's CA, which is new when a cluster is created again; or pick the right cluster "
                      "with --context")
        return NoAnswer(Cause.TLS, where, words, advice)
    words = f"TLS: the handshake with {server} failed ({_reason(error)})"
    advice = ("check the kubeconfig's server (the HTTPS address of the apiserver), its client certificate "
              "(client-certificate-data) and certificate-authority-data; or pick the right cluster with --context")
    return NoAnswer(Cause.TLS, where, words, advice)


def _reason(error: ssl.SSLError) -> str:
    """OpenSSL's reason in words ("wrong version number"), whole, without the source location."""
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason:
        return reason.lower().replace("_", " ")
    text = str(error.args[1]) if len(error.args) > 1 else str(error)
    return text.split(" (_ssl.c:")[0].split("] ", 1)[-1]


__all__ = ["Cause", "NoAnswer", "chain", "no_answer", "tls_error"]
