"""An Iceberg JDBC catalog's tables read and committed by pyiceberg, without a JVM.

Why: a run reads its table's cursor before it decides to write anything, and a small change run
needs no Spark session at all (spark/iceberg/local/python_write.py). Iceberg's Java `JdbcCatalog` keeps
one row per table in its database (`iceberg_tables`: catalog name, namespace, table name,
metadata location), and pyiceberg's `SqlCatalog` reads and updates the same rows: a commit is a
conditional UPDATE of the metadata location, as the Java catalog's is, so the two take turns
exactly. The catalog's Spark conf is read here (`spark.sql.catalog.<name>.type = jdbc`, `.uri`,
`.jdbc.user`, `.jdbc.password`, `.warehouse`, and the S3FileIO keys) and turned into pyiceberg's.

Databases read here: PostgreSQL (`jdbc:postgresql://host[:port]/database`, through psycopg2)
and SQLite (`jdbc:sqlite:/absolute/path`). Anything else (another database, JDBC options that
have no libpq spelling, a driver or SQLAlchemy that is not installed) is None: "ask Spark".
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from dagster_incremental.spark.iceberg.rest_catalog import SPARK_CATALOG_CLASS
from dagster_incremental.spark.iceberg.metadata import TableMetadata, pyiceberg_metadata
from dagster_incremental.spark.iceberg.storage import pyiceberg_io_properties

# JDBC URL options that libpq spells the same way (anything else: ask Spark)
_SAME_IN_LIBPQ = ("sslmode", "application_name", "connect_timeout")
_catalogs: dict[tuple[str, str, tuple[tuple[str, str], ...]], Any] = {}
_catalogs_lock = threading.Lock()


@dataclass(frozen=True)
class SqlCatalogConf:
    """The settings of one JDBC catalog that pyiceberg's SqlCatalog needs."""

    name: str
    uri: str = field(repr=False)  # SQLAlchemy's URL; may hold the password: never in a repr
    warehouse: str
    io_properties: Mapping[str, str] = field(repr=False)

    @classmethod
    def of(cls, conf: Mapping[str, str], catalog: str) -> SqlCatalogConf | None:
        """The catalog's settings when `conf` (Spark's flat conf) makes it an Iceberg JDBC
        catalog on a database read here, with pyiceberg's SQL support installed; else None."""
        key = f"spark.sql.catalog.{catalog}"
        if conf.get(key) != SPARK_CATALOG_CLASS or (conf.get(f"{key}.type") or "").lower() != "jdbc":
            return None
        warehouse = conf.get(f"{key}.warehouse") or ""
        uri = sqlalchemy_uri(conf.get(f"{key}.uri") or "", conf.get(f"{key}.jdbc.user"), conf.get(f"{key}.jdbc.password"))
        io = pyiceberg_io_properties(conf, catalog, warehouse) if warehouse else None
        if uri is None or io is None or importlib.util.find_spec("sqlalchemy") is None:
            return None
        return cls(name=catalog, uri=uri, warehouse=warehouse, io_properties=io)


def sqlalchemy_uri(jdbc_uri: str, user: str | None, password: str | None) -> str | None:
    """The SQLAlchemy URL of a JDBC URL (None: not one read here)."""
    if jdbc_uri.startswith("jdbc:sqlite:"):
        path = jdbc_uri[len("jdbc:sqlite:"):].removeprefix("file:")
        if not path.startswith("/") or "?" in path:
            return None
        return f"sqlite:///{path}"
    if not jdbc_uri.startswith("jdbc:postgresql://") or importlib.util.find_spec("psycopg2") is None:
        return None
    parts = urlsplit(jdbc_uri[len("jdbc:"):])
    options = dict(parse_qsl(parts.query))
    user = options.pop("user", None) or user
    password = options.pop("password", None) or password
    if any(name not in _SAME_IN_LIBPQ for name in options) or not parts.hostname or not parts.path.strip("/"):
        return None
    login = quote(user or "", safe="") + (f":{quote(password, safe='')}" if password else "")
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in options.items())
    return f"postgresql+psycopg2://{login}{'@' if login else ''}{parts.netloc.rpartition('@')[2]}{parts.path}" + (f"?{query}" if query else "")


def pyiceberg_catalog(conf: SqlCatalogConf) -> Any:
    """pyiceberg's SqlCatalog on the catalog's database (one per process and settings: its
    connection pool is reused by every table of the catalog)."""
    key = (conf.name, conf.uri, tuple(sorted(conf.io_properties.items())))
    with _catalogs_lock:
        found = _catalogs.get(key)
        if found is None:
            found = _new_catalog(conf)
            # SqlCatalog reads the catalog tables' schema version once, when made: one made
            # before the JVM created those tables would assume the wrong one, so it is not kept.
            with found.engine.connect() as connection:
                if found.engine.dialect.has_table(connection, "iceberg_tables"):
                    _catalogs[key] = found
        return found


def _new_catalog(conf: SqlCatalogConf) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    quiet = logging.getLogger("pyiceberg.catalog.sql")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "detected a v0 schema": the JVM's JdbcCatalog made it so, nothing to do
    try:
        # the catalog's tables are the JVM's to create and to migrate
        return SqlCatalog(conf.name, uri=conf.uri, warehouse=conf.warehouse, init_catalog_tables="false",
                          **conf.io_properties)
    finally:
        quiet.setLevel(level)


def load_table(conf: SqlCatalogConf, table_parts: Sequence[str]) -> tuple[bool, Any]:
    """(known, table): pyiceberg's table (True, it), no such table (True, None), or no answer
    read here (False, None): the database unreachable, its catalog tables not there yet."""
    if len(table_parts) < 2:
        return False, None
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return True, pyiceberg_catalog(conf).load_table(tuple(table_parts))
    except NoSuchTableError:
        return True, None
    except Exception:  # noqa: BLE001 - any failure here means "ask Spark", which reports it
        return False, None


def load_metadata(conf: SqlCatalogConf, table_parts: Sequence[str]) -> tuple[bool, TableMetadata | None]:
    """(known, metadata) as rest_catalog.load_metadata answers it, from the catalog's database."""
    known, table = load_table(conf, table_parts)
    if table is None:
        return known, None
    return True, pyiceberg_metadata(table)
