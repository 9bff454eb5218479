"""The encrypted store that durable meeting sessions are saved to (disk or Redis, from the config).

One master key encrypts every session at rest (AES-256-GCM, a data key per session and source,
kvstore/crypto.py). It comes from ``store.key_file``, else ``$MINUTIA_MASTER_KEY``; with neither, a
disk store creates ``<home>/master.key`` with mode 0600 on first use (like an SSH key), so saving
works out of the box and the key never sits next to the data by accident of configuration.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from app.platform.config import Settings, StoreSettings
from encoders.errors import InputError


class ProcessLock:
    """An exclusive ``flock`` on ``path`` held by this process, its pid written inside. A second holder is
    refused with ``busy`` (``{pid}`` filled in) instead of both writing the same thing; the kernel drops
    the lock when the process dies, so a crash never leaves it held."""

    def __init__(self, path: Path, busy: str) -> None:
        import fcntl

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "?"
            self._file.close()
            raise InputError(busy.format(pid=holder)) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(str(os.getpid()))
        self._file.flush()

    def release(self) -> None:
        if not self._file.closed:
            self._file.close()  # closing the descriptor drops the flock


class SessionClaim(ProcessLock):
    """This process's hold on a saved session's name (``<home>/locks/<id>.lock``), held while the session
    is open: two concurrent ``--save --session dup`` runs used to both say "saved"."""

    def __init__(self, home: Path, session_id: str) -> None:
        super().__init__(Path(home) / "locks" / f"{session_id}.lock",
                         f"session {session_id} is open in another process (pid {{pid}}); close it there first")


class LazyStore:
    """A block store opened on first use: a meeting whose cold blocks never spill past host memory
    never touches the master key, the audit log or Redis (and an unreachable Redis fails that spill
    alone, as :class:`~kvstore.stores.base.StoreUnavailable`, not the meeting)."""

    def __init__(self, open_store, tier: str, on_close=None) -> None:
        self._open = open_store
        self._store = None
        self.tier = tier
        self._on_close = on_close  # a store this wrapper owns is closed (and cleaned up) with it; a shared one is not

    def _inner(self):
        if self._store is None:
            from kvstore.stores.base import StoreUnavailable

            try:
                self._store = self._open()
            except InputError as exc:
                raise StoreUnavailable(str(exc)) from None
        return self._store

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close(self._store)

    def shred(self, source: str, session: str | None = None):
        """Crypto-shred ``source`` (:meth:`kvstore.crypto.EncryptedStore.shred`); a store never opened holds nothing."""
        return None if self._store is None else self._store.shred(source, session)

    def __getattr__(self, name: str):
        if name == "flush" and self._store is None:
            return lambda: None
        return getattr(self._inner(), name)


def default_key_file(settings: Settings) -> Path:
    return settings.home / "master.key"


def load_master_key(settings: Settings, create_key: bool = True, key_file: Path | None = None,
                    saved_meetings: Callable[[], tuple[int, str]] | None = None):
    """The master key: ``key_file``, else ``store.key_file``, else ``$MINUTIA_MASTER_KEY``, else
    ``<home>/master.key`` (created with mode 0600 when ``create_key``).

    The default key file gone while meetings are saved is an error, never a new key: a new one would seal the next
    meeting under another key and say of the old ones that nothing was saved here (issue 49). ``saved_meetings``:
    how many meetings the key opens and where (default: the disk store's folder)."""
    from kvstore.crypto import MASTER_KEY_ENV, KeyFileError, MasterKey

    key_file = key_file or settings.store.key_file
    try:
        if key_file is None and not os.environ.get(MASTER_KEY_ENV):
            key_file = default_key_file(settings)
            if not key_file.exists():
                nothing = InputError(f"no master key at {key_file} and ${MASTER_KEY_ENV} is not set: nothing was saved here")
                if not create_key and saved_meetings is None:
                    raise nothing
                saved, where = (saved_meetings or (lambda: meetings_kept(settings)))()
                if saved:
                    raise InputError(f"the master key {key_file} is missing, and {saved} saved meeting(s) in {where} "
                                     f"can only be opened with it: put the key back (or set ${MASTER_KEY_ENV}); to "
                                     "start afresh, move the saved meetings aside first")
                if not create_key:
                    raise nothing
                key_file.parent.mkdir(parents=True, exist_ok=True)
                MasterKey.generate(key_file)
        return MasterKey.load(key_file)
    except KeyFileError as exc:
        raise InputError(str(exc)) from None


def library_path(settings: Settings) -> Path:
    """The meeting library's file (app/library): sealed under the master key like the saved meetings."""
    return settings.home / "library" / "library.db"


def meetings_kept(settings: Settings) -> tuple[int, str]:
    """What the configured disk store's folder and the meeting library hold, and where."""
    folder = settings.store.path or settings.home / "sessions"
    saved = sum(1 for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else 0
    library = library_path(settings)
    if library.is_file():
        import sqlite3

        try:
            with sqlite3.connect(f"file:{library}?mode=ro", uri=True) as db:
                recorded = db.execute("SELECT COUNT(*) FROM meetings").fetchone()[0]
        except sqlite3.DatabaseError:
            recorded = 1  # a library that does not open may still hold meetings
        if recorded:
            return saved + recorded, (f"{folder} and " if saved else "") + f"the meeting library {library}"
    return saved, str(folder)


def _listed(inner, where: str) -> tuple[int, str]:
    """The meetings a store lists (0 for a store that cannot list them: the key question is answered as before)."""
    try:
        return len(inner.sessions()), where
    except Exception:
        return 0, where


def open_session_store(settings: Settings, create_key: bool = True, backend: str | None = None,
                       path: Path | None = None, redis_url: str | None = None, key_file: Path | None = None):
    """An EncryptedStore over the configured backend, every block operation in the audit log.

    CLI flags override the config. Verify the log with ``minutia audit verify <home>/audit.log``.
    """
    from kvstore.crypto import EncryptedStore
    from kvstore.stores import StoreError

    cfg: StoreSettings = settings.store
    backend = backend or cfg.backend
    if backend not in ("disk", "redis"):
        raise InputError(f"the session store must be disk or redis, not {backend!r}")
    try:
        if backend == "disk":
            from kvstore.stores.disk import DiskStore

            folder = path or cfg.path or settings.home / "sessions"
            folder.mkdir(parents=True, exist_ok=True)
            inner, where = DiskStore(folder), str(folder)
        else:
            from kvstore.stores.redis_store import RedisStore

            inner, where = RedisStore(redis_url or cfg.redis_url), "the redis store"
    except StoreError as exc:
        raise InputError(f"cannot open the {backend} session store: {exc}") from None
    try:
        master = load_master_key(settings, create_key, key_file, saved_meetings=lambda: _listed(inner, where))
    except BaseException:
        inner.close()
        raise
    from app.platform.audit import AuditedStore

    try:
        log = open_audit_log(settings, master)
    except InputError:
        inner.close()
        raise
    return AuditedStore(EncryptedStore(inner, master), log)


def open_audit_log(settings: Settings, master):
    """The audit log (``store.audit_log``, default ``<home>/audit.log``), keyed by the master key. Several
    may be open on the one file (the session store's, each meeting's host tier): appends are locked and
    every writer continues the chain from the last record."""
    from app.platform.audit import AuditError, AuditLog, default_actor

    try:
        return AuditLog(settings.store.audit_log or settings.home / "audit.log", key=master.audit_key(),
                        actor=default_actor())
    except AuditError as exc:
        raise InputError(str(exc)) from None


HOST_AUDIT_BATCH = 64  # block ids per audit record of the host tier (a recall reads blocks one by one)


def host_cold_tier(settings: Settings):
    """The host tier of a live meeting's cold blocks: a memory slab, sealed block by block with the session
    store's master key unless ``kv.cold.encrypt_host`` is off (opened on the first eviction, so a meeting that
    evicts nothing never loads the key). Why: KV that leaves the device is encrypted, host memory included
    (a core dump, swap); the per-source data keys let a source be crypto-shredded there too. Sealed, its
    writes, reads (recalls, moves to the device) and deletes go into the audit log, gathered
    ``HOST_AUDIT_BATCH`` block ids to a record (app.platform.audit.AuditedStore)."""
    from kvstore.stores.memory import MemoryStore

    if not settings.kv.cold.encrypt_host:
        return MemoryStore("cpu", tier="host")

    def open_sealed():
        from app.platform.audit import AuditedStore
        from kvstore.crypto import EncryptedStore

        master = load_master_key(settings)
        return AuditedStore(EncryptedStore(MemoryStore("cpu", tier="host"), master), open_audit_log(settings, master),
                            batch=HOST_AUDIT_BATCH)

    def close(store) -> None:
        if store is not None:
            store.close()  # writes the records still gathered

    return LazyStore(open_sealed, "host", on_close=close)


def cold_folder(settings: Settings, session_id: str) -> Path:
    """A live meeting's transient cold-block log: per process (``<id>.<pid>``), so a second process opening the
    same session (a read-only resume) never removes the folder a writer is spilling into."""
    return settings.home / "cold" / f"{session_id}.{os.getpid()}"


def open_cold_store(settings: Settings, session_id: str, log=None):
    """The disk tier of one live meeting's cold blocks: an encrypted log-structured store under
    ``<home>/cold/<session>.<pid>`` (transient: removed when the meeting closes; saving the meeting copies
    its cold blocks into the session store). ``log``: an audit log to record its operations in."""
    from kvstore.crypto import EncryptedStore
    from kvstore.stores.segment import SegmentStore

    folder = cold_folder(settings, session_id)
    folder.mkdir(parents=True, exist_ok=True)
    store = EncryptedStore(SegmentStore(folder), load_master_key(settings))
    if log is None:
        return store
    from app.platform.audit import AuditedStore

    return AuditedStore(store, log, owns_log=False)  # the session store's log: it outlives this meeting
