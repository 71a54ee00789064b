"""The settings reference (docs/settings.md), generated from the schema: every key, its values,
its default, where it may be set, and one line of meaning.

Why generated: the schema is where keys are defined; a page written by hand goes stale the day a
key is added. Values and defaults come from the schema's own fields and hints; only the meaning
is written here, and a key without one fails `render` (tests/settings/test_reference.py also
fails when docs/settings.md differs from what `render` gives).

    python -m dagster_incremental.settings.reference > docs/settings.md
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from dagster_incremental.settings import schema as s
from dagster_incremental.settings.errors import hint_of

ASSET = "config.toml, `@incremental_asset(...)`"
# (heading, model, where its keys may be set)
SECTIONS: tuple[tuple[str, type[s.Table], str], ...] = (
    ("[spark]", s.SparkSettings, "config.toml"),
    ("[destination]", s.DestinationSettings, "config.toml"),
    ("[assets.<asset>]", s.AssetOptions, ASSET),
    ("write_disposition = { ... }", s.WriteDisposition, ASSET),
    ("[assets.<asset>.columns.<column>]", s.ColumnHints, ASSET),
    ("partitions = { ... }", s.Partitions, ASSET),
    ("[assets.<asset>.<argument>]", s.IncrementalArgument, "config.toml, `incremental(...)`"),
)

MEANINGS: dict[str, str] = {
    "SparkSettings.master": "the Spark master the session runs on (a cluster's URL, or local threads)",
    "SparkSettings.remote": "a Spark Connect URL (sc://host:15002) instead of master (also SPARK_REMOTE): Delta destinations only; its token goes in secrets.toml",
    "SparkSettings.app_name": "the Spark application's name (Spark's UI and logs)",
    "SparkSettings.conf": "Spark settings passed verbatim; yours win over the library's (secrets go in secrets.toml)",
    "DestinationSettings.format": "the table format: Apache Iceberg, or Delta Lake",
    "DestinationSettings.catalog": "the Spark catalog the tables are in (Delta: the name shown in the UI)",
    "DestinationSettings.namespace": "the namespace (database) of the tables; a Delta table's folder under the warehouse",
    "DestinationSettings.warehouse": "where table files live: a folder, s3://bucket/path, or a catalog's warehouse",
    "AssetOptions.key_prefix": "the asset key's prefix (its table name joins the parts with __)",
    "AssetOptions.group_name": "the asset's group in the Dagster UI",
    "AssetOptions.description": "the asset's description (default: the function's docstring)",
    "AssetOptions.primary_key": "the columns that identify a row: merges match on them, a batch is deduplicated by them",
    "AssetOptions.merge_key": "delete-insert: the columns whose groups a batch replaces wholly (e.g. a day)",
    "AssetOptions.write_disposition": "how rows are written: append, replace, or merge with a strategy",
    "AssetOptions.columns": "per-column hints (hard_delete, dedup_sort, description)",
    "AssetOptions.partition_by": "the table's partition columns or transforms (days(ts), bucket(16, id))",
    "AssetOptions.partitions": "time-window partitions: each partition run loads its window only (a backfill)",
    "AssetOptions.partition_column": "static partitions (tenants): the column holding a row's partition key",
    "AssetOptions.window_column": "the column placing a row in a time window (default: the first cursor's column, when it is a top-level one; a time-window asset with neither is refused)",
    "AssetOptions.upstream_commits_per_slice": "a Changes read: at most this many upstream commits per slice, one commit each",
    "AssetOptions.concurrency_pool": "the Dagster concurrency pool of the asset's runs (default incremental/<asset>)",
    "AssetOptions.freshness": "the cursor_fresh check fails when the newest cursor value is older than this",
    "AssetOptions.check_severity": "how a failed asset check shows in the UI",
    "WriteDisposition.disposition": "append adds rows, replace replaces the table (or a window), merge merges by key",
    "WriteDisposition.strategy": "merge's strategy (default delete-insert)",
    "WriteDisposition.validity_column_names": "scd2: the columns holding a version's valid-from and valid-to",
    "WriteDisposition.active_record_timestamp": "scd2: the valid-to value of current versions (default null)",
    "WriteDisposition.boundary_timestamp": "scd2: the time versions change at (default: the run's start)",
    "WriteDisposition.row_version_column_name": "scd2: a column whose change makes a new version (default: a row hash)",
    "WriteDisposition.delete_missing": "upsert of a full extract: rows whose key the batch lacks are deleted",
    "ColumnHints.hard_delete": "a true value in this column deletes the row's key instead of writing it",
    "ColumnHints.dedup_sort": "which of a key's duplicate rows in a batch is kept: the highest (desc) or lowest (asc)",
    "ColumnHints.description": "the column's description, shown in the UI's column table",
    "Partitions.schedule": "the partitions' period",
    "Partitions.start": "the first partition's start",
    "Partitions.end_offset": "partitions past the current one (0: the last is the one that ended most recently)",
    "Partitions.timezone": "the time zone the windows are cut in",
    "IncrementalArgument.cursor_path": "the column (or dotted/JSON path) the cursor tracks",
    "IncrementalArgument.initial_value": "where the first run starts (none: the first run loads every row it is given)",
    "IncrementalArgument.end_value": "where loading stops: a bounded backfill that never moves the live cursor",
    "IncrementalArgument.last_value_func": "which value moves the cursor: the highest (max) or lowest (min)",
    "IncrementalArgument.primary_key": "the columns that identify rows at the cursor's boundary ([] for none)",
    "IncrementalArgument.row_order": "the order the source yields rows in; lets a run stop at end_value",
    "IncrementalArgument.on_cursor_value_missing": "a row without the cursor column: fail, load it, or skip it",
    "IncrementalArgument.range_start": "whether rows at the start value are loaded (closed) or not (open)",
    "IncrementalArgument.range_end": "whether rows at end_value are loaded (closed) or not (open)",
    "IncrementalArgument.lag": "re-read this far behind the cursor each run (late rows); the cursor never moves back",
    "IncrementalArgument.cursor_type": "how cursor values compare (default: from the values)",
    "IncrementalArgument.step": "a long run is cut into slices of this size, one commit each",
    "IncrementalArgument.datetime_format": "the strptime format of text cursor values",
    "IncrementalArgument.cursor_datetime_formats": "strptime formats tried in turn on text cursor values",
}


def render() -> str:
    """docs/settings.md's text."""
    out = ["# Settings reference", "",
           "Every key of config.toml, generated from the settings schema "
           "(`python -m dagster_incremental.settings.reference > docs/settings.md`; a test fails when this page is stale).",
           "Any key can also be set by an environment variable: `DAGSTER_INCREMENTAL__<SECTION>__<KEY>` "
           "(levels joined by `__`, e.g. `DAGSTER_INCREMENTAL__ASSETS__ORDERS__PRIMARY_KEY`); secrets.toml's keys by "
           "`DAGSTER_INCREMENTAL_SECRETS__...`.", ""]
    for heading, model, where in SECTIONS:
        out += [f"## `{heading}`", "", f"{_first_line(model)} Set in: {where}.", "",
                "| key | value | default | meaning |", "|---|---|---|---|"]
        out += [_row(model, name) for name in model.keys()]
        out.append("")
    return "\n".join(out)


def _row(model: type[BaseModel], name: str) -> str:
    key = f"{model.__name__}.{name}"
    if key not in MEANINGS:
        raise KeyError(f"{key} has no meaning in settings/reference.py's MEANINGS: add one line for it")
    field = model.model_fields[name]
    value = (hint_of(field) or "").removeprefix("use ")
    return f"| `{name}` | {_cell(value)} | {_cell(_default(field))} | {MEANINGS[key]} |"


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return "(empty)"
    if field.default is PydanticUndefined:
        return "required"
    return "—" if field.default is None else f"`{field.default}`"


def _first_line(model: type) -> str:
    return (model.__doc__ or "").strip().splitlines()[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(render())
