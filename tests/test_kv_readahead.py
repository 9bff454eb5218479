"""Read-ahead hints (BlockStore.will_read): block files come into the page cache before they are read.

Real files, a real page cache: the blocks are flushed, their pages dropped (fdatasync + DONTNEED), and
mincore(2) tells which pages are cached.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
import time
from pathlib import Path

import pytest

from kvstore.crypto import EncryptedStore, MasterKey
from kvstore.stores import readahead
from kvstore.stores.disk import DiskStore

BLOCK = 48 << 10
N = 24

pytestmark = pytest.mark.skipif(not readahead.available() or not sys.platform.startswith("linux"),
                                reason="needs posix_fadvise and mincore (Linux)")


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def _cached(path: Path) -> bool:
    """Whether every page of ``path`` is in the page cache, by mincore(2) on a mapping of it (which reads
    nothing: a probing read would start the kernel's own read-ahead and hide whether the hint did)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if not size:
            return True
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return all(b & 1 for b in vec.raw[:pages])
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def _wait_cached(paths: list[Path], timeout: float = 10.0) -> bool:
    readahead.wait_idle()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the hint queued the reads; the disk finishes them shortly after
        if all(_cached(p) for p in paths):
            return True
        time.sleep(0.02)
    return False


def _drop_or_skip(root: Path, files: list[Path]) -> None:
    readahead.drop_cached([root])
    if any(_cached(p) for p in files):
        pytest.skip("this file system keeps dropped pages cached")


def _open(root: Path, encrypted: bool, master: MasterKey):
    return EncryptedStore(DiskStore(root), master) if encrypted else DiskStore(root)


@pytest.fixture
def master() -> MasterKey:
    return MasterKey(os.urandom(32))


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_will_read_brings_cold_blocks_into_the_page_cache(tmp_path: Path, encrypted: bool, master: MasterKey) -> None:
    root = tmp_path / "disk"
    blocks = {f"L0/b{i}": os.urandom(BLOCK) for i in range(N)}
    store = _open(root, encrypted, master)
    for block_id, data in blocks.items():
        store.put("m", block_id, data)
    store.close()
    store = _open(root, encrypted, master)  # as after a restart: nothing read or mapped yet
    try:
        inner = store.inner if encrypted else store
        # the blocks' own files (an encrypted store's data key is a block of its own, read once per source)
        files = [inner._paths[("m", b)] for b in blocks]
        _drop_or_skip(root, files)
        store.will_read("m", list(blocks))
        assert _wait_cached(files), "the hinted blocks did not come into the page cache"
        for block_id, data in blocks.items():
            assert store.read_with("m", block_id, bytes) == data
    finally:
        store.close()


def test_will_read_fetches_only_the_blocks_named(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "disk")
    for i in range(N):
        store.put("m", f"b{i}", os.urandom(BLOCK))
    store.put("other", "b0", os.urandom(BLOCK))
    store.flush()
    paths = {b: store._paths[("m", b)] for b in (f"b{i}" for i in range(N))}
    _drop_or_skip(tmp_path / "disk", [*paths.values(), store._paths[("other", "b0")]])
    wanted = {f"b{i}" for i in range(0, N, 3)}
    store.will_read("m", sorted(wanted) + ["missing"])
    assert _wait_cached([paths[b] for b in wanted])
    assert not any(_cached(p) for b, p in paths.items() if b not in wanted)
    assert not _cached(store._paths[("other", "b0")])
    store.close()
