"""Two runs of the same asset started together, in two processes (tests/fault_runner.py, no fault).

The claim (issue 5): no lost cursor update and no duplicate row; the loser either fails with a
message saying another run holds the asset (or committed first), or waits its turn and then
loads nothing twice. Runs here use the documented instance setup (pools limited to one run).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance import DagsterInstance, InstanceRef

import preloaded
from attack_support import committed_states, dagster_state, failure_text, io_manager_for, materialize, rows, source_asset, table_id, write_config
from race_runner import assert_only_winners_committed

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent


def _start(base: Path, home: Path, config: str, warehouse: str, namespace: str, name: str, strategy: str,
           source: list[dict], tag: str) -> tuple[preloaded.Runner, Path, Path]:
    """One runner process; its output goes to files, not pipes: a process blocked on a full pipe
    that nobody reads yet would hold its asset's pool slot, and the other would wait for ever."""
    src = base / f"{name}.json"
    src.write_text(json.dumps(source))
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(home), FAULT_CONFIG=config, FAULT_SOURCE=str(src), FAULT_ASSET=name, FAULT_STRATEGY=strategy,
        FAULT_POINT="none", FAULT_WAREHOUSE=warehouse, FAULT_NAMESPACE=namespace, SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=str(ROOT),
    )
    out, err = base / f"{tag}.out", base / f"{tag}.err"
    return preloaded.start([str(ROOT / "tests" / "fault_runner.py")], env, ROOT, out, err), out, err


def _wait_all(started: list[tuple[preloaded.Runner, Path, Path]], instance: DagsterInstance, pools: list[str],
              timeout: float) -> None:
    """Wait for every runner; one still running after `timeout` s fails the test with their logs.

    Dagster's pool queue (1.13, op granularity) can strand a waiting step: it checks for a free
    slot, the other run frees its slot and assigns it to nobody, then the step queues itself
    unassigned, and it waits until the pool's next run frees a slot. Here no next run comes, so
    the wait does what that run would: assign the free slot once the step has waited 5 s with the
    slot free (docs/concurrency-and-guarantees.md, "Concurrency")."""
    deadline = time.monotonic() + timeout
    while any(proc.poll() is None for proc, _, _ in started):
        if time.monotonic() > deadline:
            for proc, _, _ in started:
                proc.kill()
                proc.wait()
            pytest.fail("a racing run hung:\n" + "\n".join(err.read_text()[-3000:] for _, _, err in started))
        _assign_a_stranded_slot(instance, pools)
        time.sleep(0.5)


def _assign_a_stranded_slot(instance: DagsterInstance, pools: list[str]) -> None:
    storage = instance.event_log_storage
    now = datetime.now(timezone.utc)
    for pool in pools:
        info = storage.get_concurrency_info(pool)
        stranded = [step for step in info.pending_steps if step.assigned_timestamp is None
                    and (now - step.enqueued_timestamp).total_seconds() > 5]
        if stranded and not info.claimed_slots and not info.assigned_step_count:
            storage.assign_pending_steps([pool])


STRATEGIES = ("append", "upsert")
SOURCE = [{"id": i, "amount": i, "updated": i} for i in range(1, 4)]
# between the first run and the race: new rows sharing one cursor value, and an update
RACED = [{"id": 1, "amount": 100, "updated": 5}, *SOURCE[1:], *({"id": i, "amount": i, "updated": 4} for i in range(4, 7))]


@pytest.fixture(scope="module")
def race(spark, spark_warehouse, tmp_path_factory):
    """One asset per strategy, a first run, then two processes that materialize both at once."""
    base = tmp_path_factory.mktemp("race")
    home = base / "dagster_home"
    home.mkdir()
    # The documented setup (docs/concurrency-and-guarantees.md, "Concurrency"): every pool limited to one run, so each
    # incremental asset's pool (incremental/<asset>) makes the second run wait its turn.
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 1\n"
    )
    namespace = "conc_" + uuid.uuid4().hex[:8]
    config = write_config(base / "config.toml", spark_warehouse, namespace)
    io = io_manager_for(spark_warehouse, namespace)
    feed = {"rows": list(SOURCE)}
    assets = {s: source_asset("c_" + s, config, s, lambda: list(feed["rows"])) for s in STRATEGIES}
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        for asset in assets.values():
            assert materialize(asset, instance, io).success
        names = ",".join(f"c_{s}:{s}" for s in STRATEGIES)
        pools = [f"incremental/c_{s}" for s in STRATEGIES]
        assert all(instance.event_log_storage.get_concurrency_info(p).slot_count == 1 for p in pools), "not the assets' pools"
        started = [_start(base, home, config, spark_warehouse, namespace, names, "", RACED, f"run{i}") for i in range(2)]
        _wait_all(started, instance, pools, timeout=300)
        outs = [(out.read_text(), err.read_text()) for _, out, err in started]
        for s in STRATEGIES:
            spark.sql(f"REFRESH TABLE {table_id(io, 'c_' + s)}")  # other processes wrote the tables
        yield instance, io, assets, feed, outs


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_processes_on_one_asset_lose_no_cursor_and_double_no_row(strategy, spark, race):
    instance, io, assets, feed, outs = race
    name = "c_" + strategy
    lines = [line for out, _ in outs for line in out.splitlines() if line.startswith("STEP_") and f" {name}" in line]
    logs = "\n".join(out + err[-2000:] for out, err in outs)
    assert len(lines) == 2, f"both processes must report a step for {name}:\n{logs}"
    assert any(line.startswith("STEP_OK") for line in lines), f"neither run of {name} succeeded:\n{logs}"
    for line in lines:
        if line.startswith("STEP_FAILED"):  # the loser says why
            assert "another" in line and ("run" in line or "writer" in line), line

    expected = sorted({(r["id"], r["amount"], r["updated"]) for r in RACED} | (
        {(1, 1, 1)} if strategy == "append" else set()), key=repr)
    assert rows(spark, io, name, ["id", "amount", "updated"]) == expected, "a row was lost or doubled"
    assert dagster_state(instance, name)["last_value"] == 5
    assert committed_states(spark, io, name)[-1]["last_value"] == 5

    # and the next run after the race loads nothing twice
    feed["rows"] = [*RACED, {"id": 7, "amount": 7, "updated": 6}]
    again = materialize(assets[strategy], instance, io)
    assert again.success, failure_text(again)
    assert rows(spark, io, name, ["id", "amount", "updated"]) == sorted([*expected, (7, 7, 6)], key=repr)



@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_run_that_lost_or_waited_wrote_nothing_of_its_own(strategy, spark, race):
    """Every commit in the table's history is a successful run's, each once: the loser (if one
    lost) left no commit, not even an empty one."""
    instance, io, *_ = race
    name = "c_" + strategy
    winners = {r.run_id for r in instance.fetch_materializations(dg.AssetKey(name), limit=1000).records}
    assert_only_winners_committed(spark, io.table_name(dg.AssetKey(name)), winners)
