"""IncrementalAssetsComponent: incremental assets declared in a `defs.yaml`, no Python but the sources.

`dg scaffold defs dagster_incremental.IncrementalAssetsComponent ingest` writes the folder (the
scaffolder is in component_scaffold.py); `dg check defs` loads it and `dg launch` runs it. Each
entry of `assets` is one source function made an asset by `incremental_asset`, the decorator's
own path: the same settings, cursor, commit, metadata and checks.
"""

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import dagster as dg
from dagster.components.resolved.model import Resolver

from dagster_incremental.dagster.component_scaffold import IncrementalAssetsScaffolder
from dagster_incremental.dagster.decorator import incremental_asset
from dagster_incremental.dagster.io_manager import SparkTableIOManager
from dagster_incremental.dagster.source_observation import source_observation
from dagster_incremental.errors import IncrementalConfigError

ConditionField = Annotated[
    dg.AutomationCondition | None,
    Resolver.default(
        model_field_type=str | None,
        description='When Dagster runs the asset, e.g. "{{ automation_condition.eager() }}".',
    ),
]


@dataclass
class IncrementalSource(dg.Resolvable):
    """One asset of the component: a source function and what the UI shows of it."""

    function: str  # "module.function" or "module:function"; a module beside defs.yaml first
    name: str | None = None  # default: the function's name (its [assets.<name>] section)
    description: str | None = None  # default: the function's docstring
    group_name: str | None = None  # default: the component's
    tags: Mapping[str, str] = field(default_factory=dict)  # added to the component's
    kinds: Sequence[str] = ()  # added to the format's and the catalog's
    automation_condition: ConditionField = None  # default: the component's
    # "module.function" returning the source's high-water mark: an observable source asset
    # upstream of this one, observed on `observe_cron`; the asset then runs eagerly by default
    observe: str | None = None
    observe_cron: str = "*/5 * * * *"


@dg.scaffold_with(IncrementalAssetsScaffolder)
@dataclass
class IncrementalAssetsComponent(dg.Component, dg.Resolvable):
    """Incremental assets from source functions and a config.toml, declared in defs.yaml.

    Each source function is what `@incremental_asset` would decorate; its settings (write
    disposition, keys, cursors, partitions, freshness) come from `[assets.<name>]` of config.toml,
    and the IO manager from its `[spark]` and `[destination]`.

    Examples:
        .. code-block:: yaml

            type: dagster_incremental.IncrementalAssetsComponent
            attributes:
              config_path: config.toml
              assets:
                - function: sources.orders
                  automation_condition: "{{ automation_condition.on_cron('0 * * * *') }}"
    """

    assets: Sequence[IncrementalSource]
    config_path: str = "config.toml"  # relative to the folder of defs.yaml
    io_manager_key: str = "io_manager"
    # SparkTableIOManager fields that win over config.toml: master, spark_config, warehouse, ...
    io_manager: Mapping[str, Any] = field(default_factory=dict)
    key_prefix: Sequence[str] = ()
    group_name: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    kinds: Sequence[str] = ()
    automation_condition: ConditionField = None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        config = self.config_file(context)
        io = self.build_io_manager(context, config)
        assets: list[Any] = []
        for source in self.assets:
            assets.extend(self.build_asset(context, source, config))
        return dg.Definitions(assets=assets, resources={self.io_manager_key: io})

    def config_file(self, context: dg.ComponentLoadContext) -> Path:
        """config.toml, which must exist: a component names its file, so a wrong path is a typo."""
        path = (context.path / self.config_path).absolute()
        if not path.is_file():
            raise IncrementalConfigError(
                f"{context.path / 'defs.yaml'}: config_path = {self.config_path!r} names no file (resolved to "
                f"{path}); create it (`dg scaffold defs dagster_incremental.IncrementalAssetsComponent <name>` "
                "writes one) or fix config_path, relative to the folder of defs.yaml", path=path)
        return path

    def build_io_manager(self, context: dg.ComponentLoadContext, config: Path) -> SparkTableIOManager:
        """config.toml's `[spark]` and `[destination]`, then the `io_manager` attribute's fields."""
        io = SparkTableIOManager.from_config(config)
        unknown = sorted(set(self.io_manager) - set(SparkTableIOManager.model_fields))
        if unknown:
            raise IncrementalConfigError(
                f"{context.path / 'defs.yaml'}: io_manager has unknown key(s) {', '.join(unknown)}; "
                f"use {', '.join(sorted(SparkTableIOManager.model_fields))}", path=context.path / "defs.yaml")
        given = {name: getattr(io, name) for name in SparkTableIOManager.model_fields}
        return SparkTableIOManager(**{**given, **self.io_manager})

    def build_asset(self, context: dg.ComponentLoadContext, source: IncrementalSource, config: Path) -> list[Any]:
        """The asset of one source through `incremental_asset`, and its observable source if any.
        Subclasses may override it to add to, or change, what one source becomes."""
        func = load_function(context, source.function, "function")
        kwargs: dict[str, Any] = {"tags": {**self.tags, **source.tags}}
        if extra := [*self.kinds, *source.kinds]:
            kwargs["kinds"] = extra
        condition = source.automation_condition or self.automation_condition
        observed: list[Any] = []
        if source.observe is not None:
            probe = load_function(context, source.observe, "observe")
            name = source.name or func.__name__
            observed = [source_observation(probe, [*self.key_prefix, f"{name}_source"], cron=source.observe_cron)]
            kwargs["deps"] = [observed[0].key]
            condition = condition or dg.AutomationCondition.eager()
        if condition is not None:
            kwargs["automation_condition"] = condition
        asset = incremental_asset(
            name=source.name, key_prefix=list(self.key_prefix) or None,
            group_name=source.group_name or self.group_name, description=source.description,
            config_path=str(config), io_manager_key=self.io_manager_key, **kwargs,
        )(func)
        return [asset, *observed]


def load_function(context: dg.ComponentLoadContext, path: str, attribute: str) -> Callable[..., Any]:
    """`module.function` or `module:function`: a module beside defs.yaml (`sources.orders` is
    sources.py's `orders`), else an importable module."""
    module_name, sep, name = path.rpartition(":") if ":" in path else path.rpartition(".")
    where = f"{context.path / 'defs.yaml'}: {attribute} = {path!r}"
    if not sep or not module_name or not name:
        raise IncrementalConfigError(f"{where} names no function; write it as module.function, e.g. sources.orders")
    local = context.path / Path(*module_name.split("."))
    local_file = next((p for p in (local.with_suffix(".py"), local / "__init__.py") if p.is_file()), None)
    try:
        if local_file is not None:
            module = context.load_defs_relative_python_module(local_file)
        else:
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise IncrementalConfigError(f"{where}: no module {module_name!r} beside defs.yaml or importable ({exc})") from exc
    func = getattr(module, name, None)
    if not callable(func):
        found = sorted(n for n, v in vars(module).items() if callable(v) and getattr(v, "__module__", None) == module.__name__)
        raise IncrementalConfigError(f"{where}: module {module_name!r} has no function {name!r}"
                                     + (f"; it has {', '.join(found)}" if found else ""))
    return func
