"""Errors as the supervisor and plugins name them (SPEC §3's error codes)."""
from __future__ import annotations

from typing import Any, Mapping, Optional


class PluginError(Exception):
    """A call, request or connection that failed; ``code`` is the protocol's error code
    (``notFound``, ``unavailable``, ``timeout``, ``denied``, ``badRequest``, ``pluginError``,
    ``protocolViolation``, an install code, or ``unreachable`` when no supervisor answers)."""

    def __init__(self, code: str, message: str, started: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        #: The plugin had started the call when its worker ended (SPEC §15): its effect may
        #: have happened, though no answer came (``"data": {"started": true}`` on the wire).
        self.started = started

    @classmethod
    def from_body(cls, body: Any) -> "PluginError":
        if isinstance(body, Mapping):
            data = body.get("data")
            started = isinstance(data, Mapping) and data.get("started") is True
            return cls(str(body.get("code", "pluginError")), str(body.get("message", "")), started)
        return cls("pluginError", f"malformed error object: {body!r}")

    def body(self) -> dict:
        body = {"code": self.code, "message": self.message}
        if self.started:
            body["data"] = {"started": True}
        return body


def unreachable(path: str, why: Optional[BaseException]) -> PluginError:
    return PluginError("unreachable", f"cannot reach the supervisor at {path} ({why}); is `supervisor start` running with this home or socket?")
