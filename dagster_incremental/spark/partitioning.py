"""Partition specs as users write them ("region", "days(updated_at)") and batch bounds for pruning."""

# Why a parser instead of pasting the text into DDL: `partition_by` comes from a decorator or
# config.toml, and anything pasted into SQL is an injection point. A spec is either a column of the
# table (identity) or one of Iceberg's transforms applied to one; the column is always quoted.
#
# Why bounds: a MERGE whose ON condition carries `t.col BETWEEN :lo AND :hi` for the batch's
# partition columns lets Iceberg skip every data file outside that range, so a merge costs what the
# batch touches, not what the table holds.

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.sql import quote

# Iceberg's Spark DDL transforms; bucket/truncate take a width first: bucket(16, id).
_PLAIN_TRANSFORMS = {"years", "months", "days", "hours", "year", "month", "day", "hour"}
_WIDTH_TRANSFORMS = {"bucket", "truncate"}
_TRANSFORM_RE = re.compile(r"^\s*([A-Za-z_]+)\s*\(\s*(?:(\d+)\s*,\s*)?(.+?)\s*\)\s*$", re.S)


@dataclass(frozen=True)
class PartitionField:
    """One partition field: `transform` is None for identity; `width` only for bucket/truncate."""

    column: str
    transform: str | None = None
    width: int | None = None

    def sql(self) -> str:
        """The PARTITIONED BY item, column quoted: `region`, days(`updated_at`), bucket(16, `id`)."""
        if self.transform is None:
            return quote(self.column)
        if self.width is not None:
            return f"{self.transform}({self.width}, {quote(self.column)})"
        return f"{self.transform}({quote(self.column)})"


def parse_partition_field(text: str, columns: Iterable[str], *, table: str = "") -> PartitionField:
    """Parse one `partition_by` item against the table's `columns`.

    A name that IS a column wins over transform syntax (a column may be called "days(x)").
    Unknown transforms and unknown columns are IncrementalConfigErrors naming the item.
    """
    names = list(columns)
    by_lower = {n.lower(): n for n in names}
    if text in names:
        return PartitionField(text)
    if text.lower() in by_lower:
        return PartitionField(by_lower[text.lower()])
    match = _TRANSFORM_RE.match(text)
    where = f" of table {table}" if table else ""
    if match is None:
        raise IncrementalConfigError(
            f"partition_by item {text!r}{where} is not a column of the batch "
            f"({', '.join(names) or 'no columns'}) nor a transform like days(column), "
            "bucket(16, column)."
        )
    transform, width, arg = match.group(1).lower(), match.group(2), match.group(3).strip()
    if transform not in _PLAIN_TRANSFORMS | _WIDTH_TRANSFORMS:
        raise IncrementalConfigError(
            f"partition_by item {text!r}{where}: unknown transform {match.group(1)!r}; use one of "
            "years, months, days, hours (column) or bucket, truncate (width, column)."
        )
    if (transform in _WIDTH_TRANSFORMS) != (width is not None):
        form = f"{transform}(N, column)" if transform in _WIDTH_TRANSFORMS else f"{transform}(column)"
        raise IncrementalConfigError(f"partition_by item {text!r}{where}: write it as {form}.")
    if len(arg) >= 2 and arg.startswith("`") and arg.endswith("`"):
        arg = arg[1:-1].replace("``", "`")
    column = arg if arg in names else by_lower.get(arg.lower())
    if column is None:
        raise IncrementalConfigError(
            f"partition_by item {text!r}{where}: {arg!r} is not a column ({', '.join(names)})."
        )
    return PartitionField(column, transform, int(width) if width is not None else None)


def parse_partition_spec(
    partition_by: Sequence[str], columns: Iterable[str], *, table: str = ""
) -> list[PartitionField]:
    """Parse every item of `partition_by` (see parse_partition_field)."""
    names = list(columns)
    return [parse_partition_field(item, names, table=table) for item in partition_by]


def partition_source_columns(partition_by: Sequence[str], columns: Iterable[str]) -> list[str]:
    """The distinct source columns of a partition spec, in spec order (days(ts) -> ts)."""
    fields = parse_partition_spec(partition_by, columns)
    return list(dict.fromkeys(f.column for f in fields))


def partition_bounds(batch: DataFrame, partition_by: Sequence[str]) -> list[tuple[str, Any, Any]]:
    """(column, min, max) of each partition source column of `batch`, in ONE Spark job.

    The format is MergeStrategy.merge_statement's `prune=`: a column holding any NULL gets
    (column, None, None), meaning "don't prune on it" (a range can't cover NULL). An empty batch
    also gives (column, None, None). Transforms prune through their source column: Iceberg
    projects `ts BETWEEN lo AND hi` onto days(ts) partitions.
    """
    names = partition_source_columns(partition_by, batch.columns) if partition_by else []
    if not names:
        return []
    aggregates = []
    for i, name in enumerate(names):
        ref = F.col(quote(name))
        aggregates += [
            F.min(ref).alias(f"lo{i}"),
            F.max(ref).alias(f"hi{i}"),
            F.max(ref.isNull()).alias(f"null{i}"),
        ]
    row = batch.agg(*aggregates).collect()[0]
    return [
        (name, None, None) if row[f"null{i}"] else (name, row[f"lo{i}"], row[f"hi{i}"])
        for i, name in enumerate(names)
    ]
