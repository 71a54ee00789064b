"""THE filtering algorithm as pure functions over a key array: dicts, pages, Arrow and pandas all
reach `decide` as one key array per batch, so the input kinds cannot drift apart.
"""

from __future__ import annotations

# dlt's two drifting algorithms (per-row for dicts, per-batch for Arrow) are what this avoids.
# `filter_spark` expresses the same decision as Spark columns. The only per-value loop is
# `decide_callable`, because a callable last_value_func must be called per value by nature.
#
# Semantics (direction "max"; "min" mirrors every comparison):
# - NULL/missing cursor: on_cursor_value_missing raise | include (kept, never moves last_value) |
#   exclude (dropped);
# - end filter: < end (range_end open) or <= end (closed);
# - start filter: >= start (range_start closed) or > start (open);
# - boundary dedup: a row with cursor == start whose dedup key is in the stored boundary set is
#   dropped; a newer version of the same key (cursor > start) is never touched (dlt bug INC-56);
# - last_value = max(previous last_value, kept in-range values);
# - the boundary set of the new max is tracked (bounded, see boundary.py), hashing only rows at
#   the start value and rows at the batch max.

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_incremental.cursor import boundary as _boundary
from dagster_incremental.cursor.boundary import Boundary
from dagster_incremental.cursor.paths import MISSING
from dagster_incremental.cursor.values import Key, key_scalar


@dataclass(frozen=True)
class RangeSpec:
    """The constants of one bound run, in key space."""

    direction: str  # "max" | "min"
    start: Key | None
    start_open: bool
    end: Key | None
    end_closed: bool
    on_missing: str  # "raise" | "include" | "exclude"
    dedup: bool  # track boundary keys (and dedup at the start value)
    start_set: Boundary | None  # the stored boundary, usable at `start` (value == start, verified)


@dataclass(frozen=True)
class Cursor:
    """The running values of a run: the live last value and the boundary of that value."""

    last: Any
    boundary: Boundary | None


@dataclass(frozen=True)
class Decision:
    keep: np.ndarray  # bool per row
    cursor: Cursor
    start_out_of_range: bool
    end_out_of_range: bool


def _np(mask: pa.Array) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


def range_masks(keys: pa.Array, spec: RangeSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(valid, in_range before dedup, beyond_end) as numpy bool arrays."""
    valid = _np(keys.is_valid())
    in_range = valid.copy()
    beyond_end = np.zeros(len(keys), dtype=bool)
    mx = spec.direction == "max"
    if spec.end is not None:
        end = key_scalar(spec.end, keys)
        if mx:
            ok = pc.less_equal(keys, end) if spec.end_closed else pc.less(keys, end)
        else:
            ok = pc.greater_equal(keys, end) if spec.end_closed else pc.greater(keys, end)
        ok_np = _np(ok)
        beyond_end = valid & ~ok_np
        in_range &= ok_np
    if spec.start is not None:
        start = key_scalar(spec.start, keys)
        if mx:
            ok = pc.greater(keys, start) if spec.start_open else pc.greater_equal(keys, start)
        else:
            ok = pc.less(keys, start) if spec.start_open else pc.less_equal(keys, start)
        in_range &= _np(ok)
    return valid, in_range, beyond_end


def decide(
    keys: pa.Array,
    spec: RangeSpec,
    cursor: Cursor,
    dedup_keys: Callable[[np.ndarray], list[str]],
    null_error: Callable[[int], Exception],
) -> Decision:
    """Which rows of one batch to keep, and the cursor after it.

    `dedup_keys(indices)` returns the dedup keys of those rows (called only for rows at the start
    value and at the batch max); `null_error(index)` builds the error for a NULL/missing cursor.
    """
    n = len(keys)
    valid, in_range, beyond_end = range_masks(keys, spec)
    nulls = ~valid
    if nulls.any() and spec.on_missing == "raise":
        raise null_error(int(np.flatnonzero(nulls)[0]))
    below_start = valid & ~in_range & ~beyond_end
    start_oor = bool(below_start.any())
    end_oor = bool(beyond_end.any())

    if spec.start_set is not None and spec.start_set.keys and spec.start is not None and not spec.start_open:
        at_start = in_range & _np(pc.equal(keys, key_scalar(spec.start, keys)))
        idx = np.flatnonzero(at_start)
        if len(idx):
            seen = np.fromiter((spec.start_set.contains(k) for k in dedup_keys(idx)), bool, len(idx))
            if seen.any():
                in_range[idx[seen]] = False
                start_oor = True

    last = cursor.last
    boundary = cursor.boundary
    if in_range.any():
        kept_keys = keys.filter(pa.array(in_range))
        extreme = (pc.max(kept_keys) if spec.direction == "max" else pc.min(kept_keys)).as_py()
        if last is None or (extreme > last if spec.direction == "max" else extreme < last):
            last = extreme
        if spec.dedup and boundary is not None and extreme == last:
            at_max = in_range & _np(pc.equal(keys, key_scalar(extreme, keys)))
            idx = np.flatnonzero(at_max)
            boundary = boundary.observe(extreme, len(idx), lambda: dedup_keys(idx), spec.direction)
    keep = in_range | (nulls & (spec.on_missing == "include")) if n else in_range
    return Decision(keep, Cursor(last, boundary), start_oor, end_oor)


# ---------------------------------------------------------------------------------------------
# callable last_value_func: the same decision through the user's function, per value
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallableSpec:
    func: Callable[[Sequence[Any]], Any]
    start: Any
    start_open: bool
    end: Any
    end_closed: bool
    on_missing: str
    dedup: bool
    start_set: Boundary | None


@dataclass
class _Walk:
    """What one pass of decide_callable carries from row to row."""

    last: Any
    moved: bool = False
    at_last: list[int] = field(default_factory=list)
    start_oor: bool = False
    end_oor: bool = False


def decide_callable(
    values: Sequence[Any],
    spec: CallableSpec,
    cursor: Cursor,
    dedup_keys: Callable[[np.ndarray], list[str]],
    null_error: Callable[[int], Exception],
    type_error: Callable[[int, Exception], Exception],
) -> Decision:
    """dlt's per-row algorithm with every comparison made through `spec.func` (as dlt does)."""
    keep = np.zeros(len(values), dtype=bool)
    walk = _Walk(cursor.last)
    for i, v in enumerate(values):
        if v is MISSING or v is None:
            if spec.on_missing == "raise":
                raise null_error(i)
            keep[i] = spec.on_missing == "include"
            continue
        try:
            keep[i] = _step(spec, walk, i, v, dedup_keys)
        except (TypeError, ValueError) as e:  # incomparable values inside the user's function
            raise type_error(i, e) from e
    boundary = _callable_boundary(spec, cursor.boundary, walk, dedup_keys)
    return Decision(keep, Cursor(walk.last, boundary), walk.start_oor, walk.end_oor)


def _step(spec: CallableSpec, walk: _Walk, i: int, v: Any, dedup_keys: Callable[[np.ndarray], list[str]]) -> bool:
    """Whether row i (cursor value v, not missing) is kept; moves `walk` along."""
    f = spec.func
    if spec.end is not None:
        if f((v, spec.end)) != spec.end or (not spec.end_closed and f((v,)) == spec.end):
            walk.end_oor = True
            return False
    last = walk.last
    new = f((v, last)) if last is not None else f((v,))
    if last is None or new != last:
        walk.last, walk.moved, walk.at_last = new, True, [i]
        return True
    p = f((v,))
    if spec.start is not None:
        if spec.start_open and p == spec.start:
            walk.start_oor = True
            return False
        if f((v, spec.start)) == spec.start:
            if p != spec.start or (
                spec.start_set is not None and spec.start_set.contains(dedup_keys(np.array([i]))[0])
            ):
                walk.start_oor = True
                return False
    if p == last:
        walk.at_last.append(i)
    return True


def _callable_boundary(
    spec: CallableSpec, boundary: Boundary | None, walk: _Walk, dedup_keys: Callable[[np.ndarray], list[str]]
) -> Boundary | None:
    """The boundary of the new last value after a pass (bounded like every other kind's)."""
    cap = _boundary.BOUNDARY_KEY_LIMIT
    last = walk.last
    if spec.dedup and last is not None and walk.at_last:
        idx = np.array(walk.at_last)
        base = Boundary(None) if walk.moved or boundary is None or boundary.value != last else boundary
        if base.value is None:
            keys = dedup_keys(idx) if len(idx) <= cap else []
            return Boundary(last, frozenset(keys), len(idx) > cap)
        if base.overflow or len(idx) > cap:
            return Boundary(last, frozenset(), True)
        merged = base.keys | frozenset(dedup_keys(idx))
        over = len(merged) > cap
        return Boundary(last, frozenset() if over else merged, over)
    if walk.moved:
        return Boundary(last) if spec.dedup else boundary
    return boundary
