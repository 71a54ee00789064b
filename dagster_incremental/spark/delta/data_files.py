"""A Delta table's rows read from chosen data files alone.

A time-travel read (`VERSION AS OF`) makes Spark's Delta rebuild that version's state from the
log, about a second even for a small table; the log (spark/delta/log.py) already names the files
a commit or a change added and removed, and reading just those is what counting or netting the
change needs. That holds where a data file holds its rows as the table shows them: no partition
columns (their values live in the log, not the file) and no column mapping (physical names).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from dagster_incremental.spark.delta.column_mapping import mapped
from dagster_incremental.spark.delta.log import DeltaLog, newest_metadata


def plain_schema(log: DeltaLog, version: int) -> StructType | None:
    """The table's schema at `version` when its data files hold the rows as they are (see the
    module's docstring); None otherwise, or when only a checkpoint holds the schema."""
    metadata = newest_metadata(log, version)
    if metadata is None or metadata.get("partitionColumns") or mapped(metadata.get("configuration") or {}):
        return None
    return StructType.fromJson(json.loads(metadata["schemaString"]))


def read_files(spark: SparkSession, location: str, paths: Sequence[str], schema: StructType) -> DataFrame:
    """The rows of data files `paths` (as the log writes them), in `schema`: a column a file lacks
    (added after it was written) reads as NULL."""
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*(data_file(location, p) for p in paths))


def data_file(location: str, path: str) -> str:
    """A log entry's data file as a path Spark reads: the log's paths are URI-encoded, relative
    to the table's folder unless absolute."""
    decoded = unquote(path)
    return decoded if "://" in path or path.startswith("/") else f"{location.rstrip('/')}/{decoded}"
