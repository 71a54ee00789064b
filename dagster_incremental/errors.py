"""Every error a user can cause, in one hierarchy.

Each error says what is wrong, where (file/section/key, or asset/column/value/row) and how to fix
it. Code that catches library errors catches `IncrementalError`; nothing here is raised for bugs.
"""

from __future__ import annotations


class IncrementalError(Exception):
    """Base class of every error a user of dagster_incremental can cause."""


class IncrementalConfigError(IncrementalError, ValueError):
    """A bad argument to `incremental(...)` / `@incremental_asset(...)`, or a bad config.toml value."""


class IncrementalSettingsWarning(UserWarning):
    """Settings that load but probably do not do what was meant (shown at definition and in each run)."""


class CursorPathMissing(IncrementalError):
    """A row has no value at the cursor path and `on_cursor_value_missing="raise"`."""


class CursorValueNone(IncrementalError):
    """A row's cursor value is None/NULL and `on_cursor_value_missing="raise"`."""


class CursorTypeError(IncrementalError, TypeError):
    """A cursor value cannot be compared with the cursor's type (e.g. an int row, a datetime cursor)."""


class PrimaryKeyMissing(IncrementalError):
    """A row lacks a column of the dedup key (primary key) used for boundary deduplication."""


class CursorStateMismatch(IncrementalError):
    """Stored cursor state was produced by a different cursor definition (path, type or key)."""


class DataShapeError(IncrementalError):
    """Rows or a table of a shape the target table cannot take (type conflict, reserved column...)."""


class JavaNotFound(IncrementalError):
    """No Java runtime for Spark's driver (JAVA_HOME and PATH have none); says how to install Java 17."""


class ConcurrentRunError(IncrementalError):
    """Another run committed to the same table or holds the same asset."""


class TableCursorMissing(IncrementalError):
    """Dagster holds a cursor a run committed, but the table no longer holds any (dropped,
    deleted, replaced, or the destination moved): resuming would silently skip what it lost."""
