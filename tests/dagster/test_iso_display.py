"""Instants read the same everywhere a user sees them: log lines, metadata and the cursor state
write ISO-8601 UTC with a Z (never `DateTime(...)` nor `+00:00`)."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pendulum
from hypothesis import example, given
from hypothesis import strategies as st

from dagster_incremental.cursor.values import format_instant
from dagster_incremental.dagster.metadata import json_safe, shown

instants = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),
                        timezones=st.sampled_from([timezone.utc, pendulum.timezone("Europe/Paris"), pendulum.timezone("Asia/Kolkata")]))


@given(instants)
@example(datetime(1939, 4, 15, 23, 0, tzinfo=pendulum.timezone("Europe/Paris")))  # in a DST gap
def test_a_log_line_and_metadata_show_an_instant_as_the_state_stores_it(value):
    text = shown(value)
    assert text == json_safe(value) == format_instant(value)
    assert text.endswith("Z") and "+" not in text
    # the same instant; compared in UTC, because Python never finds a local time in a DST gap or
    # fold (1939-04-15T23:00 in Paris) equal to one of another zone
    assert datetime.fromisoformat(text.replace("Z", "+00:00")) == value.astimezone(timezone.utc)


def test_pendulum_values_dates_and_other_cursors():
    assert shown(pendulum.datetime(2026, 11, 19)) == "2026-11-19T00:00:00Z"
    assert shown(date(2026, 11, 19)) == "2026-11-19"
    assert shown(42) == "42" and shown("A-100") == "'A-100'"
    assert json_safe({"initial_value": datetime(2024, 1, 1, tzinfo=timezone.utc)}) == {"initial_value": "2024-01-01T00:00:00Z"}
