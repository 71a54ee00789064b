"""A cursor definition's bounds, initial_value and end_value, checked together: the type they
imply, their keys, and that the range runs the way last_value_func goes.

Why apart from the definition (definition.py): these checks read only the two values and a few
options, so they are plain functions the definition calls once, at validation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.vocabulary import TEMPORAL_TYPES, CursorType
from dagster_incremental.errors import IncrementalConfigError


def check_bounds(cursor_path: str, bounds: dict[str, Any], ctype: str | None, formats: tuple[str, ...]) -> None:
    """initial_value / end_value (`bounds`: argument -> value) by config.toml's rule."""
    for arg, value in bounds.items():
        if value is None:
            continue
        try:
            cv.check_bound(value, ctype, formats=formats)
        except cv.BadBound as bad:
            raise IncrementalConfigError(
                f"incremental({cursor_path!r}): {arg}={value!r} {bad.problem}; {bad.hint}.") from None


def check_callable_range(func: Callable[..., Any], initial: Any, end: Any, func_label: str) -> None:
    """A callable compares its own values: last_value_func((end, initial)) must be end."""
    try:
        ok = func((end, initial)) == end
    except Exception as e:  # noqa: BLE001 - user function
        raise IncrementalConfigError(
            f"initial_value={initial!r} and end_value={end!r} are "
            f"not comparable by last_value_func: {e}"
        ) from e
    if not ok:
        raise IncrementalConfigError(
            f"end_value={end!r} is on the wrong side of initial_value="
            f"{initial!r} for last_value_func {func_label}: "
            "last_value_func((end_value, initial_value)) must return end_value."
        )


def bound_type(initial: Any, end: Any, declared: CursorType | None) -> CursorType | None:
    """The declared cursor_type, else the type of initial_value / end_value (which must be comparable)."""
    types: dict[str, CursorType] = {}
    for arg, value in (("initial_value", initial), ("end_value", end)):
        if value is not None:
            t = cv.detect_type(value)
            if t is None:
                raise IncrementalConfigError(
                    f"{arg}={value!r} (type {type(value).__name__}) cannot be a cursor value: use a "
                    "datetime, date, ISO-8601 string, number or string."
                )
            types[arg] = t
    ctype = declared
    if ctype is None and types:
        ctype = types.get("initial_value") or types["end_value"]
        if ctype == "date" and "timestamp" in types.values():
            ctype = "timestamp"
    if len(types) == 2 and declared is None:
        fam = {("temporal" if t in TEMPORAL_TYPES else t) for t in types.values()}
        if len(fam) > 1:
            raise IncrementalConfigError(
                f"initial_value={initial!r} ({types['initial_value']}) and end_value="
                f"{end!r} ({types['end_value']}) are not comparable: give both as the "
                "same kind of value."
            )
    return ctype


def bound_key(arg: str, value: Any, ctype: str | None, formats: tuple[str, ...]) -> Any:
    """A bound as a key of the cursor's type (None stays None)."""
    if value is None:
        return None
    assert ctype is not None  # bound_type found the type of every bound given
    try:
        return cv.to_key(value, ctype, formats)
    except cv.KeyConversionError as e:
        raise IncrementalConfigError(
            f"{arg}={value!r} is not comparable with a {ctype} cursor: {e.reason}."
        ) from e


def check_order(direction: str, func: Any, initial: Any, end: Any, ik: Any, ek: Any) -> None:
    """end_value on the side of initial_value that last_value_func goes to."""
    if ek is None:
        return
    if (direction == "max" and ek < ik) or (direction == "min" and ek > ik):
        word = "lower" if direction == "max" else "higher"
        raise IncrementalConfigError(
            f"end_value={end!r} is {word} than initial_value={initial!r}: "
            f"with last_value_func={func!r} the range runs from initial_value "
            f"{'up' if direction == 'max' else 'down'} to end_value; swap them."
        )
