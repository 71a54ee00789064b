"""The sensor of an asset with a cursor per tenant: the probe is asked once per tenant, and each
tenant whose source is ahead of its own cursor gets a run of its own (its open day, for tenant x
day), so a busy tenant never makes a quiet one run, nor the reverse."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from dagster_incremental.dagster.partition_scope import TenantPartitions, open_partition, tenant_keys
from dagster_incremental.dagster.sensors import ahead_of_cursor, run_request


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
