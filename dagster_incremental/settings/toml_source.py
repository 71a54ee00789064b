"""Reading TOML: a document's text and parsed table, literals given in variables, key lines.

tomli gives no line numbers for a valid document, so `locate` finds the line of a key path from
the text itself; errors quote it as `(at line N)`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli

from dagster_incremental.errors import IncrementalConfigError


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
            reason = exc if quote_errors else exc.strerror
            raise IncrementalConfigError(f"{display}: cannot read the {what} ({reason})", path=path) from None
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
