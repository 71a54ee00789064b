"""Materialize the race assets of every catalog kind in rounds until the source stops growing,
in its own process.

Used by tests/test_race_without_pool.py, which starts several of these at once with no
concurrency pool. One Spark session knows every catalog kind at once (as the tests' shared
session does), so one race window serves them all: each round materializes the four assets of
each kind in turn, each kind on its own Dagster instance. The source is a function of the clock,
so every process sees the same rows at the same moment:
    RACE_DIR    each process starts its Spark session, writes `ready-<pid>` there, then waits for
                `start`, which holds t0 (the test writes it once all are ready); the test later
                writes `end`, the tick count at which the source stops growing
    RACE_TICK   tick k (k < end) exists from t0 + k * RACE_TICK on
    RACE_KINDS  JSON {kind: {"catalog": catalogs.to_env, "namespace": ..., "config": config.toml,
                "home": DAGSTER_HOME}}
    RACE_WAREHOUSE the warehouse of the session's Iceberg Hadoop catalog `lake` (the hadoop kind's)
Prints one line per step: `<kind> STEP_OK <asset>` or `<kind> STEP_FAILED <asset> <message and causes>`.

`assert_only_winners_committed` is what the racing tests check of a raced table's history.
"""

from __future__ import annotations

import json
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
    from contextlib import ExitStack

    import dagster as dg
    from dagster._core.instance import InstanceRef

    from attack_support import QUIET, source_asset

    kinds = json.loads(os.environ["RACE_KINDS"])
    ios = _io_managers(kinds)
    clock = RaceClock.when_started(Path(os.environ["RACE_DIR"]), float(os.environ["RACE_TICK"]))
    assets = {kind: [source_asset(asset_name(s), kinds[kind]["config"], s, lambda s=s: source_rows(s, clock.ticks()),
                                  merge_key="id" if s == "scd2" else None) for s in STRATEGIES]
              for kind in kinds}
    with ExitStack() as stack:
        instances = {kind: stack.enter_context(dg.DagsterInstance.from_ref(InstanceRef.from_dir(kinds[kind]["home"])))
                     for kind in kinds}
        while True:
            last = clock.stopped()  # one more round after the source stopped growing
            for kind in kinds:
                result = dg.materialize(assets[kind], instance=instances[kind], resources={"io_manager": ios[kind]},
                                        run_config=QUIET, raise_on_error=False)
                _report(kind, result)
            if last:
                return 0
            time.sleep(random.random() * 0.5)


def _io_managers(kinds: dict[str, dict[str, str]]) -> dict:
    """One IO manager per catalog kind, all on this process's one Spark session, which is started
    (with every kind's jars, Iceberg's and Delta's extensions) and has each kind's catalog before
    the race: the JVM, its classes and each catalog's first connection are not raced."""
    from catalogs import SMALL_DATA_CONF, runner_spark_config, runner_table_format, shared_session_conf
    from dagster_incremental import SparkTableIOManager
    from dagster_incremental.spark.session import build_spark_session

    local = {"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
             "spark.sql.shuffle.partitions": "1", **SMALL_DATA_CONF}
    spark = build_spark_session(shared_session_conf(os.environ["RACE_WAREHOUSE"], app_name="race-runner"))
    ios = {}
    for kind, found in kinds.items():
        catalog, conf = runner_spark_config(found["catalog"])
        ios[kind] = SparkTableIOManager(
            catalog=catalog, namespace=found["namespace"], warehouse=json.loads(found["catalog"])["warehouse"],
            table_format=runner_table_format(found["catalog"]), master="local[1]", spark_config={**local, **conf})
        ios[kind].spark  # noqa: B018 - its catalog's keys are set on the one session now
        if ios[kind].table_format == "iceberg":
            spark.sql(f"SHOW NAMESPACES IN {catalog}").collect()
    spark.sql("SELECT 1").collect()
    return ios


def _report(kind: str, result) -> None:
    for event in result.all_events:
        if event.is_step_success:
            print(f"{kind} STEP_OK {event.step_key}", flush=True)
        elif event.is_step_failure:
            error, text = event.step_failure_data.error, []
            while error is not None:
                text.append(error.message.replace("\n", " "))
                error = error.cause
            print(f"{kind} STEP_FAILED {event.step_key} " + " | ".join(text), flush=True)


if __name__ == "__main__":
    sys.exit(main())
