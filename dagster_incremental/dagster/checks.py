"""Asset checks of every incremental asset: `primary_key_unique` and `cursor_fresh`.

They are declared on the asset (`check_specs`) and yielded by its compute right after the
`Output`: Dagster hands the output to the IO manager before the compute resumes, so the checks
see the table as the run committed it, and the UI shows them on the asset's Checks tab.

- primary_key_unique (assets with a primary key): no key twice in the table (scd2: among the
  current versions); a run that replaced a window checks that window only.
- cursor_fresh (assets with `freshness`): the cursor's `last_value` is within `freshness` of
  now. It looks at the data, not at when a run happened: a run that loads nothing keeps an old
  cursor, so the check tells the user the source stopped producing.

Neither check fails the run: the data and the cursor are committed before they are evaluated.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import dagster as dg

from dagster_incremental.cursor import values as cv
from dagster_incremental.dagster import metadata as md
from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.settings.vocabulary import matches_on_primary_key
from dagster_incremental.spark.write_spec import RUN_ID_PROPERTY, IncrementalBatch

PRIMARY_KEY_UNIQUE = "primary_key_unique"
CURSOR_FRESH = "cursor_fresh"
EXAMPLE_KEYS = 5
UNCHECKABLE_TYPES = ("number", "string")  # no instant to compare with now

# -- settings -------------------------------------------------------------------------------------


def freshness_for_cursors(limit: timedelta | None, asset: str, cursors: Mapping[str, Any],
                          origins: Mapping[tuple[str | None, str], str] | None = None) -> timedelta | None:
    """`freshness` (already a positive timedelta: the settings schema parsed it), refused when
    no cursor of the asset can be an instant (numbers, strings, none): nothing to compare with now.
    The message blames the option that made each cursor a number or a string (`origins`: where
    it is set), since that option, not freshness, is usually the mistake."""
    if limit is None:
        return None
    types = [spec.cursor_type or cv.detect_type(spec.initial_value) for spec in cursors.values()]
    if all(t in UNCHECKABLE_TYPES for t in types):
        origins = origins or {}
        where = origins.get((None, "freshness"))
        causes = [_type_cause(name, spec, str(t), origins) for (name, spec), t in zip(cursors.items(), types)]
        remove = f"remove freshness ({where})" if where else "remove freshness"
        raise IncrementalConfigError(
            f"asset {asset!r}: freshness needs a cursor of dates or timestamps to compare with now, but "
            + ("; ".join(causes) + f". If the cursor column holds numbers or text, {remove}: there is no time "
               "to compare with now." if causes else
               f"the asset has no incremental argument: {remove}, or give the asset an incremental argument "
               "over a date or timestamp column.")
        )
    return limit


def _type_cause(name: str, spec: Any, ctype: str, origins: Mapping[tuple[str | None, str], str]) -> str:
    """Why cursor `name` is a number or string cursor, and the change if its column holds instants
    (written as the file or the code writes it, where the option is set)."""
    key = "cursor_type" if spec.cursor_type else "initial_value"
    value = getattr(spec, key)
    where = origins.get((name, key), f"the incremental(...) of parameter {name!r}")
    in_file = "[assets." in where
    if key == "cursor_type":
        fix = 'cursor_type = "timestamp" (or "date")' if in_file else 'cursor_type="timestamp" (or "date")'
        why = "is set so"
    else:
        bound = cv.bound_like(value, "timestamp")
        fix = f"write initial_value as a timestamp: initial_value = {bound}" if in_file else \
            f"write initial_value as a timestamp: incremental(..., initial_value={bound})"
        why = f"is {cv.what_value_is(value)}"
    return (f"{name} ({ctype}) is a {ctype} cursor because {key} = {value!r} ({where}) {why}; "
            f"if column {spec.cursor_path!r} holds dates or timestamps, {fix}")


# -- declaration ----------------------------------------------------------------------------------


def check_specs(settings) -> list[dg.AssetCheckSpec]:
    """The checks an asset declares: primary_key_unique with a primary key, cursor_fresh with
    a freshness."""
    asset = dg.AssetKey([*settings.key_prefix, settings.name])
    described = []
    if settings.primary_key:
        where = "among current versions" if settings.strategy == "scd2" else "in the table"
        described.append((PRIMARY_KEY_UNIQUE, f"No primary key ({', '.join(settings.primary_key)}) occurs twice {where}."))
    if settings.freshness is not None:
        described.append((CURSOR_FRESH, f"The cursor's last_value is at most {settings.freshness} old: the source "
                                        "still delivers new data."))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partitioned checks are a preview feature of Dagster 1.13
        # A partitioned asset's checks are partitioned too: each partition shows its own outcome.
        return [dg.AssetCheckSpec(name, asset=asset, description=text, partitions_def=settings.partitions_def)
                for name, text in described]


# -- evaluation -----------------------------------------------------------------------------------


def evaluate_checks(context, io, settings, batch: IncrementalBatch, state: Any) -> Iterator[dg.AssetCheckResult]:
    """The results of the asset's checks for the table this run left. `state` is the live cursor
    after the run (a backfill's is the one in force, unchanged)."""
    severity = dg.AssetCheckSeverity(settings.check_severity)
    evaluations = []
    if settings.primary_key:
        evaluations.append((PRIMARY_KEY_UNIQUE, lambda: primary_key_unique(context, io, settings, batch)))
    if settings.freshness is not None:
        evaluations.append((CURSOR_FRESH, lambda: cursor_fresh(settings, _live_state(io, settings, batch, state))))
    for name, evaluate in evaluations:
        try:
            passed, metadata, description = evaluate()
        except Exception as exc:  # noqa: BLE001 - the run's data is committed; report, don't fail it
            context.log.warning(f"asset check {name} could not be evaluated: {exc}")
            passed, metadata, description = False, {"error": str(exc)}, f"{name} could not be evaluated"
        yield from _results(context, settings, name, dg.AssetCheckResult(
            check_name=name, passed=passed, severity=severity, metadata=metadata, description=description
        ))


def _results(context, settings, name: str, result: dg.AssetCheckResult) -> Iterator[Any]:
    """`result` as Dagster records it: a run of one partition (or none) yields it as it is; a run
    over a range of partitions evaluated them at once, and records that outcome for each of them,
    so every partition of a partitioned check shows its own."""
    if settings.partitions_def is None or context.has_partition_key or not context.has_partition_key_range:
        yield result
        return
    key = dg.AssetCheckKey(context.asset_key, name)
    yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(key))
    for partition in context.partition_keys:
        yield dg.AssetCheckEvaluation(
            asset_key=context.asset_key, check_name=name, passed=result.passed, metadata=result.metadata,
            severity=result.severity, description=result.description, partition=partition,
        )


def _live_state(io, settings, batch: IncrementalBatch, state: Any) -> Any:
    """A backfill of partitions runs without the live cursor (each partition has its own):
    take the newest cursor committed to the table, whatever its partition (a tenant's backfill
    has its tenant's)."""
    if batch.mode != "backfill" or settings.partitions_def is None or state is not None:
        return state
    committed = io.committed_state(dg.AssetKey([*settings.key_prefix, settings.name]))
    return committed.state if committed is not None else None


def primary_key_unique(context, io, settings, batch: IncrementalBatch) -> tuple[bool, dict[str, Any], str]:
    """Duplicated keys of the snapshot the run left, counted as `_counted` says.

    A run that committed nothing leaves the snapshot the previous evaluation looked at: its
    outcome is reported again (metadata `evaluated_in_run` names the run that counted), read
    from Dagster's event log and the table's metadata files, so such a run starts no JVM. Only
    when no evaluation of that snapshot and scope exists (the first run after the checks were
    added, or after a window run) is the table counted again.
    """
    table, scope = batch.spec.table, _key_scope(settings, batch)
    snapshot = io.tables.snapshot(table)
    base = {"primary_key": dg.MetadataValue.json(list(settings.primary_key)), "scope": dg.MetadataValue.text(scope)}
    if snapshot is None:
        return True, {**base, "duplicated_keys": dg.MetadataValue.int(0)}, "The table has no rows yet."
    base["snapshot_id"] = dg.MetadataValue.text(str(snapshot))
    check_key = dg.AssetCheckKey(context.asset_key, PRIMARY_KEY_UNIQUE)
    previous = _evaluation_of(context.instance, check_key, base)
    if previous is not None:
        return previous.passed, dict(previous.metadata), previous.description or ""
    kept = _kept_unique_by_merge(context, io, settings, batch, check_key, base)
    if kept is not None:
        return True, kept, f"No primary key occurs twice ({scope}): this run's MERGE on the key kept it so."
    found = _counted(io, settings, batch, snapshot)
    meta = {**base, "duplicated_keys": dg.MetadataValue.int(found.count), "evaluated_in_run": dg.MetadataValue.text(context.run_id)}
    if found.count == 0:
        return True, meta, f"No primary key occurs twice ({scope})."
    examples = [md.json_safe(k[0] if len(k) == 1 else list(k)) for k in found.examples]
    meta["example_keys"] = dg.MetadataValue.json(examples)
    return False, meta, f"{found.count} primary keys occur more than once ({scope}), e.g. {examples[0]!r}."


def _counted(io, settings, batch: IncrementalBatch, snapshot: int) -> Any:
    """The duplicated keys at `snapshot`, counted in this process from the key columns
    (pyiceberg's or delta-rs's Arrow read, grouped by pyarrow) whenever the table's files are
    readable here: 5-50 times quicker than a Spark job even with Spark running (bench.key_check).
    A window's rows, tables too large to hold their keys in memory and tables this process cannot
    read are counted by one Spark aggregation."""
    options = {"snapshot_id": snapshot, "current": _current_versions(settings), "examples": EXAMPLE_KEYS}
    if batch.window is None:
        try:
            found = io.tables.duplicate_keys_without_jvm(batch.spec.table, settings.primary_key, **options)
        except Exception:  # noqa: BLE001 - e.g. delete files pyiceberg cannot apply: Spark counts them
            found = None
        if found is not None:
            return found
    return io.tables.duplicate_keys(batch.spec.table, settings.primary_key, window=batch.window, **options)


def _kept_unique_by_merge(context, io, settings, batch: IncrementalBatch, check_key, base) -> dict[str, Any] | None:
    """Metadata of a pass without counting, or None: count. A MERGE keyed on exactly the primary
    key (upsert, insert-only; delete-insert without merge_key) with a batch deduplicated on it cannot make a
    key occur twice. So when the last count found the keys unique at snapshot P (or the table is
    new: this run created it from its deduplicated batch) and every commit since is this run's
    (or a compaction, or the empty commit a new table starts with: neither changes a row), the
    table is still unique: checked from the snapshot
    lineage in the metadata files, with no Spark job. Anything else (appends, scd2, a merge_key, a
    window, another writer's commit, a catalog whose files are not readable here) is counted."""
    keyed_merge = (settings.disposition == "merge" and settings.strategy != "scd2"
                   and matches_on_primary_key(settings.strategy, settings.merge_key))
    if not keyed_merge or batch.window is not None or batch.full_refresh:
        return None
    last = _last_count(context.instance, check_key, base["scope"].value)
    since = int(last.metadata["snapshot_id"].value) if last is not None else None
    commits = io.tables.commits_since(batch.spec.table, since)
    if not commits or not all(op == "replace" or summary.get(RUN_ID_PROPERTY) == context.run_id
                              or _changes_no_row(summary) for op, summary in commits):
        return None
    origin = f"snapshot {since}" if since is not None else "the table's creation"
    counted_by = last.metadata if last is not None else {"evaluated_in_run": dg.MetadataValue.text(context.run_id)}
    return {**counted_by, **base, "duplicated_keys": dg.MetadataValue.int(0), "unique_since_count": dg.MetadataValue.text(
        f"kept by this run's MERGE on the primary key since {origin}")}


def _changes_no_row(summary: Mapping[str, str]) -> bool:
    """A commit that adds and removes nothing (the empty snapshot a new table starts with, so
    that a run's branch has a base to start from) cannot make a key occur twice."""
    changed = ("added-records", "deleted-records", "added-position-deletes", "added-equality-deletes")
    return not any(int(summary.get(key, 0) or 0) for key in changed)


def _last_count(instance, check_key: dg.AssetCheckKey, scope: str):
    """The newest completed evaluation when it passed over the same scope (else None)."""
    for record in instance.event_log_storage.get_asset_check_execution_history(check_key, limit=5):
        evaluation = record.event.asset_check_evaluation if record.event is not None else None
        if evaluation is None:
            continue
        meta = evaluation.metadata
        same = getattr(meta.get("scope"), "value", None) == scope and "snapshot_id" in meta
        return evaluation if evaluation.passed and same and "evaluated_in_run" in meta else None
    return None


def _key_scope(settings, batch: IncrementalBatch) -> str:
    """Which rows the count covers, in words; also what makes two evaluations comparable."""
    if batch.window is not None:
        w = batch.window
        tenant = f" and {w.rows_of[0]} = {w.rows_of[1]!r}" if w.rows_of is not None else ""
        return f"rows with {w.column} in [{md.json_safe(w.start)}, {md.json_safe(w.end)}){tenant}"
    return "current versions" if settings.strategy == "scd2" else "whole table"


def _current_versions(settings) -> tuple[str, Any] | None:
    """scd2: current versions hold NULL (or active_record_timestamp) in the valid-to column."""
    if settings.strategy != "scd2":
        return None
    return settings.scd2.validity_column_names[1], settings.scd2.active_record_timestamp


def _evaluation_of(instance, check_key: dg.AssetCheckKey, wanted: Mapping[str, Any]):
    """The newest completed evaluation of the check when it looked at the same snapshot and
    scope as `wanted` (this run's own planned record has no evaluation yet and is skipped)."""
    history = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=5)
    for record in history:
        evaluation = record.event.asset_check_evaluation if record.event is not None else None
        if evaluation is None:
            continue
        meta = evaluation.metadata
        same = all(getattr(meta.get(k), "value", None) == v.value for k, v in wanted.items())
        return evaluation if same and "evaluated_in_run" in meta else None
    return None


def cursor_fresh(settings, state: Any, now: datetime | None = None) -> tuple[bool, dict[str, Any], str]:
    """The stalest temporal cursor against `freshness`: a date counts as the end of its day (UTC)."""
    now = now or datetime.now(timezone.utc)
    limit = settings.freshness
    cursors = [(name, c.get("last_value"), c.get("cursor_type")) for name, c in _cursor_states(settings, state).items()]
    timed = [(name, last, _instant(last, ctype)) for name, last, ctype in cursors if ctype not in UNCHECKABLE_TYPES]
    if not timed:
        timed = [(name, None, None) for name, _, _ in cursors[:1]] or [("", None, None)]
    name, last, instant = min(timed, key=lambda t: t[2] or datetime.min.replace(tzinfo=timezone.utc))
    meta: dict[str, Any] = {
        "last_value": dg.MetadataValue.text(str(md.json_safe(last))),
        "freshness": dg.MetadataValue.text(str(limit)),
        "freshness_seconds": dg.MetadataValue.float(limit.total_seconds()),
    }
    if len(settings.cursors) > 1:
        meta["cursor"] = dg.MetadataValue.text(name)
    if instant is None:
        return False, meta, "The cursor has no last_value yet: no run has loaded a row."
    age = now - instant
    meta["age"] = dg.MetadataValue.text(str(timedelta(seconds=round(age.total_seconds()))))
    meta["age_seconds"] = dg.MetadataValue.float(age.total_seconds())
    if age <= limit:
        return True, meta, f"last_value {last} is {meta['age'].value} old (freshness {limit})."
    return False, meta, (
        f"last_value {last} is {meta['age'].value} old, more than freshness {limit}: "
        "the source may have stopped producing new rows."
    )


def _cursor_states(settings, state: Any) -> dict[str, Mapping[str, Any]]:
    """Per incremental argument, its state (one argument's state is the whole state)."""
    state = state if isinstance(state, Mapping) else {}
    if len(settings.cursors) == 1:
        return {next(iter(settings.cursors)): state}
    return {name: state.get(name) or {} for name in settings.cursors}


def _instant(last: Any, cursor_type: str | None) -> datetime | None:
    """The instant a cursor value stands for; None when it has none (no value, a number)."""
    cursor_type = cursor_type or cv.detect_type(last)
    if last is None or cursor_type not in cv.TEMPORAL_TYPES:
        return None
    key = cv.to_key(last, cursor_type)
    assert isinstance(key, int), "a temporal cursor's key is its microseconds"
    instant = cv.micros_to_datetime(key)
    return instant + timedelta(days=1) if cursor_type == "date" else instant
