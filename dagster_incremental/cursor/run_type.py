"""A bound run's cursor type and every conversion that depends on it: a value as a key (what
the engine compares), as the public value (what the asset function sees) and as the canonical
text (what the state stores).

Why a class of its own: the type can be learned late (from the first row, or widened from a
date to a timestamp by the rows), and the run's start, its filters and the state it leaves must
all convert with the type as it stands now.
"""

from __future__ import annotations

from typing import Any

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.boundary import _canonical
from dagster_incremental.cursor.definition import CursorDefinition
from dagster_incremental.errors import IncrementalConfigError

DAY_MICROS = 86_400_000_000


class RunType:
    """The run's cursor type (None until declared, implied or detected) and its conversions."""

    def __init__(self, spec: CursorDefinition, cursor_type: str | None) -> None:
        self.spec = spec
        self.value = cursor_type
        self.explicit = spec.cursor_type is not None

    def adopt(self, detected: str | None, sample: Any, where: str) -> None:
        """Fix the cursor type from the data when nothing declared it; an inferred "date"
        (from a date initial_value) becomes "timestamp" when the rows carry timestamps."""
        if detected is None:
            return
        if self.value is None:
            error = None if self.spec.is_callable else self.spec.lag_error(
                detected, f" (first value {sample!r} in {where})")
            if error is not None:
                raise error
            self.value = detected
        elif self.value == "date" and detected == "timestamp" and not self.explicit:
            self.value = "timestamp"

    def after(self, detected: str) -> str:
        """The cursor type adopt(detected) would give, without adopting it yet."""
        if self.value is None or (self.value == "date" and detected == "timestamp" and not self.explicit):
            return detected
        return self.value

    def widen_for(self, last: Any) -> None:
        """A detected (not declared) "date" cursor whose values carry a time of day becomes
        "timestamp": storing a truncated date would re-read rows."""
        if self.value == "date" and not self.explicit and isinstance(last, int) and last % DAY_MICROS:
            self.value = "timestamp"

    def key(self, value: Any, what: str) -> Any:
        """A bound / state value as a key (for a callable: as the public value it compares)."""
        if self.spec.is_callable:
            return self.public_of(value)
        if self.value is None:
            t = cv.detect_type(value)
            if t is None:
                raise IncrementalConfigError(f"{what}={value!r} cannot be a cursor value.")
            self.adopt(t, value, what)
        try:
            return cv.to_key(value, self.value, self.spec.formats)  # type: ignore[arg-type]
        except cv.KeyConversionError as e:
            raise IncrementalConfigError(
                f"{what}={value!r} is not comparable with the {self.value} cursor "
                f"{self.spec.cursor_path!r}: {e.reason}."
            ) from e

    def public_of(self, value: Any) -> Any:
        """A stored (canonical) or raw value as a callable last_value_func compares it: ISO
        strings and datetimes as pendulum instants, so it compares instants; other values stay."""
        if value is None:
            return None
        t = self.value or cv.detect_type(value)
        if t is None or t == "string":
            return value
        if self.value is None:
            self.value = t
        try:
            return cv.key_to_public(cv.to_key(value, t, self.spec.formats), t)
        except cv.KeyConversionError:
            return value

    def public(self, key: Any) -> Any:
        """A key as the asset function sees it (pendulum for instants and dates)."""
        if key is None or self.spec.is_callable or self.value is None:
            return key
        return cv.key_to_public(key, self.value)

    def canonical(self, key: Any) -> Any:
        """A key (a callable's public value) as the state stores it."""
        if key is None:
            return None
        if self.spec.is_callable:
            t = self.value
            if t is not None and cv.detect_type(key) is not None:
                try:
                    return cv.key_to_canonical(cv.to_key(key, t), t)
                except cv.KeyConversionError:
                    pass
            return _canonical(key)
        if self.value is None:
            return _canonical(key)
        return cv.key_to_canonical(key, self.value)
