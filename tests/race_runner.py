"""Materialize the race assets in rounds until the source stops growing, in its own process.

Used by tests/test_race_without_pool.py, which starts several of these at once on one Dagster
instance with no concurrency pool. The source is a function of the clock, so every process sees
the same rows at the same moment:
    RACE_DIR    each process starts its Spark session, writes `ready-<pid>` there, then waits for
                `start`, which holds t0 (the test writes it once all are ready); the test later
                writes `end`, the tick count at which the source stops growing
    RACE_TICK   tick k (k < end) exists from t0 + k * RACE_TICK on
    RACE_CONFIG, RACE_CATALOG (catalogs.to_env), RACE_WAREHOUSE, RACE_NAMESPACE, DAGSTER_HOME
Prints one line per step: `STEP_OK <asset>` or `STEP_FAILED <asset> <message and causes>`.

`assert_only_winners_committed` is what the racing tests check of a raced table's history.
"""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

STRATEGIES = ("append", "upsert", "delete-insert", "scd2")


@dataclass(frozen=True)
class RaceClock:
    """The source's clock, shared by the processes through the files in `folder`."""

    folder: Path
    tick: float
    t0: float

    @classmethod
    def when_started(cls, folder: Path, tick: float) -> RaceClock:
        """Say this process is ready, then wait for the start time the test writes."""
        (folder / f"ready-{os.getpid()}").write_text("")
        start = folder / "start"
        while not start.exists():  # the test renames it into place whole
            time.sleep(0.05)
        return cls(folder, tick, float(start.read_text()))

    def end(self) -> int | None:
        path = self.folder / "end"
        return int(path.read_text()) if path.exists() else None

    def ticks(self) -> int:
        """The source's ticks so far: one per `tick` seconds from t0, up to the end once set."""
        now = max(0, int((time.time() - self.t0) / self.tick) + 1)
        end = self.end()
        return now if end is None else min(now, end)

    def stopped(self) -> bool:
        end = self.end()
        return end is not None and time.time() > self.t0 + end * self.tick


def source_rows(strategy: str, ticks: int) -> list[dict]:
    """Two rows per tick sharing its cursor value; keyed strategies revisit a few keys."""
    rows = []
    for k in range(ticks):
        ids = (2 * k, 2 * k + 1) if strategy == "append" else (k % 5, 5 + k % 3)
        rows += [{"id": i, "amount": k, "updated": k} for i in ids]
    return rows


def asset_name(strategy: str) -> str:
    return "race_" + strategy.replace("-", "_")


def history_commits(spark, table) -> list[tuple[dict[str, str], bool]]:
    """Every commit that was ever the table's current state, oldest first (Iceberg: the snapshots
    in main's history; Delta: the versions in the commit log), as (its properties, whether it is
    the table's first commit and holds no row)."""
    if table.location is not None:  # Delta
        from dagster_incremental.spark.delta.log import DeltaLog

        log = DeltaLog(table.location)
        found = [(v, log.commit(v)) for v in log.versions()]
        return [({**c.properties, "operation": c.operation}, i == 0 and log.row_count(v) == 0)
                for i, (v, c) in enumerate(found) if c is not None]
    from dagster_incremental.spark.iceberg.commit import iceberg_table, java_json

    iceberg = iceberg_table(spark, table)
    iceberg.refresh()
    commits = []
    for i, entry in enumerate(iceberg.history()):
        snapshot = iceberg.snapshot(entry.snapshotId())
        summary = java_json(spark._jvm, snapshot.summary())
        commits.append((summary, i == 0 and snapshot.parentId() is None and summary.get("total-records") == "0"))
    return commits


def assert_only_winners_committed(spark, table, winners: set[str]) -> None:
    """A run that lost a race wrote nothing: every commit in the table's history carries the
    cursor of a run that succeeded (`winners`, run ids), each run's once; only the table's first
    commit may carry none, when it holds no row (an empty table's first snapshot)."""
    from dagster_incremental.spark.write_spec import RUN_ID_PROPERTY, STATE_PROPERTY

    commits = history_commits(spark, table)
    assert commits, f"{table} has no commit"
    for i, (props, empty_first) in enumerate(commits):
        if empty_first and STATE_PROPERTY not in props:
            continue
        what = {k: v for k, v in props.items() if k != STATE_PROPERTY}
        assert STATE_PROPERTY in props, f"commit {i} of {table} carries no cursor: {what}"
        assert props.get(RUN_ID_PROPERTY) in winners, f"commit {i} of {table} is of a run that failed: {what}"
    runs = [props.get(RUN_ID_PROPERTY) for props, _ in commits if STATE_PROPERTY in props]
    assert len(runs) == len(set(runs)), f"a run committed twice to {table}: {runs}"


def main() -> int:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import dagster as dg

    from attack_support import QUIET, source_asset
    from catalogs import SMALL_DATA_CONF, runner_spark_config, runner_table_format
    from dagster_incremental import SparkTableIOManager

    catalog, conf = runner_spark_config(os.environ["RACE_CATALOG"])
    io = SparkTableIOManager(
        catalog=catalog, namespace=os.environ["RACE_NAMESPACE"], warehouse=os.environ["RACE_WAREHOUSE"],
        table_format=runner_table_format(os.environ["RACE_CATALOG"]),
        master="local[1]",
        spark_config={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                      "spark.driver.bindAddress": "127.0.0.1", "spark.sql.shuffle.partitions": "1", **SMALL_DATA_CONF, **conf},
    )
    io.spark.sql("SELECT 1").collect()  # the JVM and SparkContext start before the race, not in it
    clock = RaceClock.when_started(Path(os.environ["RACE_DIR"]), float(os.environ["RACE_TICK"]))
    assets = [
        source_asset(asset_name(s), os.environ["RACE_CONFIG"], s,
                     lambda s=s: source_rows(s, clock.ticks()),
                     merge_key="id" if s == "scd2" else None)
        for s in STRATEGIES
    ]
    with dg.DagsterInstance.get() as instance:
        while True:
            last = clock.stopped()  # one more round after the source stopped growing
            result = dg.materialize(assets, instance=instance, resources={"io_manager": io},
                                    run_config=QUIET, raise_on_error=False)
            _report(result)
            if last:
                return 0
            time.sleep(random.random() * 0.5)


def _report(result) -> None:
    for event in result.all_events:
        if event.is_step_success:
            print(f"STEP_OK {event.step_key}", flush=True)
        elif event.is_step_failure:
            error, text = event.step_failure_data.error, []
            while error is not None:
                text.append(error.message.replace("\n", " "))
                error = error.cause
            print(f"STEP_FAILED {event.step_key} " + " | ".join(text), flush=True)


if __name__ == "__main__":
    sys.exit(main())
