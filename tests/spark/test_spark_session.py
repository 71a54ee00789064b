"""The Spark conf the library builds: defaults per master, and the user's conf winning."""

from __future__ import annotations

import sys

from dagster_incremental.spark.session_conf import spark_conf


def test_local_and_loopback_cluster_masters_keep_the_driver_on_loopback():
    for master in ("local[2]", "spark://127.0.0.1:7077", "spark://localhost:7077,127.0.0.2:7078"):
        conf = spark_conf(master=master, warehouse="/w")
        assert conf["spark.driver.bindAddress"] == "127.0.0.1", master
        assert conf["spark.pyspark.python"] == sys.executable
    remote = spark_conf(master="spark://spark-master.prod:7077", warehouse="/w")
    assert "spark.driver.bindAddress" not in remote and "spark.pyspark.python" not in remote


def test_a_custom_catalog_implementation_replaces_the_default_hadoop_type():
    glue = "org.apache.iceberg.aws.glue.GlueCatalog"
    conf = spark_conf(catalog="lake", warehouse="s3://bucket/wh", conf={"spark.sql.catalog.lake.catalog-impl": glue})
    assert conf["spark.sql.catalog.lake.catalog-impl"] == glue
    assert "spark.sql.catalog.lake.type" not in conf  # Iceberg refuses type and catalog-impl together
    assert conf["spark.sql.catalog.lake.warehouse"] == "s3://bucket/wh"
    rest = spark_conf(catalog="lake", warehouse="/w", conf={"spark.sql.catalog.lake.type": "rest"})
    assert rest["spark.sql.catalog.lake.type"] == "rest"


def test_user_conf_wins_and_a_user_jar_replaces_the_bundled_one():
    conf = spark_conf(warehouse="/w", conf={"spark.sql.shuffle.partitions": 3, "spark.jars.packages": "x:y:1"})
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert "spark.jars" not in conf
    assert spark_conf(warehouse="/w")["spark.jars"].endswith(".jar")
