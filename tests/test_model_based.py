"""Nothing lost, nothing corrupted: random operation sequences on one asset against a model.

The claim: for every disposition (append, replace, delete-insert, upsert, scd2 with
`merge_key`) and for a daily-partitioned delete-insert asset, after ANY sequence of
- source changes (new rows, changed rows, late rows inside the lag or behind the cursor,
  hard-delete tombstones; a new field appearing),
- incremental runs, window backfills (`end_value`, or a partition range), full refreshes,
- sliced runs (`step`) whose source fails in a given slice,
- a dropped table, a rolled-back snapshot, table maintenance (`rewrite_data_files`,
  `expire_snapshots` keeping the newest cursor commit; on Delta: a deleted folder, `RESTORE`,
  `OPTIMIZE` and `VACUUM`),
the table read with Spark equals a plain-Python model of it, the cursor (the newest incremental
materialization's `dagster_incremental/state` and the one committed in the table's current
snapshot lineage) equals the model's, and each run's metadata counts (`rows_inserted/updated/
deleted`, `dagster/row_count`; per partition for partitioned runs) equal the model's.

The model (`TableModel`, `DailyModel`) is the specification: plain dicts and lists, no library
code. The state machines only drive the real asset and compare. scd2 runs with
`merge_key = primary_key = "id"` (incremental scd2: only keys in the batch are retired; a
tombstone retires) and tombstones for deletes. The append source is an event log (new ids only);
append has no key to merge on, so a row a backfill loaded ahead of the cursor is appended again by
the next incremental run (the model says so; at the cursor value, boundary dedup skips only what
incremental runs loaded there).

Profiles: DI_HYPOTHESIS_PROFILE=ci (default, about two minutes: one fixed sequence using every
rule for upsert, scd2 and the daily asset, and one short derandomized random sequence per asset
kind, not shrunk) or large (the fixed sequence for every disposition, and 15 random sequences of
25 steps per asset kind, shrunk to a minimal failing one:
`DI_HYPOTHESIS_PROFILE=large python -m pytest tests/test_model_based.py -p no:cacheprovider`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import dagster as dg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from attack_support import DISPOSITIONS, materialize
from catalogs import HADOOP_ONLY, LOCAL_LAKE_AND_DELTA
from instances import fresh_instance
from dagster_incremental.spark.delta.log import DeltaLog
from dagster_incremental.spark.table_ref import TableRef

from dagster_incremental import Incremental, incremental, incremental_asset
from dagster_incremental.dagster import partition_scope
from dagster_incremental.spark.write_spec import SCOPE_PROPERTY, STATE_PROPERTY

pytestmark = pytest.mark.spark

PROFILE = os.environ.get("DI_HYPOTHESIS_PROFILE", "ci")
if PROFILE not in ("ci", "large"):
    raise RuntimeError(f"DI_HYPOTHESIS_PROFILE must be ci or large, got {PROFILE!r}")
RUNS = settings(
    max_examples=1 if PROFILE == "ci" else 15,
    stateful_step_count=6 if PROFILE == "ci" else 25,
    derandomize=PROFILE == "ci",
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    report_multiple_bugs=False,
    phases=[p for p in Phase if p != Phase.shrink or PROFILE == "large"],  # shrinking a Spark sequence takes minutes
)

LAG = 2  # hours: merge and replace assets re-read this much behind the cursor
STEP = 36  # hours: a sliced run's slices
CLOCK_LIMIT = 80  # hours after BASE: data stays well before now (a sliced run has >= 2 slices)
Row = tuple  # (id, amount, updated hour, note)


def hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


BASE = hour_floor(datetime.now(timezone.utc)) - timedelta(days=6)  # cursor value 0 (initial_value)


def at(hours: int) -> datetime:
    return BASE + timedelta(hours=hours)


def hours_of(value: Any, base: datetime = BASE, unit: int = 3600) -> int | None:
    """A stored cursor value (ISO-8601 text) as units (hours) after `base`."""
    if value is None:
        return None
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return round((moment - base).total_seconds() / unit)


# == the model: what the table, the cursor and the counts must be ===================================


@dataclass
class Counts:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


def net_change(removed: list[Row], added: list[Row]) -> Counts:
    """A commit's net change by key: identical rows cancel, a removed+added key is an update."""
    gone = {r[0]: r for r in removed}
    new = {r[0]: r for r in added}
    return Counts(
        inserted=sum(1 for k in new if k not in gone),
        updated=sum(1 for k in new if k in gone and new[k] != gone[k]),
        deleted=sum(1 for k in gone if k not in new),
    )


@dataclass
class TableModel:
    """One unpartitioned asset: its source, its table and its two cursor copies, in hours."""

    disposition: str
    source: dict[int, dict] = field(default_factory=dict)  # id -> the source's current row
    table: list[Row] | None = None  # None: no table; scd2: the active versions
    retired: list[Row] = field(default_factory=list)  # scd2's retired versions
    committed: int | None = None  # the cursor in the table's snapshot lineage
    boundary: set[int] = field(default_factory=set)  # append: ids loaded at the committed value
    reported: int | None = None  # the cursor of Dagster's newest incremental materialization
    reported_rows: int = 0  # the table's rows then (none: a table lost since loses no row)
    clock: int = 1
    next_id: int = 0
    with_note: bool = False

    @property
    def lag(self) -> int | None:
        return None if self.disposition == "append" else LAG

    # -- the source --------------------------------------------------------------------------------

    def _row(self, key: int, amount: int, updated: int, deleted: bool = False) -> dict:
        row: dict[str, Any] = {"id": key, "amount": amount, "updated": max(0, updated), "deleted": deleted}
        if self.with_note:
            row["note"] = f"n{amount}"
        return row

    def add_rows(self, amounts: list[int], back: int = 0) -> None:
        """New ids; `back` > 0: late rows, their cursor `back` hours behind the clock."""
        self.clock = min(CLOCK_LIMIT, self.clock + (0 if back else 1))
        for amount in amounts:
            self.source[self.next_id] = self._row(self.next_id, amount, self.clock - back)
            self.next_id += 1

    def live_keys(self) -> list[int]:
        return sorted(k for k, r in self.source.items() if not r["deleted"])

    def change(self, key: int, amount: int, back: int = 0) -> None:
        self.clock = min(CLOCK_LIMIT, self.clock + (0 if back else 1))
        self.source[key] = self._row(key, amount, self.clock - back)

    def delete(self, key: int) -> None:
        """merge/scd2: a tombstone with a newer cursor; replace: the row disappears."""
        self.clock = min(CLOCK_LIMIT, self.clock + 1)
        if self.disposition == "replace":
            del self.source[key]
        else:
            self.source[key] = {**self.source[key], "updated": self.clock, "deleted": True}

    # -- what a run keeps ------------------------------------------------------------------------

    @staticmethod
    def as_row(r: dict) -> Row:
        return (r["id"], r["amount"], r["updated"], r.get("note"))

    def start(self) -> int:
        if self.committed is None:
            return 0
        return max(0, self.committed - (self.lag or 0))

    def kept(self, low: int | None = None, high: int | None = None) -> list[dict]:
        """The source rows an incremental run from the committed cursor keeps, in [low, high)."""
        low = self.start() if low is None else low
        rows = []
        for r in self.source.values():
            if r["updated"] < low or (high is not None and r["updated"] >= high):
                continue
            if self.lag is None and r["updated"] == self.committed and r["id"] in self.boundary:
                continue  # boundary dedup: loaded at the cursor value by an incremental run
            rows.append(r)
        return rows

    def must_refuse(self) -> bool:
        """A run loaded rows up to a cursor, but the table holds no cursor (dropped, or
        recreated by a backfill): continuing from Dagster's cursor would lose the rows. When
        Dagster's newest materialization left the table empty, there is nothing to lose."""
        return self.committed is None and self.reported is not None and self.reported_rows > 0

    # -- what a commit does -----------------------------------------------------------------------

    def row_count(self) -> int:
        return len(self.table or []) + len(self.retired)

    def write(self, batch: list[dict]) -> Counts:
        """Apply the disposition to the rows one run (or one slice) kept."""
        old = list(self.table or [])
        live = [self.as_row(r) for r in batch if not r["deleted"]]
        dead = {r["id"] for r in batch if r["deleted"]}
        if self.table is None and not batch:
            return Counts()
        if self.disposition == "append":
            self.table = old + live
            return Counts(inserted=len(live))
        if self.disposition == "replace":
            self.table = live
            return Counts(inserted=len(live), deleted=len(old))
        by_key = {r[0]: r for r in old}
        if self.disposition == "scd2":
            counts = Counts()
            for r in live:
                if by_key.get(r[0]) == r:
                    continue
                if r[0] in by_key:
                    self.retired.append(by_key.pop(r[0]))
                    counts.updated += 1
                by_key[r[0]] = r
                counts.inserted += 1
            for key in dead & set(by_key):
                self.retired.append(by_key.pop(key))
                counts.updated += 1
            self.table = list(by_key.values())
            return counts
        counts = Counts(
            inserted=sum(1 for r in live if r[0] not in by_key),
            updated=sum(1 for r in live if r[0] in by_key),
            deleted=len(dead & set(by_key)),
        )
        by_key.update({r[0]: r for r in live})
        for key in dead:
            by_key.pop(key, None)
        self.table = list(by_key.values())
        return counts

    def advance(self, batch: list[dict]) -> int:
        """The cursor after a run: the newest value loaded, never moving back (initial_value
        before any row, as in dlt); committed with the rows, if there is a table to hold it."""
        cursor = max([r["updated"] for r in batch] + [0 if self.committed is None else self.committed])
        if self.table is not None:
            at_cursor = {r["id"] for r in batch if r["updated"] == cursor}
            self.boundary = self.boundary | at_cursor if cursor == self.committed else at_cursor
            self.committed = cursor
        return cursor

    # -- runs --------------------------------------------------------------------------------------

    def incremental(self) -> Counts | None:
        """An incremental run: None means it must fail and change nothing."""
        if self.must_refuse():
            return None
        batch = self.kept()
        counts = self.write(batch)
        self.reported = self.advance(batch)
        self.reported_rows = self.row_count()
        return counts

    def sliced(self, fail_at: int | None, now_hours: float) -> Counts | None:
        """A run cut into STEP-hour slices from its start; the source raises in call `fail_at`.
        Without a failure it equals an unsliced run; with one, slices before it stay committed."""
        if self.must_refuse():
            return None
        if fail_at is None:
            return self.incremental()
        start = self.start()
        planned = math.ceil((now_hours - start) / STEP)
        assert planned >= fail_at, "the model's data must leave at least fail_at slices"
        for k in range(fail_at - 1):
            low = start + k * STEP
            batch = self.kept(low, low + STEP)
            if self.disposition == "replace" and k > 0:
                self.table = (self.table or []) + [self.as_row(r) for r in batch]  # later slices add
            else:
                self.write(batch)  # replace: the first slice rebuilds the table
            self.advance(batch)
        return None

    def backfill(self, low: int, high: int) -> Counts:
        """A stateless window [low, high): the window's rows replaced (scd2: merged); no cursor."""
        batch = [r for r in self.source.values() if low <= r["updated"] < high]
        if self.disposition == "scd2":
            return self.write(batch)
        if self.table is None and not batch:
            return Counts()
        old = list(self.table or [])
        keys = {r["id"] for r in batch} if self.disposition in ("upsert", "delete-insert") else set()
        removed = [r for r in old if low <= r[2] < high or r[0] in keys]
        added = [self.as_row(r) for r in batch if not r["deleted"]]
        self.table = [r for r in old if r not in removed] + added
        return net_change(removed, added)

    def full_refresh(self) -> Counts:
        """Exactly the table a first run gives on an empty table; the cursor from initial_value."""
        previous = self.row_count()
        existed = self.table is not None
        self.dropped()
        batch = self.kept(0)
        self.write(batch)
        if existed and self.table is None:
            self.table = []
        self.reported = self.advance(batch)
        self.reported_rows = self.row_count()
        return Counts(inserted=len(self.table or []), deleted=previous)

    def dropped(self) -> None:
        self.table, self.retired, self.committed, self.boundary = None, [], None, set()

    def saved(self) -> tuple:
        return copy.deepcopy((self.table, self.retired, self.committed, self.boundary))

    def restore(self, saved: tuple) -> None:
        self.table, self.retired, self.committed, self.boundary = copy.deepcopy(saved)

    def expected_table(self) -> tuple[list[Row], list[Row]] | None:
        if self.table is None:
            return None
        return sorted(self.table, key=repr), sorted(self.retired, key=repr)


DAYS = 4  # daily partitions: three closed days and today (the open window)
LAG_MINUTES = 2
DAY0 = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=DAYS - 1)
TODAY = DAYS - 1
DAY = 1440  # minutes


@dataclass
class DailyModel:
    """A daily-partitioned delete-insert asset; cursor values are minutes after DAY0, each row
    stays in its day; only today's window keeps a cursor."""

    source: dict[int, dict] = field(default_factory=dict)
    table: list[Row] | None = None
    committed: int | None = None  # today's cursor in the table's snapshot lineage
    reported: int | None = None  # today's cursor of Dagster's newest incremental materialization
    reported_rows: int = 0  # the table's rows when Dagster's cursor was reported (0: resuming it loses nothing)
    clocks: list[int] = field(default_factory=lambda: [1] * DAYS)  # minute within each day
    next_id: int = 0

    def tick(self, day: int, back: int = 0) -> int:
        self.clocks[day] = min(59, self.clocks[day] + (0 if back else 1))
        return day * DAY + max(0, self.clocks[day] - back)

    def add_row(self, day: int, amount: int, back: int = 0) -> None:
        self.source[self.next_id] = {"id": self.next_id, "amount": amount, "updated": self.tick(day, back), "deleted": False}
        self.next_id += 1

    def live_keys(self) -> list[int]:
        return sorted(k for k, r in self.source.items() if not r["deleted"])

    def change(self, key: int, amount: int, back: int = 0, deleted: bool = False) -> None:
        day = self.source[key]["updated"] // DAY
        self.source[key] = {**self.source[key], "amount": amount, "updated": self.tick(day, back), "deleted": deleted}

    def rows_in(self, low: int, high: int) -> list[dict]:
        return [r for r in self.source.values() if low <= r["updated"] < high]

    def replace_window(self, first: int, last: int) -> dict[int, Counts]:
        """Days first..last replaced by the source's rows (no tombstones); each day's net change."""
        batch = self.rows_in(first * DAY, (last + 1) * DAY)
        if self.table is None and not batch:
            return {d: Counts() for d in range(first, last + 1)}
        old = list(self.table or [])
        inside = [r for r in old if first <= r[2] // DAY <= last]
        added = [TableModel.as_row(r) for r in batch if not r["deleted"]]
        self.table = [r for r in old if r not in inside] + added
        return {d: net_change([r for r in inside if r[2] // DAY == d], [r for r in added if r[2] // DAY == d])
                for d in range(first, last + 1)}

    def open_run(self) -> Counts:
        """Today's window: continue from today's committed cursor (lag behind it), or from
        Dagster's when the run that made it saw an empty table (resuming loses nothing), or,
        with neither, reload the whole window."""
        resumed = self.committed
        if resumed is None and self.reported is not None and self.reported_rows == 0:
            resumed = self.reported
        if resumed is None:
            counts = self.replace_window(TODAY, TODAY)[TODAY]
            batch = self.rows_in(TODAY * DAY, DAYS * DAY)
        else:
            batch = self.rows_in(max(TODAY * DAY, resumed - LAG_MINUTES), DAYS * DAY)
            by_key = {r[0]: r for r in self.table or []}
            live = [TableModel.as_row(r) for r in batch if not r["deleted"]]
            dead = {r["id"] for r in batch if r["deleted"]}
            counts = Counts(inserted=sum(1 for r in live if r[0] not in by_key),
                            updated=sum(1 for r in live if r[0] in by_key), deleted=len(dead & set(by_key)))
            by_key.update({r[0]: r for r in live})
            if self.table is not None or batch:  # no rows and no table: nothing is created
                self.table = [r for k, r in by_key.items() if k not in dead]
        floor = TODAY * DAY if resumed is None else resumed
        cursor = max([r["updated"] for r in batch] + [floor])
        if self.table is not None:
            self.committed = cursor
        self.reported, self.reported_rows = cursor, len(self.table or [])
        return counts

    def dropped(self) -> None:
        self.table, self.committed = None, None

    def saved(self) -> tuple:
        return copy.deepcopy((self.table, self.committed))

    def restore(self, saved: tuple) -> None:
        self.table, self.committed = copy.deepcopy(saved)

    def expected_table(self) -> tuple[list[Row], list[Row]] | None:
        return None if self.table is None else (sorted(self.table, key=repr), [])


# == reading what a user sees ======================================================================


def exists(spark, table: TableRef) -> bool:
    if table.location is not None:  # a Delta table: its folder holds a commit log
        return DeltaLog(table.location).current_version() is not None
    return bool(spark.catalog.tableExists(table.sql))


def read_table(spark, table: TableRef, scd2: bool, base: datetime = BASE, unit: int = 3600) -> tuple[list[Row], list[Row]] | None:
    """(current rows, retired scd2 versions) as (id, amount, updated, note), `updated` in units
    after `base`; None: no table."""
    if not exists(spark, table):
        return None
    frame = spark.table(table.sql)
    if scd2:
        missing = {"_valid_from", "_valid_to", "_row_hash"} - set(frame.columns)
        assert not missing, f"the scd2 table lost its columns {sorted(missing)}"
    note = "note" if "note" in frame.columns else "CAST(NULL AS STRING) AS note"
    updated = f"CAST((CAST(updated AS BIGINT) - {int(base.timestamp())}) DIV {unit} AS BIGINT) AS updated"
    active = "_valid_to IS NULL" if scd2 else "true"
    rows = frame.selectExpr("id", "amount", updated, note, f"{active} AS active").collect()
    current = sorted(((r.id, r.amount, r.updated, r.note) for r in rows if r.active), key=repr)
    retired = sorted(((r.id, r.amount, r.updated, r.note) for r in rows if not r.active), key=repr)
    return current, retired


def lineage(spark, table: TableRef) -> list[tuple[Any, dict]]:
    """The table's current snapshot and its ancestors, newest first: (snapshot id, summary); on
    Delta (version, commit properties), a RESTORE continuing at the version it restored."""
    if not exists(spark, table):
        return []
    if table.location is not None:
        log, out = DeltaLog(table.location), []
        version = log.current_version()
        while version is not None and version >= 0 and (commit := log.commit(version)) is not None:
            out.append((version, commit.properties))
            version = int(commit.parameters["version"]) if commit.operation == "RESTORE" else version - 1
        return out
    snaps = {r.snapshot_id: r for r in spark.sql(f"SELECT snapshot_id, parent_id, summary FROM {table.sql}.snapshots").collect()}
    current = spark.sql(f"SELECT snapshot_id FROM {table.sql}.history ORDER BY made_current_at DESC LIMIT 1").collect()
    out, snap = [], current[0].snapshot_id if current else None
    while snap in snaps:
        out.append((snap, dict(snaps[snap].summary or {})))
        snap = snaps[snap].parent_id
    return out


def committed_cursor(spark, table: TableRef, scope: str | None = None) -> Any:
    """last_value of the newest snapshot in the current lineage carrying this scope's cursor."""
    for _, summary in lineage(spark, table):
        if STATE_PROPERTY in summary and summary.get(SCOPE_PROPERTY) == scope:
            return json.loads(summary[STATE_PROPERTY]).get("last_value")
    return None


def reported_cursor(instance, name: str, partition: str | None = None) -> tuple[bool, Any]:
    """(found, last_value) of the newest incremental materialization (of `partition`)."""
    flt = dg.AssetRecordsFilter(asset_key=dg.AssetKey(name), asset_partitions=[partition] if partition else None)
    for record in instance.fetch_materializations(flt, limit=100).records:
        meta = record.asset_materialization.metadata
        if meta.get("dagster_incremental/mode") and meta["dagster_incremental/mode"].value == "backfill":
            continue
        state = meta["dagster_incremental/state"].value
        return True, (json.loads(state) if isinstance(state, str) else state).get("last_value")
    return False, None


def run_counts(result: dg.ExecuteInProcessResult, name: str, partition: str | None = None) -> tuple[Any, ...]:
    mats = [m for m in result.asset_materializations_for_node(name) if m.partition == partition]
    assert len(mats) == 1, f"expected one materialization of {name} {partition or ''}, got {len(mats)}"
    meta = {k: v.value for k, v in mats[0].metadata.items()}
    return (meta["dagster_incremental/rows_inserted"], meta["dagster_incremental/rows_updated"],
            meta["dagster_incremental/rows_deleted"], meta["dagster/row_count"])


def failure(result: dg.ExecuteInProcessResult) -> str:
    """The failed step's message and its causes ("" for a successful run)."""
    if result.success:
        return ""
    error, parts = result.get_step_failure_events()[0].step_failure_data.error, []
    while error is not None:
        parts.append(error.message.strip()[:2000])
        error = error.cause
    return "\n".join(parts)


# == the machine: drives the real asset, asks the model, compares =================================


@pytest.fixture(scope="module")
def env(spark, catalog, tmp_path_factory):
    """The machine's session, instance, IO manager, config.toml and namespace on `catalog`."""
    namespace = "mb_" + uuid.uuid4().hex[:8]
    config = tmp_path_factory.mktemp("mb") / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    with fresh_instance() as instance:
        yield spark, instance, catalog.io_manager(namespace), str(config), namespace


# The fixed sequences (every rule: each commit path) run on the local Hadoop catalog, the REST
# catalog over S3 and Delta tables; the random ones on the Hadoop catalog and Delta (RANDOM).


class TableMachine(RuleBasedStateMachine):
    """Plumbing shared by both machines: one asset's table, and what is done to it outside runs."""

    ENV: Any = None
    model: Any

    def __init__(self) -> None:
        super().__init__()
        self.spark, self.instance, self.io, self.config, self.namespace = self.ENV
        self.name = "mb_" + uuid.uuid4().hex[:10]
        self.catalog = self.io.catalog
        self.table = self.io.table_name(dg.AssetKey(self.name))
        self.snapshots: dict[int, tuple] = {}  # snapshot id -> the model's table and cursor then

    def remember(self) -> None:
        """The model's table and cursor at the table's current snapshot (for rollbacks)."""
        snaps = lineage(self.spark, self.table)
        if snaps:
            self.snapshots[snaps[0][0]] = self.model.saved()

    @precondition(lambda self: self.model.table is not None)
    @rule()
    def drop_table(self):
        if self.table.location is not None:  # a Delta table is its folder
            shutil.rmtree(self.table.location)
        else:
            self.spark.sql(f"DROP TABLE {self.table.sql}")
        self.model.dropped()
        self.snapshots.clear()

    @precondition(lambda self: self.model.table is not None)
    @rule(pick=st.integers(0, 99))
    def rollback(self, pick):
        ancestors = [s for s, _ in lineage(self.spark, self.table)[1:] if s in self.snapshots]
        if not ancestors:
            return
        target = ancestors[pick % len(ancestors)]
        if self.table.location is not None:
            self.spark.sql(f"RESTORE TABLE {self.table.sql} TO VERSION AS OF {target}")
        else:
            self.spark.sql(f"CALL {self.catalog}.system.rollback_to_snapshot('{self.namespace}.{self.name}', {target})")
        self.model.restore(self.snapshots[target])

    @precondition(lambda self: self.model.table is not None)
    @rule()
    def maintenance(self):
        """Compact the data files, then expire every snapshot older than the newest cursor commit
        (Delta: OPTIMIZE, then VACUUM of every file the current version does not read)."""
        if self.table.location is not None:
            self.spark.sql(f"OPTIMIZE {self.table.sql}")
            self.spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
            try:
                self.spark.sql(f"VACUUM {self.table.sql} RETAIN 0 HOURS")
            finally:
                self.spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
            self.snapshots.clear()  # no older version has its files any more
            self.remember()
            return
        ident = f"{self.namespace}.{self.name}"
        self.spark.sql(f"CALL {self.catalog}.system.rewrite_data_files(table => '{ident}', options => map('min-input-files', '1'))")
        snaps = lineage(self.spark, self.table)
        keep = next((i + 1 for i, (_, s) in enumerate(snaps) if STATE_PROPERTY in s), len(snaps))
        now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        self.spark.sql(
            f"CALL {self.catalog}.system.expire_snapshots(table => '{ident}', older_than => TIMESTAMP '{now}', retain_last => {keep})"
        )
        self.remember()


class AssetMachine(TableMachine):
    """One unpartitioned asset of `DISPOSITION` (set by the test) and its model."""

    DISPOSITION = "upsert"

    def __init__(self) -> None:
        super().__init__()
        self.model = TableModel(self.DISPOSITION)

    # -- the real asset ----------------------------------------------------------------------------

    def asset(self, step: str | None = None, fail_at: int | None = None):
        lag = self.model.lag * 3600 if self.model.lag else None
        default = incremental("updated", initial_value=BASE.isoformat(), lag=lag, step=step)
        source, calls = self.model.source, []
        merge = self.DISPOSITION not in ("append", "replace")

        def body(context: dg.AssetExecutionContext, updated: Incremental = default):
            calls.append(updated.start_value)
            if fail_at is not None and len(calls) == fail_at:
                raise RuntimeError(f"source down in call {fail_at}")
            rows = []
            for r in source.values():
                row = {**r, "updated": at(r["updated"])}
                if not merge:
                    row.pop("deleted")
                rows.append(row)
            return rows

        body.__name__ = self.name
        return incremental_asset(
            name=self.name, primary_key="id", merge_key="id" if self.DISPOSITION == "scd2" else None,
            write_disposition=DISPOSITIONS[self.DISPOSITION], config_path=self.config,
            columns={"deleted": {"hard_delete": True}} if merge else None,
        )(body)

    def materialize(self, ops: dict | None = None, **asset_kwargs) -> dg.ExecuteInProcessResult:
        run_config = {"ops": {self.name: {"config": ops}}} if ops else None
        return materialize(self.asset(**asset_kwargs), self.instance, self.io, run_config=run_config)

    def expect(self, result: dg.ExecuteInProcessResult, counts: Counts | None) -> None:
        if counts is None:
            assert not result.success, "the run should have failed and written nothing"
            return
        assert result.success, failure(result)
        got = run_counts(result, self.name)
        want = (counts.inserted, counts.updated, counts.deleted, self.model.row_count())
        assert got == want, f"metadata (inserted, updated, deleted, row_count) {got}, model {want}"
        self.remember()

    # -- rules: the source changes -------------------------------------------------------------------

    @rule(amounts=st.lists(st.integers(0, 99), min_size=1, max_size=3))
    def new_rows(self, amounts):
        self.model.add_rows(amounts)

    @precondition(lambda self: self.DISPOSITION != "append" and self.model.live_keys())
    @rule(pick=st.integers(0, 99), amount=st.integers(0, 99))
    def changed_row(self, pick, amount):
        keys = self.model.live_keys()
        self.model.change(keys[pick % len(keys)], amount)

    @rule(back=st.integers(1, LAG + 2), pick=st.integers(0, 99), amount=st.integers(0, 99))
    def late_row(self, back, pick, amount):
        """A row whose cursor is `back` hours behind the clock (inside the lag, or behind it)."""
        keys = self.model.live_keys()
        if self.DISPOSITION == "append" or not keys or pick % 2:
            self.model.add_rows([amount], back=back)
        else:
            self.model.change(keys[pick % len(keys)], amount, back=back)

    @precondition(lambda self: self.DISPOSITION != "append" and self.model.live_keys())
    @rule(pick=st.integers(0, 99))
    def deleted_row(self, pick):
        keys = self.model.live_keys()
        self.model.delete(keys[pick % len(keys)])

    @precondition(lambda self: not self.model.with_note)
    @rule()
    def added_column(self):
        self.model.with_note = True

    # -- rules: runs ---------------------------------------------------------------------------------

    @rule()
    def incremental_run(self):
        result = self.materialize()
        self.expect(result, self.model.incremental())

    @rule(low=st.integers(0, CLOCK_LIMIT), length=st.integers(1, 12))
    def window_backfill(self, low, length):
        result = self.materialize({"initial_value": at(low).isoformat(), "end_value": at(low + length).isoformat()})
        self.expect(result, self.model.backfill(low, low + length))

    @rule()
    def full_refresh(self):
        result = self.materialize({"full_refresh": True})
        self.expect(result, self.model.full_refresh())

    @rule(fail_at=st.sampled_from([None, 1, 2]))
    def sliced_run(self, fail_at):
        now_hours = (datetime.now(timezone.utc) - BASE).total_seconds() / 3600
        refused = self.model.must_refuse()
        result = self.materialize(step=f"PT{STEP}H", fail_at=fail_at)
        counts = self.model.sliced(fail_at, now_hours)
        if fail_at is not None and not refused:
            assert f"source down in call {fail_at}" in failure(result), failure(result) or "the run succeeded"
            self.remember()
            return
        self.expect(result, counts)

    # -- after every step ----------------------------------------------------------------------------

    @invariant()
    def table_and_cursor_equal_the_model(self):
        got = read_table(self.spark, self.table, scd2=self.DISPOSITION == "scd2")
        assert got == self.model.expected_table(), f"table {got}, model {self.model.expected_table()}"
        assert hours_of(committed_cursor(self.spark, self.table)) == self.model.committed, "table's cursor"
        found, last = reported_cursor(self.instance, self.name)
        if found or self.model.reported is not None:
            assert hours_of(last) == self.model.reported, "Dagster's cursor"


DISPOSITION_NAMES = ["append", "replace", "delete-insert", "upsert", "scd2"]

# Always run (on top of the random sequences): every rule once, in an order where each matters.
EVERY_RULE = [
    ("new_rows", {"amounts": [1, 2, 3]}),
    ("incremental_run", {}),
    ("changed_row", {"pick": 0, "amount": 50}),
    ("late_row", {"back": 1, "pick": 1, "amount": 4}),  # a new row inside the lag
    ("late_row", {"back": LAG + 2, "pick": 2, "amount": 5}),  # a changed row behind it
    ("deleted_row", {"pick": 1}),
    ("sliced_run", {"fail_at": 2}),
    ("added_column", {}),
    ("new_rows", {"amounts": [7]}),
    ("incremental_run", {}),
    ("window_backfill", {"low": 1, "length": 3}),
    ("rollback", {"pick": 0}),
    ("incremental_run", {}),
    ("maintenance", {}),
    ("changed_row", {"pick": 2, "amount": 60}),
    ("incremental_run", {}),
    ("full_refresh", {}),
    ("drop_table", {}),
    ("new_rows", {"amounts": [9]}),
    ("incremental_run", {}),  # refused: the table is gone
    ("full_refresh", {}),
    ("new_rows", {"amounts": [10]}),
    ("sliced_run", {"fail_at": None}),
    ("incremental_run", {}),
]


def drive(machine: Any, steps: list[tuple[str, dict]]) -> None:
    """Run `steps` (rule name, arguments) on `machine`, checking the model after each."""
    done = []
    try:
        machine.table_and_cursor_equal_the_model()
        for name, kwargs in steps:
            rule_method = getattr(machine, name)
            if not all(p(machine) for p in getattr(rule_method, "hypothesis_stateful_rule").preconditions):
                continue  # e.g. no changed rows for append's event log
            done.append(f"{name}({kwargs})")
            rule_method(**kwargs)
            machine.table_and_cursor_equal_the_model()
    except AssertionError as exc:
        raise AssertionError(f"after {' -> '.join(done)}: {exc}") from exc
    finally:
        machine.teardown()


# CI's time budget: the two merge dispositions with the most state (tombstones, history) on the
# Iceberg catalogs, upsert on Delta (scd2 on Delta passed by hand: six minutes here), every
# disposition on each in the large profile.
FIXED = ([(c, d) for c in ("hadoop", "rest", "delta") for d in DISPOSITION_NAMES] if PROFILE == "large"
         else [(c, d) for c in ("hadoop", "rest") for d in ("upsert", "scd2")] + [("delta", "upsert")])


@pytest.mark.parametrize("catalog, disposition", FIXED, indirect=["catalog"], ids=[f"{d}-{c}" for c, d in FIXED])
def test_every_rule_in_one_sequence(env, disposition):
    drive(type("M", (AssetMachine,), {"DISPOSITION": disposition, "ENV": env})(), EVERY_RULE)


# The random sequences: every disposition on the Hadoop catalog; on Delta upsert in CI (its
# in-process and Spark commits, RESTORE, VACUUM, OPTIMIZE), every disposition in the large profile.
RANDOM = ([(c, d) for c in ("hadoop", "delta") for d in DISPOSITION_NAMES] if PROFILE == "large"
          else [("hadoop", d) for d in DISPOSITION_NAMES] + [("delta", "upsert")])


@pytest.mark.parametrize("catalog, disposition", RANDOM, indirect=["catalog"], ids=[f"{d}-{c}" for c, d in RANDOM])
def test_any_sequence_of_operations_leaves_the_table_and_cursor_of_the_model(env, disposition):
    machine = type(f"Machine_{disposition.replace('-', '_')}", (AssetMachine,), {"DISPOSITION": disposition, "ENV": env})
    run_state_machine_as_test(machine, settings=RUNS)


def day_key(day: int) -> str:
    return (DAY0 + timedelta(days=day)).strftime("%Y-%m-%d")


class DailyMachine(TableMachine):
    """One daily-partitioned delete-insert asset: today's open window and closed-day backfills."""

    def __init__(self) -> None:
        super().__init__()
        self.model = DailyModel()

    def asset(self):
        source = self.model.source
        parts = dg.DailyPartitionsDefinition(start_date=day_key(0), end_offset=1)

        def body(context: dg.AssetExecutionContext, updated: Incremental = incremental("updated", lag=LAG_MINUTES * 60)):
            return [{**r, "updated": DAY0 + timedelta(minutes=r["updated"])} for r in source.values()]

        body.__name__ = self.name
        return incremental_asset(
            name=self.name, primary_key="id", partitions_def=parts, config_path=self.config,
            write_disposition=DISPOSITIONS["delete-insert"], columns={"deleted": {"hard_delete": True}},
        )(body)

    def expect(self, result: dg.ExecuteInProcessResult, counts: dict[int, Counts]) -> None:
        assert result.success, failure(result)
        for day, c in counts.items():
            got = run_counts(result, self.name, day_key(day))
            want = (c.inserted, c.updated, c.deleted, len(self.model.table or []))
            assert got == want, f"{day_key(day)}: metadata (inserted, updated, deleted, row_count) {got}, model {want}"
        self.remember()

    # -- rules: the source changes -------------------------------------------------------------------

    @rule(day=st.integers(0, TODAY), amount=st.integers(0, 99), back=st.sampled_from([0, 0, 1, LAG_MINUTES + 2]))
    def new_row(self, day, amount, back):
        self.model.add_row(day, amount, back)

    @precondition(lambda self: self.model.live_keys())
    @rule(pick=st.integers(0, 99), amount=st.integers(0, 99), back=st.sampled_from([0, 0, 1, LAG_MINUTES + 2]))
    def changed_row(self, pick, amount, back):
        keys = self.model.live_keys()
        self.model.change(keys[pick % len(keys)], amount, back)

    @precondition(lambda self: self.model.live_keys())
    @rule(pick=st.integers(0, 99))
    def deleted_row(self, pick):
        keys = self.model.live_keys()
        key = keys[pick % len(keys)]
        self.model.change(key, self.model.source[key]["amount"], deleted=True)

    # -- rules: runs ---------------------------------------------------------------------------------

    @rule()
    def open_window_run(self):
        result = materialize(self.asset(), self.instance, self.io, partition_key=day_key(TODAY))
        self.expect(result, {TODAY: self.model.open_run()})

    @rule(first=st.integers(0, TODAY - 1), length=st.integers(1, DAYS))
    def partition_backfill(self, first, length):
        last = min(TODAY, first + length - 1)
        if first == last:
            result = materialize(self.asset(), self.instance, self.io, partition_key=day_key(first))
        else:
            tags = {"dagster/asset_partition_range_start": day_key(first), "dagster/asset_partition_range_end": day_key(last)}
            result = materialize(self.asset(), self.instance, self.io, tags=tags)
        self.expect(result, self.model.replace_window(first, last))

    # -- after every step ----------------------------------------------------------------------------

    @invariant()
    def table_and_cursor_equal_the_model(self):
        got = read_table(self.spark, self.table, scd2=False, base=DAY0, unit=60)
        assert got == self.model.expected_table(), f"table {got}, model {self.model.expected_table()}"
        today = day_key(TODAY)
        assert hours_of(committed_cursor(self.spark, self.table, today), DAY0, 60) == self.model.committed, "table's cursor"
        found, last = reported_cursor(self.instance, self.name, today)
        if found or self.model.reported is not None:
            assert hours_of(last, DAY0, 60) == self.model.reported, "Dagster's cursor of today's window"


@pytest.fixture
def noon_of_today(monkeypatch):
    """The library's open-window clock pinned to noon of the model's today, so a sequence that
    runs across midnight keeps the same open window."""
    monkeypatch.setattr(partition_scope, "utc_now", lambda: DAY0 + timedelta(days=TODAY, hours=12))


@HADOOP_ONLY
def test_any_sequence_on_a_daily_partitioned_asset_leaves_the_table_and_cursors_of_the_model(env, noon_of_today):
    run_state_machine_as_test(type("DailyMachineRun", (DailyMachine,), {"ENV": env}), settings=RUNS)


EVERY_DAILY_RULE = [
    ("new_row", {"day": TODAY, "amount": 1, "back": 0}),
    ("new_row", {"day": 0, "amount": 2, "back": 0}),
    ("new_row", {"day": 1, "amount": 3, "back": 0}),
    ("new_row", {"day": 1, "amount": 4, "back": 0}),
    ("open_window_run", {}),
    ("partition_backfill", {"first": 0, "length": 3}),  # three closed days, one commit
    ("new_row", {"day": TODAY, "amount": 5, "back": 0}),
    ("new_row", {"day": TODAY, "amount": 6, "back": 1}),  # late, inside the lag
    ("deleted_row", {"pick": 2}),  # a row of day 1: its tombstone stays in day 1
    ("open_window_run", {}),
    ("partition_backfill", {"first": 1, "length": 1}),  # day 1 again: the deleted row goes
    ("maintenance", {}),
    ("rollback", {"pick": 0}),
    ("open_window_run", {}),
    ("drop_table", {}),
    ("open_window_run", {}),  # today's window reloads
    ("partition_backfill", {"first": 0, "length": DAYS}),  # the range reaches today
    ("open_window_run", {}),
]


@LOCAL_LAKE_AND_DELTA
def test_every_daily_rule_in_one_sequence(env, noon_of_today):
    drive(type("D", (DailyMachine,), {"ENV": env})(), EVERY_DAILY_RULE)


# A table recreated by a window backfill after it was dropped holds rows but no cursor: the next
# incremental run must not continue from Dagster's cursor (the rows before it, outside the
# backfilled window, would never come back).
DROPPED_THEN_BACKFILLED = [
    ("new_rows", {"amounts": [1, 2]}),
    *[("new_rows", {"amounts": [n]}) for n in range(3, 9)],
    ("incremental_run", {}),
    ("drop_table", {}),
    ("window_backfill", {"low": 6, "length": 2}),
    ("incremental_run", {}),  # refused: the table holds no cursor
    ("full_refresh", {}),
]


@HADOOP_ONLY
def test_a_table_recreated_by_a_backfill_after_a_drop_is_not_continued(env):
    drive(type("M", (AssetMachine,), {"DISPOSITION": "upsert", "ENV": env})(), DROPPED_THEN_BACKFILLED)
