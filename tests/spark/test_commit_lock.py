"""The per-table commit lock: exclusive across processes and threads, independent per table."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from dagster_incremental.spark.commit_lock import LOCK_FILE, table_commit_lock

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from dagster_incremental.spark.commit_lock import table_commit_lock
    with table_commit_lock(Path(sys.argv[1]), sys.argv[2:]):
        print("locked", flush=True)
        time.sleep(1.5)
""")


def _holder(warehouse, *parts):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(warehouse), *parts], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_another_process_waits_for_the_table_and_not_for_another_table(tmp_path):
    holder = _holder(tmp_path, "ns", "orders")
    started = time.monotonic()
    with table_commit_lock(tmp_path, ["ns", "customers"]):
        assert time.monotonic() - started < 0.5, "another table's lock must not wait"
    with table_commit_lock(tmp_path, ["ns", "orders"]):
        waited = time.monotonic() - started
    assert waited > 1.0, "got the lock while the other process held it (for 1.5 s)"
    holder.wait()
    assert (tmp_path / LOCK_FILE).is_file()  # a file, never a folder a catalog would list


def test_threads_of_one_process_take_turns(tmp_path):
    inside, overlaps = [], []

    def commit():
        with table_commit_lock(tmp_path, ["ns", "orders"]):
            inside.append(1)
            overlaps.append(len(inside))
            time.sleep(0.05)
            inside.pop()

    threads = [threading.Thread(target=commit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [1, 1, 1, 1]


def test_releasing_one_table_keeps_the_other_locked(tmp_path):
    """fcntl drops every lock of a process on a file when any descriptor of it closes: the lock
    file stays open, so finishing one table's commit leaves another table's lock held."""
    with table_commit_lock(tmp_path, ["ns", "a"]):
        with table_commit_lock(tmp_path, ["ns", "b"]):
            pass
        probe = subprocess.run(
            [sys.executable, "-c", textwrap.dedent("""
                import fcntl, os, sys, zlib
                fd = os.open(sys.argv[1], os.O_RDWR)
                slot = zlib.crc32("ns\\x00a".encode()) % (1 << 30)
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
                    print("free")
                except OSError:
                    print("held")
            """), str(tmp_path / LOCK_FILE)],
            capture_output=True, text=True, check=True,
        )
        assert probe.stdout.strip() == "held"


def test_a_thread_taking_the_lock_it_holds_is_refused_not_left_waiting_for_itself(tmp_path):
    with table_commit_lock(tmp_path, ["ns", "orders"]):
        with pytest.raises(RuntimeError, match="ns.orders .*already holds its commit lock"):
            with table_commit_lock(tmp_path, ["ns", "orders"]):
                pass
    with table_commit_lock(tmp_path, ["ns", "orders"]):  # released as usual after the refusal
        pass
