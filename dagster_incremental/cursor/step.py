"""A `step`: an ISO-8601 duration or a number by which a long range [start, end) is cut into
consecutive half-open slices. Pure: what incremental(...) validates and what the run plans with.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.vocabulary import TEMPORAL_TYPES
from dagster_incremental.errors import IncrementalConfigError

MAX_SLICES = 10_000  # a plan of more slices is a step chosen far too small


@dataclasses.dataclass(frozen=True)
class Step:
    """A parsed `step`: an ISO-8601 duration (`seconds` set) or a number in lag's units."""

    given: Any
    seconds: float | None = None  # an ISO duration, in seconds
    number: float | None = None  # a plain number: seconds / days / native units, as for lag

    def delta(self, cursor_type: str, cursor_path: str) -> int | float:
        """The step in key units of `cursor_type` (what consecutive slice bounds differ by)."""
        where = f"step={self.given!r} on cursor {cursor_path!r}"
        if cursor_type == "string":
            raise IncrementalConfigError(
                f"{where}: a string cursor cannot be cut into slices; step works for timestamps, dates and numbers."
            )
        if self.number is not None:
            return cv.lag_delta(self.number, cursor_type)
        if cursor_type not in TEMPORAL_TYPES:
            raise IncrementalConfigError(
                f"{where}: an ISO-8601 duration needs a date or timestamp cursor; for a {cursor_type} "
                "cursor give step as a number in the cursor's own units."
            )
        if cursor_type == "date" and self.seconds % 86_400:
            raise IncrementalConfigError(f"{where}: a date cursor moves in whole days; give a step of whole days (P1D).")
        return int(round(self.seconds * 1_000_000))  # type: ignore[operator]


def parse_step(step: Any) -> Step | None:
    """`step` as given to incremental(): None, a number > 0, or an ISO-8601 duration > 0."""
    if step is None:
        return None
    if isinstance(step, (int, float)) and not isinstance(step, bool):
        if math.isfinite(step) and step > 0:
            return Step(step, number=float(step))
    elif isinstance(step, str):
        duration = cv.parse_iso_duration(step)
        if duration is not None:
            if duration.total_seconds() > 0:
                return Step(step, seconds=duration.total_seconds())
        elif re.match(r"^P.*(\d+Y|\d+M.*T|\d+M$)", step.strip().upper()):
            raise IncrementalConfigError(
                f"step={step!r} is not valid: years and months have no fixed length; give weeks, days, "
                "hours, minutes or seconds (e.g. P30D)."
            )
    raise IncrementalConfigError(
        f"step={step!r} is not valid: give an ISO-8601 duration such as 'P1D' or 'PT6H', or a number "
        "> 0 in lag's units (seconds for timestamps, days for dates, native units for numbers)."
    )


def plan_slices(start: Any, end: Any, delta: int | float) -> list[tuple[Any, Any]]:
    """[start, end) as consecutive half-open slices of at most `delta`, covering it exactly."""
    if not end > start:
        return []
    span = end - start
    count = -(-span // delta) if isinstance(span, int) and isinstance(delta, int) else math.ceil(span / delta)
    if count > MAX_SLICES:
        raise IncrementalConfigError(
            f"step cuts the range into {count:,} slices (at most {MAX_SLICES:,}): give a larger step."
        )
    inner = [start + i * delta for i in range(1, int(count))]
    bounds = [start, *(b for b in inner if start < b < end), end]
    return list(zip(bounds, bounds[1:]))


def number_needs_end(step: Any, cursor_path: str) -> str:
    return (
        f"step={step!r} on the number cursor {cursor_path!r} needs an end_value: a number cursor has "
        "no 'now' to cut the range up to; give end_value (or remove step)."
    )
