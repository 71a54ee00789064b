"""build_incremental_sensor: run an incremental asset only when its source has moved.

The sensor asks a cheap `probe` for the source's high-water mark (e.g. `SELECT max(updated_at)`)
and compares it with the asset's stored cursor. The authoritative cursor stays in the asset's
materializations, so manual runs and sensor runs share it; the sensor's own cursor only
remembers what it already requested, and the run_key makes repeated evaluations idempotent.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import dagster as dg

from dagster_incremental.cursor_values import detect_type, key_to_canonical, to_key
from dagster_incremental.state_store import latest_dagster_state


def build_incremental_sensor(
    asset: dg.AssetsDefinition,
    probe: Callable[..., Any],
    *,
    name: str | None = None,
    minimum_interval_seconds: int = 60,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    description: str | None = None,
) -> dg.SensorDefinition:
    """A sensor that requests `asset` when `probe()` reports data beyond the stored cursor.

    Args:
        asset: an `@incremental_asset`.
        probe: returns the source's current high-water mark (same type as the cursor), or None
            when the source is empty. Keep it cheap: it runs on every evaluation. Parameters it
            declares are filled from the asset's secrets.toml section, read at each evaluation
            (`def probe(api_token: str | None = None)`), and its errors are masked like the asset's.
        name: sensor name; default `<asset>_incremental_sensor`.

    For a partitioned asset the request targets the newest (open) partition.

    Examples:
        .. code-block:: python

            orders_sensor = build_incremental_sensor(orders, probe=lambda: shop.high_water_mark(DB))
    """
    key = asset.key
    partitions_def = asset.partitions_def
    call_probe = _probe_with_secrets(asset, probe) if inspect.signature(probe).parameters else probe
    sensor_name = name or f"{key.to_python_identifier()}_incremental_sensor"

    @dg.sensor(
        name=sensor_name,
        target=[asset],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=description or f"Requests {key.to_user_string()} when its source is ahead of the cursor.",
    )
    def _sensor(context: dg.SensorEvaluationContext):
        hwm = call_probe()
        if hwm is None:
            return dg.SkipReason("the source is empty")
        partition = None
        if partitions_def is not None:
            partition = partitions_def.get_last_partition_key()
        stored = latest_dagster_state(context.instance, key, partition=partition)
        state = (stored.state or {}) if stored else {}
        last = state.get("last_value")
        cursor_type = state.get("cursor_type") or detect_type(hwm) or "string"
        hwm_key = to_key(hwm, cursor_type)  # compared as instants/numbers, never as text
        hwm_text = str(key_to_canonical(hwm_key, cursor_type))
        if last is not None and _not_beyond(hwm_key, to_key(last, cursor_type), state.get("last_value_func")):
            return dg.SkipReason(f"source high-water mark {hwm_text} is not beyond the cursor {last}")
        requested = json.loads(context.cursor)["requested"] if context.cursor else None
        if requested == hwm_text:
            return dg.SkipReason(f"a run for {hwm_text} was already requested")
        run_key = f"{key.to_user_string()}:{partition or ''}:{hwm_text}"
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=run_key,
                    asset_selection=[key],
                    partition_key=partition,
                    tags={"dagster_incremental/trigger": "sensor", "dagster_incremental/source_hwm": hwm_text},
                )
            ],
            cursor=json.dumps({"requested": hwm_text}),
        )

    return _sensor


def _probe_with_secrets(asset: dg.AssetsDefinition, probe: Callable[..., Any]) -> Callable[[], Any]:
    """`probe` called with the secrets of `[assets.<asset>]` it names; errors holding one are masked."""
    from dagster_incremental.asset import incremental_settings, load_run_secrets

    settings = incremental_settings(asset)
    if settings is None:
        return probe

    def call() -> Any:
        kwargs, redactor = load_run_secrets(settings, probe, strict=False)
        try:
            return probe(**kwargs)
        except Exception as exc:
            masked = redactor.checked(exc, f"sensor probe of {asset.key.to_user_string()}: ")
            if masked is not None:
                raise masked from None
            raise

    return call


def _not_beyond(source: Any, cursor: Any, last_value_func: str | None) -> bool:
    return source >= cursor if last_value_func == "min" else source <= cursor
