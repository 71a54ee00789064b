"""Batch shapes, property-based: every input kind x every disposition and strategy.

Hypothesis draws a short sequence of batches for one asset (its own table): each batch is dict
rows, pages, a generator, an Arrow table, a pandas DataFrame or a Spark DataFrame, and is either
empty (an empty list, a generator yielding nothing, empty pages, `pa.table({})`, an empty Arrow
table with a schema, an empty DataFrame with and without columns, an empty Spark frame, None) or
a few rows over a small key space whose optional columns are mixed NULL/non-NULL, NULL in every
row (typed or untyped: Arrow's null type, pandas' object column of None, Spark's void), missing
from some rows, or missing from all (a new all-NULL column `extra` too). Key-adjacent columns
(the hard_delete column `deleted`, the dedup_sort column `seq`) get the same treatment.

After each run the table equals a plain-Python model (written from docs/write-dispositions.md, not
from the library's code); an empty batch changes nothing and counts (0, 0, 0), except `replace`,
which empties its table. Shapes refused on purpose:
- a merge batch with a NULL (or missing) primary key: a NULL key never matches
  (docs/write-dispositions.md);
- a merge batch lacking the hard_delete or dedup_sort column altogether (a misspelt hint:
  tests/spark/test_merge_strategies.py::test_configured_columns_must_be_in_the_batch).
A refused run fails naming the asset and the column, and writes nothing (same rows, same
snapshots). Every other shape must be accepted.

Budget: DI_PROPERTY_EXAMPLES examples per disposition (default 3: the file runs in ~3 min on
two cores); e.g. DI_PROPERTY_EXAMPLES=40 for a thorough run by hand.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import dagster as dg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attack_support import failure_text, snapshots, table_exists
from catalogs import HADOOP_ONLY
from dagster_incremental import incremental_asset

pytestmark = [pytest.mark.spark, HADOOP_ONLY]

EXAMPLES = int(os.environ.get("DI_PROPERTY_EXAMPLES", "3"))
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
MISSING = object()  # a key absent from a dict row

# The asset's columns and their types (Arrow, pandas nullable, Spark).
TYPES = {"id": "int64", "day": "int64", "v": "string", "n": "int64", "deleted": "bool", "seq": "int64", "extra": "string"}
KINDS = ("dicts", "pages", "generator", "arrow", "pandas", "spark")


@dataclass(frozen=True)
class Case:
    """One disposition/strategy with its keys and hints."""

    label: str
    disposition: Any
    primary_key: str | None = None
    merge_key: str | None = None
    hard_delete: bool = False
    dedup_sort: bool = False

    @property
    def strategy(self) -> str:
        return self.disposition if isinstance(self.disposition, str) else self.disposition["strategy"]

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns its rows may have (the merge_key `day` follows from `id`)."""
        hints = (("deleted",) if self.hard_delete else ()) + (("seq",) if self.dedup_sort else ())
        return ("id",) + (("day",) if self.merge_key else ()) + ("v", "n") + hints + ("extra",)

    def hints(self) -> dict | None:
        out = {}
        if self.hard_delete:
            out["deleted"] = {"hard_delete": True}
        if self.dedup_sort:
            out["seq"] = {"dedup_sort": "desc"}
        return out or None


def _merge(strategy: str) -> dict:
    return {"disposition": "merge", "strategy": strategy}


CASES = [
    Case("append", "append"),
    Case("replace", "replace"),
    Case("upsert", _merge("upsert"), "id", hard_delete=True, dedup_sort=True),
    Case("delete_insert", _merge("delete-insert"), "id", hard_delete=True, dedup_sort=True),
    Case("delete_insert_merge_key", _merge("delete-insert"), "id", merge_key="day", hard_delete=True),
    Case("insert_only", _merge("insert-only"), "id", hard_delete=True, dedup_sort=True),
    Case("scd2", _merge("scd2"), "id", hard_delete=True, dedup_sort=True),
    Case("scd2_merge_key", _merge("scd2"), "id", merge_key="day", hard_delete=True),
]


# -- the batches -----------------------------------------------------------------------------------


@dataclass
class Batch:
    kind: str
    rows: list[dict]  # dict rows, keys absent where a row lacks the column
    empty: str | None = None  # which empty shape (None: rows)
    untyped: bool = True  # an all-NULL column is untyped (null/object/void) rather than typed
    refused: tuple[str, ...] = ()  # the columns a refusal must name (empty: must be accepted)

    def columns(self, case: Case) -> list[str]:
        present = {k for row in self.rows for k in row}
        return [c for c in case.columns if c in present]

    def __repr__(self) -> str:  # what Hypothesis prints for a falsifying example
        shape = f"empty={self.empty}" if self.empty else f"rows={self.rows}"
        return f"Batch({self.kind}, {shape}, untyped={self.untyped})"


_EMPTY = {
    "dicts": ["list", "none"],
    "pages": ["empty_pages"],
    "generator": ["nothing"],
    "arrow": ["no_schema", "schema"],
    "pandas": ["no_columns", "columns"],
    "spark": ["schema"],
}


@st.composite
def _batch(draw, case: Case) -> Batch:
    kind = draw(st.sampled_from(KINDS))
    if draw(st.integers(0, 4)) == 0:
        return Batch(kind, [], empty=draw(st.sampled_from(_EMPTY[kind])))
    ids = draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=4))
    rows: list[dict] = [{"id": i} for i in ids]
    # How each optional column looks in this batch: mixed, NULL in every row, or absent.
    for column in case.columns[1:]:
        if column == "day":
            for row in rows:
                row["day"] = row["id"] % 2  # a merge_key group of two ids
            continue
        values = {"v": st.sampled_from(["a", "b"]), "n": st.integers(0, 2), "deleted": st.booleans(),
                  "seq": st.integers(0, 2), "extra": st.none()}[column]
        mode = draw(st.sampled_from(["mixed", "mixed", "all_null", "absent"]))
        for row in rows:
            if mode == "all_null":
                row[column] = None
            elif mode == "mixed":
                value = draw(st.one_of(st.just(MISSING), st.none(), values))
                if value is not MISSING:
                    row[column] = value
    refused: list[str] = []
    if case.primary_key and draw(st.integers(0, 9)) == 0:  # a row without its primary key
        row = draw(st.sampled_from(rows))
        if draw(st.booleans()):
            row["id"] = None
        else:
            del row["id"]
        refused.append("id")
    present = {k for row in rows for k in row}
    refused += [c for c, on in (("deleted", case.hard_delete), ("seq", case.dedup_sort)) if on and c not in present]
    return Batch(kind, rows, untyped=draw(st.booleans()), refused=tuple(refused))


# -- the batches as the function returns them -------------------------------------------------------


def _arrow_type(column: str):
    import pyarrow as pa

    return {"int64": pa.int64(), "string": pa.string(), "bool": pa.bool_()}[TYPES[column]]


def _arrow(batch: Batch, columns: list[str]):
    import pyarrow as pa

    arrays = {}
    for c in columns:
        values = [row.get(c) for row in batch.rows]
        untyped = batch.untyped and all(v is None for v in values)
        arrays[c] = pa.array(values, type=pa.null() if untyped else _arrow_type(c))
    return pa.table(arrays) if arrays else pa.table({})


def _pandas(batch: Batch, columns: list[str]):
    import pandas as pd

    frame = {}
    for c in columns:
        values = [row.get(c) for row in batch.rows]
        if batch.untyped and all(v is None for v in values):
            frame[c] = pd.Series(values, dtype=object)
        else:
            frame[c] = pd.Series(values, dtype={"int64": "Int64", "string": "string", "bool": "boolean"}[TYPES[c]])
    return pd.DataFrame(frame)


def _spark(spark, batch: Batch, columns: list[str]):
    from pyspark.sql import types as T

    spark_types = {"int64": T.LongType(), "string": T.StringType(), "bool": T.BooleanType()}
    fields = []
    for c in columns:
        values = [row.get(c) for row in batch.rows]
        untyped = batch.untyped and all(v is None for v in values)
        fields.append(T.StructField(c, T.NullType() if untyped else spark_types[TYPES[c]], True))
    return spark.createDataFrame([tuple(row.get(c) for c in columns) for row in batch.rows], T.StructType(fields))


def _output(spark, case: Case, batch: Batch) -> Callable[[], Any]:
    """A factory of what the asset's function returns for `batch`."""
    columns = batch.columns(case) if not batch.empty else list(case.columns[:-1])  # an empty schema: the asset's typed columns
    if batch.empty:
        typed = Batch(batch.kind, [], untyped=False)
        return {
            "list": lambda: [],
            "none": lambda: None,
            "empty_pages": lambda: [[], []],
            "nothing": lambda: (r for r in ()),
            "no_schema": lambda: __import__("pyarrow").table({}),
            "schema": lambda: _arrow(typed, columns) if batch.kind == "arrow" else _spark(spark, typed, columns),
            "no_columns": lambda: __import__("pandas").DataFrame(),
            "columns": lambda: _pandas(typed, columns),
        }[batch.empty]
    rows = [dict(r) for r in batch.rows]
    if batch.kind == "dicts":
        return lambda: [dict(r) for r in rows]
    if batch.kind == "pages":
        half = (len(rows) + 1) // 2
        return lambda: [rows[:half], rows[half:]]
    if batch.kind == "generator":
        return lambda: (dict(r) for r in rows)
    if batch.kind == "arrow":
        return lambda: _arrow(batch, columns)
    if batch.kind == "pandas":
        return lambda: _pandas(batch, columns)
    return lambda: _spark(spark, batch, columns)


# -- the model -------------------------------------------------------------------------------------


@dataclass
class Model:
    """The table as README describes it, kept as full rows over the case's columns."""

    case: Case
    rows: list[dict] = field(default_factory=list)  # append/replace/delete-insert/upsert/insert-only
    current: dict[Any, dict] = field(default_factory=dict)  # scd2: the current version per key

    def full(self, row: dict) -> dict:
        return {c: row.get(c) for c in self.case.columns}

    def survivors(self, batch: list[dict]) -> dict[Any, dict]:
        """One row per key: the highest dedup_sort value (a NULL never wins), else the last seen."""
        best: dict[Any, tuple] = {}
        for i, row in enumerate(batch):
            seq = row.get("seq")
            rank = (seq is not None, seq or 0, i) if self.case.dedup_sort else (i,)
            if row["id"] not in best or rank > best[row["id"]][0]:
                best[row["id"]] = (rank, row)
        return {k: self.full(r) for k, (_, r) in best.items()}

    @staticmethod
    def tombstone(row: dict) -> bool:
        return row.get("deleted") is True  # a boolean flag deletes on True only

    def apply(self, batch: Batch) -> None:
        rows = batch.rows
        strategy = self.case.strategy
        if strategy == "replace":
            self.rows = [self.full(r) for r in rows]
            return
        if not rows:
            return  # an empty batch changes nothing
        if strategy == "append":
            self.rows += [self.full(r) for r in rows]
            return
        won = self.survivors(rows)
        if strategy == "scd2":
            days = {r["day"] for r in rows} if self.case.merge_key else None
            scope = {k for k, r in self.current.items() if days is None or r["day"] in days or k in won}
            for key in scope - {k for k, r in won.items() if not self.tombstone(r)}:
                del self.current[key]  # retired: absent from the extract (or its group), or deleted
            for key, row in won.items():
                if self.tombstone(row):
                    continue
                old = self.current.get(key)
                if old is None or self._hashed(old) != self._hashed(row):
                    self.current[key] = row  # a new version; an unchanged row keeps its old one
            return
        keys = set(won)
        if strategy == "insert-only":
            held = {r["id"] for r in self.rows}
            self.rows += [r for k, r in won.items() if k not in held and not self.tombstone(r)]
            return
        days = {r["day"] for r in rows} if self.case.merge_key else set()  # every row's group, tombstones too
        self.rows = [r for r in self.rows if r["id"] not in keys and r.get("day") not in days]
        self.rows += [r for r in won.values() if not self.tombstone(r)]

    def _hashed(self, row: dict) -> dict:
        """What scd2's row hash covers: the user's columns but the hard_delete flag, NULLs omitted."""
        return {c: v for c, v in row.items() if c != "deleted" and v is not None}

    def table(self) -> list[tuple]:
        rows = list(self.current.values()) if self.case.strategy == "scd2" else self.rows
        return sorted((tuple(r[c] for c in self.case.columns) for r in rows), key=repr)


def _table(spark, io, case: Case, name: str) -> list[tuple]:
    if not table_exists(spark, io, name):
        return []
    frame = spark.table(io.table_name(dg.AssetKey(name)).sql)
    if case.strategy == "scd2":
        frame = frame.where("_valid_to IS NULL")
    present = set(frame.columns)
    return sorted((tuple(r[c] if c in present else None for c in case.columns) for r in frame.collect()), key=repr)


def _typed_empty(batch: Batch) -> bool:
    return batch.empty in ("schema", "columns")


def _figures(result: dg.ExecuteInProcessResult) -> tuple[int, ...]:
    meta = result.get_asset_materialization_events()[-1].materialization.metadata
    return tuple(meta[f"dagster_incremental/rows_{k}"].value for k in ("inserted", "updated", "deleted"))


# -- the property ----------------------------------------------------------------------------------


def check_batches(spark, instance, io, config_file, case: Case, batches: list[Batch]) -> None:
    name = f"shape_{case.label}_{uuid.uuid4().hex[:8]}"
    outputs = iter([_output(spark, case, b) for b in batches])

    @incremental_asset(name=name, primary_key=case.primary_key, merge_key=case.merge_key,
                       write_disposition=case.disposition, columns=case.hints(), config_path=config_file)
    def asset():
        return next(outputs)()

    model = Model(case)
    for number, batch in enumerate(batches, start=1):
        before_rows, before_snapshots = _table(spark, io, case, name), snapshots(spark, io, name)
        before_columns = set(spark.table(io.table_name(dg.AssetKey(name)).sql).columns) if before_snapshots else set()
        result = dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=QUIET,
                                raise_on_error=False)
        where = f"run {number} of {batches}"
        if batch.refused:
            text = failure_text(result)
            assert name in text, f"{where}: the refusal does not name the asset: {text}"
            assert any(repr(c) in text or f"['{c}']" in text for c in batch.refused), (
                f"{where}: the refusal names none of {batch.refused}: {text}")
            assert _table(spark, io, case, name) == before_rows, f"{where}: a refused batch wrote rows"
            assert snapshots(spark, io, name) == before_snapshots, f"{where}: a refused batch committed"
            continue
        assert result.success, f"{where}: refused a batch it must accept:\n{failure_text(result)}"
        model.apply(batch)
        assert _table(spark, io, case, name) == model.table(), where
        if not batch.rows and case.strategy != "replace":
            assert _figures(result) == (0, 0, 0), where
            # A typed empty batch may create the table or add the typed columns it lacks (a schema
            # change, no rows); otherwise an empty batch commits nothing.
            # KNOWN DEFECT (reported, not fixed): an empty Spark DataFrame is lazy, so the library
            # commits it (an empty snapshot, no rows, figures 0); its rows are still checked above.
            lazy = batch.kind == "spark"
            if before_snapshots and not lazy and not (_typed_empty(batch) and set(case.columns[:-1]) - before_columns):
                assert snapshots(spark, io, name) == before_snapshots, f"{where}: an empty batch committed"


_settings = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                            HealthCheck.data_too_large])


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
@_settings
@given(data=st.data())
def test_every_batch_shape_lands_as_the_model_says(spark, instance, io_manager, config_file, case, data):
    batches = data.draw(st.lists(_batch(case), min_size=1, max_size=3), label="batches")
    check_batches(spark, instance, io_manager, config_file, case, batches)


# -- regressions the property found ---------------------------------------------------------------


@pytest.mark.parametrize("empty", ["arrow", "pandas"])
@pytest.mark.parametrize("disposition", ["append", {"disposition": "merge", "strategy": "upsert"}], ids=["append", "upsert"])
def test_an_empty_batch_with_columns_commits_nothing(spark, instance, io_manager, config_file, empty, disposition):
    """Was: an empty Arrow table (or DataFrame) with a schema made an empty commit on every run,
    where an empty list commits nothing ("a run that finds nothing new commits nothing")."""
    import pyarrow as pa

    name = f"typed_empty_{empty}_{'append' if disposition == 'append' else 'upsert'}"
    typed = pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.string())})
    outputs = [[{"id": 1, "v": "a"}], typed if empty == "arrow" else typed.to_pandas()]

    @incremental_asset(name=name, primary_key="id", write_disposition=disposition, config_path=config_file)
    def asset():
        return outputs.pop(0)

    for _ in range(2):
        result = dg.materialize([asset], instance=instance, resources={"io_manager": io_manager}, run_config=QUIET)
        if not outputs:
            break
        before = snapshots(spark, io_manager, name)
    assert snapshots(spark, io_manager, name) == before
    assert _figures(result) == (0, 0, 0)
    assert spark.table(io_manager.table_name(dg.AssetKey(name)).sql).collect()[0].asDict() == {"id": 1, "v": "a"}
