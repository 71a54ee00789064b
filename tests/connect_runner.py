"""One Dagster run of a Delta or Iceberg asset over Spark Connect, in a process fenced off from py4j.

Used by tests/dagster/test_connect_delta.py and tests/dagster/test_connect_iceberg.py. Before
anything else is imported, every way PySpark has into a driver JVM is replaced by one that
records the attempt and raises: launching the
gateway (`launch_gateway`, where the classic SparkContext calls it), `SparkContext._jvm` and
`_gateway`, and the classic SparkSession's `_jvm`. The run's project folder (argv[1]) holds
config/config.toml ([spark] remote and the destination, or SPARK_REMOTE in the environment),
and the Dagster instance is DAGSTER_HOME. argv[2] is the run, as JSON:
    asset       "orders" (unpartitioned: id, amount, updated_at), "events" (daily partitions
                from `start`: event_id, value, event_time) or "plain" (a plain asset's
                DataFrame of orders, and a downstream asset reading it back) or "chain" (orders,
                and `orders_copy` upserting the rows of its `Changes`; the rows it received
                are printed as `changes_read`) or "tenants" (static partitions acme and globex,
                each with its own cursor: tenant, id, amount, updated_at)
    disposition the write_disposition (a name or a table)
    rows        orders: [[id, amount, day of January 2024], ...]; events: [[id, value, ISO time], ...];
                tenants: [[tenant, id, amount, day of January 2024], ...] (a run gives its tenant's)
    base        orders: the ISO time of day 1 instead of 2024-01-01 (each row an hour into its day)
    step        orders: the cursor's step (slices), from `base` as its initial_value; the
                function then gives only the rows of the slice's window
    fail_at     orders: the function raises in its call number `fail_at` (a failed slice)
    frame       give the rows as a Spark Connect DataFrame (else as dict rows)
    partition   the partition key to run (events, tenants)
    full_refresh  run with the full refresh run config
    hold        {"ready": path, "go": path}: once the function is called (its cursor read),
                write `ready`, then wait until `go` exists (racing runs meet there)
    kill        "during-commit": SIGKILL this process `delay` s after a commit's statement
                was sent to the server; "after-commit": once the write returned, before Dagster
                records it
    delay       seconds, for kill (default 0.3)
    lease_seconds  how soon a killed run's S3 commit lease may be taken over (default: the library's)
    then_rows   after the run, a second run of the asset in this same process with these rows
    count       after the runs, count the asset's table through the run's own Spark session
                (`rows_seen` in the metadata): what a downstream asset of the same process reads
Prints one JSON line: success, the failure's message, the materialization's metadata, what the
fence caught, the java processes this process started.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

CAUGHT: list[str] = []
CHANGES_READ: list[list] = []  # the `Changes` rows orders_copy received: [id, amount, _change_type]


class _NoJvm:
    """A stand-in for py4j's JVM view: any use is recorded and refused."""

    def __init__(self, where: str) -> None:
        self._where = where

    def __getattr__(self, name: str):
        CAUGHT.append(f"{self._where}.{name}")
        raise AssertionError(f"py4j used over Spark Connect: {self._where}.{name}")

    def __call__(self, *args, **kwargs):
        CAUGHT.append(self._where)
        raise AssertionError(f"py4j used over Spark Connect: {self._where}()")


def fence_py4j() -> None:
    """Replace PySpark's entries into a driver JVM with ones that record and raise."""
    import pyspark.java_gateway as gateway
    from pyspark import SparkContext

    def launch(*args, **kwargs):
        CAUGHT.append("launch_gateway")
        raise AssertionError("py4j used over Spark Connect: launch_gateway()")

    gateway.launch_gateway = launch
    try:
        import pyspark.core.context as context  # PySpark 4: where SparkContext calls it from
        context.launch_gateway = launch
    except ImportError:
        pass
    SparkContext._jvm = _NoJvm("SparkContext._jvm")
    SparkContext._gateway = _NoJvm("SparkContext._gateway")
    from pyspark.sql.session import SparkSession  # the classic session (Connect's is its own class)

    def refused(self, *value):
        return _NoJvm("SparkSession._jvm")()

    SparkSession._jvm = property(refused, refused)  # type: ignore[assignment]


def java_children() -> list[str]:
    """Command lines of java processes descending from this one."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    me, found = os.getpid(), []
    for pid, command in commands.items():
        ancestor = parents.get(pid)
        while ancestor and ancestor != me:
            ancestor = parents.get(ancestor)
        if ancestor == me and "java" in command.split(" ", 1)[0]:
            found.append(command[:200])
    return found


def build_asset(run: dict):
    import dagster as dg
    from datetime import datetime, timezone

    from dagster_incremental import Changes, Incremental, incremental, incremental_asset

    def hold() -> None:
        if run.get("hold"):
            Path(run["hold"]["ready"]).write_text(str(os.getpid()))
            while not Path(run["hold"]["go"]).exists():
                time.sleep(0.05)

    def as_output(rows: list[dict], schema: str):
        if not run.get("frame"):
            return rows
        from pyspark.sql import SparkSession

        remote = os.environ.get("SPARK_REMOTE") or os.environ["DI_CONNECT_URL"]
        return SparkSession.builder.remote(remote).getOrCreate().createDataFrame(rows, schema)

    if run["asset"] == "plain":  # a plain asset's Connect DataFrame, and a downstream reading it back
        @dg.asset
        def plain_orders():
            rows = [{"id": i, "amount": a, "updated_at": datetime(2024, 1, d, tzinfo=timezone.utc)} for i, a, d in run["rows"]]
            return as_output(rows, "id BIGINT, amount BIGINT, updated_at TIMESTAMP")

        @dg.asset
        def plain_total(context, plain_orders):
            total = plain_orders.groupBy().sum("amount").collect()[0][0]
            context.add_output_metadata({"read_back": type(plain_orders).__module__, "total": int(total)})

        return [plain_orders, plain_total]

    if run["asset"] in ("orders", "chain"):
        calls: list[int] = []  # one entry per call of the function (a sliced run calls it per slice)
        sliced = {"initial_value": run["base"], "step": run["step"]} if run.get("step") else {}

        @incremental_asset(primary_key="id", write_disposition=run["disposition"], config_path="config/config.toml")
        def orders(updated_at: Incremental = incremental("updated_at", **sliced)):
            hold()
            calls.append(1)
            if run.get("fail_at") == len(calls):
                raise RuntimeError(f"source down in call {len(calls)}")
            rows = [{"id": i, "amount": a, "updated_at": order_time(run, d)} for i, a, d in run["rows"]]
            if sliced:
                low, high = updated_at.start_value, updated_at.end_value
                rows = [r for r in rows if r["updated_at"] >= low and (high is None or r["updated_at"] < high)]
            return as_output(rows, "id BIGINT, amount BIGINT, updated_at TIMESTAMP")
        if run["asset"] == "orders":
            return orders

        @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"},
                           config_path="config/config.toml")
        def orders_copy(orders: Changes):
            CHANGES_READ[:] = sorted([r["id"], r["amount"], r["_change_type"]] for r in orders.df.collect())
            return orders.upserts()  # the rows the upstream's commits since the last run added or changed
        return [orders, orders_copy]

    if run["asset"] == "tenants":
        @incremental_asset(primary_key=["tenant", "id"], partitions_def=dg.StaticPartitionsDefinition(["acme", "globex"]),
                           partition_column="tenant", write_disposition=run["disposition"], config_path="config/config.toml")
        def tenant_orders(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at")):
            rows = [{"tenant": t, "id": i, "amount": a, "updated_at": order_time(run, d)}
                    for t, i, a, d in run["rows"] if t == context.partition_key]
            return as_output(rows, "tenant STRING, id BIGINT, amount BIGINT, updated_at TIMESTAMP")
        return tenant_orders

    parts = dg.DailyPartitionsDefinition(start_date=run["start"], end_offset=1)

    @incremental_asset(primary_key="event_id", partitions_def=parts, write_disposition=run["disposition"],
                       config_path="config/config.toml")
    def events(event_time: Incremental = incremental("event_time")):
        hold()
        rows = [{"event_id": i, "value": v, "event_time": datetime.fromisoformat(t)} for i, v, t in run["rows"]]
        return as_output([r for r in rows if event_time.start_value <= r["event_time"] < event_time.end_value],
                         "event_id STRING, value BIGINT, event_time TIMESTAMP")
    return events


def order_time(run: dict, day: int):
    """An order's updated_at: midnight of `day` of January 2024, or an hour into day `day` from `base`."""
    from datetime import datetime, timedelta, timezone

    if not run.get("base"):
        return datetime(2024, 1, day, tzinfo=timezone.utc)
    return datetime.fromisoformat(run["base"]) + timedelta(days=day - 1, hours=1)


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm_kill(run: dict) -> None:
    """Where `run["kill"]` says, SIGKILL this process (the library has no fault hooks: patched
    here): each format's commit statement (Delta's, Iceberg's append or SQL statement) and writer."""
    from dagster_incremental.spark.delta import s3_lease
    from dagster_incremental.spark.delta.commit import DeltaCommit
    from dagster_incremental.spark.delta.writer import DeltaWriter
    from dagster_incremental.spark.iceberg.commit import PendingCommit
    from dagster_incremental.spark.iceberg.writer import TableWriter

    if run.get("lease_seconds"):
        s3_lease.LEASE_SECONDS = float(run["lease_seconds"])
    if run.get("kill") == "during-commit":
        for owner, name in ((DeltaCommit, "run"), (PendingCommit, "run"), (PendingCommit, "append")):
            setattr(owner, name, _dying(getattr(owner, name), float(run.get("delay", 0.3))))
    elif run.get("kill") == "after-commit":
        for owner in (DeltaWriter, TableWriter):
            owner.write = _then_die(owner.write)


def _dying(statement, delay: float):
    """`statement`, with a SIGKILL `delay` s after it was sent."""
    def dying(self, *args, **kwargs):
        threading.Timer(delay, die).start()
        return statement(self, *args, **kwargs)

    return dying


def _then_die(write):
    def write_then_die(self, *args, **kwargs):
        write(self, *args, **kwargs)
        die()

    return write_then_die


def main() -> None:
    fence_py4j()
    os.chdir(sys.argv[1])
    run = json.loads(sys.argv[2])
    import dagster as dg

    arm_kill(run)

    from dagster_incremental import SparkTableIOManager

    built = build_asset(run)
    assets = built if isinstance(built, list) else [built]
    run_config: dict = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    if run.get("full_refresh"):
        run_config["ops"] = {assets[0].op.name: {"config": {"full_refresh": True}}}
    io = SparkTableIOManager.from_config("config/config.toml")
    result = dg.materialize(assets, resources={"io_manager": io}, instance=dg.DagsterInstance.get(),
                            partition_key=run.get("partition"), run_config=run_config, raise_on_error=False)
    if result.success and run.get("then_rows"):
        again = build_asset({**run, "rows": run["then_rows"]})
        result = dg.materialize(again if isinstance(again, list) else [again], resources={"io_manager": io},
                                instance=dg.DagsterInstance.get(), run_config=run_config, raise_on_error=False)
    message = None
    if not result.success:
        error, parts = result.get_step_failure_events()[0].step_failure_data.error, []
        while error is not None:  # the message and its causes: everything the user sees
            parts.append(error.message)
            error = error.cause
        message = "\n".join(parts)
    metadata = {}
    for event in result.get_asset_materialization_events():
        metadata.update({k: v.value for k, v in event.step_materialization_data.materialization.metadata.items()
                         if k.startswith("dagster_incremental/") or k in ("dagster/row_count", "read_back", "total")})
    if result.success and run.get("count"):
        metadata["rows_seen"] = io.spark.table(io.table_name(dg.AssetKey(run["asset"])).sql).count()
    print(json.dumps({"success": result.success, "message": message, "metadata": metadata, "caught": CAUGHT,
                      "changes_read": CHANGES_READ, "java": java_children()}, default=str))


if __name__ == "__main__":
    main()
