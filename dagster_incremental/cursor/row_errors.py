"""What a batch row that the cursor cannot place is told: the cause, where, and a change that
loses nothing (never on_cursor_value_missing = 'include' for a misspelt column, which would load
every row in every run; never primary_key=(), which a merge refuses)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import CONTENT, DedupKey, shown_value
from dagster_incremental.cursor.definition import CursorDefinition
from dagster_incremental.cursor.paths import MISSING
from dagster_incremental.errors import CursorPathMissing, CursorTypeError, CursorValueNone, PrimaryKeyMissing


@dataclass(frozen=True)
class RowErrors:
    """A bound cursor's row errors: its definition, its type now and the type earlier runs stored."""

    spec: CursorDefinition
    cursor_type: str | None
    dedup_key: DedupKey
    stored_type: str | None = None

    def missing_error(self, row: Any, missing: bool, where: str) -> Exception:
        """One row without a cursor value (others have one): the data is at fault."""
        path = self.spec.cursor_path
        policy = ("Give every row a value there, or set on_cursor_value_missing = 'include' to load rows "
                  "without one too (the cursor cannot place them: each is loaded whenever the source returns it)")
        if missing:
            return CursorPathMissing(f"cursor_path {path!r} is missing in {where}{self.key_of(row)}. {policy}.",
                                     cursor_path=path)
        value = self.spec.path.extract(row) if isinstance(row, Mapping) else None
        what = "None" if value is None or value is MISSING else f"{shown_value(value)}, no value,"  # NaN, NaT
        return CursorValueNone(f"cursor_path {path!r} is {what} in {where}{self.key_of(row)}. {policy}.",
                               cursor_path=path)

    def key_of(self, row: Any) -> str:
        """' (primary key id=9)': a row named by its key, never by its other columns (rows hold
        personal data, and run logs travel); '' without a key (the caller names its position)."""
        if self.dedup_key == CONTENT or not isinstance(row, Mapping):
            return ""
        shown = [f"{column}={shown_value(row[column])}" for column in self.dedup_key if column in row]
        return f" (primary key {', '.join(shown)})" if shown else ""

    def absent_column_error(self, columns: Sequence[str], row: Any) -> CursorPathMissing:
        """No row of the batch has the cursor column: cursor_path names the wrong column, and
        on_cursor_value_missing = 'include' would load every row in every run, so it is not offered."""
        path, column = self.spec.cursor_path, self.spec.path.column or self.spec.cursor_path
        guesses = self._cursor_columns(column, [str(c) for c in columns], row)
        mean = f" Did you mean {' or '.join(map(repr, guesses))}?" if guesses else ""
        return CursorPathMissing(
            f"cursor_path {path!r}: the batch has no column {column!r} (its columns: {', '.join(map(str, columns))})."
            f"{mean} Set cursor_path to the column that holds each row's cursor value.",
            cursor_path=path, setting="cursor_path",
        )

    def _cursor_columns(self, column: str, columns: list[str], row: Any) -> list[str]:
        """Columns cursor_path may have meant: names close to it, else the columns whose value in
        `row` has the cursor's type (a date or timestamp while the type is unknown)."""
        close = difflib.get_close_matches(column, columns, n=2, cutoff=0.5)
        if close or not isinstance(row, Mapping):
            return close
        wanted = {self.cursor_type} if self.cursor_type else {"date", "timestamp"}
        return [c for c in columns if cv.detect_type(row.get(c)) in wanted][:2]

    def key_missing_error(self, missing: Sequence[str], columns: Sequence[str], where: str) -> PrimaryKeyMissing:
        """Rows without their primary key: the cursor needs it to know which rows at its start value
        were loaded already (and a merge to find the row in the table), so dropping the key is no fix."""
        own = self.spec.primary_key is not None
        key = list(self.dedup_key) if self.dedup_key != CONTENT else []
        guesses = [g for m in missing for g in difflib.get_close_matches(m, [str(c) for c in columns], n=1)]
        mean = f"; did you mean {', '.join(map(repr, guesses))}?" if guesses else ""
        whose = f"the primary_key of cursor {self.spec.cursor_path!r}" if own else "primary_key"
        return PrimaryKeyMissing(
            f"{whose} {key}: {where} of the batch has no column "
            f"{', '.join(map(repr, missing))} (its columns: {', '.join(map(str, columns))}{mean}). Every row needs "
            "its primary key: it tells which rows at the cursor's start value were loaded already"
            + ("" if own else ", and a merge finds the row to update by it")
            + f". Add {', '.join(map(repr, missing))} to every row, or set {whose} to the columns that identify a row.",
            columns=missing, cursor_path=self.spec.cursor_path,
        )

    def type_source(self) -> str | None:
        """The cursor option that gave the cursor its type (None: the rows or the stored state)."""
        spec = self.spec
        if spec.formats:
            return "cursor_datetime_formats"
        if spec.cursor_type is not None:
            return "cursor_type"
        for key in ("initial_value", "end_value"):
            value = getattr(spec, key)
            if value is not None and cv.detect_type(value) == self.cursor_type:
                return key
        return None

    def type_error(self, value: Any, row: Any, where: str, reason: str) -> CursorTypeError:
        source = self.type_source()
        return CursorTypeError(
            f"cursor_path {self.spec.cursor_path!r}: the value {shown_value(value)} (type {type(value).__name__}, "
            f"{cv.what_value_is(value)}) in {where}{self.key_of(row)} of the batch cannot be compared with the "
            f"{self.cursor_type} cursor: {reason}. {self._type_advice(value, source)}",
            cursor_path=self.spec.cursor_path,
            value=value,
            setting="cursor_datetime_formats" if cv.matching_formats(value) else source,
        )

    def _type_advice(self, value: Any, source: str | None) -> str:
        """What to change: formats for a non-ISO date string, else the option that set the type."""
        formats = cv.matching_formats(value)
        if formats:
            first = formats[0]
            swapped = first.replace("%d", "\0").replace("%m", "%d").replace("\0", "%m")  # month first
            alt = f' (or ["{swapped}"] if the month comes first)' if swapped in formats[1:] else ""
            return (f'The value is not ISO-8601: name its format, cursor_datetime_formats = ["{first}"]{alt}, '
                    "so the values compare as instants, not as text.")
        detected = cv.detect_type(value)
        ctype = self.cursor_type or ""
        if source in ("initial_value", "end_value") and detected not in (None, "string"):
            bound = getattr(self.spec, source)
            why = f"The cursor is a {ctype} cursor because {source} = {bound!r} is {cv.what_value_is(bound)}"
            if detected == "number":  # Unix times keep an instant bound as written
                return (f"{why}, but the column holds numbers: if they are Unix times, set cursor_type = "
                        f'"epoch_seconds" (or "epoch_millis"); else write {source} as a number of the column.')
            return f"{why}, but the column holds {detected}s: write {source} as a {detected}, {source} = {cv.bound_like(bound, detected)}."
        if source == "cursor_type" and detected not in (None, "string"):
            return (f"cursor_type = {ctype!r} says the cursor is a {ctype}, but the column holds {detected}s: "
                    f"set cursor_type = {detected!r}, or remove it to detect the type.")
        if source is None and self.stored_type == self.cursor_type:
            return (f"Earlier runs stored a {ctype} cursor: return the column as {ctype} values again "
                    "(convert it in the function).")
        return f"Give every row a {ctype} value at {self.spec.cursor_path!r} (convert it in the function)."
