"""The source's high-water mark as an observable source asset: declarative automation's trigger.

An incremental asset downstream of it with `AutomationCondition.eager()` runs when an
observation records a new data version, i.e. when the source moved, and not on every tick: the
declarative counterpart of `build_incremental_sensor`, with no sensor code of the user's.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Any

import dagster as dg


def source_observation(probe: Callable[[], Any], key: Sequence[str], *, cron: str = "*/5 * * * *",
                       description: str | None = None) -> dg.SourceAsset:
    """An observable source asset `key` whose data version is `probe()`, the source's high-water
    mark (e.g. `SELECT max(updated_at)`), observed on each tick of `cron`.

    Make the incremental asset depend on it (`deps=[observed.key]`) with
    `automation_condition=dg.AutomationCondition.eager()`: it then runs once per new mark. Dagster
    evaluates both conditions in its `default_automation_condition_sensor` (turn it on in the UI).

    Examples:
        .. code-block:: python

            orders_source = source_observation(shop.high_water_mark, ["orders_source"])

            @incremental_asset(deps=[orders_source.key], automation_condition=dg.AutomationCondition.eager())
            def orders(context: dg.AssetExecutionContext, updated_at: Incremental): ...
    """

    def observe(context) -> dg.DataVersion:
        mark = probe()
        context.log.info(f"source high-water mark: {mark}")
        return dg.DataVersion(_version_text(mark))

    observe.__name__ = "__".join(key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # observable source assets are beta in Dagster 1.13
        return dg.observable_source_asset(
            key=dg.AssetKey(list(key)),
            description=description or (probe.__doc__ or "The source's high-water mark.").strip().splitlines()[0],
            automation_condition=dg.AutomationCondition.cron_tick_passed(cron),
        )(observe)


def _version_text(mark: Any) -> str:
    """A data version for a mark: the same mark, the same text (no mark yet: "empty")."""
    if mark is None:
        return "empty"
    if isinstance(mark, (datetime, date)):
        return mark.isoformat()
    return mark if isinstance(mark, str) else json.dumps(mark, default=str)
