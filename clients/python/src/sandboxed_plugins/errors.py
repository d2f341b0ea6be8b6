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


def unreachable(path: str, why: object) -> PluginError:
    return PluginError("unreachable", f"cannot reach the supervisor at {path} ({why}); is `supervisor start` running with this home or socket?")


def connect_window(connect_timeout: float, within: Optional[float]) -> float:
    """How long a try to (re)connect waits for the supervisor's socket: ``connect_timeout``, or
    less when the request it is for has less time left (``within``, seconds)."""
    return connect_timeout if within is None else max(0.0, min(connect_timeout, within))


def connection_lost(detail: str = "") -> PluginError:
    """``unavailable``: the connection to the supervisor ended before it answered (no answer of its)."""
    error = PluginError("unavailable", "the connection to the supervisor was lost" + detail)
    error.unanswered = True
    return error


def after_link_lost(target: str, error: PluginError) -> PluginError:
    """What a call in flight on a direct link that ended becomes when the supervisor it went back
    to could not take it (none answers, or its connection ended too): ``unavailable``, and it may
    have run (its worker had it). An answer of the supervisor's stands as it is."""
    if error.code != "unreachable" and not getattr(error, "unanswered", False):
        return error
    return PluginError("unavailable", f"the direct link to {target} ended with the call in flight, and the supervisor could not "
                                      f"take it back: {error.message}", started=True)


def again(error: PluginError) -> PluginError:
    """A copy of ``error`` to raise in another caller (one exception object raised in many threads
    keeps each one's frames in its traceback)."""
    copy = PluginError(error.code, error.message, error.started)
    if getattr(error, "unanswered", False):
        copy.unanswered = True
    return copy
