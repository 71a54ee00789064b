"""CursorState / AssetState: the stored JSON stays what earlier versions wrote and still read."""

from __future__ import annotations

import json

import pytest

from dagster_incremental.cursor.spec import incremental
from dagster_incremental.cursor.state import (
    AssetState,
    CursorState,
    StoredBoundary,
    UpstreamPosition,
    resumable,
    state_json,
)
from dagster_incremental.errors import CursorStateMismatch

# Written by the code before CursorState existed (same runs as in test_runs_write_the_same_json).
V2_PK = (
    '{"boundary":{"keys":["ev_1","ev_2"],"overflow":false,"value":"2024-01-02T10:00:00Z"},'
    '"cursor_path":"updated_at","cursor_type":"timestamp","dedup_key":["id"],'
    '"initial_value":"2024-01-01T00:00:00Z","last_value":"2024-01-02T10:00:00Z","last_value_func":"max",'
    '"start_value":"2024-01-01T00:00:00Z","version":2}'
)
V2_CONTENT = (
    '{"boundary":{"keys":["7a1c8c199abe40518679a427ced1d7443baafeac6198df120d8a20d5c10e4956",'
    '"f8aca67036bca74664b42c22b5a10d6eee74201aa53410c9242a17b3a0c29111"],"overflow":false,"value":3},'
    '"cursor_path":"n","cursor_type":"number","dedup_key":"content","initial_value":null,"last_value":3,'
    '"last_value_func":"max","start_value":null,"version":2}'
)
V2_COMPOSITE_MIN = (
    '{"boundary":{"keys":[[1,"x"]],"overflow":false,"value":3},"cursor_path":"n","cursor_type":"number",'
    '"dedup_key":["a","b"],"initial_value":10,"last_value":3,"last_value_func":"min","start_value":10,"version":2}'
)
V2_LAG = (
    '{"boundary":null,"cursor_path":"n","cursor_type":"number","dedup_key":"content","initial_value":null,'
    '"last_value":5,"last_value_func":"max","start_value":3,"version":2}'
)
V1_PK = V2_PK.replace('"keys":["ev_1","ev_2"]', '"keys":["\\"ev_1\\"","\\"ev_2\\""]').replace('"version":2', '"version":1')

PK_ROWS = [
    {"id": "ev_1", "updated_at": "2024-01-02T10:00:00Z"},
    {"id": "ev_2", "updated_at": "2024-01-02T10:00:00Z"},
    {"id": "ev_0", "updated_at": "2024-01-01T10:00:00Z"},
]


def stored(text: str) -> CursorState:
    """A state as the state store reads it from Dagster's metadata (a JSON object)."""
    return CursorState.from_dict(json.loads(text))


@pytest.mark.parametrize("text", [V2_PK, V2_CONTENT, V2_COMPOSITE_MIN, V2_LAG, V1_PK])
def test_stored_json_round_trips_unchanged(text):
    state = CursorState.from_dict(json.loads(text))
    assert state_json(state.to_dict()) == text
    assert state.to_dict() == json.loads(text)


def test_runs_write_the_same_json_as_before():
    run = incremental("updated_at", initial_value="2024-01-01T00:00:00Z", primary_key="id").bind()
    run.filter([dict(r) for r in PK_ROWS])
    assert state_json(run.state) == V2_PK == state_json(run.cursor_state.to_dict())
    run = incremental("n").bind()
    run.filter([{"n": 3, "x": 1}, {"n": 3, "x": 2}])
    assert state_json(run.state) == V2_CONTENT
    run = incremental("n", primary_key=["a", "b"], last_value_func="min", initial_value=10).bind()
    run.filter([{"n": 3, "a": 1, "b": "x"}])
    assert state_json(run.state) == V2_COMPOSITE_MIN
    run = incremental("n", lag=2).bind({"last_value": 5})
    run.filter([{"n": 4}])
    assert state_json(run.state) == V2_LAG


def test_typed_fields_of_a_stored_state():
    state = stored(V2_PK)
    assert state.version == 2 and state.dedup_key == ("id",) and state.last_value == "2024-01-02T10:00:00Z"
    assert state.boundary == StoredBoundary("2024-01-02T10:00:00Z", ("ev_1", "ev_2"), False)
    assert state.boundary.key_texts(state.version, state.dedup_key) == {'"ev_1"', '"ev_2"'}


@pytest.mark.parametrize("text", [V2_PK, V1_PK])
def test_both_versions_dedup_the_boundary_rows(text):
    spec = incremental("updated_at", initial_value="2024-01-01T00:00:00Z", primary_key="id")
    again = [{"id": "ev_1", "updated_at": "2024-01-02T10:00:00Z"}, {"id": "ev_3", "updated_at": "2024-01-02T10:00:00Z"}]
    for given in (json.loads(text), stored(text)):
        run = spec.bind(given)
        assert run.filter([dict(r) for r in again]) == [again[1]]
        assert not run.boundary_unverified


def test_v1_state_is_read_with_its_keys_as_json_text():
    state = stored(V1_PK)
    assert state.version == 1 and state.boundary.keys == ('"ev_1"', '"ev_2"')
    assert state.boundary.key_texts(1, ("id",)) == {'"ev_1"', '"ev_2"'}


def test_minimal_and_unknown_keys_are_written_back_as_read():
    raw = {"last_value": 5, "note": "seeded by hand"}
    state = CursorState.from_dict(raw)
    assert state.last_value == 5 and state.version == 2 and not state.recorded("cursor_path")
    assert state.to_dict() == raw
    run = incremental("n", end_value=9, initial_value=0).bind(raw)  # a backfill keeps the state
    assert run.state == raw


@pytest.mark.parametrize(
    "raw, named",
    [
        ([1, 2], "not a version 2 state"),
        ({"version": 99, "last_value": 5}, "version 2"),
        ({"last_value": 5, "boundary": 7}, "boundary is 7"),
        ({"last_value": 5, "boundary": {"value": 5, "keys": "ab", "overflow": False}}, "boundary.keys is 'ab'"),
        ({"last_value": 5, "boundary": {"value": 5, "keys": []}}, "with overflow too"),
        ({"last_value": 5, "boundary": {"value": 5, "keys": [], "overflow": "no"}}, "boundary.overflow is 'no'"),
        ({"last_value": 5, "dedup_key": 3}, "dedup_key is 3"),
        ({"last_value": 5, "dedup_key": ["id", 1]}, r"dedup_key is \['id', 1\]"),
        ({"last_value": 5, "cursor_type": 1}, "cursor_type is 1, expected a string"),
    ],
)
def test_malformed_state_error_names_what_is_wrong(raw, named):
    with pytest.raises(CursorStateMismatch, match=named):
        CursorState.from_dict(raw)
    with pytest.raises(CursorStateMismatch, match=named):
        incremental("n").bind(raw)


WRITE_KEYS = {"merge_key": [], "primary_key": ["id"], "write_disposition": "append"}


def test_asset_state_with_one_cursor_is_flat():
    raw = {**json.loads(V2_PK), "write_keys": WRITE_KEYS}
    state = AssetState.from_dict(raw, ["updated"])
    assert state.cursor("updated") == stored(V2_PK) and state.write_keys == WRITE_KEYS
    assert state.to_dict() == raw
    assert state_json(AssetState.of({"updated": stored(V2_PK)}, WRITE_KEYS).to_dict()) == state_json(raw)


def test_asset_state_with_several_cursors_nests_them():
    raw = {"a": json.loads(V2_LAG), "b": json.loads(V2_CONTENT), "write_keys": WRITE_KEYS}
    state = AssetState.from_dict(raw, ["a", "b", "c"])
    assert state.cursor("b") == stored(V2_CONTENT) and state.cursor("c") is None
    assert state.to_dict() == raw


def test_asset_state_without_cursor_or_state():
    assert AssetState.of({}, WRITE_KEYS).to_dict() == {"last_value": None, "write_keys": WRITE_KEYS}
    assert AssetState.from_dict(None, ["a"]).cursor("a") is None
    assert AssetState.from_dict({"last_value": None, "write_keys": WRITE_KEYS}, []).cursor(None).last_value is None
    with pytest.raises(CursorStateMismatch, match="write_keys is 3"):
        AssetState.from_dict({"last_value": 1, "write_keys": 3}, ["a"])


ORDERS = UpstreamPosition("lake.incremental.orders", 5563959670852277096, "uuid-1")


def test_a_chain_without_a_cursor_of_its_own_stores_the_upstream_snapshot_as_last_value():
    """One upstream: last_value is its snapshot id (exact, past 2**53); two: no last_value of
    their own, each parameter's snapshot under "upstream"."""
    one = AssetState.of({}, WRITE_KEYS)
    one = AssetState(one.cursors, one.several, one.write_keys, {"orders": ORDERS})
    assert one.to_dict() == {
        "last_value": 5563959670852277096, "write_keys": WRITE_KEYS,
        "upstream": {"orders": {"table": "lake.incremental.orders", "snapshot_id": 5563959670852277096,
                                "table_id": "uuid-1"}},
    }
    customers = UpstreamPosition("lake.incremental.customers", 7, None)
    two = AssetState({}, False, None, {"orders": ORDERS, "customers": customers})
    assert two.to_dict()["last_value"] is None
    assert two.to_dict()["upstream"]["customers"] == {"table": "lake.incremental.customers", "snapshot_id": 7}


def test_a_chain_with_its_own_cursor_keeps_its_last_value():
    state = AssetState({"updated": stored(V2_PK)}, False, WRITE_KEYS, {"orders": ORDERS})
    raw = state.to_dict()
    assert raw["last_value"] == json.loads(V2_PK)["last_value"]
    assert raw["upstream"]["orders"]["snapshot_id"] == ORDERS.snapshot_id


def test_resumable_drops_only_the_start_values():
    a = {"a": json.loads(V2_LAG), "write_keys": WRITE_KEYS}
    b = {"a": {**json.loads(V2_LAG), "start_value": 1}, "write_keys": WRITE_KEYS}
    assert resumable(a) == resumable(b) and "start_value" not in resumable(a)["a"]
    assert resumable(json.loads(V2_LAG))["last_value"] == 5
