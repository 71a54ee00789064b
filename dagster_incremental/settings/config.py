"""config.toml: the project's Spark, destination and per-asset settings, validated up front.

Every setting an asset can take reaches it through four layers (decorator arguments <
config.toml < environment < run config). This module owns the middle two: it reads the file,
applies `DAGSTER_INCREMENTAL__...` variables (`environment`), validates everything with the one
settings schema (`schema`) and keeps *only the keys actually given*, so `ProjectConfig.
resolve_asset` can layer them over the decorator's arguments. A mistake is reported before
anything runs, naming the file, line, section, key, value and what is allowed.

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
  that spells the same way; otherwise it must start with `SPARK_` and maps to lower case with
  every `_` turned into `.` (SPARK_SQL_SHUFFLE_PARTITIONS -> spark.sql.shuffle.partitions). Any
  other key is set with DAGSTER_INCREMENTAL__SPARK__CONF holding an inline table,
  `{"spark.driver.bindAddress" = "127.0.0.1"}`, whose entries are *added* to the file's conf.

Secrets are not config: `secrets.toml` beside this file is read by `settings.secrets` at run
time and never merged here, because config values end up in definitions and resource config
that Dagster shows in the UI. Its variables (`DAGSTER_INCREMENTAL_SECRETS__...`) do not start
with `DAGSTER_INCREMENTAL__`, so this loader ignores them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.settings.environment import ENV_PREFIX, apply_config_environment
from dagster_incremental.settings.errors import Problem, find_name, problem_from, section_text, suggest
from dagster_incremental.settings.schema import (
    AssetOptions,
    DestinationSettings,
    Partitions,
    ProjectDocument,
    SparkSettings,
)
from dagster_incremental.settings.spark_conf import flatten
from dagster_incremental.settings.toml_source import Reporter, TomlText, read_toml_text

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
]

CONFIG_PATH_ENV = "DAGSTER_INCREMENTAL_CONFIG"
DEFAULT_CONFIG_PATH = Path("config") / "config.toml"

# The typed sections, under the names callers know them by.
SparkConfig = SparkSettings
DestinationConfig = DestinationSettings
PartitionsConfig = Partitions

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class AssetConfig:
    """[assets.<name>]: only the keys the file or the environment gave, already normalised.

    `overrides` holds asset-level keys: key_prefix, primary_key, merge_key, partition_by as
    tuples of str; group_name, description, concurrency_pool as str; write_disposition as a dlt
    dict (always with "disposition"); columns as {column: {hint: value}}; partitions as a dict
    with defaults filled (typed: the `partitions` property); freshness as a timedelta.
    `incrementals` maps each incremental argument to its given keys (primary_key as a tuple,
    `()` meaning no dedup; step as given). Absent keys are absent, never None.
    """

    name: str
    overrides: Mapping[str, Any] = field(default_factory=_empty)
    incrementals: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty)
    options: AssetOptions = field(default_factory=AssetOptions, repr=False, compare=False)

    @classmethod
    def from_options(cls, name: str, options: AssetOptions) -> AssetConfig:
        arguments = {arg: MappingProxyType(a.given()) for arg, a in options.arguments.items()}
        return cls(name, MappingProxyType(options.given()), MappingProxyType(arguments), options)

    def get(self, key: str, default: Any = None) -> Any:
        """An asset-level override, or `default` when config and environment leave it unset."""
        return self.overrides.get(key, default)

    def incremental(self, argument: str) -> Mapping[str, Any]:
        """The given keys of an incremental argument (matched case-insensitively), or {}."""
        name = find_name(self.incrementals, argument)
        return self.incrementals[name] if name is not None else _EMPTY

    @property
    def partitions(self) -> Partitions | None:
        return self.options.partitions

    @property
    def write_disposition(self) -> Mapping[str, Any] | None:
        return self.overrides.get("write_disposition")

    @property
    def freshness(self) -> timedelta | None:
        """How close to now the cursor must be (`freshness`), or None."""
        return self.options.freshness


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
    spark: SparkSettings = field(default_factory=SparkSettings)
    destination: DestinationSettings = field(default_factory=DestinationSettings)
    assets: Mapping[str, AssetConfig] = field(default_factory=_empty)
    sources: Mapping[tuple[str, ...], str] = field(default_factory=_empty)
    _lines: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def asset(self, name: str) -> AssetConfig:
        """The asset's config (exact name, else case-insensitive), or an empty one."""
        found = find_name(self.assets, name)
        return self.assets[found] if found is not None else AssetConfig(name)

    def where(self, asset: str, argument: str | None = None, key: str | None = None) -> str:
        """Where a setting lives, to prefix errors found later (e.g. by the cursor engine).

        `config/config.toml: [assets.orders.updated_at] end_value`, plus `(at line N)` when the
        file has it or `(from environment variable ...)` when the environment set it.
        """
        asset_name = find_name(self.assets, asset) or asset
        section: tuple[str, ...] = ("assets", asset_name)
        if argument is not None:
            incrementals = self.assets[asset_name].incrementals if asset_name in self.assets else {}
            section += (find_name(incrementals, argument) or argument,)
        keys = (key,) if key is not None else ()
        return Reporter(self.display_path, self._lines, self.sources).where(section, keys)

    def place(self, asset: str, argument: str | None = None, key: str | None = None) -> str:
        """Where to add a setting the file lacks: the file (saying when it does not exist, and how
        it was chosen, since the user may have the key in another file) and the section, with the
        line of the nearest section the file has, never the line of another section."""
        config = self.asset(asset)
        section: tuple[str, ...] = ("assets", find_name(self.assets, asset) or asset)
        has_section = section[1] in self.assets
        if argument is not None:
            section += (find_name(config.incrementals, argument) or argument,)
            has_section = find_name(config.incrementals, argument) is not None
        named = f" key {key}" if key else ""
        if not self.found:
            return f"{section_text(section)}{named} of {self.missing_file()}"
        if has_section:
            return f"{self.display_path}: {section_text(section)}{self._at_line(section)}{named}"
        parent = section[:2] if argument is not None and section[1] in self.assets else None
        line = self._line(parent) if parent else None
        near = f"; {section_text(parent)} is at line {line}" if parent and line else ""
        return f"{self.display_path}: {section_text(section)} (a new section{near}){named}"

    def _at_line(self, section: tuple[str, ...]) -> str:
        line = self._line(section)
        return f" (at line {line})" if line else ""

    def _line(self, section: tuple[str, ...]) -> int | None:
        return Reporter(self.display_path, self._lines, self.sources).line(section)

    def missing_file(self) -> str:
        """What a missing default config file is, for messages that ask for a key in it."""
        return (f"{self.display_path}, which does not exist (looked for at {self.path}): the config file is "
                f"the config_path argument, else ${CONFIG_PATH_ENV}, else ./{DEFAULT_CONFIG_PATH.as_posix()} "
                f"relative to the current folder ({Path.cwd()})")

    def check_asset_sections(self, assets: Collection[str]) -> list[str]:
        """[assets.<name>] sections against the incremental assets defined with this file.

        A section that names none of them and is close to one that sets no asset key of its own
        (only argument tables such as [assets.orders.updated_at], or nothing) is a typo: that asset
        silently runs without those settings, so it is an error, "did you mean". Any other section
        naming none of them may belong to another code location sharing this file: it is returned
        as a warning. Names match case-insensitively, as `asset` does.
        """
        own = {name: found for name in assets if (found := find_name(self.assets, name)) is not None}
        sectionless = sorted(name for name in assets if not self.asset(name).overrides)
        reporter = Reporter(self.display_path, self._lines, self.sources)
        known = ", ".join(sorted(assets)) or "none"
        warnings = []
        for section in sorted(set(self.assets) - set(own.values())):
            guess = suggest(section, sectionless)
            if guess:
                raise reporter.error(Problem(
                    ("assets", section), (), None, "names no incremental asset defined with this file",
                    f"did you mean {section_text(('assets', guess))}? asset {guess!r} sets no key of its own in "
                    f"this file, so it would run without these settings (assets defined with this file: "
                    f"{known}); if this section is for an asset of another code location sharing this file, "
                    f"set at least one key in {section_text(('assets', guess))} (e.g. its write_disposition)",
                    show_value=False), self.path)
            warnings.append(f"{reporter.where(('assets', section), ())} names no incremental asset defined with "
                            f"this file in this code location ({known}); it is ignored here: rename it if it is "
                            "meant for one of them (a section of another code location sharing this file needs "
                            "nothing)")
        return warnings

    def resolve_asset(self, name: str, decorator: Mapping[str, Any]) -> AssetOptions:
        """The asset's options: the decorator's arguments (None: not given) < this config.

        Both layers go through the same schema; the merged options are checked once more for
        what a write needs (upsert needs a primary key), naming where each could be set.
        """
        given = {k: v for k, v in decorator.items() if v is not None}
        try:
            AssetOptions.model_validate(given)
        except ValidationError as exc:
            raise self._decorator_error(name, problem_from(exc, ProjectDocument, ("assets", name))) from None
        config = self.asset(name)
        merged = {**given, **config.overrides, "arguments": config.options.arguments}
        try:
            return AssetOptions.model_validate(merged, context={"resolved": True})
        except ValidationError as exc:
            problem = problem_from(exc, ProjectDocument, ("assets", name))
            key = ".".join(problem.key)
            raise IncrementalConfigError(
                f"asset {name!r}: {key} {problem.problem}; {problem.hint}; add {key}=[...] to "
                f"@incremental_asset or `{key} = [...]` in {self.place(name)}; "
                f"write_disposition is set {self._disposition_origin(name)}") from None

    def _disposition_origin(self, name: str) -> str:
        """Where the asset's write_disposition comes from: config.toml (or its variable), else code."""
        if "write_disposition" in self.asset(name).overrides:
            return f"in {self.where(name, key='write_disposition')}"
        return "by @incremental_asset(write_disposition=...)"

    def _decorator_error(self, name: str, problem: Problem) -> IncrementalConfigError:
        text = f"@incremental_asset of asset {name!r}: {'.'.join(problem.key)}"
        if problem.show_value:
            text += f"={problem.value!r}"
        return IncrementalConfigError(text + f" {problem.problem}" + (f"; {problem.hint}" if problem.hint else ""))


def _config_file(path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> TomlText:
    """The config file's text, from the argument, the variable or the default place."""
    explicit: str | None = None
    if path is not None:
        display, explicit = os.fspath(path), "the path given to load_config"
    elif environ.get(CONFIG_PATH_ENV):
        display, explicit = environ[CONFIG_PATH_ENV], f"${CONFIG_PATH_ENV}"
    else:
        display = str(DEFAULT_CONFIG_PATH)
    file = Path(display).expanduser().absolute()
    if file.exists() and not file.is_file():
        raise IncrementalConfigError(f"{display}: is not a file; point {explicit or 'load_config'} at a config.toml",
                           path=file)
    if explicit and not file.exists():
        raise IncrementalConfigError(f"{display}: config file not found (named by {explicit}); create it or fix the "
                           f"path (resolved to {file})", path=file)
    return read_toml_text(file, display, "config file")


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
    source = _config_file(path, environ)
    raw = source.parse(quote_line=True)
    sources: dict[tuple[str, ...], str] = {}
    try:
        if isinstance(raw.get("spark"), dict) and isinstance(raw["spark"].get("conf"), dict):
            raw["spark"]["conf"] = flatten(raw["spark"]["conf"])
        apply_config_environment(raw, sources, environ, ProjectDocument)
        try:
            document = ProjectDocument.model_validate(raw)
        except ValidationError as exc:
            raise problem_from(exc, ProjectDocument) from None
        return _project(source, document, sources)
    except Problem as problem:
        raise Reporter(source.display, source.lines, sources).error(problem, source.path) from None


def _project(source: TomlText, document: ProjectDocument, sources: dict[tuple[str, ...], str]) -> ProjectConfig:
    config_dir = source.path.parent
    project_dir = config_dir.parent if config_dir.name == "config" else config_dir
    warehouse = _warehouse(document.destination.warehouse, config_dir, project_dir)
    assets = {name: AssetConfig.from_options(name, options) for name, options in document.assets.items()}
    return ProjectConfig(
        path=source.path, display_path=source.display, found=source.found, project_dir=project_dir,
        spark=document.spark, destination=document.destination.model_copy(update={"warehouse": warehouse}),
        assets=MappingProxyType(assets), sources=MappingProxyType(dict(sources)), _lines=source.lines,
    )


_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]+:")


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
        raise Problem(("destination",), ("warehouse",), value,
                      f"resolves to {resolved}, outside the project folder {project_dir}",
                      f"relative paths resolve against the config file's folder ({config_dir}); keep "
                      "the warehouse inside the project, or give an absolute path or a URI such as "
                      "s3://bucket/warehouse")
    return resolved
