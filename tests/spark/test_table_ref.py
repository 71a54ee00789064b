"""TableRef: one table name as parts, quoted for SQL in one place, parsed back losslessly."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.table_ref import TableRef

ODD = ["it's", "a`b", "two words", "we.ird", "``", "select", "ünï"]


def test_odd_names_are_quoted_part_by_part():
    ref = TableRef.for_asset("lake", "n s", ["it's", "a`b"])
    assert ref.parts == ("lake", "n s", "it's__a`b")
    assert ref.sql == "`lake`.`n s`.`it's__a``b`"
    assert str(ref) == ref.sql  # messages show the name as SQL takes it
    assert ref.namespace_sql == "`lake`.`n s`"
    assert ref.in_catalog_sql == "`n s`.`it's__a``b`"
    assert ref.metadata_table("snapshots") == "`lake`.`n s`.`it's__a``b`.`snapshots`"
    assert ref.display == "lake.n s.it's__a`b"
    assert TableRef.for_asset("lake", ["a", "b.c"], ["t"]).sql == "`lake`.`a`.`b.c`.`t`"


def test_parse_reads_quoted_and_bare_parts():
    assert TableRef.parse("lake.ns.t") == TableRef("lake", ("ns",), "t")
    assert TableRef.parse("`lake`.`we.ird`.`a``b`") == TableRef("lake", ("we.ird",), "a`b")
    assert TableRef.parse("lake.`a`.b.`t`") == TableRef("lake", ("a", "b"), "t")
    for bad in ("`lake`.`open", "lake.ns", "lake..t", "`lake`x.ns.t", ""):
        with pytest.raises(ValueError):
            TableRef.parse(bad)


@given(
    st.sampled_from(ODD) | st.text(min_size=1, max_size=8),
    st.lists(st.sampled_from(ODD) | st.text(min_size=1, max_size=8), min_size=1, max_size=3),
    st.sampled_from(ODD) | st.text(min_size=1, max_size=8),
)
def test_parse_round_trips_every_name(catalog, namespace, name):
    ref = TableRef(catalog, tuple(namespace), name)
    assert TableRef.parse(ref.sql) == ref


def test_a_ref_is_a_frozen_value():
    ref = TableRef("lake", "ns", "t")  # a single namespace may be given as a string
    assert ref.namespace == ("ns",) and ref == TableRef("lake", ("ns",), "t") and hash(ref) == hash(TableRef.parse(ref.sql))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.name = "other"  # type: ignore[misc]
    with pytest.raises(ValueError):
        TableRef("lake", (), "t")
    with pytest.raises(ValueError):
        TableRef("lake", ("ns",), "")
    with pytest.raises(IncrementalConfigError, match="at least one part"):
        TableRef.for_asset("lake", "ns", [])
