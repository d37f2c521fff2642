"""One request to the apiserver, for `observe` and `act` alike, with failures as `KubeError`.

Both edges speak to the API through the generic `ApiClient.call_api`, so custom resources work
exactly like built-in kinds; this is the one place that builds their REST paths and turns the
client library's exceptions into the project's own error types (`janitor.errors`).

It also builds the client itself (`connect`): one whose every request, typed or raw, carries a
connect and a read timeout, since the client library waits forever by default and a request the
apiserver never answers would otherwise hold a cycle, and the lease, for good.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from janitor import errors, transport
from janitor.decide.model import ResourceKind
from janitor.outage import Outage

Timeout = tuple[float, float]  # (connect, read) seconds
DEFAULT_TIMEOUT: Timeout = (5.0, 30.0)
# urllib3's default tries a request that timed out, was reset or got a 429 three more times: one
# unanswered read would cost four read timeouts. A connection that could not be made is tried
# once more (nothing was sent); anything else fails now, and the next cycle asks again.
ONE_TRY = urllib3.Retry(total=1, connect=1, read=0, status=0, other=0, redirect=0, raise_on_status=False,
                        respect_retry_after_header=False)
_OWN_WORDS = threading.local()  # threads whose requests say their failures themselves (the watch cache's)


def own_words() -> None:
    """The requests of this thread are not counted in the client's `Outage`: the thread says their
    failures itself. A watch's kind the apiserver does not answer while it answers everything else
    is that kind's problem, not an outage; counted there, each retry would start and end one."""
    _OWN_WORDS.on = True


class TimedApiClient(ApiClient):
    """An ApiClient whose requests without an explicit `_request_timeout` get `timeout`; with an
    `outage` (the daemon's), every request that gets no answer, typed or raw, is counted there, and
    every answer ends an outage."""

    def __init__(self, configuration: k8s.Configuration | None = None, timeout: Timeout = DEFAULT_TIMEOUT) -> None:
        super().__init__(configuration)
        self.timeout = timeout
        self.in_cluster = False  # set by `connect`: the ServiceAccount's credentials, not a kubeconfig's
        self.outage: Outage | None = None

    @property
    def insecure(self) -> str:
        """What to say when the kubeconfig turned TLS verification off, else ''."""
        if self.configuration.verify_ssl:
            return ""
        return f"{self.configuration.host}: insecure-skip-tls-verify: the apiserver's certificate is not checked"

    def call_api(self, method: Any, url: Any, header_params: Any = None, body: Any = None, post_params: Any = None,
                 _request_timeout: Any = None) -> Any:
        try:
            response = super().call_api(method, url, header_params, body, post_params,
                                        _request_timeout if _request_timeout is not None else self.timeout)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            if self.outage is not None and no_answer(e) and not getattr(_OWN_WORDS, "on", False):
                self.outage.failed(e)
            raise
        if self.outage is not None and not getattr(_OWN_WORDS, "on", False):
            self.outage.answered()
        return response


def no_answer(error: BaseException) -> bool:
    """Whether a request failed without any HTTP answer (the client library gives status 0 to a TLS
    failure); the parts of the daemon leave saying those to the client's `Outage`."""
    if isinstance(error, errors.KubeError):
        return error.status is None
    if isinstance(error, ApiException):
        return not error.status
    return isinstance(error, urllib3.exceptions.HTTPError | OSError)


def connect(kubeconfig: str | None, timeout: Timeout = DEFAULT_TIMEOUT, *, context: str | None = None,
            environ: Mapping[str, str] | None = None) -> TimedApiClient:
    """The client of the first credentials found, as kubectl looks for them: `kubeconfig` (the
    --kubeconfig flag), else $KUBECONFIG (a list of files, merged), else ~/.kube/config, else the
    in-cluster ServiceAccount; `context` picks a kubeconfig context. Every request is timed.

    A missing or broken kubeconfig and an unknown context raise `errors.ConfigError`, one line
    saying which file and what to do, because a researcher's laptop meets these before anything else.
    """
    env = os.environ if environ is None else environ
    configuration = k8s.Configuration()
    origin = _kubeconfig_origin(kubeconfig, env)
    if origin is None:
        if context:
            raise errors.ConfigError(f"--context {context}: there is no kubeconfig to pick it from ({NO_KUBECONFIG})")
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException as e:
            raise errors.ConfigError(f"in-cluster ServiceAccount: {e}") from None
    else:
        files, named = origin
        try:
            context = context or _first_current_context(files)
            k8s_config.load_kube_config(config_file=files, context=context,  # type: ignore[no-untyped-call]
                                        client_configuration=configuration)
        except (k8s_config.ConfigException, yaml.YAMLError, OSError, KeyError, TypeError, ValueError) as e:
            raise errors.ConfigError(_kubeconfig_problem(files, named, context, e)) from None
    configuration.retries = ONE_TRY
    if not configuration.verify_ssl:
        # The kubeconfig asks for it (insecure-skip-tls-verify): the daemon says so once, in words
        # (`insecure`), rather than urllib3 on every request.
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    client = TimedApiClient(configuration, timeout)
    client.in_cluster = origin is None
    return client


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def context_namespace(kubeconfig: str | None, *, context: str | None = None,
                      environ: Mapping[str, str] | None = None) -> str:
    """The namespace kubectl works in without `-n`: the kubeconfig context's (`context`, else the
    current one, picked as `connect` picks it), in a pod its ServiceAccount's, else `default`.
    Call it after `connect`, which has already said what is wrong with a kubeconfig it cannot use."""
    env = os.environ if environ is None else environ
    try:
        origin = _kubeconfig_origin(kubeconfig, env)
    except errors.ConfigError:
        return "default"
    if origin is None:
        try:
            with open(SERVICE_ACCOUNT_NAMESPACE) as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"
    files = origin[0]
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=files)  # type: ignore[no-untyped-call]
        name = context or _first_current_context(files) or (current or {}).get("name")
    except (k8s_config.ConfigException, yaml.YAMLError, OSError, KeyError, TypeError, ValueError, AttributeError):
        return "default"
    for entry in contexts or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            namespace = (entry.get("context") or {}).get("namespace")
            return namespace if isinstance(namespace, str) and namespace else "default"
    return "default"


NO_KUBECONFIG = ("no --kubeconfig, $KUBECONFIG is unset, ~/.kube/config does not exist and this is not a pod; "
                 "give --kubeconfig PATH or set $KUBECONFIG")


def _kubeconfig_origin(flag: str | None, env: Mapping[str, str]) -> tuple[str, str] | None:
    """(the files, where they were named) of the kubeconfig to read; None: in-cluster."""
    if flag:
        if not os.path.exists(os.path.expanduser(flag)):
            raise errors.ConfigError(f"--kubeconfig {flag}: no such file")
        return os.path.expanduser(flag), "--kubeconfig"
    if env.get("KUBECONFIG"):
        files = [f for f in env["KUBECONFIG"].split(os.pathsep) if f]
        if not any(os.path.exists(os.path.expanduser(f)) for f in files):
            raise errors.ConfigError(f"$KUBECONFIG={env['KUBECONFIG']}: no such file")
        return env["KUBECONFIG"], "$KUBECONFIG"
    home = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".kube", "config")
    if os.path.exists(home):
        return home, "~/.kube/config"
    if env.get("KUBERNETES_SERVICE_HOST"):
        return None
    raise errors.ConfigError(NO_KUBECONFIG)


def _first_current_context(files: str) -> str | None:
    """kubectl takes the current-context of the first file of $KUBECONFIG that sets one; the client
    library takes the last. Name it, so both pick the same cluster."""
    if os.pathsep not in files:
        return None
    for path in (os.path.expanduser(f) for f in files.split(os.pathsep) if f):
        if os.path.exists(path):
            with open(path) as f:
                loaded = yaml.safe_load(f)
            if isinstance(loaded, dict) and loaded.get("current-context"):
                return str(loaded["current-context"])
    return None


def _kubeconfig_problem(files: str, named: str, context: str | None, error: Exception) -> str:
    where = files if named == "~/.kube/config" else f"{named} {files}"
    if context:
        try:
            contexts, _ = k8s_config.list_kube_config_contexts(config_file=files)  # type: ignore[no-untyped-call]
            names = sorted(str(c.get("name")) for c in contexts or ())
        except Exception:  # noqa: BLE001 - the file is broken anyway; say so below
            names = None
        if names is not None and context not in names:
            return f"{where}: no context {context!r}; it has {', '.join(names) or 'none'}"
    message = " ".join(str(error).split()) or type(error).__name__
    return f"{where}: not a usable kubeconfig ({message[:200]})"


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    data: bytes
    headers: Mapping[str, str]


def path(kind: ResourceKind, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a collection (all namespaces when `namespace` is None) or of one object."""
    result = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if kind.namespaced and namespace is None and name is not None:
        raise ValueError(f"{kind.key} is namespaced: {name!r} needs a namespace")
    if kind.namespaced and namespace is not None:
        result += f"/namespaces/{quote(namespace, safe='')}"
    result += f"/{kind.plural}"
    return result + f"/{quote(name, safe='')}" if name is not None else result


def failed(error: ApiException | urllib3.exceptions.HTTPError, doing: str) -> errors.KubeError:
    """The KubeError for a request that failed: by its HTTP status, or, with none (the client
    library's status 0 for a TLS failure, or no answer at all), why there was none in words
    ("127.0.0.1:6443: connection refused"), never the library's text."""
    if isinstance(error, ApiException) and error.status:
        return errors.from_status(error.status, error.body or error.reason, doing=doing)
    return errors.from_status(None, str(transport.no_answer(error, "the apiserver")), doing=doing)


def request(
    api: ApiClient,
    method: str,
    url_path: str,
    *,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str = "application/json",
    accept: str = "application/json",
    timeout: Timeout | None = None,
    doing: str,
) -> Response:
    """Send one request; any failure (HTTP status or transport) raises a KubeError `from` it.
    `timeout` overrides the client's own (a plain ApiClient has none: it would wait for ever).

    Answers come gzip-compressed when the apiserver compresses (it does for large ones): a list of
    pods shrinks about seventeen times on the wire; urllib3 inflates it."""
    headers = {"Accept": accept, "Accept-Encoding": "gzip"}
    if body is not None:
        headers["Content-Type"] = content_type
    try:
        serialized = api.param_serialize(
            method, url_path, query_params=list(query), header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        response = api.call_api(*serialized, _request_timeout=timeout) if timeout else api.call_api(*serialized)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
    except (ApiException, urllib3.exceptions.HTTPError) as e:
        raise failed(e, doing) from e
    if not 200 <= response.status <= 299:
        error = errors.from_status(response.status, data, doing=doing)
        error.date = (response.headers or {}).get("Date")
        raise error
    return Response(response.status, data or b"", dict(response.headers or {}))


def open_stream(api: ApiClient, url_path: str, *, query: Sequence[tuple[str, Any]], accept: str, timeout: Timeout,
                doing: str, read_timeout: float | None = None) -> Any:
    """A GET whose answer is read as it arrives (a watch): the open urllib3 response. Its status
    and headers must come within `timeout` (connect, read); then every read of the stream waits at
    most `read_timeout` (default: `timeout[1]`), since a healthy watch of a quiet kind says nothing
    for minutes while an apiserver that does not answer the request at all must show within the
    client's timeout. A failure to open it, or an error status, raises a KubeError."""
    headers = {"Accept": accept, "Accept-Encoding": "gzip"}
    try:
        serialized = api.param_serialize("GET", url_path, query_params=list(query), header_params=headers,
                                         auth_settings=["BearerToken"])
        response = api.call_api(*serialized, _request_timeout=timeout)
    except (ApiException, urllib3.exceptions.HTTPError) as e:
        raise failed(e, doing) from e
    if not 200 <= response.status <= 299:
        try:
            data = response.read()  # type: ignore[no-untyped-call]
        except urllib3.exceptions.HTTPError:
            data = b""
        raise errors.from_status(response.status, data, doing=doing)
    stream = response.response
    if read_timeout is not None:
        sock = _socket_of(stream)
        if sock is None:  # its reads would time out at timeout[1]: a quiet watch taken for a dead one
            stream.release_conn()
            raise errors.from_status(None, "the watch's connection cannot wait longer than the timeout", doing=doing)
        sock.settimeout(read_timeout)
    return stream


def _socket_of(stream: Any) -> Any:
    """The socket a urllib3 response reads from: its connection's while kept alive, else the one
    http.client handed to the response (an answer that closes the connection when it ends)."""
    sock = getattr(getattr(stream, "connection", None), "sock", None)
    if sock is None:
        raw = getattr(getattr(getattr(stream, "_fp", None), "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
    return sock if callable(getattr(sock, "settimeout", None)) else None
