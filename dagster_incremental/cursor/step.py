"""A `step`: an ISO-8601 duration or a number by which a long range [start, end) is cut into
consecutive half-open slices. Pure: what incremental(...) validates and what the run plans with.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from dagster_incremental.cursor import values as cv
from dagster_incremental.errors import IncrementalConfigError

MAX_SLICES = 10_000  # a plan of more slices is a step chosen far too small


@dataclasses.dataclass(frozen=True)
class Step:
    """A parsed `step`: an ISO-8601 duration (calendar months and years included) or a number
    in lag's units."""

    given: Any
    duration: cv.Duration | None = None  # an ISO duration
    number: float | None = None  # a plain number: seconds / days / native units, as for lag

    def check(self, cursor_type: str, cursor_path: str) -> None:
        """Raise when this step cannot cut a cursor of `cursor_type`."""
        where = f"step={self.given!r} on cursor {cursor_path!r}"
        if cursor_type == "string":
            raise IncrementalConfigError(
                f"{where}: a string cursor cannot be cut into slices; step works for timestamps, dates and numbers."
            )
        problem = cv.duration_problem(self.duration, cursor_type) if self.duration is not None else None
        if problem is not None:
            raise IncrementalConfigError(f"{where}: {problem}.")

    def delta(self, cursor_type: str, cursor_path: str) -> int | float:
        """A fixed-length step in key units of `cursor_type` (what consecutive bounds differ by)."""
        self.check(cursor_type, cursor_path)
        if self.number is not None:
            return cv.lag_delta(self.number, cursor_type)
        if self.duration is None or self.duration.is_calendar:
            raise ValueError(f"step={self.given!r} has no fixed length")  # callers cut it with cut()
        return int(round(self.duration.seconds * 1_000_000))

    def cut(self, start: Any, end: Any, cursor_type: str, cursor_path: str) -> list[tuple[Any, Any]]:
        """[start, end) (keys of `cursor_type`) as consecutive half-open slices of one step each
        (the last may be shorter); a calendar step moves on the calendar from `start`."""
        duration = self.duration
        if duration is not None and duration.is_calendar:
            self.check(cursor_type, cursor_path)
            return plan_slices(start, end, lambda i: duration.shift(start, i))
        return plan_slices(start, end, self.delta(cursor_type, cursor_path))


def parse_step(step: Any) -> Step | None:
    """`step` as given to incremental(): None, a number > 0, or an ISO-8601 duration > 0."""
    if step is None:
        return None
    if isinstance(step, (int, float)) and not isinstance(step, bool):
        if math.isfinite(step) and step > 0:
            return Step(step, number=float(step))
    elif isinstance(step, str):
        duration = cv.parse_duration(step)
        if duration is not None and (duration.months > 0 or duration.seconds > 0):
            return Step(step, duration=duration)
    raise IncrementalConfigError(
        f"step={step!r} is not valid: give an ISO-8601 duration such as 'P1D', 'PT6H' or 'P1M', or a "
        "number > 0 in lag's units (seconds for timestamps, days for dates, native units for numbers)."
    )


def plan_slices(start: Any, end: Any, step: int | float | Callable[[int], Any]) -> list[tuple[Any, Any]]:
    """[start, end) as consecutive half-open slices covering it exactly: the i-th inner bound
    is `start + i * step`, or `step(i)` (rising) for a calendar step; the last ends at `end`."""
    if not end > start:
        return []
    bound = step if callable(step) else (lambda i: start + i * step)
    bounds = [start]
    while True:
        nxt = bound(len(bounds))
        if not nxt < end:
            break
        bounds.append(nxt)
        if len(bounds) > MAX_SLICES:
            raise IncrementalConfigError(
                f"step cuts the range into more than {MAX_SLICES:,} slices: give a larger step."
            )
    bounds.append(end)
    return list(zip(bounds, bounds[1:]))


def number_needs_end(step: Any, cursor_path: str) -> str:
    return (
        f"step={step!r} on the number cursor {cursor_path!r} needs an end_value: a number cursor has "
        "no 'now' to cut the range up to; give end_value (or remove step)."
    )
