"""What a settings error says, and how it is found: a value's problem, where it is, and the
checks of single values that raise it.

A check raises `BadValue` (what is wrong, what to do) or, inside the schema, `invalid(...)` (a
pydantic error carrying the same); the caller that knows the key path turns it into a `Problem`;
`toml_source.Reporter` renders a Problem with the file, line and variable. `problem_from` locates
a pydantic ValidationError in the file's terms, walking the schema it is given (any tables that
answer as `SchemaTable`), so this module sits below the schema it reports on.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import types
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime, time, timedelta
from typing import Any, ClassVar, Literal, Protocol, Union, cast, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from dagster_incremental.cursor import values as cv

# --------------------------------------------------------------------------- a problem, and how values read


class BadValue(Exception):
    """A value (from a file, a variable or the decorator) does not fit its key."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.hint = problem, hint


class Problem(Exception):
    """A located problem: `section` and `key` are key paths, `env` the variable that set it."""

    def __init__(self, section: tuple[str, ...], key: tuple[str, ...], value: Any, problem: str,
                 hint: str | None = None, *, show_value: bool = True, env: str | None = None) -> None:
        super().__init__(problem)
        self.section, self.key, self.value = section, key, value
        self.problem, self.hint, self.show_value, self.env = problem, hint, show_value, env


def kind(value: Any) -> str:
    """How TOML would call the value's type, for 'is an integer'-style messages."""
    for types, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
                        (datetime, "a datetime"), (date, "a date"), (time, "a time"),
                        ((list, tuple), "an array"), (Mapping, "a table")):
        if isinstance(value, types):
            return name
    return type(value).__name__


def suggest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to a misspelt one, if any is close."""
    match = difflib.get_close_matches(name.lower(), list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def unknown_key(section: tuple[str, ...], key: tuple[str, ...], known: Iterable[str],
                extra: str | None = None) -> Problem:
    """`... is not a known key; did you mean X? <extra>; known keys: ...`."""
    known = list(known)
    guess = suggest(key[-1], known)
    hint = "; ".join([*([extra] if extra else []), f"known keys: {', '.join(known)}"])
    if guess:
        hint = f"did you mean {guess}? {hint}"
    return Problem(section, key, None, "is not a known key", hint, show_value=False)


_BARE_RE = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(name: str) -> str:
    return name if _BARE_RE.fullmatch(name) else json.dumps(name)


def toml_value(value: Any) -> str:
    """A value as the user would write it in TOML (what messages show)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def section_text(section: tuple[str, ...]) -> str:
    return "[" + ".".join(toml_key(s) for s in section) + "]"


def key_text(section: tuple[str, ...], key: tuple[str, ...]) -> str:
    # Spark conf keys are dotted names in one piece: show them as written, not quoted.
    if section[:2] == ("spark", "conf"):
        return ".".join(key)
    return ".".join(toml_key(k) for k in key)


def find_name(table: Mapping[str, Any], name: str) -> str | None:
    """`name` itself if present, else the one key equal to it ignoring case (None: absent)."""
    if name in table:
        return name
    matches = [k for k in table if k.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


# --------------------------------------------------------------------------- checks of single values
# Each raises `invalid(...)`: a pydantic error carrying what is wrong (and, when it differs from
# the field's own description, what to do); `problem_from` turns it into a located message.

SETTING_ERROR = "setting"


def invalid(problem: str, hint: str | None = None, *, at: tuple[str, ...] = (), **more: Any) -> PydanticCustomError:
    """A check's error: `at` extends the failing field's key path (a key inside a table)."""
    return PydanticCustomError(SETTING_ERROR, "{problem}", {"problem": problem, "hint": hint, "at": at, **more})


def not_blank(value: str) -> str:
    if not value.strip():
        raise invalid("is empty")
    return value


def spark_connect_url(value: str) -> str:
    """A Spark Connect URL (sc://host:port). Never shown: a Connect URL may carry a token."""
    if not value.strip().startswith("sc://"):
        raise invalid("is not a Spark Connect URL",
                      'use "sc://host:15002" (the token, if the server needs one, goes in secrets.toml [spark.conf] '
                      '"spark.connect.authenticate.token"), or leave it out and set master to run Spark here',
                      show_value=False)
    return value.strip()


def no_dot(value: str) -> str:
    if "." in value:
        raise invalid("contains a dot")
    return value


def time_zone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise invalid("is not a known time zone") from None
    return value


def names(*, allow_empty: bool = False, exactly: int | None = None) -> Callable[[Any], tuple[str, ...]]:
    """Column names / key parts: one string or a list of strings, returned as a tuple."""

    def check(value: Any) -> tuple[str, ...]:
        if isinstance(value, str) and exactly is None:
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise invalid(f"is {kind(value)}")
        for item in value:
            if not isinstance(item, str):
                raise invalid(f"has {kind(item)} item {toml_value(item)}")
            if not item.strip():
                raise invalid("has an empty name")
        if len(set(value)) != len(value):
            raise invalid("names a column twice")
        if not value and not allow_empty:
            raise invalid("is empty")
        if exactly is not None and len(value) != exactly:
            raise invalid(f"has {len(value)} names")
        return tuple(value)

    return check


def number_at_least(minimum: float) -> Callable[[Any], int | float]:
    """A finite int or float >= minimum (booleans are not numbers here)."""

    def check(value: Any) -> int | float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid(f"is {kind(value)}")
        if not math.isfinite(value) or value < minimum:
            raise invalid("is not allowed")
        return value

    return check


def cursor_value(value: Any) -> Any:
    """initial_value / end_value: a type a cursor column can hold (the value itself: `cursor_bound`)."""
    if isinstance(value, (bool, time)):
        raise invalid(f"is {kind(value)}")
    if not isinstance(value, (str, int, float, date)):
        raise invalid(f"is {kind(value)}")
    return value


def instant(value: Any) -> date | datetime:
    """A date or datetime; strings in the cursor engine's ISO-8601 dialect are parsed."""
    if isinstance(value, date):  # datetime is a date too
        return value
    if not isinstance(value, str):
        raise invalid(f"is {kind(value)}")
    parsed = cv.parse_iso_as_written(value)
    if parsed is None:
        raise invalid("is not an ISO-8601 date or datetime")
    return parsed


def duration_or_number(value: Any) -> str | int | float:
    """`step`: an ISO-8601 duration ("P30D", "P1M") or a number > 0 in lag's units, kept as given."""
    lag_value(value)
    if value == 0 or (isinstance(value, str) and cv.parse_duration(value) == cv.Duration(0, 0.0)):
        raise invalid("is not allowed")
    return value


def lag_value(value: Any) -> str | int | float:
    """`lag`: a number >= 0 in lag's units or an ISO-8601 duration ("P1D", "P1M"), kept as given."""
    if isinstance(value, str):
        if cv.parse_duration(value) is None:
            raise invalid("is not an ISO-8601 duration")
        return value
    return number_at_least(0)(value)


def upper_text(value: Any) -> Any:
    """Keywords such as "warn" / "WARN" read alike."""
    return value.upper() if isinstance(value, str) else value


def freshness(value: Any) -> timedelta:
    """`freshness`: an ISO-8601 duration ("PT2H") or a number of seconds > 0, as a timedelta."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        parsed = cv.parse_iso_duration(value)
        if parsed is None:
            raise invalid("is not an ISO-8601 duration")
        seconds = parsed.total_seconds()
    else:
        seconds = number_at_least(0)(value)
    if seconds <= 0:
        raise invalid("is not allowed")
    return timedelta(seconds=seconds)


def datetime_formats(value: Any) -> tuple[str, ...]:
    """`cursor_datetime_formats` (or `datetime_format`: one): strptime formats, each with a `%`."""
    formats = names()(value)
    for fmt in formats:
        if "%" not in fmt:
            raise invalid(f"has {toml_value(fmt)}, which is not a strptime format")
    return formats


def datetime_format(value: Any) -> str:
    if not isinstance(value, str):
        raise invalid(f"is {kind(value)}")
    return datetime_formats(value)[0]


def cursor_bound(key: str, value: Any, cursor_type: str | None, formats: tuple[str, ...] = ()) -> None:
    """A cursor bound the engine can compare: a word like "yesterday" fails here, not in a run
    (the cursor engine's rule, so `incremental(...)` in code says the same)."""
    try:
        cv.check_bound(value, cursor_type, string_type='cursor_type = "string"', formats=formats)
    except cv.BadBound as bad:
        raise invalid(bad.problem, bad.hint, at=(key,), value=value) from None


# --------------------------------------------------------------------------- a schema failure, located
# The error's `loc` is the key path in the schema; asset arguments sit under `arguments` there and
# directly under the asset in the file, so `document_path` maps one onto the other. Hints come
# from the failing check, else from the field's description, else from its Literal choices.


class SchemaTable(Protocol):
    """What locating a problem needs of a table of the schema (`schema.Table` is one)."""

    hint: ClassVar[str]  # what to write when the whole value is not a table
    missing_hint: ClassVar[str | None]  # what to add when a required key is missing

    @classmethod
    def keys(cls) -> tuple[str, ...]: ...

    @classmethod
    def schema_fields(cls) -> Mapping[str, FieldInfo]: ...

    @classmethod
    def coerce(cls, data: Any) -> Any: ...


def document_path(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The schema's ("assets", a, "arguments", arg, key) is the file's ("assets", a, arg, key)."""
    path = tuple(str(part) for part in loc)
    if path[:1] == ("assets",) and len(path) > 3 and path[2] == "arguments":
        return path[:2] + path[3:]
    return path


def table_model(annotation: Any) -> tuple[type[SchemaTable] | None, bool]:
    """(the table model a field holds, whether a name level comes first: Mapping[str, Model])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return cast("type[SchemaTable]", annotation), False
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType) or str(origin).endswith("Annotated"):
        for arg in get_args(annotation):
            found = table_model(arg)
            if found[0] is not None:
                return found
    elif isinstance(origin, type) and issubclass(origin, Mapping):
        return table_model(get_args(annotation)[-1])[0], True
    return None, False


def model_at(document: type[SchemaTable], loc: tuple[Any, ...]) -> type[SchemaTable] | None:
    """The table model at a schema path below `document` (None below a plain value)."""
    model: type[SchemaTable] | None = document
    skip_name = False
    for part in loc:
        if skip_name:
            skip_name = False
            continue
        if model is None or part not in model.schema_fields():
            return None
        model, skip_name = table_model(model.schema_fields()[part].annotation)
    return model


def _keys_at(document: type[SchemaTable], loc: tuple[str, ...]) -> tuple[str, ...]:
    model = model_at(document, loc)
    return model.keys() if model is not None else ()


def _asset_keys(document: type[SchemaTable]) -> tuple[str, ...]:
    return _keys_at(document, ("assets", "*"))


def _argument_keys(document: type[SchemaTable]) -> tuple[str, ...]:
    return _keys_at(document, ("assets", "*", "arguments", "*"))


def split_path(document: type[SchemaTable], path: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A file key path as (section, key): ("assets", "orders", "columns", "x") ->
    (("assets", "orders"), ("columns", "x")); an argument's table is a section of its own."""
    if len(path) <= 1:
        return (), path
    if path[0] == "assets":
        if len(path) == 2:
            return path[:1], path[1:]
        return (path[:2], path[2:]) if path[2] in _asset_keys(document) else (path[:3], path[3:])
    if path[:2] == ("spark", "conf") and len(path) > 2:
        return path[:2], path[2:]
    return path[:1], path[1:]


def _field(document: type[SchemaTable], loc: tuple[Any, ...]) -> FieldInfo | None:
    parent = model_at(document, loc[:-1]) if loc else None
    return parent.schema_fields().get(str(loc[-1])) if parent is not None else None


def _literal_choices(annotation: Any) -> tuple[str, ...]:
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    return next((c for arg in get_args(annotation) if (c := _literal_choices(arg))), ())


def field_hint(document: type[SchemaTable], loc: tuple[Any, ...]) -> str | None:
    """What to write for the key at `loc`: its description, else its allowed values."""
    field = _field(document, loc)
    if field is None:
        model = model_at(document, loc)
        return model.hint if model is not None else None
    return hint_of(field)


def _description(annotation: Any) -> str | None:
    """The description of an `Annotated[..., Field(description=...)]` inside an Optional."""
    for arg in get_args(annotation):
        if isinstance(arg, FieldInfo) and arg.description:
            return arg.description
        if (found := _description(arg)) is not None:
            return found
    return None


def hint_of(field: FieldInfo) -> str | None:
    """A field's description, else its allowed values."""
    if described := field.description or _description(field.annotation):
        return described
    choices = _literal_choices(field.annotation)
    return "use one of " + ", ".join(f'"{c}"' for c in choices) if choices else None


def misplaced_note(document: type[SchemaTable], section: tuple[str, ...], keys: tuple[str, ...]) -> str | None:
    """Why a key an asset's or argument's table does not know may be in the wrong table."""
    if section[:1] != ("assets",) or len(keys) != 1:
        return None
    key = keys[0]
    if len(section) == 2:  # an asset's table
        if key in _argument_keys(document):
            return (f"{key} belongs in the table of an incremental argument, e.g. "
                    f"[assets.{toml_key(section[1])}.updated_at]")
        return "sub-tables name incremental arguments"
    notes = []
    asset_keys = _asset_keys(document)
    if key in asset_keys:
        notes.append(f"{key} belongs in {section_text(section[:2])}")
    guess = suggest(section[-1], asset_keys)
    if guess:
        notes.append(f"{section_text(section)} is read as the incremental argument {section[-1]!r}; "
                     f"did you mean {section_text(section[:2] + (guess,))}?")
    return "; ".join(notes) or None


def problem_from(error: ValidationError, document: type[SchemaTable], prefix: tuple[str, ...] = ()) -> Problem:
    """The first error of a validation against `document`'s schema, located in the file's terms;
    `prefix` is the schema path of the model validated (("assets", "orders") for one asset's options)."""
    err = error.errors()[0]
    loc, ctx, value = prefix + tuple(err["loc"]), err.get("ctx") or {}, err["input"]
    if err["type"] == SETTING_ERROR:
        return _custom(document, loc, ctx, value)
    if err["type"] == "missing":
        section, key = split_path(document, document_path(loc[:-1]))
        parent = model_at(document, loc[:-1])
        hint = (parent.missing_hint or parent.hint) if parent is not None else None
        return Problem(section, key, value, f"has no {loc[-1]}", hint)
    section, key = split_path(document, document_path(loc))
    if err["type"] == "extra_forbidden":
        parent = model_at(document, loc[:-1])
        known = parent.keys() if parent is not None else ()
        return unknown_key(section, key, known, misplaced_note(document, section, key))
    if err["type"].endswith("_type") or err["type"] == "literal_error" and not isinstance(value, str):
        return Problem(section, key, value, f"is {kind(value)}", field_hint(document, loc))
    return Problem(section, key, value, "is not allowed", field_hint(document, loc))


def _custom(document: type[SchemaTable], loc: tuple[Any, ...], ctx: Mapping[str, Any], value: Any) -> Problem:
    full = document_path(loc + tuple(ctx.get("at", ())))
    if "key_from" in ctx:
        section, key = full[: ctx["key_from"]], full[ctx["key_from"]:]
    else:
        section, key = split_path(document, full)
    if ctx.get("unknown"):
        parent = model_at(document, loc)
        return unknown_key(section, key, parent.keys() if parent else (), misplaced_note(document, section, key))
    hint = ctx.get("hint") or field_hint(document, loc + tuple(ctx.get("at", ())))
    return Problem(section, key, ctx.get("value", value), ctx["problem"], hint,
                   show_value=ctx.get("show_value", True))
