"""config.toml: the project's Spark, destination and per-asset settings, validated up front.

Why a module of its own: every setting an asset can take reaches it through four layers
(decorator defaults < config.toml < environment < run config). This module owns the middle two:
it reads the file, applies `DAGSTER_INCREMENTAL__...` environment variables, checks every key
against one schema table and returns frozen objects that keep *only the keys actually given*,
so the asset factory can layer them over the decorator's defaults without guessing what "unset"
means. A mistake is reported before anything runs, naming the file, line, section, key, value
and what is allowed.

Where the file is: `load_config(path)`; else `$DAGSTER_INCREMENTAL_CONFIG`; else
`./config/config.toml` relative to the current directory. An explicitly named file (argument or
environment variable) must exist; a missing *default* file is not an error and gives the
defaults (plus any environment overrides), so a project without config.toml still runs.

Environment variables (they win over the file):
    DAGSTER_INCREMENTAL__<SECTION>__...__<KEY>, levels upper-case and separated by `__`:
    DAGSTER_INCREMENTAL__SPARK__MASTER
    DAGSTER_INCREMENTAL__DESTINATION__WAREHOUSE      (relative: against the config file's folder)
    DAGSTER_INCREMENTAL__ASSETS__ORDERS__PRIMARY_KEY
    DAGSTER_INCREMENTAL__ASSETS__ORDERS__WRITE_DISPOSITION__STRATEGY
    DAGSTER_INCREMENTAL__ASSETS__ORDERS__PARTITIONS__START
    DAGSTER_INCREMENTAL__ASSETS__ORDERS__COLUMNS__IS_DELETED__HARD_DELETE
    DAGSTER_INCREMENTAL__ASSETS__ORDERS__UPDATED_AT__INITIAL_VALUE   (incremental argument key)
    DAGSTER_INCREMENTAL__ASSETS__ORDERS__UPDATED_AT = '{initial_value = "2024-01-01"}'

- Asset, argument and column names match the file's names case-insensitively; a name the file
  does not have is created in lower case. Names that contain `__` cannot be addressed.
- Values are typed by the key's schema: integers ("10"), numbers ("1.5"), booleans
  ("true"/"false"), lists as a TOML/JSON array (`["id","ts"]`) or comma-separated (`id,ts`),
  tables as a TOML inline table (`{disposition = "merge", strategy = "upsert"}`) or a JSON object,
  dates/datetimes as ISO-8601. For initial_value/end_value an integer or decimal literal becomes
  a number, a TOML-quoted string (`"00123"`) a string, anything else stays the string given (ISO
  strings included, exactly as `initial_value = "2024-01-01T00:00:00Z"` does in the file).
- A whole table given by one variable (WRITE_DISPOSITION, COLUMNS, PARTITIONS, an argument)
  replaces the file's table; a variable for one key inside it patches that key. Variables apply
  from the least to the most specific, so the per-key ones win.
- Spark conf: DAGSTER_INCREMENTAL__SPARK__CONF__<KEY> sets one conf entry. <KEY> is the Spark
  key upper-cased with `.` (and `-`) written as `_`. It names the [spark.conf] key of the file
  that spells the same way (so camelCase keys and keys with `_` that the file has can be
  overridden); otherwise it must start with `SPARK_` and maps to lower case with every `_`
  turned into `.` (SPARK_SQL_SHUFFLE_PARTITIONS -> spark.sql.shuffle.partitions). Any other key
  (camelCase, `_` inside) is set with DAGSTER_INCREMENTAL__SPARK__CONF holding an inline table,
  `{"spark.driver.bindAddress" = "127.0.0.1"}`, whose entries are *added* to the file's conf.

Secrets are not config: `secrets.toml` beside this file is read by `dagster_incremental.settings.secrets`
at run time and never merged here, because config values end up in definitions and resource
config that Dagster shows in the UI. Its variables (`DAGSTER_INCREMENTAL_SECRETS__...`) do not
start with `DAGSTER_INCREMENTAL__`, so this loader ignores them.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import tomli

from dagster_incremental.errors import IncrementalConfigError

__all__ = [
    "CONFIG_PATH_ENV",
    "DEFAULT_CONFIG_PATH",
    "ENV_PREFIX",
    "AssetConfig",
    "DestinationConfig",
    "PartitionsConfig",
    "ProjectConfig",
    "SparkConfig",
    "load_config",
    "spark_conf_key_from_env",
]

CONFIG_PATH_ENV = "DAGSTER_INCREMENTAL_CONFIG"
DEFAULT_CONFIG_PATH = Path("config") / "config.toml"
ENV_PREFIX = "DAGSTER_INCREMENTAL__"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


# --------------------------------------------------------------------------- result objects


@dataclass(frozen=True)
class SparkConfig:
    """[spark]: how the SparkSession is built; `conf` is passed to Spark verbatim (as strings)."""

    master: str = "local[*]"
    app_name: str = "dagster-incremental"
    conf: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True)
class DestinationConfig:
    """[destination]: where tables live. `warehouse` is absolute, or a URI exactly as given."""

    format: Literal["iceberg", "delta"] = "iceberg"
    catalog: str = "lake"
    namespace: str = "incremental"
    warehouse: str = "data/warehouse"


@dataclass(frozen=True)
class PartitionsConfig:
    """[assets.<asset>] partitions: a Dagster time-window partitions definition as plain data.

    Kept free of Dagster so config loading stays importable anywhere; the asset factory builds
    e.g. `DailyPartitionsDefinition(start_date=p.start_datetime, end_offset=p.end_offset,
    timezone=p.timezone)` from it.
    """

    schedule: Literal["hourly", "daily", "weekly", "monthly"]
    start: date | datetime
    end_offset: int = 0
    timezone: str = "UTC"

    @property
    def start_datetime(self) -> datetime:
        """`start` as a datetime (a date means midnight in `timezone`), as Dagster takes it."""
        if isinstance(self.start, datetime):
            return self.start
        return datetime(self.start.year, self.start.month, self.start.day)


@dataclass(frozen=True)
class AssetConfig:
    """[assets.<name>]: only the keys the file or the environment gave, already normalised.

    `overrides` holds asset-level keys: key_prefix, primary_key, merge_key, partition_by as
    tuples of str; group_name, description, concurrency_pool as str; write_disposition as a dlt
    dict (always with "disposition"); columns as {column: {hint: value}}; partitions as a dict
    {schedule, start (date|datetime), end_offset, timezone} with defaults filled (typed: the
    `partitions` property). Nested values are plain dicts, as the decorator takes them.
    `incrementals` maps each incremental argument to its given keys (primary_key as a tuple,
    `()` meaning no dedup). Absent keys are absent, never None.
    """

    name: str
    overrides: Mapping[str, Any] = field(default_factory=_empty)
    incrementals: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty)

    def get(self, key: str, default: Any = None) -> Any:
        """An asset-level override, or `default` when config and environment leave it unset."""
        return self.overrides.get(key, default)

    def incremental(self, argument: str) -> Mapping[str, Any]:
        """The given keys of an incremental argument (matched case-insensitively), or {}."""
        name = _find_name(self.incrementals, argument)
        return self.incrementals[name] if name is not None else _EMPTY

    @property
    def partitions(self) -> PartitionsConfig | None:
        """`overrides["partitions"]` (a plain dict) as a typed object."""
        given = self.overrides.get("partitions")
        return PartitionsConfig(**given) if given is not None else None

    @property
    def write_disposition(self) -> Mapping[str, Any] | None:
        return self.overrides.get("write_disposition")


@dataclass(frozen=True)
class ProjectConfig:
    """A loaded config.toml (plus environment overrides).

    `path` is the absolute path of the file (which may not exist: `found` says), `display_path`
    the path as the user named it (used in messages), `project_dir` the folder relative
    warehouses must stay inside, `sources` maps each key path set from the environment, e.g.
    ("assets", "orders", "updated_at", "initial_value"), to the variable's name.
    """

    path: Path
    display_path: str
    found: bool
    project_dir: Path
    spark: SparkConfig = field(default_factory=SparkConfig)
    destination: DestinationConfig = field(default_factory=DestinationConfig)
    assets: Mapping[str, AssetConfig] = field(default_factory=_empty)
    sources: Mapping[tuple[str, ...], str] = field(default_factory=_empty)
    _lines: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def asset(self, name: str) -> AssetConfig:
        """The asset's config (exact name, else case-insensitive), or an empty one."""
        found = _find_name(self.assets, name)
        return self.assets[found] if found is not None else AssetConfig(name)

    def where(self, asset: str, argument: str | None = None, key: str | None = None) -> str:
        """Where a setting lives, to prefix errors found later (e.g. by the cursor engine).

        `config/config.toml: [assets.orders.updated_at] end_value`, plus `(at line N)` when the
        file has it or `(from environment variable ...)` when the environment set it.
        """
        asset_name = _find_name(self.assets, asset) or asset
        section: tuple[str, ...] = ("assets", asset_name)
        if argument is not None:
            incrementals = self.assets[asset_name].incrementals if asset_name in self.assets else {}
            section += (_find_name(incrementals, argument) or argument,)
        keys = (key,) if key is not None else ()
        return _Reporter(self.display_path, self._lines, self.sources).where(section, keys)


# --------------------------------------------------------------------------- schema: value types


class _Bad(Exception):
    """A value (from the file or an environment variable) does not fit its key."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


class _Problem(Exception):
    """A located problem; rendered into an IncrementalConfigError by `_Reporter`."""

    def __init__(
        self,
        section: tuple[str, ...],
        key: tuple[str, ...],
        value: Any,
        problem: str,
        hint: str | None = None,
        *,
        show_value: bool = True,
        env: str | None = None,
    ) -> None:
        super().__init__(problem)
        self.section, self.key, self.value = section, key, value
        self.problem, self.hint, self.show_value, self.env = problem, hint, show_value, env


def _kind(value: Any) -> str:
    """How TOML would call the value's type, for 'is an integer'-style messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, datetime):
        return "a datetime"
    if isinstance(value, date):
        return "a date"
    if isinstance(value, time):
        return "a time"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    return type(value).__name__


def _parse_literal(text: str) -> Any:
    """A TOML value literal (inline table, array, string, number, date), else JSON, else raise."""
    try:
        doc = tomli.loads(f"v = {text}")
        if set(doc) == {"v"}:
            return doc["v"]
    except tomli.TOMLDecodeError:
        pass
    try:
        return json.loads(text)
    except ValueError:
        raise _Bad("is neither a TOML nor a JSON literal") from None


_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")


class _Type:
    """One kind of value: how to check it (file or env) and how to read it from an env string."""

    hint: str = ""

    def check(self, value: Any, section: tuple[str, ...], key: tuple[str, ...]) -> Any:
        try:
            return self.validate(value)
        except _Bad as bad:
            raise _Problem(section, key, value, bad.problem, bad.hint or self.hint) from None

    def validate(self, value: Any) -> Any:
        raise NotImplementedError

    def from_env(self, text: str) -> Any:
        return text

    def wrong(self, value: Any) -> _Bad:
        return _Bad(f"is {_kind(value)}")


class _Str(_Type):
    def __init__(self, hint: str = "use a non-empty string", *, allow_empty: bool = False) -> None:
        self.hint, self.allow_empty = hint, allow_empty

    def validate(self, value: Any) -> str:
        if not isinstance(value, str):
            raise self.wrong(value)
        if not value.strip() and not self.allow_empty:
            raise _Bad("is empty")
        return value


class _Enum(_Type):
    def __init__(self, *choices: str, hint: str | None = None) -> None:
        self.choices = choices
        self.hint = hint or "use one of " + ", ".join(f'"{c}"' for c in choices)

    def validate(self, value: Any) -> str:
        if not isinstance(value, str):
            raise self.wrong(value)
        if value not in self.choices:
            raise _Bad("is not allowed")
        return value


class _Bool(_Type):
    hint = "use true or false"

    def validate(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.wrong(value)
        return value

    def from_env(self, text: str) -> bool:
        if text.strip().lower() in ("true", "false"):
            return text.strip().lower() == "true"
        raise _Bad("is not true or false")


class _Int(_Type):
    def __init__(self, minimum: int) -> None:
        self.minimum = minimum
        self.hint = f"use an integer >= {minimum}"

    def validate(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.wrong(value)
        if value < self.minimum:
            raise _Bad("is not allowed")
        return value

    def from_env(self, text: str) -> int:
        if not _INT_RE.fullmatch(text.strip()):
            raise _Bad("is not an integer")
        return int(text)


class _Number(_Type):
    def __init__(self, minimum: float, hint: str) -> None:
        self.minimum, self.hint = minimum, hint

    def validate(self, value: Any) -> int | float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.wrong(value)
        if not math.isfinite(value) or value < self.minimum:
            raise _Bad("is not allowed")
        return value

    def from_env(self, text: str) -> int | float:
        text = text.strip()
        if _INT_RE.fullmatch(text):
            return int(text)
        if _FLOAT_RE.fullmatch(text):
            return float(text)
        raise _Bad("is not a number")


class _Names(_Type):
    """Column names / key parts: one string or a list of strings, returned as a tuple."""

    def __init__(self, hint: str, *, allow_empty: bool = False, exactly: int | None = None) -> None:
        self.hint, self.allow_empty, self.exactly = hint, allow_empty, exactly

    def validate(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str) and self.exactly is None:
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise self.wrong(value)
        for item in value:
            if not isinstance(item, str):
                raise _Bad(f"has {_kind(item)} item {_toml(item)}")
            if not item.strip():
                raise _Bad("has an empty name")
        if len(set(value)) != len(value):
            raise _Bad("names a column twice")
        if not value and not self.allow_empty:
            raise _Bad("is empty")
        if self.exactly is not None and len(value) != self.exactly:
            raise _Bad(f"has {len(value)} names")
        return tuple(value)

    def from_env(self, text: str) -> Any:
        if text.strip().startswith("["):
            return _parse_literal(text.strip())
        return [part.strip() for part in text.split(",")]


class _CursorValue(_Type):
    """initial_value / end_value: whatever a cursor column can hold; the engine compares them."""

    hint = "use a date, a datetime, a number or a string (ISO-8601 for instants)"

    def validate(self, value: Any) -> Any:
        if isinstance(value, (bool, time)):
            raise self.wrong(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise _Bad("is not allowed")
        if isinstance(value, str) and not value.strip():
            raise _Bad("is empty")
        if not isinstance(value, (str, int, float, date)):
            raise self.wrong(value)
        return value

    def from_env(self, text: str) -> Any:
        stripped = text.strip()
        if _INT_RE.fullmatch(stripped) and not re.fullmatch(r"[+-]?0\d+", stripped):
            return int(stripped)
        if _FLOAT_RE.fullmatch(stripped) and "." in stripped:
            return float(stripped)
        if stripped[:1] in ('"', "'"):
            try:
                value = _parse_literal(stripped)
            except _Bad:
                return text
            if isinstance(value, str):
                return value
        return text


class _Instant(_Type):
    """A date or datetime; ISO-8601 strings are parsed (a naive datetime means UTC/the zone)."""

    hint = "use a date or a datetime, e.g. 2024-01-01 or 2024-01-01T00:00:00Z"

    def validate(self, value: Any) -> date | datetime:
        if isinstance(value, date):  # datetime is a date too
            return value
        if not isinstance(value, str):
            raise self.wrong(value)
        text = value.strip()
        try:
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                return date.fromisoformat(text)
            return datetime.fromisoformat(text)
        except ValueError:
            raise _Bad("is not an ISO-8601 date or datetime") from None


class _TimeZone(_Type):
    hint = 'use an IANA time zone name such as "UTC" or "Europe/Berlin"'

    def validate(self, value: Any) -> str:
        if not isinstance(value, str):
            raise self.wrong(value)
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise _Bad("is not a known time zone") from None
        return value


class _Table(_Type):
    """A table with its own key schema; subclasses add cross-key rules."""

    fields: Mapping[str, _Type] = {}

    def from_env(self, text: str) -> Any:
        if text.strip().startswith("{"):
            return _parse_literal(text.strip())
        raise _Bad("is not an inline table")

    def check(self, value: Any, section: tuple[str, ...], key: tuple[str, ...]) -> Any:
        if not isinstance(value, Mapping):
            raise _Problem(section, key, value, f"is {_kind(value)}", self.hint)
        return _check_keys(value, self.fields, section, key)


class _WriteDisposition(_Table):
    hint = (
        'use "append", "replace" or "merge", or a table such as '
        '{disposition = "merge", strategy = "upsert"}'
    )
    disposition = _Enum("append", "replace", "merge")
    scd2_only = ("validity_column_names", "active_record_timestamp", "boundary_timestamp",
                 "row_version_column_name")
    fields = {
        "disposition": disposition,
        "strategy": _Enum("delete-insert", "upsert", "scd2"),
        "validity_column_names": _Names('use two column names, e.g. ["_valid_from", "_valid_to"]',
                                        exactly=2),
        "active_record_timestamp": _Instant(),
        "boundary_timestamp": _Instant(),
        "row_version_column_name": _Str("use a column name"),
    }

    def from_env(self, text: str) -> Any:
        return super().from_env(text) if text.strip().startswith("{") else text

    def check(self, value: Any, section: tuple[str, ...], key: tuple[str, ...]) -> dict[str, Any]:
        if isinstance(value, str):
            try:
                return {"disposition": self.disposition.validate(value)}
            except _Bad as bad:
                raise _Problem(section, key, value, bad.problem, self.hint) from None
        out = dict(super().check(value, section, key))
        if "disposition" not in out:
            raise _Problem(section, key, value, "has no disposition",
                           'add disposition = "append", "replace" or "merge"')
        if "strategy" in out and out["disposition"] != "merge":
            raise _Problem(section, key, value,
                           f'sets strategy but disposition is "{out["disposition"]}"',
                           'a strategy only applies to disposition = "merge"')
        extra = [k for k in self.scd2_only if k in out]
        if extra and out.get("strategy") != "scd2":
            strategy = out.get("strategy")
            current = f'strategy is "{strategy}"' if strategy else "sets no strategy"
            raise _Problem(section, key, value, f"sets {', '.join(extra)} but {current}",
                           'these options only apply to strategy = "scd2"')
        return out


class _ColumnHints(_Table):
    hint = 'use a table of column -> hints, e.g. {is_deleted = {hard_delete = true}}'
    fields = {"hard_delete": _Bool(), "dedup_sort": _Enum("asc", "desc"), "description": _Str()}

    def check(self, value: Any, section: tuple[str, ...], key: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise _Problem(section, key, value, f"is {_kind(value)}", self.hint)
        out: dict[str, dict[str, Any]] = {}
        for column, hints in value.items():
            if not column.strip():
                raise _Problem(section, key, value, "has an empty column name", self.hint)
            if not isinstance(hints, Mapping):
                raise _Problem(section, key + (column,), hints, f"is {_kind(hints)}",
                               'use a table of hints, e.g. {hard_delete = true} or '
                               '{dedup_sort = "desc"}')
            out[column] = dict(_check_keys(hints, self.fields, section, key + (column,)))
        for hint, label in (("hard_delete", "hard_delete = true"), ("dedup_sort", "dedup_sort")):
            marked = [c for c, h in out.items() if h.get(hint) not in (None, False)]
            if len(marked) > 1:
                raise _Problem(section, key, value, f"gives {label} to {len(marked)} columns ("
                               + ", ".join(marked) + ")", f"at most one column may have {label}")
        return out


class _Partitions(_Table):
    hint = 'use a table such as {schedule = "daily", start = 2024-01-01, end_offset = 0}'
    fields = {
        "schedule": _Enum("hourly", "daily", "weekly", "monthly"),
        "start": _Instant(),
        "end_offset": _Int(0),
        "timezone": _TimeZone(),
    }

    def check(self, value: Any, section: tuple[str, ...], key: tuple[str, ...]) -> dict[str, Any]:
        out = super().check(value, section, key)
        for required in ("schedule", "start"):
            if required not in out:
                raise _Problem(section, key, value, f"has no {required}", self.hint)
        return {"end_offset": 0, "timezone": "UTC", **out}


class _SparkConf(_Table):
    hint = "use a table of Spark settings whose values are strings, numbers or booleans"

    def check(self, value: Any, section: tuple[str, ...], key: tuple[str, ...]) -> dict[str, str]:
        if not isinstance(value, Mapping):
            raise _Problem(section, key, value, f"is {_kind(value)}", self.hint)
        out: dict[str, str] = {}
        for name, item in value.items():
            if isinstance(item, bool):
                out[name] = "true" if item else "false"
            elif isinstance(item, (str, int)) or isinstance(item, float) and math.isfinite(item):
                out[name] = str(item)
            else:
                raise _Problem(section + key, (name,), item, f"is {_kind(item)}",
                               "Spark settings are strings, numbers or booleans")
        return out


# --------------------------------------------------------------------------- schema: sections

_COLUMNS_HINT = 'use a column name or a list of column names, e.g. ["id"]'

SPARK_FIELDS: Mapping[str, _Type] = {
    "master": _Str('use a Spark master URL such as "local[*]" or "spark://host:7077"'),
    "app_name": _Str(),
    "conf": _SparkConf(),
}
DESTINATION_FIELDS: Mapping[str, _Type] = {
    # "delta" is reserved: rejected when config loads, not at the first write
    "format": _Enum("iceberg", hint='use "iceberg", the only table format supported ("delta" is not '
                                    'available yet)'),
    "catalog": _Str("use a catalog name without dots, e.g. \"lake\""),
    "namespace": _Str('use a namespace such as "incremental"'),
    "warehouse": _Str("use a folder path (relative to the config file's folder) or a URI such "
                      "as s3://bucket/warehouse"),
}
ASSET_FIELDS: Mapping[str, _Type] = {
    "key_prefix": _Names('use a string or a list of strings, e.g. ["lake", "raw"]'),
    "group_name": _Str(),
    "description": _Str("use a string", allow_empty=True),
    "primary_key": _Names(_COLUMNS_HINT),
    "merge_key": _Names(_COLUMNS_HINT),
    "write_disposition": _WriteDisposition(),
    "columns": _ColumnHints(),
    "partition_by": _Names(_COLUMNS_HINT),
    "partitions": _Partitions(),
    "concurrency_pool": _Str(),
}
INCREMENTAL_FIELDS: Mapping[str, _Type] = {
    "cursor_path": _Str('use a column name or a dotted/JSON path, e.g. "updated_at"'),
    "initial_value": _CursorValue(),
    "end_value": _CursorValue(),
    "last_value_func": _Enum("max", "min"),
    "primary_key": _Names(_COLUMNS_HINT + ", or [] for no boundary dedup", allow_empty=True),
    "row_order": _Enum("asc", "desc"),
    "on_cursor_value_missing": _Enum("raise", "include", "exclude"),
    "range_start": _Enum("closed", "open"),
    "range_end": _Enum("open", "closed"),
    "lag": _Number(0, "use a number >= 0 (seconds for datetimes, days for dates, units for "
                      "numbers)"),
    "cursor_type": _Enum("timestamp", "date", "number", "string", "epoch_seconds", "epoch_millis"),
}
SECTIONS = ("spark", "destination", "assets")
_ASSET_TABLES = ("write_disposition", "partitions")  # tables whose keys env vars can address
_NAME_RE = re.compile(r"[A-Za-z0-9_]+")  # Dagster's rule for asset names


def _check_keys(
    table: Mapping[str, Any],
    fields: Mapping[str, _Type],
    section: tuple[str, ...],
    key: tuple[str, ...] = (),
    elsewhere: Callable[[str], str | None] | None = None,
) -> Mapping[str, Any]:
    """Check each given key of a table against its schema; keep only the given keys."""
    out: dict[str, Any] = {}
    for name, value in table.items():
        if name not in fields:
            raise _unknown(section, key + (name,), fields, elsewhere(name) if elsewhere else None)
        out[name] = fields[name].check(value, section, key + (name,))
    return out


def _suggest(name: str, known: list[str] | tuple[str, ...] | Mapping[str, Any]) -> str | None:
    match = difflib.get_close_matches(name.lower(), list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def _unknown(
    section: tuple[str, ...],
    key: tuple[str, ...],
    known: Mapping[str, Any],
    extra: str | None = None,
) -> _Problem:
    guess = _suggest(key[-1], known)
    hint = "; ".join([*([extra] if extra else []), f"known keys: {', '.join(known)}"])
    if guess:
        hint = f"did you mean {guess}? {hint}"
    return _Problem(section, key, None, "is not a known key", hint, show_value=False)


# --------------------------------------------------------------------------- rendering


_BARE_RE = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(name: str) -> str:
    return name if _BARE_RE.fullmatch(name) else json.dumps(name)


def _toml(value: Any) -> str:
    """A value as the user would write it in TOML (what messages show)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _section_text(section: tuple[str, ...]) -> str:
    return "[" + ".".join(_toml_key(s) for s in section) + "]"


def _key_text(section: tuple[str, ...], key: tuple[str, ...]) -> str:
    # Spark conf keys are dotted names in one piece: show them as written, not quoted.
    if section[:2] == ("spark", "conf"):
        return ".".join(key)
    return ".".join(_toml_key(k) for k in key)


class _Reporter:
    """Turns problems into IncrementalConfigError: file, line, section, key, value, source."""

    def __init__(
        self, display: str, lines: tuple[str, ...], sources: Mapping[tuple[str, ...], str]
    ) -> None:
        self.display, self.lines, self.sources = display, lines, sources

    def env_for(self, path: tuple[str, ...]) -> list[str]:
        """Environment variables that set this value, a table around it, or keys inside it."""
        around = [path[:n] for n in range(len(path), 0, -1) if path[:n] in self.sources][:1]
        names = [self.sources[p] for p in around]
        names += [v for p, v in self.sources.items() if len(p) > len(path) and p[: len(path)] == path]
        return list(dict.fromkeys(names))

    def set_whole_by_env(self, path: tuple[str, ...]) -> bool:
        return any(path[:n] in self.sources for n in range(len(path), 0, -1))

    def line(self, path: tuple[str, ...]) -> int | None:
        if not self.lines or self.set_whole_by_env(path):
            return None
        targets = [path]
        if path[:2] == ("spark", "conf") and len(path) > 2:  # dotted bare keys nest in TOML
            targets.append(path[:2] + tuple(path[2].split(".")) + path[3:])
        return next((n for t in targets if (n := _locate(self.lines, t)) is not None), None)

    def head(self, section: tuple[str, ...], key: tuple[str, ...]) -> str:
        """`config/config.toml: [assets.orders.updated_at] initial_value`."""
        words = [f"{self.display}:"]
        if section:
            words.append(_section_text(section))
        if key:
            words.append(_key_text(section, key))
        return " ".join(words)

    def where(self, section: tuple[str, ...], key: tuple[str, ...]) -> str:
        text = self.head(section, key)
        env = self.env_for(section + key)
        if env:
            return text + f" (from environment variable {', '.join(env)})"
        line = self.line(section + key)
        return text + (f" (at line {line})" if line else "")

    def error(self, p: _Problem, path: Path) -> IncrementalConfigError:
        full = p.section + p.key
        env = [p.env] if p.env else self.env_for(full)
        if full:
            text = self.head(p.section, p.key)
            if p.show_value:
                text += f" = {_toml(p.value)}"
            if env:
                text += f" (from environment variable {', '.join(env)})"
        else:  # a problem with the variable's name itself
            text = f"environment variable {p.env}"
        text += f" {p.problem}"
        if p.hint:
            text += f"; {p.hint}"
        line = None if p.env else self.line(full)
        if line:
            text += f" (at line {line})"
        return _error(text, path=path, section=_section_text(p.section) if p.section else None,
                      key=".".join(p.key) or None, value=p.value if p.show_value else None,
                      line=line, env_var=env[0] if env else None)


def _error(
    message: str,
    *,
    path: Path,
    section: str | None = None,
    key: str | None = None,
    value: Any = None,
    line: int | None = None,
    env_var: str | None = None,
) -> IncrementalConfigError:
    """IncrementalConfigError with structured attributes for code that wants more than text.

    `path` (absolute), `section` ("[assets.orders.updated_at]"), `key` (dotted below the section),
    `value`, `line` (None when unknown or set by the environment), `env_var` (or None).
    """
    err = IncrementalConfigError(message)
    err.path, err.section, err.key, err.value = path, section, key, value  # type: ignore[attr-defined]
    err.line, err.env_var = line, env_var  # type: ignore[attr-defined]
    return err


_HEADER_RE = re.compile(r"\[\s*([^\[\]]+?)\s*\]")
_PART_RE = re.compile(r"""\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*(\.|$)""")
_KEY_RE = re.compile(r"""((?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\s-])+?)\s*=(?!=)""")


def _unquote(part: str) -> str:
    if part.startswith('"'):
        try:
            return json.loads(part)
        except ValueError:
            return part[1:-1]
    return part.strip("'")


def _dotted(text: str) -> tuple[str, ...] | None:
    parts, pos = [], 0
    while pos < len(text):
        m = _PART_RE.match(text, pos)
        if not m:
            return None
        part = m.group(1)
        parts.append(_unquote(part))
        pos = m.end()
        if not m.group(2):
            break
    return tuple(parts) if pos >= len(text.rstrip()) else None


def _locate(lines: tuple[str, ...], target: tuple[str, ...]) -> int | None:
    """Best-effort line of a key path (tomli gives none for valid documents): longest match wins."""
    header: tuple[str, ...] = ()
    best, best_len, multiline = None, 0, False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        quotes = stripped.count('"""') + stripped.count("'''")
        if multiline:
            multiline = quotes % 2 == 0
            continue
        multiline = quotes % 2 == 1
        if not stripped or stripped.startswith("#"):
            continue
        candidate = None
        if stripped.startswith("[") and not stripped.startswith("[["):
            m = _HEADER_RE.match(stripped)
            header = (_dotted(m.group(1)) or ()) if m else ()
            candidate = header
        elif m := _KEY_RE.match(stripped):
            key = _dotted(m.group(1).strip())
            candidate = header + key if key else None
        if candidate and len(candidate) > best_len and target[: len(candidate)] == candidate:
            best, best_len = number, len(candidate)
    return best


# --------------------------------------------------------------------------- environment


def _find_name(table: Mapping[str, Any], name: str) -> str | None:
    """`name` itself if present, else the one key equal to it ignoring case (None: absent)."""
    if name in table:
        return name
    matches = [k for k in table if k.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


class _Env:
    """Applies DAGSTER_INCREMENTAL__... variables to the raw document, recording `sources`."""

    def __init__(self, raw: dict[str, Any], sources: dict[tuple[str, ...], str]) -> None:
        self.raw, self.sources = raw, sources

    def apply(self, environ: Mapping[str, str]) -> None:
        found = []
        for name, text in environ.items():
            if name.upper().startswith(ENV_PREFIX):
                parts = name[len(ENV_PREFIX):].split("__")
                found.append((len(parts), name, parts, text))
        for _, name, parts, text in sorted(found):
            self.apply_one(name, [p.lower() for p in parts], parts, text)

    def apply_one(self, var: str, parts: list[str], original: list[str], text: str) -> None:
        def unknown(section: tuple[str, ...], key: str, known: Mapping[str, Any]) -> _Problem:
            guess = _suggest(key, list(known))
            hint = f"known: {', '.join(known)}"
            if guess:
                hint = f"did you mean {ENV_PREFIX}{'__'.join((*section, guess)).upper()}? {hint}"
            return _Problem(section, (key,), None, "is not a known key", hint,
                            show_value=False, env=var)

        def name_in(table: Mapping[str, Any], name: str, section: tuple[str, ...]) -> str:
            """The file's spelling of `name`; a name the file lacks is created in lower case."""
            if name in table:
                return name
            matches = [k for k in table if k.lower() == name]
            if len(matches) > 1:
                raise _Problem(section, (name,), None,
                               f"matches several names of the file ({', '.join(matches)})",
                               "names that differ only in case cannot be told apart in the "
                               "environment; rename one of them", show_value=False, env=var)
            return matches[0] if matches else name

        if not all(parts):
            raise _Problem((), (), text, "is not a valid name",
                           "separate levels with exactly two underscores, e.g. "
                           f"{ENV_PREFIX}ASSETS__ORDERS__PRIMARY_KEY", show_value=False, env=var)
        head, rest = parts[0], parts[1:]
        if head not in SECTIONS:
            raise _Problem((head,), (), None, "is not a known section",
                           f"did you mean {ENV_PREFIX}{(_suggest(head, SECTIONS) or 'assets').upper()}"
                           "__...?",
                           show_value=False, env=var)
        if not rest:
            raise _Problem((head,), (), None, "names no key",
                           f"append __<KEY>, e.g. {ENV_PREFIX}SPARK__MASTER", show_value=False, env=var)
        if head == "spark" and rest[0] == "conf" and len(rest) <= 2:
            return self.spark_conf(var, original[2:], text)
        if head in ("spark", "destination"):
            fields = SPARK_FIELDS if head == "spark" else DESTINATION_FIELDS
            if len(rest) > 1 or rest[0] not in fields:
                raise unknown((head,), "__".join(rest), fields)
            return self.set((head,), (rest[0],), fields[rest[0]], var, text)

        # assets
        assets = self.table(("assets",), var)
        asset = name_in(assets, rest[0], ("assets",))
        section: tuple[str, ...] = ("assets", asset)
        if len(rest) < 2:
            raise _Problem(section, (), None, "names no key",
                           f"append __<KEY> or __<ARGUMENT>__<KEY>, e.g. {var}__PRIMARY_KEY",
                           show_value=False, env=var)
        key, more = rest[1], rest[2:]
        asset_table = assets.get(asset) if isinstance(assets.get(asset), dict) else {}
        if key in ASSET_FIELDS:
            if not more:
                return self.set(section, (key,), ASSET_FIELDS[key], var, text)
            if key in _ASSET_TABLES and len(more) == 1:
                fields = ASSET_FIELDS[key].fields  # type: ignore[attr-defined]
                if more[0] not in fields:
                    raise unknown(section + (key,), more[0], fields)
                return self.set(section, (key, more[0]), fields[more[0]], var, text)
            if key == "columns" and len(more) in (1, 2):
                columns = self.table(section + ("columns",), var)
                column = name_in(columns, more[0], section + ("columns",))
                if len(more) == 1:
                    return self.set(section, ("columns", column), _ColumnHints(), var, text,
                                    inline=True)
                fields = _ColumnHints.fields
                if more[1] not in fields:
                    raise unknown(section + ("columns", column), more[1], fields)
                return self.set(section, ("columns", column, more[1]), fields[more[1]], var, text)
            raise _Problem(section, (key, *more), None, "is not a known key",
                           f"{key} has no keys to set one by one; set {ENV_PREFIX}ASSETS__"
                           f"{original[1]}__{original[2]} to the whole value",
                           show_value=False, env=var)
        # an incremental argument
        arguments = {k: v for k, v in asset_table.items() if k not in ASSET_FIELDS}
        argument = name_in(arguments, key, section)
        if not more:
            return self.set(section, (argument,), _Table(), var, text, inline=True)
        if len(more) > 1 or more[0] not in INCREMENTAL_FIELDS:
            raise unknown(section + (argument,), "__".join(more), INCREMENTAL_FIELDS)
        self.set(section + (argument,), (more[0],), INCREMENTAL_FIELDS[more[0]], var, text)

    def table(self, path: tuple[str, ...], var: str) -> dict[str, Any]:
        """The raw table at `path`, created if absent; a non-table there cannot take the key."""
        node: Any = self.raw
        for depth, name in enumerate(path):
            if isinstance(node.get(name), str) and path[depth:] == ("write_disposition",):
                node[name] = {"disposition": node[name]}  # "merge" -> {disposition = "merge"}
            child = node.setdefault(name, {})
            if not isinstance(child, dict):
                raise _Problem(path[:depth], (name,), child,
                               f"is {_kind(child)}, so {var} cannot set a key inside it",
                               "make it a table or drop the environment variable")
            node = child
        return node

    def set(self, section: tuple[str, ...], key: tuple[str, ...], kind: _Type, var: str, text: str,
            *, inline: bool = False) -> None:
        try:
            value = kind.from_env(text)
            if inline and not isinstance(value, Mapping):
                raise _Bad("is not an inline table")
        except _Bad as bad:
            hint = 'use a TOML inline table, e.g. {initial_value = "2024-01-01"}' if inline else kind.hint
            raise _Problem(section, key, text, bad.problem, hint, env=var) from None
        parent = self.table(section + key[:-1], var)
        parent[key[-1]] = value
        for stale in [p for p in self.sources if p[: len(section + key)] == section + key]:
            del self.sources[stale]  # a whole table replaced: its older per-key sources are gone
        self.sources[section + key] = var

    def spark_conf(self, var: str, rest: list[str], text: str) -> None:
        conf = self.table(("spark", "conf"), var)
        if not rest:  # the whole table, merged into the file's
            try:
                value = _parse_literal(text.strip()) if text.strip().startswith("{") else None
            except _Bad:
                value = None
            if not isinstance(value, Mapping):
                raise _Problem(("spark",), ("conf",), text, "is not an inline table",
                               'use e.g. {"spark.driver.bindAddress" = "127.0.0.1"}', env=var)
            for name, item in _flatten(value).items():
                conf[name] = item
                self.sources[("spark", "conf", name)] = var
            return
        name = spark_conf_key_from_env(
            rest[0], conf, var=var,
            other_way=f"set {ENV_PREFIX}SPARK__CONF = '{{\"<key>\" = \"<value>\"}}'")
        conf[name] = text
        self.sources[("spark", "conf", name)] = var


def spark_conf_key_from_env(token: str, existing: Iterable[str], *, var: str, other_way: str) -> str:
    """The Spark conf key that the <KEY> of `..._SPARK__CONF__<KEY>` names.

    The key of `existing` (the file's [spark.conf]) that spells the same with `.`/`-` as `_`
    (so camelCase keys can be overridden), else SPARK_X_Y -> spark.x.y. Shared by config.toml
    and secrets.toml so both spell keys alike; `other_way` says how to set any other key.
    Raises a located `_Problem` (never showing a value) when the key cannot be named.
    """
    wanted = token.upper()
    spelled = [k for k in existing if re.sub(r"[.\-]", "_", k).upper() == wanted]
    if len(spelled) > 1:
        raise _Problem(("spark", "conf"), (token,), None,
                       f"matches several keys of the file ({', '.join(spelled)})",
                       f"{other_way} instead", show_value=False, env=var)
    if spelled:
        return spelled[0]
    if wanted.startswith("SPARK_"):
        return wanted.lower().replace("_", ".")
    raise _Problem(("spark", "conf"), (token,), None, "does not start with SPARK_",
                   "name the Spark key with dots as underscores "
                   f"(SPARK_SQL_SHUFFLE_PARTITIONS), or {other_way}",
                   show_value=False, env=var)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"spark": {"sql": {"x": 1}}} -> {"spark.sql.x": 1}: bare dotted TOML keys nest tables."""
    out: dict[str, Any] = {}
    for name, value in table.items():
        full = f"{prefix}{name}"
        items = _flatten(value, full + ".") if isinstance(value, dict) else {full: value}
        for key, item in items.items():
            if key in out:  # "spark.sql.x" = 1 next to spark.sql.x = 2
                raise _Problem(("spark", "conf"), (key,), item, "is set twice (quoted and dotted)",
                               "keep one of them")
            out[key] = item
    return out


# --------------------------------------------------------------------------- loading


_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]+:")


def _project_dir(config_dir: Path) -> Path:
    """The project folder: the parent of a folder named `config`, else the file's own folder."""
    return config_dir.parent if config_dir.name == "config" else config_dir


def _warehouse(value: str, config_dir: Path, project_dir: Path) -> str:
    """Resolve a relative warehouse against the config folder; it must stay inside the project.

    Lexical (no symlink resolution), so a data/ folder that is a symlink to a bigger disk is fine.
    """
    if _URI_RE.match(value):
        return value
    path = Path(value).expanduser()
    if path.is_absolute():
        return os.path.normpath(path)
    resolved = os.path.normpath(config_dir / path)
    project = os.path.normpath(project_dir)
    if os.path.commonpath([resolved, project]) != project:
        raise _Problem(("destination",), ("warehouse",), value,
                       f"resolves to {resolved}, outside the project folder {project_dir}",
                       f"relative paths resolve against the config file's folder ({config_dir}); keep "
                       "the warehouse inside the project, or give an absolute path or a URI such as "
                       "s3://bucket/warehouse")
    return resolved


def load_config(path: str | os.PathLike[str] | None = None, *,
                environ: Mapping[str, str] | None = None) -> ProjectConfig:
    """Load config.toml and the DAGSTER_INCREMENTAL__... environment overrides, validated.

    Args:
        path: the file; default `$DAGSTER_INCREMENTAL_CONFIG`, else ./config/config.toml (relative
            paths are relative to the current directory). A missing default file means "no
            config" (all defaults, plus the environment); a missing named file is an error.
        environ: the environment to read (default `os.environ`; tests pass a dict).

    Raises:
        IncrementalConfigError: malformed TOML, an unknown section or key, a wrong type or an
            invalid value, in the file or in an environment variable. The message names the file,
            line, section, key, value and what is allowed; `.path`, `.section`, `.key`, `.value`,
            `.line` and `.env_var` carry the same for code.
    """
    environ = os.environ if environ is None else environ
    explicit: str | None = None
    if path is not None:
        display, explicit = os.fspath(path), "the path given to load_config"
    elif environ.get(CONFIG_PATH_ENV):
        display, explicit = environ[CONFIG_PATH_ENV], f"${CONFIG_PATH_ENV}"
    else:
        display = str(DEFAULT_CONFIG_PATH)
    file = Path(display).expanduser().absolute()
    config_dir = file.parent
    project_dir = _project_dir(config_dir)

    text, found = "", False
    if file.is_file():
        try:
            text, found = file.read_text(encoding="utf-8"), True
        except (OSError, UnicodeDecodeError) as exc:
            raise _error(f"{display}: cannot read the config file ({exc})", path=file) from None
    elif file.exists():
        raise _error(f"{display}: is not a file; point {explicit or 'load_config'} at a "
                     "config.toml", path=file)
    elif explicit:
        raise _error(f"{display}: config file not found (named by {explicit}); create it or fix the "
                     f"path (resolved to {file})", path=file)

    try:
        raw: dict[str, Any] = tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        lines = text.splitlines()
        shown = f"\n    {line} | {lines[line - 1]}" if line and 0 < line <= len(lines) else ""
        raise _error(f"{display}: invalid TOML: {exc}{shown}", path=file, line=line) from None

    lines = tuple(text.splitlines())
    sources: dict[tuple[str, ...], str] = {}
    reporter = _Reporter(display, lines, sources)
    try:
        if isinstance(raw.get("spark"), dict) and isinstance(raw["spark"].get("conf"), dict):
            raw["spark"]["conf"] = _flatten(raw["spark"]["conf"])
        _Env(raw, sources).apply(environ)
        return _build(raw, file, display, found, config_dir, project_dir, sources, lines)
    except _Problem as problem:
        raise reporter.error(problem, file) from None


def _build(
    raw: Mapping[str, Any],
    file: Path,
    display: str,
    found: bool,
    config_dir: Path,
    project_dir: Path,
    sources: Mapping[tuple[str, ...], str],
    lines: tuple[str, ...],
) -> ProjectConfig:
    """Validate the merged raw document and build the frozen result."""
    for name in raw:
        if name not in SECTIONS:
            guess = _suggest(name, SECTIONS)
            raise _Problem((name,), (), None, "is not a known section",
                           (f"did you mean [{guess}]? " if guess else "")
                           + "known sections: [spark], [destination], [assets.<asset>]",
                           show_value=False)
    spark_raw = _section(raw, "spark")
    spark = _check_keys(spark_raw, SPARK_FIELDS, ("spark",))
    spark_config = SparkConfig(
        master=spark.get("master", SparkConfig.master),
        app_name=spark.get("app_name", SparkConfig.app_name),
        conf=MappingProxyType(dict(spark.get("conf", {}))),
    )
    dest = dict(_check_keys(_section(raw, "destination"), DESTINATION_FIELDS, ("destination",)))
    if "." in dest.get("catalog", ""):
        raise _Problem(("destination",), ("catalog",), dest["catalog"], "contains a dot",
                       DESTINATION_FIELDS["catalog"].hint)
    warehouse = dest.get("warehouse", DestinationConfig.warehouse)
    dest["warehouse"] = _warehouse(warehouse, config_dir, project_dir)
    destination = DestinationConfig(**dest)

    assets: dict[str, AssetConfig] = {}
    for name, table in _section(raw, "assets").items():
        assets[name] = _asset(name, table)
    return ProjectConfig(
        path=file, display_path=display, found=found, project_dir=project_dir,
        spark=spark_config, destination=destination, assets=MappingProxyType(assets),
        sources=MappingProxyType(dict(sources)), _lines=lines,
    )


def _section(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, Mapping):
        raise _Problem((), (name,), value, f"is {_kind(value)}", f"make it a table: [{name}]")
    return value


def _asset(name: str, table: Any) -> AssetConfig:
    section = ("assets", name)
    if not isinstance(table, Mapping):
        raise _Problem(("assets",), (name,), table, f"is {_kind(table)}",
                       f"each asset is a table: [assets.{_toml_key(name)}]")
    if not _NAME_RE.fullmatch(name):
        raise _Problem(section, (), None, "is not a valid asset name",
                       "asset names use letters, digits and _ only (the asset function's name, "
                       "or its name=)",
                       show_value=False)
    overrides: dict[str, Any] = {}
    incrementals: dict[str, Mapping[str, Any]] = {}
    for key, value in table.items():
        if key in ASSET_FIELDS:
            overrides[key] = ASSET_FIELDS[key].check(value, section, (key,))
        elif isinstance(value, Mapping):
            incrementals[key] = _argument(section, key, value)
        else:
            def elsewhere(k: str) -> str | None:
                if k in INCREMENTAL_FIELDS:
                    return (f"{k} belongs in the table of an incremental argument, e.g. "
                            f"[assets.{_toml_key(name)}.updated_at]")
                return "sub-tables name incremental arguments"
            raise _unknown(section, (key,), ASSET_FIELDS, elsewhere(key))
    return AssetConfig(name, MappingProxyType(overrides), MappingProxyType(incrementals))


def _argument(
    asset_section: tuple[str, ...], name: str, table: Mapping[str, Any]
) -> Mapping[str, Any]:
    section = asset_section + (name,)
    if not name.isidentifier():
        raise _Problem(section, (), None, "is not a valid argument name",
                       "sub-tables of an asset name its incremental arguments (Python identifiers)",
                       show_value=False)

    def elsewhere(key: str) -> str | None:
        notes = []
        if key in ASSET_FIELDS:
            notes.append(f"{key} belongs in {_section_text(asset_section)}")
        guess = _suggest(name, ASSET_FIELDS)
        if guess:
            notes.append(f"{_section_text(section)} is read as the incremental argument {name!r}; "
                         f"did you mean {_section_text(asset_section + (guess,))}?")
        return "; ".join(notes) or None

    given = dict(_check_keys(table, INCREMENTAL_FIELDS, section, (), elsewhere))
    for key in ("initial_value", "end_value"):
        if key in given:
            _check_cursor_value(section, key, given[key], given.get("cursor_type"))
    return MappingProxyType(given)


_CURSOR_VALUE_HINT = (
    'use a date, a datetime, a number or an ISO-8601 string such as "2024-01-01T00:00:00Z"; for a '
    'cursor column holding other strings, also set cursor_type = "string"'
)


def _check_cursor_value(section: tuple[str, ...], key: str, value: Any, cursor_type: str | None) -> None:
    """A cursor bound the engine can compare: a word like "yesterday" fails here, not in a run."""
    from dagster_incremental.cursor import values as cv
    kind = cursor_type or cv.detect_type(value)
    if cursor_type is None and kind == "string":
        raise _Problem(section, (key,), value, "is not an ISO-8601 date or datetime", _CURSOR_VALUE_HINT)
    try:
        cv.to_key(value, kind)
    except cv.KeyConversionError as exc:
        hint = "give a {kind} value, or change cursor_type" if cursor_type else _CURSOR_VALUE_HINT
        raise _Problem(section, (key,), value, f"is not a valid {kind} ({exc.reason})",
                       hint.format(kind=kind)) from None
