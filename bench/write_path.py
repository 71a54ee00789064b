"""How far one batch wanders: the library calls a local upsert batch makes from the IO manager's
`handle_output` to its Iceberg commit, and how often it re-enters a module it had left.

    python -m bench.write_path

Loads a 1,000-row upsert asset, then traces the change run's `handle_output` (200 changed rows,
local dicts) with `sys.setprofile`, following the batch: a call is on its path when it receives
the batch or something derived from it (see PathTrace). Every path call from one library module
into ANOTHER is a step, except reading or building a value (a property, a dunder such as a
dataclass's __init__) or resuming a generator; a step into a module the path had already entered is a re-entry (a return
to the caller is not a step). Prints one JSON line: calls, modules, re-entries (and how many modules they re-enter) and
the module sequence.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from bench import common

PACKAGE = "dagster_incremental"
_STARTED: set[int] = set()  # generator frames already started


class PathTrace:
    """The batch's path: library calls that receive the batch or something derived from it.

    Derived = an attribute of a tracked object (one level: `batch.data`, `batch.spec`) or the
    value a path call returned. A step is a path call from one library module into another;
    a step into a module the path had entered before is a re-entry.
    """

    def __init__(self, batch: Any) -> None:
        self.tracked: set[int] = set()
        self.frames: set[int] = set()
        self.steps: list[tuple[str, str, str]] = []  # (from module, to module, function)
        self._track(batch)

    def _track(self, value: Any) -> None:
        if value is None or isinstance(value, (bool, int, float, str)):
            return
        self.tracked.add(id(value))
        for attribute in getattr(value, "__dict__", {}).values():
            if attribute is not None and not isinstance(attribute, (bool, int, float, str)):
                self.tracked.add(id(attribute))

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith(PACKAGE):
            return
        if event == "return" and id(frame) in self.frames:
            self.frames.discard(id(frame))
            self._track(arg)
            return
        if event != "call" or not any(id(v) in self.tracked for v in frame.f_locals.values()):
            return
        self.frames.add(id(frame))
        for value in frame.f_locals.values():
            if id(value) in self.tracked:
                self._track(value)
        caller = _calling_module(frame)
        if callee != caller and caller.startswith(PACKAGE) and not _reads_a_field(frame):
            self.steps.append((caller, callee, frame.f_code.co_name))

    def summary(self) -> dict[str, Any]:
        seen: list[str] = []
        reentries = []
        for caller, callee, function in self.steps:
            if not seen:
                seen.append(caller)
            if callee in seen:
                reentries.append(f"{callee.removeprefix(PACKAGE + '.')}.{function}")
            else:
                seen.append(callee)
        return {
            "calls": len(self.steps),
            "modules": len(seen),
            "reentries": len(reentries),
            "modules_reentered": len({r.rsplit(".", 1)[0] for r in reentries}),
            "reentered": reentries,
            "sequence": [f"{a.removeprefix(PACKAGE + '.')} -> {b.removeprefix(PACKAGE + '.')}.{f}" for a, b, f in self.steps],
        }


def _calling_module(frame: Any) -> str:
    """The library module that made the call, looking through the standard library in between
    (contextlib entering a `with`, dataclasses building a value)."""
    caller = frame.f_back
    while caller is not None and not caller.f_globals.get("__name__", "").startswith(PACKAGE):
        if "site-packages" in caller.f_code.co_filename:
            return ""  # called back from a dependency (Dagster, pyspark): not the library's step
        caller = caller.f_back
    return caller.f_globals.get("__name__", "") if caller is not None else ""


def _reads_a_field(frame: Any) -> bool:
    """A dunder (a dataclass's __init__, __eq__) or a property getter: reading or building a
    value, not a step of the work."""
    name = frame.f_code.co_name
    if name.startswith("__") and name.endswith("__"):
        return True
    if frame.f_code.co_flags & inspect.CO_GENERATOR:
        if id(frame) in _STARTED:
            return True  # a generator resumed for its next item: the call was its first start
        _STARTED.add(id(frame))
    owner = frame.f_locals.get("self")
    return owner is not None and isinstance(getattr(type(owner), name, None), property)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import dagster as dg
    import pyspark.sql  # noqa: F401 - imported first: an import is not a step of the path

    from dagster_incremental import Incremental, incremental, incremental_asset

    rows = [{"id": i, "updated_at": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z", "v": i} for i in range(1000)]
    changed = [dict(r, v=-r["id"], updated_at="2026-01-02T00:00:00Z") for r in rows[:200]]
    pages = [rows, changed]

    with common.workdir("di-write-path-") as wd:
        @incremental_asset(config_path=wd.config, primary_key="id", write_disposition={"disposition": "merge", "strategy": "upsert"})
        def trace_orders(context: dg.AssetExecutionContext, updated_at: Incremental = incremental("updated_at", initial_value="2025-01-01T00:00:00Z")):
            yield pages.pop(0)

        io = common.io_manager(wd)
        instance = dg.DagsterInstance.get()
        dg.materialize([trace_orders], resources={"io_manager": io}, instance=instance, run_config=common.QUIET)
        traces: list[PathTrace] = []
        handle_output = type(io).handle_output

        def traced(self: Any, context: Any, obj: Any) -> None:
            traces.append(PathTrace(obj))
            sys.setprofile(traces[-1])
            try:
                handle_output(self, context, obj)
            finally:
                sys.setprofile(None)

        type(io).handle_output = traced  # type: ignore[method-assign]
        try:
            dg.materialize([trace_orders], resources={"io_manager": io}, instance=instance, run_config=common.QUIET)
        finally:
            type(io).handle_output = handle_output  # type: ignore[method-assign]
    record = traces[0].summary()
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
