"""The blocking client: one connection to a running supervisor's control socket, usable from
many threads at once (SPEC §12, docs/host.md)."""
from __future__ import annotations

import errno
import itertools
import queue
import socket as _socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from . import _wire
from ._link import DirectLink, LinkEnded, LinkSlots, NotTaken, attach, named_bytes, pick_up
from .errors import PluginError, after_link_lost, again, connect_window, connection_lost, unreachable

#: Events a plugin can be sent (``send``).
SENDABLE_EVENTS = ("memoryWarning", "background", "foreground")

_END = object()


class _Waiting:
    __slots__ = ("done", "reply", "progress")

    def __init__(self, progress: Optional[Callable[[dict], None]]) -> None:
        self.done = threading.Event()
        self.reply: Optional[dict] = None
        self.progress = progress


class EventStream:
    """Host events as they happen: iterate it, or wait for one with ``next(timeout=...)`` or
    ``wait_for(predicate, timeout=...)``. Ends when closed or when the supervisor goes away."""

    def __init__(self, client: "Client", request_id: int) -> None:
        self._client = client
        self._id = request_id
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._ended = False

    def _put(self, item: Any) -> None:
        self._queue.put(item)

    def __iter__(self) -> Iterator[dict]:
        return self

    def __next__(self) -> dict:
        try:
            return self.next()
        except PluginError:
            raise StopIteration from None

    def next(self, timeout: Optional[float] = None) -> dict:
        """The next event; ``PluginError("timeout")`` if none came within ``timeout`` seconds,
        ``PluginError("unavailable")`` once the stream has ended."""
        if self._ended:
            raise PluginError("unavailable", "the event stream has ended")
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise PluginError("timeout", f"no event within {timeout} s") from None
        if item is _END:
            self._ended = True
            raise PluginError("unavailable", "the event stream has ended (the supervisor went away or it was closed)")
        return item

    def wait_for(self, predicate: Callable[[dict], bool], timeout: float = 10.0) -> dict:
        """The first event for which ``predicate`` is true, within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PluginError("timeout", f"no matching event within {timeout} s")
            event = self.next(timeout=left)
            if predicate(event):
                return event

    def close(self) -> None:
        """Stops following (the supervisor gets ``cancel``)."""
        if self._client._streams.pop(self._id, None) is not None:
            self._client._send_quietly({"type": "cancel", "id": self._id})
            self._queue.put(_END)

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: The window of a stream (SPEC §13): at most this many elements wait in the client; credit for
#: half of it goes back each time half was read.
STREAM_WINDOW = 16
_GRANT_EVERY = STREAM_WINDOW // 2


class _StreamReading:
    """What both clients' streams keep while they are read: the call's id, the elements taken
    since credit last went back, whether it ended and its final result."""

    def __init__(self, request_id: int) -> None:
        self._id = request_id
        self._taken = 0
        self._ended = False
        #: The final reply's result, once the stream has ended.
        self.result: Any = None

    def _element(self, item: Any) -> Tuple[bool, Any]:
        """What came off the queue: ``(True, None)`` at the end, else ``(False, element)``; raises
        the stream's error, or ``unavailable`` when the connection was lost first."""
        if isinstance(item, dict) and item.get("type") == "reply":
            self._ended = True
            if "error" in item:
                raise PluginError.from_body(item["error"])
            self.result = item.get("result")
            return True, None
        if item is _END:
            self._ended = True
            raise connection_lost(" before the stream ended")
        return False, item

    def _credit_due(self) -> Optional[dict]:
        """The ``credit`` to send once an element was taken (every ``_GRANT_EVERY``), if due."""
        self._taken += 1
        if self._taken < _GRANT_EVERY:
            return None
        self._taken = 0
        return {"type": "credit", "id": self._id, "n": _GRANT_EVERY}


class ChunkStream(_StreamReading):
    """The elements of a stream method's answer (SPEC §13), as they come: iterate it. At most 16
    wait here; the plugin is granted room as they are read, so a slow reader slows the plugin.
    Iteration ends at the plugin's final reply, or raises its ``PluginError`` (``unavailable``
    when the plugin died mid-stream, ``timeout`` when it moved nothing for its
    ``limits.streamIdleTimeoutMs``). ``close()`` (or leaving a ``with`` block) before the end
    cancels the call at the plugin."""

    def __init__(self, client: "Client", request_id: int) -> None:
        super().__init__(request_id)
        self._client = client
        self._queue: "queue.Queue[Any]" = queue.Queue()

    def _put(self, item: Any) -> None:
        self._queue.put(item)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        ended, element = self._element(self._queue.get())
        if ended:
            raise StopIteration
        credit = self._credit_due()
        if credit is not None:
            self._client._send_quietly(credit)
        return element

    def close(self) -> None:
        """Stops reading: a stream not yet ended is cancelled at the plugin."""
        if self._client._chunk_streams.pop(self._id, None) is not None:
            self._client._send_quietly({"type": "cancel", "id": self._id})
        self._ended = True

    def __enter__(self) -> "ChunkStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """A connection to a running ``supervisor start``, found as the CLI finds it (``socket``,
    else ``$SUPERVISOR_SOCKET``, else ``<home>/supervisor.sock``). Calls may be made from many
    threads at once; each waits for its own reply. If the supervisor restarts, the next request
    connects again (waiting up to ``connect_timeout`` seconds for it)."""

    def __init__(self, home: Optional[str] = None, socket: Optional[str] = None, *, connect_timeout: float = 5.0,
                 direct_links: bool = True) -> None:
        self.socket_path = _wire.socket_path(home, socket)
        self.connect_timeout = connect_timeout
        #: After a call has gone through the supervisor, the next ones to that plugin go over a
        #: direct link to its worker (one hop).
        self.direct_links = direct_links
        self._links = LinkSlots()
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._sock: Optional[_socket.socket] = None
        self._waiting: Dict[int, _Waiting] = {}
        self._streams: Dict[int, EventStream] = {}
        self._chunk_streams: Dict[int, ChunkStream] = {}
        self._methods: Dict[str, Callable[[Any], Any]] = {}
        self._host_calls: Dict[int, bool] = {}  # the supervisor's id -> cancelled
        self._pool: Optional[ThreadPoolExecutor] = None
        self._closed = False
        #: When the last try to connect failed, until when it waited, and how: see ``_ensure_connected``.
        self._connect_failed: Optional[Tuple[float, float, PluginError]] = None
        self._connect()

    # -- the calls of SPEC §12 -------------------------------------------------

    def call(self, target: str, method: str, params: Any = None, timeout: Optional[float] = None,
             sending: Optional[list] = None) -> Any:
        """Calls ``method`` of plugin ``target``; returns its result (decoded JSON). ``timeout``
        in seconds defaults to the plugin's own, which the supervisor keeps: a call through it
        waits for its answer, and with a ``timeout`` gives up 5 s past it at the latest (a
        supervisor that stopped answering, SIGSTOP say). ``sending``: raw bytes (bytes-like values) that
        ``params`` name ``{"$bytes": i}`` (SPEC §13): no base64; above 64 KiB a sealed memfd handed
        in at the supervisor's handoff socket. Those calls go through the supervisor."""
        if sending is not None:
            message = attach(_wire.call_message(target, method, params, timeout), sending, self.socket_path)
            return self._request(message, timeout)
        link = self._links.link(target)
        flags: dict = {}
        if link is not None:
            try:
                return link.call(method, params, timeout)
            except NotTaken:
                pass
            except LinkEnded as ended:
                flags, timeout = {"afterLink": ended.after_link}, ended.remaining
        try:
            result = self._request(_wire.call_message(target, method, params, timeout, **flags), timeout)
        except PluginError as error:
            raise after_link_lost(target, error) if flags else error
        self._ask_for_link(target)
        return result

    def call_bytes(self, target: str, method: str, params: Any = None, timeout: Optional[float] = None) -> bytes:
        """Calls ``method`` of ``target``, which answers with raw bytes (SPEC §13): the bytes its
        result names (``{"$bytes": i}``), inline or read from the sealed memfd the supervisor hands
        over. Through the supervisor (a direct link carries no descriptors)."""
        reply = self._request(_wire.call_message(target, method, params, timeout), timeout, whole=True)
        return named_bytes(reply, self.socket_path, f"{target}.{method}")

    def stream(self, target: str, method: str, params: Any = None, timeout: Optional[float] = None) -> ChunkStream:
        """Calls the stream method ``method`` of ``target`` (SPEC §13): a ``ChunkStream`` of its
        elements (decoded JSON), read as they come. ``timeout`` bounds the whole stream."""
        self._ensure_connected(timeout)
        request_id = next(self._ids)
        stream = ChunkStream(self, request_id)
        self._chunk_streams[request_id] = stream
        try:
            self._send(_wire.call_message(target, method, params, timeout, id=request_id, stream=True))
        except (OSError, PluginError) as error:
            self._chunk_streams.pop(request_id, None)
            raise connection_lost(f" ({error})") from None
        return stream

    @property
    def linked_plugins(self) -> list:
        """The plugins called over a direct link now."""
        return self._links.plugins

    def open(self, uri: str, timeout: Optional[float] = None) -> Any:
        """Opens a ``plugin://<identifier>/<path>?<query>`` URI."""
        message: Dict[str, Any] = {"type": "open", "uri": uri}
        if timeout is not None:
            message["timeoutMs"] = max(1, int(timeout * 1000))
        return self._request(message, timeout)

    def send(self, event: str, plugin: Optional[str] = None, timeout: Optional[float] = None) -> dict:
        """Sends ``memoryWarning``, ``background`` or ``foreground`` to every running plugin (or one).
        With a ``timeout`` (seconds), ``PluginError("timeout")`` if the supervisor has not answered by then."""
        message: Dict[str, Any] = {"type": "send", "name": event}
        if plugin is not None:
            message["target"] = plugin
        return self._request(message, timeout, margin=0.0)

    def status(self, timeout: Optional[float] = None) -> list:
        """Every plugin's status, as ``supervisor status --json`` prints it. With a ``timeout``
        (seconds), ``PluginError("timeout")`` if the supervisor has not answered by then."""
        return self._request({"type": "status"}, timeout, margin=0.0)

    def restart(self, plugin: str, timeout: Optional[float] = None) -> dict:
        """Restarts ``plugin`` (also one that has failed) and returns once it runs. With a
        ``timeout`` (seconds), ``PluginError("timeout")`` if it is not running by then (the
        restart itself goes on)."""
        return self._request({"type": "restart", "target": plugin}, timeout, margin=0.0)

    def upgrade(self, binary: Optional[str] = None, timeout: float = 30.0) -> dict:
        """Replaces the running supervisor with ``binary`` (default: the path it was started
        from) in place, without stopping a plugin (SPEC §14). Returns ``{"from", "to", "pid",
        "workers", "pauseMs"}``; raises ``PluginError`` naming why when the old one carries on.
        This client's connection and event streams go on across it."""
        message: Dict[str, Any] = {"type": "upgrade"}
        if binary is not None:
            message["params"] = {"binary": binary}
        return self._request(message, timeout)["upgraded"]

    def events(self, plugin: Optional[str] = None) -> EventStream:
        """Follows the host events (``started``, ``exited``, ``restarting``, ``failed``,
        ``updated``, ``installed``, ``uninstalled``, ``dropped``) from now on, each a dict as
        ``supervisor events --json`` prints it."""
        request_id = next(self._ids)
        stream = EventStream(self, request_id)
        self._streams[request_id] = stream
        message: Dict[str, Any] = {"type": "events", "id": request_id}
        if plugin is not None:
            message["target"] = plugin
        try:
            self._request(message, request_id=request_id)
        except BaseException:
            self._streams.pop(request_id, None)
            raise
        return stream

    def method(self, name: str, handler: Callable[[Any], Any]) -> None:
        """Provides the host method ``name`` to plugins (their ``@host`` calls, allowed by
        ``host.call:<name>``): ``handler(params)`` runs on a thread of the client's and returns
        the result; raising ``PluginError`` answers with its code, anything else ``pluginError``."""
        self._methods[name] = handler
        self._request({"type": "provide", "method": name})

    def close(self) -> None:
        self._closed = True
        for link in self._links.close_all():
            link.close()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the connection ----------------------------------------------------------

    def _connect(self, within: Optional[float] = None) -> None:
        deadline = time.monotonic() + connect_window(self.connect_timeout, within)
        while True:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                sock.connect(self.socket_path)
                break
            except OSError as error:
                sock.close()
                if error.errno in (errno.ENOENT, errno.ECONNREFUSED) and time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                raise unreachable(self.socket_path, error) from None
        self._sock = sock
        threading.Thread(target=self._read, args=(sock,), name="sandboxed-plugins-reader", daemon=True).start()
        # What this client provided is provided again by the new connection.
        for name in list(self._methods):
            self._send_quietly({"type": "provide", "id": next(self._ids), "method": name})

    def _ensure_connected(self, within: Optional[float] = None) -> None:
        asked = time.monotonic()
        deadline = asked + connect_window(self.connect_timeout, within)
        # Another request's try to connect holds the lock: a request with a timeout waits for it
        # no longer than its own window.
        if not self._state_lock.acquire(timeout=-1 if within is None else max(0.0, deadline - asked)):
            raise unreachable(self.socket_path, "no connection within the request's timeout while another request tried to connect")
        try:
            if self._closed:
                raise PluginError("unavailable", "the client is closed")
            if self._sock is None:
                # A try that failed while this caller waited for the lock, and that waited for the
                # supervisor as long as this caller would have, answers it too: callers of a
                # supervisor gone do not each wait out a connect_timeout of their own in turn.
                failed = self._connect_failed
                if failed is not None and failed[0] >= asked and failed[1] >= deadline:
                    raise again(failed[2])
                try:
                    self._connect(max(0.0, deadline - time.monotonic()))
                except PluginError as error:
                    self._connect_failed = (time.monotonic(), deadline, error)
                    raise
        finally:
            self._state_lock.release()

    def _send(self, message: Dict[str, Any]) -> None:
        frame = _wire.encode(message)
        with self._send_lock:
            sock = self._sock
            if sock is None:
                raise connection_lost()
            sock.sendall(frame)

    def _send_quietly(self, message: Dict[str, Any]) -> None:
        try:
            self._send(message)
        except (OSError, PluginError):
            pass

    def _request(self, message: Dict[str, Any], timeout: Optional[float] = None, request_id: Optional[int] = None,
                 progress: Optional[Callable[[dict], None]] = None, whole: bool = False, margin: float = 5.0) -> Any:
        """``timeout``: how long to wait for the answer, plus ``margin`` for a request whose
        deadline the supervisor keeps itself (a call's ``timeoutMs``)."""
        self._ensure_connected(timeout)
        if request_id is None:
            request_id = next(self._ids)
        message["id"] = request_id
        waiting = _Waiting(progress)
        self._waiting[request_id] = waiting
        try:
            self._send(message)
        except (PluginError, TypeError, ValueError):
            # Refused before a byte left (params that are not JSON, or too large): nothing waits.
            self._waiting.pop(request_id, None)
            raise
        except OSError as error:
            self._waiting.pop(request_id, None)
            self._lost(self._sock)
            raise connection_lost(f" ({error})") from None
        # The supervisor answers by a call's deadline itself; the margin covers a wedged one.
        if not waiting.done.wait(None if timeout is None else timeout + margin):
            self._waiting.pop(request_id, None)
            self._send_quietly({"type": "cancel", "id": request_id})
            raise PluginError("timeout", f"no answer from the supervisor within {timeout} s")
        reply = waiting.reply
        if reply is None:
            raise connection_lost(" before it answered")
        if "error" in reply:
            raise PluginError.from_body(reply["error"])
        return reply if whole else reply.get("result")

    def _read(self, sock: _socket.socket) -> None:
        frames = _wire.FrameBuffer()
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                for frame in frames.feed(data):
                    self._dispatch(frame)
        except (OSError, ValueError):
            pass
        self._lost(sock)

    def _lost(self, sock: Optional[_socket.socket]) -> None:
        with self._state_lock:
            if sock is None or self._sock is not sock:
                return
            self._sock = None
        try:
            sock.close()
        except OSError:
            pass
        waiting, self._waiting = self._waiting, {}
        for slot in waiting.values():
            slot.done.set()
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream._put(_END)
        chunk_streams, self._chunk_streams = self._chunk_streams, {}
        for chunks in chunk_streams.values():
            chunks._put(_END)
        # Handlers still running for the lost connection answer nobody: their calls count as
        # cancelled, and the next connection's calls (whose ids start again) are in a table of their own.
        host_calls, self._host_calls = self._host_calls, {}
        for call_id in host_calls:
            host_calls[call_id] = True

    def _dispatch(self, frame: dict) -> None:
        kind = frame.get("type")
        frame_id = frame.get("id")
        if kind == "chunk":
            chunks = self._chunk_streams.get(frame_id)
            if chunks is not None and not frame.get("input"):
                chunks._put(_wire.element(frame))
        elif kind == "reply":
            slot = self._waiting.pop(frame_id, None)
            chunks = self._chunk_streams.pop(frame_id, None) if slot is None else None
            if slot is not None:
                slot.reply = frame
                slot.done.set()
            elif chunks is not None:
                chunks._put(frame)
            elif frame_id == 0 and "error" in frame:
                # The supervisor dropped this connection, saying why.
                self._lost(self._sock)
        elif kind == "progress":
            slot = self._waiting.get(frame_id)
            if slot is not None and slot.progress is not None:
                slot.progress(frame)
        elif kind == "hostEvent":
            stream = self._streams.get(frame_id)
            if stream is not None:
                event = {k: v for k, v in frame.items() if k not in ("type", "id")}
                stream._put(event)
        elif kind == "call":
            self._host_call(frame)
        elif kind == "cancel":
            if frame_id in self._host_calls:
                self._host_calls[frame_id] = True
        elif kind == "unlink":
            self._unlink(frame.get("link"), frame_id)

    # -- direct links ------------------------------------------------------------

    def _ask_for_link(self, target: str) -> None:
        if self.direct_links and self._links.should_ask(target):
            threading.Thread(target=self._establish, args=(target,), name="sandboxed-plugins-link-ask", daemon=True).start()

    def _establish(self, target: str) -> None:
        try:
            grant = self._request({"type": "link", "target": target})
            link = DirectLink(grant, target, pick_up(grant), report=self._send_quietly, ended=self._links.ended)
        except (PluginError, OSError, KeyError, ValueError, TypeError):
            self._links.refused(target)
            return
        if not self._links.granted(link):
            link.close()

    def _unlink(self, number: Any, unlink_id: Any) -> None:
        """The supervisor takes a link back (its worker is stopping)."""
        answer = lambda: self._send_quietly({"type": "reply", "id": unlink_id, "result": None})  # noqa: E731
        link = self._links.take(number)
        if link is not None:
            link.unlink(answer)
        else:
            answer()

    def _host_call(self, frame: dict) -> None:
        call_id = frame.get("id")
        handler = self._methods.get(frame.get("method", ""))
        if handler is None:
            self._send_quietly({"type": "reply", "id": call_id,
                                "error": {"code": "notFound", "message": f"this client provides no method {frame.get('method')}"}})
            return
        calls = self._host_calls
        calls[call_id] = False
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="sandboxed-plugins-method")

        def run() -> None:
            try:
                reply: Dict[str, Any] = {"type": "reply", "id": call_id, "result": handler(frame.get("params"))}
            except PluginError as error:
                reply = {"type": "reply", "id": call_id, "error": error.body()}
            except Exception as error:  # the plugin hears it as the host method's failure
                reply = {"type": "reply", "id": call_id,
                         "error": {"code": "pluginError", "message": f"the host's {frame.get('method')} failed: {error}"}}
            if calls.pop(call_id, True):
                return  # cancelled (timed out, its plugin ended, or its connection was lost): nobody waits for it
            try:
                self._send(reply)
            except (TypeError, ValueError) as error:
                self._send_quietly({"type": "reply", "id": call_id,
                                    "error": {"code": "pluginError", "message": f"the host's answer is not JSON: {error}"}})
            except (OSError, PluginError):
                pass

        self._pool.submit(run)
