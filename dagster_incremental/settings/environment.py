"""Environment variables over a file: `<PREFIX><LEVEL>__<LEVEL>__...` set one key (or a table).

One engine for config.toml (`DAGSTER_INCREMENTAL__`) and secrets.toml
(`DAGSTER_INCREMENTAL_SECRETS__`): levels separated by `__`, names matched case-insensitively
against the file (a name the file lacks is created in lower case), applied from the least to the
most specific variable so per-key variables patch whole tables, and `sources` recording which
variable set which key path (errors then name the variable instead of a line).

The schema tags each field with the reader of its kind (`FromEnv(read_int)`); a variable's text
is read with it, then the schema checks the value exactly as it checks the file's, so a variable
and the file give the same errors. The engine walks the schema it is given (`SchemaTable`s), so
the schema can name its readers here.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

import tomli
from pydantic.fields import FieldInfo

from dagster_incremental.settings.errors import (
    BadValue,
    Problem,
    SchemaTable,
    hint_of,
    kind,
    model_at,
    split_path,
    suggest,
    table_model,
)
from dagster_incremental.settings.spark_conf import CONF_SECTION, conf_key_from_env, flatten

ENV_PREFIX = "DAGSTER_INCREMENTAL__"
SECRETS_ENV_PREFIX = "DAGSTER_INCREMENTAL_SECRETS__"
INLINE_HINT = 'use a TOML inline table, e.g. {initial_value = "2024-01-01"}'

# --------------------------------------------------------------------------- a variable's text as a value



_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class FromEnv:
    """Schema field metadata: how the field reads an environment variable's text."""

    read: Callable[[str], Any]


def parse_literal(text: str) -> Any:
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
        raise BadValue("is neither a TOML nor a JSON literal") from None


def read_text(text: str) -> str:
    return text


def read_bool(text: str) -> bool:
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise BadValue("is not true or false")


def read_int(text: str) -> int:
    if not _INT_RE.fullmatch(text.strip()):
        raise BadValue("is not an integer")
    return int(text)


def read_number(text: str) -> int | float:
    text = text.strip()
    if _INT_RE.fullmatch(text):
        return int(text)
    if _FLOAT_RE.fullmatch(text):
        return float(text)
    raise BadValue("is not a number")


def read_number_or_text(text: str) -> Any:
    """A number when the text is one (`3600`), else the text (an ISO-8601 duration, `PT1H`)."""
    try:
        return read_number(text)
    except BadValue:
        return text


def read_names(text: str) -> Any:
    """A TOML/JSON array (`["id","ts"]`) or comma-separated names (`id, ts`)."""
    if text.strip().startswith("["):
        return parse_literal(text.strip())
    return [part.strip() for part in text.split(",")]


def read_table(text: str) -> Any:
    """A TOML inline table or a JSON object."""
    if text.strip().startswith("{"):
        return parse_literal(text.strip())
    raise BadValue("is not an inline table")


def read_table_or_text(text: str) -> Any:
    """write_disposition: `merge` or `{disposition = "merge", strategy = "upsert"}`."""
    return read_table(text) if text.strip().startswith("{") else text


def read_cursor_value(text: str) -> Any:
    """initial_value/end_value: an integer or decimal literal becomes a number, a TOML-quoted
    string (`"00123"`) a string, anything else (ISO strings included) stays the text given."""
    stripped = text.strip()
    if _INT_RE.fullmatch(stripped) and not re.fullmatch(r"[+-]?0\d+", stripped):
        return int(stripped)
    if _FLOAT_RE.fullmatch(stripped) and "." in stripped:
        return float(stripped)
    if stripped[:1] in ('"', "'"):
        try:
            value = parse_literal(stripped)
        except BadValue:
            return text
        if isinstance(value, str):
            return value
    return text


# --------------------------------------------------------------------------- the engine


Split = Callable[[tuple[str, ...]], tuple[tuple[str, ...], tuple[str, ...]]]


class Overrides:
    """Applies variables of one prefix to a raw document (nested dicts), recording `sources`."""

    def __init__(self, prefix: str, raw: dict[str, Any], sources: dict[tuple[str, ...], str],
                 split: Split, example: str) -> None:
        self.prefix, self.raw, self.sources, self.split, self.example = prefix, raw, sources, split, example

    def variables(self, environ: Mapping[str, str]) -> list[tuple[str, list[str], str]]:
        """(variable, its levels as written, its text), least specific first."""
        found = []
        for var, text in environ.items():
            if var.upper().startswith(self.prefix):
                parts = var[len(self.prefix):].split("__")
                if not all(parts):
                    raise Problem((), (), None, "is not a valid name", "separate levels with exactly two "
                                  f"underscores, e.g. {self.prefix}{self.example}", show_value=False, env=var)
                found.append((len(parts), var, parts, text))
        return [(var, parts, text) for _, var, parts, text in sorted(found)]

    def spelled(self, table: Mapping[str, Any], name: str, section: tuple[str, ...], var: str) -> str:
        """The file's spelling of `name` (case-insensitive); a name the file lacks is lower-cased."""
        if name in table:
            return name
        matches = [k for k in table if k.lower() == name.lower()]
        if len(matches) > 1:
            raise Problem(section, (name,), None, f"matches several names of the file ({', '.join(matches)})",
                          "names that differ only in case cannot be told apart in the environment; rename "
                          "one of them", show_value=False, env=var)
        return matches[0] if matches else name.lower()

    def table(self, path: tuple[str, ...], var: str, coerce: Callable[[Any], Any] | None = None) -> dict[str, Any]:
        """The raw table at `path`, created if absent; a non-table there cannot take the key
        (unless `coerce` reads it as one: write_disposition = "merge")."""
        node: Any = self.raw
        for depth, name in enumerate(path):
            child = node.setdefault(name, {})
            if not isinstance(child, dict) and coerce is not None and depth == len(path) - 1:
                try:
                    child = node[name] = dict(coerce(child))
                except Exception:  # noqa: BLE001 - not readable as a table: said just below
                    pass
            if not isinstance(child, dict):
                raise Problem(*self.split(path[: depth + 1]), child,
                              f"is {kind(child)}, so {var} cannot set a key inside it",
                              "make it a table or drop the environment variable")
            node = child
        return node

    def put(self, path: tuple[str, ...], value: Any, var: str) -> None:
        """Set the value at `path`; a whole table replaced drops its older per-key sources."""
        self.table(path[:-1], var)[path[-1]] = value
        for stale in [p for p in self.sources if p[: len(path)] == path]:
            del self.sources[stale]
        self.sources[path] = var

    def read(self, path: tuple[str, ...], var: str, text: str, read: Callable[[str], Any],
             hint: str | None, *, table: bool = False) -> Any:
        """The variable's text read for the key at `path`; a located Problem when it cannot be."""
        try:
            value = read(text)
            if table and not isinstance(value, Mapping):
                raise BadValue("is not an inline table")
        except BadValue as bad:
            raise Problem(*self.split(path), text, bad.problem, bad.hint or hint, env=var) from None
        return value


# --------------------------------------------------------------------------- config.toml


def apply_config_environment(raw: dict[str, Any], sources: dict[tuple[str, ...], str],
                             environ: Mapping[str, str], document: type[SchemaTable]) -> None:
    """DAGSTER_INCREMENTAL__... variables onto a raw config document; each key read as the schema
    (`document`) types it (`FromEnv`), so the schema then checks file and variables alike."""
    split = functools.partial(split_path, document)
    engine = Overrides(ENV_PREFIX, raw, sources, split, "ASSETS__ORDERS__PRIMARY_KEY")
    sections = document.keys()
    for var, parts, text in engine.variables(environ):
        head, rest = parts[0].lower(), [p.lower() for p in parts[1:]]
        if head not in sections:
            raise Problem((head,), (), None, "is not a known section", f"did you mean {ENV_PREFIX}"
                          f"{(suggest(head, sections) or 'assets').upper()}__...?",
                          show_value=False, env=var)
        if not rest:
            raise Problem((head,), (), None, "names no key", f"append __<KEY>, e.g. {ENV_PREFIX}SPARK__MASTER",
                          show_value=False, env=var)
        if head == "spark" and rest[0] == "conf" and len(rest) <= 2:
            _spark_conf(engine, var, parts[2:], text)
        elif head == "assets":
            asset = engine.spelled(engine.table(("assets",), var), rest[0], ("assets",), var)
            if len(rest) < 2:
                raise Problem(("assets", asset), (), None, "names no key", "append __<KEY> or "
                              f"__<ARGUMENT>__<KEY>, e.g. {var}__PRIMARY_KEY", show_value=False, env=var)
            _set_in(engine, var, _table_at(document, ("assets", asset)), ("assets", asset), rest[1:], text)
        else:
            _set_in(engine, var, _table_at(document, (head,)), (head,), rest, text)


def _table_at(document: type[SchemaTable], path: tuple[str, ...]) -> type[SchemaTable]:
    model = model_at(document, path)
    assert model is not None, path  # the schema has a table at every section and asset
    return model


def _set_in(engine: Overrides, var: str, model: type[SchemaTable], path: tuple[str, ...], rest: list[str],
            text: str) -> None:
    """Walk the schema from `model` at `path` down the variable's levels and set the key; an
    asset's table (one with `arguments`) takes a name it does not know as an argument's."""
    key, more = rest[0], rest[1:]
    if key not in model.keys():
        argument = table_model(model.schema_fields()["arguments"].annotation)[0] \
            if "arguments" in model.schema_fields() else None
        if argument is None:
            raise _unknown(path, "__".join(rest), model.keys(), var)
        arguments = {k: v for k, v in engine.table(path, var).items() if k not in model.keys()}
        name = engine.spelled(arguments, key, path, var)
        if not more:
            return _set_table(engine, var, path + (name,), text)
        return _set_in(engine, var, argument, path + (name,), more, text)
    field = model.schema_fields()[key]
    if not more:
        return engine.put(path + (key,), engine.read(path + (key,), var, text, _reader(field), hint_of(field)), var)
    inner, named = table_model(field.annotation)
    if inner is not None and named and len(more) <= 2:
        name = engine.spelled(engine.table(path + (key,), var), more[0], path + (key,), var)
        if len(more) == 1:
            return _set_table(engine, var, path + (key, name), text)
        return _set_in(engine, var, inner, path + (key, name), more[1:], text)
    if inner is not None and not named:
        engine.table(path + (key,), var, coerce=inner.coerce)
        return _set_in(engine, var, inner, path + (key,), more, text)
    raise Problem(engine.split(path)[0], (key, *more), None, "is not a known key",
                  f"{key} has no keys to set one by one; set {var.rsplit('__', len(more))[0]} to the whole "
                  "value", show_value=False, env=var)


def _set_table(engine: Overrides, var: str, path: tuple[str, ...], text: str) -> None:
    engine.put(path, engine.read(path, var, text, read_table, INLINE_HINT, table=True), var)


def _reader(field: FieldInfo) -> Callable[[str], Any]:
    """How the field reads a variable: its FromEnv tag, an inline table for tables, else text."""
    def tags(annotation: Any) -> list[Any]:
        return [a for arg in get_args(annotation) for a in ([arg] if isinstance(arg, FromEnv) else tags(arg))]

    found = [m for m in field.metadata if isinstance(m, FromEnv)] + tags(field.annotation)
    if found:
        return found[0].read
    return read_table if table_model(field.annotation)[0] is not None else read_text


def _unknown(section: tuple[str, ...], key: str, known: tuple[str, ...], var: str) -> Problem:
    guess = suggest(key, known)
    hint = f"known: {', '.join(known)}"
    if guess:
        hint = f"did you mean {ENV_PREFIX}{'__'.join((*section, guess)).upper()}? {hint}"
    return Problem(section, (key,), None, "is not a known key", hint, show_value=False, env=var)


def _spark_conf(engine: Overrides, var: str, rest: list[str], text: str) -> None:
    """SPARK__CONF__<KEY> sets one entry; SPARK__CONF = '{...}' adds an inline table's entries."""
    conf = engine.table(CONF_SECTION, var)
    if rest:
        name = conf_key_from_env(rest[0], conf, var=var, other_way=f"set {ENV_PREFIX}SPARK__CONF = "
                                 "'{\"<key>\" = \"<value>\"}'")
        conf[name] = text
        engine.sources[CONF_SECTION + (name,)] = var
        return
    try:
        value = read_table(text)
    except BadValue:
        value = None
    if not isinstance(value, Mapping):
        raise Problem(("spark",), ("conf",), text, "is not an inline table",
                      'use e.g. {"spark.driver.bindAddress" = "127.0.0.1"}', env=var)
    for name, item in flatten(value).items():
        conf[name] = item
        engine.sources[CONF_SECTION + (name,)] = var


# --------------------------------------------------------------------------- secrets.toml


def _secret_split(path: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (path[:2], path[2:]) if path[:1] == ("assets",) and len(path) > 2 else (path[:-1], path[-1:])


def apply_secrets_environment(assets: dict[str, Any], spark_conf: dict[str, str],
                              sources: dict[tuple[str, ...], str], environ: Mapping[str, str]) -> None:
    """DAGSTER_INCREMENTAL_SECRETS__ASSETS__<ASSET>__<NAME>[__<KEY>...] and ..._SPARK__CONF__<KEY>;
    values stay the strings given."""
    engine = Overrides(SECRETS_ENV_PREFIX, {"assets": assets}, sources, _secret_split, "ASSETS__ORDERS__API_TOKEN")
    for var, parts, text in engine.variables(environ):
        head, rest = parts[0].lower(), parts[1:]
        if head == "spark" and len(rest) == 2 and rest[0].lower() == "conf":
            key = conf_key_from_env(rest[1], spark_conf, var=var, other_way="put the key in secrets.toml's "
                                    "[spark.conf] (the variable then overrides it)")
            spark_conf[key] = text
            sources[CONF_SECTION + (key,)] = var
        elif head == "assets" and len(rest) >= 2:
            path: tuple[str, ...] = ("assets",)
            for part in rest:
                path += (engine.spelled(engine.table(path, var), part, path, var),)
            engine.put(path, text, var)
        else:
            raise Problem((), (), None, "names no secret", f"use {SECRETS_ENV_PREFIX}ASSETS__<ASSET>__<NAME> or "
                          f"{SECRETS_ENV_PREFIX}SPARK__CONF__<KEY>", show_value=False, env=var)
