"""The settings schema: every option of config.toml and of @incremental_asset, its default and
its check, written once as pydantic models.

config.toml, its environment variables and the decorator's arguments are all validated by these
models; `errors.problem_from` renders a failure with its file, line, section and key. Models keep
which keys were given (`model_fields_set`), so layers (decorator < config.toml < environment)
merge without guessing what "unset" means.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, BaseModel, ConfigDict, Field, PlainValidator, ValidationInfo, model_validator
from pydantic.fields import FieldInfo

from dagster_incremental.cursor.vocabulary import CursorType, LastValueFunc, OnCursorValueMissing, RangeBound, RowOrder
from dagster_incremental.settings import environment as env
from dagster_incremental.settings import errors as check
from dagster_incremental.settings.environment import INLINE_HINT, FromEnv
from dagster_incremental.settings.errors import invalid, kind, suggest
from dagster_incremental.settings.spark_conf import spark_conf_table
from dagster_incremental.settings.vocabulary import (
    DEFAULT_STRATEGY,
    DISPOSITIONS,
    PRIMARY_KEY_STRATEGIES,
    SCD2_OPTIONS,
    Disposition,
    MergeStrategy,
    Schedule,
    SortOrder,
)

NAME_RE = re.compile(r"[A-Za-z0-9_]+")  # Dagster's rule for asset names
COLUMNS_HINT = 'use a column name or a list of column names, e.g. ["id"]'


def _hint(text: str) -> Any:
    return Field(description=text)


Text = Annotated[str, AfterValidator(check.not_blank), _hint("use a non-empty string")]
Names = Annotated[tuple[str, ...], PlainValidator(check.names()), FromEnv(env.read_names), _hint(COLUMNS_HINT)]
Instant = Annotated[date | datetime, PlainValidator(check.instant),
                    _hint("use a date or a datetime, e.g. 2024-01-01 or 2024-01-01T00:00:00Z")]
CursorValue = Annotated[Any, PlainValidator(check.cursor_value), FromEnv(env.read_cursor_value),
                        _hint("use a date, a datetime, a number or a string (ISO-8601 for instants)")]
Flag = Annotated[bool, FromEnv(env.read_bool), _hint("use true or false")]


class Table(BaseModel):
    """A TOML table: unknown keys are errors, values are checked strictly (no "5" for 5)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    hint: ClassVar[str] = ""  # what to write when the whole value is not a table
    missing_hint: ClassVar[str | None] = None  # what to add when a required key is missing

    @model_validator(mode="before")
    @classmethod
    def _a_table(cls, data: Any) -> Any:
        if isinstance(data, BaseModel):
            return data
        data = cls.coerce(data)
        if not isinstance(data, Mapping):
            raise invalid(f"is {kind(data)}", cls.hint)
        return dict(data)

    @classmethod
    def coerce(cls, data: Any) -> Any:
        """A non-table shorthand as the table it means (write_disposition = "merge")."""
        return data

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The keys a user can write (in schema order, as messages list them)."""
        return tuple(n for n, f in cls.model_fields.items() if not f.exclude)

    @classmethod
    def schema_fields(cls) -> Mapping[str, FieldInfo]:
        """Every field, those a user cannot write as keys included (how errors walk the schema)."""
        return cls.model_fields

    def given(self) -> dict[str, Any]:
        """Only the keys given, nested tables as plain dicts of their given keys."""
        return {name: _plain(getattr(self, name)) for name in self.keys() if name in self.model_fields_set}


def _plain(value: Any) -> Any:
    if isinstance(value, Table):
        return value.given()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class SparkSettings(Table):
    """[spark]: how the SparkSession is built; `conf` is passed to Spark verbatim (as strings)."""

    hint = "make it a table: [spark]"
    master: Annotated[Text, _hint('use a Spark master URL such as "local[*]" or "spark://host:7077"')] = "local[*]"
    # Spark Connect ("sc://host:15002") instead of master: Delta destinations run over it; an
    # Iceberg one is refused before anything is written (spark/connect.py).
    remote: Annotated[str | None, AfterValidator(check.spark_connect_url),
                      _hint('use a Spark Connect URL such as "sc://host:15002"')] = None
    app_name: Text = "dagster-incremental"
    conf: Annotated[Mapping[str, str], PlainValidator(spark_conf_table), FromEnv(env.read_table),
                    _hint("use a table of Spark settings whose values are strings, numbers or booleans")
                    ] = Field(default_factory=dict)


class DestinationSettings(Table):
    """[destination]: where tables live. `warehouse` is absolute, or a URI exactly as given."""

    hint = "make it a table: [destination]"
    # Delta tables live at <warehouse>/<namespace>/<table>; `catalog` names them in the UI.
    format: Annotated[Literal["iceberg", "delta"], _hint('use "iceberg" or "delta"')] = "iceberg"
    catalog: Annotated[Text, AfterValidator(check.no_dot), _hint('use a catalog name without dots, e.g. "lake"')] = "lake"
    namespace: Annotated[Text, _hint('use a namespace such as "incremental"')] = "incremental"
    warehouse: Annotated[Text, _hint("use a folder path (relative to the config file's folder) or a URI such "
                                     "as s3://bucket/warehouse")] = "data/warehouse"


class WriteDisposition(Table):
    """How rows are written: dlt's write_disposition, a name or a table."""

    hint = 'use "append", "replace" or "merge", or a table such as {disposition = "merge", strategy = "upsert"}'
    missing_hint = 'add disposition = "append", "replace" or "merge"'
    disposition: Disposition
    strategy: MergeStrategy | None = None
    validity_column_names: Annotated[tuple[str, str] | None, PlainValidator(check.names(exactly=2)),
                                     FromEnv(env.read_names),
                                     _hint('use two column names, e.g. ["_valid_from", "_valid_to"]')] = None
    active_record_timestamp: Instant | None = None
    boundary_timestamp: Instant | None = None
    row_version_column_name: Annotated[Text | None, _hint("use a column name")] = None
    # upsert of a full extract: rows whose key the batch lacks are deleted (OndatraSQL's "tracked")
    delete_missing: Flag | None = None

    @classmethod
    def coerce(cls, data: Any) -> Any:
        if isinstance(data, str):
            if data not in DISPOSITIONS:
                raise invalid("is not allowed", cls.hint)
            return {"disposition": data}
        return data

    @model_validator(mode="after")
    def _options_fit_the_disposition(self) -> WriteDisposition:
        if self.strategy is not None and self.disposition != "merge":
            raise invalid(f'sets strategy but disposition is "{self.disposition}"',
                          'a strategy only applies to disposition = "merge"')
        extra = [k for k in SCD2_OPTIONS if k in self.model_fields_set]
        if extra and self.strategy != "scd2":
            current = f'strategy is "{self.strategy}"' if self.strategy else "sets no strategy"
            raise invalid(f"sets {', '.join(extra)} but {current}", 'these options only apply to strategy = "scd2"')
        if self.delete_missing and self.merge_strategy != "upsert":
            current = f'strategy is "{self.merge_strategy}"' if self.merge_strategy else f'disposition is "{self.disposition}"'
            raise invalid(f"sets delete_missing but {current}",
                          'delete_missing only applies to disposition = "merge", strategy = "upsert"')
        return self

    @property
    def merge_strategy(self) -> MergeStrategy | None:
        """The strategy in force: dlt's default for "merge", None for append and replace."""
        return (self.strategy or DEFAULT_STRATEGY) if self.disposition == "merge" else None

    def scd2_options(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SCD2_OPTIONS if k in self.model_fields_set}


class ColumnHints(Table):
    """One column's hints."""

    hint = 'use a table of hints, e.g. {hard_delete = true} or {dedup_sort = "desc"}'
    hard_delete: Flag | None = None
    dedup_sort: SortOrder | None = None
    description: Text | None = None


def _one_column_each(columns: Mapping[str, ColumnHints]) -> Mapping[str, ColumnHints]:
    for name in columns:
        if not name.strip():
            raise invalid("has an empty column name")
    for hint, label in (("hard_delete", "hard_delete = true"), ("dedup_sort", "dedup_sort")):
        marked = [c for c, h in columns.items() if getattr(h, hint) not in (None, False)]
        if len(marked) > 1:
            raise invalid(f"gives {label} to {len(marked)} columns ({', '.join(marked)})",
                          f"at most one column may have {label}")
    return columns


class Partitions(Table):
    """A Dagster time-window partitions definition as plain data (free of Dagster, so loading
    config stays importable anywhere; the asset factory builds the definition from it)."""

    hint = 'use a table such as {schedule = "daily", start = 2024-01-01, end_offset = 0}'
    schedule: Schedule
    start: Instant
    end_offset: Annotated[int, Field(ge=0), FromEnv(env.read_int), _hint("use an integer >= 0")] = 0
    timezone: Annotated[str, AfterValidator(check.time_zone),
                        _hint('use an IANA time zone name such as "UTC" or "Europe/Berlin"')] = "UTC"

    @property
    def start_datetime(self) -> datetime:
        """`start` as a datetime (a date means midnight in `timezone`), as Dagster takes it."""
        if isinstance(self.start, datetime):
            return self.start
        return datetime(self.start.year, self.start.month, self.start.day)

    def given(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.keys()}  # defaults filled in


FORMAT_HINT = 'use a strptime format such as "%d/%m/%Y %H:%M"'
LAG_HINT = ('use a number >= 0 (seconds for datetimes, days for dates, units for numbers) or an ISO-8601 '
            'duration such as "P1D" or "P1M"')


class IncrementalArgument(Table):
    """[assets.<asset>.<argument>]: the cursor spec of one incremental argument."""

    hint = INLINE_HINT
    cursor_path: Annotated[Text, _hint('use a column name or a dotted/JSON path, e.g. "updated_at"')] | None = None
    initial_value: CursorValue = None
    end_value: CursorValue = None
    last_value_func: LastValueFunc | None = None
    primary_key: Annotated[tuple[str, ...], PlainValidator(check.names(allow_empty=True)), FromEnv(env.read_names),
                           _hint(COLUMNS_HINT + ", or [] for no boundary dedup")] | None = None
    row_order: RowOrder | None = None
    on_cursor_value_missing: OnCursorValueMissing | None = None
    range_start: RangeBound | None = None
    range_end: RangeBound | None = None
    lag: Annotated[float | str, PlainValidator(check.lag_value), FromEnv(env.read_number_or_text),
                   _hint(LAG_HINT)] | None = None
    cursor_type: CursorType | None = None
    # a long run is cut into slices of this size, one commit each (used by slicing, later)
    step: Annotated[str | float, PlainValidator(check.duration_or_number), FromEnv(env.read_number_or_text),
                    _hint('use an ISO-8601 duration such as "P30D" or "P1M", or a number > 0 in lag\'s units')] | None = None

    datetime_format: Annotated[str, PlainValidator(check.datetime_format), _hint(FORMAT_HINT)] | None = None
    cursor_datetime_formats: Annotated[tuple[str, ...], PlainValidator(check.datetime_formats),
                                       FromEnv(env.read_names), _hint(FORMAT_HINT + ", or a list of them")] | None = None

    @model_validator(mode="after")
    def _bounds_fit_the_cursor_type(self) -> IncrementalArgument:
        formats = (*([self.datetime_format] if self.datetime_format else []), *(self.cursor_datetime_formats or ()))
        ctype = self.cursor_type or ("timestamp" if formats else None)
        if formats and ctype not in ("timestamp", "date"):
            raise invalid(f'is "{ctype}"', "datetime formats make a timestamp (or date) cursor: drop cursor_type "
                          'or set "timestamp"', at=("cursor_type",), show_value=False)
        for key in ("initial_value", "end_value"):
            if key in self.model_fields_set:
                check.cursor_bound(key, getattr(self, key), ctype, formats)
        return self

    def spec_arguments(self) -> dict[str, Any]:
        """The given keys, as `incremental(...)` takes them."""
        return self.given()


class AssetOptions(Table):
    """[assets.<asset>] and the decorator's arguments: the same keys, the same checks.

    Sub-tables that are not asset keys are the asset's incremental arguments (`arguments`).
    """

    hint = "each asset is a table: [assets.<asset>]"
    key_prefix: Annotated[tuple[str, ...], PlainValidator(check.names()), FromEnv(env.read_names),
                          _hint('use a string or a list of strings, e.g. ["lake", "raw"]')] | None = None
    group_name: Text | None = None
    description: Annotated[str | None, _hint("use a string")] = None
    primary_key: Names | None = None
    merge_key: Names | None = None
    write_disposition: Annotated[WriteDisposition | None, FromEnv(env.read_table_or_text),
                                 _hint(WriteDisposition.hint)] = None
    columns: Annotated[Mapping[str, ColumnHints] | None, AfterValidator(_one_column_each),
                       _hint("use a table of column -> hints, e.g. {is_deleted = {hard_delete = true}}")] = None
    partition_by: Names | None = None
    partitions: Partitions | None = None
    # static partitions (tenants): the column holding a row's partition key
    partition_column: Text | None = None
    # time-window partitions: the column whose value places a row in a window (default: the
    # first cursor's column; needed by a partitioned asset that reads `Changes`)
    window_column: Text | None = None
    # an asset reading Changes: a run cut into slices of at most this many upstream commits,
    # one table commit (and cursor) each
    upstream_commits_per_slice: Annotated[int | None, Field(gt=0), FromEnv(env.read_int),
                                          _hint("use an integer > 0")] = None
    concurrency_pool: Text | None = None
    # the cursor must be within this of now (the cursor_fresh asset check)
    freshness: Annotated[timedelta | None, PlainValidator(check.freshness), FromEnv(env.read_number_or_text),
                         _hint('use an ISO-8601 duration such as "PT2H" or a number of seconds > 0')] = None
    # how a failed asset check shows in the UI
    check_severity: Annotated[Literal["WARN", "ERROR"], BeforeValidator(check.upper_text),
                              _hint('use "WARN" or "ERROR"')] = "WARN"
    arguments: Annotated[Mapping[str, IncrementalArgument], Field(exclude=True)] = Field(default_factory=dict)

    @classmethod
    def coerce(cls, data: Any) -> Any:
        """Move sub-tables that are not asset keys into `arguments`; other unknown keys fail."""
        if not isinstance(data, Mapping):
            return data
        out, arguments = {}, dict(data.get("arguments", {}))
        for key, value in data.items():
            if key in cls.keys() or key == "arguments":
                out[key] = value
            elif isinstance(value, Mapping):
                if not key.isidentifier():
                    raise invalid("is not a valid argument name", "sub-tables of an asset name its "
                                  "incremental arguments (Python identifiers)", at=("arguments", key),
                                  show_value=False)
                arguments[key] = value
            else:
                raise invalid("is not a known key", at=(key,), unknown=True, show_value=False, key_from=2)
        return {**out, "arguments": arguments} if arguments else out

    @model_validator(mode="after")
    def _complete_for_a_write(self, info: ValidationInfo) -> AssetOptions:
        """With context {"resolved": True} (all layers merged): what a write needs is there."""
        strategy = self.write_disposition.merge_strategy if self.write_disposition else None
        if not (info.context or {}).get("resolved"):
            return self
        if strategy in PRIMARY_KEY_STRATEGIES and not self.primary_key:
            raise invalid("is not set", f"the {strategy} strategy needs a primary key", at=("primary_key",),
                          show_value=False)
        # scd2 keeps its own rules: without a key it compares whole rows
        if strategy == "delete-insert" and not (self.primary_key or self.merge_key):
            raise invalid("is not set", "merge/delete-insert needs primary_key or merge_key to match rows on "
                          '(without one it would append every row); for an append-only table use '
                          'write_disposition = "append"', at=("primary_key",), show_value=False)
        return self

    @property
    def hard_delete_column(self) -> str | None:
        return next((c for c, h in (self.columns or {}).items() if h.hard_delete), None)

    @property
    def dedup_sort(self) -> tuple[str, SortOrder] | None:
        return next(((c, h.dedup_sort) for c, h in (self.columns or {}).items() if h.dedup_sort), None)


def _asset_tables(assets: Any) -> Any:
    """[assets]: each name a Dagster asset name, each value a table."""
    if not isinstance(assets, Mapping):
        return assets
    for name, table in assets.items():
        if not isinstance(table, (Mapping, BaseModel)):
            raise invalid(f"is {kind(table)}", f"each asset is a table: [assets.{name}]", at=(name,), key_from=1,
                          value=table)
        if not NAME_RE.fullmatch(name):
            raise invalid("is not a valid asset name", "asset names use letters, digits and _ only (the asset "
                          "function's name, or its name=)", at=(name,), show_value=False, key_from=2)
    return assets


class ProjectDocument(Table):
    """A whole config.toml (after environment overrides)."""

    spark: Annotated[SparkSettings, _hint(SparkSettings.hint)] = Field(default_factory=SparkSettings)
    destination: Annotated[DestinationSettings, _hint(DestinationSettings.hint)] = Field(default_factory=DestinationSettings)
    assets: Annotated[Mapping[str, AssetOptions], BeforeValidator(_asset_tables),
                      _hint("make it a table: [assets]")] = Field(default_factory=dict)

    @classmethod
    def coerce(cls, data: Any) -> Any:
        for name in data if isinstance(data, Mapping) else ():
            if name not in cls.keys():
                guess = suggest(name, cls.keys())
                raise invalid("is not a known section", (f"did you mean [{guess}]? " if guess else "")
                              + "known sections: [spark], [destination], [assets.<asset>]",
                              at=(name,), key_from=1, show_value=False)
        return data
