"""The package as a user gets it: a wheel built from the sources alone, installed into a fresh
virtualenv outside the repository, loads rows into an Iceberg table and continues from its cursor.

The virtualenv reuses the installed dependencies (pyspark, Dagster, ...) through
--system-site-packages, where a development install of this checkout may also be: the script
therefore runs isolated (`-I`: no current folder, no PYTHONPATH on sys.path) and reports the file
it imported, which must be the wheel's copy inside the virtualenv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark  # the script starts its own Spark driver

ROOT = Path(__file__).resolve().parent.parent
PROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

CONFIG = """
[spark]
master = "local[1]"

[spark.conf]
"spark.ui.enabled" = "false"
"spark.sql.shuffle.partitions" = 1

[destination]
catalog = "lake"
namespace = "shop"
warehouse = "../warehouse"  # relative to config.toml

[assets.events.updated_at]
cursor_path = "updated_at"
initial_value = "2026-01-01T00:00:00Z"
"""

# Two runs: the second source repeats an old row, changes one and adds one.
SCRIPT = """
import importlib.metadata, json, sys
import dagster as dg
import dagster_incremental
from dagster_incremental import Incremental, SparkTableIOManager, incremental_asset
from pyspark.sql import SparkSession

SOURCES = [
    [{"id": 1, "kind": "view", "updated_at": "2026-01-01T00:00:00Z"},
     {"id": 2, "kind": "view", "updated_at": "2026-01-02T00:00:00Z"}],
    [{"id": 2, "kind": "view", "updated_at": "2026-01-02T00:00:00Z"},
     {"id": 1, "kind": "buy", "updated_at": "2026-01-03T00:00:00Z"},
     {"id": 3, "kind": "view", "updated_at": "2026-01-04T00:00:00Z"}],
]


@incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"})
def events(updated_at: Incremental):
    yield from SOURCES.pop(0)


quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
instance = dg.DagsterInstance.ephemeral()
runs = [dg.materialize([events], instance=instance, run_config=quiet,
                       resources={"io_manager": SparkTableIOManager.from_config()}) for _ in range(2)]
meta = [{k: v.value for k, v in r.get_asset_materialization_events()[-1].materialization.metadata.items()}
        for r in runs]
rows = SparkSession.builder.getOrCreate().table("lake.shop.events").orderBy("id").collect()
json.dump({
    "file": dagster_incremental.__file__,
    "version": dagster_incremental.__version__,
    "metadata_version": importlib.metadata.version("dagster-incremental"),
    "success": [r.success for r in runs],
    "inserted": [m["dagster_incremental/rows_inserted"] for m in meta],
    "updated": [m["dagster_incremental/rows_updated"] for m in meta],
    "last_value": meta[-1]["dagster_incremental/state"]["last_value"],
    "rows": [[r.id, r.kind] for r in rows],
}, sys.stdout)
"""


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def _build_wheel(tmp_path: Path) -> Path:
    """Build from a copy holding only what the wheel is made of, so nothing else is relied on."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "dagster_incremental", source / "dagster_incremental",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # No build isolation: the build backend comes from the dev extra, nothing is downloaded.
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), "."], source)
    (wheel,) = (tmp_path / "dist").glob("dagster_incremental-*.whl")
    return wheel


def _venv_with(wheel: Path, tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    # --ignore-installed: a development install of the same version outside the venv must neither
    # satisfy the requirement nor be uninstalled; --no-deps: the dependencies come from outside.
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--ignore-installed",
          "--disable-pip-version-check", str(wheel)], tmp_path)
    return python


def test_a_built_wheel_installed_in_a_fresh_virtualenv_loads_an_asset(tmp_path):
    wheel = _build_wheel(tmp_path)
    assert wheel.name.startswith(f"dagster_incremental-{PROJECT_VERSION}-")
    python = _venv_with(wheel, tmp_path)

    project = tmp_path / "project"  # outside the repository: a user's own folder
    (project / "config").mkdir(parents=True)
    (project / "config" / "config.toml").write_text(CONFIG)
    (project / "load.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_INCREMENTAL", "PYTHON"))}
    env.update(PYSPARK_PYTHON=str(python), DAGSTER_HOME=str(tmp_path), SPARK_LOCAL_IP="127.0.0.1")
    out = json.loads(_run([str(python), "-I", "load.py"], project, env))

    assert Path(out["file"]).is_relative_to(tmp_path / "venv"), out["file"]
    assert out["version"] == out["metadata_version"] == PROJECT_VERSION
    assert out["success"] == [True, True]
    assert out["inserted"] == [2, 1] and out["updated"] == [0, 1]
    assert out["last_value"] == "2026-01-04T00:00:00Z"
    assert out["rows"] == [[1, "buy"], [2, "view"], [3, "view"]]
    assert (project / "warehouse" / "shop" / "events" / "metadata").is_dir()
