"""Where a table's files are, read once per call: its folder when the catalog keeps it in local
files (an Iceberg Hadoop catalog on this machine's filesystem), its current metadata (from those
files, or from a catalog service's answer: a REST catalog, spark/iceberg/rest_catalog.py; a JDBC
catalog's database, spark/iceberg/sql_catalog.py), and its commit lock.

Why one object: a run asks several questions of a table before it commits (its cursor, whether
it exists, its row count) and takes its commit lock; each used to resolve the catalog conf and
read the metadata again. `TableFiles.find` resolves and reads once; None fields mean "only Spark
knows" (another catalog, or files not readable consistently).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dagster_incremental.spark.iceberg.rest_catalog import SPARK_CATALOG_CLASS, RestCatalogConf, load_metadata as load_rest_metadata
from dagster_incremental.spark.iceberg.sql_catalog import SqlCatalogConf, load_metadata as load_sql_metadata
from dagster_incremental.spark.iceberg.metadata import TableMetadata, read_metadata
from dagster_incremental.spark.commit_lock import table_commit_lock
from dagster_incremental.spark.table_ref import TableRef


@dataclass(frozen=True)
class TableFiles:
    """One table's files as found at one moment.

    location: the table's folder when its catalog keeps it in local files, else None.
    metadata: its current metadata (None: no table there, or not readable consistently).
    answered: a catalog that keeps no local folder (REST, JDBC) said what the table is: `metadata`,
      or no table. False with no location: ask Spark.
    """

    table: TableRef
    location: Path | None
    metadata: TableMetadata | None
    answered: bool = False

    @classmethod
    def find(cls, conf: Mapping[str, str], table: TableRef) -> TableFiles:
        parts = [*table.namespace, table.name]
        location = hadoop_table_location(conf, table.catalog, parts)
        if location is None:
            return cls(table, None, *_catalog_answer(conf, table.catalog, parts))
        if not (location / "metadata").is_dir():
            return cls(table, location, None)
        return cls(table, location, read_metadata(location))

    @property
    def readable(self) -> bool:
        """Whether these files answer for the table: a local folder that is either no table at
        all or one whose metadata was read whole, or a catalog's answer (else only Spark can say)."""
        if self.location is None:
            return self.answered
        return self.metadata is not None or not (self.location / "metadata").is_dir()

    @property
    def missing(self) -> bool:
        """Known here to be no table at all."""
        return self.readable and self.metadata is None

    def commit_lock(self) -> Any:
        """The table's cross-process commit lock when its catalog keeps it in local (or mounted)
        files; elsewhere the catalog's own commit is the only guard (see docs/concurrency-and-guarantees.md)."""
        if self.location is None:
            return contextlib.nullcontext()
        parts = [*self.table.namespace, self.table.name]
        return table_commit_lock(self.location.parents[len(parts) - 1], parts)


def _catalog_answer(conf: Mapping[str, str], catalog: str, parts: Sequence[str]) -> tuple[TableMetadata | None, bool]:
    """(metadata, answered) from a catalog service read without a JVM (REST, JDBC), else (None, False)."""
    rest = RestCatalogConf.of(conf, catalog)
    if rest is not None:
        answered, metadata = load_rest_metadata(rest, parts)
        return metadata, answered
    sql = SqlCatalogConf.of(conf, catalog)
    if sql is not None:
        answered, metadata = load_sql_metadata(sql, parts)
        return metadata, answered
    return None, False


# -- where the table lives -------------------------------------------------------------------------


def hadoop_table_location(conf: Mapping[str, str], catalog: str, table_parts: Sequence[str]) -> Path | None:
    """The table folder of `catalog`.`table_parts` when `conf` (spark.session_conf.spark_conf's flat
    dict) makes `catalog` an Iceberg Hadoop catalog on the local filesystem, else None.

    table_parts: [namespace..., table], unquoted. None also for names Hadoop would not map to
    one plain folder (a '/', ':' or '%' in a part, '.', '..'), and for settings that could point
    the catalog elsewhere (a custom catalog-impl or io-impl, a non-local warehouse) — in all
    those cases only Spark knows where the table is.
    """
    prefix = f"spark.sql.catalog.{catalog}"
    if conf.get(prefix) != SPARK_CATALOG_CLASS:
        return None
    if (conf.get(f"{prefix}.type") or "").lower() != "hadoop":
        return None
    if f"{prefix}.catalog-impl" in conf or f"{prefix}.io-impl" in conf:
        return None
    warehouse = _local_warehouse(conf, prefix)
    if warehouse is None or len(table_parts) < 2 or not all(_plain_part(p) for p in table_parts):
        return None
    return warehouse.joinpath(*table_parts)


def _local_warehouse(conf: Mapping[str, str], prefix: str) -> Path | None:
    """The warehouse as an absolute local path, or None when Hadoop might resolve it elsewhere."""
    value = conf.get(f"{prefix}.warehouse") or ""
    if not value or "%" in value:  # Hadoop quotes '%' rather than decoding it: not worth guessing
        return None
    if value.startswith("file:"):
        parts = urlsplit(value)
        if parts.netloc or parts.query or parts.fragment:
            return None
        value = parts.path
    elif "://" in value or _default_fs_overridden(conf, prefix):
        return None
    path = Path(value)
    return path if path.is_absolute() else None  # relative: resolved by the JVM's working dir


def _default_fs_overridden(conf: Mapping[str, str], prefix: str) -> bool:
    """A scheme-less warehouse lives on Hadoop's default filesystem, which may not be local."""
    keys = ("fs.defaultFS", "fs.default.name")
    values = [conf.get(f"spark.hadoop.{k}") for k in keys] + [conf.get(f"{prefix}.hadoop.{k}") for k in keys]
    if any(v and not v.startswith("file:") for v in values):
        return True
    # A Hadoop config folder may set fs.defaultFS in core-site.xml, which only the JVM reads.
    return bool(os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR"))


def _plain_part(part: str) -> bool:
    return bool(part) and part not in (".", "..") and not any(c in part for c in "/\\:%\x00")


# -- the commit lock -----------------------------------------------------------------------------
#
# One writer at a time per table, across processes: what makes a run's commit a compare-and-set.
#
# A run reads its cursor from the table's newest cursor-carrying snapshot, extracts, then commits.
# Iceberg alone cannot refuse a commit whose cursor is stale (an append is never in conflict), and
# a Hadoop catalog's metadata swap is a rename that a concurrent process can overwrite. So the
# check "the table still holds the snapshot this run read" and the commit run under one exclusive
# lock per table: no other process can commit in between, and the check is exact.
#
# The lock is a POSIX byte-range lock on one file at the warehouse root (a file, never a folder: a
# Hadoop catalog would list a folder as a namespace), one byte per table. fcntl locks belong to a
# process, so threads of one process also take an in-process lock per table, and the file stays open
# for the life of the process (closing any descriptor of a file drops all the process's locks on it).


