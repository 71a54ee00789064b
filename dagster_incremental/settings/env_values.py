"""How an environment variable's text becomes a value of its key's kind.

The schema tags each field with one of these readers (`FromEnv(read_int)`); the environment
engine reads the variable with it, then the schema checks the value exactly as it checks the
file's, so a variable and the file give the same errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tomli

from dagster_incremental.settings.problems import BadValue

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
