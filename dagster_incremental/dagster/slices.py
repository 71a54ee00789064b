"""The slices of a run: its range cut by the cursor's `step`, and what the run says of them.

The run loop (run.py) binds, loads and commits each slice in order with the cursor after it,
so a failure in slice k keeps slices 1..k-1 and the next run starts at slice k. A run without
`step`, or whose range fits in one step, is one slice spanning the run's own window.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dagster_incremental.cursor import values as cv
from dagster_incremental.cursor.slices import plan_run
from dagster_incremental.dagster.partition_counts import RangeCommit, Window
from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.write_spec import WindowReplace, WriteResult

if TYPE_CHECKING:  # pragma: no cover
    from dagster_incremental.dagster.asset_settings import AssetSettings


def sliced_argument(settings: AssetSettings) -> str | None:
    """The incremental argument whose `step` cuts runs into slices (None: no step anywhere)."""
    names = [name for name, spec in settings.cursors.items() if spec.step is not None]
    if len(names) > 1:
        raise IncrementalConfigError(
            f"asset {settings.name!r}: step is set on several incremental arguments ({', '.join(names)}); "
            "slices follow one cursor: keep step on one of them."
        )
    return names[0] if names else None


def slice_windows(runs: Mapping[str, Any], name: str | None, window: Window | None) -> list[Window]:
    """The run's slices as windows of public values. The first and last keep the run's own
    ends (a partition window's, or none: the spec's initial_value / end_value stay in force)."""
    start, end = window if window is not None else (None, None)
    cuts = plan_run(runs[name], now_key=time.time_ns() // 1_000) if name is not None else None
    if name is None or cuts is None:
        return [(start, end)]
    inner = [cv.key_to_public(bound, runs[name].cursor_type) for _, bound in cuts[:-1]]
    return list(zip([start, *inner], [*inner, end]))


def sub_window(replace: WindowReplace | None, window: Window, index: int, count: int) -> WindowReplace | None:
    """The part of the run's window replace that slice `index` of `count` replaces."""
    if replace is None:
        return None
    first, last = index == 1, index == count
    return dataclasses.replace(
        replace,
        start=replace.start if first else window[0], start_open=replace.start_open and first,
        end=replace.end if last else window[1], end_closed=replace.end_closed and last,
    )


@dataclasses.dataclass
class Commits:
    """The commits a run made so far, out of the slices it planned."""

    planned: int
    made: list[RangeCommit] = dataclasses.field(default_factory=list)

    def add(self, commit: RangeCommit, span: str | None, log: Any) -> None:
        """Record a commit; a sliced run logs each, as `slice 3/12 [start, end): 120 rows (360 so far)`."""
        self.made.append(commit)
        if self.planned > 1 and span is not None:
            rows = commit.result.rows_inserted + commit.result.rows_updated
            so_far = sum(c.result.rows_inserted + c.result.rows_updated for c in self.made)
            log.info(f"slice {len(self.made)}/{self.planned} {span}: {rows:,} rows ({so_far:,} so far)")

    def failed(self, log: Any) -> None:
        """Say which slices a failure kept (a run of one slice has nothing to add)."""
        if self.planned > 1:
            done = len(self.made)
            kept = {0: "no slice was committed", 1: "slice 1 is committed"}.get(done, f"slices 1-{done} are committed")
            log.error(
                f"slice {done + 1}/{self.planned} failed: {kept}; the next run continues from the last committed cursor."
            )

    def total(self) -> WriteResult:
        """The last commit's result with the whole run's row figures."""
        results = [commit.result for commit in self.made]
        return dataclasses.replace(
            results[-1],
            rows_inserted=sum(r.rows_inserted for r in results),
            rows_updated=sum(r.rows_updated for r in results),
            rows_deleted=sum(r.rows_deleted for r in results),
        )


def sliced_span(run: Any) -> str:
    """A slice's range of the sliced cursor, as `[start, end)`."""
    return f"[{_shown(run.start_key, run)}, {_shown(run.end_key, run)})"


def _shown(key: Any, run: Any) -> str:
    """A slice bound as the log shows it: the stored form, "..." for an open end."""
    if key is None:
        return "..."
    value = cv.key_to_canonical(key, run.cursor_type)
    return value if isinstance(value, str) else json.dumps(value)
