"""Slices of a bound run (`step`): a long range cut into pieces, so a run over years of history
commits (and can fail and resume) one piece at a time. Pure: keys in, keys out.
"""

from __future__ import annotations

# How a sliced run uses this module (the asset layer does the calling and committing):
#     bounds = plan_run(run, now_key)            # None: run it whole, as without step
#     for a, b in bounds: bind the cursor (state after the slice before) with window (a, b), load,
#                         commit with the run's cursor_state
# The slices' states are the states an unsliced run would pass through: last_value is always the
# newest value loaded (a slice without rows leaves it as it was; see RunStart._initial_cursor in run_start.py).

from typing import Any

from dagster_incremental.cursor.run import IncrementalRun
from dagster_incremental.cursor.step import number_needs_end
from dagster_incremental.cursor.vocabulary import TEMPORAL_TYPES
from dagster_incremental.errors import IncrementalConfigError


def plan_run(run: IncrementalRun, now_key: int) -> list[tuple[Any, Any]] | None:
    """The slices (keys) of a bound run whose spec has a step; None when it runs whole: no step,
    no start to cut from, or a range within one step.

    A range ends at end_value (or the partition window's end); a stateful run never plans past
    `now_key` (now, as a temporal key), so no empty future slice moves its cursor. The last
    slice is then open-ended in the caller (it ends where the run ends).
    """
    step = run.spec.parsed_step
    if step is None or run.start_key is None or run.cursor_type is None:
        return None
    temporal = run.cursor_type in TEMPORAL_TYPES
    end = run.end_key
    if temporal and (end is None or (not run.is_backfill and end > now_key)):
        end = now_key
    if end is None:
        raise IncrementalConfigError(number_needs_end(step.given, run.cursor_path))
    slices = step.cut(run.start_key, end, run.cursor_type, run.cursor_path)
    return slices if len(slices) > 1 else None
