"""Append-only, hash-chained audit log of KV operations.

Every record is one JSON line carrying the SHA-256 (or, with a key, HMAC-SHA256) of the previous
record, so an edited, deleted, inserted or reordered line breaks the chain at that line. Truncating
the tail leaves a valid shorter chain: keep the last ``head()`` elsewhere (or use a key) if that
matters. kvstore must not import the app, so the log hands out plain callables
(:meth:`AuditLog.sink`) that the KV side calls on read / write / migrate / delete.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Literal, Sequence

Operation = Literal["read", "write", "migrate", "delete", "repair", "rollout"]
OPERATIONS: tuple[str, ...] = ("read", "write", "migrate", "delete", "repair", "rollout")
GENESIS = "0" * 64
KEYED = "hmac-sha256"
FORMAT = "minutia.audit/1"

KVEventSink = Callable[..., None]
"""What the KV side calls: ``sink(operation, block_ids, source="", **details)``."""


class AuditError(ValueError):
    """A record that cannot be written (unknown operation, bad block ids)."""


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    records: int  # records checked and found valid (before the first bad line)
    head: str  # hash of the last valid record (GENESIS when there is none)
    bad_line: int | None = None  # 1-based line number of the first bad record
    reason: str | None = None
    torn_at: int | None = None  # the bad line is a partial last line (a crash mid-append) starting at this byte
    keyed: int = 0  # records among ``records`` that carry an HMAC (the rest are unkeyed, anyone can recompute them)
    foreign: int = 0  # keyed records under another key: their links are checked, their contents cannot be


def _digest(key: bytes | None, prev: str, body: dict) -> str:
    payload = prev.encode() + b"\n" + json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()
    if key is not None:
        return hmac.new(key, payload, hashlib.sha256).hexdigest()
    return hashlib.sha256(payload).hexdigest()


def default_actor() -> str:
    """The operator and the service of this process, as records name them: ``user@host minutia live (pid N)``."""
    import getpass
    import socket
    import sys

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    words = [Path(sys.argv[0]).name] + [a for a in sys.argv[1:2] if not a.startswith("-")] if sys.argv else ["python"]
    return f"{user}@{socket.gethostname()} {' '.join(words)[:60]} (pid {os.getpid()})"


def _last_byte(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1)


def key_id(key: bytes) -> str:
    """A short public name of an HMAC key (not the key): which key a record was written with."""
    return hashlib.sha256(b"minutia audit key id\0" + key).hexdigest()[:16]


def _tail(path: Path) -> tuple[dict | None, int]:
    """The last whole record of the log (what another process appended last) and the byte where whatever
    follows it starts; ``None`` when the log holds no whole record. Call under the append lock: then bytes after
    the last newline, or a last line that is not a record, are a torn tail (a crash mid-append)."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        window = 65536
        while True:  # widen the window until it holds a whole line (a record listing many blocks is long)
            start = max(size - window, 0)
            f.seek(start)
            data = f.read()
            if start == 0 or data.count(b"\n") >= 2:
                break
            window *= 4
    end = data.rfind(b"\n") + 1  # whole lines end here
    lines = data[:end].splitlines()
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            return None, start + end  # a damaged whole line: the writer's own check will name it
        if isinstance(record, dict) and "seq" in record and "hash" in record:
            return record, start + end
        break
    return None, start + end


class AuditLog:
    """One file, opened for append; safe from several threads and several processes (an exclusive
    ``flock`` around each append, and the chain continues from whatever another process wrote last)."""

    def __init__(self, path: str | Path, key: bytes | None = None, fsync: bool = False,
                 actor: str | None = None) -> None:
        self.path = Path(path)
        self.actor = actor  # who acts: operator and service (default_actor()), in every record when set
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._key = key
        self._kid = key_id(key) if key is not None else None  # named in every keyed record
        self._fsync = fsync
        self._lock = threading.Lock()
        self._seq, self._head = 0, GENESIS
        # Owner-only, like the master key and the sessions: the log names who read which meeting, and when.
        self._file = os.fdopen(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", encoding="utf-8")
        if os.stat(self.path).st_mode & 0o077:  # a log made before this was 0644
            os.chmod(self.path, 0o600)
        # Checked and repaired under the append lock: another process may be appending right now, and its
        # half-written line is not a torn tail to cut.
        fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
        try:
            torn = self._take_over(key)
            self._size = os.fstat(self._file.fileno()).st_size  # where our view of the chain ends
            if torn:
                self._append("*", "repair", [], "audit.log", {"torn_tail_bytes": torn})
        except BaseException:
            self._file.close()
            raise
        finally:
            if not self._file.closed:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)

    def _take_over(self, key: bytes | None) -> int:
        """Verify the log and continue its chain (call under the lock). A crash mid-append leaves a partial
        last line: it is cut, and the bytes cut are returned so that the repair is recorded next."""
        size = os.fstat(self._file.fileno()).st_size
        if not size:
            return 0
        result = verify(self.path, key, links_only_for_others=True)  # `audit verify` checks them with their keys
        torn = 0
        if not result.ok and result.torn_at is not None:
            torn = self._cut(result.torn_at, size)
        elif not result.ok:
            raise AuditError(f"{self.path} is damaged at line {result.bad_line} ({result.reason}); not appending to "
                             f"it: `minutia audit verify {self.path}` shows it; move it aside to start a new log")
        elif _last_byte(self.path, size) != b"\n":
            self._file.write("\n")  # a whole last record whose newline a crash cut off
            self._file.flush()
        self._seq, self._head = result.records, result.head
        return torn

    def _cut(self, offset: int, size: int) -> int:
        """Cut a torn tail at ``offset`` (under the append lock); returns the bytes cut, for the repair record."""
        os.ftruncate(self._file.fileno(), offset)
        os.fsync(self._file.fileno())
        return size - offset

    def sync(self) -> None:
        """Make the records so far durable (a store calls it when it flushes a batch of blocks)."""
        with self._lock:
            if not self._file.closed:
                self._file.flush()
                os.fsync(self._file.fileno())

    def head(self) -> str:
        """Hash of the last record: store it elsewhere to detect a truncated tail later."""
        return self._head

    def record(self, session: str, operation: Operation, block_ids: Iterable[int | str], source: str = "",
               **details: object) -> dict:
        """Append one record and return it (with its hash)."""
        if operation not in OPERATIONS:
            raise AuditError(f"unknown audit operation {operation!r}; expected one of {', '.join(OPERATIONS)}")
        blocks = [b if isinstance(b, (int, str)) else None for b in block_ids]  # page numbers or store ids
        if any(b is None or isinstance(b, bool) for b in blocks):
            raise AuditError(f"block ids must be integers or strings, got {list(block_ids)!r}")
        with self._lock:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
            try:
                return self._append(session, operation, blocks, source, details)
            finally:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)

    def _append(self, session: str, operation: str, blocks: list, source: str, details: dict) -> dict:
        size = os.fstat(self._file.fileno()).st_size
        if size != self._size:  # another process appended meanwhile (or crashed mid-append)
            last, end = _tail(self.path)
            if end < size:  # a torn tail after the last whole record: cut it, as opening the log would
                self._cut(end, size)
                self._size = end
                if last is not None:
                    self._seq, self._head = int(last["seq"]), str(last["hash"])
                self._append("*", "repair", [], "audit.log", {"torn_tail_bytes": size - end})
            elif last is None:
                raise AuditError(f"{self.path} was changed by another process into something that is not a log")
            else:
                self._seq, self._head = int(last["seq"]), str(last["hash"])
        body = {"seq": self._seq + 1, "time": time.time(), "session": str(session), "op": operation,
                "blocks": blocks, "source": str(source), **({"details": details} if details else {}),
                **({"actor": self.actor} if self.actor else {})}
        if self._key is not None:
            body["mac"] = KEYED  # a keyed record says so, so that dropping the key is seen as tampering
            body["kid"] = self._kid  # which key: stores with other master keys may share one log
        body["prev"] = self._head
        digest = _digest(self._key, self._head, body)
        entry = {**body, "hash": digest}
        self._file.write(json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self._seq, self._head = body["seq"], digest
        self._size = os.fstat(self._file.fileno()).st_size
        return entry

    def sink(self, session: str) -> KVEventSink:
        """A callable for the KV side of one session: ``sink("migrate", [3, 4], source="L1->L2")``."""

        def emit(operation: Operation, block_ids: Sequence[int], source: str = "", **details: object) -> None:
            self.record(session, operation, block_ids, source, **details)

        return emit

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> "AuditLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def verify(path: str | Path, key: bytes | None = None, others: Sequence[bytes] = (),
           links_only_for_others: bool = False) -> VerifyResult:
    """Walk the chain; report the first line whose content, order or link does not check out. A last line
    that is not a whole record (no newline, or not JSON) is reported as torn, with where it starts.

    ``others``: the keys of other master keys whose stores share this log (a bot's and a CLI's): their records
    are checked with them (``foreign`` counts those). A keyed record under a key this check was not given fails:
    anyone can write a record naming a key nobody checks. ``links_only_for_others``: such records pass on their
    links alone (a writer continuing the chain of a log it shares, which cannot hold every key)."""
    head, seq, keyed, foreign = GENESIS, 0, 0, 0
    kid = key_id(key) if key is not None else None
    known = {key_id(k): k for k in others if k is not None and k != key}
    with open(path, "rb") as f:
        data = f.read()
    offset = 0
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]  # what follows the last newline: b"" for a whole file, a torn line otherwise
    for number, raw in enumerate([line for line in lines if line], start=1):
        start, offset = offset, offset + len(raw)
        last = offset == len(data)

        def bad(reason: str) -> VerifyResult:
            return VerifyResult(False, seq, head, number, reason, keyed=keyed, foreign=foreign)

        def unreadable(reason: str) -> VerifyResult:
            torn = last and (not raw.endswith(b"\n") or not raw.strip(b"\0 \n"))
            return VerifyResult(False, seq, head, number, reason, torn_at=start if torn else None, keyed=keyed,
                                foreign=foreign)

        try:
            entry = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return unreadable("not UTF-8")
        except json.JSONDecodeError as exc:
            return unreadable(f"not JSON: {exc.msg}")
        if not isinstance(entry, dict) or "hash" not in entry or "prev" not in entry:
            return bad("not an audit record")
        if entry.get("seq") != seq + 1:
            return bad(f"sequence {entry.get('seq')} where {seq + 1} was expected (deleted or reordered records)")
        if entry["prev"] != head:
            return bad("previous-hash link broken (deleted, inserted or reordered records)")
        stored = entry.pop("hash")
        is_keyed = entry.get("mac") == KEYED
        if keyed and not is_keyed:
            return bad("an unkeyed record after keyed ones (records recomputed without the key)")
        if is_keyed and key is None:
            return bad("a keyed record: verifying it needs the key")
        checked_with = key
        if is_keyed and entry.get("kid") not in (None, kid):  # written by a store with another master key
            if entry.get("kid") not in known:
                if not links_only_for_others:
                    return bad(f"a record under master key {entry.get('kid')}, which this check was not given (give "
                               "that key to verify it)")
                head, seq, keyed, foreign = str(stored), seq + 1, keyed + 1, foreign + 1
                continue
            checked_with = known[entry["kid"]]
        if not hmac.compare_digest(str(stored).encode(), _digest(checked_with if is_keyed else None, head, entry).encode()):
            return bad("hash mismatch (record edited)")
        head, seq, keyed = str(stored), seq + 1, keyed + is_keyed
        foreign += checked_with is not key
    return VerifyResult(True, seq, head, keyed=keyed, foreign=foreign)


class AuditedStore:
    """A session store whose every block write, read (``get``, ``read_with`` and their unverified forms: resume,
    cold-tier recall and tier moves read that way) and delete goes into the audit log first-hand.

    Wraps any kvstore BlockStore (the encrypted one in practice) by delegation, so kvstore stays
    unaware of the app; everything else (flush, list, shred, ...) passes straight through.

    ``batch`` > 1 (the host-memory cold tier, read at every recall): like operations are gathered into one
    record of up to ``batch`` block ids, written when it is full, when its first operation is
    ``max_delay_s`` old (at the next operation), on :meth:`flush` and on :meth:`close`; a crash loses at
    most those records. ``owns_log``: close the log with the store (False when the log is shared, e.g.
    the session store's log used by a meeting's cold tiers).
    """

    def __init__(self, inner, log: "AuditLog", batch: int = 1, max_delay_s: float = 5.0, owns_log: bool = True) -> None:
        if batch < 1:
            raise ValueError("batch must be >= 1")
        self._inner = inner
        self._log = log
        self._batch = batch
        self._max_delay_s = max_delay_s
        self._owns_log = owns_log
        self._pending: dict[tuple[str, str, str], tuple[float, list[str], int]] = {}  # (session, op, source)
        self._pending_lock = threading.Lock()

    @property
    def log(self) -> "AuditLog":
        return self._log

    @property
    def takes_source(self) -> bool:
        """Whether blocks can be tagged with their source (for crypto-shredding): the inner store's."""
        from kvstore.crypto import EncryptedStore

        return isinstance(self._inner, EncryptedStore) or getattr(self._inner, "takes_source", False)

    def _record(self, session: str, operation: Operation, block_id: str, source: str = "", nbytes: int = 0) -> None:
        tier = getattr(self._inner, "tier", "?")
        if self._batch == 1:
            details = {"bytes": nbytes} if operation == "write" else {}
            self._log.record(session, operation, [block_id], source, **details, tier=tier)
            return
        now = time.monotonic()
        due = []
        with self._pending_lock:
            key = (session, operation, source)
            since, ids, total = self._pending.get(key, (now, [], 0))
            ids.append(block_id)
            self._pending[key] = (since, ids, total + nbytes)
            for k, (t0, gathered, _) in list(self._pending.items()):
                if len(gathered) >= self._batch or now - t0 >= self._max_delay_s:
                    due.append((k, self._pending.pop(k)))
        self._write(due)

    def _write(self, due) -> None:
        tier = getattr(self._inner, "tier", "?")
        for (session, operation, source), (_, ids, total) in due:
            details = {"bytes": total} if operation == "write" else {}
            self._log.record(session, operation, ids, source, **details, tier=tier, batched=len(ids))

    def flush_records(self) -> None:
        """Write the gathered records now (``batch`` > 1)."""
        with self._pending_lock:
            due, self._pending = list(self._pending.items()), {}
        self._write(due)

    def put(self, session: str, block_id: str, data: bytes, **kwargs: object) -> None:
        self._inner.put(session, block_id, data, **kwargs)
        self._record(session, "write", block_id, str(kwargs.get("source") or ""), len(data))

    def get(self, session: str, block_id: str) -> bytes:
        data = self._inner.get(session, block_id)
        self._record(session, "read", block_id)
        return data

    def get_unverified(self, session: str, block_id: str) -> bytes:
        data = self._inner.get_unverified(session, block_id)
        self._record(session, "read", block_id)
        return data

    def read_with(self, session: str, block_id: str, use):
        """The read that resume, cold-tier recall and tier moves use (a lent view, no copy): audited too."""
        result = self._inner.read_with(session, block_id, use)
        self._record(session, "read", block_id)
        return result

    def read_unverified(self, session: str, block_id: str, use):
        result = self._inner.read_unverified(session, block_id, use)
        self._record(session, "read", block_id)
        return result

    def delete(self, session: str, block_id: str) -> bool:
        existed = self._inner.delete(session, block_id)
        if existed:
            self._record(session, "delete", block_id)
        return existed

    def delete_session(self, session: str) -> int:
        self.flush_records()
        ids = self._inner.list(session)
        removed = self._inner.delete_session(session)
        if ids:
            self._log.record(session, "delete", ids, whole_session=True)
        return removed

    def shred(self, source: str, session: str | None = None):
        self.flush_records()
        report = self._inner.shred(source, session)
        for touched in report.sessions or [session or "*"]:
            self._log.record(touched, "delete", [], source, shredded=True, keys_destroyed=report.keys_destroyed,
                             blocks_deleted=report.blocks_deleted)
        return report

    def flush(self) -> None:
        """The blocks, then their records: a batch of saves is durable in both once this returns."""
        self._inner.flush()
        self.flush_records()
        self._log.sync()

    def close(self) -> None:
        self._inner.close()
        self.flush_records()
        if self._owns_log:
            self._log.close()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)
