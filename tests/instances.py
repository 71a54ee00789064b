"""The tests' Dagster instances: persistent (SQLite, as `dg.instance_for_test` makes them), kept
in memory-backed storage when the machine has one, without compute-log capture.

Measured (bench/README.md, Session 24): a run on `dg.instance_for_test()`'s default instance cost
1.3-3 s on a loaded two-core machine, most of it the per-run SQLite event-log file written to disk
and the stdout/stderr capture of the compute log manager; the same run here costs about 0.5 s.
No test reads compute logs; every other storage is the one a user's `dagster dev` instance has.

Each new instance starts as a copy of one made empty once per process: creating the SQLite
schemas cost about 0.18 s an instance, opening copies of them 0.04 s (bench/README.md, Session 40), over some
900 instances a suite run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

# A folder in memory (Linux's /dev/shm), else the default temporary folder.
MEMORY_FOLDER = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
# The dagster.yaml of a DAGSTER_HOME that runner processes share: no telemetry, no compute logs.
RUNNER_HOME_YAML = ("telemetry:\n  enabled: false\ncompute_logs:\n"
                    "  module: dagster._core.storage.noop_compute_log_manager\n  class: NoOpComputeLogManager\n")
NO_COMPUTE_LOGS = {"compute_logs": {"module": "dagster._core.storage.noop_compute_log_manager",
                                    "class": "NoOpComputeLogManager"}}


_EMPTY: dict[int, str] = {}  # per process (forked runners make their own): an empty instance's folder


def _empty_instance_folder() -> str:
    """The folder of an instance that was created and closed with nothing in it."""
    pid = os.getpid()
    if pid not in _EMPTY:
        folder = tempfile.mkdtemp(prefix="di_instance_empty_", dir=MEMORY_FOLDER)
        with dg.instance_for_test(temp_dir=folder, overrides=NO_COMPUTE_LOGS):
            pass
        atexit.register(_remove_own, pid, folder)
        _EMPTY[pid] = folder
    return _EMPTY[pid]


def _remove_own(pid: int, folder: str) -> None:
    """At exit, only in the process that made `folder` (a forked child inherits the hook)."""
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def fresh_instance() -> Iterator[dg.DagsterInstance]:
    """A throwaway persistent Dagster instance of its own (a fresh folder, DAGSTER_HOME set to it
    while open), as `dg.instance_for_test()` gives, minus compute-log capture."""
    folder = tempfile.mkdtemp(prefix="di_instance_", dir=MEMORY_FOLDER)
    shutil.copytree(_empty_instance_folder(), folder, dirs_exist_ok=True)
    try:
        with dg.instance_for_test(temp_dir=folder, overrides=NO_COMPUTE_LOGS) as instance:
            yield instance
    finally:
        shutil.rmtree(folder, ignore_errors=True)
