"""The write vocabulary, named once: dispositions, merge strategies and their options.

The settings schema checks against these names, the Spark writer types its specs with them and
the asset factory resolves defaults from them, so a new strategy is added in one place.
"""

from __future__ import annotations

from typing import Literal, get_args

Disposition = Literal["append", "replace", "merge"]
MergeStrategy = Literal["delete-insert", "upsert", "insert-only", "scd2"]
SortOrder = Literal["asc", "desc"]
Schedule = Literal["hourly", "daily", "weekly", "monthly"]

DISPOSITIONS: tuple[str, ...] = get_args(Disposition)
STRATEGIES: tuple[str, ...] = get_args(MergeStrategy)
DEFAULT_STRATEGY: MergeStrategy = "delete-insert"  # dlt's default for disposition = "merge"
# Strategies that match rows on the primary key alone (merge_key is ignored): their batch is one
# row per key, and a key never occurs twice in the table after them.
PRIMARY_KEY_STRATEGIES: tuple[str, ...] = ("upsert", "insert-only")
SCD2_OPTIONS = ("validity_column_names", "active_record_timestamp", "boundary_timestamp",
                "row_version_column_name")


def matches_on_primary_key(strategy: str | None, merge_key: object) -> bool:
    """Whether a merge matches rows by the primary key alone: upsert, insert-only, and
    delete-insert (the default) without merge_key."""
    strategy = strategy or DEFAULT_STRATEGY
    return strategy in PRIMARY_KEY_STRATEGIES or (strategy == "delete-insert" and not merge_key)
