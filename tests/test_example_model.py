"""The example code location as a model of good use: partitions begin with its data, today's
partition drops events the source removed, every column of daily_events has a description."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env(base: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_INCREMENTAL")}
    out.update(PYTHONPATH=str(ROOT), DAGSTER_HOME=str(base / "home"),
               DAGSTER_INCREMENTAL_EXAMPLE_DATA=str(base / "sources"),
               DAGSTER_INCREMENTAL__DESTINATION__WAREHOUSE=str(base / "warehouse"),
               DAGSTER_INCREMENTAL__SPARK__MASTER="local[2]", SPARK_LOCAL_IP="127.0.0.1")
    return out


def _python(base: Path, code_or_module: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *code_or_module], cwd=ROOT, env=_env(base),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


PROBE = """
import json
from definitions import daily_events
from definitions.sources import events_root
from dagster_incremental.dagster.decorator import incremental_settings
pd = daily_events.partitions_def
days = sorted(p.name[3:] for p in events_root().glob("dt=*"))
print(json.dumps({"first": pd.get_first_partition_key(), "count": len(pd.get_partition_keys()),
                  "days": days, "columns": incremental_settings(daily_events).write_settings()}))
"""


def test_daily_partitions_begin_with_the_event_files(tmp_path):
    _python(tmp_path, ["-m", "definitions.simulate", "init"])
    probe = json.loads(_python(tmp_path, ["-c", PROBE]).stdout.strip().splitlines()[-1])
    assert probe["first"] == probe["days"][0]
    assert probe["count"] == len(probe["days"]) == 14


def test_config_comments_name_only_supported_formats_and_every_event_column_is_described():
    text = (ROOT / "config" / "config.toml").read_text()
    assert "delta" not in text.lower()
    section = text.split("[assets.daily_events.columns]")[1].split("\n\n")[0]
    described = {line.split("=")[0].strip() for line in section.strip().splitlines() if "description" in line}
    assert described == {"event_id", "user_id", "kind", "value", "event_time", "event_date"}


@pytest.mark.spark
def test_todays_partition_drops_events_the_source_removed(tmp_path):
    # 2,000 events a day: today's file holds some a minute after midnight UTC (at 100 a day it
    # held too few to remove any until 02:24)
    _python(tmp_path, ["-m", "definitions.simulate", "init", "--per-day", "2000"])
    _python(tmp_path, ["-m", "definitions"])
    step = _python(tmp_path, ["-m", "definitions.simulate", "step", "--per-day", "2000"]).stdout
    removed = int(step.split(" removed")[0].rsplit(" ", 1)[1])
    assert removed > 0
    second = _python(tmp_path, ["-m", "definitions"]).stdout
    line = next(l for l in second.splitlines() if l.strip().startswith("daily_events ["))
    today = line.split("[")[1].split("]")[0]
    in_file = (tmp_path / "sources" / "events" / f"dt={today}" / "part-0.jsonl").read_text().strip().splitlines()
    assert f": {len(in_file)} rows (" in line  # the table holds exactly the file's events of today
    assert f" -{removed})" in line
