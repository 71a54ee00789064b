"""Iceberg tables over Spark Connect, in the REST and JDBC catalogs: `[spark] remote` with an
Iceberg destination runs every disposition through a Connect session on a real server
(tests/connect_server.py, configured with the same catalogs), a stale run and a race included,
with no py4j call and no JVM in the Dagster process (tests/connect_runner.py fences them).
The run checks its cursor and publishes its branch through the catalog with pyiceberg; the
server writes the rows. What is checked is what a user sees: the table's rows and the cursor its
commit carries (read by pyiceberg), the materialization's metadata, the errors.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from test_connect_delta import DELETE_INSERT, UPSERT, _held, _wait_for, finish, ids_amounts, run, start

pytestmark = [pytest.mark.spark, pytest.mark.connect]

REST, JDBC = "rest", "jdbc"


def project(tmp_path: Path, url: str, catalog, name: str = "p") -> Path:
    """A project folder whose config.toml names the server in [spark] remote and an Iceberg
    destination in `catalog` (its keys in [spark.conf], its secrets in the runner's environment),
    in a namespace of its own."""
    folder = tmp_path / name
    (folder / "config").mkdir(parents=True)
    (folder / "home").mkdir()
    namespace = f"ci_{uuid.uuid4().hex[:8]}"
    (folder / "config" / "config.toml").write_text(f'[spark]\nremote = "{url}"\n\n' + catalog.config_toml(namespace))
    (folder / "namespace").write_text(namespace)
    return folder


def loaded(folder: Path, catalog, name: str):
    namespace = (folder / "namespace").read_text()
    return catalog.pyiceberg().load_table((namespace, name))


def rows(folder: Path, catalog, name: str = "orders", key: str = "id") -> list[dict]:
    return sorted(loaded(folder, catalog, name).scan().to_arrow().to_pylist(), key=lambda r: r[key])


def committed(folder: Path, catalog, name: str = "orders", scope: str | None = None):
    from dagster_incremental.spark.iceberg.metadata import pyiceberg_metadata

    return pyiceberg_metadata(loaded(folder, catalog, name)).committed_cursor(scope)


def snapshots(folder: Path, catalog, name: str = "orders") -> int:
    return len(loaded(folder, catalog, name).metadata.snapshots)


def branches(folder: Path, catalog, name: str = "orders") -> list[str]:
    return sorted(loaded(folder, catalog, name).metadata.refs)


@pytest.fixture(params=[REST, JDBC])
def catalog(request, connect_server):
    return request.getfixturevalue(f"{request.param}_catalog")


def go(folder: Path, url: str, catalog, **run_args) -> dict:
    return run(folder, url, env=catalog.environment(), **run_args)


@pytest.mark.parametrize(("kind", "frame"), [(REST, True), (JDBC, False)], ids=["rest-connect-frame", "jdbc-dict-rows"])
def test_every_disposition_runs_over_connect_without_a_jvm(kind, frame, connect_server, tmp_path, request):
    """Each catalog with one kind of input (a Connect DataFrame; dict rows, which pyiceberg
    commits in the run's process where it can and the server writes otherwise)."""
    url, catalog = connect_server.url, request.getfixturevalue(f"{kind}_catalog")
    folder = project(tmp_path, url, catalog)
    first = go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[1, 10, 1], [2, 20, 2]], frame=frame)
    assert first["success"], first["message"]
    second = go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[2, 21, 3], [3, 30, 3]], frame=frame)
    assert second["success"], second["message"]
    assert ids_amounts(rows(folder, catalog)) == [(1, 10), (2, 21), (3, 30)]
    meta = second["metadata"]
    assert meta["dagster_incremental/state"]["last_value"] == "2024-01-03T00:00:00Z"
    assert (meta["dagster_incremental/rows_inserted"], meta["dagster_incremental/rows_updated"]) == (1, 1)
    assert meta["dagster/row_count"] == 3
    held = committed(folder, catalog)
    assert held is not None and held.state["last_value"] == "2024-01-03T00:00:00Z"
    assert branches(folder, catalog) == ["main"]  # the runs' branches were removed when published

    appended = project(tmp_path, url, catalog, "append")
    for batch in ([[1, 10, 1]], [[2, 20, 2], [3, 30, 2]]):
        done = go(appended, url, catalog, asset="orders", disposition="append", rows=batch, frame=frame)
        assert done["success"], done["message"]
    assert ids_amounts(rows(appended, catalog)) == [(1, 10), (2, 20), (3, 30)]

    keyed = project(tmp_path, url, catalog, "delete_insert")
    assert go(keyed, url, catalog, asset="orders", disposition=DELETE_INSERT, rows=[[1, 10, 1], [2, 20, 1]], frame=frame)["success"]
    again = go(keyed, url, catalog, asset="orders", disposition=DELETE_INSERT, rows=[[2, 22, 2], [4, 40, 2]], frame=frame)
    assert again["success"], again["message"]
    assert ids_amounts(rows(keyed, catalog)) == [(1, 10), (2, 22), (4, 40)]
    assert committed(keyed, catalog).state["last_value"] == "2024-01-02T00:00:00Z"

    replaced = project(tmp_path, url, catalog, "replace")
    for batch in ([[1, 10, 1], [2, 20, 1]], [[5, 50, 2]]):
        done = go(replaced, url, catalog, asset="orders", disposition="replace", rows=batch, frame=frame)
        assert done["success"], done["message"]
    assert ids_amounts(rows(replaced, catalog)) == [(5, 50)]
    assert done["metadata"]["dagster_incremental/rows_deleted"] == 2


def test_what_the_run_committed_in_process_is_what_its_connect_session_reads_next(jdbc_catalog, connect_server, tmp_path):
    """Local rows upserted by pyiceberg in the run's process (no statement on the server): the
    server's session caches the table, and its next read in that process (a downstream asset, a
    second run) sees the new commit all the same."""
    url, catalog = connect_server.url, jdbc_catalog
    folder = project(tmp_path, url, catalog)
    seen = go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[1, 10, 1], [2, 20, 1]],
              then_rows=[[2, 21, 2], [3, 30, 2]], count=True)
    assert seen["success"], seen["message"]
    assert seen["metadata"]["rows_seen"] == 3
    assert ids_amounts(rows(folder, catalog)) == [(1, 10), (2, 21), (3, 30)]


def test_a_full_refresh_over_connect_replaces_the_table_and_resets_the_cursor(catalog, connect_server, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, url, catalog)
    assert go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[1, 10, 5], [2, 20, 6]], frame=True)["success"]
    refreshed = go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[7, 70, 2]], frame=True, full_refresh=True)
    assert refreshed["success"], refreshed["message"]
    assert ids_amounts(rows(folder, catalog)) == [(7, 70)]
    assert committed(folder, catalog).state["last_value"] == "2024-01-02T00:00:00Z"  # back, not the max


@pytest.mark.parametrize(("kind", "frame"), [(REST, True), (JDBC, False)], ids=["rest-spark-merge", "jdbc-pyiceberg-upsert"])
def test_a_changes_chain_reads_only_what_an_iceberg_upstream_committed_since_over_connect(kind, frame, connect_server,
                                                                                          tmp_path, request):
    """A downstream asset's `Changes` of an Iceberg upstream, over Connect: the first run reads
    the whole upstream, the next exactly the rows the upstream's merge changed (the old version
    of an updated row gone, its new version and a new row inserted), and the downstream's commit
    carries the upstream snapshot read up to. The upstream's merge is the server's MERGE (its
    gone rows told by position-delete files) on one catalog and pyiceberg's upsert in the run's
    process (by data files it removed) on the other."""
    url, catalog = connect_server.url, request.getfixturevalue(f"{kind}_catalog")
    folder = project(tmp_path, url, catalog)
    done = go(folder, url, catalog, asset="chain", disposition=UPSERT, rows=[[1, 10, 1], [2, 20, 1]],
              then_rows=[[2, 21, 2], [3, 30, 2]], frame=frame)
    assert done["success"], done["message"]
    assert done["java"] == [] and done["caught"] == []
    assert done["changes_read"] == [[2, 20, "DELETE"], [2, 21, "INSERT"], [3, 30, "INSERT"]]
    upstream = loaded(folder, catalog, "orders")
    told_by = "added-position-delete-files" if frame else "deleted-data-files"  # the path the docstring names
    assert int(upstream.current_snapshot().summary[told_by]) > 0
    read = done["metadata"]["dagster_incremental/upstream"]["orders"]
    assert read["read"] == "changes" and read["snapshot_id"] == str(upstream.metadata.current_snapshot_id)
    assert ids_amounts(rows(folder, catalog, "orders_copy")) == [(1, 10), (2, 21), (3, 30)]
    held = committed(folder, catalog, "orders_copy")
    assert held is not None and held.state["upstream"]["orders"]["snapshot_id"] == upstream.metadata.current_snapshot_id


def test_a_run_whose_cursor_went_stale_over_connect_writes_nothing(catalog, connect_server, tmp_path):
    """Run A reads its cursor, then run B commits; A's commit is refused and writes nothing."""
    url = connect_server.url
    folder = project(tmp_path, url, catalog)
    assert go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[1, 10, 1]], frame=True)["success"]
    slow, ready, go_file = _held(folder, url, "a", [[2, 20, 2]], env=catalog.environment())
    _wait_for(ready, slow)
    fast = go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[3, 30, 3]], frame=True)
    assert fast["success"], fast["message"]
    count = snapshots(folder, catalog)
    go_file.write_text("")
    stale = finish(slow)
    assert not stale["success"]
    assert "another run" in stale["message"] and "wrote nothing" in stale["message"]
    assert ids_amounts(rows(folder, catalog)) == [(1, 10), (3, 30)]
    assert committed(folder, catalog).state["last_value"] == "2024-01-03T00:00:00Z"
    assert snapshots(folder, catalog) == count and branches(folder, catalog) == ["main"]


def test_of_two_racing_runs_over_connect_one_commits_and_the_other_writes_nothing(catalog, connect_server, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, url, catalog)
    assert go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[1, 10, 1]], frame=True)["success"]
    racers = [_held(folder, url, tag, [[2, 20, 2], [3, 30, 2]], env=catalog.environment()) for tag in ("a", "b")]
    for process, ready, _ in racers:
        _wait_for(ready, process)
    for _, _, go_file in racers:
        go_file.write_text("")
    seen = [finish(process) for process, _, _ in racers]
    assert sorted(s["success"] for s in seen) == [False, True], [s["message"] for s in seen]
    loser = next(s for s in seen if not s["success"])
    # refused at its publish ("another run ... wrote nothing") or, when the other run's snapshot took
    # the sequence number its branch commit carries, at that commit (the REST server refuses it)
    assert "wrote nothing" in loser["message"] or "nothing was written" in loser["message"], loser["message"][:4000]
    assert ids_amounts(rows(folder, catalog)) == [(1, 10), (2, 20), (3, 30)]  # one copy
    assert committed(folder, catalog).state["last_value"] == "2024-01-02T00:00:00Z"
    assert branches(folder, catalog) == ["main"], loser["message"][:4000]  # the loser's branch dropped


def test_an_iceberg_table_in_a_folder_over_connect_is_refused_naming_the_catalog(connect_server, tmp_path):
    from catalogs import hadoop_catalog

    url = connect_server.url
    catalog = hadoop_catalog(str(tmp_path / "warehouse"))
    folder = project(tmp_path, url, catalog)
    seen = go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[1, 10, 1]], frame=False)
    assert not seen["success"]
    message = seen["message"]
    assert "[spark] remote" in message and "JDBC or REST catalog" in message and f"catalog {catalog.name!r}" in message
    assert f'"spark.sql.catalog.{catalog.name}.type" = "jdbc" or "rest"' in message and "Nothing was written" in message
    assert url not in message and "127.0.0.1" not in message  # never the URL: it may carry a token
    assert not any((tmp_path / "warehouse").rglob("*.parquet"))


@pytest.mark.parametrize("strategy", ["scd2", "insert-only"])
def test_scd2_and_insert_only_run_over_connect(strategy, catalog, connect_server, tmp_path):
    """Two runs in one process, each committed by the catalog's compare-and-set."""
    url = connect_server.url
    folder = project(tmp_path, url, catalog)
    disposition = {"disposition": "merge", "strategy": strategy}
    second = go(folder, url, catalog, asset="orders", disposition=disposition, rows=[[1, 10, 1], [2, 20, 1]],
                then_rows=[[2, 21, 2], [3, 30, 2]], frame=True)
    assert second["success"], second["message"]
    assert snapshots(folder, catalog) == 2 and branches(folder, catalog) == ["main"]
    found = rows(folder, catalog)
    if strategy == "insert-only":  # a key already there keeps its row
        assert ids_amounts(found) == [(1, 10), (2, 20), (3, 30)]
    else:  # a full snapshot: id 2's old version closed and its new one current, id 1 (absent) retired
        current = sorted((r["id"], r["amount"]) for r in found if r["_valid_to"] is None)
        closed = sorted((r["id"], r["amount"]) for r in found if r["_valid_to"] is not None)
        assert current == [(2, 21), (3, 30)] and closed == [(1, 10), (2, 20)]
    assert committed(folder, catalog).state["last_value"] == "2024-01-02T00:00:00Z"


def test_a_partition_backfill_over_connect_loads_its_window_and_leaves_the_live_cursor(catalog, connect_server, tmp_path):
    url = connect_server.url
    folder = project(tmp_path, url, catalog)
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    days = [today - timedelta(days=d) for d in (2, 1, 0)]
    source = [[f"e{d}-{h}", d * 10 + h, (day + timedelta(minutes=h)).isoformat()] for d, day in enumerate(days) for h in (1, 2)]
    keys = [d.strftime("%Y-%m-%d") for d in days]
    common = dict(asset="events", disposition={"disposition": "merge"}, start=keys[0])

    live = go(folder, url, catalog, rows=source, partition=keys[2], **common)
    assert live["success"], live["message"]
    scope = live["metadata"].get("dagster_incremental/scope")
    live_cursor = committed(folder, catalog, "events", scope)
    backfill = go(folder, url, catalog, partition=keys[1], **common,
                  rows=[r for r in source if r[0] != "e1-1"] + [["e1-3", 99, (days[1] + timedelta(minutes=3)).isoformat()]])
    assert backfill["success"], backfill["message"]
    assert backfill["metadata"]["dagster_incremental/mode"] == "backfill"
    assert [r["event_id"] for r in rows(folder, catalog, "events", "event_id")] == ["e1-2", "e1-3", "e2-1", "e2-2"]
    after = committed(folder, catalog, "events", scope)
    assert after is not None and live_cursor is not None and after.state == live_cursor.state  # not moved
    assert after.snapshot_id == live_cursor.snapshot_id


@pytest.mark.parametrize("frame", [True, False], ids=["connect-frame", "dict-rows"])
def test_a_table_created_empty_gets_its_first_rows_and_cursor_over_connect(frame, catalog, connect_server, tmp_path):
    """A table another tool created empty (no snapshot to branch at): the first run over Connect
    loads its rows and commits its cursor on `main`, by the catalog's compare-and-set as ever."""
    import pyarrow as pa

    url = connect_server.url
    folder = project(tmp_path, url, catalog)
    namespace = (folder / "namespace").read_text()
    pyiceberg = catalog.pyiceberg()
    pyiceberg.create_namespace_if_not_exists(namespace)
    created = pyiceberg.create_table((namespace, "orders"), pa.schema(
        [("id", pa.int64()), ("amount", pa.int64()), ("updated_at", pa.timestamp("us", tz="UTC"))]))
    assert snapshots(folder, catalog) == 0
    done = go(folder, url, catalog, asset="orders", disposition=UPSERT, rows=[[1, 10, 1], [2, 20, 2]], frame=frame)
    assert done["success"], done["message"]
    assert ids_amounts(rows(folder, catalog)) == [(1, 10), (2, 20)]
    assert committed(folder, catalog).state["last_value"] == "2024-01-02T00:00:00Z"
    assert branches(folder, catalog) == ["main"]
    assert loaded(folder, catalog, "orders").metadata.table_uuid == created.metadata.table_uuid  # that table, not a new one


def test_a_sliced_run_over_connect_keeps_the_slices_before_a_failure_and_the_next_run_continues(catalog, connect_server,
                                                                                                  tmp_path):
    """`step` cuts a run over four days into daily slices, one catalog commit each. The source
    fails in the third: the two slices before it stay committed with their cursor, and the next
    run loads from there, each row once."""
    url = connect_server.url
    folder = project(tmp_path, url, catalog)
    base = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    source = dict(asset="orders", disposition="append", rows=[[1, 10, 1], [2, 20, 2], [3, 30, 3], [4, 40, 4]],
                  base=base.isoformat(), step="P1D", frame=True)
    failed = go(folder, url, catalog, **source, fail_at=3)
    assert not failed["success"] and "source down in call 3" in failed["message"]
    assert ids_amounts(rows(folder, catalog)) == [(1, 10), (2, 20)] and snapshots(folder, catalog) == 2
    assert committed(folder, catalog).state["last_value"].startswith((base + timedelta(days=1, hours=1)).strftime("%Y-%m-%dT%H"))
    done = go(folder, url, catalog, **source)
    assert done["success"], done["message"]
    committed_slices, planned = done["metadata"]["dagster_incremental/slices"]
    assert committed_slices == planned >= 2
    assert ids_amounts(rows(folder, catalog)) == [(1, 10), (2, 20), (3, 30), (4, 40)]  # each once
    assert committed(folder, catalog).state["last_value"].startswith((base + timedelta(days=3, hours=1)).strftime("%Y-%m-%dT%H"))
    assert branches(folder, catalog) == ["main"]


def test_each_tenant_keeps_its_own_cursor_over_connect(catalog, connect_server, tmp_path):
    """Static partitions (tenants) over Connect: each tenant's run commits its own cursor with its
    rows (the server's MERGE on (tenant, id)), and a run of one leaves the other's rows and
    cursor as they were."""
    url = connect_server.url
    folder = project(tmp_path, url, catalog)
    source = [["acme", 1, 10, 1], ["acme", 2, 20, 3], ["globex", 1, 100, 5]]
    common = dict(asset="tenants", disposition=UPSERT, frame=True)
    acme = go(folder, url, catalog, rows=source, partition="acme", **common)
    globex = go(folder, url, catalog, rows=source, partition="globex", **common)
    assert acme["success"] and globex["success"], (acme["message"], globex["message"])
    # a tenant's cursor is kept under its partition key
    globex_cursor = committed(folder, catalog, "tenant_orders", "globex")
    assert globex_cursor.state["last_value"] == "2024-01-05T00:00:00Z"
    assert committed(folder, catalog, "tenant_orders", "acme").state["last_value"] == "2024-01-03T00:00:00Z"

    again = go(folder, url, catalog, rows=[*source, ["acme", 1, 11, 9]], partition="acme", **common)
    assert again["success"], again["message"]
    found = sorted((r["tenant"], r["id"], r["amount"]) for r in rows(folder, catalog, "tenant_orders"))
    assert found == [("acme", 1, 11), ("acme", 2, 20), ("globex", 1, 100)]  # the same id in two tenants: two rows
    assert committed(folder, catalog, "tenant_orders", "acme").state["last_value"] == "2024-01-09T00:00:00Z"
    assert committed(folder, catalog, "tenant_orders", "globex").state == globex_cursor.state


def _settled(folder: Path, catalog, quiet: float = 5.0) -> None:
    """Once the table's metadata has not changed for `quiet` s: a killed client's statement may
    still commit on the server (onto the run's branch)."""
    seen, since = loaded(folder, catalog, "orders").metadata_location, time.monotonic()
    deadline = since + 120
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the table's metadata never settled"
        time.sleep(0.5)
        now = loaded(folder, catalog, "orders").metadata_location
        if now != seen:
            seen, since = now, time.monotonic()


@pytest.mark.parametrize(("kind", "point"), [(REST, "during-commit"), (REST, "after-commit"), (JDBC, "during-commit")])
def test_a_run_killed_while_it_commits_over_connect_is_healed_by_the_next(kind, point, connect_server, tmp_path, request):
    """SIGKILL while the server runs the commit's statement, or after the run published its
    branch and before Dagster recorded the run: the next run loads every row exactly once (an
    append doubles any row loaded twice) and its cursor is the source's newest."""
    url, catalog = connect_server.url, request.getfixturevalue(f"{kind}_catalog")
    folder = project(tmp_path, url, catalog)
    source = [[1, 10, 1]]
    assert go(folder, url, catalog, asset="orders", disposition="append", rows=source, frame=True)["success"]
    source += [[2, 20, 2], [3, 30, 2]]
    killed = start(folder, url, catalog.environment(), asset="orders", disposition="append", rows=source, frame=True,
                   kill=point)
    killed.communicate(timeout=300)
    assert killed.returncode == -9, f"the run was not killed at {point}"
    _settled(folder, catalog)
    source += [[4, 40, 3]]
    healed = go(folder, url, catalog, asset="orders", disposition="append", rows=source, frame=True)
    assert healed["success"], healed["message"]
    assert ids_amounts(rows(folder, catalog)) == [(1, 10), (2, 20), (3, 30), (4, 40)]  # each once
    assert healed["metadata"]["dagster_incremental/state"]["last_value"] == "2024-01-03T00:00:00Z"
    assert committed(folder, catalog).state["last_value"] == "2024-01-03T00:00:00Z"
