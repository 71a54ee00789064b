"""`python -m definitions ...`: a user's error (config.toml, no Java) as its message, no traceback.

Installed by the package itself, because `python -m definitions` imports `definitions/__init__.py`
(and with it config.toml) before `__main__` runs. `--traceback` shows the full traceback.
"""

from __future__ import annotations

import sys

from dagster_incremental.errors import IncrementalError


def install() -> None:
    """Only under `python -m` (Python sets argv[0] to "-m" while it imports the package)."""
    if sys.argv[:1] == ["-m"] and "--traceback" not in sys.argv:
        sys.excepthook = _report


def _report(kind, exc, tb) -> None:
    if not isinstance(exc, IncrementalError):
        sys.__excepthook__(kind, exc, tb)
        return
    print(f"error: {exc}\n(add --traceback to see where it was raised)", file=sys.stderr)
