"""`python -m dagster_incremental state show|reset ASSET`: both copies of the cursor, a reset the
next run continues from, and refusals that name the asset and say what to do."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import dagster as dg
import pytest

from dagster_incremental.dagster.state_cli import main

pytestmark = pytest.mark.spark

LOCATION = '''
import json
import dagster as dg
from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

CONFIG = {config!r}
SOURCE = {source!r}
STARTS = []

@incremental_asset(primary_key="id", write_disposition={{"disposition": "merge", "strategy": "upsert"}}, config_path=CONFIG)
def orders_s(updated_at: Incremental = incremental("updated_at", initial_value="2024-01-01T00:00:00Z")):
    STARTS.append(updated_at.start_value)
    return json.load(open(SOURCE))

defs = dg.Definitions(assets=[orders_s], resources={{"io_manager": SparkTableIOManager.from_config(CONFIG)}})
'''


@pytest.fixture
def location(tmp_path, spark, spark_warehouse, monkeypatch):
    """A code location module over a JSON source, and DAGSTER_HOME pointing at a fresh instance."""
    namespace = "s_" + uuid.uuid4().hex[:8]
    config = tmp_path / "config.toml"
    config.write_text(f'[destination]\ncatalog = "lake"\nnamespace = "{namespace}"\nwarehouse = "{spark_warehouse}"\n')
    source = tmp_path / "source.json"
    source.write_text(json.dumps([{"id": i, "v": "a", "updated_at": f"2024-01-0{i}T00:00:00Z"} for i in (1, 2, 3)]))
    name = "state_location_" + namespace
    (tmp_path / f"{name}.py").write_text(LOCATION.format(config=str(config), source=str(source)))
    monkeypatch.syspath_prepend(str(tmp_path))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    module = __import__(name)
    return name, module


def materialize(module) -> dg.ExecuteInProcessResult:
    return dg.materialize([module.orders_s], instance=dg.DagsterInstance.get(),
                          resources=module.defs.resources if hasattr(module.defs, "resources") else None)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_show_prints_both_copies_with_iso_times_and_reset_rewinds_the_next_run(location, capsys):
    name, module = location
    assert materialize(module).success

    code, out, _ = cli(capsys, "show", "orders_s", "-m", name)
    assert code == 0
    assert "Dagster: last_value 2024-01-03T00:00:00Z; run " in out
    assert "table:   last_value 2024-01-03T00:00:00Z; snapshot " in out
    assert "next run continues from: both (they agree)" in out
    assert "+00:00" not in out and "DateTime(" not in out

    code, out, _ = cli(capsys, "reset", "orders_s", "-m", name, "--to", "2024-01-02T00:00:00+00:00")
    assert code == 0
    assert "Dagster: last_value 2024-01-02T00:00:00Z; recorded without a run (a reset or seed)" in out
    assert "table:   last_value 2024-01-03T00:00:00Z" in out
    assert "next run continues from: Dagster's (a reset or seed wins over the table)" in out

    result = materialize(module)
    assert module.STARTS[-1] == datetime(2024, 1, 2, tzinfo=timezone.utc)
    logs = [e.user_message for e in dg.DagsterInstance.get().all_logs(result.run_id)]
    assert "updated_at: incremental run of updated_at from 2024-01-02T00:00:00Z" in logs
    mat = result.get_asset_materialization_events()[-1].materialization.metadata
    assert mat["dagster_incremental/rows_updated"].value == 2  # days 2 and 3 read again
    code, out, _ = cli(capsys, "show", "orders_s", "-m", name)
    assert "table:   last_value 2024-01-03T00:00:00Z" in out and "both (they agree)" in out

    code, out, _ = cli(capsys, "reset", "orders_s", "-m", name)  # back to initial_value
    assert code == 0 and "Dagster: last_value 2024-01-01T00:00:00Z; recorded without a run" in out
    materialize(module)
    assert module.STARTS[-1] == datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_reset_is_refused_while_a_run_of_the_asset_is_in_progress(location, capsys):
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    name, module = location
    assert materialize(module).success
    instance = dg.DagsterInstance.get()
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="0f0f0f0f-busy", status=DagsterRunStatus.STARTED,
                                asset_selection=frozenset({dg.AssetKey("orders_s")})))

    code, _, err = cli(capsys, "reset", "orders_s", "-m", name, "--to", "2024-01-02T00:00:00Z")
    assert code == 2
    assert "asset 'orders_s' has a run in progress (0f0f0f0f-busy)" in err and "Wait for it to finish" in err
    _, out, _ = cli(capsys, "show", "orders_s", "-m", name)
    assert "Dagster: last_value 2024-01-03T00:00:00Z; run " in out  # nothing recorded


def test_errors_name_the_asset_and_say_what_to_do(location, capsys, monkeypatch):
    name, module = location
    code, _, err = cli(capsys, "reset", "orders_s", "-m", name, "--to", "yesterday")
    assert code == 2 and "asset 'orders_s': --to 'yesterday'" in err and "ISO-8601" in err
    code, _, err = cli(capsys, "show", "order_s", "-m", name)
    assert code == 2 and "asset 'order_s' is not in the code location (it has: orders_s)" in err
    monkeypatch.delenv("DAGSTER_HOME")
    code, _, err = cli(capsys, "show", "orders_s", "-m", name)
    assert code == 2 and "DAGSTER_HOME is not set" in err
