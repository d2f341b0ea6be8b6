"""Talk to a running sandboxed-plugins supervisor from Python (SPEC §12, docs/host.md).

``Client`` blocks; ``AsyncClient`` is its asyncio twin. Both call plugins (``call``, ``open``; ``call_bytes`` on ``Client``),
send them lifecycle events (``send``), read ``status``, follow ``events`` and provide host methods
(``method``) and read stream methods' answers (``stream``). Failures raise ``PluginError`` with the protocol's ``code``. Standard library only.
"""
from .aio import AsyncChunkStream, AsyncClient, AsyncEventStream
from .client import SENDABLE_EVENTS, ChunkStream, Client, EventStream
from .errors import PluginError
from ._wire import default_home, socket_path

__all__ = ["Client", "AsyncClient", "EventStream", "AsyncEventStream", "ChunkStream", "AsyncChunkStream", "PluginError", "SENDABLE_EVENTS",
           "default_home", "socket_path"]
