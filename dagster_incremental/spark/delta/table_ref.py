"""A Delta table's name: the name people know it by, kept at a folder that Spark SQL names
it by (delta.`<location>`), since Delta tables here live at paths, not in a catalog."""

from __future__ import annotations

from dataclasses import dataclass

from dagster_incremental.spark.sql import qualified
from dagster_incremental.spark.table_ref import TableRef


@dataclass(frozen=True)
class DeltaTableRef(TableRef):
    """A TableRef whose `.sql` is Delta's path identifier; `display` stays the catalog name."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.location:
            raise ValueError(f"Delta table {self.display} needs the folder it lives in")

    @classmethod
    def at(cls, name: TableRef, location: str) -> DeltaTableRef:
        """`name`, kept in the folder `location`."""
        return cls(name.catalog, name.namespace, name.name, location)

    @property
    def sql(self) -> str:
        return qualified("delta", str(self.location))
