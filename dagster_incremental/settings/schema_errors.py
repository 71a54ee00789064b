"""pydantic's ValidationError as a located Problem: key path, value, what is wrong, what to do.

The error's `loc` is the key path in the schema; asset arguments sit under `arguments` there and
directly under the asset in the file, so `document_path` maps one onto the other. Hints come
from the failing check, else from the field's description, else from its Literal choices.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from dagster_incremental.settings.field_checks import SETTING_ERROR
from dagster_incremental.settings.problems import Problem, kind, section_text, suggest, toml_key, unknown_key
from dagster_incremental.settings.schema import AssetOptions, IncrementalArgument, ProjectDocument, Table


def document_path(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The schema's ("assets", a, "arguments", arg, key) is the file's ("assets", a, arg, key)."""
    path = tuple(str(part) for part in loc)
    if path[:1] == ("assets",) and len(path) > 3 and path[2] == "arguments":
        return path[:2] + path[3:]
    return path


def split_path(path: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A file key path as (section, key): ("assets", "orders", "columns", "x") ->
    (("assets", "orders"), ("columns", "x")); an argument's table is a section of its own."""
    if len(path) <= 1:
        return (), path
    if path[0] == "assets":
        if len(path) == 2:
            return path[:1], path[1:]
        return (path[:2], path[2:]) if path[2] in AssetOptions.keys() else (path[:3], path[3:])
    if path[:2] == ("spark", "conf") and len(path) > 2:
        return path[:2], path[2:]
    return path[:1], path[1:]


def table_model(annotation: Any) -> tuple[type[Table] | None, bool]:
    """(the table model a field holds, whether a name level comes first: Mapping[str, Model])."""
    if isinstance(annotation, type) and issubclass(annotation, Table):
        return annotation, False
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType) or str(origin).endswith("Annotated"):
        for arg in get_args(annotation):
            found = table_model(arg)
            if found[0] is not None:
                return found
    elif isinstance(origin, type) and issubclass(origin, Mapping):
        return table_model(get_args(annotation)[-1])[0], True
    return None, False


def model_at(loc: tuple[Any, ...]) -> type[Table] | None:
    """The table model at a schema path (None below a plain value)."""
    model: type[Table] | None = ProjectDocument
    skip_name = False
    for part in loc:
        if skip_name:
            skip_name = False
            continue
        if model is None or part not in model.model_fields:
            return None
        model, skip_name = table_model(model.model_fields[part].annotation)
    return model


def _field(loc: tuple[Any, ...]) -> FieldInfo | None:
    parent = model_at(loc[:-1]) if loc else None
    return parent.model_fields.get(str(loc[-1])) if parent is not None else None


def _literal_choices(annotation: Any) -> tuple[str, ...]:
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    return next((c for arg in get_args(annotation) if (c := _literal_choices(arg))), ())


def field_hint(loc: tuple[Any, ...]) -> str | None:
    """What to write for the key at `loc`: its description, else its allowed values."""
    field = _field(loc)
    if field is None:
        model = model_at(loc)
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


def misplaced_note(section: tuple[str, ...], keys: tuple[str, ...]) -> str | None:
    """Why a key an asset's or argument's table does not know may be in the wrong table."""
    if section[:1] != ("assets",) or len(keys) != 1:
        return None
    key = keys[0]
    if len(section) == 2:  # an asset's table
        if key in IncrementalArgument.keys():
            return (f"{key} belongs in the table of an incremental argument, e.g. "
                    f"[assets.{toml_key(section[1])}.updated_at]")
        return "sub-tables name incremental arguments"
    notes = []
    if key in AssetOptions.keys():
        notes.append(f"{key} belongs in {section_text(section[:2])}")
    guess = suggest(section[-1], AssetOptions.keys())
    if guess:
        notes.append(f"{section_text(section)} is read as the incremental argument {section[-1]!r}; "
                     f"did you mean {section_text(section[:2] + (guess,))}?")
    return "; ".join(notes) or None


def problem_from(error: ValidationError, prefix: tuple[str, ...] = ()) -> Problem:
    """The first error of a validation, located in the file's terms; `prefix` is the schema path
    of the model validated (("assets", "orders") for one asset's options)."""
    err = error.errors()[0]
    loc, ctx, value = prefix + tuple(err["loc"]), err.get("ctx") or {}, err["input"]
    if err["type"] == SETTING_ERROR:
        return _custom(loc, ctx, value)
    if err["type"] == "missing":
        section, key = split_path(document_path(loc[:-1]))
        parent = model_at(loc[:-1])
        hint = (parent.missing_hint or parent.hint) if parent is not None else None
        return Problem(section, key, value, f"has no {loc[-1]}", hint)
    section, key = split_path(document_path(loc))
    if err["type"] == "extra_forbidden":
        parent = model_at(loc[:-1])
        known = parent.keys() if parent is not None else ()
        return unknown_key(section, key, known, misplaced_note(section, key))
    if err["type"].endswith("_type") or err["type"] == "literal_error" and not isinstance(value, str):
        return Problem(section, key, value, f"is {kind(value)}", field_hint(loc))
    return Problem(section, key, value, "is not allowed", field_hint(loc))


def _custom(loc: tuple[Any, ...], ctx: Mapping[str, Any], value: Any) -> Problem:
    full = document_path(loc + tuple(ctx.get("at", ())))
    if "key_from" in ctx:
        section, key = full[: ctx["key_from"]], full[ctx["key_from"]:]
    else:
        section, key = split_path(full)
    if ctx.get("unknown"):
        parent = model_at(loc)
        return unknown_key(section, key, parent.keys() if parent else (), misplaced_note(section, key))
    hint = ctx.get("hint") or field_hint(loc + tuple(ctx.get("at", ())))
    return Problem(section, key, ctx.get("value", value), ctx["problem"], hint,
                   show_value=ctx.get("show_value", True))
