"""One writer at a time per table, across processes: what makes a run's commit a compare-and-set.

A run reads its cursor from the table's newest cursor-carrying snapshot, extracts, then commits.
Iceberg alone cannot refuse a commit whose cursor is stale (an append is never in conflict), and
a Hadoop catalog's metadata swap is a rename that a concurrent process can overwrite. So the
check "the table still holds the snapshot this run read" and the commit run under one exclusive
lock per table: no other process can commit in between, and the check is exact.

The lock is a POSIX byte-range lock on one file at the warehouse root (a file, never a folder: a
Hadoop catalog would list a folder as a namespace), one byte per table. fcntl locks belong to a
process, so threads of one process also take an in-process lock per table, and the file stays open
for the life of the process (closing any descriptor of a file drops all the process's locks on it).
"""

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


@contextmanager
def table_commit_lock(warehouse: Path, table_parts: Sequence[str]) -> Iterator[None]:
    """Hold the table's commit lock (waiting for another process's commit to finish)."""
    path = warehouse / LOCK_FILE
    slot = zlib.crc32("\x00".join(table_parts).encode()) % _SLOTS
    with _thread_lock(path, slot):
        fd = _lock_file(path)
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, slot)
        try:
            yield
        finally:
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
