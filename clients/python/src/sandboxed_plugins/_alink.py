"""The asyncio twin of ``_link.DirectLink``: an ``AsyncClient``'s direct link to one plugin's
worker (docs/protocol.md, "Direct links for clients")."""
from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, Awaitable, Callable, Dict, Optional, Tuple

from . import _wire
from ._link import REPORT_INTERVAL, NotTaken, Tally, ended_call, pick_up
from .errors import PluginError


async def open_link(grant: dict, target: str, report: Callable[[dict], Awaitable[None]],
                    ended: Callable[["AsyncDirectLink"], None]) -> "AsyncDirectLink":
    """Picks the link's descriptor up (a blocking exchange, off the event loop) and wraps it."""
    sock = await asyncio.get_running_loop().run_in_executor(None, pick_up, grant)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    return AsyncDirectLink(grant, target, reader, writer, report, ended)


class AsyncDirectLink:
    def __init__(self, grant: dict, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 report: Callable[[dict], Awaitable[None]], ended: Callable[["AsyncDirectLink"], None]) -> None:
        self.number = int(grant["link"])
        self.timeout_ms = int(grant["timeoutMs"])
        self.target = target
        self._reader = reader
        self._writer = writer
        self._report = report
        self._ended = ended
        self._ids = itertools.count(1)
        self._waiting: Dict[int, Tuple[asyncio.Future, int]] = {}
        self._closed = False
        self._unlinked = False
        self._answer_unlink: Optional[Callable[[], Awaitable[None]]] = None
        # Unlinks answered from a task of their own (a cancelled call was the last one).
        self._settling: set = set()
        self._tally = Tally()
        self._last_report = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def call(self, method: str, params: Any, timeout: Optional[float]) -> Any:
        """The call's result; raises ``NotTaken`` when the link takes no more calls, ``LinkEnded``
        when it ended with its worker while the call was in flight."""
        if self._closed:
            raise NotTaken()
        ms = max(1, int(timeout * 1000)) if timeout is not None else self.timeout_ms
        call_id = next(self._ids)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        started = time.monotonic_ns()
        message: Dict[str, Any] = {"type": "call", "id": call_id, "target": self.target, "method": method, "timeoutMs": ms}
        if params is not None:
            message["params"] = params
        try:
            frame = _wire.encode(message)
            self._waiting[call_id] = (future, started)
            self._writer.write(frame)
        except (OSError, ValueError, TypeError, RuntimeError):
            self._waiting.pop(call_id, None)
            raise NotTaken() from None
        try:
            reply = await asyncio.wait_for(asyncio.shield(future), ms / 1000)
        except asyncio.TimeoutError:
            if self._waiting.pop(call_id, None) is not None:
                self._tally.record("timeout", started)
                self._send_quietly({"type": "cancel", "id": call_id})
                await self._settled_maybe_unlink()
            raise PluginError("timeout", f"{self.target} did not answer call in time") from None
        except asyncio.CancelledError:
            # The task was cancelled: so is its call, at the plugin. An unlink that waited for it
            # is answered now, from a task of its own (this one is being cancelled).
            if self._waiting.pop(call_id, None) is not None:
                self._send_quietly({"type": "cancel", "id": call_id})
                if not self._waiting and self._answer_unlink is not None:
                    settle = asyncio.get_running_loop().create_task(self._settled_maybe_unlink())
                    self._settling.add(settle)
                    settle.add_done_callback(self._settling.discard)
            raise
        if reply is None:
            raise ended_call(self.target, self.number, call_id, started + ms * 1_000_000)
        if "error" in reply:
            raise PluginError.from_body(reply["error"])
        return reply.get("result")

    async def unlink(self, answer: Callable[[], Awaitable[None]]) -> None:
        self._closed = True
        self._unlinked = True
        if self._waiting:
            self._answer_unlink = answer
        else:
            await self._finish_unlink(answer)

    def close(self) -> None:
        self._closed = True
        self._writer.close()

    async def _finish_unlink(self, answer: Callable[[], Awaitable[None]]) -> None:
        await self._send_report(force=True, ended_link=None)
        await answer()
        self.close()

    async def _settled_maybe_unlink(self) -> None:
        if not self._waiting and self._answer_unlink is not None:
            answer, self._answer_unlink = self._answer_unlink, None
            await self._finish_unlink(answer)

    def _send_quietly(self, message: dict) -> None:
        try:
            self._writer.write(_wire.encode(message))
        except (OSError, RuntimeError):
            pass

    async def _send_report(self, force: bool, ended_link: Optional[int]) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < REPORT_INTERVAL:
            return
        self._last_report = now
        if self._tally.empty and ended_link is None:
            return
        report = self._tally.report(self.target, ended_link)
        self._tally = Tally()
        await self._report(report)

    async def _read(self) -> None:
        frames = _wire.FrameBuffer()
        try:
            while True:
                try:
                    data = await asyncio.wait_for(self._reader.read(65536), REPORT_INTERVAL)
                except asyncio.TimeoutError:
                    await self._send_report(force=False, ended_link=None)
                    continue
                if not data:
                    break
                for frame in frames.feed(data):
                    if frame.get("type") != "reply":
                        continue
                    entry = self._waiting.pop(frame.get("id"), None)
                    if entry is None:
                        continue
                    future, started = entry
                    self._tally.record("error" if "error" in frame else "ok", started)
                    if not future.done():
                        future.set_result(frame)
                    await self._settled_maybe_unlink()
                await self._send_report(force=False, ended_link=None)
        except (OSError, ValueError, ConnectionError):
            pass
        await self._end()

    async def _end(self) -> None:
        self._closed = True
        # Not counted here: each goes through the supervisor again, which counts it.
        waiting, self._waiting = self._waiting, {}
        # The supervisor hears that the link ended before any caller can make its next call: that
        # call then waits for the plugin's restart instead of reaching a worker that is ending.
        await self._send_report(force=True, ended_link=None if self._unlinked else self.number)
        for future, _ in waiting.values():
            if not future.done():
                future.set_result(None)
        if self._answer_unlink is not None:
            answer, self._answer_unlink = self._answer_unlink, None
            await answer()
        self._writer.close()
        self._ended(self)
