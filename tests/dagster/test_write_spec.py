"""A run writes by the WriteSpec its settings give directly; the definition metadata's JSON of the
same settings (what a plain DataFrame asset's IO manager reads back) gives the same spec."""

from __future__ import annotations

import dataclasses
from datetime import date, datetime, timedelta, timezone

import pytest

from dagster_incremental import Incremental, incremental, incremental_asset
from dagster_incremental.dagster.decorator import incremental_settings
from dagster_incremental.dagster.io_manager import write_spec_from_settings
from dagster_incremental.spark.merge.scd2 import as_utc
from dagster_incremental.spark.table_ref import TableRef

TABLE = TableRef.for_asset("lake", "sales", ["orders"])
NAIVE = datetime(2024, 1, 2, 3, 4, 5, 678)
OFFSET = datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))

CASES = {
    "append": {"write_disposition": "append"},
    "replace": {"write_disposition": "replace"},
    "delete-insert": {"write_disposition": "merge", "primary_key": "id", "merge_key": "day"},
    "upsert with hints": {"write_disposition": {"disposition": "merge", "strategy": "upsert"},
                          "primary_key": ("id", "region"), "partition_by": ["day"],
                          "columns": {"deleted": {"hard_delete": True}, "version": {"dedup_sort": "desc"}}},
    "upsert of a full extract": {"write_disposition": {"disposition": "merge", "strategy": "upsert",
                                                       "delete_missing": True}, "primary_key": "id"},
    "scd2 by default": {"write_disposition": {"disposition": "merge", "strategy": "scd2"}, "primary_key": "id"},
    "scd2 with its options": {
        "write_disposition": {"disposition": "merge", "strategy": "scd2",
                              "validity_column_names": ["since", "until"], "row_version_column_name": "v",
                              "active_record_timestamp": date(9999, 12, 31), "boundary_timestamp": NAIVE},
        "primary_key": "id"},
    "scd2 with an offset": {
        "write_disposition": {"disposition": "merge", "strategy": "scd2", "boundary_timestamp": OFFSET,
                              "active_record_timestamp": "9999-12-31T00:00:00Z"},
        "primary_key": "id"},
}


def _settings(tmp_path, options, cursor):
    config = tmp_path / "config.toml"
    config.write_text("")
    if cursor:
        def orders(updated_at: Incremental = incremental("updated_at")):
            return []
    else:
        def orders():
            return []
    return incremental_settings(incremental_asset(config_path=str(config), **options)(orders))


@pytest.mark.filterwarnings("ignore::dagster_incremental.errors.IncrementalSettingsWarning")  # scd2 on a cursor
@pytest.mark.parametrize(("options", "cursor"), [
    pytest.param(options, cursor, id=f"{name}, {'cursor' if cursor else 'no cursor'}")
    for name, options in CASES.items() for cursor in (True, False)
    if not (cursor and name == "upsert of a full extract")  # delete_missing refuses a cursor
])
def test_the_run_writes_as_the_definition_metadata_says(tmp_path, options, cursor):
    settings = _settings(tmp_path, options, cursor)
    direct = settings.write_spec(TABLE)
    from_json = write_spec_from_settings(TABLE, settings.write_settings())
    # The JSON holds scd2's instants as ISO-8601 text; the writer reads both forms as one instant.
    for name in ("active_record_timestamp", "boundary_timestamp"):
        ours, theirs = getattr(direct.scd2, name), getattr(from_json.scd2, name)
        assert (ours is None and theirs is None) or as_utc(ours, name) == as_utc(theirs, name)
    instants = {"active_record_timestamp": None, "boundary_timestamp": None}
    assert dataclasses.replace(direct, scd2=dataclasses.replace(direct.scd2, **instants)) == dataclasses.replace(
        from_json, scd2=dataclasses.replace(from_json.scd2, **instants))
    assert direct.cursor_column == ("updated_at" if cursor else None)
