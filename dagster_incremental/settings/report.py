"""Problems become IncrementalConfigError naming the file, line, section, key, value and variable."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.settings.problems import (
    Problem,
    key_text,
    section_text,
    toml_value,
)
from dagster_incremental.settings.toml_source import locate


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
