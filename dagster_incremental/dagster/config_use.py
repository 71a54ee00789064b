"""Which incremental assets each config file serves in this process, and the check of the
file's [assets.<name>] sections against them.

One decorator call knows one asset; the whole set is known once the code location's modules are
imported. Dagster builds the repository (and with it the IO manager's resource definition) only
then, whatever the import order, and a run starts later still: both check here. A decorator never
checks, so assets spread over several modules never see a partial set.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

from dagster_incremental.errors import IncrementalSettingsWarning
from dagster_incremental.settings.config import load_config

_LOCK = threading.Lock()
_ASSETS: dict[Path, set[str]] = {}


def register(config_path: Path, asset_name: str) -> None:
    """Record that `asset_name` was defined with the config file at `config_path` (absolute)."""
    with _LOCK:
        _ASSETS.setdefault(config_path, set()).add(asset_name)


def assets_using(config_path: Path) -> frozenset[str]:
    with _LOCK:
        return frozenset(_ASSETS.get(config_path, ()))


def check_sections(config_path: str | Path | None) -> list[str]:
    """Raise IncrementalConfigError for a misspelt asset section of the file; return the warnings
    for sections that name no asset here. Nothing to check when no asset uses the file, or when
    there is no file (a project without config.toml runs on defaults)."""
    if config_path is None or not Path(config_path).is_file():
        return []
    assets = assets_using(Path(config_path))
    if not assets:
        return []
    return load_config(config_path).check_asset_sections(assets)


def check_sections_at_load(config_path: str | Path | None) -> None:
    """The load-time check: errors fail the code location, the rest are Python warnings."""
    for text in check_sections(config_path):
        warnings.warn(text, IncrementalSettingsWarning, stacklevel=3)
