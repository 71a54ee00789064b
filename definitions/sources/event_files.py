"""Daily JSON-lines event files, `root/dt=YYYY-MM-DD/part-0.jsonl`, that can be rewritten.

Why it exists: a daily-partitioned asset loads one window (one or more days) at a time and
replaces what the table held for it. Files that get rewritten after the fact, with rows
removed, changed and added late (`mutate_day`), are what prove a window re-run drops rows
the source no longer has instead of only overwriting what it read again.

Each file holds only events of its own UTC day; `event_time` is canonical UTC text
(`2024-03-01T10:15:00Z`). Readers take the half-open window `[start, end)` and read only the
day folders that overlap it, with an explicit schema (no inference: a typo in a file is an
error or a null, never a silently different column type).
"""

from __future__ import annotations

import json
import os
import random
import re
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from definitions.sources import TimeLike, iso_utc, iso_utc_ceil, to_utc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "ARROW_SCHEMA",
    "SPARK_SCHEMA_DDL",
    "day_path",
    "mutate_day",
    "read_day_rows",
    "read_events_arrow",
    "read_events_spark",
    "write_event_days",
]

FILE_NAME = "part-0.jsonl"
ARROW_SCHEMA = pa.schema([
    ("event_id", pa.string()),
    ("user_id", pa.int64()),
    ("kind", pa.string()),
    ("value", pa.float64()),
    ("event_time", pa.timestamp("us", tz="UTC")),  # Spark's timestamp: microseconds, an instant
])
SPARK_SCHEMA_DDL = "event_id STRING, user_id BIGINT, kind STRING, value DOUBLE, event_time TIMESTAMP"
_KINDS = ["view", "view", "view", "click", "click", "add_to_cart", "purchase"]
_DAY_DIR = re.compile(r"^dt=(\d{4}-\d{2}-\d{2})$")
_DAY_SECONDS = 86_400


def day_path(root: str | Path, day: date | str) -> Path:
    """Where the file of `day` lives: `root/dt=YYYY-MM-DD/part-0.jsonl`."""
    return Path(root) / f"dt={_as_date(day).isoformat()}" / FILE_NAME


# ---------------------------------------------------------------------------------- writing


def write_event_days(
    root: str | Path,
    start_date: date | str,
    days: int,
    *,
    per_day: int = 100,
    seed: int = 11,
    now: TimeLike | None = None,
) -> list[Path]:
    """Write `days` daily files from `start_date` on (replacing existing ones); returns their paths.

    Each day's rows come from a generator seeded by `(seed, day)`, so a day's file is the same
    whether it is written alone or within a range. `now` drops events at or after it (today's
    file then holds only what "has happened"); days entirely after `now` are not written.
    """
    if days < 0 or per_day < 0:
        raise ValueError(f"write_event_days needs days >= 0 and per_day >= 0, got {days=}, {per_day=}")
    first = _as_date(start_date)
    cutoff = None if now is None else iso_utc_ceil(now)  # whole seconds: ts < now iff ts < ceil(now)
    paths = []
    for i in range(days):
        day = first + timedelta(days=i)
        if cutoff is not None and iso_utc(day) >= cutoff:
            break
        rows = _generate_day(day, per_day, seed)
        if cutoff is not None:
            rows = [r for r in rows if r["event_time"] < cutoff]
        paths.append(_write_rows(root, day, rows))
    return paths


def mutate_day(
    root: str | Path,
    day: date | str,
    *,
    seed: int,
    remove: float = 0.1,
    change: float = 0.1,
    add: int = 5,
    now: TimeLike | None = None,
) -> dict[str, list[str]]:
    """Rewrite one day's file the way upstream corrections do; returns the ids per change kind.

    About `remove` of the rows disappear and `change` of them get a new `kind`/`value` (at least
    one each when the share is above zero: early in the day today's file is short), and `add`
    late-arriving events (new ids, times inside the day and before `now` when given) appear.
    The file is replaced atomically, so a reader sees the old or the new day, never half.
    """
    if not (0 <= remove <= 1 and 0 <= change <= 1) or add < 0:
        raise ValueError(
            f"mutate_day needs 0 <= remove, change <= 1 and add >= 0, got {remove=}, {change=}, {add=}"
        )
    day = _as_date(day)
    rows = read_day_rows(root, day)
    rng = random.Random(f"mutate:{seed}:{day.isoformat()}")
    ids = [r["event_id"] for r in rows]
    removed = set(rng.sample(ids, _share(len(ids), remove)))
    kept = [r for r in rows if r["event_id"] not in removed]
    changed = set(rng.sample([r["event_id"] for r in kept], _share(len(kept), change)))
    for row in kept:
        if row["event_id"] in changed:
            row["kind"] = rng.choice([k for k in sorted(set(_KINDS)) if k != row["kind"]])
            row["value"] = _value(rng, row["kind"])

    day_start = to_utc(day)
    horizon = _DAY_SECONDS
    if now is not None:
        horizon = max(0, min(horizon, int((to_utc(now) - day_start).total_seconds())))
    next_n = 1 + max((int(i.rsplit("_", 1)[1]) for i in ids), default=0)
    added = []
    for n in range(next_n, next_n + (add if horizon > 0 else 0)):
        row = _event(rng, day, n, day_start + timedelta(seconds=rng.randrange(horizon)))
        kept.append(row)
        added.append(row["event_id"])

    _write_rows(root, day, sorted(kept, key=lambda r: (r["event_time"], r["event_id"])))
    return {"removed": sorted(removed), "changed": sorted(changed), "added": added}


def _share(count: int, fraction: float) -> int:
    """About `fraction` of `count` items, at least one of them when both are above zero."""
    return max(1, round(count * fraction)) if count and fraction else 0


def read_day_rows(root: str | Path, day: date | str) -> list[dict]:
    """The rows of one day's file as dicts (what `mutate_day` edits); [] when there is no file."""
    path = day_path(root, day)
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _write_rows(root: str | Path, day: date, rows: list[dict]) -> Path:
    path = day_path(root, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A leading dot: Spark and Arrow readers skip hidden files, so a half-written file is never read.
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    os.replace(tmp, path)
    return path


def _generate_day(day: date, per_day: int, seed: int) -> list[dict]:
    rng = random.Random(f"events:{seed}:{day.isoformat()}")
    start = to_utc(day)
    times = sorted(rng.randrange(_DAY_SECONDS) for _ in range(per_day))
    return [_event(rng, day, n, start + timedelta(seconds=t)) for n, t in enumerate(times, start=1)]


def _event(rng: random.Random, day: date, n: int, when: datetime) -> dict:
    kind = rng.choice(_KINDS)
    return {
        "event_id": f"ev_{day:%Y%m%d}_{n:06d}",  # stable: the same day and number, the same id
        "user_id": rng.randrange(1, 1001),
        "kind": kind,
        "value": _value(rng, kind),
        "event_time": iso_utc(when),
    }


def _value(rng: random.Random, kind: str) -> float:
    """Purchases carry an amount, the rest a dwell time in seconds."""
    if kind == "purchase":
        return round(rng.lognormvariate(3.5, 0.8), 2)
    return round(rng.expovariate(1 / 20), 3)


# ---------------------------------------------------------------------------------- reading


def _window_files(root: str | Path, start: TimeLike, end: TimeLike) -> tuple[list[Path], datetime, datetime]:
    """The day files that can hold events of `[start, end)` (each file holds only its own day)."""
    lo, hi = to_utc(start), to_utc(end)
    if hi < lo:
        raise ValueError(f"the window end {iso_utc(hi)} is before its start {iso_utc(lo)}")
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(
            f"no event files under {root}: write them with write_event_days(root, ...) "
            f"or `python -m definitions.simulate init`"
        )
    files = []
    for child in sorted(root.iterdir()):
        match = _DAY_DIR.match(child.name)
        if not match:
            continue
        day_start = to_utc(date.fromisoformat(match.group(1)))
        if day_start < hi and day_start + timedelta(days=1) > lo and (child / FILE_NAME).is_file():
            files.append(child / FILE_NAME)
    return files, lo, hi


def read_events_arrow(root: str | Path, start: TimeLike, end: TimeLike) -> pa.Table:
    """Events with `start <= event_time < end` as a pyarrow Table (ARROW_SCHEMA), for non-Spark use."""
    files, lo, hi = _window_files(root, start, end)
    options = pa_json.ParseOptions(explicit_schema=ARROW_SCHEMA, unexpected_field_behavior="ignore")
    # pyarrow rejects an empty file (today's, just after midnight): it simply holds no rows.
    tables = [pa_json.read_json(f, parse_options=options) for f in files if f.stat().st_size]
    table = pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()
    ts_type = ARROW_SCHEMA.field("event_time").type
    times = table["event_time"]
    mask = pc.and_(pc.greater_equal(times, pa.scalar(lo, ts_type)), pc.less(times, pa.scalar(hi, ts_type)))
    return table.filter(mask).sort_by([("event_time", "ascending"), ("event_id", "ascending")])


def read_events_spark(spark: SparkSession, root: str | Path, start: TimeLike, end: TimeLike) -> DataFrame:
    """Events with `start <= event_time < end` as a pyspark DataFrame (explicit schema, no inference).

    Only the overlapping day folders are listed; the time filter is a Spark expression.
    """
    from pyspark.sql import functions as F

    files, lo, hi = _window_files(root, start, end)
    if not files:
        return spark.createDataFrame([], SPARK_SCHEMA_DDL)
    df = (
        spark.read.schema(SPARK_SCHEMA_DDL)
        .option("mode", "FAILFAST")  # a malformed line is an error, not a row of nulls
        .option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss[.SSSSSS]XXX")
        .json([str(f) for f in files])
    )
    # Aware datetimes become instants in F.lit, whatever the session time zone.
    return df.where((F.col("event_time") >= F.lit(lo)) & (F.col("event_time") < F.lit(hi)))


def _as_date(value: date | str) -> date:
    if isinstance(value, datetime):
        return to_utc(value).date()
    if isinstance(value, date):
        return value
    return to_utc(value).date()
