"""What a user's type checker and isinstance see: the bound run is an Incremental, exports are typed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from dagster_incremental import Incremental, IncrementalRun, IncrementalSpec, incremental

ROOT = Path(__file__).resolve().parent.parent

USER_CODE = """
import dagster as dg
from dagster_incremental import (
    Incremental, SparkTableIOManager, build_incremental_sensor, incremental, incremental_asset, load_config,
)


@incremental_asset(primary_key="id")
def orders(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at")):
    since = updated_at.start_value, updated_at.end_value, updated_at.last_value, updated_at.is_backfill
    yield from updated_at.filter([{"id": 1, "updated_at": since[0]}])


reveal_type(orders)
reveal_type(SparkTableIOManager)
reveal_type(load_config)
reveal_type(build_incremental_sensor)
reveal_type(incremental("ts").bind(None))
"""


def test_the_bound_run_is_an_incremental_and_a_spec_answers_as_a_first_run():
    spec = incremental("ts", initial_value="2024-01-01T00:00:00Z")
    run = spec.bind(None)
    assert isinstance(run, Incremental) and isinstance(run, IncrementalRun)
    assert isinstance(spec, Incremental) and isinstance(spec, IncrementalSpec)
    assert spec.start_value == run.start_value and spec.last_value == run.last_value
    assert spec.state is None and not spec.is_backfill and run.cursor_path == spec.cursor_path == "ts"


def test_a_type_checker_sees_typed_exports_and_accepts_run_attributes(tmp_path):
    (tmp_path / "user_code.py").write_text(textwrap.dedent(USER_CODE))
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(tmp_path / ".mypy_cache"), "user_code.py"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(ROOT)}, capture_output=True, text=True, timeout=600,
    )
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert not errors, proc.stdout  # e.g. '"Incremental" has no attribute "start_value"'
    revealed = re.findall(r'Revealed type is "(.*)"', proc.stdout)
    assert len(revealed) == 5 and "Any" not in [r.strip() for r in revealed], proc.stdout
    assert revealed[0].endswith("AssetsDefinition") and revealed[-1].endswith("IncrementalRun")


def test_the_package_ships_py_typed():
    assert (ROOT / "dagster_incremental" / "py.typed").is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["dagster_incremental"]


def test_the_package_type_checks_clean(tmp_path):
    """pyproject's [tool.mypy] over the whole package: a new error fails the suite."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / ".mypy_cache"), "dagster_incremental"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0 and "Success: no issues found" in proc.stdout, proc.stdout + proc.stderr
