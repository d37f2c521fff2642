"""The HTTP/1.1 framing the fault proxy reads and writes, and the events of a watch stream.

Kept apart from the proxy's connection handling (`devenv/faults.py`): message heads, bodies by
length or in chunks, the proxy's own answers, and the faults that act on a watch's events as
they pass (`relay_events`): cut mid-event, BOOKMARKs dropped, each event relayed late. A watch is
a chunked body of JSON documents, one a line (the apiserver flushes each event as it happens).
"""

from __future__ import annotations

import http
import json
import threading
from collections.abc import Callable, Iterator
from io import BufferedReader

from devenv.fault_rules import GONE

PIECE = 65536
Send = Callable[[bytes], object]
Headers = list[tuple[str, str]]



def tokens(headers: Headers, name: str) -> set[str]:
    return {t.strip().lower() for k, v in headers if k.lower() == name for t in v.split(",")}


def header(headers: Headers, name: str) -> str | None:
    found = [v.strip() for k, v in headers if k.lower() == name]
    return found[-1] if found else None


def read_head(reader: BufferedReader) -> list[bytes] | None:
    """The lines of one message head, or None on a clean EOF before it starts."""
    lines: list[bytes] = []
    while True:
        line = reader.readline(65537)
        if not line:
            if lines:
                raise ConnectionError("message head cut short")
            return None
        if line in (b"\r\n", b"\n"):
            if lines:
                return lines
            continue  # a stray CRLF between keep-alive requests is allowed
        lines.append(line)
        if len(lines) > 256 or not line.endswith(b"\n"):
            raise ValueError("message head too large")


def code(status_line: bytes) -> int:
    return int(status_line.split(b" ", 2)[1])


def parse(lines: list[bytes]) -> Headers:
    pairs = (line.decode("latin-1").partition(":") for line in lines)
    return [(k.strip(), v.strip()) for k, _, v in pairs]


def copy_exact(src: BufferedReader, size: int, send: Send) -> None:
    while size > 0:
        data = src.read1(min(size, PIECE))  # what is there now: a slow body still streams
        if not data:
            raise ConnectionError("body cut short")
        send(data)
        size -= len(data)


def _chunk_size(line: bytes) -> int:
    if not line.endswith(b"\n"):
        raise ConnectionError("chunked body cut short")
    return int(line.split(b";", 1)[0].strip(), 16)


def _trailers(src: BufferedReader, send: Send) -> None:
    while (trailer := src.readline(65537)) not in (b"\r\n", b"\n"):
        if not trailer:
            raise ConnectionError("trailers cut short")
        send(trailer)
    send(trailer)


def copy_chunked(src: BufferedReader, send: Send) -> None:
    """Relay a chunked body chunk by chunk, as it arrives (a watch never ends on its own)."""
    while True:
        line = src.readline(4096)
        size = _chunk_size(line)
        send(line)
        if size == 0:
            _trailers(src, send)
            return
        copy_exact(src, size + 2, send)


def chunks(src: BufferedReader) -> Iterator[bytes]:
    """The payloads of a chunked body as they arrive; the body's end (and trailers) read too."""
    while True:
        size = _chunk_size(src.readline(4096))
        if size == 0:
            _trailers(src, lambda _: None)
            return
        data = src.read(size + 2)
        if len(data) < size + 2:
            raise ConnectionError("chunk cut short")
        yield data[:size]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


END = b"0\r\n\r\n"


def response(status: int, headers: dict[str, str], body: bytes, *, length: int | None = None,
             close: bool = False) -> bytes:
    """A whole answer of the proxy's own, with a Content-Length."""
    fields = {**headers, "Content-Length": str(len(body) if length is None else length)}
    if close:
        fields["Connection"] = "close"
    return _head(status, fields) + body


def stream_head(status: int = 200) -> bytes:
    """The head of a chunked answer of the proxy's own, as an apiserver starts a watch."""
    return _head(status, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})


def gone_event() -> bytes:
    """A 410 Gone as a watch says it in its stream: an ERROR event holding the Status."""
    return json.dumps({"type": "ERROR", "object": GONE}).encode() + b"\n"


def _head(status: int, fields: dict[str, str]) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Fault"
    head = f"HTTP/1.1 {status} {phrase}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return (head + "\r\n").encode("latin-1")


def relay_events(src: BufferedReader, send: Send, *, cut_after: int | None = None, bookmarks: bool = True,
                 pause: float = 0.0, released: threading.Event | None = None) -> bool:
    """Relay a chunked watch stream event by event, each as a chunk of its own.

    `cut_after`: after that many whole events, half of the next is sent and the relay stops
    (returns False: the caller drops the connection, as a proxy or a node that died mid-event).
    `bookmarks` False drops every BOOKMARK. `pause`: each event waits that long first, read from
    upstream only then (a slow consumer: the apiserver's buffer for it fills); `released` set
    (the rule cleared) ends the waits. Returns True when the upstream ended the stream."""
    rest, sent = b"", 0
    for data in chunks(src):
        rest += data
        *whole, rest = rest.split(b"\n")
        for line in (w + b"\n" for w in whole if w.strip()):
            if not bookmarks and _is_bookmark(line):
                continue
            if cut_after is not None and sent >= cut_after:
                send(chunk(line[: max(1, len(line) // 2)]))
                return False
            if pause and not (released is not None and released.is_set()):
                (released or threading.Event()).wait(pause)
            send(chunk(line))
            sent += 1
    if rest.strip():
        send(chunk(rest))
    send(END)
    return True


def _is_bookmark(line: bytes) -> bool:
    try:
        return bool(json.loads(line).get("type") == "BOOKMARK")
    except (ValueError, AttributeError):
        return False


__all__ = ["END", "PIECE", "chunk", "chunks", "code", "copy_chunked", "copy_exact", "gone_event", "header",
           "parse", "read_head", "relay_events", "response", "stream_head", "tokens"]
