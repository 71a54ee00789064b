"""Two destinations in one process (two config files, two SparkTableIOManagers) naming the same
Spark catalog with different warehouses: Spark holds one catalog of a name per process, so the
second is refused before it writes anything, naming both files; with distinct catalog names each
table lands in its own warehouse."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest

from dagster_incremental import Incremental, SparkTableIOManager, incremental, incremental_asset

pytestmark = pytest.mark.spark

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def destination(folder: Path, name: str, catalog: str) -> str:
    path = folder / "config" / f"{name}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'[spark]\nmaster = "local[2]"\n[destination]\ncatalog = "{catalog}"\n'
                    f'namespace = "layer"\nwarehouse = "{folder / (name + "_wh")}"\n')
    return str(path)


def asset_of(name: str, config: str):
    @incremental_asset(name=f"{name}_orders", primary_key="id", write_disposition="append",
                       config_path=config, io_manager_key=f"{name}_io")
    def orders(updated_at: Incremental = incremental("updated_at", initial_value=1)):
        return [{"id": i, "updated_at": i + 1} for i in (1, 2)]

    return orders


def run_both(tmp_path: Path, bronze_catalog: str, silver_catalog: str, instance) -> dg.ExecuteInProcessResult:
    bronze, silver = destination(tmp_path, "bronze", bronze_catalog), destination(tmp_path, "silver", silver_catalog)
    return dg.materialize(
        [asset_of("bronze", bronze), asset_of("silver", silver)], instance=instance, run_config=QUIET,
        resources={"bronze_io": SparkTableIOManager.from_config(bronze),
                   "silver_io": SparkTableIOManager.from_config(silver)},
        raise_on_error=False, selection=["bronze_orders", "silver_orders"])


def table_folders(warehouse: Path) -> list[str]:
    return sorted(p.name for p in (warehouse / "layer").iterdir()) if (warehouse / "layer").exists() else []


def test_a_second_destination_with_the_same_catalog_name_is_refused_before_writing(spark, tmp_path, instance):
    catalog = "dup_" + uuid.uuid4().hex[:8]
    result = run_both(tmp_path, catalog, catalog, instance)
    assert table_folders(tmp_path / "bronze_wh") == ["bronze_orders"]  # nothing of silver's there
    assert table_folders(tmp_path / "silver_wh") == []
    failures = {e.step_key: e.step_failure_data.error for e in result.get_step_failure_events()}
    assert list(failures) == ["silver_orders"]
    text = failures["silver_orders"].message + "".join(
        c.message for c in [failures["silver_orders"].cause] if c is not None)
    assert (f"{tmp_path}/config/silver.toml [destination] warehouse = '{tmp_path}/silver_wh', but this "
            f"process's Spark session already has catalog '{catalog}' at '{tmp_path}/bronze_wh' from "
            f"{tmp_path}/config/bronze.toml [destination] warehouse.") in text
    assert "give this destination another catalog name" in text and "Nothing was written" in text
    assert "Traceback" not in failures["silver_orders"].message


def test_two_destinations_with_their_own_catalog_names_each_write_their_own_warehouse(spark, tmp_path, instance):
    tag = uuid.uuid4().hex[:8]
    result = run_both(tmp_path, f"bronze_{tag}", f"silver_{tag}", instance)
    assert result.success
    assert table_folders(tmp_path / "bronze_wh") == ["bronze_orders"]
    assert table_folders(tmp_path / "silver_wh") == ["silver_orders"]
    assert spark.table(f"silver_{tag}.layer.silver_orders").count() == 2
