"""An incremental asset's settings, resolved once when the code location loads.

Decorator arguments < config.toml < environment, validated by the one settings schema; each
`Incremental` parameter becomes its cursor spec. A typo fails `dagster dev` at once, not a run.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import dagster as dg

from dagster_incremental.dagster import checks
from dagster_incremental.dagster import metadata as md
from dagster_incremental.dagster.kinds import table_kinds
from dagster_incremental.dagster.partition_scope import TenantPartitions, check_keys, check_window_rows, tenant_partitions
from dagster_incremental.errors import CursorRowError, IncrementalConfigError, PrimaryKeyMissing
from dagster_incremental.cursor.spec import Incremental, IncrementalSpec, incremental
from dagster_incremental.settings.errors import find_name, section_text, suggest
from dagster_incremental.dagster.upstream import is_changes_param
from dagster_incremental.settings.schema import AssetOptions, WriteDisposition
from dagster_incremental.settings.vocabulary import PRIMARY_KEY_STRATEGIES, Disposition, MergeStrategy, SortOrder
from dagster_incremental.settings.secrets import SecretsFile, function_arguments
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.write_spec import Scd2Options, WriteSpec


PARTITION_SCHEDULES = {
    "hourly": dg.HourlyPartitionsDefinition,
    "daily": dg.DailyPartitionsDefinition,
    "weekly": dg.WeeklyPartitionsDefinition,
    "monthly": dg.MonthlyPartitionsDefinition,
}


@dataclass(frozen=True)
class AssetSettings:
    """Everything resolved for one asset when the code location loads."""

    name: str
    key_prefix: tuple[str, ...]
    group_name: str | None
    description: str | None
    primary_key: tuple[str, ...]
    merge_key: tuple[str, ...]
    disposition: Disposition
    strategy: MergeStrategy | None
    scd2: Scd2Options
    hard_delete_column: str | None
    dedup_sort: tuple[str, SortOrder] | None
    partition_by: tuple[str, ...]
    partitions_def: dg.PartitionsDefinition | None
    tenants: TenantPartitions | None  # static or tenant x day partitions: a cursor per tenant
    pool: str | None
    cursors: Mapping[str, IncrementalSpec]  # parameter name -> spec
    table: TableRef
    # secrets.toml: where it is and which parameters it fed when the code loaded. Never values:
    # those are read inside each run (see secrets.py).
    secrets: SecretsFile | None = None
    secret_params: tuple[str, ...] = ()
    # parameter name -> where its cursor type is set (config key and value), for error messages
    cursor_origins: Mapping[str, str] = field(default_factory=dict)
    # column -> description shown in the table's column schema (hints, else the docstring)
    column_descriptions: Mapping[str, str] = field(default_factory=dict)
    # the cursor must be within this of now (the cursor_fresh check); None: no such check
    freshness: timedelta | None = None
    # how a failed asset check shows in the UI
    check_severity: str = "WARN"
    # the config file the asset was defined with (absolute; it may not exist)
    config_path: Path | None = None
    # upsert deletes the rows whose key a batch (a full extract) lacks
    delete_missing: bool = False
    # window_column as given (decorator or config.toml); see the window_column property
    explicit_window_column: str | None = None
    # an asset reading Changes: at most this many upstream commits per slice (None: one slice)
    upstream_commits_per_slice: int | None = None
    # (parameter or None for the asset, option) -> where it is set, for errors found in a run
    option_origins: Mapping[tuple[str | None, str], str] = field(default_factory=dict)
    # what the UI shows: Spark, the table format, the catalog's service and storage
    kinds: frozenset[str] = frozenset({"spark", "iceberg"})

    def located(self, exc: Exception) -> Exception:
        """A cursor's row error with where the option it blames is set (file, section, key and
        line, or the code), so the user knows what to edit; other errors as they are."""
        if isinstance(exc, PrimaryKeyMissing):
            setting = "primary_key"
        elif isinstance(exc, CursorRowError) and exc.setting:
            setting = exc.setting
        else:
            return exc
        arg = next((a for a, spec in self.cursors.items() if spec.cursor_path == exc.cursor_path), None)
        if setting == "primary_key" and arg is not None and self.cursors[arg].primary_key is None:
            arg = None  # the cursor inherits the asset's primary key
        origin = self.option_origins.get((arg, setting))
        if origin is None:
            return exc
        text = f"{exc} ({setting} is set in {origin}.)"
        if isinstance(exc, PrimaryKeyMissing):
            return PrimaryKeyMissing(text, columns=exc.columns, cursor_path=exc.cursor_path)
        return type(exc)(text, cursor_path=exc.cursor_path, value=exc.value, setting=exc.setting)

    @property
    def window_column(self) -> str | None:
        """The column a window replace acts on: window_column when set, else the first
        cursor's, when it is a plain column."""
        return self.explicit_window_column or _plain_cursor_column(self.cursors)

    def warnings(self) -> list[str]:
        """Settings that have no effect, or a probably unintended one (dlt warns about the same
        ones); shown when the asset is defined and at the start of each run."""
        out = []
        if self.strategy == "scd2" and self.cursors and not self.merge_key:
            out.append(
                f"scd2 with the incremental cursor {', '.join(map(repr, self.cursors))} and no merge_key retires "
                "every current row whose key is missing from a batch, but an incremental batch holds only "
                "the rows changed since the cursor: set merge_key (a batch then retires only rows of the "
                "merge_key groups it holds), or drop the cursor if the source delivers a full snapshot each run"
            )
        if self.disposition == "merge" and self.strategy in PRIMARY_KEY_STRATEGIES and self.merge_key:
            out.append(f"{self.strategy} ignores merge_key; it matches on primary_key only")
        if self.dedup_sort and not self.primary_key:
            out.append(f"dedup_sort on {self.dedup_sort[0]!r} is ignored without a primary_key")
        if self.disposition != "merge" and self.hard_delete_column:
            out.append(f"hard_delete on {self.hard_delete_column!r} only applies to disposition = \"merge\"")
        return [f"asset {self.name!r}: {text}" for text in out]

    def write_spec(self, table: TableRef) -> WriteSpec:
        """How a run writes `table` (the IO manager's name for the asset), built from these
        settings directly: the typed record goes from the settings to the commit, and
        write_settings(), its JSON, is only for the definition metadata."""
        return WriteSpec(
            table=table,
            disposition=self.disposition,
            strategy=self.strategy,
            primary_key=self.primary_key,
            merge_key=self.merge_key,
            hard_delete_column=self.hard_delete_column,
            dedup_sort=self.dedup_sort,
            cursor_column=self.window_column,
            partition_by=self.partition_by,
            scd2=self.scd2 if self.strategy == "scd2" else Scd2Options(),  # the defaults: nothing reads them
            delete_missing=self.delete_missing,
        )

    @property
    def write_keys(self) -> dict[str, Any]:
        """The keys a merge matches by, stored with the cursor: a run under other keys must not
        mix its rows into the table's (`CursorStateMismatch`, unless a full refresh)."""
        return {
            "primary_key": list(self.primary_key),
            "merge_key": list(self.merge_key),
            "write_disposition": self.disposition + (f"/{self.strategy}" if self.strategy else ""),
        }

    def write_settings(self) -> dict[str, Any]:
        """The write settings as JSON, for the definition metadata (a plain DataFrame asset's IO
        manager reads them back: `write_spec_from_settings`)."""
        return {
            "disposition": self.disposition,
            "strategy": self.strategy,
            "primary_key": list(self.primary_key),
            "merge_key": list(self.merge_key),
            "hard_delete_column": self.hard_delete_column,
            "dedup_sort": list(self.dedup_sort) if self.dedup_sort else None,
            "cursor_column": self.window_column,
            "partition_by": list(self.partition_by),
            **({"scd2": self._scd2_settings()} if self.strategy == "scd2" else {}),
            **({"delete_missing": True} if self.delete_missing else {}),
        }

    def _scd2_settings(self) -> dict[str, Any]:
        """Only the scd2 options in force: unset ones (None) would read as a block of nulls."""
        options = {
            "validity_column_names": list(self.scd2.validity_column_names),
            "active_record_timestamp": md.json_safe(self.scd2.active_record_timestamp),
            "boundary_timestamp": md.json_safe(self.scd2.boundary_timestamp),
            "row_version_column_name": self.scd2.row_version_column_name,
        }
        return {k: v for k, v in options.items() if v is not None}



def resolve_settings(func: Callable[..., Any], *, config_path: str | None, **decorator: Any) -> AssetSettings:
    """Decorator arguments < config.toml < environment, validated by the one settings schema."""
    from dagster_incremental.settings.config import load_config

    cfg = load_config(config_path)
    asset_name = decorator.get("name") or func.__name__
    asset_cfg = cfg.asset(asset_name)
    # the decorator's arguments that are asset options get the schema's checks, as config.toml's
    options = cfg.resolve_asset(asset_name, {k: v for k, v in decorator.items() if k in AssetOptions.keys()})
    write = options.write_disposition or WriteDisposition(disposition="append")
    parts_def = decorator.get("partitions_def")
    if options.partitions is not None:
        parts_def = _partitions_from_config(options.partitions)
    tenants = tenant_partitions(asset_name, parts_def, options.partition_column)
    check_keys(asset_name, tenants, write.merge_strategy, options.primary_key or (), options.merge_key or ())
    prefix_parts = options.key_prefix or ()
    secrets = SecretsFile.beside(cfg)
    # Checked now so a stray key fails the code location; the values read here are dropped.
    secret_params = tuple(function_arguments(secrets.load(), asset_name, func, reserved=reserved_params(func)))
    spec_arguments = {arg: a.spec_arguments() for arg, a in options.arguments.items()}
    cursors = _resolve_cursors(func, asset_name, spec_arguments, cfg, secret_params)
    if write.delete_missing:
        _check_full_extract(func, asset_name, cursors, parts_def)
    _check_partition_rows(func, asset_name, parts_def, tenants, options.window_column, cursors, cfg)
    origins = _option_origins(func, asset_name, cursors, asset_cfg, cfg)
    table = TableRef.for_asset(cfg.destination.catalog, cfg.destination.namespace, (*prefix_parts, asset_name))
    hints = {column: h.given() for column, h in (options.columns or {}).items()}
    return AssetSettings(
        name=asset_name,
        key_prefix=prefix_parts,
        group_name=options.group_name,
        description=options.description or inspect.getdoc(func),
        primary_key=options.primary_key or (),
        merge_key=options.merge_key or (),
        disposition=write.disposition,
        strategy=write.merge_strategy,
        scd2=Scd2Options(**write.scd2_options()),
        hard_delete_column=options.hard_delete_column,
        dedup_sort=options.dedup_sort,
        partition_by=options.partition_by or (),
        partitions_def=parts_def,
        tenants=tenants,
        pool=options.concurrency_pool,
        cursors=cursors,
        table=table,
        secrets=secrets,
        secret_params=secret_params,
        cursor_origins=_cursor_origins(func, asset_name, cursors, asset_cfg.incrementals, cfg),
        column_descriptions=column_descriptions(func, hints),
        freshness=checks.freshness_for_cursors(options.freshness, asset_name, cursors, origins),
        check_severity=options.check_severity,
        config_path=cfg.path,
        delete_missing=bool(write.delete_missing),
        explicit_window_column=options.window_column,
        upstream_commits_per_slice=options.upstream_commits_per_slice,
        option_origins=origins,
        kinds=table_kinds(cfg.destination.format, cfg.destination.catalog, str(cfg.destination.warehouse), cfg.spark.conf),
    )


def _plain_cursor_column(cursors: Mapping[str, IncrementalSpec]) -> str | None:
    """The first cursor's path that is a top-level column (a nested path names no column)."""
    for spec in cursors.values():
        path = spec.cursor_path
        if path and not any(c in path for c in ".$["):
            return path
    return None


def _check_partition_rows(func: Callable[..., Any], asset: str, partitions_def: Any, tenants: TenantPartitions | None,
                          window_column: str | None, cursors: Mapping[str, IncrementalSpec], cfg) -> None:
    """A time-window asset must know which column places a row in a window (check_window_rows);
    one reading `Changes` is checked with its upstreams (upstream.py)."""
    if any(is_changes_param(p) for p in inspect.signature(func).parameters.values()):
        return
    column = window_column or _plain_cursor_column(cursors)
    check_window_rows(asset, partitions_def, tenants, column, cursors, cfg.place(asset))


def _check_full_extract(func: Callable[..., Any], asset: str, cursors: Mapping[str, IncrementalSpec],
                        partitions_def: Any) -> None:
    """delete_missing deletes every row a batch lacks, so each batch must be the whole source:
    refuse what makes a batch partial (a cursor, upstream changes, one partition's window)."""
    partial = [f"the incremental argument {name!r} (a batch holds only the rows past its cursor)" for name in cursors]
    partial += [f"the upstream-changes argument {p.name!r} (a batch holds only the upstream's changes)"
                for p in inspect.signature(func).parameters.values() if is_changes_param(p)]
    if partitions_def is not None:
        partial.append("its partitions (a run loads one partition's rows)")
    if partial:
        raise IncrementalConfigError(
            f"asset {asset!r}: write_disposition delete_missing = true deletes every row whose key a batch "
            f"lacks, so each batch must be a full extract of the source, but the asset has {'; '.join(partial)}. "
            "Remove delete_missing, or load a full extract without them; to delete single rows, mark "
            "them with a hard_delete column instead"
        )


def column_descriptions(func: Callable[..., Any], hints: Mapping[str, Any]) -> dict[str, str]:
    """Column descriptions: a `description` hint wins over a `Columns:` section of the docstring
    (Google style: one `name: text` line per column, indented under the heading)."""
    out = _docstring_columns(inspect.getdoc(func) or "")
    out.update({c: h["description"] for c, h in hints.items() if isinstance(h, Mapping) and h.get("description")})
    return out


def without_columns(doc: str, described: Mapping[str, str]) -> str:
    """`doc` without its `Columns:` section when `described` (the column descriptions the
    column schema carries) has each of its columns, else with it as a markdown list (one
    `- `name`: text` item per column: the UI renders the description as markdown, where the
    indented section reads as one run-on paragraph); the rest kept as written. The schema
    (`dagster/column_schema` of every materialization) is the asset page's Columns table: in
    the description too, the list showed twice."""
    lines = doc.splitlines()
    heading = next((i for i, line in enumerate(lines) if line.strip() in ("Columns:", "Columns")), None)
    if heading is None:
        return doc
    end = next((i for i in range(heading + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
    columns = _docstring_columns("\n".join(lines[heading:end]))
    if not columns:
        return doc
    items = ["**Columns**", "", *(f"- `{name}`: {text}" if text else f"- `{name}`" for name, text in columns.items()), ""]
    kept = [] if set(columns) <= set(described) else items
    return "\n".join([*lines[:heading], *kept, *lines[end:]]).strip()


def _docstring_columns(doc: str) -> dict[str, str]:
    out: dict[str, str] = {}
    inside, current = False, None
    for line in doc.splitlines():
        if line.strip() in ("Columns:", "Columns"):
            inside = True
            continue
        if not inside:
            continue
        if line and not line[0].isspace():
            break  # the next section
        name, sep, text = line.strip().partition(":")
        if sep and name and " " not in name.strip("`"):
            current = name.strip("`")
            out[current] = text.strip()
        elif current and line.strip():
            out[current] = f"{out[current]} {line.strip()}"  # a continuation line
    return out


def _cursor_origins(func, asset_name: str, cursors: Mapping[str, Any], from_config, cfg) -> dict[str, str]:
    """Per cursor, the setting that decides its type: a config key, else the signature default."""
    out = {}
    for arg in cursors:
        given = from_config.get(arg, {})
        key = next((k for k in ("cursor_type", "initial_value", "end_value") if k in given), None)
        if key is not None:
            out[arg] = f"{cfg.where(asset_name, arg, key)} = {given[key]!r}"
        else:
            out[arg] = f"the default incremental(...) of parameter {arg!r} of {func.__name__}()"
    return out


CURSOR_OPTIONS = ("cursor_path", "initial_value", "end_value", "cursor_type", "cursor_datetime_formats", "primary_key")


def _option_origins(func, asset_name: str, cursors: Mapping[str, Any], asset_cfg, cfg) -> dict[tuple[str | None, str], str]:
    """Where each option a row error may blame is set: its config key (file, section, key,
    line or variable), else the code (the parameter's default incremental(...), the decorator)."""
    out: dict[tuple[str | None, str], str] = {}
    for arg in cursors:
        given = asset_cfg.incremental(arg)
        for key in CURSOR_OPTIONS:
            out[(arg, key)] = (cfg.where(asset_name, arg, key) if key in given else
                               f"the default incremental(...) of parameter {arg!r} of {func.__name__}()")
    for key in ("primary_key", "freshness"):
        out[(None, key)] = (cfg.where(asset_name, key=key) if key in asset_cfg.overrides
                            else f"@incremental_asset({key}=...)")
    return out


def _partitions_from_config(partitions) -> dg.TimeWindowPartitionsDefinition:
    """config.toml's `partitions = {schedule, start, end_offset, timezone}` as Dagster partitions."""
    cls = PARTITION_SCHEDULES[partitions.schedule]
    return cls(start_date=partitions.start_datetime, end_offset=partitions.end_offset, timezone=partitions.timezone)


def _is_incremental_param(param: inspect.Parameter) -> bool:
    annotation = param.annotation
    if isinstance(annotation, type) and issubclass(annotation, Incremental):
        return True
    if isinstance(annotation, str):
        return annotation.split(".")[-1] in ("Incremental", "Incremental | None", "Optional[Incremental]")
    return isinstance(param.default, IncrementalSpec)


def reserved_params(func) -> dict[str, str]:
    """Parameters secrets.toml may not set, with the reason (for its error message)."""
    out = {}
    for index, param in enumerate(inspect.signature(func).parameters.values()):
        if _is_incremental_param(param):
            out[param.name] = "an incremental argument (its cursor comes from config.toml)"
        elif is_changes_param(param):
            out[param.name] = "an upstream's changes (each run reads them)"
        elif index == 0 and param.name in ("context", "ctx"):
            out[param.name] = "the context parameter"
    return out


def _resolve_cursors(
    func, asset_name: str, from_config: Mapping[str, Mapping[str, Any]], cfg, secret_params: Sequence[str] = ()
) -> dict[str, IncrementalSpec]:
    signature = inspect.signature(func)
    params = list(signature.parameters.values())
    _check_argument_tables(func, asset_name, from_config, [p.name for p in params if _is_incremental_param(p)], cfg)
    cursors: dict[str, IncrementalSpec] = {}
    for index, param in enumerate(params):
        if _is_incremental_param(param):
            cursors[param.name] = _cursor_spec(asset_name, param, from_config.get(param.name, {}), cfg)
        elif is_changes_param(param):
            continue
        elif index == 0 and param.name in ("context", "ctx"):
            continue
        elif param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        elif param.default is inspect.Parameter.empty and param.name not in secret_params:
            raise IncrementalConfigError(
                f"asset {asset_name!r}: parameter {param.name!r} of {func.__name__}() is neither the "
                "context (first parameter) nor annotated `Incremental`; give it a default, remove it, "
                f"or give it a value in secrets.toml: [assets.{asset_name}] {param.name} = \"...\""
            )
    return cursors


def _check_argument_tables(func, asset_name: str, from_config: Mapping[str, Any], incrementals: Sequence[str],
                           cfg) -> None:
    """Each [assets.<asset>.<argument>] names an `Incremental` parameter: checked before any cursor
    is resolved, so a misspelt table is named as written, not as the table it should have been."""
    for arg in sorted(set(from_config) - set(incrementals)):
        guess = suggest(arg, [name for name in incrementals if name not in from_config])
        asset_table = find_name(cfg.assets, asset_name) or asset_name  # as the file spells it
        did_you_mean = f"did you mean {section_text(('assets', asset_table, guess))}? " if guess else ""
        raise IncrementalConfigError(
            f"{cfg.where(asset_name, arg)}: {func.__name__}() has no parameter {arg!r} annotated `Incremental`; "
            f"{did_you_mean}a sub-table of an asset names one of its incremental arguments "
            f"(it has: {', '.join(incrementals) or 'none'})"
        )


def _cursor_spec(asset_name: str, param: inspect.Parameter, given: Mapping[str, Any], cfg) -> IncrementalSpec:
    default = param.default if isinstance(param.default, IncrementalSpec) else None
    location = cfg.where(asset_name, param.name)
    if default is None and "cursor_path" not in given:
        raise _no_cursor_spec(asset_name, param.name, cfg)
    try:
        if default is not None:
            return default.replace(**given) if given else default
        args = dict(given)
        return incremental(args.pop("cursor_path"), **args)
    except IncrementalConfigError as exc:
        if str(exc).startswith(str(location).split(":")[0]):
            raise
        raise IncrementalConfigError(f"{location}: {exc}") from exc


def _no_cursor_spec(asset_name: str, arg: str, cfg) -> IncrementalConfigError:
    """An `Incremental` parameter without cursor_path: most often its section is misspelt (named
    for another asset, so nothing reads it), else missing, or in a config file not read here."""
    for other in difflib.get_close_matches(asset_name, [a for a in cfg.assets if a != asset_name], n=3, cutoff=0.6):
        table = find_name(cfg.assets[other].incrementals, arg)
        if table is not None and "cursor_path" in cfg.assets[other].incrementals[table]:
            wanted = section_text(("assets", asset_name, arg))
            return IncrementalConfigError(
                f"asset {asset_name!r}: parameter {arg!r} has no cursor spec, but {cfg.where(other, table)} sets one "
                f"for an asset named {other!r}; did you mean {wanted}? Rename the section to {wanted}."
            )
    return IncrementalConfigError(
        f"asset {asset_name!r}: parameter {arg!r} has no cursor spec; add `cursor_path = \"...\"` under "
        f"{cfg.place(asset_name, arg)}, or give it a default: {arg}: Incremental = incremental(\"...\")"
    )
