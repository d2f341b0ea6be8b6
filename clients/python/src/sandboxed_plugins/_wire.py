"""The control socket's framing and where the socket is (docs/protocol.md).

A frame is a 4-byte big-endian length, then that many bytes of one UTF-8 JSON object.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, Mapping, Optional

#: The supervisor's default frame limit (``maxFrameBytes``).
MAX_FRAME = 16 * 1024 * 1024


def default_home(environ: Mapping[str, str] = os.environ) -> str:
    """``$SUPERVISOR_HOME``, else ``$XDG_DATA_HOME/sandboxed-plugins``, else ``~/.local/share/sandboxed-plugins``."""
    home = environ.get("SUPERVISOR_HOME")
    if home:
        return home
    xdg = environ.get("XDG_DATA_HOME")
    if xdg:
        return xdg + "/sandboxed-plugins"
    return environ.get("HOME", "/tmp") + "/.local/share/sandboxed-plugins"


def socket_path(home: Optional[str] = None, socket: Optional[str] = None,
                environ: Mapping[str, str] = os.environ) -> str:
    """The control socket as the CLI finds it: ``socket``, else ``$SUPERVISOR_SOCKET``, else ``<home>/supervisor.sock``."""
    if socket:
        return socket
    env_socket = environ.get("SUPERVISOR_SOCKET")
    if env_socket:
        return env_socket
    return (home or default_home(environ)) + "/supervisor.sock"


def call_message(target: str, method: str, params: Any, timeout: Optional[float], **flags: Any) -> Dict[str, Any]:
    """A ``call`` to ``target``'s ``method`` (``params`` only when given, ``timeoutMs`` from
    ``timeout`` in seconds), with ``flags`` (``stream=True``, an ``id``) added."""
    message: Dict[str, Any] = {"type": "call", "target": target, "method": method, **flags}
    if params is not None:
        message["params"] = params
    if timeout is not None:
        message["timeoutMs"] = max(1, int(timeout * 1000))
    return message


def encode(message: Mapping[str, Any]) -> bytes:
    """One frame: the message's JSON, then (when it has ``TAIL``, the inline bytes its
    attachments announce) one NUL and those bytes."""
    tail = message.get(TAIL)
    if tail is not None:
        message = {k: v for k, v in message.items() if k != TAIL}
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if tail is not None:
        body += b"\0" + bytes(tail)
    if not body or len(body) > MAX_FRAME:
        raise ValueError(f"a frame of {len(body)} bytes is over the limit of {MAX_FRAME}")
    return struct.pack(">I", len(body)) + body


class FrameBuffer:
    """Cuts frames out of bytes as they arrive."""

    def __init__(self, max_body: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self._max = max_body

    def feed(self, data: bytes) -> list:
        self._buffer += data
        frames = []
        while len(self._buffer) >= 4:
            (length,) = struct.unpack_from(">I", self._buffer, 0)
            if length == 0 or length > self._max:
                raise ValueError(f"frame header announces {length} bytes (limit {self._max})")
            if len(self._buffer) < 4 + length:
                break
            body = bytes(self._buffer[4:4 + length])
            del self._buffer[:4 + length]
            frames.append(decode(body))
        return frames


def decode(body: bytes) -> dict:
    """One frame's body: its JSON object, and the raw bytes after the object's NUL, if any (the
    inline attachments, docs/protocol.md "Bytes"), under ``TAIL``."""
    nul = body.find(b"\0")
    if nul < 0:
        return json.loads(body.decode("utf-8"))
    message = json.loads(body[:nul].decode("utf-8"))
    message[TAIL] = body[nul + 1:]
    return message


#: Where `decode` puts a frame's inline bytes.
TAIL = "\0tail"


def element(chunk: dict) -> Any:
    """A stream chunk's element: its raw bytes (``bytes``) when it carries them (an element of
    raw bytes, inline in the chunk), else its ``data`` (decoded JSON)."""
    if "attachments" in chunk and TAIL in chunk:
        return chunk[TAIL]
    return chunk.get("data")

