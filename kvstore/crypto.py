"""Encryption at rest for the host, disk and Redis tiers: AES-256-GCM, a key hierarchy, crypto-shredding.

Keys::

    master key (32 bytes: a 0600 key file, or MINUTIA_MASTER_KEY as base64)
      -> session key-encryption key = HKDF-SHA256(master, salt="minutia/session/" + session)
        -> data key per (session, source): 32 random bytes, stored only wrapped (AES-GCM) by that KEK
          -> block key of the source = HKDF-Expand-SHA256(data key, info="minutia blocks v3", 32 bytes)

A data key is random rather than derived so that it can be destroyed: deriving it from the master
would let anyone holding the master re-create it. Forgetting a source (a recording, a speaker)
deletes its wrapped data keys and its blocks; a copy of the ciphertext kept elsewhere (a backup, a
Redis replica) can then no longer be decrypted by anyone, which :func:`verify_shredded` checks.

Each block is sealed with a fresh random 96-bit nonce under its source's key; the AAD binds it to its
session, block id and source, so a block moved, swapped, truncated or edited fails authentication
(:class:`TamperedBlock`). Random nonces under one key stay safe (collision chance below 2^-32) up to
2^32 seals per source, far above the blocks one source's meeting writes (a 512 MiB host tier holds
~30,000 16 KiB blocks, and a block is sealed again only when it is evicted again).

Cost: one cipher per source, set up once: format 2 derived a key per block (an HMAC plus AES's
key schedule and OpenSSL's context set-up, ~7 us, as long as decrypting a 16 KiB block), and the
host tier's recalls of blocks evicted long ago missed any bounded cache of those ciphers. Formats 1
(full HKDF per block) and 2 (HKDF-Expand per block: ``info="minutia block v2" + block id``) are still
read, never written. Sealing writes header and ciphertext straight into
one buffer (``AESGCM.encrypt_into``) that the inner store keeps (``put_owned``), and opening decrypts
from memoryview slices of the stored blob as the inner store lends it (``read_unverified``: a buffer it
reuses, or its mapping), so a read makes one new block-sized buffer, the plaintext. Reads skip the inner
store's CRC, since the GCM tag already covers every byte. Block ciphers are kept per store (up to
``CIPHERS``, keyed by the data key), and sealed-blob buffers are reused across the process (``_BlobPool``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
import struct
import sys
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from kvstore.stores.base import BlockNotFound, BlockStore, CorruptBlock, StoreError, check_name, lend_scratch

T = TypeVar("T")
MASTER_KEY_ENV = "MINUTIA_MASTER_KEY"
KEY_PREFIX = "~key/"  # block ids of wrapped data keys, inside each session
_MAGIC = b"MKVE"
_VERSION = 3  # written: one key per source; 1 and 2 (a key per block) are still read
_VERSIONS = (1, 2, 3)
_HEAD = struct.Struct("<4sBH")  # magic, version, len(source)
_NONCE = 12
_TAG = 16
POOL_BYTES = 64 << 20  # sealed-blob buffers kept for reuse (the write-behind stores queue up to 64 MiB)
CIPHERS = 1024  # ciphers kept per store: one per source (format 3), or per block of formats 1 and 2


class KeyFileError(Exception):
    """The master key is missing, malformed or not protected (permissions looser than 0600)."""


class MissingKeyError(StoreError):
    """A block's data key is gone (crypto-shredded or never written): the block cannot be read."""


class WrongKeyError(StoreError):
    """The master key does not open this session's data keys."""


class TamperedBlock(CorruptBlock):
    """An encrypted block failed authentication: edited, truncated, moved or swapped."""


def _hkdf(secret: bytes, salt: bytes | None, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)


class _BlobPool:
    """Buffers for sealed blobs, shared by the process's encrypted stores: the oldest one handed out is
    reused once nothing but the pool refers to it (the inner store wrote it and let it go), else a new
    one is made. Why: a write-behind store holds tens of MiB of blobs, and fresh ones are fresh pages
    (glibc gives freed heap back to the system): faulting them in cost three times the encryption."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # bytes of buffers kept
        self._blobs: deque[bytearray] = deque()  # oldest first
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> bytearray:
        with self._lock:
            blobs = self._blobs
            blob = None
            if blobs:
                oldest = blobs.popleft()
                if sys.getrefcount(oldest) > 2:  # the local's + the argument's: someone else still holds it
                    blobs.append(oldest)  # look again after the others
                elif len(oldest) == nbytes:
                    blob = oldest
                else:
                    self._bytes -= len(oldest)  # free, but another size: let it go
                del oldest
            if blob is None:
                blob = bytearray(nbytes)
                self._bytes += nbytes
            blobs.append(blob)
            while self._bytes > self.limit:  # forget the oldest (in use or not: then the GC frees it)
                self._bytes -= len(blobs.popleft())
            return blob


_BLOBS = _BlobPool(POOL_BYTES)


@dataclass(frozen=True, repr=False)
class MasterKey:
    secret: bytes

    def __post_init__(self) -> None:
        if len(self.secret) != 32:
            raise KeyFileError(f"the master key must be 32 bytes (AES-256), got {len(self.secret)}")

    def __repr__(self) -> str:
        return "MasterKey(<hidden>)"

    @classmethod
    def load(cls, key_file: str | Path | None = None, env: str = MASTER_KEY_ENV) -> "MasterKey":
        """From ``key_file`` (32 raw bytes or base64 text, mode 0600 or stricter) or else the ``env`` variable."""
        if key_file is not None:
            path = Path(key_file)
            try:
                mode = path.stat().st_mode
            except FileNotFoundError:
                raise KeyFileError(f"master key file {path} does not exist "
                                   f"(create one with kvstore.crypto.MasterKey.generate)") from None
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise KeyFileError(f"master key file {path} has permissions {stat.S_IMODE(mode):04o}; it must not "
                                   f"be readable by group or others (chmod 600 {path})")
            return cls(cls._decode(path.read_bytes(), str(path)))
        value = os.environ.get(env)
        if not value:
            raise KeyFileError(f"no master key: pass a key file or set {env} (base64 of 32 random bytes)")
        return cls(cls._decode(value.encode(), f"${env}"))

    @staticmethod
    def _decode(raw: bytes, where: str) -> bytes:
        if len(raw) == 32:
            return raw
        try:
            return base64.b64decode(raw.strip(), validate=True)
        except ValueError:
            raise KeyFileError(f"{where} is neither 32 raw bytes nor base64") from None

    @classmethod
    def generate(cls, key_file: str | Path) -> "MasterKey":
        """Create a new random key file with mode 0600 (refuses to overwrite one)."""
        secret = os.urandom(32)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64encode(secret) + b"\n")
        return cls(secret)

    def audit_key(self) -> bytes:
        """The HMAC key of the audit log: derived, so the log is keyed wherever the store is encrypted."""
        return _hkdf(self.secret, b"minutia/audit", b"minutia audit hmac v1")

    def cache_key(self, purpose: str) -> bytes:
        """An AES-256 key for a cache of the app's own (``purpose``: e.g. "transcripts"), derived like the others."""
        return _hkdf(self.secret, b"minutia/cache/" + purpose.encode(), b"minutia cache key v1")

    def session_kek(self, session: str) -> bytes:
        return _hkdf(self.secret, b"minutia/session/" + session.encode(), b"minutia key-encryption key v1")


@dataclass
class ShredReport:
    source: str
    sessions: list[str] = field(default_factory=list)
    keys_destroyed: int = 0
    blocks_deleted: int = 0


class EncryptedStore(BlockStore):
    """Any :class:`BlockStore` with every block AES-256-GCM sealed; ``put`` takes a source tag."""

    takes_source = True  # what kvstore.placement and the app's wrappers (audited, lazy) look for

    def __init__(self, inner: BlockStore, master: MasterKey) -> None:
        self.inner = inner
        self.master = master
        self.tier = inner.tier
        self._data_keys: dict[tuple[str, str], bytes] = {}
        # (data key, block id, version), oldest first; an OrderedDict: dropping a plain dict's first key again and
        # again makes next(iter()) walk the dead slots before it, which cost a third of a 16 KiB host-tier read
        self._ciphers: OrderedDict[tuple[bytes, str, int], AESGCM] = OrderedDict()
        self._lock = threading.Lock()

    # -------------------------------------------------------------------------------------------
    # keys
    # -------------------------------------------------------------------------------------------

    def _key_aad(self, session: str, source: str) -> bytes:
        return b"minutia data key v1\0" + session.encode() + b"\0" + source.encode()

    def _data_key(self, session: str, source: str, create: bool) -> bytes:
        with self._lock:
            cached = self._data_keys.get((session, source))
            if cached is not None:
                return cached
            kek = AESGCM(self.master.session_kek(session))
            try:
                wrapped = self.inner.get(session, KEY_PREFIX + source)
            except BlockNotFound:
                if not create:
                    raise MissingKeyError(f"the data key of source {source!r} in session {session!r} is gone "
                                          f"(crypto-shredded or never written): its blocks cannot be read") from None
                key = os.urandom(32)
                nonce = os.urandom(_NONCE)
                self.inner.put(session, KEY_PREFIX + source, nonce + kek.encrypt(nonce, key, self._key_aad(session, source)))
            else:
                try:
                    key = kek.decrypt(wrapped[:_NONCE], wrapped[_NONCE:], self._key_aad(session, source))
                except InvalidTag:
                    raise WrongKeyError(f"the master key does not open the data key of source {source!r} in "
                                        f"session {session!r} (wrong key, or the key record was tampered with)") from None
            self._data_keys[(session, source)] = key
            return key

    @staticmethod
    def block_key(data_key: bytes, block_id: str, version: int = _VERSION) -> bytes:
        """The AES-256 key a block of ``version`` is sealed with: its source's (3), or its own (1, 2).
        Expand alone suffices: a data key already is 32 uniformly random bytes (RFC 5869, 3.3)."""
        if version == 1:
            return _hkdf(data_key, None, b"minutia block v1\0" + block_id.encode())
        info = b"minutia blocks v3" if version == 3 else b"minutia block v2\0" + block_id.encode()
        return hmac.digest(data_key, info + b"\x01", hashlib.sha256)  # = HKDF-Expand(data_key, info, 32)

    def _block_key(self, data_key: bytes, block_id: str, version: int = _VERSION) -> AESGCM:
        """The cipher a block is sealed with, kept for the next seal or read. Keyed by the data key
        itself, so a new data key never meets an old cipher; shredding or deleting a session drops them all."""
        slot = (data_key, "" if version == 3 else block_id, version)
        cipher = self._ciphers.get(slot)
        if cipher is None:
            cipher = AESGCM(self.block_key(data_key, block_id, version))
            with self._lock:
                self._ciphers[slot] = cipher
                if len(self._ciphers) > CIPHERS:
                    self._ciphers.popitem(last=False)
        return cipher

    @staticmethod
    def _aad(session: str, block_id: str, source: str, version: int = _VERSION) -> bytes:
        return _MAGIC + bytes([version]) + b"\0".join(s.encode() for s in (session, block_id, source))

    # -------------------------------------------------------------------------------------------
    # BlockStore
    # -------------------------------------------------------------------------------------------

    def put(self, session: str, block_id: str, data: bytes, source: str | None = None) -> None:
        """Seal and store; ``source`` (default: the session) is what :meth:`shred` forgets by."""
        check_name("block id", block_id)
        if block_id.startswith(KEY_PREFIX):
            raise ValueError(f"block ids starting with {KEY_PREFIX!r} are reserved for keys")
        source = check_name("source", source or session)
        key = self._block_key(self._data_key(session, source, create=True), block_id)
        nonce = os.urandom(_NONCE)
        src = source.encode()
        head = _HEAD.pack(_MAGIC, _VERSION, len(src)) + src + nonce
        blob = _BLOBS.take(len(head) + len(data) + _TAG)
        blob[:len(head)] = head
        key.encrypt_into(nonce, data, self._aad(session, block_id, source), memoryview(blob)[len(head):])
        put_owned = getattr(self.inner, "put_owned", None)  # the blob is ours: let the store keep it uncopied
        (put_owned or self.inner.put)(session, block_id, blob)

    @staticmethod
    def sealed_size(nbytes: int, source: str) -> int:
        """Bytes a block of ``nbytes`` takes sealed: header, source tag, nonce, ciphertext, tag (what a tier's
        budget counts, :meth:`kvstore.placement.TierPlacement.tier_bytes`)."""
        return _HEAD.size + len(source.encode()) + _NONCE + nbytes + _TAG

    @staticmethod
    def source_of(blob: bytes, where: str = "block") -> tuple[str, int]:
        """The source tag of a sealed blob (readable without keys) and where its nonce starts."""
        return EncryptedStore._parse_head(blob, where)[1:]

    @staticmethod
    def _parse_head(blob: bytes | memoryview, where: str) -> tuple[int, str, int]:
        """``(format version, source tag, nonce offset)`` of a sealed blob."""
        if len(blob) < _HEAD.size:
            raise TamperedBlock(f"{where}: truncated ({len(blob)} bytes)")
        magic, version, n = _HEAD.unpack_from(blob)
        if magic != _MAGIC or version not in _VERSIONS:
            raise TamperedBlock(f"{where}: not an encrypted minutia block")
        try:
            return version, bytes(blob[_HEAD.size:_HEAD.size + n]).decode(), _HEAD.size + n
        except UnicodeDecodeError:
            raise TamperedBlock(f"{where}: damaged source tag") from None

    def get(self, session: str, block_id: str) -> bytes:
        # AES-GCM authenticates every byte, so the inner store's own checksum pass is redundant here; the
        # inner store lends its read buffer and the plaintext is the one new buffer the read makes
        return self.inner.read_unverified(session, block_id, lambda blob: self._open(session, block_id, blob))

    def read_with(self, session: str, block_id: str, use: Callable[[memoryview], T]) -> T:
        """``use(view)`` of the authenticated plaintext, decrypted into a reused per-thread buffer
        (``decrypt_into``): no block-sized buffer is made, nor zero-filled, as ``decrypt`` does for
        :meth:`get`; the ciphertext is the inner store's lent view (a mapping of a sealed segment)."""
        return self.inner.read_unverified(session, block_id, lambda blob: self._open(session, block_id, blob, use))

    def _open(self, session: str, block_id: str, blob: memoryview, use: Callable[[memoryview], T] | None = None):
        """Authenticate and decrypt a sealed blob (:class:`TamperedBlock` if it does not check): the
        plaintext as new bytes, or ``use(view)`` of it decrypted into a lent buffer."""
        where = f"block {block_id!r} of session {session!r}"
        version, source, start = self._parse_head(blob, where)
        if len(blob) < start + _NONCE + _TAG:
            raise TamperedBlock(f"{where}: truncated ({len(blob)} bytes)")
        key = self._block_key(self._data_key(session, source, create=False), block_id, version)
        nonce, sealed, aad = blob[start:start + _NONCE], blob[start + _NONCE:], self._aad(session, block_id, source, version)
        try:
            if use is None:
                return key.decrypt(nonce, sealed, aad)

            def decrypted(out: memoryview) -> T:
                key.decrypt_into(nonce, sealed, aad, out)
                return use(out)
            return lend_scratch(len(sealed) - _TAG, decrypted)
        except InvalidTag:
            raise TamperedBlock(f"{where} failed authentication: it was modified, truncated or moved") from None

    def will_read(self, session: str, block_ids: Sequence[str]) -> None:
        self.inner.will_read(session, block_ids)

    def delete(self, session: str, block_id: str) -> bool:
        return self.inner.delete(session, block_id)

    def contains(self, session: str, block_id: str) -> bool:
        return self.inner.contains(session, block_id)

    def list(self, session: str) -> list[str]:
        return [b for b in self.inner.list(session) if not b.startswith(KEY_PREFIX)]

    def sessions(self) -> list[str]:
        return self.inner.sessions()

    def nbytes(self) -> int:
        return self.inner.nbytes()

    def session_nbytes(self, session: str) -> int | None:
        return self.inner.session_nbytes(session)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def delete_session(self, session: str) -> int:
        """Delete a session's blocks and its data keys."""
        count = super().delete_session(session)
        for key_id in [b for b in self.inner.list(session) if b.startswith(KEY_PREFIX)]:
            self.inner.delete(session, key_id)
        with self._lock:
            for pair in [p for p in self._data_keys if p[0] == session]:
                del self._data_keys[pair]
            self._ciphers.clear()
        return count

    # -------------------------------------------------------------------------------------------
    # crypto-shredding
    # -------------------------------------------------------------------------------------------

    def sources(self, session: str) -> list[str]:
        return sorted(b[len(KEY_PREFIX):] for b in self.inner.list(session) if b.startswith(KEY_PREFIX))

    def shred(self, source: str, session: str | None = None) -> ShredReport:
        """Forget everything from ``source`` in every session (or in ``session`` alone): destroy its data keys,
        delete its blocks."""
        report = ShredReport(source)
        for session in ([session] if session is not None else self.inner.sessions()):
            touched = False
            if self.inner.delete(session, KEY_PREFIX + source):
                report.keys_destroyed += 1
                touched = True
            with self._lock:
                self._data_keys.pop((session, source), None)
                self._ciphers.clear()
            for block_id in self.list(session):
                try:
                    tag, _ = self.source_of(self.inner.get(session, block_id))
                except CorruptBlock:
                    continue  # damaged blocks have no readable tag; they cannot be decrypted anyway
                if tag == source:
                    self.inner.delete(session, block_id)
                    report.blocks_deleted += 1
                    touched = True
            if touched:
                report.sessions.append(session)
        self.inner.flush()
        return report

    def verify_shredded(self, source: str, copies: list[tuple[str, str, bytes]] = ()) -> bool:
        """True when no key and no block of ``source`` is left, and every given ciphertext copy
        ``(session, block_id, blob)`` (e.g. from a backup) is now undecryptable."""
        for session in self.inner.sessions():
            if self.inner.contains(session, KEY_PREFIX + source):
                return False
            for block_id in self.list(session):
                try:
                    if self.source_of(self.inner.get(session, block_id))[0] == source:
                        return False
                except CorruptBlock:
                    continue
        for session, block_id, blob in copies:
            tag, _ = self.source_of(blob)
            if tag != source:
                continue
            try:
                self._data_key(session, source, create=False)
            except MissingKeyError:
                continue
            return False
        return True
