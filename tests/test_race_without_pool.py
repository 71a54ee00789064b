"""Three processes materialize the same four assets at once, round after round, with no
concurrency pool: each commit is a compare-and-set on the snapshot its run read, so no row is
doubled or lost, the cursor ends at the source's high-water mark, and a run that lost a race
fails saying another run committed first. On each catalog kind: the Hadoop folder (file lock +
compare-and-set), a JDBC catalog on PostgreSQL and a REST catalog (the catalog's atomic commit
alone), Delta on a disk and on S3 (the commit log's put-if-absent, the commit lease).

One race window serves every kind: the three processes start once, each with one Spark session
that knows every catalog kind, and each round materializes the four assets of every kind in turn
(tests/race_runner.py); each kind has its own Dagster instance, so what a test checks of one kind
is what a window of that kind alone would leave.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance import DagsterInstance, InstanceRef

import preloaded
from attack_support import committed_states, dagster_state, failure_text, rows, scd2_rows, source_asset, table_id
from catalogs import CATALOG_KINDS, ICEBERG_ONLY, assert_other_readers_agree, delta_catalog, hadoop_catalog, to_env
from race_runner import STRATEGIES, assert_only_winners_committed, asset_name, history_commits, source_rows
from instances import RUNNER_HOME_YAML

# The first test's setup races every kind (race_window): on a loaded two-core machine that alone
# took about 15 minutes, the suite's per-test bound (pyproject's `timeout`).
pytestmark = [pytest.mark.spark, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = 3  # two losers for each winner; a fourth process cost a JVM and a quarter more runs per round
TICK = 0.1  # seconds per source tick
COMMITS = 2  # the source grows until each asset has this many successful runs ...
RACE = (20, 600)  # ... and at least 20 s, at most 600 s (a round runs 20 assets: 4 per kind; a slow machine runs fewer)


@dataclass(frozen=True)
class Window:
    """What one race of every catalog kind left: per kind its namespace (its own, as a window of
    it alone had: the Hadoop and Delta kinds share the catalog name `lake`), Dagster home and
    config.toml; the processes' (stdout, stderr); the source's end (its tick count)."""

    namespaces: dict[str, str]
    homes: dict[str, Path]
    configs: dict[str, str]
    outs: list[tuple[str, str]]
    end: int

    def outs_of(self, kind: str) -> list[tuple[str, str]]:
        """Each process's (step lines of `kind`, without the kind, as a window of it alone prints them; stderr)."""
        prefix = kind + " "
        return [("\n".join(line[len(prefix):] for line in out.splitlines() if line.startswith(prefix)), err)
                for out, err in self.outs]


@pytest.fixture(scope="session")
def race_window(request, spark_warehouse, tmp_path_factory) -> Window:
    """Race the processes once for every catalog kind (session scope: it never runs twice,
    however the tests of the kinds are ordered)."""
    base = tmp_path_factory.mktemp("race_no_pool")
    run = uuid.uuid4().hex[:8]
    namespaces = {kind: f"race_{kind.replace('-', '_')}_{run}" for kind in CATALOG_KINDS}
    catalogs = {kind: _catalog_of(request, kind, spark_warehouse) for kind in CATALOG_KINDS}
    homes, configs = {}, {}
    for kind, catalog in catalogs.items():
        homes[kind] = base / f"dagster_home_{kind}"
        homes[kind].mkdir()
        (homes[kind] / "dagster.yaml").write_text(RUNNER_HOME_YAML)  # no pool limit anywhere
        with DagsterInstance.from_ref(InstanceRef.from_dir(str(homes[kind]))):
            pass  # create the instance's databases once, before three processes open them at once
        configs[kind] = str(base / f"config_{kind}.toml")
        Path(configs[kind]).write_text(catalog.config_toml(namespaces[kind]))
    race_dir = base / "race"
    race_dir.mkdir()
    kinds = {kind: {"catalog": to_env(c), "namespace": namespaces[kind], "config": configs[kind], "home": str(homes[kind])}
             for kind, c in catalogs.items()}
    secrets = {k: v for c in catalogs.values() for k, v in c.environment().items()}
    env = dict(os.environ, **secrets, RACE_KINDS=json.dumps(kinds), RACE_WAREHOUSE=spark_warehouse,
               RACE_DIR=str(race_dir), RACE_TICK=str(TICK),
               SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(ROOT))
    logs = [(race_dir / f"{i}.out", race_dir / f"{i}.err") for i in range(PROCESSES)]
    procs = [_runner(env, out, err) for out, err in logs]  # files, not pipes: nobody reads a pipe meanwhile
    t0 = _start_when_ready(race_dir, procs, [err for _, err in logs])
    end = _stop_source(race_dir, t0, [out for out, _ in logs])
    for p in procs:
        p.wait(timeout=600)
    outs = [(out.read_text(), err.read_text()) for out, err in logs]
    return Window(namespaces, homes, configs, outs, end)


def _catalog_of(request, kind: str, spark_warehouse: str):
    """The catalog of `kind` as the `catalog` fixture gives it (its servers started once per session)."""
    if kind == "hadoop":
        return hadoop_catalog(spark_warehouse)
    if kind == "delta":
        return delta_catalog(spark_warehouse)
    return request.getfixturevalue(f"{kind.replace('-', '_')}_catalog")


@pytest.fixture(scope="module")
def race(spark, catalog, race_window):
    """What the race left on `catalog`'s kind: its Dagster instance, an IO manager on its tables,
    the assets, the source's rows, the processes' step lines of this kind, the source's end."""
    window, end = race_window, race_window.end
    io = catalog.io_manager(window.namespaces[catalog.kind])
    full = {s: source_rows(s, end) for s in STRATEGIES}
    assets = {s: source_asset(asset_name(s), window.configs[catalog.kind], s, lambda s=s: full[s],
                              merge_key="id" if s == "scd2" else None)
              for s in STRATEGIES}
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(window.homes[catalog.kind]))) as instance:
        for s in STRATEGIES:
            spark.sql(f"REFRESH TABLE {table_id(io, asset_name(s))}")  # other processes wrote the tables
        yield instance, io, assets, full, window.outs_of(catalog.kind), end


def _runner(env: dict[str, str], out: Path, err: Path) -> preloaded.Runner:
    return preloaded.start([str(ROOT / "tests" / "race_runner.py")], env, ROOT, out, err)


def _start_when_ready(race_dir: Path, procs: list[preloaded.Runner], errs: list[Path]) -> float:
    """Start the source's clock once every process has its Spark session, however slow the
    machine: all of them race from the first tick."""
    deadline = time.time() + 600
    while len(list(race_dir.glob("ready-*"))) < len(procs):
        if any(p.poll() is not None for p in procs) or time.time() > deadline:
            for p in procs:
                p.kill()
                p.wait()
            pytest.fail("a race process ended or hung before the race:\n" + "\n".join(e.read_text()[-3000:] for e in errs))
        time.sleep(0.1)
    t0 = time.time() + 0.5
    _write_whole(race_dir / "start", str(t0))
    return t0


def _stop_source(race_dir: Path, t0: float, outs: list[Path]) -> int:
    """Stop the source's growth once every asset of every kind has COMMITS successful runs in the race (and
    RACE[0] s have passed; RACE[1] s at most): its end, one second ahead of any tick a process
    has seen, so no process ever saw a row the end leaves out."""
    while True:
        elapsed = time.time() - t0
        lines = [line for out in outs for line in out.read_text().splitlines()]
        fewest = min(sum(line == f"{kind} STEP_OK {asset_name(s)}" for line in lines)
                     for kind in CATALOG_KINDS for s in STRATEGIES)
        if elapsed >= RACE[1] or (elapsed >= RACE[0] and fewest >= COMMITS):
            end = int(elapsed / TICK) + 1 + int(1 / TICK)
            _write_whole(race_dir / "end", str(end))
            return end
        time.sleep(0.5)


def _write_whole(path: Path, text: str) -> None:
    """Readers see the file whole or not at all."""
    path.with_suffix(".tmp").write_text(text)
    path.with_suffix(".tmp").rename(path)


def _steps(outs, name: str) -> list[str]:
    return [line for out, _ in outs for line in out.splitlines() if line.split(" ")[:2][-1:] == [name]]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_racing_processes_double_and_lose_no_row(strategy, spark, race, catalog):
    instance, io, assets, full, outs, end = race
    name = asset_name(strategy)
    steps = _steps(outs, name)
    logs = "\n".join(out[-3000:] + err[-3000:] for out, err in outs)
    # progress: several racing runs committed while the source grew
    assert sum(s.startswith("STEP_OK") for s in steps) >= COMMITS, f"too few successful runs in {RACE[1]} s:\n{logs}"
    for line in steps:
        if line.startswith("STEP_FAILED"):  # a lost race, and only that, fails a run
            # (a REST catalog may refuse a losing append's own commit: "another writer committed")
            assert ("another run" in line or "another writer" in line) and "committed" in line, line

    # a last run after the source stopped growing finds nothing new: everything was loaded
    final = dg.materialize([assets[strategy]], instance=instance, resources={"io_manager": io},
                           run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
                           raise_on_error=False)
    assert final.success, failure_text(final)
    expected = _expected(strategy, full[strategy])
    if strategy == "scd2":
        active, retired = scd2_rows(spark, io, name, ["id", "amount", "updated"])
        assert active == expected, "an active version was lost or doubled"
        versions = Counter(active + retired)
        assert max(versions.values()) == 1, "a version was loaded twice"
    else:
        got = rows(spark, io, name, ["id", "amount", "updated"])
        assert got == expected, f"{len(got)} rows, {len(expected)} expected: a row was lost or doubled"
    assert committed_states(spark, io, name)[-1]["last_value"] == end - 1
    assert_other_readers_agree(catalog, spark, io.table_name(dg.AssetKey(name)))
    assert dagster_state(instance, name)["last_value"] == end - 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_run_that_lost_a_race_wrote_nothing(strategy, spark, race):
    """Not even an empty commit: the table's history is the successful runs' commits alone (a
    losing run once left an empty snapshot after the winner's on the REST catalog)."""
    instance, io, *_ = race
    name = asset_name(strategy)
    assert_only_winners_committed(spark, io.table_name(dg.AssetKey(name)), _winners(instance, name))


@pytest.mark.parametrize("strategy", STRATEGIES)
@ICEBERG_ONLY
def test_expiring_all_but_the_current_snapshot_after_the_race_keeps_the_cursor(strategy, spark, race):
    """Routine maintenance after the race: the current snapshot is a winner's and carries the
    cursor, so the next run continues from it and loads nothing twice."""
    instance, io, assets, full, _, end = race
    name = asset_name(strategy)
    table = io.table_name(dg.AssetKey(name))
    ident = ".".join((*table.namespace, table.name))
    spark.sql(f"CALL {table.catalog}.system.expire_snapshots(table => '{ident}', "
              "older_than => TIMESTAMP '9999-12-31 00:00:00', retain_last => 1)")
    assert len(history_commits(spark, table)) == 1
    again = dg.materialize([assets[strategy]], instance=instance, resources={"io_manager": io},
                           run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
                           raise_on_error=False)
    assert again.success, failure_text(again)
    if strategy == "scd2":
        active, _ = scd2_rows(spark, io, name, ["id", "amount", "updated"])
        assert active == _expected(strategy, full[strategy])
    else:
        assert rows(spark, io, name, ["id", "amount", "updated"]) == _expected(strategy, full[strategy])
    assert committed_states(spark, io, name)[-1]["last_value"] == end - 1


def _winners(instance, name: str) -> set[str]:
    """The runs whose step of the asset succeeded (each recorded a materialization)."""
    records = instance.fetch_materializations(dg.AssetKey(name), limit=10_000).records
    return {r.run_id for r in records}


def test_the_processes_did_race(race):
    """Guards the test itself: runs did lose races (else it would prove nothing)."""
    outs = race[4]
    lost = [line for out, _ in outs for line in out.splitlines() if line.startswith("STEP_FAILED")]
    assert lost, "no run lost a race: the processes did not overlap"


def _expected(strategy: str, source: list[dict]) -> list[tuple]:
    if strategy == "append":
        return sorted(((r["id"], r["amount"], r["updated"]) for r in source), key=repr)
    latest = {}
    for r in source:
        latest[r["id"]] = (r["id"], r["amount"], r["updated"])
    return sorted(latest.values(), key=repr)
