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

Environment variables win over the file (values are always strings):
    DAGSTER_INCREMENTAL_SECRETS__ASSETS__<ASSET>__<NAME>[__<KEY>...]
    DAGSTER_INCREMENTAL_SECRETS__SPARK__CONF__<KEY>   (SPARK_HADOOP_FS_S3A_SECRET_KEY ->
                                                      spark.hadoop.fs.s3a.secret.key, as config.py)
Asset and parameter names match case-insensitively. The prefix deliberately differs from
config.py's `DAGSTER_INCREMENTAL__`, so config loading never sees these variables.

Errors name the file, section, key and line (or the variable), never a value. Masking matches the
exact text of each string value (and its URL- and JSON-escaped forms); numbers and booleans are
not treated as secrets.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import re
import threading
import traceback
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli

from dagster_incremental.settings.config import (
    _NAME_RE,
    ProjectConfig,
    _error,
    _find_name,
    _flatten,
    _kind,
    _Problem,
    _Reporter,
    spark_conf_key_from_env,
)
from dagster_incremental.errors import IncrementalConfigError, IncrementalError

__all__ = [
    "MASK",
    "SECRETS_ENV_PREFIX",
    "SECRETS_FILE_NAME",
    "RedactedError",
    "Redactor",
    "Secrets",
    "SecretsFile",
    "function_arguments",
    "load_secrets",
    "with_secret_spark_conf",
]

SECRETS_FILE_NAME = "secrets.toml"
SECRETS_ENV_PREFIX = "DAGSTER_INCREMENTAL_SECRETS__"
MASK = "***"
_SECTIONS_HINT = "secrets.toml holds [assets.<asset>] and [spark.conf] only"


class RedactedError(IncrementalError):
    """An error whose text held a secret, re-raised with each secret replaced by `***`.

    The original exception is dropped (`from None`) so its secret-bearing text is never
    serialized; this one keeps its type name and the masked traceback for debugging.
    """


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
        found = _find_name(self._assets, name)
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
        section = ("assets", _find_name(self._assets, asset) or asset)
        return _Reporter(self.display_path, self._lines, self._sources).where(
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
    text, found = "", False
    if path is None:
        pass
    elif file.is_file():
        try:
            text, found = file.read_text(encoding="utf-8"), True
        except UnicodeDecodeError:  # its message quotes a byte of the file
            raise _error(f"{display}: cannot read the secrets file: it is not UTF-8 text",
                         path=file) from None
        except OSError as exc:
            raise _error(f"{display}: cannot read the secrets file ({exc.strerror})",
                         path=file) from None
    elif file.exists():
        raise _error(f"{display}: is not a file; secrets.toml must be a file beside config.toml",
                     path=file)
    try:
        raw: dict[str, Any] = tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        # Never echo the line (nor tomli's "invalid character 'x'"): it may hold a secret.
        what = "invalid TOML" if "character" in exc.msg else f"invalid TOML ({exc.msg})"
        raise _error(f"{display}: {what} at line {exc.lineno}, column {exc.colno}; the line is not "
                     "shown because it may hold a secret", path=file, line=exc.lineno) from None
    lines = tuple(text.splitlines())
    sources: dict[tuple[str, ...], str] = {}
    try:
        assets, spark = _check(raw)
        _apply_env(environ, assets, spark, sources)
    except _Problem as problem:
        problem.show_value, problem.value = False, None  # belt and braces: values never shown
        raise _Reporter(display, lines, sources).error(problem, file) from None
    return Secrets(file, display, found, assets, spark, sources, lines)


def _check(raw: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    for name in raw:
        if name not in ("assets", "spark"):
            raise _Problem((name,), (), None, "is not a known section", _SECTIONS_HINT,
                           show_value=False)
    spark = raw.get("spark", {})
    if not isinstance(spark, Mapping):
        raise _Problem((), ("spark",), None, f"is {_kind(spark)}", "use a [spark.conf] table",
                       show_value=False)
    for key in spark:
        if key != "conf":
            raise _Problem(("spark",), (key,), None, "is not a known key",
                           "only [spark.conf] holds secrets; other [spark] settings belong in "
                           "config.toml", show_value=False)
    conf = spark.get("conf", {})
    if not isinstance(conf, Mapping):
        raise _Problem(("spark",), ("conf",), None, f"is {_kind(conf)}",
                       'use a table: [spark.conf] "spark.x.y" = "..."', show_value=False)
    spark_conf: dict[str, str] = {}
    for name, item in _flatten(conf).items():
        if isinstance(item, bool):
            spark_conf[name] = "true" if item else "false"
        elif isinstance(item, (str, int, float)):
            spark_conf[name] = str(item)
        else:
            raise _Problem(("spark", "conf"), (name,), None, f"is {_kind(item)}",
                           "Spark settings are strings, numbers or booleans", show_value=False)
    assets_raw = raw.get("assets", {})
    if not isinstance(assets_raw, Mapping):
        raise _Problem((), ("assets",), None, f"is {_kind(assets_raw)}",
                       "use one table per asset: [assets.<asset>]", show_value=False)
    assets: dict[str, dict[str, Any]] = {}
    for asset, table in assets_raw.items():
        if not isinstance(table, Mapping):
            raise _Problem(("assets",), (asset,), None, f"is {_kind(table)}",
                           "put secrets in the asset's table: [assets.<asset>] name = \"...\"",
                           show_value=False)
        if not _NAME_RE.fullmatch(asset):
            raise _Problem(("assets", asset), (), None, "is not a valid asset name",
                           "asset names use letters, digits and _ only", show_value=False)
        for key in table:
            if not key.isidentifier():
                raise _Problem(("assets", asset), (key,), None, "is not a valid parameter name",
                               "each key names a parameter of the asset function",
                               show_value=False)
        assets[asset] = dict(table)
    return assets, spark_conf


def _apply_env(environ: Mapping[str, str], assets: dict[str, dict[str, Any]],
               spark_conf: dict[str, str], sources: dict[tuple[str, ...], str]) -> None:
    """Apply the variables, least specific first, so `...__DB__PASSWORD` patches `...__DB`."""
    found = []
    for var, text in environ.items():
        if var.upper().startswith(SECRETS_ENV_PREFIX):
            parts = var[len(SECRETS_ENV_PREFIX):].split("__")
            found.append((len(parts), var, parts, text))
    for _, var, parts, text in sorted(found):
        if not all(parts):
            raise _Problem((), (), None, "is not a valid name",
                           "separate levels with exactly two underscores, e.g. "
                           f"{SECRETS_ENV_PREFIX}ASSETS__ORDERS__API_TOKEN", show_value=False, env=var)
        head, rest = parts[0].lower(), parts[1:]
        if head == "spark" and len(rest) == 2 and rest[0].lower() == "conf":
            key = spark_conf_key_from_env(
                rest[1], spark_conf, var=var,
                other_way="put the key in secrets.toml's [spark.conf] (the variable then overrides it)")
            spark_conf[key] = text
            sources[("spark", "conf", key)] = var
        elif head == "assets" and len(rest) >= 2:
            asset = _spelled(assets, rest[0], ("assets",), var)
            node = assets.setdefault(asset, {})
            path: tuple[str, ...] = ("assets", asset)
            for depth, part in enumerate(rest[1:]):
                name = _spelled(node, part, path, var)
                path += (name,)
                if depth == len(rest) - 2:
                    node[name] = text
                    break
                child = node.setdefault(name, {})
                if not isinstance(child, dict):
                    raise _Problem(path[:-1], (name,), None,
                                   f"is {_kind(child)}, so {var} cannot set a key inside it",
                                   "make it a table or drop the environment variable",
                                   show_value=False)
                node = child
            for stale in [p for p in sources if p[: len(path)] == path]:
                del sources[stale]
            sources[path] = var
        else:
            raise _Problem((), (), None, "names no secret",
                           f"use {SECRETS_ENV_PREFIX}ASSETS__<ASSET>__<NAME> or "
                           f"{SECRETS_ENV_PREFIX}SPARK__CONF__<KEY>", show_value=False, env=var)


def _spelled(table: Mapping[str, Any], name: str, section: tuple[str, ...], var: str) -> str:
    """The file's spelling of `name` (case-insensitive); a name the file lacks is lower-cased."""
    if name in table:
        return name
    matches = [k for k in table if k.lower() == name.lower()]
    if len(matches) > 1:
        raise _Problem(section, (name,), None,
                       f"matches several names of the file ({', '.join(matches)})",
                       "rename one of them", show_value=False, env=var)
    return matches[0] if matches else name.lower()


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
        name = _find_name(params, key)
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


# --------------------------------------------------------------------------- masking


class Redactor:
    """Replaces secret values by `***` in text, exceptions and log records."""

    def __init__(self, values: Iterable[str]) -> None:
        forms: set[str] = set()
        for value in values:
            if isinstance(value, str) and value:
                forms.update({value, urllib.parse.quote(value, safe=""),
                              urllib.parse.quote_plus(value), json.dumps(value)[1:-1],
                              repr(value)[1:-1]})
        forms.discard("")
        # Longest first, so a secret that contains another one is masked whole.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def redact(self, text: str) -> str:
        return self._pattern.sub(MASK, text) if self._pattern is not None else text

    def found_in(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def leaks(self, exc: BaseException) -> bool:
        """Does the exception's message, cause/context chain or traceback hold a secret?"""
        return self._pattern is not None and self.found_in(_format(exc))

    def describe(self, exc: BaseException) -> str:
        """`Type: message` and the whole traceback (with chain), secrets masked."""
        last = traceback.format_exception_only(type(exc), exc)
        return (self.redact("".join(last).strip()) + "\n\nTraceback (secret values replaced by "
                f"{MASK}):\n" + self.redact(_format(exc)))

    def checked(self, exc: BaseException, prefix: str = "") -> BaseException | None:
        """A RedactedError to raise `from None` in place of `exc` when it leaks, else None."""
        if not self.leaks(exc):
            return None
        return RedactedError(prefix + self.describe(exc))

    def mask_record(self, record: logging.LogRecord) -> None:
        """Rewrite a log record in place: message (and an attached exception) masked."""
        if self._pattern is None:
            return
        try:
            message = record.getMessage()
        except Exception:  # a malformed %-format: leave it to logging's own error handling
            return
        if self.found_in(message):
            record.msg, record.args = self.redact(message), ()
        exc = record.exc_info[1] if isinstance(record.exc_info, tuple) else None
        if exc is not None and self.leaks(exc):
            record.msg = f"{record.msg}\n{self.describe(exc)}"
            record.args, record.exc_info, record.exc_text = (), None, None

    @contextlib.contextmanager
    def masking_logs(self, *loggers: logging.Logger) -> Iterator[None]:
        """While inside, log records have secrets masked before any handler (the event log) sees them.

        Two layers: a filter on `loggers` (e.g. `context.log`), which nothing can bypass, and a
        process-wide log record factory, which also covers `get_dagster_logger()` and the Python
        loggers Dagster captures (records made in other threads meanwhile are masked too).
        """
        if not self:
            yield
            return
        filt = _MaskingFilter(self)
        for logger in loggers:
            logger.addFilter(filt)
        _install_record_factory()
        with _ACTIVE_LOCK:
            _ACTIVE.append(self)
        try:
            yield
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.remove(self)
            for logger in loggers:
                logger.removeFilter(filt)


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


class _MaskingFilter(logging.Filter):
    """A logger filter that rewrites the record before any handler (Dagster's event log) sees it."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        self.redactor.mask_record(record)
        return True


_ACTIVE: list[Redactor] = []  # redactors of the runs in progress in this process
_ACTIVE_LOCK = threading.Lock()
_FACTORY: list[Callable[..., logging.LogRecord]] = []  # ours, once installed


def _install_record_factory() -> None:
    """Chain a masking factory in front of the current one, once per process (never removed:
    with no run in progress it only passes records through)."""
    with _ACTIVE_LOCK:
        if _FACTORY:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            for redactor in tuple(_ACTIVE):
                redactor.mask_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _FACTORY.append(factory)
