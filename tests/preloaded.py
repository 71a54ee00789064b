"""Runner processes forked from a parent that has already imported Dagster, PySpark and the library.

A runner started as `python tests/fault_runner.py` spends about 3 CPU-seconds (Python 3.11,
PySpark 3.5) to 4 (Python 3.13, PySpark 4.1) importing those before it does anything, and the
suite starts dozens of runners per Spark line (kills, races, Connect runs). Here a runner is
forked from a server process (multiprocessing's forkserver, one per test worker) that imported
them once; the runner still is a process of its own, killed for real, with its own environment,
working folder, argv, stdout and stderr files, and it starts its own JVM when it needs one (the
server never starts one: forking a process with a JVM attached is not safe).

`start` returns a handle with the parts of subprocess.Popen the tests use; `run` is
subprocess.run(capture_output=True, text=True) for such a runner.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

# What every runner imports first (an ImportError here is ignored: the runner then imports it itself).
PRELOAD = [
    "dagster", "pyspark.sql", "pyspark.sql.functions", "pandas", "pyarrow", "dagster_incremental",
    "dagster_incremental.dagster.io_manager", "pyiceberg.catalog.sql", "pyiceberg.catalog.rest", "deltalake",
]

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


def _main(argv: Sequence[str], env: Mapping[str, str], cwd: str, stdout: str, stderr: str) -> None:
    """In the forked runner: its environment, folder, argv and output files, then its script run
    as `__main__` (argv[0] a script path, or "-c" and the code)."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, stdout), (2, stderr)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


class Runner:
    """A started runner, as much of subprocess.Popen as the tests use (text output)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | Path,
                 stdout: str | Path | None = None, stderr: str | Path | None = None):
        self._folder = None if stdout and stderr else tempfile.mkdtemp(prefix="di_runner_")
        self.stdout_path = Path(stdout or Path(self._folder, "out"))
        self.stderr_path = Path(stderr or Path(self._folder, "err"))
        self.args = list(argv)
        self._process = _CONTEXT.Process(target=_main, args=(list(argv), dict(env), str(cwd),
                                                             str(self.stdout_path), str(self.stderr_path)))
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def kill(self) -> None:
        if self._process.exitcode is None:
            self._process.kill()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end (subprocess.TimeoutExpired after `timeout` s), then both outputs."""
        self.wait(timeout)
        out, err = self.stdout_path.read_text(errors="replace"), self.stderr_path.read_text(errors="replace")
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
        return out, err


def start(argv: Sequence[str], env: Mapping[str, str], cwd: str | Path,
          stdout: str | Path | None = None, stderr: str | Path | None = None) -> Runner:
    """Start a runner (argv without the interpreter: a script path and its arguments, or "-c", code)."""
    return Runner(argv, env, cwd, stdout, stderr)


def run(argv: Sequence[str], env: Mapping[str, str], cwd: str | Path, timeout: float) -> subprocess.CompletedProcess:
    """Run a runner to its end, as subprocess.run(capture_output=True, text=True, timeout=...) does:
    killed and subprocess.TimeoutExpired after `timeout` s."""
    runner = start(argv, env, cwd)
    try:
        out, err = runner.communicate(timeout)
    except subprocess.TimeoutExpired:
        runner.kill()
        runner.communicate(30)  # its end, and its output folder removed
        raise
    return subprocess.CompletedProcess(runner.args, runner.returncode, out, err)

