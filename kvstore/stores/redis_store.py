"""Redis tier: blocks in a real redis-server (or Cluster), so any node can resume a session.

Key layout (Cluster-compatible: every key of a session shares the hash tag ``{session}``, so one
session's keys live in one slot and multi-key commands on them are allowed)::

    <prefix>:{<session>}:b:<block id>   the block's bytes
    <prefix>:{<session>}:index          set of the session's block ids
    <prefix>:sessions                   set of session ids (its own slot; touched alone)
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import redis

from kvstore.stores.base import BlockNotFound, BlockStore, StoreError, StoreFull, StoreUnavailable, check_name

T = TypeVar("T")


def _guard(method: Callable[..., T]) -> Callable[..., T]:
    """Turn redis-py errors into the store's errors, naming the server and session."""

    @functools.wraps(method)
    def wrapper(self: "RedisStore", *args: Any, **kwargs: Any) -> T:
        session = args[0] if args else "-"
        try:
            return method(self, *args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StoreUnavailable(f"Redis at {self.url} unreachable (session {session!r}): {exc}") from None
        except redis.ResponseError as exc:
            if "OOM" in str(exc):
                raise StoreFull(f"Redis at {self.url} is out of memory (session {session!r}): {exc}") from None
            raise StoreError(f"Redis at {self.url} refused a request (session {session!r}): {exc}") from None

    return wrapper


class RedisStore(BlockStore):
    """Blocks of each session under one hash tag. Writes are pipelined and sent at :meth:`flush`.

    ``buffer_bytes`` bounds how much is buffered before a put sends the pipeline itself.
    """

    tier = "redis"

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", prefix: str = "minutia",
                 connect_timeout_s: float = 2.0, buffer_bytes: int = 8 << 20,
                 client: redis.Redis | None = None) -> None:
        self.url = url
        self.prefix = prefix
        self.buffer_bytes = buffer_bytes
        self.client = client or redis.Redis.from_url(url, socket_connect_timeout=connect_timeout_s,
                                                     socket_timeout=max(connect_timeout_s, 10.0))
        self._buffered = 0
        self._buffered_keys: dict[tuple[str, str], bytes] = {}

    def _tag(self, session: str) -> str:
        return f"{self.prefix}:{{{session}}}"

    def _key(self, session: str, block_id: str) -> str:
        return f"{self._tag(session)}:b:{block_id}"

    @_guard
    def ping(self, session: str = "-") -> bool:
        return bool(self.client.ping())

    @_guard
    def put(self, session: str, block_id: str, data: bytes) -> None:
        check_name("session", session)
        check_name("block id", block_id)
        if "{" in session or "}" in session:
            raise ValueError(f"session {session!r} may not contain braces (Redis hash tags)")
        old = self._buffered_keys.get((session, block_id))
        self._buffered += len(data) - (len(old) if old is not None else 0)
        self._buffered_keys[(session, block_id)] = bytes(data)
        if self._buffered >= self.buffer_bytes:
            self._send(session)

    def _send(self, session: str) -> None:
        """Send the buffered puts in one pipeline; on failure they stay buffered for the next try."""
        pipe = self.client.pipeline(transaction=False)
        for (s, block_id), data in self._buffered_keys.items():
            pipe.set(self._key(s, block_id), data)
            pipe.sadd(f"{self._tag(s)}:index", block_id)
        for s in {s for s, _ in self._buffered_keys}:
            pipe.sadd(f"{self.prefix}:sessions", s)
        pipe.execute()
        self._buffered = 0
        self._buffered_keys.clear()

    @_guard
    def get(self, session: str, block_id: str) -> bytes:
        buffered = self._buffered_keys.get((session, block_id))
        if buffered is not None:
            return buffered
        data = self.client.get(self._key(session, block_id))
        if data is None:
            raise BlockNotFound(f"no block {block_id!r} in session {session!r} (Redis {self.url})")
        return data

    @_guard
    def delete(self, session: str, block_id: str) -> bool:
        if self._buffered_keys.pop((session, block_id), None) is not None:
            self._buffered = sum(len(d) for d in self._buffered_keys.values())
        pipe = self.client.pipeline(transaction=True)  # same slot: MULTI is Cluster-safe here
        pipe.delete(self._key(session, block_id))
        pipe.srem(f"{self._tag(session)}:index", block_id)
        removed, _ = pipe.execute()
        if not self.client.scard(f"{self._tag(session)}:index"):
            self.client.srem(f"{self.prefix}:sessions", session)
        return bool(removed)

    @_guard
    def contains(self, session: str, block_id: str) -> bool:
        return (session, block_id) in self._buffered_keys or bool(self.client.exists(self._key(session, block_id)))

    @_guard
    def list(self, session: str) -> list[str]:
        if self._buffered_keys:
            self._send(session)
        return sorted(m.decode() for m in self.client.smembers(f"{self._tag(session)}:index"))

    @_guard
    def sessions(self) -> list[str]:
        if self._buffered_keys:
            self._send("-")
        return sorted(m.decode() for m in self.client.smembers(f"{self.prefix}:sessions"))

    @_guard
    def nbytes(self) -> int:
        total = 0
        for session in self.sessions():
            keys = [self._key(session, b) for b in self.list(session)]
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.strlen(key)
            total += sum(pipe.execute())
        return total

    @_guard
    def flush(self) -> None:
        if self._buffered_keys:
            self._send("-")

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.client.close()
