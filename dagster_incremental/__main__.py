"""`python -m dagster_incremental`: where the example code location is and how to run it;
`python -m dagster_incremental state show|reset ASSET`: an asset's cursor (dagster/state_cli.py).

Why: `python -m definitions` only works from the repository root (the folder holding
`definitions/` and `config/`); elsewhere Python says `No module named definitions`.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if argv[:1] == ["state"]:
        from dagster_incremental.dagster.state_cli import main as state_main

        return state_main(argv[1:])
    root = Path(__file__).resolve().parent.parent
    if not (root / "definitions" / "__main__.py").is_file():
        print("The example code location (definitions/) ships with the source repository, not the package.")
        return 1
    print(f"The example code location is {root / 'definitions'}. Run it from the repository root:\n"
          f"    cd {root} && python -m definitions\n"
          f"or from anywhere: PYTHONPATH={root} python -m definitions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
