"""A watch's stream as the apiserver sends it: newline-separated JSON events, read as they arrive.

Apart from `observe.watch` (which keeps a kind current) so that reading the wire is one small
piece: what a stream cut in the middle of an event leaves (nothing: the watch opens again from the
last whole one), a line that is not JSON (the kind's failure, in words), and a read that timed out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import urllib3

from janitor import errors

logger = logging.getLogger(__name__)

_CHUNK = 65536


def event(line: bytes, key: str) -> Mapping[str, Any]:
    try:
        event = json.loads(line)
    except ValueError:
        raise errors.ServerError("the watch sent a line that is not JSON", doing=f"watch {key}") from None
    if not isinstance(event, dict):
        raise errors.ServerError("the watch sent something that is not an event", doing=f"watch {key}")
    return event


def silent(error: BaseException) -> bool:
    """The read timed out: nothing came for the whole read timeout (urllib3 says so, wrapped or not)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, urllib3.exceptions.ReadTimeoutError | TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON documents of a watch stream, as they arrive. A stream that ends
    in the middle of one (cut short) ends before it: the watch opens again from the version of the
    last whole one, and the apiserver sends the rest again."""
    rest = b""
    for chunk in response.stream(_CHUNK, decode_content=True):
        rest += chunk
        *whole, rest = rest.split(b"\n")
        yield from (line for line in whole if line.strip())
    if rest.strip():
        logger.debug("a watch stream ended in the middle of an event (%d bytes of it)", len(rest))


__all__ = ["event", "lines", "silent"]
