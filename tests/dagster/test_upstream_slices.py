"""`upstream_commits_per_slice`: a run of an asset reading `Changes` cut into slices of at most N
upstream commits, each committed with the upstream snapshot it read up to, so a downstream far
behind catches up in bounded pieces, and a failure in slice k keeps slices 1..k-1."""

from __future__ import annotations

import dagster as dg
import pytest

from attack_support import committed_states, failure_text, materialize
from catalogs import HADOOP_ONLY
from dagster_incremental import Changes, Incremental, incremental, incremental_asset
from dagster_incremental.errors import IncrementalConfigError

pytestmark = [pytest.mark.spark, HADOOP_ONLY]

UPSERT = {"disposition": "merge", "strategy": "upsert"}


def upstream(config_file: str, source: list[dict]):
    @incremental_asset(primary_key="id", write_disposition=UPSERT, config_path=config_file)
    def orders(seq: Incremental = incremental("seq", initial_value=0)):
        return list(source)

    return orders


def downstream(config_file: str, received: list, fail_on_id: int | None = None):
    @incremental_asset(primary_key="id", write_disposition=UPSERT, upstream_commits_per_slice=2,
                       config_path=config_file)
    def enriched(orders: Changes):
        got = sorted((r.id, r._change_type) for r in orders.df.select("id", "_change_type").collect())
        received.append((orders.kind, got))
        if fail_on_id is not None and any(i == fail_on_id for i, _ in got):
            raise RuntimeError(f"enrichment service down at order {fail_on_id}")
        return orders.upserts().select("id", "amount")

    return enriched


def upstream_snapshots(spark, io) -> list[int]:
    """The upstream's snapshot ids, oldest first."""
    table = io.table_name(dg.AssetKey("orders")).sql
    return [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect()]


def table(spark, io) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(io.table_name(dg.AssetKey("enriched")).sql).select("id", "amount").collect())


def five_upstream_commits(orders, source: list[dict], instance, io) -> None:
    """Orders 2..6 arrive one per upstream run; the fourth run also changes order 1."""
    for seq in range(2, 7):
        source.append({"id": seq, "amount": 10 * seq, "seq": seq})
        if seq == 5:
            source[0] = {"id": 1, "amount": 11, "seq": 5}
        assert materialize(orders, instance, io).success


def test_a_run_far_behind_commits_one_slice_per_two_upstream_commits(spark, instance, io_manager, config_file):
    source, received = [{"id": 1, "amount": 10, "seq": 1}], []
    orders, enriched = upstream(config_file, source), downstream(config_file, received)
    assert materialize(orders, instance, io_manager).success
    first = materialize(enriched, instance, io_manager)  # a full read: one snapshot, one slice
    assert first.success, failure_text(first)
    assert received == [("full", [(1, "INSERT")])]

    five_upstream_commits(orders, source, instance, io_manager)
    result = materialize(enriched, instance, io_manager)
    assert result.success, failure_text(result)
    assert [got for _, got in received[1:]] == [
        [(2, "INSERT"), (3, "INSERT")],
        [(1, "DELETE"), (1, "INSERT"), (4, "INSERT"), (5, "INSERT")],  # order 1's update: old and new
        [(6, "INSERT")],
    ]
    assert table(spark, io_manager) == [(1, 11)] + [(i, 10 * i) for i in range(2, 7)]
    meta = result.get_asset_materialization_events()[-1].materialization.metadata
    assert meta["dagster_incremental/slices"].value == [3, 3]
    assert meta["dagster_incremental/rows_inserted"].value == 5 and meta["dagster_incremental/rows_updated"].value == 1
    # each slice's commit holds the upstream snapshot it read up to: the 2nd, 4th and 5th new one
    ups = upstream_snapshots(spark, io_manager)
    read_to = [s["upstream"]["orders"]["snapshot_id"] for s in committed_states(spark, io_manager, "enriched")]
    assert read_to[-3:] == [ups[-4], ups[-2], ups[-1]]
    assert meta["dagster_incremental/state"].value["last_value"] == ups[-1]


def test_a_failed_slice_keeps_the_ones_before_and_the_next_run_reads_on_from_there(
        spark, instance, io_manager, config_file):
    source, received = [{"id": 1, "amount": 10, "seq": 1}], []
    orders = upstream(config_file, source)
    assert materialize(orders, instance, io_manager).success
    assert materialize(downstream(config_file, received), instance, io_manager).success
    five_upstream_commits(orders, source, instance, io_manager)

    failed = materialize(downstream(config_file, received, fail_on_id=4), instance, io_manager)
    assert not failed.success and "enrichment service down at order 4" in failure_text(failed)
    assert table(spark, io_manager) == [(1, 10), (2, 20), (3, 30)]  # slice 1 kept
    assert committed_states(spark, io_manager, "enriched")[-1]["upstream"]["orders"]["snapshot_id"] == (
        upstream_snapshots(spark, io_manager)[-4])
    assert any("slice 2/3 failed: slice 1 is committed" in e.user_message
               for e in instance.all_logs(failed.run_id))

    received.clear()
    healed = materialize(downstream(config_file, received), instance, io_manager)
    assert healed.success, failure_text(healed)
    assert [ids for _, ids in received] == [  # from slice 2 on: nothing read twice, nothing skipped
        [(1, "DELETE"), (1, "INSERT"), (4, "INSERT"), (5, "INSERT")], [(6, "INSERT")]]
    assert table(spark, io_manager) == [(1, 11)] + [(i, 10 * i) for i in range(2, 7)]


def test_upstream_commits_per_slice_from_config_toml_and_its_refusals(tmp_path, config_file):
    destination = open(config_file).read()
    zero = tmp_path / "zero.toml"
    zero.write_text(destination + "\n[assets.zero]\nupstream_commits_per_slice = 0\n")
    with pytest.raises(IncrementalConfigError, match=r"zero.toml: \[assets\.zero\] upstream_commits_per_slice = 0 .*> 0"):
        @incremental_asset(config_path=str(zero))
        def zero(orders: Changes):
            return orders.upserts()
    with open(config_file, "a") as f:
        f.write("\n[assets.plain]\nupstream_commits_per_slice = 3\n")
    with pytest.raises(IncrementalConfigError, match=r"'plain'.*no Changes argument.*remove upstream_commits_per_slice"):
        @incremental_asset(config_path=config_file)  # the key from config.toml
        def plain(seq: Incremental = incremental("seq", initial_value=0)):
            return []
    with pytest.raises(IncrementalConfigError, match=r"'both'.*the incremental argument\(s\) seq"):
        @incremental_asset(upstream_commits_per_slice=2, config_path=config_file)
        def both(orders: Changes, seq: Incremental = incremental("seq", initial_value=0)):
            return orders.upserts()
    with pytest.raises(IncrementalConfigError, match=r"'two'.*several Changes arguments \(orders, customers\)"):
        @incremental_asset(upstream_commits_per_slice=2, config_path=config_file)
        def two(orders: Changes, customers: Changes):
            return orders.upserts()
