"""secrets.toml: credentials for asset functions and Spark, kept out of everything Dagster stores.

Why a module of its own, apart from config.toml: config values end up in asset definitions and
resource config, which Dagster shows in the UI and keeps in its storage. Secrets must not. So
secrets.toml is read *at run time, inside the step* (a rotated secret is picked up by the next run
without reloading code), its values go straight into the asset function's keyword arguments or
the SparkSession's conf, and every message the run leaves behind is masked: `context.log` lines
and errors that contain a secret get `***` in its place.

The file lives beside the config.toml that `load_config` resolves (`config/secrets.toml` by
default); a missing file means no secrets:

    [assets.api_events]                     # the asset
    api_token = "..."                       # -> api_events(..., api_token="...")
    db = { user = "app", password = "..." } # a table arrives as a dict

    [spark.conf]                            # added to the SparkSession's conf when it is built
    "spark.hadoop.fs.s3a.secret.key" = "..."

Catalog (`spark.sql.catalog.<name>.*`) and Hadoop (`spark.hadoop.*`) keys are set on the running
session, never on the driver JVM's command line (spark.session.withheld_at_start).

Environment variables win over the file (values are always strings):
    DAGSTER_INCREMENTAL_SECRETS__ASSETS__<ASSET>__<NAME>[__<KEY>...]
    DAGSTER_INCREMENTAL_SECRETS__SPARK__CONF__<KEY>   (SPARK_HADOOP_FS_S3A_SECRET_KEY ->
                                                      spark.hadoop.fs.s3a.secret.key, as config.toml)
Asset and parameter names match case-insensitively. The prefix deliberately differs from
config.toml's `DAGSTER_INCREMENTAL__`, so config loading never sees these variables.

Errors name the file, section, key and line (or the variable), never a value. `values()` lists
what the run masks (`dagster.masking`): every string value; numbers and booleans are not secrets.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.settings.environment import SECRETS_ENV_PREFIX, apply_secrets_environment
from dagster_incremental.settings.errors import BadValue, Problem, find_name, kind
from dagster_incremental.settings.schema import NAME_RE
from dagster_incremental.settings.spark_conf import CONF_SECTION, VALUE_HINT, conf_value, flatten
from dagster_incremental.settings.toml_source import Reporter, read_toml_text

if TYPE_CHECKING:
    from dagster_incremental.settings.config import ProjectConfig

__all__ = [
    "MASK",
    "SECRETS_ENV_PREFIX",
    "SECRETS_FILE_NAME",
    "Secrets",
    "SecretsFile",
    "function_arguments",
    "load_secrets",
    "with_secret_spark_conf",
]

SECRETS_FILE_NAME = "secrets.toml"
MASK = "***"  # what repr() and the run's logs show in place of a secret
_SECTIONS_HINT = "secrets.toml holds [assets.<asset>] and [spark.conf] only"


# --------------------------------------------------------------------------- the loaded secrets


class Secrets:
    """A loaded secrets.toml plus its environment overrides. repr() never shows a value."""

    def __init__(self, path: Path, display_path: str, found: bool,
                 assets: Mapping[str, Mapping[str, Any]], spark_conf: Mapping[str, str],
                 sources: Mapping[tuple[str, ...], str], lines: tuple[str, ...]) -> None:
        self.path, self.display_path, self.found = path, display_path, found
        self._assets = {name: dict(table) for name, table in assets.items()}
        self._spark_conf = dict(spark_conf)
        self._sources = dict(sources)
        self._lines = lines

    def asset(self, name: str) -> dict[str, Any]:
        """`[assets.<name>]` (matched case-insensitively) as {key: value}; {} when absent."""
        found = find_name(self._assets, name)
        return _copy(self._assets[found]) if found is not None else {}

    def spark_conf(self) -> dict[str, str]:
        """`[spark.conf]` as {Spark key: string value}."""
        return dict(self._spark_conf)

    def values(self) -> list[str]:
        """Every non-empty string value (of every asset and of [spark.conf]): what gets masked."""
        out: list[str] = []
        _strings([self._assets, self._spark_conf], out)
        return out

    def where(self, asset: str, key: str | None = None) -> str:
        """`config/secrets.toml: [assets.orders] api_token (at line 3)`, or the variable that set it."""
        section = ("assets", find_name(self._assets, asset) or asset)
        return Reporter(self.display_path, self._lines, self._sources).where(
            section, (key,) if key is not None else ())

    def __repr__(self) -> str:
        assets = {name: _masked(table) for name, table in self._assets.items()}
        return (f"Secrets({self.display_path!r}, assets={assets!r}, "
                f"spark_conf={_masked(self._spark_conf)!r})")

    __str__ = __repr__


def _copy(value: Any) -> Any:
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def _masked(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return MASK


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, Mapping):
        for item in value.values():
            _strings(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _strings(item, out)
    elif isinstance(value, str) and value:
        out.append(value)


@dataclass(frozen=True)
class SecretsFile:
    """Where secrets.toml is (`path` absolute, `display` as messages show it); `load()` reads it.

    Holds no values, so settings objects may keep it; values are read by `load()` at run time.
    """

    path: Path
    display: str

    @classmethod
    def beside(cls, config: ProjectConfig) -> SecretsFile:
        """The secrets.toml in the folder of a loaded config.toml."""
        return cls(config.path.parent / SECRETS_FILE_NAME,
                   os.path.join(os.path.dirname(config.display_path), SECRETS_FILE_NAME))

    def load(self, environ: Mapping[str, str] | None = None) -> Secrets:
        return load_secrets(self.path, display=self.display, environ=environ)


# --------------------------------------------------------------------------- loading


def load_secrets(path: str | os.PathLike[str] | None, *, display: str | None = None,
                 environ: Mapping[str, str] | None = None) -> Secrets:
    """Read secrets.toml (missing, or `path` None: no file) and apply DAGSTER_INCREMENTAL_SECRETS__...

    Raises:
        IncrementalConfigError: malformed TOML (file and line, not the line's text), an unknown
            section, a key that cannot hold a secret, or a bad variable name. Never a value.
    """
    environ = os.environ if environ is None else environ
    file = Path(path).expanduser().absolute() if path is not None else Path(os.devnull)
    display = display or (os.fspath(path) if path is not None else "(environment)")
    if path is not None and file.exists() and not file.is_file():
        raise IncrementalConfigError(f"{display}: is not a file; secrets.toml must be a file beside config.toml",
                           path=file)
    source = read_toml_text(file, display, "secrets file", quote_errors=False) if path is not None else None
    raw = source.parse(quote_line=False) if source is not None else {}
    lines = source.lines if source is not None else ()
    sources: dict[tuple[str, ...], str] = {}
    try:
        spark, assets = _spark_conf(raw), _assets(raw)
        apply_secrets_environment(assets, spark, sources, environ)
    except Problem as problem:
        problem.show_value, problem.value = False, None  # belt and braces: values never shown
        raise Reporter(display, lines, sources).error(problem, file) from None
    return Secrets(file, display, source is not None and source.found, assets, spark, sources, lines)


def _table(raw: Mapping[str, Any], name: str, section: tuple[str, ...], hint: str) -> Mapping[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, Mapping):
        raise Problem(section, (name,), None, f"is {kind(value)}", hint, show_value=False)
    return value


def _spark_conf(raw: Mapping[str, Any]) -> dict[str, str]:
    """[spark.conf] as Spark takes it; [spark] holds nothing else here."""
    for name in raw:
        if name not in ("assets", "spark"):
            raise Problem((name,), (), None, "is not a known section", _SECTIONS_HINT, show_value=False)
    spark = _table(raw, "spark", (), "use a [spark.conf] table")
    for key in spark:
        if key != "conf":
            raise Problem(("spark",), (key,), None, "is not a known key", "only [spark.conf] holds secrets; "
                          "other [spark] settings belong in config.toml", show_value=False)
    conf = _table(spark, "conf", ("spark",), 'use a table: [spark.conf] "spark.x.y" = "..."')
    out: dict[str, str] = {}
    for name, item in flatten(conf).items():
        try:
            out[name] = conf_value(item)
        except BadValue:
            raise Problem(CONF_SECTION, (name,), None, f"is {kind(item)}", VALUE_HINT, show_value=False) from None
    return out


def _assets(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """[assets.<asset>] tables of parameter names."""
    assets: dict[str, dict[str, Any]] = {}
    for asset, table in _table(raw, "assets", (), "use one table per asset: [assets.<asset>]").items():
        if not isinstance(table, Mapping):
            raise Problem(("assets",), (asset,), None, f"is {kind(table)}",
                          "put secrets in the asset's table: [assets.<asset>] name = \"...\"", show_value=False)
        if not NAME_RE.fullmatch(asset):
            raise Problem(("assets", asset), (), None, "is not a valid asset name",
                          "asset names use letters, digits and _ only", show_value=False)
        for key in table:
            if not key.isidentifier():
                raise Problem(("assets", asset), (key,), None, "is not a valid parameter name",
                              "each key names a parameter of the asset function", show_value=False)
        assets[asset] = dict(table)
    return assets


# --------------------------------------------------------------------------- using them


def function_arguments(secrets: Secrets, asset: str, func: Callable[..., Any], *,
                       reserved: Mapping[str, str] | None = None,
                       strict: bool = True) -> dict[str, Any]:
    """The keyword arguments `[assets.<asset>]` gives `func`: {parameter name: value}.

    Keys match parameter names case-insensitively. `reserved` maps parameters secrets may not
    set to the reason (the context, cursor arguments). With `strict`, a key `func` has no
    parameter for is an error naming file, section and key; otherwise it is skipped (a sensor's
    probe takes only the secrets it needs).
    """
    reserved = reserved or {}
    params = {name: p for name, p in inspect.signature(func).parameters.items()
              if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD
                    for p in inspect.signature(func).parameters.values())
    out: dict[str, Any] = {}
    for key, value in secrets.asset(asset).items():
        name = find_name(params, key)
        if name is None and takes_any and key not in reserved:
            name = key
        if name is None:
            if not strict:
                continue
            takes = ", ".join(p for p in params if p not in reserved) or "none"
            raise IncrementalConfigError(
                f"{secrets.where(asset, key)}: {func.__name__}() has no parameter {key!r} for this "
                f"secret (parameters secrets can set: {takes}); rename the key or add the "
                f"parameter, e.g. `{key}: str | None = None`")
        if name in reserved:
            raise IncrementalConfigError(
                f"{secrets.where(asset, key)}: {name!r} is {reserved[name]}; secrets.toml can only "
                "set other parameters")
        if name in out:
            raise IncrementalConfigError(
                f"{secrets.where(asset, key)}: sets parameter {name!r} a second time (names match "
                "case-insensitively); keep one")
        if name in params and params[name].kind is inspect.Parameter.POSITIONAL_ONLY:
            raise IncrementalConfigError(
                f"{secrets.where(asset, key)}: parameter {name!r} of {func.__name__}() is "
                "positional-only; secrets are passed by keyword")
        out[name] = value
    return out


def with_secret_spark_conf(conf: Mapping[str, str], secrets_path: str | os.PathLike[str] | None,
                           environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`conf` plus the secret [spark.conf] (which wins), read now: when the session is built.

    Without a file (`secrets_path` None) the environment variables alone still apply.
    """
    return {**conf, **load_secrets(secrets_path, environ=environ).spark_conf()}
