"""Every error a user can cause, in one hierarchy.

Each error says what is wrong, where (file/section/key, or asset/column/value/row) and how to fix
it. Code that catches library errors catches `IncrementalError`; nothing here is raised for bugs.
The "where" is also kept as fields set by the constructor (None when the raiser does not know
it), so code can act on an error without parsing its message; `str(error)` is the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


class IncrementalError(Exception):
    """Base class of every error a user of dagster_incremental can cause."""


class IncrementalConfigError(IncrementalError, ValueError):
    """A bad argument to `incremental(...)` / `@incremental_asset(...)`, or a bad config.toml value.

    For a file: `path` (absolute), `section` ("[assets.orders.updated_at]"), `key` (dotted below
    the section), `value`, `line` (None when unknown or set by the environment) and `env_var`
    (the variable that set the value, or None).
    """

    def __init__(self, message: str, *, path: Path | None = None, section: str | None = None,
                 key: str | None = None, value: Any = None, line: int | None = None,
                 env_var: str | None = None) -> None:
        super().__init__(message)
        self.path, self.section, self.key, self.value = path, section, key, value
        self.line, self.env_var = line, env_var


class IncrementalSettingsWarning(UserWarning):
    """Settings that load but probably do not do what was meant (shown at definition and in each run)."""


class CursorRowError(IncrementalError):
    """A row the cursor cannot place: `cursor_path` and the row's `value` there (None if absent).

    `setting`: the cursor option the message blames ("cursor_path", "initial_value", ...; None when
    the rows are at fault), so the asset layer can add where that option is set.
    """

    def __init__(self, message: str, *, cursor_path: str | None = None, value: Any = None,
                 setting: str | None = None) -> None:
        super().__init__(message)
        self.cursor_path, self.value, self.setting = cursor_path, value, setting


class CursorPathMissing(CursorRowError):
    """A row has no value at the cursor path and `on_cursor_value_missing="raise"`."""


class CursorValueNone(CursorRowError):
    """A row's cursor value is None/NULL and `on_cursor_value_missing="raise"`."""


class CursorTypeError(CursorRowError, TypeError):
    """A cursor value cannot be compared with the cursor's type (e.g. an int row, a datetime cursor)."""


class PrimaryKeyMissing(IncrementalError):
    """A row lacks a column of the dedup key (primary key) used for boundary deduplication.

    `columns`: the key columns the row or frame lacks; `cursor_path`: the cursor whose key it is.
    """

    def __init__(self, message: str, *, columns: Sequence[str] = (), cursor_path: str | None = None) -> None:
        super().__init__(message)
        self.columns, self.cursor_path = tuple(columns), cursor_path


class CursorStateMismatch(IncrementalError):
    """Stored cursor state was produced by a different cursor definition (path, type or key).

    `changed`: the names of the definition's parts that differ ("cursor_path", "cursor_type"...).
    """

    def __init__(self, message: str, *, changed: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.changed = list(changed)


class DataShapeError(IncrementalError):
    """Rows or a table of a shape the target table cannot take (type conflict, reserved column...)."""


class JavaNotFound(IncrementalError):
    """No Java runtime for Spark's driver (JAVA_HOME and PATH have none); says how to install Java 17."""


class ConcurrentRunError(IncrementalError):
    """Another run committed to the same table or holds the same asset.

    `asset` (user string), `table` (name) and `other_run` (the run that committed, if known).
    """

    def __init__(self, message: str, *, asset: str | None = None, table: str | None = None,
                 other_run: str | None = None) -> None:
        super().__init__(message)
        self.asset, self.table, self.other_run = asset, table, other_run


class TableCursorMissing(IncrementalError):
    """Dagster holds a cursor a run committed, but the table no longer holds any (dropped,
    deleted, replaced, or the destination moved): resuming would silently skip what it lost.

    `asset`, `table` and `run_id` (the run whose cursor the table lost), when known.
    """

    def __init__(self, message: str, *, asset: str | None = None, table: str | None = None,
                 run_id: str | None = None) -> None:
        super().__init__(message)
        self.asset, self.table, self.run_id = asset, table, run_id


class UpstreamRewritten(IncrementalError):
    """The upstream snapshot a downstream asset read up to is no longer in the upstream table's
    history (the table was replaced, rolled back, or the snapshot expired): the changes since it
    can't be known, so the run fails instead of skipping them.

    `upstream` (table name) and `snapshot_id` (the cursor the downstream holds).
    """

    def __init__(self, message: str, *, upstream: str | None = None, snapshot_id: int | None = None) -> None:
        super().__init__(message)
        self.upstream, self.snapshot_id = upstream, snapshot_id
