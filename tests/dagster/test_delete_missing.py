"""upsert with delete_missing: each run's batch is a full extract of the source, and the rows
of the table whose key it lacks are deleted (a "tracked" table that mirrors its source)."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa
import pytest

from attack_support import failure_text, materialize
from catalogs import EACH_FORMAT, HADOOP_ONLY, assert_other_readers_agree
from dagster_incremental import Incremental, incremental, incremental_asset
from dagster_incremental.errors import IncrementalConfigError

pytestmark = pytest.mark.spark

TRACKED = {"disposition": "merge", "strategy": "upsert", "delete_missing": True}


def rows_of(spark, io, name: str) -> list[tuple]:
    frame = spark.table(io.table_name(dg.AssetKey(name)).sql)
    return sorted(tuple(r) for r in frame.select("id", "amount").collect())


def counts(result: dg.ExecuteInProcessResult) -> tuple[int, int, int, int]:
    meta = result.get_asset_materialization_events()[-1].materialization.metadata
    return tuple(meta[k].value for k in ("dagster_incremental/rows_inserted", "dagster_incremental/rows_updated",
                                          "dagster_incremental/rows_deleted", "dagster/row_count"))


def tracked_asset(name: str, source: list[dict], config_file: str, as_arrow: bool = False, **options):
    def body(context: dg.AssetExecutionContext):
        if as_arrow:
            return pa.Table.from_pylist(source, schema=pa.schema([("id", pa.int64()), ("amount", pa.int64())]))
        return list(source)

    body.__name__ = name
    return incremental_asset(name=name, primary_key="id", write_disposition=TRACKED, config_path=config_file,
                             **options)(body)


# how the batch arrives is staging, one path for both formats: Arrow on the Hadoop catalog only
@pytest.mark.parametrize("catalog, as_arrow", [("hadoop", False), ("hadoop", True), ("delta", False)],
                         indirect=["catalog"], ids=["dicts-hadoop", "arrow-hadoop", "dicts-delta"])
def test_rows_the_extract_no_longer_has_are_deleted_and_counted(spark, catalog, instance, io_manager, config_file, as_arrow):
    source = [{"id": 1, "amount": 10}, {"id": 2, "amount": 20}, {"id": 3, "amount": 30}]
    asset = tracked_asset("tracked_orders", source, config_file, as_arrow=as_arrow)
    assert counts(materialize(asset, instance, io_manager)) == (3, 0, 0, 3)

    source[:] = [{"id": 1, "amount": 11}, {"id": 3, "amount": 30}, {"id": 4, "amount": 40}]  # 2 gone
    result = materialize(asset, instance, io_manager)
    assert result.success, failure_text(result)
    assert rows_of(spark, io_manager, "tracked_orders") == [(1, 11), (3, 30), (4, 40)]
    assert counts(result) == (1, 2, 1, 3)  # 4 new; 1 and 3 matched (upsert counts a match as an update); 2 deleted

    source[:] = [{"id": 4, "amount": 41}]
    assert counts(materialize(asset, instance, io_manager)) == (0, 1, 2, 1)
    assert rows_of(spark, io_manager, "tracked_orders") == [(4, 41)]
    assert_other_readers_agree(catalog, spark, io_manager.table_name(dg.AssetKey("tracked_orders")))


@EACH_FORMAT
def test_a_tombstone_and_a_missing_row_are_both_deleted(spark, instance, io_manager, config_file):
    source = [{"id": 1, "amount": 10, "gone": False}, {"id": 2, "amount": 20, "gone": False},
              {"id": 3, "amount": 30, "gone": False}]
    asset = tracked_asset("tracked_tombstones", source, config_file, columns={"gone": {"hard_delete": True}})
    assert materialize(asset, instance, io_manager).success
    source[:] = [{"id": 1, "amount": 10, "gone": True}, {"id": 3, "amount": 31, "gone": False}]
    result = materialize(asset, instance, io_manager)
    assert result.success, failure_text(result)
    assert rows_of(spark, io_manager, "tracked_tombstones") == [(3, 31)]
    assert counts(result) == (0, 1, 2, 1)


@EACH_FORMAT
def test_an_empty_extract_deletes_nothing(spark, instance, io_manager, config_file):
    source = [{"id": 1, "amount": 10}, {"id": 2, "amount": 20}]
    asset = tracked_asset("tracked_empty", source, config_file, as_arrow=True)
    assert materialize(asset, instance, io_manager).success
    source.clear()  # a source outage looks like this; a full refresh empties the table on purpose
    result = materialize(asset, instance, io_manager)
    assert result.success, failure_text(result)
    assert rows_of(spark, io_manager, "tracked_empty") == [(1, 10), (2, 20)]
    assert counts(result) == (0, 0, 0, 2)
    refreshed = materialize(asset, instance, io_manager,
                            run_config={"ops": {"tracked_empty": {"config": {"full_refresh": True}}}})
    assert refreshed.success, failure_text(refreshed)
    assert rows_of(spark, io_manager, "tracked_empty") == []


@HADOOP_ONLY
def test_a_partial_batch_is_refused_when_the_asset_is_defined(config_file):
    with pytest.raises(IncrementalConfigError, match=r"asset 'with_cursor'.*incremental argument 'updated'.*full extract"):
        @incremental_asset(primary_key="id", write_disposition=TRACKED, config_path=config_file)
        def with_cursor(context, updated: Incremental = incremental("updated")):
            return []

    days = dg.DailyPartitionsDefinition(start_date="2024-01-01")
    with pytest.raises(IncrementalConfigError, match=r"asset 'by_day'.*partitions"):
        @incremental_asset(primary_key="id", write_disposition=TRACKED, partitions_def=days, config_path=config_file)
        def by_day(context):
            return []


@HADOOP_ONLY
def test_delete_missing_on_another_strategy_names_the_file_section_and_key(tmp_path, config_file):
    path = tmp_path / "config.toml"
    path.write_text(open(config_file).read() + '\n[assets.mirror]\nwrite_disposition = { disposition = "merge", '
                    'strategy = "delete-insert", delete_missing = true }\n')
    with pytest.raises(IncrementalConfigError) as error:
        @incremental_asset(primary_key="id", config_path=str(path))
        def mirror(context):
            return []
    text = str(error.value)
    assert "config.toml" in text and "[assets.mirror]" in text and "write_disposition" in text
    assert 'delete_missing only applies to disposition = "merge", strategy = "upsert"' in text
