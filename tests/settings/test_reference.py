"""docs/settings.md is the schema's: every key, with a meaning, and the page as generated."""

from __future__ import annotations

from pathlib import Path

from dagster_incremental.settings import reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_the_settings_page_is_what_the_schema_generates():
    assert PAGE.read_text() == reference.render() + "\n", (
        "docs/settings.md is stale: python -m dagster_incremental.settings.reference > docs/settings.md")


def test_every_key_of_every_section_is_on_the_page_and_every_meaning_names_a_key():
    keys = {f"{model.__name__}.{name}" for _, model, _ in reference.SECTIONS for name in model.keys()}
    assert keys == set(reference.MEANINGS)
    page = PAGE.read_text()
    for _, model, _ in reference.SECTIONS:
        for name in model.keys():
            assert f"| `{name}` |" in page


def test_a_key_without_a_meaning_fails_the_page_naming_it(monkeypatch):
    monkeypatch.delitem(reference.MEANINGS, "AssetOptions.freshness")
    try:
        reference.render()
    except KeyError as exc:
        assert "AssetOptions.freshness" in str(exc)
    else:
        raise AssertionError("rendered a key without a meaning")
