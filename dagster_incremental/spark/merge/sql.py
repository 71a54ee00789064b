"""Small SQL fragments the merge statements are assembled from."""

# Why a module of its own: every merge strategy needs the same few pieces (key equality column by
# column, conjunctions, partition-pruning bounds, named parameters), and building them in one place
# keeps the rule "identifiers are quoted, values are parameters" checkable in one screen.

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster_incremental.spark.sql import quote
from dagster_incremental.spark.write_spec import HELPER_PREFIX

# Helper columns carried by the prepared batch (never stored: the writer drops `__di_*`).
DELETED = "__di_deleted"  # the row is a hard-delete tombstone
SURVIVOR = "__di_survivor"  # the row won its key's dedup (the only row of its key that is written)
INSERT = "__di_insert"  # in a MERGE source: the row is to be inserted (not a key-only row)


def written_columns(columns: Sequence[str]) -> list[str]:
    """The columns a MERGE writes: the table's, never a `__di_*` helper."""
    return [name for name in columns if not name.startswith(HELPER_PREFIX)]


def join_keys(n: int) -> list[str]:
    """Names of the n join-key columns of a MERGE source (kept apart from the user's columns)."""
    return [f"{HELPER_PREFIX}k{i}" for i in range(n)]


@dataclass
class Params:
    """Collects named parameters: values reach Spark as `:name` markers, never as SQL text."""

    values: dict[str, Any] = field(default_factory=dict)

    def bind(self, name: str, value: Any) -> str:
        """Register `value` under `name` and return its marker `:name`."""
        if name in self.values and self.values[name] != value:
            raise ValueError(f"parameter {name!r} bound to two values")  # pragma: no cover - a bug
        self.values[name] = value
        return f":{name}"


def col(alias: str | None, name: str) -> str:
    """`alias`.`name` (or just `name`)."""
    return f"{alias}.{quote(name)}" if alias else quote(name)


def conj(*parts: str) -> str:
    """AND of the non-empty parts, each parenthesised; TRUE when there are none."""
    kept = [p for p in parts if p]
    return " AND ".join(f"({p})" for p in kept) if kept else "TRUE"


def keys_equal(
    left: str, left_cols: Sequence[str], right: str, right_cols: Sequence[str], *, null_safe: bool = False
) -> str:
    """Column-by-column equality of two key tuples: never string concatenation (dlt #4244)."""
    op = "<=>" if null_safe else "="
    return conj(*(f"{col(left, a)} {op} {col(right, b)}" for a, b in zip(left_cols, right_cols, strict=True)))


def select_list(items: Iterable[tuple[str, str]]) -> str:
    """`expr AS `name`, ...` from (expression, output name) pairs."""
    return ", ".join(f"{expr} AS {quote(name)}" for expr, name in items)


def branch_columns(columns: Sequence[str], *, rows_from: str | None, keys: Sequence[str], insert: bool) -> str:
    """The select list of one branch of a two-kind MERGE source.

    Insert rows carry the written columns (from alias `rows_from`) and NULL join keys, so they
    never match; key rows carry NULL data and the join keys (`keys`: SQL expressions) of the
    target rows they act on. Both end with the INSERT marker.
    """
    data = [(col(rows_from, name) if rows_from else "NULL", name) for name in columns]
    joins = list(zip(keys, join_keys(len(keys)), strict=True))
    return select_list([*data, *joins, ("TRUE" if insert else "FALSE", INSERT)])


def prune_condition(alias: str, prune: Sequence[tuple[str, Any, Any]], params: Params) -> str:
    """`alias.col BETWEEN :lo AND :hi` for each partition column, so Iceberg prunes files.

    A bound of None means "no range known" (e.g. the batch has NULLs there): that column is not
    used for pruning, which is always correct, only slower.
    """
    parts = []
    for i, (column, lo, hi) in enumerate(prune):
        if lo is None or hi is None:
            continue
        lo_marker = params.bind(f"prune{i}_lo", lo)
        hi_marker = params.bind(f"prune{i}_hi", hi)
        parts.append(f"{col(alias, column)} BETWEEN {lo_marker} AND {hi_marker}")
    return conj(*parts) if parts else ""


def insert_clause(columns: Sequence[str], source: str = "s", condition: str = "") -> str:
    """`WHEN NOT MATCHED [AND cond] THEN INSERT (cols) VALUES (s.cols)`."""
    when = f"WHEN NOT MATCHED AND {condition}" if condition else "WHEN NOT MATCHED"
    names = ", ".join(quote(c) for c in columns)
    values = ", ".join(col(source, c) for c in columns)
    return f"{when} THEN INSERT ({names}) VALUES ({values})"


def merge(target: str, source_sql: str, on: str, clauses: Sequence[str]) -> str:
    """The MERGE statement around a source query, a match condition and WHEN clauses."""
    body = "\n".join(clauses)
    return f"MERGE INTO {target} AS t\nUSING (\n{source_sql}\n) AS s\nON {on}\n{body}"
