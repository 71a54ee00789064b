"""`python -m dagster_incremental`: its commands listed by --help, and with no command the hint that
says where to run the example (`python -m definitions`) from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_python_m_dagster_incremental_says_where_to_run_the_example_from(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "dagster_incremental"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"cd {ROOT} && python -m definitions" in proc.stdout
    assert f"PYTHONPATH={ROOT} python -m definitions" in proc.stdout


def _run(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "dagster_incremental", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_help_lists_every_command_and_prints_no_example_hint(tmp_path):
    proc = _run(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("state show ASSET", "state reset ASSET", "example"):
        assert command in proc.stdout
    assert "python -m definitions" not in proc.stdout


def test_an_unknown_command_is_refused_naming_the_commands(tmp_path):
    proc = _run(tmp_path, "stat")
    assert proc.returncode == 2
    assert "invalid choice: 'stat'" in proc.stderr and "'state'" in proc.stderr and "'example'" in proc.stderr
