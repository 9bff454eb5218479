"""Redis tier: blocks in a real redis-server (or Cluster), so any node can resume a session.

Key layout (Cluster-compatible: every key of a session shares the hash tag ``{session}``, so one
session's keys live in one slot and multi-key commands on them are allowed)::

    <prefix>:{<session>}:b:<block id>   the block's bytes
    <prefix>:{<session>}:index          set of the session's block ids
    <prefix>:sessions                   set of session ids (its own slot; touched alone)
"""

from __future__ import annotations

import functools
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

import redis

from kvstore.stores.base import BlockNotFound, BlockStore, StoreError, StoreFull, StoreUnavailable, check_key

T = TypeVar("T")

# Hinted blocks per MGET: about READ_AHEAD_BYTES (sized from the blocks fetched so far; the first batch
# takes READ_AHEAD_FIRST), at most READ_AHEAD_BLOCKS. Measured on loopback: batches of 0.5-1 MiB read
# fastest (3-7x GET per block for 16-64 KiB blocks); larger replies parse slower again.
READ_AHEAD_FIRST = 8
READ_AHEAD_BLOCKS = 64
READ_AHEAD_BYTES = 1 << 20


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

    ``buffer_bytes`` bounds how much is buffered: a put that fills the buffer hands it to a sender
    thread and goes on (so sealing the next blocks overlaps the network); at most one batch is in
    flight. Every other operation first waits for it, so a delete never overtakes its put; a failed
    batch goes back into the buffer and its error is raised by that next operation.

    Reads of blocks named by :meth:`will_read` come in batches: the first read of a hinted block
    fetches it and the hinted blocks after it with one MGET (one slot: the session's hash tag), so a
    resume pays one round trip per batch instead of one per block -- KV blocks are tens of KiB, where
    the round trip is most of a GET. A put or delete of a fetched block drops the fetched copy.
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
        self._buffered_keys: dict[tuple[str, str], bytes | bytearray] = {}
        self._inflight: Future | None = None
        self._inflight_keys: dict[tuple[str, str], bytes | bytearray] = {}
        self._sender: ThreadPoolExecutor | None = None
        self._hint_order: list[tuple[str, str]] = []  # will_read's blocks, in read order
        self._hinted: dict[tuple[str, str], int] = {}  # hinted and not fetched yet -> position
        self._ahead: dict[tuple[str, str], bytes] = {}  # fetched ahead, not read yet
        self._ahead_blocks = READ_AHEAD_FIRST

    def _tag(self, session: str) -> str:
        return f"{self.prefix}:{{{session}}}"

    def _key(self, session: str, block_id: str) -> str:
        return f"{self._tag(session)}:b:{block_id}"

    @_guard
    def ping(self, session: str = "-") -> bool:
        return bool(self.client.ping())

    def put(self, session: str, block_id: str, data: bytes) -> None:
        self._put(session, block_id, data if isinstance(data, bytes) else bytes(data))

    def put_owned(self, session: str, block_id: str, data: bytearray) -> None:
        """Like :meth:`put`, keeping ``data`` in the pipeline buffer without a copy (redis-py sends bytearrays)."""
        self._put(session, block_id, data)

    @_guard
    def _put(self, session: str, block_id: str, data: bytes | bytearray) -> None:
        check_key(session, block_id)
        if "{" in session or "}" in session:
            raise ValueError(f"session {session!r} may not contain braces (Redis hash tags)")
        self._drop_ahead(session, block_id)
        old = self._buffered_keys.get((session, block_id))
        self._buffered += len(data) - (len(old) if old is not None else 0)
        self._buffered_keys[(session, block_id)] = data
        if self._buffered >= self.buffer_bytes:
            self._wait_inflight()
            batch, self._buffered_keys, self._buffered = self._buffered_keys, {}, 0
            if self._sender is None:
                self._sender = ThreadPoolExecutor(1, thread_name_prefix="redis-store-sender")
            self._inflight_keys = batch
            self._inflight = self._sender.submit(self._send_batch, batch)

    def _send_batch(self, batch: dict[tuple[str, str], bytes | bytearray]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for (s, block_id), data in batch.items():
            pipe.set(self._key(s, block_id), data)
            pipe.sadd(f"{self._tag(s)}:index", block_id)
        for s in {s for s, _ in batch}:
            pipe.sadd(f"{self.prefix}:sessions", s)
        pipe.execute()

    def _wait_inflight(self) -> None:
        """Wait for the batch in flight; if it failed, put it back under the newer puts and raise."""
        if self._inflight is None:
            return
        inflight, batch = self._inflight, self._inflight_keys
        self._inflight, self._inflight_keys = None, {}
        try:
            inflight.result()
        except BaseException:
            newer = self._buffered_keys
            self._buffered_keys = {**batch, **newer}
            self._buffered = sum(len(d) for d in self._buffered_keys.values())
            raise

    def _send(self, session: str) -> None:
        """Send everything buffered now; on failure it stays buffered for the next try."""
        self._wait_inflight()
        if self._buffered_keys:
            self._send_batch(self._buffered_keys)
        self._buffered = 0
        self._buffered_keys.clear()

    @_guard
    def get(self, session: str, block_id: str) -> bytes:
        key = (session, block_id)
        buffered = self._buffered_keys.get(key)
        if buffered is None:
            buffered = self._inflight_keys.get(key)
        if buffered is not None:
            return buffered if isinstance(buffered, bytes) else bytes(buffered)
        data = self._ahead.pop(key, None)
        if data is None and key in self._hinted:
            data = self._fetch_ahead(key)
        if data is None:
            data = self.client.get(self._key(session, block_id))
        if data is None:
            raise BlockNotFound(f"no block {block_id!r} in session {session!r} (Redis {self.url})")
        return data

    def will_read(self, session: str, block_ids: Sequence[str]) -> None:
        """Remember the order: reads of these blocks then fetch them in batches (see the class)."""
        self._hint_order = [(session, b) for b in block_ids]
        self._hinted = {key: i for i, key in enumerate(self._hint_order)}
        self._ahead.clear()

    def _fetch_ahead(self, key: tuple[str, str]) -> bytes | None:
        """Fetch ``key`` and the hinted blocks after it (one MGET); returns ``key``'s bytes or None."""
        start = self._hinted[key]
        batch = [k for k in self._hint_order[start:start + 4 * self._ahead_blocks]
                 if k in self._hinted and k not in self._buffered_keys and k not in self._inflight_keys]
        batch = batch[:self._ahead_blocks]
        values = self.client.mget([self._key(*k) for k in batch])
        self._ahead.clear()  # what is left was skipped by the reader
        fetched = 0
        for k, value in zip(batch, values):
            del self._hinted[k]
            if value is not None:
                self._ahead[k] = value
                fetched += len(value)
        if fetched:  # about READ_AHEAD_BYTES per batch from now on
            self._ahead_blocks = max(1, min(READ_AHEAD_BLOCKS, READ_AHEAD_BYTES * len(self._ahead) // fetched))
        return self._ahead.pop(key, None)

    def _drop_ahead(self, session: str, block_id: str) -> None:
        self._ahead.pop((session, block_id), None)
        self._hinted.pop((session, block_id), None)

    @_guard
    def delete(self, session: str, block_id: str) -> bool:
        self._drop_ahead(session, block_id)
        self._wait_inflight()
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
        if (session, block_id) in self._buffered_keys or (session, block_id) in self._inflight_keys:
            return True
        self._wait_inflight()
        return bool(self.client.exists(self._key(session, block_id)))

    @_guard
    def list(self, session: str) -> list[str]:
        if self._buffered_keys or self._inflight is not None:
            self._send(session)
        return sorted(m.decode() for m in self.client.smembers(f"{self._tag(session)}:index"))

    @_guard
    def sessions(self) -> list[str]:
        if self._buffered_keys or self._inflight is not None:
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
        if self._buffered_keys or self._inflight is not None:
            self._send("-")

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._sender is not None:
                self._sender.shutdown()
            self.client.close()
