"""Exactly-once for all inputs: random source histories x random ways to load them.

Histories: inserts, updates, deletes (hard-delete tombstones), many rows sharing a cursor value,
late rows whose cursor lies inside the lag window. Loads: incremental runs after any number of
changes, stateless window backfills in any order, re-runs of a window, a full refresh. The claim
(DESIGN.md invariants): the final table equals one full load of the final source for merge
dispositions, and append never loses a row.

Two levels:
- engine level (hundreds of examples, no Spark): the real cursor engine (`incremental(...)`,
  bind/filter/state exactly as the asset layer calls it) drives a plain-Python model of each
  disposition's table semantics (append, upsert/delete-insert by key with hard deletes, window
  replace);
- asset level (a handful of examples, real Spark + Iceberg + Dagster): the same generated plans
  run through `@incremental_asset` and `SparkTableIOManager`.

Profiles: DI_HYPOTHESIS_PROFILE=ci (default: 300 engine examples; at asset level the two explicit
histories and 4 random ones per Iceberg catalog kind, 2 per Delta kind) or large (3000; 25 and 25).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import dagster as dg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dagster_incremental.cursor.spec import incremental
from catalogs import ICEBERG_ONLY
from instances import fresh_instance

PROFILE = os.environ.get("DI_HYPOTHESIS_PROFILE", "ci")
if PROFILE not in ("ci", "large"):
    raise RuntimeError(f"DI_HYPOTHESIS_PROFILE must be ci or large, got {PROFILE!r}")
ENGINE_EXAMPLES = 300 if PROFILE == "ci" else 3000
# Random plans per catalog kind, on top of the two explicit ones (RICH_PLAN below). A Delta run
# costs about twice an Iceberg one and the two Delta kinds share one writer (they differ in the
# storage under it, which every commit of the explicit plans crosses): fewer random plans there.
SPARK_EXAMPLES = 4 if PROFILE == "ci" else 25
DELTA_SPARK_EXAMPLES = 2 if PROFILE == "ci" else 25

LAG = 2


# -- histories and plans ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    kind: str  # insert | update | delete | late
    key: int
    amount: int


@dataclass(frozen=True)
class Load:
    kind: str  # incremental | backfill | refresh
    start: int = 0
    end: int = 0


@st.composite
def plans(draw, max_steps: int = 14, allow_refresh: bool = True):
    """A list of ("change", [Change...]) and ("load", Load) steps, ending with an incremental load."""
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        if draw(st.booleans()):
            changes = draw(st.lists(
                st.builds(Change, st.sampled_from(["insert", "insert", "update", "delete", "late"]),
                          st.integers(0, 6), st.integers(0, 3)),
                min_size=1, max_size=4))
            steps.append(("change", changes))
        else:
            kinds = ["incremental", "incremental", "backfill"] + (["refresh"] if allow_refresh else [])
            kind = draw(st.sampled_from(kinds))
            if kind == "backfill":
                start = draw(st.integers(0, 12))
                steps.append(("load", Load(kind, start, start + draw(st.integers(1, 6)))))
            else:
                steps.append(("load", Load(kind)))
    steps.append(("load", Load("incremental")))
    return steps


class Source:
    """The source system: one current row per key; a clock that only moves forward.

    All changes of one step share the clock value (equal cursor values); a late change gets a
    cursor up to LAG behind the clock (never behind the newest value already handed out minus
    LAG, so it stays inside every later incremental run's lag window).
    """

    def __init__(self) -> None:
        self.rows: dict[int, dict] = {}
        self.clock = 1
        self.highest = 0  # the highest cursor value ever handed out

    def apply(self, changes: list[Change]) -> None:
        self.clock += 1
        for ch in changes:
            cursor = self.clock
            if ch.kind == "late":
                cursor = max(1, self.clock - LAG)
            exists = ch.key in self.rows and not self.rows[ch.key]["deleted"]
            if ch.kind == "delete":
                if exists:
                    self.rows[ch.key] = {"id": ch.key, "amount": self.rows[ch.key]["amount"], "updated": cursor, "deleted": True}
                continue
            if ch.kind == "update" and not exists:
                continue
            self.rows[ch.key] = {"id": ch.key, "amount": ch.amount, "updated": cursor, "deleted": False}
        self.highest = max([self.highest, *(r["updated"] for r in self.rows.values())])

    def snapshot(self) -> list[dict]:
        return [dict(r) for r in self.rows.values()]

    def full_load(self) -> dict[int, tuple]:
        return {k: _t(r) for k, r in self.rows.items() if not r["deleted"]}


def _t(row: dict) -> tuple:
    return (row["id"], row["amount"], row["updated"])


# -- the plain-Python table model driven by the real engine ----------------------------------------


SPEC = incremental("updated", initial_value=0, lag=LAG)


class Model:
    def __init__(self, strategy: str) -> None:
        self.strategy = strategy
        self.state = None
        self.merge: dict[int, tuple] = {}
        self.append: list[tuple] = []

    def _dedup(self, rows: list[dict]) -> dict[int, dict]:
        out: dict[int, dict] = {}
        for r in rows:  # newest cursor wins; on a tie the last row seen
            if r["id"] not in out or r["updated"] >= out[r["id"]]["updated"]:
                out[r["id"]] = r
        return out

    def _write(self, rows: list[dict]) -> None:
        if self.strategy == "append":
            self.append.extend(_t(r) for r in rows)
            return
        for key, r in self._dedup(rows).items():
            if r["deleted"]:
                self.merge.pop(key, None)
            else:
                self.merge[key] = _t(r)

    def load(self, load: Load, source: Source, order: list[int]) -> None:
        rows = source.snapshot()
        rows = [rows[i % len(rows)] for i in order][: len(rows)] + rows if rows else []  # any order, repeats
        if load.kind == "incremental":
            run = SPEC.bind(self.state, inherited_primary_key=("id",))
            kept = run.filter(rows)
            self.state = run.state
            self._write(kept)
        elif load.kind == "refresh":
            run = SPEC.bind(None, inherited_primary_key=("id",))
            kept = run.filter(rows)
            self.state = run.state
            self.merge, self.append = {}, []
            self._write(kept)
        else:
            spec = SPEC.replace(initial_value=load.start, end_value=load.end)
            kept = spec.bind(None, stateless=True, inherited_primary_key=("id",)).filter(rows)
            inside = lambda t: load.start <= t[2] < load.end  # noqa: E731
            assert all(inside(_t(r)) for r in kept), "a backfill kept a row outside its window"
            if self.strategy == "append":
                self.append = [t for t in self.append if not inside(t)]
                self.append.extend(_t(r) for r in kept)
            else:
                self.merge = {k: t for k, t in self.merge.items() if not inside(t)}
                self._write(kept)


@pytest.mark.parametrize("strategy", ["append", "merge"])
@settings(max_examples=ENGINE_EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans(), order=st.lists(st.integers(0, 50), max_size=20))
def test_engine_any_split_of_any_history_loads_exactly_once(strategy, plan, order):
    source = Source()
    model = Model(strategy)
    for kind, step in plan:
        if kind == "change":
            source.apply(step)
        else:
            model.load(step, source, order)
    final = source.full_load()
    if strategy == "merge":
        assert model.merge == final
    else:
        # append never loses a row: every version of the final source is in the table (tombstones
        # are rows too, for append)
        every = {_t(r) for r in source.snapshot()}
        assert every <= set(model.append)
    # the cursor is the high-water mark: at least the final source's newest value, never beyond
    # anything the source handed out
    newest = max((r["updated"] for r in source.snapshot()), default=None)
    if newest is not None:
        assert newest <= model.state["last_value"] <= source.highest


# -- the same plans through the real asset layer --------------------------------------------------


@pytest.fixture(scope="module")
def spark_env(spark, catalog, tmp_path_factory):
    """A Dagster instance, IO manager and config.toml on each catalog kind (tests/catalogs.py)."""
    namespace = "eo_" + uuid.uuid4().hex[:8]
    config = tmp_path_factory.mktemp("eo") / "config.toml"
    config.write_text(catalog.config_toml(namespace))
    with fresh_instance() as instance:
        yield instance, catalog.io_manager(namespace), str(config)


STRATEGIES = ["upsert", "delete-insert", "append"]
DELTA_KINDS = pytest.mark.parametrize("catalog", ["delta", "delta-s3"], indirect=True)
# The keyed merge of the rich plan: upsert, but delete-insert on delta-s3, so that each run takes
# both keyed merges of the Delta writer through every edge of RICH_PLAN (few random plans there).
RICH_MERGE = {"delta-s3": "delete-insert"}

# Always run (on top of the random plans): every kind of change and load in one history.
RICH_PLAN = [
    ("change", [Change("insert", 1, 1), Change("insert", 2, 2), Change("insert", 3, 3)]),
    ("load", Load("incremental")),
    ("change", [Change("update", 1, 5), Change("insert", 4, 4), Change("late", 2, 7)]),
    ("load", Load("backfill", 1, 3)),
    ("change", [Change("delete", 3, 0), Change("insert", 5, 5)]),
    ("load", Load("backfill", 1, 3)),  # a re-run of the same window
    ("load", Load("incremental")),
    ("load", Load("refresh")),
    ("change", [Change("late", 4, 9), Change("update", 5, 6)]),
    ("load", Load("incremental")),
]


def _exactly_once_property(max_examples: int):
    """The asset-level property's Hypothesis decorators: `max_examples` random plans and strategies
    on top of the rich plan with the kind's keyed merge and with append."""
    def decorate(test):
        test = example(plan=RICH_PLAN, strategy_index=2)(test)  # append
        test = example(plan=RICH_PLAN, strategy_index=None)(test)  # the kind's RICH_MERGE
        test = given(plan=plans(max_steps=6), strategy_index=st.integers(0, len(STRATEGIES) - 1))(test)
        return settings(max_examples=max_examples, deadline=None, database=None, suppress_health_check=[
            HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])(test)
    return decorate


@pytest.mark.spark
@ICEBERG_ONLY
@_exactly_once_property(SPARK_EXAMPLES)
def test_assets_any_split_of_any_history_loads_exactly_once(spark, catalog, spark_env, plan, strategy_index):
    _assert_loads_exactly_once(spark, catalog, spark_env, plan, strategy_index)


@pytest.mark.spark
@DELTA_KINDS
@_exactly_once_property(DELTA_SPARK_EXAMPLES)
def test_delta_assets_any_split_of_any_history_loads_exactly_once(spark, catalog, spark_env, plan, strategy_index):
    _assert_loads_exactly_once(spark, catalog, spark_env, plan, strategy_index)


def _assert_loads_exactly_once(spark, catalog, spark_env, plan, strategy_index) -> None:
    """Runs `plan` through an asset of STRATEGIES[strategy_index] (None: the kind's RICH_MERGE);
    the table is one full load of the final source (merge) or holds every version of it
    (append), and other readers agree."""
    from attack_support import DISPOSITIONS, failure_text, materialize, rows, table_exists
    from catalogs import assert_other_readers_agree
    from dagster_incremental import Incremental, incremental_asset

    instance, io, config = spark_env
    strategy = STRATEGIES[strategy_index] if strategy_index is not None else RICH_MERGE.get(catalog.kind, "upsert")
    name = "eo_" + uuid.uuid4().hex[:10]
    source = Source()

    def body(context: dg.AssetExecutionContext, updated: Incremental = SPEC):
        return source.snapshot()

    body.__name__ = name
    asset = incremental_asset(
        name=name, primary_key="id", write_disposition=DISPOSITIONS[strategy], config_path=config,
        columns={"deleted": {"hard_delete": True}} if strategy != "append" else None,
    )(body)
    loads = 0
    for kind, step in plan:
        if kind == "change":
            source.apply(step)
            continue
        if step.kind == "incremental":
            ops = None
        elif step.kind == "refresh":
            ops = {"full_refresh": True}
        else:
            ops = {"initial_value": str(step.start), "end_value": str(step.end)}
        result = materialize(asset, instance, io, run_config={"ops": {name: {"config": ops}}} if ops else None)
        assert result.success, failure_text(result)
        loads += 1
    got = rows(spark, io, name, ["id", "amount", "updated"]) if table_exists(spark, io, name) else []
    if strategy == "append":
        assert {_t(r) for r in source.snapshot()} <= set(got)
    else:
        assert got == sorted(source.full_load().values(), key=repr)
    if table_exists(spark, io, name):
        assert_other_readers_agree(catalog, spark, io.table_name(dg.AssetKey(name)))
