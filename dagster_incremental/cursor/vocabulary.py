"""The cursor vocabulary, named once: every option `incremental(...)` and config.toml take as a
word, as a `Literal` type, with the tuple of its values for checks and messages.

The spec validates against these tuples, the settings schema types its keys with these Literals
(so config.toml lists the same choices), and the engine's own types use them.
"""

from __future__ import annotations

from typing import Literal, get_args

CursorType = Literal["timestamp", "date", "number", "string", "epoch_seconds", "epoch_millis"]
LastValueFunc = Literal["max", "min"]  # a callable(sequence) -> value is the other kind
OnCursorValueMissing = Literal["raise", "include", "exclude"]
RowOrder = Literal["asc", "desc"]  # None: rows come in any order
RunMode = Literal["incremental", "backfill"]  # a run that moves the cursor, or one that loads a window
RangeBound = Literal["closed", "open"]  # range_start (default "closed") and range_end ("open")

CURSOR_TYPES: tuple[CursorType, ...] = get_args(CursorType)
TEMPORAL_TYPES: frozenset[CursorType] = frozenset({"timestamp", "date", "epoch_seconds", "epoch_millis"})
LAST_VALUE_FUNCS: tuple[LastValueFunc, ...] = get_args(LastValueFunc)
ON_CURSOR_VALUE_MISSING: tuple[OnCursorValueMissing, ...] = get_args(OnCursorValueMissing)
ROW_ORDERS: tuple[RowOrder, ...] = get_args(RowOrder)
RANGE_BOUNDS: tuple[RangeBound, ...] = get_args(RangeBound)
