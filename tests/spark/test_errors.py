"""Spark and Iceberg failures are recognised by their error class, not by message text."""

from __future__ import annotations

import warnings

import pytest

from dagster_incremental.spark import errors
from dagster_incremental.spark.table_ref import TableRef

pytestmark = pytest.mark.spark


def caught(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def test_a_missing_table_is_not_found_by_class(spark):
    missing = TableRef("lake", ("errors",), "no_such_table")
    for read in (lambda: spark.table(missing.sql), lambda: spark.sql(f"SELECT * FROM {missing}").collect()):
        error = caught(read)
        with warnings.catch_warnings():  # nothing in a run's log (PySpark 4's getErrorClass warns)
            warnings.simplefilter("error")
            assert errors.TABLE_NOT_FOUND in errors.error_classes(error)
        assert errors.is_table_not_found(error)
        assert not errors.is_table_already_exists(error) and not errors.is_commit_conflict(error)


def test_an_existing_table_is_already_there_by_class(spark):
    table = TableRef("lake", ("errors",), "exists")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.namespace_sql}")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {table} (id bigint) USING iceberg")
    error = caught(lambda: spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg"))
    assert errors.is_table_already_exists(error) and not errors.is_table_not_found(error)


def test_an_iceberg_conflict_is_a_commit_conflict_by_java_class(spark):
    table = TableRef("lake", ("errors",), "raced")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.namespace_sql}")
    spark.sql(f"CREATE OR REPLACE TABLE {table} (id bigint) USING iceberg")
    iceberg = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table.sql)
    overwrite = iceberg.newOverwrite()
    overwrite.conflictDetectionFilter(spark._jvm.org.apache.iceberg.expressions.Expressions.alwaysTrue())
    overwrite.validateNoConflictingData()
    spark.sql(f"INSERT INTO {table} VALUES (1)")  # another writer lands first
    error = caught(overwrite.commit)
    assert "org.apache.iceberg.exceptions.ValidationException" in errors.java_classes(error)
    assert errors.is_commit_conflict(error)


def test_a_statements_own_raise_error_is_recognised(spark):
    marker = "dagster_incremental: test marker"
    error = caught(lambda: spark.sql("SELECT raise_error(:m)", args={"m": marker}).collect())
    assert errors.raised_by_sql(error, marker)
    assert not errors.raised_by_sql(error, marker + " (another)")
    assert not errors.raised_by_sql(caught(lambda: spark.table("lake.errors.nope")), marker)
    assert errors.error_classes(KeyError("x")) == set() and not errors.is_commit_conflict(KeyError("x"))


LAKE = errors.Storage("lake", "hadoop", "/tmp/warehouse", "this warehouse")


def test_a_missing_table_or_a_python_error_is_no_storage_problem(spark):
    """Only storage and catalog failures get the storage advice: a missing table (a planning
    error) and an error without a JVM behind it are left as they are."""
    missing = caught(lambda: spark.table(TableRef("lake", ("errors",), "no_such_table").sql))
    assert errors.storage_problem(missing, LAKE) is None
    assert errors.storage_problem(ValueError("no JVM behind it"), LAKE) is None


def test_a_java_error_is_told_as_itself_when_the_aws_sdk_is_not_on_the_classpath(spark, monkeypatch):
    """A session without Iceberg's AWS bundle (the embedded default) has no S3Exception class:
    asking whether an error is one must answer no, not raise a ClassNotFoundException that
    would stand in for the run's own error."""
    monkeypatch.setattr(errors, "S3_ANSWER", "software.amazon.awssdk.services.s3.model.NotOnTheClasspath")
    failed = caught(lambda: spark._jvm.java.lang.Integer.parseInt("not a number"))
    assert errors.storage_problem(failed, LAKE) is None


def test_a_jdbc_catalog_create_that_lost_to_another_creator_is_an_existing_table(spark):
    """Iceberg's JDBC catalog reports a create that another writer won as its database's
    unique-key violation wrapped in "Unknown failure" (seen racing first runs on PostgreSQL):
    that is the table existing, so the run merges into it; any other database failure is not."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    args = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, 0)

    def catalog_failure(sql_state):
        cause = jvm.java.sql.SQLException("duplicate key value violates unique constraint", sql_state)
        return Py4JJavaError("commit", jvm.org.apache.iceberg.jdbc.UncheckedSQLException(cause, "Unknown failure", args))

    assert errors.is_table_already_exists(catalog_failure("23505"))
    assert not errors.is_table_already_exists(catalog_failure("08006"))  # the connection failed
