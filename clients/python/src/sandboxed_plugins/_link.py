"""A blocking client's direct link to one plugin's worker (docs/protocol.md, "Direct links for
clients"): calls go over it straight to the worker, one hop. The client keeps each call's deadline
(a late call fails ``timeout`` and the worker gets ``cancel``) and reports the calls' counts to the
supervisor (``linkCalls``), so its metrics count every call. A link that ends with its worker
hands its calls in flight back to their callers (``LinkEnded``), who send each through the
supervisor again naming where it was (``afterLink``, docs/protocol.md "Calls that survive a
crash"): replayed if the worker never handed it to its plugin, retried if idempotent, else failed
with ``started``. One the supervisor takes back (``unlink``) takes no new calls and is given back
once its calls are settled."""
from __future__ import annotations

import bisect
import itertools
import os
import socket as _socket
import stat
import threading
import time
from typing import Any, Callable, Dict, Optional

from . import _wire
from .errors import PluginError

#: The call-duration histogram's bucket bounds (ns), as the supervisor's (`CallHop.bucketBounds`).
BUCKET_BOUNDS = [50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000,
                 50_000_000, 100_000_000, 250_000_000, 500_000_000, 1_000_000_000, 2_500_000_000, 5_000_000_000,
                 10_000_000_000]
REPORT_INTERVAL = 1.0


class Tally:
    """The calls a link sent since its last report: counts by outcome, durations per bucket and
    their sum, as the supervisor's `linkCalls` reads them."""

    def __init__(self) -> None:
        self.counts = {"ok": 0, "error": 0, "timeout": 0, "unavailable": 0}
        self.buckets = [0] * (len(BUCKET_BOUNDS) + 1)
        self.sum_ns = 0

    def record(self, outcome: str, started: int) -> None:
        ns = time.monotonic_ns() - started
        self.counts[outcome] += 1
        self.buckets[bisect.bisect_left(BUCKET_BOUNDS, ns)] += 1
        self.sum_ns += ns

    @property
    def empty(self) -> bool:
        return not any(self.counts.values())

    def report(self, target: str, ended_link: Optional[int]) -> dict:
        report = {"type": "linkCalls", "target": target, "counts": dict(self.counts), "buckets": list(self.buckets),
                  "sumNs": self.sum_ns}
        if ended_link is not None:
            report["endedLink"] = ended_link
        return report


class LinkSlots:
    """One client's direct links, by plugin (the blocking and the asyncio client's alike): which are
    there, which are being asked for, which were refused lately (not asked again for ``retry``
    seconds). Thread-safe."""

    _ASKING = object()

    def __init__(self, retry: float = 5.0) -> None:
        self._lock = threading.Lock()
        self._slots: Dict[str, Any] = {}  # plugin -> a link, _ASKING, or the time to ask again
        self._retry = retry
        self._closed = False

    def link(self, target: str) -> Any:
        slot = self._slots.get(target)
        return slot if hasattr(slot, "call") else None

    @property
    def plugins(self) -> list:
        return sorted(t for t, slot in list(self._slots.items()) if hasattr(slot, "call"))

    def should_ask(self, target: str) -> bool:
        """Whether to ask for a link to ``target`` now; True marks it as asked for."""
        with self._lock:
            slot = self._slots.get(target)
            if self._closed or hasattr(slot, "call") or slot is self._ASKING or (isinstance(slot, float) and slot > time.monotonic()):
                return False
            self._slots[target] = self._ASKING
            return True

    def granted(self, link: Any) -> bool:
        """Keeps the link asked for; False (the caller closes it) when it is no longer wanted."""
        with self._lock:
            if self._closed or self._slots.get(link.target) is not self._ASKING:
                return False
            self._slots[link.target] = link
            return True

    def refused(self, target: str) -> None:
        with self._lock:
            if self._slots.get(target) is self._ASKING:
                self._slots[target] = time.monotonic() + self._retry

    def ended(self, link: Any) -> None:
        with self._lock:
            if self._slots.get(link.target) is link:
                del self._slots[link.target]

    def take(self, number: Any) -> Any:
        """The link numbered ``number``, no longer used for calls (``unlink``); None if none is."""
        with self._lock:
            for target, slot in list(self._slots.items()):
                if hasattr(slot, "call") and slot.number == number:
                    del self._slots[target]
                    return slot
        return None

    def close_all(self) -> list:
        """Every link (to close); none is kept from now on."""
        with self._lock:
            self._closed = True
            links = [slot for slot in self._slots.values() if hasattr(slot, "call")]
            self._slots.clear()
        return links


class _Call:
    __slots__ = ("done", "reply", "started")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: Optional[dict] = None
        self.started = time.monotonic_ns()


class NotTaken(Exception):
    """The link took no more calls when this one came: it goes through the supervisor."""


class LinkEnded(Exception):
    """The link ended with its worker while the call was in flight: it goes through the supervisor
    again, with ``after_link`` (``{"link": N, "id": X}``) and what is left of its time."""

    def __init__(self, after_link: dict, remaining: float) -> None:
        super().__init__(f"link {after_link['link']} ended")
        self.after_link = after_link
        self.remaining = remaining


def ended_call(target: str, link: int, call_id: int, deadline_ns: int) -> Exception:
    """What a call in flight on a link that ended becomes: ``LinkEnded``, or ``timeout`` past its deadline."""
    left = (deadline_ns - time.monotonic_ns()) / 1e9
    if left <= 0:
        return PluginError("timeout", f"{target} did not answer call in time")
    return LinkEnded({"link": link, "id": call_id}, left)


def redeem(path: str, token: str, what: str) -> int:
    """The descriptor a one-time token stands for, from the supervisor's handoff socket (unchecked)."""
    with _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM) as handoff:
        handoff.settimeout(2.0)
        handoff.connect(path)
        handoff.sendall(_wire.encode({"token": token}))
        message, fds, flags, _ = _socket.recv_fds(handoff, 512, 1)
    if flags & getattr(_socket, "MSG_CTRUNC", 0):
        for fd in fds:
            os.close(fd)
        raise PluginError("unavailable", f"{what} was cut off in transit")
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise PluginError("unavailable", f"{what} was not handed over: {message[4:]!r}")
    return fds[0]


#: Bytes up to this size travel in the frame; larger ones as a sealed memfd.
INLINE_LIMIT = 64 * 1024


def sealed_memfd(data: bytes) -> int:
    """A memfd holding ``data``, sealed against writes, shrinking, growing and new seals."""
    import fcntl
    fd = os.memfd_create("sp-bytes", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def deposit(path: str, fd: int, length: int) -> str:
    """Hands the sealed memfd ``fd`` in at the supervisor's handoff socket (``{"put": length}``
    with it attached) and returns the one-time token a call names it by."""
    with _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM) as handoff:
        handoff.settimeout(2.0)
        handoff.connect(path)
        _socket.send_fds(handoff, [_wire.encode({"put": length})], [fd])
        buffer = _wire.FrameBuffer(4096)
        while True:
            data = handoff.recv(4096)
            if not data:
                raise PluginError("unavailable", f"the supervisor did not answer the hand-in of {length} bytes")
            frames = buffer.feed(data)
            if frames:
                answer = frames[0]
                break
    if "token" not in answer:
        raise PluginError(answer.get("code", "badRequest"), f"the supervisor refused {length} bytes: {answer.get('error', 'no reason given')}")
    return answer["token"]


def attach(message: Dict[str, Any], sending: list, socket_path: str) -> Dict[str, Any]:
    """``message`` carrying ``sending`` (bytes-like values; its params name them ``{"$bytes": i}``):
    up to 64 KiB inline, larger ones copied once into a sealed memfd handed in at the handoff
    socket and named by token (docs/protocol.md "Bytes")."""
    attachments = []
    tail = bytearray()
    for data in sending:
        data = bytes(data)
        if len(data) <= INLINE_LIMIT:
            attachments.append({"length": len(data)})
            tail += data
            continue
        fd = sealed_memfd(data)
        try:
            attachments.append({"length": len(data), "token": deposit(socket_path + ".links", fd, len(data))})
        finally:
            os.close(fd)
    message["attachments"] = attachments
    message[_wire.TAIL] = bytes(tail)
    return message


def attached_bytes(reply: dict, socket_path: str) -> list:
    """The bytes attached to a reply (docs/protocol.md "Bytes"), in order: inline ones from its
    frame, larger ones read from the sealed memfd picked up at the handoff socket (checked: a
    regular file, sealed against writes, shrinking and growing, of the announced length)."""
    import fcntl
    import mmap
    out = []
    tail = reply.get(_wire.TAIL, b"")
    at = 0
    for a in reply.get("attachments", []):
        length = int(a["length"])
        if "token" in a:
            fd = redeem(socket_path + ".links", a["token"], "the answer's bytes")
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
                needed = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                if not stat.S_ISREG(os.fstat(fd).st_mode) or seals & needed != needed or os.fstat(fd).st_size != length:
                    raise PluginError("unavailable", f"the answer's bytes are not a sealed memfd of {length} bytes")
                if length == 0:
                    out.append(b"")
                else:
                    with mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ) as mapped:
                        out.append(bytes(mapped))
            finally:
                os.close(fd)
        else:
            out.append(tail[at:at + length])
            at += length
    return out


def named_bytes(reply: dict, socket_path: str, what: str) -> bytes:
    """The bytes a reply's result names (``{"$bytes": i}``, else the first attachment)."""
    attached = attached_bytes(reply, socket_path)
    result = reply.get("result")
    index = result.get("$bytes", 0) if isinstance(result, dict) else 0
    if not 0 <= index < len(attached):
        raise PluginError("unavailable", f"{what} answered {result!r} with no bytes attached")
    return attached[index]


def pick_up(grant: dict) -> _socket.socket:
    """The link's descriptor, picked up where the grant says with its one-time token."""
    fd = redeem(grant["socket"], grant["token"], "the link's descriptor")
    # A received descriptor is checked before it is used: a stream socket, nothing else.
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        os.close(fd)
        raise PluginError("unavailable", "the link's descriptor is not a socket")
    return _socket.socket(fileno=fd)


class DirectLink:
    def __init__(self, grant: dict, target: str, sock: _socket.socket, report: Callable[[dict], None],
                 ended: Callable[["DirectLink"], None]) -> None:
        self.number = int(grant["link"])
        self.timeout_ms = int(grant["timeoutMs"])
        self.target = target
        self._sock = sock
        self._report = report
        self._ended = ended
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: Dict[int, _Call] = {}
        self._closed = False
        self._unlinked = False
        self._answer_unlink: Optional[Callable[[], None]] = None
        self._tally = Tally()
        self._last_report = time.monotonic()
        threading.Thread(target=self._read, name="sandboxed-plugins-link", daemon=True).start()

    def call(self, method: str, params: Any, timeout: Optional[float]) -> Any:
        """The call's result; raises ``NotTaken`` when the link takes no more calls, ``LinkEnded``
        when it ended with its worker while the call was in flight."""
        ms = max(1, int(timeout * 1000)) if timeout is not None else self.timeout_ms
        with self._lock:
            if self._closed:
                raise NotTaken()
            call_id = next(self._ids)
            call = _Call()
            self._waiting[call_id] = call
        message: Dict[str, Any] = {"type": "call", "id": call_id, "target": self.target, "method": method, "timeoutMs": ms}
        if params is not None:
            message["params"] = params
        try:
            frame = _wire.encode(message)
            with self._send_lock:
                self._sock.sendall(frame)
        except (OSError, ValueError, TypeError):
            with self._lock:
                self._waiting.pop(call_id, None)
            raise NotTaken() from None
        if not call.done.wait(ms / 1000):
            with self._lock:
                late = self._waiting.pop(call_id, None)
                if late is not None:
                    self._tally.record("timeout", late.started)
            if late is not None:
                self._send_quietly({"type": "cancel", "id": call_id})
                self._settled_maybe_unlink()
                raise PluginError("timeout", f"{self.target} did not answer call in time")
        reply = call.reply
        if reply is None:
            raise ended_call(self.target, self.number, call_id, call.started + ms * 1_000_000)
        if "error" in reply:
            raise PluginError.from_body(reply["error"])
        return reply.get("result")

    def unlink(self, answer: Callable[[], None]) -> None:
        """The supervisor takes the link back: no new calls; ``answer`` once the last is settled."""
        with self._lock:
            self._closed = True
            self._unlinked = True
            if self._waiting:
                self._answer_unlink = answer
                return
        self._finish_unlink(answer)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass

    def _finish_unlink(self, answer: Callable[[], None]) -> None:
        self._send_report(force=True, ended_link=None)
        answer()
        self.close()

    def _settled_maybe_unlink(self) -> None:
        with self._lock:
            answer = self._answer_unlink if not self._waiting else None
            if answer is not None:
                self._answer_unlink = None
        if answer is not None:
            self._finish_unlink(answer)

    def _send_quietly(self, message: dict) -> None:
        try:
            with self._send_lock:
                self._sock.sendall(_wire.encode(message))
        except OSError:
            pass

    def _send_report(self, force: bool, ended_link: Optional[int]) -> None:
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last_report < REPORT_INTERVAL:
                return
            self._last_report = now
            if self._tally.empty and ended_link is None:
                return
            report = self._tally.report(self.target, ended_link)
            self._tally = Tally()
        self._report(report)

    def _read(self) -> None:
        frames = _wire.FrameBuffer()
        self._sock.settimeout(REPORT_INTERVAL)
        try:
            while True:
                try:
                    data = self._sock.recv(65536)
                except _socket.timeout:
                    self._send_report(force=False, ended_link=None)
                    continue
                if not data:
                    break
                for frame in frames.feed(data):
                    if frame.get("type") != "reply":
                        continue
                    with self._lock:
                        call = self._waiting.pop(frame.get("id"), None)
                        if call is not None:
                            self._tally.record("error" if "error" in frame else "ok", call.started)
                    if call is not None:
                        call.reply = frame
                        call.done.set()
                        self._settled_maybe_unlink()
                self._send_report(force=False, ended_link=None)
        except (OSError, ValueError):
            pass
        self._end()

    def _end(self) -> None:
        with self._lock:
            self._closed = True
            # Not counted here: each goes through the supervisor again, which counts it.
            calls = list(self._waiting.values())
            self._waiting = {}
            unlinked, answer = self._unlinked, self._answer_unlink
            self._answer_unlink = None
        # The supervisor hears that the link ended before any caller can make its next call: that
        # call then waits for the plugin's restart instead of reaching a worker that is ending.
        self._send_report(force=True, ended_link=None if unlinked else self.number)
        for call in calls:
            call.done.set()
        if answer is not None:
            answer()
        try:
            self._sock.close()
        except OSError:
            pass
        self._ended(self)
