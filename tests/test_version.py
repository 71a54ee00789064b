"""One version, set in pyproject.toml, moving with the CHANGELOG's releases (its header states the
rule): the package reports what it was installed as, and pyproject's version is the newest
release when no change is unreleased, else a development release of a later version."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

import dagster_incremental

ROOT = Path(__file__).resolve().parent.parent
HEADING = re.compile(r"^## (?:(Unreleased)|(\S+) \((\d{4}-\d\d-\d\d)\))$")


def changelog_sections(text: str) -> list[str]:
    """The `##` headings, newest first: "Unreleased" or a release's version; others are refused."""
    sections = []
    for line in text.splitlines():
        if line.startswith("## "):
            match = HEADING.match(line)
            assert match, f"CHANGELOG.md: {line!r} is neither '## Unreleased' nor '## X.Y.Z (YYYY-MM-DD)'"
            sections.append(match[1] or match[2])
    return sections


def version_problem(version: str, sections: list[str]) -> str | None:
    """Why `version` does not follow the CHANGELOG's rule, or None when it does."""
    releases = [Version(s) for s in sections if s != "Unreleased"]
    if releases != sorted(releases, reverse=True) or "Unreleased" in sections[1:]:
        return f"headings out of order: {sections}"
    newest = releases[0] if releases else None
    if sections and sections[0] == "Unreleased":
        if not Version(version).is_devrelease:
            return f"version {version} while changes are unreleased: use the next version's .dev0"
        if newest is not None and Version(version) <= newest:
            return f"version {version} is not after the newest release {newest}"
        return None
    return None if newest == Version(version) else f"version {version} is not the newest release {newest}"


def test_the_package_reports_the_version_it_was_installed_as():
    assert dagster_incremental.__version__ == importlib.metadata.version("dagster-incremental")


def test_pyproject_version_follows_the_changelog():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    sections = changelog_sections((ROOT / "CHANGELOG.md").read_text())
    assert version_problem(version, sections) is None, version_problem(version, sections)


@pytest.mark.parametrize(
    ("version", "sections", "problem"),
    [
        ("0.1.0", ["Unreleased", "0.1.0"], "use the next version's .dev0"),
        ("0.1.0.dev0", ["Unreleased", "0.1.0"], "not after the newest release 0.1.0"),
        ("0.2.0.dev0", ["0.2.0", "0.1.0"], "not the newest release 0.2.0"),
        ("0.2.0", ["0.1.0", "0.2.0"], "headings out of order"),
    ],
)
def test_a_version_out_of_step_with_the_changelog_is_named(version, sections, problem):
    assert problem in version_problem(version, sections)


def test_a_release_and_its_development_versions_pass():
    assert version_problem("0.2.0.dev0", ["Unreleased", "0.1.0"]) is None
    assert version_problem("0.2.0", ["0.2.0", "0.1.0"]) is None
