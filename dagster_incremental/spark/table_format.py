"""The seam between the two table formats: what a format's one commit offers the format-neutral
statements (the strategies' MERGE, the window replace) that run as it. The destination's format
is chosen in one place: spark/destination.py.

Iceberg: spark/iceberg/tables.py + spark/iceberg/writer.py + spark/iceberg/commit.py (and the in-process path,
spark/local/). Delta: spark/delta/. Staging, dedup, the strategies' SQL, schema fitting and the
cursor are shared; each format keeps only how it commits and reads its own history."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import WriteSpec


class DataCommit(Protocol):
    """The one commit a write makes, as a statement written against `target` runs as it."""

    @property
    def spec(self) -> WriteSpec: ...

    @property
    def commit_id(self) -> str: ...

    @property
    def started(self) -> datetime: ...  # the run's start: scd2's default boundary

    @property
    def case_sensitive(self) -> bool: ...

    @property
    def table(self) -> TableRef: ...

    @property
    def target(self) -> TableRef: ...

    def run(self, spark: Any, fn: Callable[[], Any]) -> Any: ...
