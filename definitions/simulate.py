"""Create and move the example sources by hand, to watch the assets and sensors react.

    python -m definitions.simulate init      [--data-dir data/sources]   # shop db + 14 days of files
    python -m definitions.simulate step      [--data-dir data/sources]   # one round of changes
    python -m definitions.simulate serve-api [--port 8765]               # events API, foreground

The data dir defaults to $DAGSTER_INCREMENTAL_EXAMPLE_DATA, else <repo>/data/sources
(git-ignored); the assets read the same place through `definitions.sources.data_dir()`.
"""

from __future__ import annotations

import argparse
import shutil
from datetime import timedelta

from definitions.sources import data_dir, event_files, events_api, events_root, shop_db, shop_db_path, utc_now

DAYS = 14


def cmd_init(args: argparse.Namespace) -> None:
    """A fresh shop whose 14-day history ends now, and 14 days of event files ending today."""
    now = utc_now()
    db = shop_db.create_shop(shop_db_path(args.data_dir), orders=args.orders, customers=args.customers,
                             seed=args.seed, start=now - timedelta(days=DAYS))
    print(f"shop db {db}: {args.orders} orders, {args.customers} customers, "
          f"newest change {shop_db.high_water_mark(db)}")

    root = events_root(args.data_dir)
    if root.is_dir():  # a fresh start: drop day folders of an earlier init (only our layout)
        for old in root.glob("dt=*"):
            if old.is_dir():
                shutil.rmtree(old)
    first = now.date() - timedelta(days=DAYS - 1)
    paths = event_files.write_event_days(root, first, DAYS, per_day=args.per_day, seed=args.seed, now=now)
    rows = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in paths)
    print(f"event files {root}: {len(paths)} days {first}..{now.date()}, {rows} events")


def cmd_step(args: argparse.Namespace) -> None:
    """One round of source changes: shop db rows change, today's event file is corrected and grows."""
    db = shop_db_path(args.data_dir)
    state = shop_db.shop_state(db)
    # Each step gets its own seed, reproducible from the db's step counter.
    seed = args.seed if args.seed is not None else int(state["seed"]) * 1000 + int(state["steps"]) + 1
    result = shop_db.simulate_step(db, seed=seed)
    print(f"shop db step {int(state['steps']) + 1} (seed {seed}): {result.summary()}")

    root = events_root(args.data_dir)
    now = utc_now()
    today = now.date()
    if not event_files.day_path(root, today).exists():
        event_files.write_event_days(root, today, 1, per_day=args.per_day, seed=int(state["seed"]), now=now)
    changes = event_files.mutate_day(root, today, seed=seed, remove=0.05, change=0.05,
                                     add=max(1, args.per_day // 10), now=now)
    print(f"event file {event_files.day_path(root, today)}: {len(changes['removed'])} removed, "
          f"{len(changes['changed'])} changed, {len(changes['added'])} added")


def cmd_serve_api(args: argparse.Namespace) -> None:
    """The events API in the foreground (Ctrl-C stops it)."""
    events_api.run_forever(args)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m definitions.simulate",
                                     description="Create and move the example data sources.")
    commands = parser.add_subparsers(dest="command", required=True)

    init = commands.add_parser("init", help="create the shop db and 14 days of event files")
    init.add_argument("--data-dir", default=None, help=f"default: {data_dir()}")
    init.add_argument("--seed", type=int, default=7)
    init.add_argument("--orders", type=int, default=200)
    init.add_argument("--customers", type=int, default=50)
    init.add_argument("--per-day", type=int, default=100, help="events per day file")
    init.set_defaults(func=cmd_init)

    step = commands.add_parser("step", help="change the shop db and today's event file once")
    step.add_argument("--data-dir", default=None, help=f"default: {data_dir()}")
    step.add_argument("--seed", type=int, default=None, help="default: derived from the step counter")
    step.add_argument("--per-day", type=int, default=100, help="as given to init")
    step.set_defaults(func=cmd_step)

    serve = commands.add_parser("serve-api", help="run the events API on loopback in the foreground")
    events_api.add_serve_arguments(serve)
    serve.set_defaults(func=cmd_serve_api)

    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"{parser.prog} {args.command}: {exc}") from None


if __name__ == "__main__":
    main()
