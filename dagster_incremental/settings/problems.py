"""What a settings error says: a value's problem, where it is, and how values are shown.

A check raises `BadValue` (what is wrong, what to do); the caller that knows the key path turns
it into a `Problem`; `report.Reporter` renders a Problem with the file, line and variable.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import date, datetime, time
from typing import Any



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
