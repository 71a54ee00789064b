"""@incremental_asset: a resource function becomes a Dagster asset with a cursor.

The flow of one run: resolve settings (decorator < config.toml < environment < run
config), resolve the cursor (Dagster metadata reconciled with the table commit), bind the spec
(a partition window or an end_value makes it a stateless backfill), call the function, filter
what it yields, stage it (local rows stay Arrow, spilled to disk when large; Spark sources stay
lazy DataFrames), and hand it to the IO manager, which writes data and cursor in one commit. Settings are resolved once, when the code location loads, so a typo in
config.toml fails `dagster dev` at once rather than the first run.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, overload

import dagster as dg

from dagster_incremental.dagster import checks
from dagster_incremental.dagster import metadata as md
from dagster_incremental.errors import CursorStateMismatch, IncrementalConfigError, IncrementalError
from dagster_incremental.cursor.spec import Incremental, IncrementalSpec, incremental
from dagster_incremental.cursor.state import AssetState
from dagster_incremental.dagster.masking import Redactor
from dagster_incremental.settings.schema import WriteDisposition
from dagster_incremental.settings.secrets import Secrets, SecretsFile, function_arguments
from dagster_incremental.spark.table_ref import TableRef
from dagster_incremental.spark.boundary_check import drop_rows_already_loaded
from dagster_incremental.spark.staging import stage_batches
from dagster_incremental.dagster.slices import SlicedRun, plan_slices, sliced_argument
from dagster_incremental.dagster.state_store import StoredState, latest_dagster_state, reconcile
from dagster_incremental.spark.write_spec import (
    CommitInfo,
    IncrementalBatch,
    Scd2Options,
    WindowReplace,
    WriteSpec,
)

# the decorator arguments that are settings options (checked by the schema, as config.toml's)
_OPTION_ARGS = ("key_prefix", "group_name", "description", "primary_key", "merge_key", "write_disposition",
                "columns", "partition_by", "freshness", "check_severity")

PARTITION_SCHEDULES = {
    "hourly": dg.HourlyPartitionsDefinition,
    "daily": dg.DailyPartitionsDefinition,
    "weekly": dg.WeeklyPartitionsDefinition,
    "monthly": dg.MonthlyPartitionsDefinition,
}


class IncrementalRunConfig(dg.Config):
    """Per-run choices (Launchpad, `--config-json`, a sensor's RunRequest).

    Leave everything empty for a normal incremental run.
    """

    initial_value: str | None = None  # with end_value: the start of a stateless backfill
    end_value: str | None = None  # a stateless backfill of [initial_value, end_value)
    full_refresh: bool = False  # reset the cursor to initial_value and replace the table


@dataclass(frozen=True)
class AssetSettings:
    """Everything resolved for one asset when the code location loads."""

    name: str
    key_prefix: tuple[str, ...]
    group_name: str | None
    description: str | None
    primary_key: tuple[str, ...]
    merge_key: tuple[str, ...]
    disposition: str
    strategy: str | None
    scd2: Scd2Options
    hard_delete_column: str | None
    dedup_sort: tuple[str, str] | None
    partition_by: tuple[str, ...]
    partitions_def: dg.PartitionsDefinition | None
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

    @property
    def window_column(self) -> str | None:
        """The column a window replace acts on: the first cursor's, when it is a plain column."""
        for spec in self.cursors.values():
            path = spec.cursor_path
            if path and not any(c in path for c in ".$["):
                return path
        return None

    def warnings(self) -> list[str]:
        """Settings that have no effect with this disposition (dlt warns about the same ones)."""
        out = []
        if self.disposition == "merge" and self.strategy == "delete-insert" and not (self.primary_key or self.merge_key):
            out.append("merge/delete-insert without primary_key or merge_key appends every row (nothing to match on)")
        if self.disposition == "merge" and self.strategy == "upsert" and self.merge_key:
            out.append("upsert ignores merge_key; it matches on primary_key only")
        if self.dedup_sort and not self.primary_key:
            out.append(f"dedup_sort on {self.dedup_sort[0]!r} is ignored without a primary_key")
        if self.disposition != "merge" and self.hard_delete_column:
            out.append(f"hard_delete on {self.hard_delete_column!r} only applies to disposition = \"merge\"")
        return [f"asset {self.name!r}: {text}" for text in out]

    def write_settings(self) -> dict[str, Any]:
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


@overload
def incremental_asset(fn: Callable[..., Any], /) -> dg.AssetsDefinition: ...


@overload
def incremental_asset(
    fn: None = None,
    *,
    name: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    primary_key: str | Sequence[str] | None = None,
    merge_key: str | Sequence[str] | None = None,
    write_disposition: str | Mapping[str, Any] = "append",
    columns: Mapping[str, Mapping[str, Any]] | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    partition_by: str | Sequence[str] | None = None,
    config_path: str | None = None,
    io_manager_key: str = "io_manager",
    freshness: timedelta | str | float | None = None,
    check_severity: str = "WARN",
    **asset_kwargs: Any,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]: ...


def incremental_asset(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    primary_key: str | Sequence[str] | None = None,
    merge_key: str | Sequence[str] | None = None,
    write_disposition: str | Mapping[str, Any] = "append",
    columns: Mapping[str, Mapping[str, Any]] | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    partition_by: str | Sequence[str] | None = None,
    config_path: str | None = None,
    io_manager_key: str = "io_manager",
    freshness: timedelta | str | float | None = None,
    check_severity: str = "WARN",
    **asset_kwargs: Any,
) -> dg.AssetsDefinition | Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """Declare a resource function as an incremental Dagster asset.

    The parameter annotated `Incremental` receives the bound cursor run; its spec comes from
    config.toml (`[assets.<name>.<parameter>]`), else from a default in the signature
    (`updated_at: Incremental = incremental("updated_at")`). The function may yield dict rows or
    pages, or return/yield pyarrow Tables, pandas DataFrames or a pyspark DataFrame.

    Other parameters can receive credentials from secrets.toml beside config.toml
    (`[assets.<name>] api_token = "..."` -> `api_token: str | None = None`), read inside each run;
    log lines and errors of the run show `***` in place of their values (see secrets.py).

    `freshness` (a timedelta, an ISO-8601 duration like "PT2H", or seconds) adds the
    cursor_fresh asset check; `check_severity` ("WARN" or "ERROR") is how failed checks show.
    Extra keyword arguments (tags, owners, automation_condition, ...) go to `dagster.asset`.

    Examples:
        .. code-block:: python

            @incremental_asset(primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"})
            def orders(context: dg.AssetExecutionContext, updated_at: Incremental):
                yield from fetch_orders(since=updated_at.start_value, until=updated_at.end_value)

            defs = dg.Definitions(
                assets=[orders],
                resources={"io_manager": SparkTableIOManager.from_config()},
            )
    """

    def decorate(func: Callable[..., Any]) -> dg.AssetsDefinition:
        settings = resolve_settings(
            func, name=name, key_prefix=key_prefix, group_name=group_name, description=description,
            primary_key=primary_key, merge_key=merge_key, write_disposition=write_disposition,
            columns=columns, partitions_def=partitions_def, partition_by=partition_by,
            config_path=config_path, freshness=freshness, check_severity=check_severity,
        )
        return _build_asset(func, settings, io_manager_key, asset_kwargs)

    return decorate(fn) if fn is not None else decorate


# -- settings -------------------------------------------------------------------------------------


def resolve_settings(func: Callable[..., Any], *, config_path: str | None, **decorator: Any) -> AssetSettings:
    """Decorator arguments < config.toml < environment, validated by the one settings schema."""
    from dagster_incremental.settings.config import load_config

    cfg = load_config(config_path)
    asset_name = decorator.get("name") or func.__name__
    asset_cfg = cfg.asset(asset_name)
    options = cfg.resolve_asset(asset_name, {k: v for k, v in decorator.items() if k in _OPTION_ARGS})
    write = options.write_disposition or WriteDisposition(disposition="append")
    parts_def = decorator.get("partitions_def")
    if options.partitions is not None:
        parts_def = _partitions_from_config(options.partitions)
    if parts_def is not None and not isinstance(parts_def, dg.TimeWindowPartitionsDefinition):
        raise IncrementalConfigError(
            f"asset {asset_name!r}: partitions_def must be a TimeWindowPartitionsDefinition "
            f"(time windows drive backfills), got {type(parts_def).__name__}"
        )
    prefix_parts = options.key_prefix or ()
    secrets = SecretsFile.beside(cfg)
    # Checked now so a stray key fails the code location; the values read here are dropped.
    secret_params = tuple(function_arguments(secrets.load(), asset_name, func, reserved=_reserved_params(func)))
    spec_arguments = {arg: a.spec_arguments() for arg, a in options.arguments.items()}
    cursors = _resolve_cursors(func, asset_name, spec_arguments, cfg, secret_params)
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
        pool=options.concurrency_pool,
        cursors=cursors,
        table=table,
        secrets=secrets,
        secret_params=secret_params,
        cursor_origins=_cursor_origins(func, asset_name, cursors, asset_cfg.incrementals, cfg),
        column_descriptions=column_descriptions(func, hints),
        freshness=checks.freshness_for_cursors(options.freshness, asset_name, cursors),
        check_severity=options.check_severity,
    )


def column_descriptions(func: Callable[..., Any], hints: Mapping[str, Any]) -> dict[str, str]:
    """Column descriptions: a `description` hint wins over a `Columns:` section of the docstring
    (Google style: one `name: text` line per column, indented under the heading)."""
    out = _docstring_columns(inspect.getdoc(func) or "")
    out.update({c: h["description"] for c, h in hints.items() if isinstance(h, Mapping) and h.get("description")})
    return out


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


def _reserved_params(func) -> dict[str, str]:
    """Parameters secrets.toml may not set, with the reason (for its error message)."""
    out = {}
    for index, param in enumerate(inspect.signature(func).parameters.values()):
        if _is_incremental_param(param):
            out[param.name] = "an incremental argument (its cursor comes from config.toml)"
        elif index == 0 and param.name in ("context", "ctx"):
            out[param.name] = "the context parameter"
    return out


def _resolve_cursors(
    func, asset_name: str, from_config: Mapping[str, Mapping[str, Any]], cfg, secret_params: Sequence[str] = ()
) -> dict[str, IncrementalSpec]:
    signature = inspect.signature(func)
    params = list(signature.parameters.values())
    cursors: dict[str, IncrementalSpec] = {}
    for index, param in enumerate(params):
        if _is_incremental_param(param):
            cursors[param.name] = _cursor_spec(asset_name, param, from_config.get(param.name, {}), cfg)
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
    unknown = set(from_config) - set(cursors)
    if unknown:
        arg = sorted(unknown)[0]
        raise IncrementalConfigError(
            f"{cfg.where(asset_name, arg)}: {func.__name__}() has no parameter {arg!r} annotated `Incremental` "
            f"(it has: {', '.join(cursors) or 'none'})"
        )
    return cursors


def _cursor_spec(asset_name: str, param: inspect.Parameter, given: Mapping[str, Any], cfg) -> IncrementalSpec:
    default = param.default if isinstance(param.default, IncrementalSpec) else None
    location = cfg.where(asset_name, param.name)
    try:
        if default is not None:
            return default.replace(**given) if given else default
        if "cursor_path" not in given:
            raise IncrementalConfigError(
                f"asset {asset_name!r}: parameter {param.name!r} has no cursor spec; add `cursor_path = \"...\"` "
                f"under {location} or give it a default: {param.name}: Incremental = incremental(\"...\")"
            )
        args = dict(given)
        return incremental(args.pop("cursor_path"), **args)
    except IncrementalConfigError as exc:
        if str(exc).startswith(str(location).split(":")[0]):
            raise
        raise IncrementalConfigError(f"{location}: {exc}") from exc


# -- the Dagster asset ----------------------------------------------------------------------------


def _definition_metadata(settings: AssetSettings) -> dict[str, Any]:
    cursors = {
        name: {
            "cursor_path": spec.cursor_path,
            "initial_value": md.json_safe(spec.initial_value),
            "end_value": md.json_safe(spec.end_value),
            "last_value_func": spec.last_value_func if isinstance(spec.last_value_func, str) else "custom",
        }
        for name, spec in settings.cursors.items()
    }
    out: dict[str, Any] = {
        md.TABLE_NAME: dg.MetadataValue.text(settings.table.display),
        md.DEF_WRITE_DISPOSITION: dg.MetadataValue.text(
            settings.disposition + (f" ({settings.strategy})" if settings.strategy else "")
        ),
        md.DEF_PRIMARY_KEY: dg.MetadataValue.json(list(settings.primary_key)),
        md.DEF_CURSORS: dg.MetadataValue.json(cursors),
        md.DEF_WRITE_SETTINGS: dg.MetadataValue.json(settings.write_settings()),
    }
    if settings.merge_key:
        out[md.DEF_MERGE_KEY] = dg.MetadataValue.json(list(settings.merge_key))
    if settings.window_column:
        out[md.DEF_WINDOW_COLUMN] = dg.MetadataValue.text(settings.window_column)
    return out


def _description(settings: AssetSettings) -> str:
    lines = [settings.description.strip()] if settings.description else []
    cursor_text = ", ".join(
        f"`{spec.cursor_path}` from {md.json_safe(spec.initial_value)!r}" for spec in settings.cursors.values()
    )
    write = settings.disposition + (f"/{settings.strategy}" if settings.strategy else "")
    keys = f" on {', '.join(settings.primary_key)}" if settings.primary_key else ""
    lines.append(
        f"Incremental on {cursor_text or 'no cursor'}; {write}{keys} into {settings.table.display}."
    )
    return "\n\n".join(lines)


def _build_asset(func, settings: AssetSettings, io_manager_key: str, asset_kwargs: Mapping[str, Any]) -> dg.AssetsDefinition:
    runner = _Runner(func, settings, io_manager_key)
    kwargs = dict(asset_kwargs)
    if settings.partitions_def is not None:
        kwargs.setdefault("backfill_policy", dg.BackfillPolicy.single_run())
    # Each asset gets its own pool: limited to 1 in dagster.yaml, runs of one asset wait their
    # turn; without the limit, the IO manager's compare-and-set commit lets one of them commit.
    kwargs.setdefault("pool", settings.pool or "incremental/" + "__".join((*settings.key_prefix, settings.name)))
    kwargs.setdefault("kinds", {"spark", "iceberg"})
    if checks.check_specs(settings):
        kwargs["check_specs"] = [*kwargs.get("check_specs", ()), *checks.check_specs(settings)]

    def compute(context: dg.AssetExecutionContext, config: IncrementalRunConfig):
        yield from runner.run(context, config)

    compute.__name__ = settings.name
    compute.dagster_incremental_settings = settings  # read back by incremental_settings()
    # Dagster reads these annotations at definition time: give it classes, not postponed strings.
    compute.__annotations__ = {"context": dg.AssetExecutionContext, "config": IncrementalRunConfig}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # backfill_policy on @asset is a beta parameter
        return dg.asset(
            compute,
            name=settings.name,
            key_prefix=list(settings.key_prefix) or None,
            group_name=settings.group_name,
            description=_description(settings),
            partitions_def=settings.partitions_def,
            io_manager_key=io_manager_key,
            required_resource_keys={io_manager_key},
            metadata=_definition_metadata(settings),
            **kwargs,
        )


def incremental_settings(asset: dg.AssetsDefinition) -> AssetSettings | None:
    """The settings an `@incremental_asset` was built with (None for any other asset)."""
    compute = getattr(getattr(asset.op, "compute_fn", None), "decorated_fn", None)
    return getattr(compute, "dagster_incremental_settings", None)


def load_run_secrets(settings: AssetSettings, func, reserved: Mapping[str, str] | None = None, *,
                     strict: bool = True) -> tuple[dict[str, Any], Redactor]:
    """Read secrets.toml now (inside the run): `func`'s secret kwargs and a Redactor of every secret.

    A parameter without default that secrets.toml fed when the code loaded must still be fed.
    """
    if settings.secrets is None:
        return {}, Redactor(())
    secrets: Secrets = settings.secrets.load()
    kwargs = function_arguments(secrets, settings.name, func, reserved=reserved, strict=strict)
    if strict:
        for name, param in inspect.signature(func).parameters.items():
            if name in settings.secret_params and name not in kwargs and param.default is inspect.Parameter.empty:
                raise IncrementalConfigError(
                    f"{secrets.where(settings.name)}: no longer gives parameter {name!r} of "
                    f"{func.__name__}(), which has no default; add `{name} = \"...\"` back"
                )
    return kwargs, Redactor(secrets.values())


@dataclass
class _Plan:
    """How this run binds its cursors and writes (derived from partitions and run config)."""

    mode: str  # "incremental" | "backfill"
    scope: str | None = None  # partition key whose cursor this run advances
    window: tuple[Any, Any] | None = None
    window_replace: bool = False
    full_refresh: bool = False
    stateless: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)  # initial_value / end_value from run config


class _Runner:
    """Executes one materialization of an incremental asset."""

    def __init__(self, func, settings: AssetSettings, io_manager_key: str):
        self.func = func
        self.settings = settings
        self.io_manager_key = io_manager_key
        self.takes_context = next(iter(inspect.signature(func).parameters), None) in ("context", "ctx")
        self.sliced = sliced_argument(settings)  # the argument whose step cuts runs into slices

    def run(self, context: dg.AssetExecutionContext, config: IncrementalRunConfig):
        try:
            secret_kwargs, redactor = load_run_secrets(self.settings, self.func, _reserved_params(self.func))
        except IncrementalConfigError as exc:  # its text names file, section and key, never a value
            raise dg.Failure(description=f"asset {context.asset_key.to_user_string()}: {exc}", allow_retries=False) from None
        # Every context.log line of this run (ours and the function's) is masked before Dagster
        # stores it; errors that carry a secret are re-raised masked (_masked_failure).
        with redactor.masking_logs(context.log):
            output, state, written = self._run(context, config, secret_kwargs, redactor)
        # The IO manager stores the output before this generator resumes: the checks see the
        # table as this run committed it.
        yield output
        io = getattr(context.resources, self.io_manager_key)
        yield from checks.evaluate_checks(context, io, self.settings, written, state)

    def _run(self, context, config: IncrementalRunConfig, secret_kwargs: Mapping[str, Any], redactor: Redactor):
        started = datetime.now(timezone.utc)
        for warning in self.settings.warnings():
            context.log.warning(warning)
        io = getattr(context.resources, self.io_manager_key)
        plan = self._plan(context, config)
        stored, table_snapshot = self._stored_states(context, io, plan)
        if plan.scope is not None and stored[plan.scope].state is None:
            # The open window's first run loads the whole window: replace what a backfill may
            # already have put there instead of adding to it.
            plan.window_replace = True
        spec = self._write_spec(io, context.asset_key, plan)
        with _user_errors(context.asset_key.to_user_string(), redactor):
            in_force = self._state_in_force(context, stored, plan)
            self._check_write_keys(in_force, plan)
            runs = self._bind(context, plan, in_force)
            slices = plan_slices(runs, self.sliced)
            if slices is None:
                frame, staged = self._load(context, io, runs, spec, secret_kwargs)
        if slices is not None:
            return SlicedRun(self, context, io, plan, stored, spec, started).run(
                runs, slices, in_force, table_snapshot, secret_kwargs, redactor
            )
        state = self._state_after(runs, plan, stored)
        batch = self._batch(
            context, plan, spec, frame, staged, state, table_snapshot, started, self._window_replace(plan, runs)
        )
        return self._output(context, batch, plan, stored, state, self._window(runs, plan)), state, batch

    def _load(self, context, io, runs: Mapping[str, Any], spec: WriteSpec, secret_kwargs: Mapping[str, Any]):
        """Call the function, filter and stage what it gives: (the writer's data, the staged batch)."""
        output = self._call(context, runs, secret_kwargs)
        staged = stage_batches(output, runs, self.settings, spec, on_first_rows=io.start_spark_in_background)
        return drop_rows_already_loaded(io, staged.data(lambda: io.spark), runs, spec), staged

    def _batch(self, context, plan: _Plan, spec: WriteSpec, frame, staged, state, expected_snapshot, started,
               window: WindowReplace | None) -> IncrementalBatch:
        """What the IO manager commits: the rows and, on an incremental run, the cursor after them."""
        return IncrementalBatch(
            spec=spec,
            data=frame,
            commit=CommitInfo(
                state=state if plan.mode == "incremental" else None,
                run_id=context.run_id,
                scope=plan.scope,
            ),
            mode=plan.mode,
            window=window,
            full_refresh=plan.full_refresh,
            run_started_at=started,
            check_stale=plan.mode == "incremental",
            expected_snapshot_id=expected_snapshot,
            deduplicated=staged.deduplicated,
            column_descriptions=self.settings.column_descriptions,
        )

    def _output(self, context, value: Any, plan: _Plan, stored, state, window, extra: Mapping[str, Any] | None = None):
        """The Output with the run's metadata; a partition range gets it per partition."""
        run_md = {md.MODE: plan.mode, md.WINDOW: md.json_value(window)}
        if context.has_partition_key or context.has_partition_key_range:
            keys = context.partition_keys
            scope = dg.MetadataValue.text(_counts_scope(keys))
            for key in keys:
                kept = state if key == plan.scope else self._unchanged_state(stored, key)
                context.add_asset_metadata(
                    {**run_md, md.STATE: md.json_value(kept), md.COUNTS_SCOPE: scope}, partition_key=key
                )
            return dg.Output(value, metadata=dict(extra)) if extra else dg.Output(value)
        return dg.Output(value, metadata={**run_md, md.STATE: md.json_value(state), **(extra or {})})

    # -- planning --------------------------------------------------------------------------------

    def _plan(self, context: dg.AssetExecutionContext, config: IncrementalRunConfig) -> _Plan:
        partitioned = context.has_partition_key or context.has_partition_key_range
        if partitioned:
            if config.end_value or config.initial_value:
                raise dg.Failure(
                    "initial_value/end_value run config is for unpartitioned assets; "
                    "launch a backfill of partitions instead"
                )
            tw = context.partition_time_window
            keys = context.partition_keys
            is_open = len(keys) == 1 and tw.end > datetime.now(timezone.utc) and not config.full_refresh
            if is_open:
                return _Plan(mode="incremental", scope=keys[0], window=(tw.start, tw.end))
            return _Plan(mode="backfill", window=(tw.start, tw.end), window_replace=True, stateless=True)
        if config.full_refresh:
            return _Plan(mode="incremental", full_refresh=True)
        if config.end_value is not None:
            overrides = {"end_value": config.end_value}
            if config.initial_value is not None:
                overrides["initial_value"] = config.initial_value
            return _Plan(mode="backfill", window_replace=True, stateless=True, overrides=overrides)
        if config.initial_value is not None:
            raise dg.Failure("initial_value in run config needs end_value too (a backfill of [initial_value, end_value))")
        return _Plan(mode="incremental")

    def _stored_states(self, context, io, plan: _Plan) -> tuple[dict[str | None, StoredState], int | None]:
        """The cursor in force per scope (None = the asset's own cursor), and the table snapshot
        that holds the cursor of the scope this run advances (for the stale-writer check)."""
        key = context.asset_key
        if plan.full_refresh:
            table_state = io.committed_state(key)
            return {None: StoredState(state=None, source="none")}, _snapshot_id(table_state)
        scopes: list[str | None]
        if context.has_partition_key or context.has_partition_key_range:
            scopes = list(context.partition_keys)
        else:
            scopes = [None]
        out: dict[str | None, StoredState] = {}
        table_snapshot = None
        for scope in scopes:
            dagster_state = latest_dagster_state(context.instance, key, partition=scope)
            table_state = None
            if scope == plan.scope:
                table_state = io.committed_state(key, scope=scope)
                table_snapshot = _snapshot_id(table_state)
            out[scope] = reconcile(dagster_state, table_state)
        return out, table_snapshot

    def _state_in_force(self, context, stored: Mapping[str | None, StoredState], plan: _Plan) -> AssetState:
        """The stored state of the scope this run continues, read (and checked) as typed values."""
        chosen = stored.get(plan.scope)
        state = AssetState.from_dict(chosen.state if chosen else None, list(self.settings.cursors))
        if chosen is not None and chosen.state is not None:
            only = state.cursor(None)
            context.log.info(f"cursor state from {chosen.source}: {only.last_value if only else None!r}")
        return state

    def _bind(self, context, plan: _Plan, in_force: AssetState, windows: Mapping[str, Any] = {}) -> dict[str, Any]:  # noqa: B006
        """Bind every cursor (`windows`: a narrower window for some, e.g. a slice's)."""
        runs = {}
        for name, spec in self.settings.cursors.items():
            if plan.overrides:
                spec = spec.replace(**_typed_overrides(spec, plan.overrides))
            cursor_state = in_force.cursor(name)
            try:
                run = spec.bind(
                    None if plan.stateless else cursor_state,
                    window=windows.get(name, plan.window),
                    stateless=plan.stateless,
                    inherited_primary_key=self.settings.primary_key or None,
                )
            except CursorStateMismatch as exc:
                if "cursor_type" not in getattr(exc, "changed", ()):
                    raise
                origin = self.settings.cursor_origins.get(name, f"parameter {name!r}")
                raise CursorStateMismatch(f"{exc} The new cursor type comes from {origin}.") from None
            context.log.info(
                f"{name}: {plan.mode} run of {spec.cursor_path} from {run.start_value!r}"
                + (f" to {run.end_value!r}" if run.end_value is not None else "")
            )
            runs[name] = run
        return runs

    def _write_spec(self, io, asset_key: dg.AssetKey, plan: _Plan) -> WriteSpec:
        from dagster_incremental.dagster.io_manager import write_spec_from_settings

        settings = self.settings.write_settings()
        if plan.full_refresh:
            settings.update(disposition="replace", strategy=None)
        return write_spec_from_settings(io.table_name(asset_key), settings)

    def _window_replace(self, plan: _Plan, runs: Mapping[str, Any]) -> WindowReplace | None:
        if not plan.window_replace:
            return None
        column = self.settings.window_column
        if column is None or self.settings.strategy == "scd2":
            return None  # scd2 keeps history: a backfill merges; nested cursors can't bound a window
        if plan.window is not None:
            start, end = plan.window
        else:
            run = next(iter(runs.values()))
            start, end = run.start_value, run.end_value
        return WindowReplace(column=column, start=start, end=end)

    # -- execution -------------------------------------------------------------------------------

    def _call(self, context, runs: Mapping[str, Any], secret_kwargs: Mapping[str, Any] = {}):  # noqa: B006
        kwargs = {**secret_kwargs, **runs}
        if self.takes_context:
            return self.func(context, **kwargs)
        return self.func(**kwargs)

    def _state_after(self, runs: Mapping[str, Any], plan: _Plan, stored) -> Any:
        if plan.mode == "backfill":
            return self._unchanged_state(stored, plan.scope)
        return AssetState.of({name: run.cursor_state for name, run in runs.items()}, self._write_keys()).to_dict()

    def _write_keys(self) -> dict[str, Any]:
        s = self.settings
        return {
            "primary_key": list(s.primary_key),
            "merge_key": list(s.merge_key),
            "write_disposition": s.disposition + (f"/{s.strategy}" if s.strategy else ""),
        }

    def _check_write_keys(self, in_force: AssetState, plan: _Plan) -> None:
        """Keys decide what a merge matches: rows written under other keys must not be mixed in."""
        before = in_force.write_keys
        now = self._write_keys()
        if plan.full_refresh or before is None or before == now:
            return
        changed = ", ".join(f"{k} {before.get(k)!r} -> {now[k]!r}" for k in now if before.get(k) != now[k])
        raise CursorStateMismatch(
            f"the table was written with other keys than the asset now declares ({changed}); "
            "run a full refresh to rebuild it with the new keys: launch the asset with run config "
            "`{ops: {" + self.settings.name + ": {config: {full_refresh: true}}}}` (Launchpad) or "
            "`dagster asset materialize ... --config-json` with the same."
        )

    @staticmethod
    def _unchanged_state(stored: Mapping[str | None, StoredState], scope: str | None) -> Any:
        entry = stored.get(scope)
        return entry.state if entry is not None and entry.state is not None else AssetState.of({}).to_dict()

    @staticmethod
    def _window(runs: Mapping[str, Any], plan: _Plan) -> list[Any]:
        if plan.window is not None and plan.mode == "backfill":
            return [plan.window[0], plan.window[1]]
        run = next(iter(runs.values()), None)
        if run is None:
            return [None, None]
        end = run.end_value if run.end_value is not None else run.last_value
        return [run.start_value, end]


@contextlib.contextmanager
def _user_errors(asset: str, redactor: Redactor):
    """Errors of the cursor and of the user's function as the run reports them: a library error
    is a Failure naming the asset; any error whose text holds a secret is re-raised masked."""
    try:
        yield
    except IncrementalError as exc:
        if redactor.leaks(exc):
            raise _masked_failure(asset, exc, redactor) from None
        raise dg.Failure(description=f"asset {asset}: {exc}", allow_retries=False) from exc
    except Exception as exc:
        if redactor.leaks(exc):
            raise _masked_failure(asset, exc, redactor) from None
        raise


def _masked_failure(asset: str, exc: BaseException, redactor: Redactor) -> dg.Failure:
    """A Failure in place of an exception whose text holds a secret: same type name and
    traceback, each secret replaced by ***. Raise it `from None` so the original is not stored."""
    return dg.Failure(description=f"asset {asset}: {redactor.describe(exc)}", allow_retries=False)


def _counts_scope(keys: Sequence[str]) -> str:
    """Says what the row figures of a partition's materialization count: one commit writes a
    whole range, so its counts are the range's, not each partition's."""
    table = "dagster/row_count is the whole table's row count"
    if len(keys) == 1:
        return f"rows_inserted/rows_updated/rows_deleted are this partition's; {table}"
    return (
        f"rows_inserted/rows_updated/rows_deleted are for the run's whole range {keys[0]}...{keys[-1]} "
        f"({len(keys)} partitions, one commit), not this partition alone; {table}"
    )


def _snapshot_id(committed: Any) -> int | None:
    return committed.snapshot_id if committed is not None else None


def _typed_overrides(spec: IncrementalSpec, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Run config values arrive as text: give numbers back their type for numeric cursors."""
    reference = spec.initial_value
    out = {}
    for key, value in overrides.items():
        if isinstance(reference, (int, float)) and not isinstance(reference, bool) and isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                value = float(value)
        out[key] = value
    return out
