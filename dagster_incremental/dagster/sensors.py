"""build_incremental_sensor: run an incremental asset only when its source has moved.

The sensor asks a cheap `probe` for the source's high-water mark (e.g. `SELECT max(updated_at)`)
and compares it with the asset's stored cursor. The authoritative cursor stays in the asset's
materializations, so manual runs and sensor runs share it; the sensor's own cursor only
remembers what it already requested, and the run_key makes repeated evaluations idempotent.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import dagster as dg

from dagster_incremental.cursor.state import AssetState, CursorState
from dagster_incremental.cursor.values import detect_type, key_to_canonical, to_key
from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.dagster.partition_scope import TenantPartitions, open_partition, tenant_keys
from dagster_incremental.dagster.state_store import latest_dagster_state


def build_incremental_sensor(
    asset: dg.AssetsDefinition,
    probe: Callable[..., Any],
    *,
    name: str | None = None,
    minimum_interval_seconds: int = 60,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    description: str | None = None,
    cursor: str | None = None,
) -> dg.SensorDefinition:
    """A sensor that requests `asset` when `probe()` reports data beyond the stored cursor.

    Args:
        asset: an `@incremental_asset`.
        probe: returns the source's current high-water mark (same type as the cursor), or None
            when the source is empty. Keep it cheap: it runs on every evaluation. Parameters it
            declares are filled from the asset's secrets.toml section, read at each evaluation
            (`def probe(api_token: str | None = None)`), and its errors are masked like the asset's.
        name: sensor name; default `<asset>_incremental_sensor`.
        cursor: for an asset with several incremental arguments, the one a scalar `probe` result
            is compared with. A probe may instead return `{argument: high-water mark}`: a run is
            requested when any of them is beyond its argument's cursor.

    For a partitioned asset the request targets the newest (open) partition. An asset with a
    cursor per tenant (static or tenant x day partitions) calls `probe(tenant="acme")` once per
    tenant and requests each tenant whose source is ahead of its own cursor (its open day).

    Examples:
        .. code-block:: python

            orders_sensor = build_incremental_sensor(orders, probe=lambda: shop.high_water_mark(DB))
    """
    key = asset.key
    partitions_def = asset.partitions_def
    call_probe = _probe_with_secrets(asset, probe) if inspect.signature(probe).parameters else probe
    sensor_name = name or f"{key.to_python_identifier()}_incremental_sensor"
    names = _cursor_names(asset, cursor)
    tenants = _tenants(asset, probe)

    @dg.sensor(
        name=sensor_name,
        target=[asset],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=description or f"Requests {key.to_user_string()} when its source is ahead of the cursor.",
    )
    def _sensor(context: dg.SensorEvaluationContext):
        if tenants is not None:
            return tenant_requests(context, key, tenants, partitions_def, call_probe,
                                   lambda hwm: _marks(hwm, names, cursor, key), names)
        marks = _marks(call_probe(), names, cursor, key)
        if not marks:
            return dg.SkipReason("the source is empty")
        partition = partitions_def.get_last_partition_key() if partitions_def is not None else None
        return _evaluate(context, key, partition, marks, names)

    return _sensor


def _evaluate(
    context: dg.SensorEvaluationContext,
    key: dg.AssetKey,
    partition: str | None,
    marks: Mapping[str | None, Any],
    names: tuple[str, ...],
) -> dg.SkipReason | dg.SensorResult:
    """Skip, or request a run when a high-water mark is beyond its cursor (once per mark)."""
    hwm_text, skip = ahead_of_cursor(context.instance, key, partition, marks, names)
    if skip is not None:
        return dg.SkipReason(skip)
    requested = json.loads(context.cursor)["requested"] if context.cursor else None
    if requested == hwm_text:
        return dg.SkipReason(f"a run for {hwm_text} was already requested")
    return dg.SensorResult(
        run_requests=[run_request(key, partition, hwm_text)], cursor=json.dumps({"requested": hwm_text})
    )


def ahead_of_cursor(instance, key: dg.AssetKey, partition: str | None, marks: Mapping[str | None, Any],
                    names: tuple[str, ...]) -> tuple[str, str | None]:
    """(the marks as text, None when one is beyond its cursor of `partition`, else why not)."""
    stored = latest_dagster_state(instance, key, partition=partition)
    state = AssetState.from_dict(stored.state if stored else None, names)
    compared = {arg: _compare(hwm, state.cursor(arg)) for arg, hwm in marks.items()}
    hwm_text = _text({arg: text for arg, (text, _, _) in compared.items()}, names)
    if any(beyond for _, beyond, _ in compared.values()):
        return hwm_text, None
    cursors = _text({arg: last for arg, (_, _, last) in compared.items()}, names)
    return hwm_text, f"source high-water mark {hwm_text} is not beyond the cursor {cursors}"


def run_request(key: dg.AssetKey, partition: str | None, hwm_text: str) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=f"{key.to_user_string()}:{partition or ''}:{hwm_text}",
        asset_selection=[key],
        partition_key=partition,
        tags={"dagster_incremental/trigger": "sensor", "dagster_incremental/source_hwm": hwm_text},
    )


def _tenants(asset: dg.AssetsDefinition, probe: Callable[..., Any]):
    """The asset's tenant partitions (None: one cursor); its probe must then take `tenant`."""
    from dagster_incremental.dagster.decorator import incremental_settings

    settings = incremental_settings(asset)
    tenants = settings.tenants if settings is not None else None
    if tenants is not None and "tenant" not in inspect.signature(probe).parameters:
        raise IncrementalConfigError(
            f"build_incremental_sensor({asset.key.to_user_string()}): the asset keeps a cursor per tenant, "
            "so its probe is asked once per tenant: give it a `tenant` parameter "
            "(`def probe(tenant): return max_updated_at(tenant)`)"
        )
    return tenants


def _cursor_names(asset: dg.AssetsDefinition, cursor: str | None) -> tuple[str, ...]:
    """The asset's incremental arguments; `cursor` must be one of them."""
    from dagster_incremental.dagster.decorator import incremental_settings

    settings = incremental_settings(asset)
    names = tuple(settings.cursors) if settings is not None else ()
    if cursor is not None and cursor not in names:
        raise IncrementalConfigError(
            f"build_incremental_sensor({asset.key.to_user_string()}, cursor={cursor!r}): the asset has no "
            f"incremental argument {cursor!r}; it has: {', '.join(names) or 'none'}"
        )
    return names


def _marks(hwm: Any, names: tuple[str, ...], cursor: str | None, key: dg.AssetKey) -> dict[str | None, Any]:
    """The probe's result per incremental argument (None: the asset's only cursor); Nones dropped."""
    if isinstance(hwm, Mapping):
        unknown = sorted(set(hwm) - set(names))
        if unknown:
            raise IncrementalConfigError(
                f"the sensor probe of {key.to_user_string()} returned high-water marks for {unknown}, which "
                f"are not incremental arguments of the asset (it has: {', '.join(names) or 'none'})"
            )
        return {arg: value for arg, value in hwm.items() if value is not None}
    if hwm is None:
        return {}
    if len(names) > 1 and cursor is None:
        raise IncrementalConfigError(
            f"the sensor probe of {key.to_user_string()} returned one value, but the asset has several "
            f"cursors ({', '.join(names)}): return {{argument: high-water mark}} from the probe, or pass "
            "build_incremental_sensor(..., cursor=\"<argument>\")"
        )
    return {cursor if len(names) > 1 else None: hwm}


def _compare(hwm: Any, state: CursorState | None) -> tuple[str, bool, Any]:
    """(canonical text of hwm, whether it is beyond the cursor, the cursor's last_value)."""
    state = state or CursorState()
    last = state.last_value
    cursor_type = state.cursor_type or detect_type(hwm) or "string"
    hwm_key = to_key(hwm, cursor_type)  # compared as instants/numbers, never as text
    text = str(key_to_canonical(hwm_key, cursor_type))
    beyond = last is None or not _not_beyond(hwm_key, to_key(last, cursor_type), state.last_value_func)
    return text, beyond, last


def _text(values: Mapping[str | None, Any], names: tuple[str, ...]) -> str:
    """One value as is; several as `arg=value` pairs in the asset's argument order."""
    if list(values) == [None]:
        return str(values[None])
    order = {n: i for i, n in enumerate(names)}
    return ",".join(f"{arg}={values[arg]}" for arg in sorted(values, key=lambda a: order.get(a or "", len(order))))


def _probe_with_secrets(asset: dg.AssetsDefinition, probe: Callable[..., Any]) -> Callable[..., Any]:
    """`probe` called with the secrets of `[assets.<asset>]` it names; errors holding one are masked."""
    from dagster_incremental.dagster.decorator import incremental_settings
    from dagster_incremental.dagster.run import load_run_secrets

    settings = incremental_settings(asset)
    if settings is None:
        return probe

    def call(**given: Any) -> Any:
        kwargs, redactor = load_run_secrets(settings, probe, strict=False)
        try:
            return probe(**kwargs, **given)
        except Exception as exc:
            masked = redactor.checked(exc, f"sensor probe of {asset.key.to_user_string()}: ")
            if masked is not None:
                raise masked from None
            raise

    return call


def _not_beyond(source: Any, cursor: Any, last_value_func: str | None) -> bool:
    return source >= cursor if last_value_func == "min" else source <= cursor


def tenant_requests(context: dg.SensorEvaluationContext, key: dg.AssetKey, tenants: TenantPartitions,
                    partitions_def: Any, probe: Callable[..., Any], marks_of: Callable[[Any], Mapping[str | None, Any]],
                    names: tuple[str, ...]) -> dg.SkipReason | dg.SensorResult:
    """One request per tenant ahead of its cursor; the sensor's cursor remembers, per tenant, the
    high-water mark it last requested a run for."""
    requested: dict[str, str] = json.loads(context.cursor).get("requested", {}) if context.cursor else {}
    if not isinstance(requested, dict):  # the cursor of a sensor built before the asset had tenants
        requested = {}
    requests, skipped = [], []
    for tenant in tenant_keys(tenants, partitions_def):
        marks = marks_of(probe(tenant=tenant))
        if not marks:
            skipped.append(f"{tenant}: the source is empty")
            continue
        partition = open_partition(tenants, partitions_def, tenant)
        hwm_text, skip = ahead_of_cursor(context.instance, key, partition, marks, names)
        if skip is None and requested.get(tenant) == hwm_text:
            skip = f"a run for {hwm_text} was already requested"
        if skip is not None:
            skipped.append(f"{tenant}: {skip}")
            continue
        requests.append(run_request(key, partition, hwm_text))
        requested[tenant] = hwm_text
    if not requests:
        return dg.SkipReason("; ".join(skipped))
    return dg.SensorResult(run_requests=requests, cursor=json.dumps({"requested": requested}))
