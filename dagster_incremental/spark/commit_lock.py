"""One writer at a time per table on a local (or mounted) disk, across processes: the lock both
formats take around a commit there (Iceberg's Hadoop folder, spark/iceberg/files.py; a Delta
table's folder, spark/delta/s3_lease.py)."""

from __future__ import annotations

import fcntl
import os
import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


LOCK_FILE = ".dagster_incremental.lock"


_SLOTS = 1 << 30  # byte offsets a table name hashes to; a collision only makes two tables take turns


_open_files: dict[Path, int] = {}


_thread_locks: dict[tuple[Path, int], threading.Lock] = {}


_registry_lock = threading.Lock()


_held = threading.local()  # the (file, slot) pairs this thread holds


@contextmanager
def table_commit_lock(warehouse: Path, table_parts: Sequence[str]) -> Iterator[None]:
    """Hold the table's commit lock (waiting for another process's commit to finish). Taking it
    again in the thread that holds it raises: that write would wait for itself forever."""
    path = warehouse / LOCK_FILE
    slot = zlib.crc32("\x00".join(table_parts).encode()) % _SLOTS
    held: set[tuple[Path, int]] = _held.__dict__.setdefault("keys", set())
    if (path, slot) in held:
        raise RuntimeError(f"table {'.'.join(table_parts)} under {warehouse}: this thread already holds its commit "
                           "lock; a write of the table inside another write of it would wait for itself forever")
    with _thread_lock(path, slot):
        fd = _lock_file(path)
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, slot)
        held.add((path, slot))
        try:
            yield
        finally:
            held.discard((path, slot))
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, slot)


def _thread_lock(path: Path, slot: int) -> threading.Lock:
    with _registry_lock:
        return _thread_locks.setdefault((path, slot), threading.Lock())


def _lock_file(path: Path) -> int:
    with _registry_lock:
        fd = _open_files.get(path)
        if fd is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            _open_files[path] = fd
        return fd
