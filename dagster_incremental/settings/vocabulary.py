"""The write vocabulary, named once: dispositions, merge strategies and their options.

The settings schema checks against these names, the Spark writer types its specs with them and
the asset factory resolves defaults from them, so a new strategy is added in one place.
"""

from __future__ import annotations

from typing import Literal, get_args

Disposition = Literal["append", "replace", "merge"]
MergeStrategy = Literal["delete-insert", "upsert", "scd2"]
SortOrder = Literal["asc", "desc"]
Schedule = Literal["hourly", "daily", "weekly", "monthly"]

DISPOSITIONS: tuple[str, ...] = get_args(Disposition)
STRATEGIES: tuple[str, ...] = get_args(MergeStrategy)
DEFAULT_STRATEGY: MergeStrategy = "delete-insert"  # dlt's default for disposition = "merge"
SCD2_OPTIONS = ("validity_column_names", "active_record_timestamp", "boundary_timestamp",
                "row_version_column_name")
