"""dagster_incremental: incremental loading for Dagster assets whose data runs on Spark.

The Dagster and Spark side is imported lazily, so `from dagster_incremental import incremental`
(the pure cursor engine) loads neither Dagster nor Spark.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

try:  # pyproject.toml's `version` is the one source; the installed metadata carries it
    __version__ = importlib.metadata.version("dagster-incremental")
except importlib.metadata.PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"

# The pure cursor engine is imported eagerly (it loads neither Dagster nor Spark).
from dagster_incremental.cursor.run import IncrementalRun  # noqa: E402
from dagster_incremental.cursor.spec import Incremental, IncrementalSpec, incremental  # noqa: E402
from dagster_incremental.cursor.upstream import Changes, changes_of  # noqa: E402

_EXPORTS: dict[str, str] = {
    # config.toml
    "load_config": "dagster_incremental.settings.config",
    "ProjectConfig": "dagster_incremental.settings.config",
    # assets, IO manager, sensors (Dagster + Spark)
    "incremental_asset": "dagster_incremental.dagster.decorator",
    "SparkTableIOManager": "dagster_incremental.dagster.io_manager",
    "build_incremental_sensor": "dagster_incremental.dagster.sensors",
    "source_observation": "dagster_incremental.dagster.source_observation",
    # the Dagster component (defs.yaml), listed by `dg list components`
    "IncrementalAssetsComponent": "dagster_incremental.dagster.component",
    # errors
    "IncrementalError": "dagster_incremental.errors",
    "IncrementalConfigError": "dagster_incremental.errors",
    "CursorPathMissing": "dagster_incremental.errors",
    "CursorValueNone": "dagster_incremental.errors",
    "CursorTypeError": "dagster_incremental.errors",
    "PrimaryKeyMissing": "dagster_incremental.errors",
    "CursorStateMismatch": "dagster_incremental.errors",
    "DataShapeError": "dagster_incremental.errors",
    "ConcurrentRunError": "dagster_incremental.errors",
    "JavaNotFound": "dagster_incremental.errors",
    "TableCursorMissing": "dagster_incremental.errors",
    "UpstreamRewritten": "dagster_incremental.errors",
}

__all__ = sorted([*_EXPORTS, "Changes", "Incremental", "IncrementalRun", "IncrementalSpec", "changes_of", "incremental"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dagster_incremental' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # type checkers and IDEs see the lazy exports' real types, not Any
    from dagster_incremental.dagster.decorator import incremental_asset
    from dagster_incremental.settings.config import ProjectConfig, load_config
    from dagster_incremental.errors import (
        ConcurrentRunError,
        CursorPathMissing,
        CursorStateMismatch,
        CursorTypeError,
        CursorValueNone,
        DataShapeError,
        IncrementalConfigError,
        IncrementalError,
        JavaNotFound,
        PrimaryKeyMissing,
        TableCursorMissing,
        UpstreamRewritten,
    )
    from dagster_incremental.dagster.io_manager import SparkTableIOManager
    from dagster_incremental.dagster.sensors import build_incremental_sensor
    from dagster_incremental.dagster.source_observation import source_observation
    from dagster_incremental.dagster.component import IncrementalAssetsComponent
