"""A table's name kept as its parts (catalog, namespace, name), so it is named and quoted in one
place and never parsed back out of SQL text. Pure Python: no pyspark at import."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.sql import qualified


@dataclass(frozen=True)
class TableRef:
    """`catalog`.`namespace...`.`name`, every part unquoted; `.sql` is the quoted identifier.

    `str(ref)` is `.sql`, so messages show the name exactly as Spark SQL takes it.

    Examples:
        .. code-block:: python

            ref = TableRef.for_asset("lake", "sales", ["eu", "orders"])
            ref.sql      # '`lake`.`sales`.`eu__orders`'
            ref.display  # 'lake.sales.eu__orders'
            TableRef.parse(ref.sql) == ref
    """

    catalog: str
    namespace: tuple[str, ...]
    name: str
    # Where the table's folder is, for a format that names its tables by path (spark/delta's
    # DeltaTableRef, whose `.sql` is then that path); `display` keeps the name people know.
    location: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.namespace, str):
            object.__setattr__(self, "namespace", (self.namespace,))
        else:
            object.__setattr__(self, "namespace", tuple(self.namespace))
        for part in self.parts:
            if not isinstance(part, str) or part == "":
                raise ValueError(f"a table name part must be a non-empty string, got {part!r} in {self.parts}")
        if not self.namespace:
            raise ValueError(f"table {self.name!r} needs a namespace")

    @classmethod
    def for_asset(cls, catalog: str, namespace: str | Sequence[str], asset_key_path: Sequence[str]) -> TableRef:
        """The table of an asset: its key parts (prefix parts, then the name) joined with `__`."""
        if not asset_key_path:
            raise IncrementalConfigError("an asset key needs at least one part to name its table")
        spaces = (namespace,) if isinstance(namespace, str) else tuple(namespace)
        return cls(catalog, spaces, "__".join(asset_key_path))

    @classmethod
    def parse(cls, text: str) -> TableRef:
        """From a (partly) backtick-quoted multipart name: "`a`.`b``c`.d" -> (a, (b`c,), d)."""
        parts = _split_identifier(text)
        if len(parts) < 3:
            raise ValueError(f"table name {text!r} needs a catalog, a namespace and a name")
        return cls(parts[0], tuple(parts[1:-1]), parts[-1])

    @property
    def parts(self) -> tuple[str, ...]:
        return (self.catalog, *self.namespace, self.name)

    @property
    def sql(self) -> str:
        """The quoted identifier: `catalog`.`namespace`.`name` (backticks inside doubled)."""
        return qualified(*self.parts)

    @property
    def namespace_sql(self) -> str:
        """`catalog`.`namespace`: what CREATE NAMESPACE takes."""
        return qualified(self.catalog, *self.namespace)

    @property
    def in_catalog_sql(self) -> str:
        """`namespace`.`name`: the table as its catalog's stored procedures name it."""
        return qualified(*self.namespace, self.name)

    @property
    def display(self) -> str:
        """lake.ns.orders: the name for people (metadata, logs), unquoted."""
        return ".".join(self.parts)

    def metadata_table(self, which: str) -> str:
        """An Iceberg metadata table of this one, e.g. `...`.`snapshots`, as SQL."""
        return qualified(*self.parts, which)

    def __str__(self) -> str:
        return self.sql


def _split_identifier(text: str) -> list[str]:
    """The parts of a (partly) backtick-quoted multipart name, Spark's escaping undone."""
    parts: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == "`":
            part, i = _quoted_part(text, i)
            parts.append(part)
        else:
            j = text.find(".", i)
            j = n if j == -1 else j
            parts.append(text[i:j].strip())
            i = j
        if i < n:
            if text[i] != ".":
                raise ValueError(f"unexpected {text[i]!r} in table name {text!r}")
            i += 1
    if not parts or any(p == "" for p in parts):
        raise ValueError(f"bad table name {text!r}")
    return parts


def _quoted_part(text: str, start: int) -> tuple[str, int]:
    """The backtick-quoted part opening at `start`, and the index just after its closing quote."""
    j, buf, n = start + 1, [], len(text)
    while True:
        if j >= n:
            raise ValueError(f"unbalanced backticks in table name {text!r}")
        if text[j] == "`":
            if j + 1 < n and text[j + 1] == "`":
                buf.append("`")
                j += 2
                continue
            return "".join(buf), j + 1
        buf.append(text[j])
        j += 1
