"""A run says what it is doing, step by step, in Dagster's log (and so on a terminal)."""

from __future__ import annotations

import dagster as dg
import pytest

from dagster_incremental import Incremental, incremental, incremental_asset
from catalogs import HADOOP_ONLY

pytestmark = pytest.mark.spark

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def progress_lines(instance, result, asset: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(result.run_id) if e.user_message.startswith(f"{asset}: ")]


@HADOOP_ONLY
def test_a_run_logs_its_steps_in_order_and_a_run_with_nothing_new_says_it_commits_nothing(instance, io_manager,
                                                                                          config_file):
    source = [{"id": i, "seq": i} for i in range(1, 4)]

    @incremental_asset(config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        yield list(source)

    def run():
        result = dg.materialize([orders], instance=instance, resources={"io_manager": io_manager}, run_config=QUIET)
        assert result.success
        return result

    table = io_manager.table_name(dg.AssetKey("orders")).display
    first = run()
    snapshot = io_manager.committed_state(dg.AssetKey("orders")).snapshot_id
    lines = [line for line in progress_lines(instance, first, "orders") if "starting Spark" not in line]
    assert lines == [
        "orders: incremental run started",
        "orders: loaded 3 new rows",
        f"orders: committing 3 rows to {table}",
        f"orders: committed +3 ~0 -0 to {table} (snapshot {snapshot})",
    ]

    second = run()
    assert progress_lines(instance, second, "orders") == [
        "orders: incremental run started",
        "orders: loaded no new rows",
        f"orders: committing to {table}",
        f"orders: nothing to commit: {table} and its cursor unchanged",
    ]
