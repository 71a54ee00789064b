"""Delta's column mapping (name mode): how a Delta table holds column names with a space or one of
`,;{}()=` (and tabs, newlines), which Iceberg, delta-rs and the users' sources have.

Without it Spark's Delta refuses such a name (DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES). With it
each column has a physical name in the data files and its own name in the schema only; readers
that follow the protocol (Spark, delta-rs) map one to the other. The library turns it on only
for a table that needs it (when it creates the table, or before adding such a column), since it
raises the table's protocol (readers 2, writers 5), which older readers do not read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

INVALID = " ,;{}()\n\t="  # the characters Delta takes in a column name only under column mapping
MODE = "delta.columnMapping.mode"
PROPERTIES = {MODE: "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"}


def needs_mapping(names: Iterable[str]) -> bool:
    """Whether any of `names` is one Delta takes only under column mapping."""
    return any(c in INVALID for name in names for c in name)


def mapped(configuration: Mapping[str, str] | None) -> bool:
    """Whether a table with this configuration (its metaData's) maps its columns; unknown
    (None) counts as mapped, so a writer that cannot map names steps aside."""
    return configuration is None or configuration.get(MODE, "none") != "none"


def with_mapping(properties: Mapping[str, str], names: Iterable[str]) -> dict[str, str]:
    """A new table's properties: column mapping added when its columns need it (a mode the
    user set wins)."""
    if not needs_mapping(names) or MODE in properties:
        return dict(properties)
    return {**PROPERTIES, **properties}
