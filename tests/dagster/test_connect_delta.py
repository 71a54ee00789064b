"""Delta tables over Spark Connect, in a folder and on S3: `[spark] remote` (or SPARK_REMOTE) with
a Delta destination runs every disposition through a Connect session on a real server
(tests/connect_server.py), races and killed runs included, with no py4j call and no JVM in the
Dagster process: each run is a process of its own
(tests/connect_runner.py) whose entries into py4j record and raise, and which reports the
java processes it started. What is checked is what a user sees: the table's rows (read by
delta-rs), the cursor its commit carries, the materialization's metadata, the errors.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import preloaded

pytestmark = [pytest.mark.spark, pytest.mark.connect]

RUNNER = Path(__file__).resolve().parents[1] / "connect_runner.py"
UPSERT = {"disposition": "merge", "strategy": "upsert"}
DELETE_INSERT = {"disposition": "merge", "strategy": "delete-insert"}


def project(tmp_path: Path, url: str | None, name: str = "p", s3=None) -> Path:
    """A project folder: config/config.toml naming the server in [spark] remote (None: SPARK_REMOTE
    will) and a Delta destination in the folder's warehouse, or in a fresh prefix of the S3
    server's bucket (`s3`: its S3A settings in [spark.conf], the keys from the AWS_* variables);
    its Dagster instance beside it."""
    from catalogs import s3a_settings

    folder = tmp_path / name
    (folder / "config").mkdir(parents=True)
    (folder / "home").mkdir()
    remote = f'remote = "{url}"\n' if url else ""
    warehouse = f"{s3.bucket}/connect/{uuid.uuid4().hex[:8]}" if s3 else str(folder / "warehouse")
    conf = "".join(f'"{k}" = "{v}"\n' for k, v in s3a_settings(s3).items()) if s3 else ""
    (folder / "config" / "config.toml").write_text(
        f'[spark]\n{remote}\n[spark.conf]\n{conf}\n[destination]\nformat = "delta"\ncatalog = "lake"\n'
        f'namespace = "cd"\nwarehouse = "{warehouse}"\n')
    return folder


def location(folder: Path, name: str) -> str:
    """Where the project's table `name` is (s3a://... on S3, whose settings this process then uses)."""
    from dagster_incremental.spark.delta.storage import S3Settings, as_s3a, on_s3, use_s3_settings

    config = tomllib.loads((folder / "config" / "config.toml").read_text())
    warehouse = config["destination"]["warehouse"]
    if on_s3(warehouse):
        use_s3_settings(S3Settings.from_spark_conf(config["spark"]["conf"]))
    return f"{as_s3a(warehouse)}/cd/{name}"


def start(folder: Path, url: str, env: dict | None = None, **run) -> preloaded.Runner:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_API_MODE")}
    tests = str(RUNNER.parent)
    environ.update(DAGSTER_HOME=str(folder / "home"), DI_CONNECT_URL=url,
                   PYTHONPATH=os.pathsep.join([str(RUNNER.parents[1]), tests, environ.get("PYTHONPATH", "")]),
                   **(env or {}))
    return preloaded.start([str(RUNNER), str(folder), json.dumps(run)], environ, Path.cwd())


def finish(process: preloaded.Runner) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-4000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["caught"] == [], f"py4j was used: {seen['caught']}"
    assert seen["java"] == [], f"the run's process started a JVM: {seen['java']}"
    return seen


def run(folder: Path, url: str, env: dict | None = None, **run) -> dict:
    return finish(start(folder, url, env, **run))


def table(folder: Path, name: str, key: str = "id") -> list[dict]:
    from catalogs import delta_rs_rows
    from dagster_incremental.spark.delta.in_process import storage_options

    where = location(folder, name)
    rows = delta_rs_rows(where, storage_options(where)).to_pylist()
    return sorted(rows, key=lambda r: r[key])


def committed(folder: Path, name: str, scope: str | None = None):
    """The cursor the table's newest cursor-carrying commit holds (read from its log)."""
    from dagster_incremental.spark.delta.log import DeltaLog

    return DeltaLog(location(folder, name)).committed_cursor(scope)


def versions(folder: Path, name: str) -> list[int]:
    from dagster_incremental.spark.delta.log import DeltaLog

    return DeltaLog(location(folder, name)).versions()


def ids_amounts(rows: list[dict]) -> list[tuple[int, int]]:
    return [(r["id"], r["amount"]) for r in rows]


ON_S3 = pytest.param(True, id="s3")
IN_A_FOLDER = pytest.param(False, id="folder")


@pytest.mark.parametrize(("frame", "on_s3"), [(True, False), (False, False), (True, True)],
                         ids=["connect-frame", "dict-rows", "connect-frame-s3"])
def test_append_upsert_and_delete_insert_run_over_connect_without_a_jvm(frame, on_s3, connect_server, s3, tmp_path):
    url = connect_server.url
    bucket = s3 if on_s3 else None
    folder = project(tmp_path, url, s3=bucket)
    first = run(folder, url, asset="orders", disposition=UPSERT, rows=[[1, 10, 1], [2, 20, 2]], frame=frame)
    assert first["success"], first["message"]
    second = run(folder, url, asset="orders", disposition=UPSERT, rows=[[2, 21, 3], [3, 30, 3]], frame=frame)
    assert second["success"], second["message"]
    assert ids_amounts(table(folder, "orders")) == [(1, 10), (2, 21), (3, 30)]
    meta = second["metadata"]
    assert meta["dagster_incremental/state"]["last_value"] == "2024-01-03T00:00:00Z"
    assert (meta["dagster_incremental/rows_inserted"], meta["dagster_incremental/rows_updated"]) == (1, 1)
    assert meta["dagster/row_count"] == 3 and meta["dagster_incremental/mode"] == "incremental"
    held = committed(folder, "orders")
    assert held is not None and held.state["last_value"] == "2024-01-03T00:00:00Z"

    appended = project(tmp_path, url, "append", s3=bucket)
    for rows in ([[1, 10, 1]], [[2, 20, 2], [3, 30, 2]]):
        assert run(appended, url, asset="orders", disposition="append", rows=rows, frame=frame)["success"]
    assert ids_amounts(table(appended, "orders")) == [(1, 10), (2, 20), (3, 30)]

    keyed = project(tmp_path, url, "delete_insert", s3=bucket)
    assert run(keyed, url, asset="orders", disposition=DELETE_INSERT, rows=[[1, 10, 1], [2, 20, 1]], frame=frame)["success"]
    again = run(keyed, url, asset="orders", disposition=DELETE_INSERT, rows=[[2, 22, 2], [4, 40, 2]], frame=frame)
    assert again["success"], again["message"]
    assert ids_amounts(table(keyed, "orders")) == [(1, 10), (2, 22), (4, 40)]
    assert again["metadata"]["dagster_incremental/state"]["last_value"] == "2024-01-02T00:00:00Z"


def test_a_changes_chain_reads_only_what_the_upstream_committed_since_over_connect(connect_server, tmp_path):
    """A downstream asset's `Changes` of a Delta upstream, read over Connect: the first run reads
    the whole upstream, the next only the rows its merge changed, and the downstream's commit
    carries the upstream version read up to."""
    url = connect_server.url
    folder = project(tmp_path, url)
    first = run(folder, url, asset="chain", disposition=UPSERT, rows=[[1, 10, 1], [2, 20, 1]])
    assert first["success"], first["message"]
    assert first["metadata"]["dagster_incremental/upstream"]["orders"]["read"] == "full"
    second = run(folder, url, asset="chain", disposition=UPSERT, rows=[[2, 21, 2], [3, 30, 2]])
    assert second["success"], second["message"]
    read = second["metadata"]["dagster_incremental/upstream"]["orders"]
    assert read["read"] == "changes" and read["snapshot_id"] == str(versions(folder, "orders")[-1])
    assert ids_amounts(table(folder, "orders_copy")) == [(1, 10), (2, 21), (3, 30)]
    # the merge's remove entries carry no row count: unknown, never rows_written's bound (2**62 + 1)
    assert read["rows_read"] is None
    held = committed(folder, "orders_copy")
    assert held is not None and held.state["upstream"]["orders"]["snapshot_id"] == versions(folder, "orders")[-1]


def test_spark_remote_in_the_environment_runs_a_delta_destination_over_connect(connect_server, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, None)  # no [spark] remote: PySpark's SPARK_REMOTE asks for Connect
    seen = run(folder, url, env={"SPARK_REMOTE": url}, asset="orders", disposition=DELETE_INSERT,
               rows=[[1, 10, 1], [2, 20, 2]], frame=True)
    assert seen["success"], seen["message"]
    assert ids_amounts(table(folder, "orders")) == [(1, 10), (2, 20)]


def test_a_partition_backfill_loads_its_window_and_leaves_the_live_cursor(connect_server, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, url)
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    days = [today - timedelta(days=d) for d in (2, 1, 0)]
    source = [[f"e{d}-{h}", d * 10 + h, (day + timedelta(minutes=h)).isoformat()] for d, day in enumerate(days) for h in (1, 2)]
    keys = [d.strftime("%Y-%m-%d") for d in days]
    common = dict(asset="events", disposition={"disposition": "merge"}, start=keys[0])

    live = run(folder, url, rows=source, partition=keys[2], **common)
    assert live["success"], live["message"]
    live_cursor = committed(folder, "events", live["metadata"].get("dagster_incremental/scope"))
    assert live["metadata"]["dagster_incremental/mode"] == "incremental"

    backfill = run(folder, url, rows=[r for r in source if r[0] != "e1-1"] + [["e1-3", 99, (days[1] + timedelta(minutes=3)).isoformat()]],
                   partition=keys[1], **common)
    assert backfill["success"], backfill["message"]
    assert backfill["metadata"]["dagster_incremental/mode"] == "backfill"
    ids = [r["event_id"] for r in table(folder, "events", "event_id")]
    assert ids == ["e1-2", "e1-3", "e2-1", "e2-2"]  # the window's rows, and only those, loaded
    after = committed(folder, "events", live["metadata"].get("dagster_incremental/scope"))
    assert after is not None and live_cursor is not None and after.state == live_cursor.state  # not moved
    assert after.snapshot_id == live_cursor.snapshot_id


def test_a_full_refresh_replaces_the_table_and_resets_the_cursor(connect_server, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, url)
    assert run(folder, url, asset="orders", disposition=UPSERT, rows=[[1, 10, 5], [2, 20, 6]], frame=True)["success"]
    refreshed = run(folder, url, asset="orders", disposition=UPSERT, rows=[[7, 70, 2]], frame=True, full_refresh=True)
    assert refreshed["success"], refreshed["message"]
    assert ids_amounts(table(folder, "orders")) == [(7, 70)]
    assert refreshed["metadata"]["dagster_incremental/state"]["last_value"] == "2024-01-02T00:00:00Z"  # back, not max
    assert committed(folder, "orders").state["last_value"] == "2024-01-02T00:00:00Z"


def _held(folder: Path, url: str, tag: str, rows: list, frame: bool = True,
          env: dict | None = None) -> tuple[preloaded.Runner, Path, Path]:
    ready, go = folder / f"ready-{tag}", folder / f"go-{tag}"
    process = start(folder, url, env, asset="orders", disposition=UPSERT, rows=rows, frame=frame,
                    hold={"ready": str(ready), "go": str(go)})
    return process, ready, go


def _wait_for(path: Path, process: preloaded.Runner) -> None:
    deadline = time.monotonic() + 240
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.1)


@pytest.mark.parametrize("on_s3", [IN_A_FOLDER, ON_S3])
def test_a_run_whose_cursor_went_stale_writes_nothing(on_s3, connect_server, s3, tmp_path):
    """Run A reads its cursor, then run B commits; A's commit is refused and writes nothing."""
    url = connect_server.url
    folder = project(tmp_path, url, s3=s3 if on_s3 else None)
    assert run(folder, url, asset="orders", disposition=UPSERT, rows=[[1, 10, 1]], frame=True)["success"]
    slow, ready, go = _held(folder, url, "a", [[2, 20, 2]])
    _wait_for(ready, slow)
    fast = run(folder, url, asset="orders", disposition=UPSERT, rows=[[3, 30, 3]], frame=True)
    assert fast["success"], fast["message"]
    go.write_text("")
    stale = finish(slow)
    assert not stale["success"]
    assert "another run" in stale["message"] and "wrote nothing" in stale["message"]
    assert ids_amounts(table(folder, "orders")) == [(1, 10), (3, 30)]
    assert committed(folder, "orders").state["last_value"] == "2024-01-03T00:00:00Z"


@pytest.mark.parametrize("on_s3", [IN_A_FOLDER, ON_S3])
def test_of_two_racing_runs_one_commits_and_the_other_writes_nothing(on_s3, connect_server, s3, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, url, s3=s3 if on_s3 else None)
    assert run(folder, url, asset="orders", disposition=UPSERT, rows=[[1, 10, 1]], frame=True)["success"]
    before = versions(folder, "orders")
    racers = [_held(folder, url, tag, [[2, 20, 2], [3, 30, 2]]) for tag in ("a", "b")]
    for process, ready, _ in racers:
        _wait_for(ready, process)
    for _, _, go in racers:  # both read the same cursor: released together
        go.write_text("")
    seen = [finish(process) for process, _, _ in racers]
    assert sorted(s["success"] for s in seen) == [False, True], [s["message"] for s in seen]
    loser = next(s for s in seen if not s["success"])
    assert "wrote nothing" in loser["message"]
    assert ids_amounts(table(folder, "orders")) == [(1, 10), (2, 20), (3, 30)]  # one copy
    assert len(versions(folder, "orders")) == len(before) + 1  # one commit
    assert committed(folder, "orders").state["last_value"] == "2024-01-02T00:00:00Z"


def test_the_token_from_secrets_rides_in_the_channel_and_never_in_the_servers_conf():
    from dagster_incremental.spark.connect import CONNECT_TOKEN, connect_channel

    channel = connect_channel("sc://connect.example:15002", {CONNECT_TOKEN: "not-a-real-token", "spark.sql.x": "1"})
    assert channel.token == "not-a-real-token" and channel.secure  # a bearer token goes over TLS
    assert connect_channel("sc://connect.example:15002", {}).token is None


def test_connect_errors_are_told_by_the_class_and_error_class_the_server_sent():
    """Over Connect no Java exception is here to ask: a Delta conflict must still read as the
    compare-and-set losing, and the window replace's own raise_error as its own."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    from dagster_incremental.spark.delta.commit import _is_conflict
    from dagster_incremental.spark.errors import USER_RAISED, java_classes, raised_by_sql

    conflict = SparkConnectGrpcException(
        "Files were added to the root of the table by a concurrent update. Please try the operation again.",
        errorClass="DELTA_CONCURRENT_APPEND.WITHOUT_HINT", messageParameters={"partition": "root"},
        server_stacktrace="io.delta.exceptions.ConcurrentAppendException\n\tat io.delta.Txn.commit(Txn.scala:1)\n"
                          "Caused by: java.lang.IllegalStateException: inner\n\tat x.y(z.scala:1)")
    assert _is_conflict(conflict)
    assert {"io.delta.exceptions.ConcurrentAppendException", "java.lang.IllegalStateException"} <= java_classes(conflict)
    other = SparkConnectGrpcException("[DIVIDE_BY_ZERO] Division by zero.", errorClass="DIVIDE_BY_ZERO",
                                      messageParameters={"config": "x"})
    assert not _is_conflict(other) and java_classes(other) == set()
    raised = SparkConnectGrpcException("the window's rows moved", errorClass=USER_RAISED,
                                       messageParameters={"errorMessage": "the window's rows moved"})
    assert raised_by_sql(raised, "the window's rows moved") and not raised_by_sql(raised, "another message")


def test_a_plain_assets_connect_dataframe_is_written_and_read_back_downstream_over_connect(connect_server, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, url)
    seen = run(folder, url, asset="plain", rows=[[1, 10, 1], [2, 20, 2]], frame=True)
    assert seen["success"], seen["message"]
    assert ids_amounts(table(folder, "plain_orders")) == [(1, 10), (2, 20)]
    assert seen["metadata"]["total"] == 30 and seen["metadata"]["read_back"].startswith("pyspark.sql.connect")


@pytest.mark.parametrize("disposition", ["replace", {"disposition": "merge", "strategy": "scd2"}], ids=["replace", "scd2"])
def test_replace_and_scd2_run_over_connect(disposition, connect_server, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, url)
    assert run(folder, url, asset="orders", disposition=disposition, rows=[[1, 10, 1], [2, 20, 1]], frame=True)["success"]
    second = run(folder, url, asset="orders", disposition=disposition, rows=[[2, 21, 2]], frame=True)
    assert second["success"], second["message"]
    rows = table(folder, "orders")
    if disposition == "replace":
        assert ids_amounts(rows) == [(2, 21)]
    else:  # a full snapshot: id 2's old version closed and its new one current, id 1 (absent) retired
        current = sorted((r["id"], r["amount"]) for r in rows if r["_valid_to"] is None)
        closed = sorted((r["id"], r["amount"]) for r in rows if r["_valid_to"] is not None)
        assert current == [(2, 21)] and closed == [(1, 10), (2, 20)]
    assert second["metadata"]["dagster_incremental/state"]["last_value"] == "2024-01-02T00:00:00Z"


def _settled(folder: Path, name: str, quiet: float = 5.0) -> list[int]:
    """The table's versions once its log has not grown for `quiet` s: a killed client's statement
    may still commit on the server."""
    seen, since = versions(folder, name), time.monotonic()
    deadline = since + 120
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the table's log never settled"
        time.sleep(0.5)
        now = versions(folder, name)
        if now != seen:
            seen, since = now, time.monotonic()
    return seen


@pytest.mark.parametrize("on_s3", [IN_A_FOLDER, ON_S3])
@pytest.mark.parametrize("point", ["during-commit", "after-commit"])
def test_a_run_killed_while_it_commits_is_healed_by_the_next(point, on_s3, connect_server, s3, tmp_path):
    """SIGKILL while the server runs the commit's statement, or after it committed and before
    Dagster recorded the run: whatever the server did with the statement, the next run loads
    every row exactly once and its cursor is the source's newest (an append doubles any row
    loaded twice)."""
    url = connect_server.url
    folder = project(tmp_path, url, s3=s3 if on_s3 else None)
    source = [[1, 10, 1]]
    assert run(folder, url, asset="orders", disposition="append", rows=source, frame=True)["success"]
    source += [[2, 20, 2], [3, 30, 2]]
    killed = start(folder, url, asset="orders", disposition="append", rows=source, frame=True, kill=point)
    killed.communicate(timeout=300)
    assert killed.returncode == -9, f"the run was not killed at {point}"
    _settled(folder, "orders")  # seen here: the server commits the dead client's statement after it died
    source += [[4, 40, 3]]
    healed = run(folder, url, asset="orders", disposition="append", rows=source, frame=True, lease_seconds=3)
    assert healed["success"], healed["message"]
    assert ids_amounts(table(folder, "orders")) == [(1, 10), (2, 20), (3, 30), (4, 40)]  # each once
    assert healed["metadata"]["dagster_incremental/state"]["last_value"] == "2024-01-03T00:00:00Z"
    assert committed(folder, "orders").state["last_value"] == "2024-01-03T00:00:00Z"
