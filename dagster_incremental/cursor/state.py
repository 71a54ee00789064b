"""The cursor state as typed values: the one place that knows the stored JSON's keys and versions,
read back by later runs, sensors and healing from table commits and Dagster metadata.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from dagster_incremental.cursor.boundary import CONTENT, DedupKey, canonical_json
from dagster_incremental.errors import CursorStateMismatch

STATE_VERSION = 2  # 2: boundary keys stored as the key values themselves (1: their JSON text)
READABLE_VERSIONS = (1, STATE_VERSION)
WRITE_KEYS = "write_keys"  # asset level: the keys the table was written under
UPSTREAM = "upstream"  # asset level: each Changes parameter's cursor (an UpstreamPosition)
_RUN_REPORT = "start_value"  # only reports where a run began; the next run resumes from the rest


def state_json(state: Mapping[str, Any]) -> str:
    """The state as stored in a table commit: compact, key-sorted JSON."""
    return json.dumps(dict(state), sort_keys=True, separators=(",", ":"))


def _malformed(what: str, value: Any, expected: str) -> CursorStateMismatch:
    return CursorStateMismatch(
        f"The stored cursor state is malformed: {what} is {value!r}, expected {expected}. Seed a "
        "valid state (or none) with a runless materialization, or run a full refresh."
    )


def _check(what: str, value: Any, types: type | tuple[type, ...], expected: str) -> None:
    if value is not None and not isinstance(value, types):
        raise _malformed(what, value, expected)


@dataclass(frozen=True)
class StoredBoundary:
    """The boundary of a state: the rows at `value` already loaded, by dedup key, as stored
    (primary-key values as they are, content hashes as hex; version 1: their JSON text)."""

    value: Any
    keys: tuple[Any, ...]
    overflow: bool

    @classmethod
    def of(cls, value: Any, key_texts: frozenset[str], overflow: bool, dedup_key: DedupKey) -> StoredBoundary:
        """Keys as compared (canonical JSON / hex) -> as stored: the UI shows ev_1, not '"ev_1"'."""
        ordered = sorted(key_texts)
        return cls(value, tuple(ordered if dedup_key == CONTENT else (json.loads(k) for k in ordered)), overflow)

    def key_texts(self, version: int, dedup_key: DedupKey) -> frozenset[str]:
        """The keys as a run compares them (canonical JSON of primary-key values, or hex)."""
        if version != 1 and dedup_key != CONTENT:
            return frozenset(canonical_json(k) for k in self.keys)
        return frozenset(self.keys)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "keys": list(self.keys), "overflow": self.overflow}

    @classmethod
    def from_dict(cls, raw: Any) -> StoredBoundary | None:
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise _malformed("boundary", raw, "an object with value, keys and overflow, or null")
        missing = [k for k in ("value", "keys", "overflow") if k not in raw]
        if missing:
            raise _malformed("boundary", dict(raw), f"an object with {', '.join(missing)} too")
        if not isinstance(raw["keys"], list):
            raise _malformed("boundary.keys", raw["keys"], "a list")
        if not isinstance(raw["overflow"], bool):
            raise _malformed("boundary.overflow", raw["overflow"], "true or false")
        return cls(raw["value"], tuple(raw["keys"]), raw["overflow"])


@dataclass(frozen=True)
class CursorState:
    """The state one cursor leaves for the next run (`IncrementalRun.state` is its dict).

    Values are canonical JSON scalars (ISO-8601 UTC text for instants). A minimal state such as
    `{"last_value": 5}` (seeded by hand) is accepted: `absent` lists the keys it did not have, and
    `extra` keeps keys this version does not know, so a state read is written back unchanged.
    """

    last_value: Any = None
    version: int = STATE_VERSION
    cursor_path: str | None = None
    cursor_type: str | None = None
    last_value_func: str | None = None
    initial_value: Any = None
    start_value: Any = None
    dedup_key: DedupKey | None = None
    boundary: StoredBoundary | None = None
    absent: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def recorded(self, name: str) -> bool:
        """True when the state holds `name` (a minimal state may not)."""
        return name not in self.absent

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "cursor_path": self.cursor_path,
            "cursor_type": self.cursor_type,
            "last_value_func": self.last_value_func,
            "initial_value": self.initial_value,
            "last_value": self.last_value,
            "start_value": self.start_value,
            "dedup_key": list(self.dedup_key) if isinstance(self.dedup_key, tuple) else self.dedup_key,
            "boundary": self.boundary.to_dict() if self.boundary is not None else None,
        }
        return copy.deepcopy({**{k: v for k, v in out.items() if k not in self.absent}, **self.extra})

    @classmethod
    def from_dict(cls, raw: Any) -> CursorState:
        """Read a stored state (either version); raises CursorStateMismatch naming what is wrong."""
        if not isinstance(raw, Mapping) or raw.get("version", STATE_VERSION) not in READABLE_VERSIONS:
            raise CursorStateMismatch(
                f"The stored cursor state {raw!r} is not a version {STATE_VERSION} state of "
                "dagster_incremental; run a full refresh to start a new state."
            )
        known = {f.name for f in fields(cls)} - {"absent", "extra"}
        for name in ("cursor_path", "cursor_type", "last_value_func"):
            _check(name, raw.get(name), str, "a string")
        return cls(
            **{k: v for k, v in raw.items() if k in known - {"dedup_key", "boundary"}},
            dedup_key=_dedup_key(raw.get("dedup_key")),
            boundary=StoredBoundary.from_dict(raw.get("boundary")),
            absent=frozenset(known - set(raw)),
            extra={k: v for k, v in raw.items() if k not in known},
        )


def _dedup_key(raw: Any) -> DedupKey | None:
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, list) and all(isinstance(k, str) for k in raw):
        return tuple(raw)
    raise _malformed("dedup_key", raw, '"content" or a list of column names')


@dataclass(frozen=True)
class UpstreamPosition:
    """A `Changes` parameter's cursor: the upstream table and the snapshot read up to (its
    table_id tells a dropped and re-created table from the one read before)."""

    table: str
    snapshot_id: int | None
    table_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"table": self.table, "snapshot_id": self.snapshot_id}
        return {**out, "table_id": self.table_id} if self.table_id else out


@dataclass(frozen=True)
class AssetState:
    """An asset's stored state: its cursors' states plus the keys the table was written under.

    Layout: one cursor stores its state's keys at the top level (`several` False); several store
    one object per argument name. An asset without a cursor stores `{"last_value": null}`, or,
    reading one upstream's `Changes`, that upstream's snapshot as its last_value.
    """

    cursors: Mapping[str | None, CursorState | None]
    several: bool
    write_keys: Mapping[str, Any] | None = None
    upstream: Mapping[str, UpstreamPosition] = field(default_factory=dict)

    @classmethod
    def of(cls, cursors: Mapping[str, CursorState | None], write_keys: Mapping[str, Any] | None = None) -> AssetState:
        """The state a run leaves: one entry per incremental argument."""
        entries: dict[str | None, CursorState | None] = {name: state for name, state in cursors.items()}
        return cls(entries, len(entries) > 1, write_keys)

    def cursor(self, name: str | None) -> CursorState | None:
        """The state of argument `name` (the only cursor's, whatever the name, when flat)."""
        if not self.several:
            return next(iter(self.cursors.values()), None)
        return self.cursors.get(name)

    def to_dict(self) -> dict[str, Any]:
        if self.several:
            # several cursors are always named (only a single cursor may be stored without a name)
            out: dict[str, Any] = {
                n: s.to_dict() if s is not None else None for n, s in self.cursors.items() if n is not None
            }
        elif self.cursors:
            only = next(iter(self.cursors.values()))
            out = only.to_dict() if only is not None else {}
        else:
            lone = next(iter(self.upstream.values())) if len(self.upstream) == 1 else None
            out = {"last_value": lone.snapshot_id if lone is not None else None}
        if self.write_keys is not None:
            out[WRITE_KEYS] = copy.deepcopy(dict(self.write_keys))
        if self.upstream:
            out[UPSTREAM] = {name: position.to_dict() for name, position in self.upstream.items()}
        return out

    @classmethod
    def from_dict(cls, raw: Any, names: Sequence[str]) -> AssetState:
        """Read the state of an asset whose incremental arguments are `names`; None: no state."""
        several = len(names) > 1
        if raw is None:
            return cls({}, several)
        if not isinstance(raw, Mapping):
            raise _malformed("the asset's state", raw, "a JSON object")
        write_keys = raw.get(WRITE_KEYS)
        _check(WRITE_KEYS, write_keys, Mapping, "an object")
        if not several:
            body = {k: v for k, v in raw.items() if k != WRITE_KEYS}
            return cls({names[0] if names else None: CursorState.from_dict(body)}, several, write_keys)
        parts: dict[str | None, CursorState | None] = {
            n: CursorState.from_dict(raw[n]) if raw[n] is not None else None for n in names if n in raw
        }
        return cls(parts, several, write_keys)



def resumable(state: Mapping[str, Any]) -> dict[str, Any]:
    """An asset's state without what only reports a run (start_value): two states that agree
    on the rest resume the next run at the same place."""

    def strip(part: Any) -> Any:
        return {k: v for k, v in part.items() if k != _RUN_REPORT} if isinstance(part, Mapping) else part

    return {k: strip(v) for k, v in strip(state).items()}
