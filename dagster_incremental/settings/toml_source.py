"""Reading TOML: a document's text and parsed table, key lines, and problems reported there.

tomli gives no line numbers for a valid document, so `locate` finds the line of a key path from
the text itself; `Reporter` turns a Problem into an IncrementalConfigError naming the file, the
line (`(at line N)`) or the variable that set the key, the section, key and value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.settings.errors import Problem, key_text, section_text, toml_value


@dataclass(frozen=True)
class TomlText:
    """A TOML file as read: absolute `path`, `display` (as the user named it) and its text."""

    path: Path
    display: str
    text: str = ""
    found: bool = False

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(self.text.splitlines())

    def parse(self, *, quote_line: bool) -> dict[str, Any]:
        """The document as a dict; malformed TOML names file and line (and quotes the line's
        text only with `quote_line`: a secrets file's line may hold a secret)."""
        try:
            return tomli.loads(self.text)
        except tomli.TOMLDecodeError as exc:
            raise self._decode_error(exc, quote_line) from None

    def _decode_error(self, exc: tomli.TOMLDecodeError, quote_line: bool) -> IncrementalConfigError:
        line = getattr(exc, "lineno", None)
        if not quote_line:  # nor tomli's "invalid character 'x'": it quotes the file
            what = "invalid TOML" if "character" in exc.msg else f"invalid TOML ({exc.msg})"
            return IncrementalConfigError(f"{self.display}: {what} at line {line}, column {exc.colno}; the line "
                                "is not shown because it may hold a secret", path=self.path, line=line)
        lines = self.lines
        shown = f"\n    {line} | {lines[line - 1]}" if line and 0 < line <= len(lines) else ""
        return IncrementalConfigError(f"{self.display}: invalid TOML: {exc}{shown}", path=self.path, line=line)


def read_toml_text(path: Path, display: str, what: str, *, quote_errors: bool = True) -> TomlText:
    """The file's text; a missing file gives an empty, not-`found` document (callers decide
    whether that is an error). `what` names the file in messages ("config file")."""
    if path.is_file():
        try:
            return TomlText(path, display, path.read_text(encoding="utf-8"), True)
        except UnicodeDecodeError as exc:  # its message quotes a byte of the file
            reason = f" ({exc})" if quote_errors else ": it is not UTF-8 text"
            raise IncrementalConfigError(f"{display}: cannot read the {what}{reason}", path=path) from None
        except OSError as exc:
            detail = exc if quote_errors else exc.strerror
            raise IncrementalConfigError(f"{display}: cannot read the {what} ({detail})", path=path) from None
    return TomlText(path, display)


_HEADER_RE = re.compile(r"\[\s*([^\[\]]+?)\s*\]")
_PART_RE = re.compile(r"""\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*(\.|$)""")
_KEY_RE = re.compile(r"""((?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\s-])+?)\s*=(?!=)""")


def _unquote(part: str) -> str:
    if part.startswith('"'):
        try:
            return json.loads(part)
        except ValueError:
            return part[1:-1]
    return part.strip("'")


def _dotted(text: str) -> tuple[str, ...] | None:
    """`a."b.c".d` -> ("a", "b.c", "d"); None when the text is not a dotted key."""
    parts, pos = [], 0
    while pos < len(text):
        m = _PART_RE.match(text, pos)
        if not m:
            return None
        parts.append(_unquote(m.group(1)))
        pos = m.end()
        if not m.group(2):
            break
    return tuple(parts) if pos >= len(text.rstrip()) else None


def _line_path(stripped: str, header: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(the table header in force after this line, the key path the line defines or None)."""
    if stripped.startswith("[") and not stripped.startswith("[["):
        m = _HEADER_RE.match(stripped)
        header = (_dotted(m.group(1)) or ()) if m else ()
        return header, header
    if m := _KEY_RE.match(stripped):
        key = _dotted(m.group(1).strip())
        return header, (header + key if key else None)
    return header, None


def locate(lines: tuple[str, ...], target: tuple[str, ...]) -> int | None:
    """Best-effort line of a key path: the line defining the longest prefix of `target` wins."""
    header: tuple[str, ...] = ()
    best, best_len, multiline = None, 0, False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        quotes = stripped.count('"""') + stripped.count("'''")
        if multiline:
            multiline = quotes % 2 == 0
            continue
        multiline = quotes % 2 == 1
        if not stripped or stripped.startswith("#"):
            continue
        header, candidate = _line_path(stripped, header)
        if candidate and len(candidate) > best_len and target[: len(candidate)] == candidate:
            best, best_len = number, len(candidate)
    return best


class Reporter:
    """Where a key is (file line, or the environment variable that set it) and its errors.

    `sources` maps each key path set from the environment to the variable's name.
    """

    def __init__(self, display: str, lines: tuple[str, ...], sources: Mapping[tuple[str, ...], str]) -> None:
        self.display, self.lines, self.sources = display, lines, sources

    def env_for(self, path: tuple[str, ...]) -> list[str]:
        """Environment variables that set this value, a table around it, or keys inside it."""
        around = [path[:n] for n in range(len(path), 0, -1) if path[:n] in self.sources][:1]
        names = [self.sources[p] for p in around]
        names += [v for p, v in self.sources.items() if len(p) > len(path) and p[: len(path)] == path]
        return list(dict.fromkeys(names))

    def line(self, path: tuple[str, ...]) -> int | None:
        if not self.lines or any(path[:n] in self.sources for n in range(len(path), 0, -1)):
            return None
        targets = [path]
        if path[:2] == ("spark", "conf") and len(path) > 2:  # dotted bare keys nest in TOML
            targets.append(path[:2] + tuple(path[2].split(".")) + path[3:])
        return next((n for t in targets if (n := locate(self.lines, t)) is not None), None)

    def head(self, section: tuple[str, ...], key: tuple[str, ...]) -> str:
        """`config/config.toml: [assets.orders.updated_at] initial_value`."""
        words = [f"{self.display}:"]
        if section:
            words.append(section_text(section))
        if key:
            words.append(key_text(section, key))
        return " ".join(words)

    def where(self, section: tuple[str, ...], key: tuple[str, ...]) -> str:
        """The head plus `(at line N)` or `(from environment variable ...)`."""
        text = self.head(section, key)
        env = self.env_for(section + key)
        if env:
            return text + f" (from environment variable {', '.join(env)})"
        line = self.line(section + key)
        return text + (f" (at line {line})" if line else "")

    def error(self, p: Problem, path: Path) -> IncrementalConfigError:
        full = p.section + p.key
        env = [p.env] if p.env else self.env_for(full)
        if full:
            text = self.head(p.section, p.key)
            if p.show_value:
                text += f" = {toml_value(p.value)}"
            if env:
                text += f" (from environment variable {', '.join(env)})"
        else:  # a problem with the variable's name itself
            text = f"environment variable {p.env}"
        text += f" {p.problem}"
        if p.hint:
            text += f"; {p.hint}"
        line = None if p.env else self.line(full)
        if line:
            text += f" (at line {line})"
        return IncrementalConfigError(text, path=path, section=section_text(p.section) if p.section else None,
                            key=".".join(p.key) or None, value=p.value if p.show_value else None,
                            line=line, env_var=env[0] if env else None)
