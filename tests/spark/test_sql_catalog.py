"""A JDBC catalog's settings as pyiceberg's SqlCatalog takes them (spark/iceberg/sql_catalog.py), and a
SQLite catalog database that the JVM's JdbcCatalog layout and pyiceberg share: what is read
without a JVM, and what is left to Spark."""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest

from dagster_incremental.spark.iceberg.sql_catalog import SqlCatalogConf, load_metadata, sqlalchemy_uri

PREFIX = "spark.sql.catalog.lake"
BASE = {PREFIX: "org.apache.iceberg.spark.SparkCatalog", f"{PREFIX}.type": "jdbc"}


@pytest.mark.parametrize("jdbc, user, password, expected", [
    ("jdbc:postgresql://db.example.com:5432/iceberg", "ice", "s3cr@t/", "postgresql+psycopg2://ice:s3cr%40t%2F@db.example.com:5432/iceberg"),
    ("jdbc:postgresql://db:5432/iceberg?user=a&password=b&sslmode=require", None, None, "postgresql+psycopg2://a:b@db:5432/iceberg?sslmode=require"),
    ("jdbc:postgresql://127.0.0.1:5432/iceberg", "postgres", "", "postgresql+psycopg2://postgres@127.0.0.1:5432/iceberg"),
    ("jdbc:sqlite:/var/lib/catalog.db", None, None, "sqlite:////var/lib/catalog.db"),
    ("jdbc:sqlite:file:/var/lib/catalog.db", None, None, "sqlite:////var/lib/catalog.db"),
    # what only the JVM's driver would read as the user means: left to Spark
    ("jdbc:sqlite:catalog.db", None, None, None),
    ("jdbc:sqlite::memory:", None, None, None),
    ("jdbc:postgresql://db:5432/iceberg?ssl=true", None, None, None),
    ("jdbc:postgresql://db:5432/", None, None, None),
    ("jdbc:mysql://db:3306/iceberg", None, None, None),
])
def test_a_jdbc_url_becomes_sqlalchemys_or_is_left_to_spark(jdbc, user, password, expected):
    assert sqlalchemy_uri(jdbc, user, password) == expected


@pytest.mark.parametrize("extra, read_here", [
    ({}, True),
    ({f"{PREFIX}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO"}, True),
    ({f"{PREFIX}.io-impl": "com.example.CustomFileIO"}, False),
    ({f"{PREFIX}.warehouse": "s3://bucket/wh"}, False),  # S3 without S3FileIO: Hadoop's S3A, the JVM's
    ({f"{PREFIX}.warehouse": "s3://bucket/wh", f"{PREFIX}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO"}, True),
    ({f"{PREFIX}.type": "hadoop"}, False),
    ({f"{PREFIX}.uri": "jdbc:mysql://db/iceberg"}, False),
])
def test_only_catalogs_pyiceberg_reaches_as_the_jvm_does_are_read_here(tmp_path, extra, read_here):
    conf = {**BASE, f"{PREFIX}.uri": f"jdbc:sqlite:{tmp_path}/c.db", f"{PREFIX}.warehouse": str(tmp_path), **extra}
    assert (SqlCatalogConf.of(conf, "lake") is not None) is read_here


def test_the_password_never_shows_in_the_settings_repr(tmp_path):
    conf = {**BASE, f"{PREFIX}.uri": "jdbc:postgresql://db:5432/iceberg", f"{PREFIX}.jdbc.password": "hunter2",
            f"{PREFIX}.warehouse": str(tmp_path)}
    found = SqlCatalogConf.of(conf, "lake")
    assert found is not None and "hunter2" not in repr(found)


def test_a_sqlite_catalog_is_read_without_a_jvm_and_a_missing_table_is_known(tmp_path):
    """The JVM's JdbcCatalog tables (v0 layout, no `iceberg_type`) in a SQLite file: a table
    pyiceberg registered there is read with its snapshot; an absent one is "no table", and a
    database with no catalog tables yet is "ask Spark" (and not remembered as such)."""
    from pyiceberg.catalog.sql import SqlCatalog

    database = tmp_path / "catalog.db"
    conf = SqlCatalogConf.of({**BASE, f"{PREFIX}.uri": f"jdbc:sqlite:{database}", f"{PREFIX}.warehouse": str(tmp_path)}, "lake")
    assert conf is not None
    assert load_metadata(conf, ("ns", "t")) == (False, None)  # no catalog tables yet: only the JVM knows
    with sqlite3.connect(database) as db:  # the JVM's JdbcCatalog v0 schema
        db.execute("CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL, "
                   "table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), "
                   "PRIMARY KEY (catalog_name, table_namespace, table_name))")
        db.execute("CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) NOT NULL, "
                   "property_key VARCHAR(255), property_value VARCHAR(1000), PRIMARY KEY (catalog_name, namespace, property_key))")
    writer = SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=f"file://{tmp_path}", init_catalog_tables="false")
    writer.create_namespace("ns")
    table = writer.create_table(("ns", "t"), schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    known, metadata = load_metadata(conf, ("ns", "t"))
    assert known and metadata is not None
    assert metadata.current_snapshot_id() == table.refresh().metadata.current_snapshot_id
    assert metadata.row_count() == 2
    assert load_metadata(conf, ("ns", "absent")) == (True, None)
