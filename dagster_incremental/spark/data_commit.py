"""What a format's one commit offers the format-neutral statements that run as it (the
strategies' MERGE, the window replace): part of the seam in spark/table_format.py, apart so that
those statements need not import the rest of it."""

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
