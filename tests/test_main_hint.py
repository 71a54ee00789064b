"""`python -m definitions` from another folder: the hint that says where to run it from."""

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
