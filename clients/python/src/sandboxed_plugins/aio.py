"""The asyncio twin of ``Client``: the same calls, awaited, many in flight on one connection."""
from __future__ import annotations

import asyncio
import errno
import itertools
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Optional, Tuple, Union

from . import _wire
from ._alink import open_link
from ._link import LinkEnded, LinkSlots, NotTaken, attach, named_bytes
from .client import _StreamReading
from .errors import PluginError, after_link_lost, again, connect_window, connection_lost, unreachable

_END = object()


class AsyncEventStream:
    """Host events as they happen: ``async for event in stream``, or ``await stream.next(timeout)``
    and ``await stream.wait_for(predicate, timeout)``."""

    def __init__(self, client: "AsyncClient", request_id: int) -> None:
        self._client = client
        self._id = request_id
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue()
        self._ended = False

    def __aiter__(self) -> AsyncIterator[dict]:
        return self

    async def __anext__(self) -> dict:
        try:
            return await self.next()
        except PluginError:
            raise StopAsyncIteration from None

    async def next(self, timeout: Optional[float] = None) -> dict:
        if self._ended:
            raise PluginError("unavailable", "the event stream has ended")
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except asyncio.TimeoutError:
            raise PluginError("timeout", f"no event within {timeout} s") from None
        if item is _END:
            self._ended = True
            raise PluginError("unavailable", "the event stream has ended (the supervisor went away or it was closed)")
        return item

    async def wait_for(self, predicate: Callable[[dict], bool], timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PluginError("timeout", f"no matching event within {timeout} s")
            event = await self.next(timeout=left)
            if predicate(event):
                return event

    async def close(self) -> None:
        if self._client._streams.pop(self._id, None) is not None:
            await self._client._send_quietly({"type": "cancel", "id": self._id})
            self._queue.put_nowait(_END)


class AsyncChunkStream(_StreamReading):
    """``ChunkStream``'s asyncio twin: ``async for element in stream``; ``await stream.close()``
    (or leaving an ``async with`` block) before the end cancels the call at the plugin."""

    def __init__(self, client: "AsyncClient", request_id: int) -> None:
        super().__init__(request_id)
        self._client = client
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue()

    def __aiter__(self) -> "AsyncChunkStream":
        return self

    async def __anext__(self) -> Any:
        if self._ended:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            await asyncio.shield(self.close())
            raise
        ended, element = self._element(item)
        if ended:
            raise StopAsyncIteration
        credit = self._credit_due()
        if credit is not None:
            await self._client._send_quietly(credit)
        return element

    async def close(self) -> None:
        if self._client._chunk_streams.pop(self._id, None) is not None:
            await self._client._send_quietly({"type": "cancel", "id": self._id})
        self._ended = True

    async def __aenter__(self) -> "AsyncChunkStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncClient:
    """``await AsyncClient.connect(home=None, socket=None)``; then ``call``, ``open``, ``send``,
    ``status``, ``events`` and ``method`` as ``Client`` has them. A cancelled task's call is
    cancelled at the plugin (the supervisor sends it ``cancel``)."""

    def __init__(self, socket_path: str, connect_timeout: float, direct_links: bool = True) -> None:
        self.socket_path = socket_path
        self.connect_timeout = connect_timeout
        #: After a call has gone through the supervisor, the next ones to that plugin go over a
        #: direct link to its worker (one hop).
        self.direct_links = direct_links
        self._links = LinkSlots()
        self._ids = itertools.count(1)
        self._writer: Optional[asyncio.StreamWriter] = None
        # One connection at a time: tasks that find none at once wait for the first one's (made on
        # first use, in the running loop).
        self._connect_lock: Optional[asyncio.Lock] = None
        self._connect_failed: Optional[Tuple[float, float, PluginError]] = None
        self._reader_task: Optional[asyncio.Task] = None
        self._waiting: Dict[int, asyncio.Future] = {}
        self._streams: Dict[int, AsyncEventStream] = {}
        self._chunk_streams: Dict[int, AsyncChunkStream] = {}
        self._methods: Dict[str, Callable[[Any], Union[Any, Awaitable[Any]]]] = {}
        self._host_calls: Dict[int, asyncio.Task] = {}
        self._closed = False

    @classmethod
    async def connect(cls, home: Optional[str] = None, socket: Optional[str] = None, *, connect_timeout: float = 5.0,
                      direct_links: bool = True) -> "AsyncClient":
        client = cls(_wire.socket_path(home, socket), connect_timeout, direct_links)
        await client._connect()
        return client

    async def call(self, target: str, method: str, params: Any = None, timeout: Optional[float] = None,
                   sending: Optional[list] = None) -> Any:
        """``Client.call``'s twin (``sending``: raw bytes its params name ``{"$bytes": i}``)."""
        if sending is not None:
            # The hand-in blocks for a moment (a local socket): off the loop.
            message = await asyncio.get_running_loop().run_in_executor(
                None, attach, _wire.call_message(target, method, params, timeout), sending, self.socket_path)
            return await self._request(message, timeout)
        link = self._links.link(target)
        flags: dict = {}
        if link is not None:
            try:
                return await link.call(method, params, timeout)
            except NotTaken:
                pass
            except LinkEnded as ended:
                flags, timeout = {"afterLink": ended.after_link}, ended.remaining
        try:
            result = await self._request(_wire.call_message(target, method, params, timeout, **flags), timeout)
        except PluginError as error:
            raise after_link_lost(target, error) if flags else error
        self._ask_for_link(target)
        return result

    async def call_bytes(self, target: str, method: str, params: Any = None, timeout: Optional[float] = None) -> bytes:
        """``Client.call_bytes``'s twin: the raw bytes a bytes method answers with."""
        reply = await self._request(_wire.call_message(target, method, params, timeout), timeout, whole=True)
        # The pick-up blocks for a moment (a local socket and a mapping): off the loop.
        return await asyncio.get_running_loop().run_in_executor(None, named_bytes, reply, self.socket_path, f"{target}.{method}")

    async def stream(self, target: str, method: str, params: Any = None, timeout: Optional[float] = None) -> AsyncChunkStream:
        """Calls the stream method ``method`` of ``target`` (SPEC §13): its elements as they come."""
        if self._closed:
            raise PluginError("unavailable", "the client is closed")
        await self._ensure_connected(timeout)
        request_id = next(self._ids)
        stream = AsyncChunkStream(self, request_id)
        self._chunk_streams[request_id] = stream
        try:
            await self._send(_wire.call_message(target, method, params, timeout, id=request_id, stream=True))
        except (OSError, PluginError, ConnectionError) as error:
            self._chunk_streams.pop(request_id, None)
            raise connection_lost(f" ({error})") from None
        return stream

    @property
    def linked_plugins(self) -> list:
        """The plugins called over a direct link now."""
        return self._links.plugins

    def _ask_for_link(self, target: str) -> None:
        if self.direct_links and self._links.should_ask(target):
            asyncio.get_running_loop().create_task(self._establish(target))

    async def _establish(self, target: str) -> None:
        try:
            grant = await self._request({"type": "link", "target": target})
            link = await open_link(grant, target, report=self._send_quietly, ended=self._links.ended)
        except (PluginError, OSError, KeyError, ValueError, TypeError):
            self._links.refused(target)
            return
        if not self._links.granted(link):
            link.close()

    async def _unlink(self, number: Any, unlink_id: Any) -> None:
        async def answer() -> None:
            await self._send_quietly({"type": "reply", "id": unlink_id, "result": None})

        link = self._links.take(number)
        if link is not None:
            await link.unlink(answer)
        else:
            await answer()

    async def open(self, uri: str, timeout: Optional[float] = None) -> Any:
        message: Dict[str, Any] = {"type": "open", "uri": uri}
        if timeout is not None:
            message["timeoutMs"] = max(1, int(timeout * 1000))
        return await self._request(message, timeout)

    async def send(self, event: str, plugin: Optional[str] = None, timeout: Optional[float] = None) -> dict:
        message: Dict[str, Any] = {"type": "send", "name": event}
        if plugin is not None:
            message["target"] = plugin
        return await self._request(message, timeout, margin=0.0)

    async def status(self, timeout: Optional[float] = None) -> list:
        return await self._request({"type": "status"}, timeout, margin=0.0)

    async def restart(self, plugin: str, timeout: Optional[float] = None) -> dict:
        return await self._request({"type": "restart", "target": plugin}, timeout, margin=0.0)

    async def upgrade(self, binary: Optional[str] = None, timeout: float = 30.0) -> dict:
        """``Client.upgrade``'s twin: the supervisor replaced in place; its outcome."""
        message: Dict[str, Any] = {"type": "upgrade"}
        if binary is not None:
            message["params"] = {"binary": binary}
        return (await self._request(message, timeout))["upgraded"]

    async def events(self, plugin: Optional[str] = None) -> AsyncEventStream:
        request_id = next(self._ids)
        stream = AsyncEventStream(self, request_id)
        self._streams[request_id] = stream
        message: Dict[str, Any] = {"type": "events"}
        if plugin is not None:
            message["target"] = plugin
        try:
            await self._request(message, request_id=request_id)
        except BaseException:
            self._streams.pop(request_id, None)
            raise
        return stream

    async def method(self, name: str, handler: Callable[[Any], Union[Any, Awaitable[Any]]]) -> None:
        """Provides the host method ``name``; ``handler(params)`` may be a coroutine function."""
        self._methods[name] = handler
        await self._request({"type": "provide", "method": name})

    async def close(self) -> None:
        self._closed = True
        for link in self._links.close_all():
            link.close()
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            await asyncio.gather(self._reader_task, return_exceptions=True)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- the connection ----------------------------------------------------------

    async def _ensure_connected(self, within: Optional[float] = None) -> None:
        if self._writer is not None:
            return
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        asked = time.monotonic()
        deadline = asked + connect_window(self.connect_timeout, within)
        # As Client's: another request's try holds the lock; wait for it no longer than this
        # request's window.
        try:
            await asyncio.wait_for(self._connect_lock.acquire(), None if within is None else max(0.0, deadline - asked))
        except asyncio.TimeoutError:
            raise unreachable(self.socket_path, "no connection within the request's timeout while another request tried to connect") from None
        try:
            if self._writer is None:
                # As Client's: a try that failed while this caller waited, and that waited as long
                # as this caller would have, answers it too.
                failed = self._connect_failed
                if failed is not None and failed[0] >= asked and failed[1] >= deadline:
                    raise again(failed[2])
                try:
                    await self._connect(max(0.0, deadline - time.monotonic()))
                except PluginError as error:
                    self._connect_failed = (time.monotonic(), deadline, error)
                    raise
        finally:
            self._connect_lock.release()

    async def _connect(self, within: Optional[float] = None) -> None:
        deadline = time.monotonic() + connect_window(self.connect_timeout, within)
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(self.socket_path)
                break
            except OSError as error:
                if error.errno in (errno.ENOENT, errno.ECONNREFUSED) and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                    continue
                raise unreachable(self.socket_path, error) from None
        self._writer = writer
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader, writer))
        for name in list(self._methods):
            await self._send_quietly({"type": "provide", "id": next(self._ids), "method": name})

    async def _send(self, message: Dict[str, Any]) -> None:
        writer = self._writer
        if writer is None:
            raise connection_lost()
        writer.write(_wire.encode(message))
        await writer.drain()

    async def _send_quietly(self, message: Dict[str, Any]) -> None:
        try:
            await self._send(message)
        except (OSError, PluginError, ConnectionError):
            pass

    async def _request(self, message: Dict[str, Any], timeout: Optional[float] = None, request_id: Optional[int] = None,
                       whole: bool = False, margin: float = 5.0) -> Any:
        if self._closed:
            raise PluginError("unavailable", "the client is closed")
        await self._ensure_connected(timeout)
        if request_id is None:
            request_id = next(self._ids)
        message["id"] = request_id
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            await self._send(message)
            reply = await asyncio.wait_for(future, None if timeout is None else timeout + margin)
        except asyncio.TimeoutError:
            await self._send_quietly({"type": "cancel", "id": request_id})
            raise PluginError("timeout", f"no answer from the supervisor within {timeout} s") from None
        except asyncio.CancelledError:
            # The task was cancelled: so is its call, at the plugin.
            await asyncio.shield(self._send_quietly({"type": "cancel", "id": request_id}))
            raise
        except (OSError, ConnectionError) as error:
            raise connection_lost(f" ({error})") from None
        finally:
            self._waiting.pop(request_id, None)
        if reply is None:
            raise connection_lost(" before it answered")
        if "error" in reply:
            raise PluginError.from_body(reply["error"])
        return reply if whole else reply.get("result")

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = _wire.FrameBuffer()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for frame in frames.feed(data):
                    self._dispatch(frame)
        except (OSError, ValueError, ConnectionError):
            pass
        if self._writer is writer:
            self._writer = None
        writer.close()
        for future in self._waiting.values():
            if not future.done():
                future.set_result(None)
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream._queue.put_nowait(_END)
        chunk_streams, self._chunk_streams = self._chunk_streams, {}
        for chunks in chunk_streams.values():
            chunks._queue.put_nowait(_END)
        for task in self._host_calls.values():
            task.cancel()
        self._host_calls.clear()

    def _dispatch(self, frame: dict) -> None:
        kind = frame.get("type")
        frame_id = frame.get("id")
        if kind == "chunk":
            chunks = self._chunk_streams.get(frame_id)
            if chunks is not None and not frame.get("input"):
                chunks._queue.put_nowait(_wire.element(frame))
        elif kind == "reply":
            future = self._waiting.get(frame_id)
            if future is not None and not future.done():
                future.set_result(frame)
            elif future is None:
                chunks = self._chunk_streams.pop(frame_id, None)
                if chunks is not None:
                    chunks._queue.put_nowait(frame)
        elif kind == "hostEvent":
            stream = self._streams.get(frame_id)
            if stream is not None:
                stream._queue.put_nowait({k: v for k, v in frame.items() if k not in ("type", "id")})
        elif kind == "call":
            task = asyncio.get_running_loop().create_task(self._host_call(frame))
            self._host_calls[frame_id] = task
        elif kind == "cancel":
            task = self._host_calls.pop(frame_id, None)
            if task is not None:
                task.cancel()
        elif kind == "unlink":
            asyncio.get_running_loop().create_task(self._unlink(frame.get("link"), frame_id))

    async def _host_call(self, frame: dict) -> None:
        call_id = frame.get("id")
        handler = self._methods.get(frame.get("method", ""))
        try:
            if handler is None:
                raise PluginError("notFound", f"this client provides no method {frame.get('method')}")
            result = handler(frame.get("params"))
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                result = await result
            reply: Dict[str, Any] = {"type": "reply", "id": call_id, "result": result}
        except asyncio.CancelledError:
            return
        except PluginError as error:
            reply = {"type": "reply", "id": call_id, "error": error.body()}
        except Exception as error:
            reply = {"type": "reply", "id": call_id,
                     "error": {"code": "pluginError", "message": f"the host's {frame.get('method')} failed: {error}"}}
        finally:
            self._host_calls.pop(call_id, None)
        try:
            await self._send(reply)
        except (TypeError, ValueError) as error:
            await self._send_quietly({"type": "reply", "id": call_id,
                                      "error": {"code": "pluginError", "message": f"the host's answer is not JSON: {error}"}})
        except (OSError, PluginError, ConnectionError):
            pass
