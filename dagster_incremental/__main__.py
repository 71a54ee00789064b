"""`python -m dagster_incremental`: the library's commands (`--help` lists them).

- `state show|reset ASSET`: an asset's cursor (dagster/state_cli.py);
- `example` (also with no command): where the example code location is and how to run it. Why:
  `python -m definitions` only works from the repository root (the folder holding
  `definitions/` and `config/`); elsewhere Python says `No module named definitions`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

COMMANDS = (
    ("state show ASSET", "print the cursor Dagster holds, the table holds, and the one the next run continues from"),
    ("state reset ASSET", "rewind or seed an asset's cursor (to initial_value, or --to VALUE)"),
    ("example", "where the example code location is and the command that runs it (the default)"),
)


def main(argv: list[str]) -> int:
    if argv[:1] == ["state"]:
        from dagster_incremental.dagster.state_cli import main as state_main

        return state_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command in (None, "example"):
        return _example()
    parser.print_help()  # pragma: no cover - `state` is handled above, argparse refuses the rest
    return 2


def _parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:<20} {text}" for name, text in COMMANDS)
    parser = argparse.ArgumentParser(
        prog="python -m dagster_incremental", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Incremental loading for Dagster assets on Spark: the library's commands.",
        epilog=f"commands:\n{listing}\n\n`python -m dagster_incremental state --help` for the state commands' options.",
    )
    parser.add_argument("command", nargs="?", choices=["state", "example"], metavar="COMMAND",
                        help="state or example (see below); none: example")
    return parser


def _example() -> int:
    root = Path(__file__).resolve().parent.parent
    if not (root / "definitions" / "__main__.py").is_file():
        print("The example code location (definitions/) ships with the source repository, not the package.")
        return 1
    print(f"The example code location is {root / 'definitions'}. Run it from the repository root:\n"
          f"    cd {root} && python -m definitions\n"
          f"or from anywhere: PYTHONPATH={root} python -m definitions\n\n"
          "Other commands: python -m dagster_incremental --help")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
