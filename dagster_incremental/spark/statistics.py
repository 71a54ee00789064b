"""What a commit did, counted alike for every format: the rows of a window or of key groups netted
between two versions of a table (identical rows cancel; per key a removed and an added row are an
update), a keyed batch's rows and tombstones, the key that pairs an update. Each format reads its
own commit back (spark/iceberg/figures.py, spark/delta/figures.py) and counts with these."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dagster_incremental.errors import DataShapeError
from dagster_incremental.spark.merge.sql import DELETED
from dagster_incremental.spark.sql import in_window, quote
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import HELPER_PREFIX, WindowReplace, WriteSpec

@dataclass(frozen=True)
class Counts:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class BatchRows:
    """A keyed merge batch: rows to insert or update, and hard-delete tombstones."""

    rows: int
    tombstones: int


def pairing_key(spec: WriteSpec) -> tuple[str, ...]:
    """The key that pairs a removed and an added row into one update (scd2: the entity key);
    none for append and replace, whose changes are inserts and deletes."""
    return tuple(spec.primary_key or spec.merge_key) if spec.disposition == "merge" else ()


def batch_rows(aligned: DataFrame, spec: WriteSpec, known_rows: int | None = None) -> BatchRows:
    """One aggregate over the prepared batch (materialised or local: cheap to read again);
    none when the rows were local and there are no tombstones to tell apart."""
    if not spec.hard_delete_column:
        return BatchRows(rows=aligned.count() if known_rows is None else known_rows, tombstones=0)
    dead = tombstone(aligned).cast("long")
    row = aligned.agg(F.count(F.lit(1)).alias("n"), F.sum(dead).alias("dead")).collect()[0]
    tombstones = int(row.dead or 0)
    return BatchRows(rows=int(row.n) - tombstones, tombstones=tombstones)


def matched_keys(batch: DataFrame, before: DataFrame, keys: Sequence[str]) -> tuple[int, int]:
    """(rows, tombstones) of the prepared batch (one row per key) whose key `before` holds:
    one semi-join on the key columns (spelt as the table spells them)."""
    dead = tombstone(batch)
    row = (
        batch.select(*(F.col(quote(k)) for k in keys), dead.alias("dead"))
        .join(before.select(*(F.col(quote(k)) for k in keys)), on=list(keys), how="left_semi")
        .agg(F.sum((~F.col("dead")).cast("long")).alias("live"), F.sum(F.col("dead").cast("long")).alias("dead"))
        .collect()[0]
    )
    return int(row.live or 0), int(row.dead or 0)


def keyed_counts(rows: int, matched: tuple[int, int], removed: int | None = None) -> Counts:
    """A keyed merge counted as MERGE counts it: of its `rows` (tombstones aside), those whose key
    the table held are updates (`matched`: those rows, and the tombstones whose key it held), the
    others inserts; a matched tombstone is a delete. `removed`: the rows the commit took out of
    the table, when it can take out more than those (a delete-insert, a delete_missing upsert):
    every removed row no batch row replaced is deleted, such as the other copies of a key the
    table held twice."""
    live, dead = matched
    return Counts(inserted=rows - live, updated=live, deleted=dead if removed is None else removed - live)


def resolve_column(table: TableRef, schema: T.StructType, name: str) -> str:
    """The table's spelling of column `name` (case-insensitively, as Spark resolves it)."""
    names = schema.fieldNames()
    if name in names:
        return name
    lowered = {n.lower(): n for n in names}
    if name.lower() in lowered:
        return lowered[name.lower()]
    raise DataShapeError(
        f"table {table}: the window column {name!r} is not a column of the table ({', '.join(names)})."
    )


def window_replace_counts(
    table: TableRef,
    after: DataFrame,
    before: DataFrame | None,
    window: WindowReplace,
    keys: Sequence[str],
    live_rows: tuple[int | None, int | None] = (None, None),
) -> Counts:
    """Net change of a window replace, in either format, from the window's rows alone: the
    window's rows before and after, netted (net_window_counts), plus the rows it removed outside
    the window (batch keys that moved in from another window: an update when the key is back in
    the window, else a delete). Those rows are found from the two versions' live row counts
    (`live_rows`: before, after); only when there are some are their keys looked up. The rest of
    the table is never read: a day's backfill costs a day's rows, whatever the table's size."""
    net = net_window_counts(table, after, before, window.column, [window.bounds], keys, window.rows_of)[0]
    rows_before, rows_after = live_rows
    if before is None or rows_before is None or rows_after is None:
        return net
    outside = (net.inserted - net.deleted) - (rows_after - rows_before)
    if outside <= 0:
        return net
    moved = _moved_in(table, after, before, window, keys) if keys else 0
    return Counts(net.inserted - moved, net.updated + moved, net.deleted + outside - moved)


def _moved_in(table: TableRef, after: DataFrame, before: DataFrame, window: WindowReplace, keys: Sequence[str]) -> int:
    """How many keys of the window's new rows the table held outside the window before (one join)."""
    ref = F.col(quote(resolve_column(table, after.schema, window.column)))
    names = [resolve_column(table, after.schema, k) for k in keys]
    inside = in_window(ref, *window.bounds) & _only(table, after, window.rows_of)
    columns = [F.col(quote(k)) for k in names]
    new = after.where(inside).select(*columns).distinct()
    old = before.where(~inside).select(*columns)
    return new.join(old, on=names, how="left_semi").count()


def net_window_counts(
    table: TableRef,
    after: DataFrame,
    before: DataFrame | None,
    column: str,
    windows: Sequence[tuple[Any, ...]],
    keys: Sequence[str],
    rows_of: tuple[str, Any] | None = None,
) -> list[Counts]:
    """What changed from `before` (None: nothing) to `after` (one table's two versions, in any
    format) in each window of `column`, netted (netting_sql) in ONE statement over the two
    versions' rows in the windows.

    Why SQL text: built from DataFrame calls, each analysed by the JVM on its own, the same count
    of a small table took about 1.25 times as long (bench/README.md, Session 40). The windows
    filter the two versions as Columns, not as parameters of that statement: over Spark Connect
    (4.1) a parameter below a GROUP BY stays unbound."""
    names, schema = after.columns, after.schema
    ref = resolve_column(table, schema, column)
    key_names = [resolve_column(table, schema, k) for k in keys]
    in_after = _in_windows(table, after, ref, windows, rows_of)
    in_before = None if before is None else _in_windows(table, before, ref, windows, rows_of)
    by_window = {int(r.di_window): r for r in _net_of_versions(
        in_after, in_before, names, key_names, (f"{quote(_WINDOW)} AS di_window",), by=("di_window",))}
    rows = [by_window.get(i) for i in range(len(windows))]
    return [_counts(r) if r else Counts() for r in rows]


def _net_of_versions(
    after: DataFrame, before: DataFrame | None, names: Sequence[str], keys: Sequence[str],
    extra: Sequence[str] = (), by: Sequence[str] = (),
) -> list[Any]:
    """netting_sql's rows over the two versions' rows (their columns `names`, a column `before`
    lacks NULL there), as temporary views: one statement. `extra`: select expressions of both
    sides (the `by` columns)."""
    def signed(view: str, present: Sequence[str], sign: int) -> str:
        def col(name: str) -> str:
            return quote(name) if name in present else "NULL"

        fields = ", ".join(col(n) if n in present else f"NULL AS {quote(n)}" for n in names)
        key_list = "".join(f", {col(k)} AS k{i}" for i, k in enumerate(keys))
        head = "".join(f"{e}, " for e in extra)
        return f"SELECT {head}to_json(struct({fields})) AS row{key_list}, {sign} AS sign FROM {view}"

    with temp_views(after=after, before=before) as views:
        text = signed(views["after"], after.columns, 1)
        if before is not None:
            text += " UNION ALL " + signed(views["before"], before.columns, -1)
        return after.sparkSession.sql(netting_sql(text, len(keys), by)).collect()


_WINDOW = f"{HELPER_PREFIX}window"  # never a table's column (the prefix is reserved)


def _in_windows(
    table: TableRef, frame: DataFrame, ref: str, windows: Sequence[tuple[Any, ...]], rows_of: tuple[str, Any] | None
) -> DataFrame:
    """The frame's rows inside any of `windows` (in_window's arguments; with rows_of only those
    rows), with the index of their window as the helper column _WINDOW."""
    inside = [in_window(F.col(quote(ref)), *bounds) for bounds in windows]
    index, anywhere = F.when(inside[0], F.lit(0)), inside[0]
    for i, condition in enumerate(inside[1:], start=1):
        index, anywhere = index.when(condition, F.lit(i)), anywhere | condition
    # the plain comparisons first: the format skips the files outside the windows
    return frame.where(anywhere & _only(table, frame, rows_of)).withColumn(_WINDOW, index)


def net_counts(after: DataFrame, before: DataFrame, keys: Sequence[str]) -> Counts:
    """What changed from `before` to `after` (one table's two versions, in any format), netted:
    identical rows cancel, per key a removed+added pair is an update."""
    return _counts(_net_of_versions(after, before, after.columns, keys)[0])


def rows_of_groups(table: TableRef, groups: Sequence[Sequence[str]], batch: DataFrame) -> Callable[[DataFrame], DataFrame]:
    """A function giving the rows of a version of the table whose values of some key group are a
    `batch` row's (equal, NULL matching nothing, as a delete-insert's MERGE matches them): the
    only rows such a MERGE deletes or inserts. Each row once, however many groups it matches (a
    semi-join per group, minus the earlier groups' matches), behind a filter on the batch's key
    ranges (one Spark job, here) that lets the format skip the files outside them."""
    ranges = _key_ranges(table, groups, batch)

    def values(frame: DataFrame, group: Sequence[str]) -> tuple[list[str], DataFrame]:
        names = [resolve_column(table, frame.schema, k) for k in group]
        found = [F.col(quote(resolve_column(table, batch.schema, k))).alias(n) for k, n in zip(group, names)]
        return names, batch.select(*found).distinct()

    def rows(frame: DataFrame) -> DataFrame:
        kept = frame.where(_in_ranges(table, frame, ranges)) if ranges is not None else frame
        parts = []
        for i, group in enumerate(groups):
            names, keys = values(frame, group)
            part = kept.join(keys, on=names, how="left_semi")
            for earlier in groups[:i]:
                other_names, other_keys = values(frame, earlier)
                part = part.join(other_keys, on=other_names, how="left_anti")
            parts.append(part)
        return functools.reduce(DataFrame.unionByName, parts) if parts else frame

    return rows


# key columns whose batch minimum and maximum are compared as literals (their Python values
# come back from Spark as they went: no time zone in between)
_RANGED_TYPES = (T.IntegralType, T.DateType, T.StringType, T.DecimalType)
KeyRanges = list[list[tuple[str, Any, Any]]]  # per group: (batch column, min, max) of each bounded column


def _key_ranges(table: TableRef, groups: Sequence[Sequence[str]], batch: DataFrame) -> KeyRanges | None:
    """The batch's min and max of each group's columns of a type compared as literals (one Spark
    job over the batch), or None when a group has no such column (then nothing is skipped)."""
    bounded = []
    for group in groups:
        columns = [resolve_column(table, batch.schema, k) for k in group]
        columns = [c for c in columns if isinstance(batch.schema[c].dataType, _RANGED_TYPES)]
        if not columns:
            return None
        bounded.append(columns)
    names = list(dict.fromkeys(c for columns in bounded for c in columns))
    values = batch.agg(*(f(F.col(quote(n))) for n in names for f in (F.min, F.max))).collect()[0]
    low_high = {n: (values[2 * i], values[2 * i + 1]) for i, n in enumerate(names)}
    return [[(c, *low_high[c]) for c in columns] for columns in bounded]


def _in_ranges(table: TableRef, frame: DataFrame, ranges: KeyRanges) -> Any:
    """`frame`'s rows within the ranges of every column of some group (a group whose batch
    values are all NULL matches no row)."""
    condition = F.lit(False)
    for columns in ranges:
        inside = F.lit(True)
        for column, low, high in columns:
            if low is None:
                inside = F.lit(False)
                break
            inside = inside & F.col(quote(resolve_column(table, frame.schema, column))).between(F.lit(low), F.lit(high))
        condition = condition | inside
    return condition


def _only(table: TableRef, frame: DataFrame, rows_of: tuple[str, Any] | None) -> Any:
    """The rows whose column holds the value (rows_of: (column, value)); all rows without."""
    if rows_of is None:
        return F.lit(True)
    return F.col(quote(resolve_column(table, frame.schema, rows_of[0]))) == F.lit(rows_of[1])


def row_text(names: Sequence[str]) -> Any:
    """A row's data as one comparable text (NULL fields left out, as JSON does). Written as SQL:
    one py4j call, where a Column per field cost two or three each."""
    return F.expr(f"to_json(struct({', '.join(quote(c) for c in names)})) AS row")


def key_columns(keys: Sequence[str]) -> list[Any]:
    return [F.expr(f"{quote(k)} AS k{i}") for i, k in enumerate(keys)]


def signed_counts(signed: DataFrame, keys: int) -> Counts:
    """The counts of signed rows (row text, key columns k0.., sign): netting_sql, one statement."""
    with temp_views(signed=signed) as views:
        return _counts(signed.sparkSession.sql(netting_sql(f"SELECT * FROM {views['signed']}", keys)).collect()[0])


def netting_sql(signed: str, keys: int, by: Sequence[str] = ()) -> str:
    """Inserted/updated/deleted per `by` group (without: one row of totals) of the signed rows
    the query `signed` gives (`row` text, key columns k0.., `sign` +1 added / -1 removed):
    identical rows cancel out; per key a removed+added pair is an update (no key: inserts and
    deletes only)."""
    key_names = [f"k{i}" for i in range(keys)]
    group = ", ".join([*by, "row", *key_names])
    net = f"SELECT {group}, sum(sign) AS n FROM ({signed}) AS signed GROUP BY {group} HAVING sum(sign) != 0"
    head = "".join(f"{b}, " for b in by)
    tail = f" GROUP BY {', '.join(by)}" if by else ""
    if not key_names:
        return (f"SELECT {head}sum(greatest(n, 0)) AS inserted, 0 AS updated, "
                f"sum(greatest(-n, 0)) AS deleted FROM ({net}) AS net{tail}")
    per_key = (f"SELECT {head}{', '.join(key_names)}, sum(greatest(n, 0)) AS a, sum(greatest(-n, 0)) AS r "
               f"FROM ({net}) AS net GROUP BY {', '.join([*by, *key_names])}")
    return (f"SELECT {head}sum(a - least(a, r)) AS inserted, sum(least(a, r)) AS updated, "
            f"sum(r - least(a, r)) AS deleted FROM ({per_key}) AS per_key{tail}")


def _counts(row: Any) -> Counts:
    return Counts(int(row.inserted or 0), int(row.updated or 0), int(row.deleted or 0))


@contextmanager
def temp_views(**frames: DataFrame | None) -> Iterator[dict[str, str]]:
    """Each frame (None: left out) as a temporary view of a name of its own, dropped after."""
    given = {role: frame for role, frame in frames.items() if frame is not None}
    views = {role: f"di_{role}_{uuid.uuid4().hex[:12]}" for role in given}
    for role, frame in given.items():
        frame.createOrReplaceTempView(views[role])
    try:
        yield views
    finally:
        for role, frame in given.items():
            frame.sparkSession.catalog.dropTempView(views[role])


def tombstone(frame: DataFrame) -> Any:
    """The prepared batch's hard-delete flag (FALSE when the batch has none)."""
    return F.col(quote(DELETED)) if DELETED in frame.columns else F.lit(False)
