"""What a run tells a person while it runs, one `context.log.info` line per step: the run
started, Spark starting, the rows loaded, each commit (and each slice's, with the rows so far,
from slices.py). Each step is said once, so a run says a handful of lines, not one per page.

The lines go to Dagster's event log, so they show in the UI's run view and on the terminal of
`python -m definitions`.
"""

from __future__ import annotations

from typing import Any


def say(log: Any, asset: str, text: str) -> None:
    """One progress line of `asset`'s run, as `<asset>: <text>`."""
    log.info(f"{asset}: {text}")


def rows_text(result: Any) -> str:
    """A commit's row figures, as `+inserted ~updated -deleted`."""
    return f"+{result.rows_inserted:,} ~{result.rows_updated:,} -{result.rows_deleted:,}"
