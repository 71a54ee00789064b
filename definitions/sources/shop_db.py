"""A small SQLite shop database that changes like a production OLTP database does.

Why it exists: the example assets need a source whose rows are inserted, updated,
soft-deleted (`orders.is_deleted`) and hard-deleted (a `customers` row vanishes), with an
`updated_at` column that only moves forward: the classic cursor-based incremental load
(`updated_at >= last_value`) into merge/upsert tables, and a full-snapshot scd2 table.

Timestamps are stored as canonical UTC text, `2024-03-01T10:15:00Z` (whole seconds, fixed
width), so SQL's text comparison orders them exactly as instants; the readers accept ISO
strings with any offset or datetimes and convert the bounds to that form first.

The simulated clock lives in the `meta` table, so steps run from separate processes (a CLI,
a test, a Dagster run) keep every new timestamp later than every earlier one.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from definitions.sources import TimeLike, iso_utc, iso_utc_ceil, to_utc, utc_now

__all__ = [
    "StepResult",
    "create_shop",
    "fetch_customers",
    "fetch_orders",
    "high_water_mark",
    "shop_state",
    "simulate_step",
]

_SCHEMA = """
CREATE TABLE customers (
    customer_id INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    email       TEXT NOT NULL,
    country     TEXT NOT NULL,
    tier        TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE TABLE orders (
    id          INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL,
    status      TEXT NOT NULL,
    amount      REAL NOT NULL,
    currency    TEXT NOT NULL,
    is_deleted  INTEGER NOT NULL DEFAULT 0 CHECK (is_deleted IN (0, 1)),
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
-- The incremental read is "WHERE updated_at >= ? AND updated_at < ? ORDER BY updated_at, id".
CREATE INDEX orders_updated_at ON orders (updated_at, id);
CREATE INDEX customers_updated_at ON customers (updated_at);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_FIRST = ["Ada", "Ben", "Chloe", "Dev", "Elif", "Farah", "Gus", "Hana", "Ivan", "Jun", "Kofi",
          "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Uma", "Yusuf"]
_LAST = ["Okafor", "Schmidt", "Rossi", "Nakamura", "Silva", "Kowalski", "Haddad", "Larsen",
         "Dubois", "Novak", "Moreau", "Fischer", "Costa", "Ivanova", "Mensah", "Patel"]
_COUNTRIES = ["DE", "FR", "NL", "ES", "IT", "PL", "SE", "GB", "US", "BR"]
_CURRENCY = {"GB": "GBP", "US": "USD", "BR": "BRL", "PL": "PLN", "SE": "SEK"}  # else EUR
_TIERS = ["bronze", "silver", "gold"]
_TIER_WEIGHTS = [70, 22, 8]
_MAIL_DOMAINS = ["example.com", "example.org", "example.net"]
# Where an order may go next: the lifecycle that drives updates.
_NEXT_STATUS = {
    "pending": ["paid", "paid", "paid", "cancelled"],
    "paid": ["shipped", "shipped", "shipped", "refunded"],
    "shipped": ["delivered", "delivered", "delivered", "refunded"],
    "delivered": ["refunded"],
    "cancelled": [],
    "refunded": [],
}
_TABLES = {"orders": "orders", "customers": "customers"}  # the only names that reach SQL text
_SEED_SPAN = timedelta(days=14)  # how much history create_shop invents after `start`
_STEP_SPREAD = timedelta(hours=1)  # a step's changes happen within this long before `now`


@dataclass(frozen=True)
class StepResult:
    """What one `simulate_step` changed: tests assert on it, the CLI prints `summary()`."""

    now: str
    inserted: list[int] = field(default_factory=list)
    updated: list[int] = field(default_factory=list)
    soft_deleted: list[int] = field(default_factory=list)
    customers_inserted: list[int] = field(default_factory=list)
    customers_updated: list[int] = field(default_factory=list)
    customers_deleted: list[int] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"clock {self.now}: orders +{len(self.inserted)} new, {len(self.updated)} updated, "
            f"{len(self.soft_deleted)} soft-deleted; customers +{len(self.customers_inserted)} new, "
            f"{len(self.customers_updated)} changed, {len(self.customers_deleted)} deleted"
        )


# ---------------------------------------------------------------------------------- writing


def create_shop(
    path: str | Path,
    *,
    orders: int = 200,
    customers: int = 50,
    seed: int = 7,
    start: TimeLike = "2024-01-01T00:00:00Z",
) -> Path:
    """Create (or recreate) the shop database at `path` with `seed`-determined history.

    Orders are spread over the 14 days after `start`, some already moved along their
    lifecycle (so `updated_at > created_at`) and a few soft-deleted; the clock is left at
    `start + 14 days`. An existing file at `path` is replaced: `init` means a fresh shop.
    """
    if orders < 0 or customers < 1:
        raise ValueError(f"create_shop needs orders >= 0 and customers >= 1, got {orders=}, {customers=}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)

    rng = random.Random(seed)
    t0 = to_utc(start).replace(microsecond=0)
    span = int(_SEED_SPAN.total_seconds())

    customer_rows = [_new_customer(rng, cid, iso_utc(t0 + timedelta(seconds=rng.randrange(3600))))
                     for cid in range(1, customers + 1)]
    countries = {c[0]: c[3] for c in customer_rows}

    order_rows = []
    for oid, offset in enumerate(sorted(rng.randrange(span) for _ in range(orders)), start=1):
        created = t0 + timedelta(seconds=offset)
        customer_id = rng.randrange(1, customers + 1)
        status, updated = "pending", created
        # Older orders have had more time to move along: walk the lifecycle a few steps.
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            choices = _NEXT_STATUS[status]
            nxt = updated + timedelta(seconds=rng.randrange(600, 2 * 86400))
            if not choices or nxt >= t0 + _SEED_SPAN:
                break
            status, updated = rng.choice(choices), nxt
        is_deleted = int(rng.random() < 0.03)
        order_rows.append((
            oid, customer_id, status, _amount(rng), _CURRENCY.get(countries[customer_id], "EUR"),
            is_deleted, iso_utc(created), iso_utc(updated),
        ))

    clock = t0 + _SEED_SPAN
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode=WAL")  # asset runs read while the simulator writes
        con.executescript(_SCHEMA)
    finally:
        con.close()
    with _write(path) as con:
        con.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?)", customer_rows)
        con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?)", order_rows)
        con.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("clock", iso_utc(clock)), ("seed", str(seed)), ("steps", "0")],
        )
    return path


def simulate_step(
    path: str | Path,
    *,
    seed: int,
    now: TimeLike | None = None,
    inserts: int = 20,
    updates: int = 15,
    deletes: int = 3,
    customer_updates: int = 3,
    customer_inserts: int = 1,
    customer_deletes: int | None = None,
) -> StepResult:
    """Apply one batch of realistic changes, all stamped later than anything already stored.

    - `inserts` new orders; `updates` orders move along their lifecycle (status, sometimes
      the amount); `deletes` orders are soft-deleted (`is_deleted = 1`).
    - `customer_updates` customers change tier, country or email; `customer_inserts` sign up;
      `customer_deletes` rows are deleted for real (default: one, in about a third of the
      steps), so a full-snapshot scd2 load sees a key disappear.

    `now` defaults to the wall clock, but never earlier than one second after the stored
    clock; an explicit `now` that is not after the stored clock is an error (timestamps only
    move forward). Each change gets its own time in `(max(clock, now - 1h), now]`.
    The same database state, `seed` and `now` always give the same changes.
    """
    counts = {"inserts": inserts, "updates": updates, "deletes": deletes,
              "customer_updates": customer_updates, "customer_inserts": customer_inserts,
              "customer_deletes": 0 if customer_deletes is None else customer_deletes}
    if negative := {k: v for k, v in counts.items() if v < 0}:
        raise ValueError(f"simulate_step: counts must be >= 0, got {negative}")
    rng = random.Random(seed)
    path = _existing(path)
    with _write(path) as con:  # the write lock is taken before the clock is read
        clock = to_utc(_meta(con, "clock"))
        if now is None:
            step_now = max(utc_now(), clock + timedelta(seconds=1))
        else:
            step_now = to_utc(now).replace(microsecond=0)
            if step_now <= clock:
                raise ValueError(
                    f"simulate_step(now={iso_utc(step_now)}) is not after the shop's clock "
                    f"{iso_utc(clock)} in {path}: timestamps only move forward; pass a later "
                    f"`now` or leave it out"
                )
        lo = max(clock, step_now - _STEP_SPREAD)
        width = int((step_now - lo).total_seconds())

        def stamp() -> str:  # a moment in (lo, now]
            return iso_utc(lo + timedelta(seconds=rng.randint(1, width)))

        result = StepResult(now=iso_utc(step_now))

        # --- customers: sign-ups, changes, erasures
        max_cid = con.execute("SELECT coalesce(max(customer_id), 0) FROM customers").fetchone()[0]
        # Keep ids growing even after the newest customer was deleted.
        max_cid = max(max_cid, int(_meta(con, "max_customer_id", "0")))
        new_customers = [_new_customer(rng, max_cid + i, stamp()) for i in range(1, customer_inserts + 1)]
        con.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?)", new_customers)
        result.customers_inserted.extend(row[0] for row in new_customers)

        cids = [r[0] for r in con.execute("SELECT customer_id FROM customers ORDER BY customer_id")]
        old_cids = [c for c in cids if c <= max_cid]
        for cid in sorted(rng.sample(old_cids, min(customer_updates, len(old_cids)))):
            name, email, country, tier = con.execute(
                "SELECT name, email, country, tier FROM customers WHERE customer_id = ?", (cid,)
            ).fetchone()
            what = rng.choice(["tier", "tier", "country", "email"])
            if what == "tier":
                tier = rng.choice([t for t in _TIERS if t != tier])
            elif what == "country":
                country = rng.choice([c for c in _COUNTRIES if c != country])
            else:
                email = _email(rng, name, new=True)
            con.execute(
                "UPDATE customers SET email = ?, country = ?, tier = ?, updated_at = ? WHERE customer_id = ?",
                (email, country, tier, stamp(), cid),
            )
            result.customers_updated.append(cid)

        n_erase = (1 if rng.random() < 0.34 else 0) if customer_deletes is None else customer_deletes
        # Keep at least one customer, and never erase one changed in this very step.
        changed = set(result.customers_updated)
        erasable = [c for c in old_cids if c not in changed]
        erase = sorted(rng.sample(erasable, min(n_erase, len(erasable), len(cids) - 1)))
        con.executemany("DELETE FROM customers WHERE customer_id = ?", [(c,) for c in erase])
        result.customers_deleted.extend(erase)

        # --- orders: new ones, lifecycle moves, soft deletes
        erased = set(erase)
        live_cids = [c for c in cids if c not in erased]
        country_of = dict(con.execute("SELECT customer_id, country FROM customers"))
        max_id = con.execute("SELECT coalesce(max(id), 0) FROM orders").fetchone()[0]
        new_orders = []
        for oid in range(max_id + 1, max_id + 1 + inserts):
            cid = rng.choice(live_cids)
            ts = stamp()
            new_orders.append((oid, cid, "pending", _amount(rng),
                               _CURRENCY.get(country_of[cid], "EUR"), 0, ts, ts))
        con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?)", new_orders)
        result.inserted.extend(row[0] for row in new_orders)

        movable = con.execute(
            "SELECT id, status, amount FROM orders WHERE is_deleted = 0 AND id <= ? "
            "AND status IN ('pending', 'paid', 'shipped', 'delivered') ORDER BY id",
            (max_id,),
        ).fetchall()
        for oid, status, amount in sorted(rng.sample(movable, min(updates, len(movable)))):
            status = rng.choice(_NEXT_STATUS[status])
            if status == "paid" and rng.random() < 0.2:  # a voucher applied at payment
                amount = round(amount * 0.9, 2)
            con.execute("UPDATE orders SET status = ?, amount = ?, updated_at = ? WHERE id = ?",
                        (status, amount, stamp(), oid))
            result.updated.append(oid)

        moved = set(result.updated)
        deletable = [r[0] for r in con.execute(
            "SELECT id FROM orders WHERE is_deleted = 0 AND id <= ? ORDER BY id", (max_id,)
        ) if r[0] not in moved]
        soft = sorted(rng.sample(deletable, min(deletes, len(deletable))))
        con.executemany("UPDATE orders SET is_deleted = 1, updated_at = ? WHERE id = ?",
                        [(stamp(), oid) for oid in soft])
        result.soft_deleted.extend(soft)

        steps = int(_meta(con, "steps", "0")) + 1
        con.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [("clock", iso_utc(step_now)), ("steps", str(steps)),
             ("max_customer_id", str(max_cid + len(new_customers)))],
        )
    return result


# ---------------------------------------------------------------------------------- reading


def fetch_orders(
    path: str | Path,
    since: TimeLike | None = None,
    until: TimeLike | None = None,
    page_size: int = 500,
) -> Iterator[list[dict]]:
    """Yield pages of orders with `since <= updated_at < until`, ordered by `(updated_at, id)`.

    Half-open like the engine's windows (`range_start="closed"`, `range_end="open"`), so
    adjacent windows never share a row. Lazy: one page is read from SQLite per `next()`, so a
    consumer that stops early stops the query. `is_deleted` comes back as a Python bool so
    that a `hard_delete` column hint reads `False` as "keep" (a plain 0 is a non-null value).
    """
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    path = _existing(path)
    where, params = [], []
    if since is not None:
        where.append("updated_at >= ?")
        params.append(iso_utc_ceil(since))
    if until is not None:
        where.append("updated_at < ?")
        params.append(iso_utc_ceil(until))
    sql = (
        "SELECT id, customer_id, status, amount, currency, is_deleted, created_at, updated_at "
        "FROM orders" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY updated_at, id"
    )
    return _pages(path, sql, params, page_size)


def _pages(path: Path, sql: str, params: list[str], page_size: int) -> Iterator[list[dict]]:
    with _read(path) as con:
        cur = con.execute(sql, params)
        columns = [d[0] for d in cur.description]
        while rows := cur.fetchmany(page_size):
            page = [dict(zip(columns, row)) for row in rows]
            for row in page:
                row["is_deleted"] = bool(row["is_deleted"])
            yield page


def fetch_customers(path: str | Path) -> list[dict]:
    """The full customers table (the snapshot an scd2 asset compares), ordered by key."""
    with _read(_existing(path)) as con:
        cur = con.execute(
            "SELECT customer_id, name, email, country, tier, updated_at FROM customers ORDER BY customer_id"
        )
        columns = [d[0] for d in cur.description]
        return [dict(zip(columns, row)) for row in cur.fetchall()]


def high_water_mark(path: str | Path, table: str = "orders") -> str | None:
    """`max(updated_at)` of `table` (None when empty): a one-index-lookup probe for a sensor."""
    if table not in _TABLES:
        raise ValueError(f"high_water_mark: unknown table {table!r}; choose one of {sorted(_TABLES)}")
    with _read(_existing(path)) as con:
        return con.execute(f"SELECT max(updated_at) FROM {_TABLES[table]}").fetchone()[0]


def shop_state(path: str | Path) -> dict[str, str]:
    """The `meta` table (`clock`, `seed`, `steps`): lets a CLI derive the next step's seed."""
    with _read(_existing(path)) as con:
        return dict(con.execute("SELECT key, value FROM meta"))


# ---------------------------------------------------------------------------------- helpers


@contextmanager
def _write(path: Path) -> Iterator[sqlite3.Connection]:
    """One write transaction (taken at once: BEGIN IMMEDIATE), committed on success, then closed.

    `timeout` makes a writer wait for a reader's lock instead of failing at once.
    """
    con = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        yield con
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise
    finally:
        con.close()


@contextmanager
def _read(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection: it can neither write nor create an empty database at a wrong path."""
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        yield con
    finally:
        con.close()


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no shop database at {path}: create it with definitions.sources.shop_db.create_shop"
            f"(path) or `python -m definitions.simulate init`"
        )
    return path


def _meta(con: sqlite3.Connection, key: str, default: str | None = None) -> str:
    row = con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    if row is None:
        if default is None:
            raise ValueError(f"the shop database has no meta.{key}: recreate it with create_shop")
        return default
    return row[0]


def _new_customer(rng: random.Random, customer_id: int, updated_at: str) -> tuple:
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    country = rng.choice(_COUNTRIES)
    tier = rng.choices(_TIERS, _TIER_WEIGHTS)[0]
    return (customer_id, name, _email(rng, name), country, tier, updated_at)


def _email(rng: random.Random, name: str, new: bool = False) -> str:
    first, last = name.lower().split(" ")
    local = f"{first}.{last}" if not new else f"{first[0]}{last}{rng.randrange(10, 99)}"
    return f"{local}@{rng.choice(_MAIL_DOMAINS)}"


def _amount(rng: random.Random) -> float:
    """Order totals: mostly small, a long tail of large baskets."""
    return round(min(rng.lognormvariate(3.6, 0.7), 2500.0), 2)
