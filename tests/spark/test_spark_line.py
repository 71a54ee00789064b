"""The jars the Spark conf names follow the running PySpark's line: Spark 3.5's exactly as they
were, Spark 4's of Scala 2.13, and a line without known jars refused with advice. No JVM starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.spark.delta.session_setup import delta_conf
from dagster_incremental.spark.iceberg.session_setup import iceberg_runtime_jar
from dagster_incremental.spark.session_conf import spark_conf
from dagster_incremental.spark.spark_line import running_line

TESTS = Path(__file__).resolve().parents[1]
SPARK_35_DELTA = "io.delta:delta-spark_2.12:3.3.2,io.delta:delta-storage:3.3.2"
SPARK_35_S3A = "org.apache.hadoop:hadoop-aws:3.3.4,com.amazonaws:aws-java-sdk-bundle:1.12.262"
SPARK_35_MAVEN_JARS = """\
org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1
org.apache.iceberg:iceberg-aws-bundle:1.10.1
org.xerial:sqlite-jdbc:3.54.1.0
io.delta:delta-spark_2.12:3.3.2
io.delta:delta-storage:3.3.2
org.apache.hadoop:hadoop-aws:3.3.4
com.amazonaws:aws-java-sdk-bundle:1.12.262
"""


def _clear_caches() -> None:
    for name in ("running_line", "running_hadoop"):
        cached = getattr(sys.modules.get("dagster_incremental.spark.spark_line"), name, None)
        if cached is not None:
            cached.cache_clear()


@pytest.fixture
def maven_repository(tmp_path, monkeypatch):
    """An empty local Maven repository: nothing fetched."""
    repository = tmp_path / "m2"
    repository.mkdir()
    monkeypatch.setenv("MAVEN_LOCAL_REPOSITORY", str(repository))
    return repository


@pytest.fixture
def installed_pyspark(tmp_path, monkeypatch):
    """Pretend another PySpark is installed: its version, and its wheel's Hadoop jar."""
    def install(version: str, hadoop: str) -> None:
        package = tmp_path / f"pyspark-{version}"
        (package / "jars").mkdir(parents=True)
        (package / "jars" / f"hadoop-client-api-{hadoop}.jar").touch()
        monkeypatch.setattr(pyspark, "__version__", version)
        monkeypatch.setattr(pyspark, "__file__", str(package / "__init__.py"))
        _clear_caches()

    yield install
    monkeypatch.undo()
    _clear_caches()


def _fetch(repository: Path, coordinates: str) -> Path:
    group, name, version = coordinates.split(":")
    jar = repository.joinpath(*group.split("."), name, version, f"{name}-{version}.jar")
    jar.parent.mkdir(parents=True)
    jar.touch()
    return jar


def test_spark_35_keeps_the_wheels_iceberg_jar_and_delta_33(maven_repository, installed_pyspark):
    import snowpark_connect_deps_iceberg as deps

    installed_pyspark("3.5.9", hadoop="3.3.4")

    wheel_jar = str(deps.get_jar_path("iceberg-spark-runtime-3.5_2.12-1.10.2.jar"))
    conf = spark_conf(warehouse="/w")
    assert conf["spark.jars"] == wheel_jar == iceberg_runtime_jar()
    assert "spark.jars.packages" not in conf
    assert delta_conf({})["spark.jars.packages"] == SPARK_35_DELTA
    assert delta_conf({}, on_s3=True)["spark.jars.packages"] == f"{SPARK_35_DELTA},{SPARK_35_S3A}"
    jars = [_fetch(maven_repository, c) for c in f"{SPARK_35_DELTA},{SPARK_35_S3A}".split(",")]
    assert delta_conf({}, on_s3=True)["spark.jars"] == ",".join(str(j) for j in jars)
    assert delta_conf({})["spark.jars"] == ",".join(str(j) for j in jars[:2])


def test_spark_40_takes_scala_213_jars_by_coordinates(maven_repository, installed_pyspark):
    installed_pyspark("4.0.1", hadoop="3.4.1")
    conf = spark_conf(warehouse="/w")
    assert conf["spark.jars.packages"] == "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.1"
    assert "spark.jars" not in conf
    delta = "io.delta:delta-spark_2.13:4.0.1,io.delta:delta-storage:4.0.1"
    s3a = "org.apache.hadoop:hadoop-aws:3.4.1,software.amazon.awssdk:bundle:2.24.6"
    assert delta_conf({})["spark.jars.packages"] == delta
    assert delta_conf({}, on_s3=True)["spark.jars.packages"] == f"{delta},{s3a}"


def test_spark_41_takes_deltas_artifact_named_for_its_line(maven_repository, installed_pyspark):
    installed_pyspark("4.1.4", hadoop="3.4.2")
    iceberg = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
    assert spark_conf(warehouse="/w")["spark.jars.packages"] == iceberg
    assert delta_conf({}, on_s3=True)["spark.jars.packages"] == (
        "io.delta:delta-spark_4.1_2.13:4.4.0,io.delta:delta-storage:4.4.0,"
        "org.apache.hadoop:hadoop-aws:3.4.2,software.amazon.awssdk:bundle:2.29.52")


PARAMETER_BINDING = "spark.sql.legacy.parameterSubstitution.constantsOnly"


@pytest.mark.parametrize("table_format", ["iceberg", "delta"])
def test_spark_41_binds_sql_parameters_after_parsing_unless_the_user_says_otherwise(
        maven_repository, installed_pyspark, table_format):
    """Delta 4.1's parser drops Spark 4.1's parse-time parameters (UNBOUND_SQL_PARAMETER on every
    MERGE the library runs); 3.5 and 4.0 bind them after parsing already and get no such key."""
    installed_pyspark("4.1.4", hadoop="3.4.2")
    assert spark_conf(warehouse="/w", table_format=table_format)[PARAMETER_BINDING] == "true"
    user = spark_conf(warehouse="/w", table_format=table_format, conf={PARAMETER_BINDING: "false"})
    assert user[PARAMETER_BINDING] == "false"
    for version, hadoop in (("3.5.9", "3.3.4"), ("4.0.1", "3.4.1")):
        installed_pyspark(version, hadoop=hadoop)
        own_jar = {"spark.jars": "/mine/iceberg.jar"}  # 3.5's from its wheel, not in every venv
        assert PARAMETER_BINDING not in spark_conf(warehouse="/w", table_format=table_format, conf=own_jar)


def test_spark_4_iceberg_runtime_jar_is_the_local_maven_repositorys(maven_repository, installed_pyspark):
    installed_pyspark("4.0.1", hadoop="3.4.1")
    coordinates = "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.1"
    with pytest.raises(FileNotFoundError, match=f"mvn dependency:get -Dartifact={coordinates}"):
        iceberg_runtime_jar()
    jar = _fetch(maven_repository, coordinates)
    assert iceberg_runtime_jar() == str(jar)


def test_a_spark_line_without_known_jars_is_refused_unless_the_user_brings_them(maven_repository, installed_pyspark):
    installed_pyspark("4.3.0", hadoop="3.4.2")
    with pytest.raises(IncrementalConfigError) as refused:
        spark_conf(warehouse="/w")
    message = str(refused.value)
    assert "PySpark 4.3.0" in message and "3.5, 4.0, 4.1" in message
    assert "pip install 'pyspark>=4.1,<4.2'" in message and "[spark.conf] spark.jars.packages" in message
    assert (refused.value.section, refused.value.key) == ("[spark.conf]", "spark.jars.packages")
    own = spark_conf(warehouse="/w", conf={"spark.jars.packages": "org.example:iceberg-for-4.3:1"})
    assert own["spark.jars.packages"] == "org.example:iceberg-for-4.3:1"
    assert delta_conf({"spark.jars": "/mine/delta.jar"}, on_s3=True).get("spark.jars") is None


def test_a_hadoop_without_known_sdk_bundle_is_refused_for_delta_on_s3(maven_repository, installed_pyspark):
    installed_pyspark("4.0.1", hadoop="3.9.0")
    assert delta_conf({})["spark.jars.packages"] == "io.delta:delta-spark_2.13:4.0.1,io.delta:delta-storage:4.0.1"
    with pytest.raises(IncrementalConfigError, match=r"Hadoop 3\.9\.0.*hadoop-aws:3\.9\.0"):
        delta_conf({}, on_s3=True)


def _maven_jars(*args: str) -> str:
    return subprocess.run([sys.executable, str(TESTS / "maven_jars.py"), *args], check=True,
                          capture_output=True, text=True).stdout


def test_maven_jars_prints_each_lines_coordinates():
    assert _maven_jars("--line", "3.5") == SPARK_35_MAVEN_JARS
    assert _maven_jars("--line", "4") == _maven_jars("--line", "4.1")
    assert _maven_jars("--line", "4.0").splitlines() == [
        "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.1", "org.apache.iceberg:iceberg-aws-bundle:1.10.1",
        "org.xerial:sqlite-jdbc:3.54.1.0", "io.delta:delta-spark_2.13:4.0.1", "io.delta:delta-storage:4.0.1",
        "org.apache.hadoop:hadoop-aws:3.4.1", "software.amazon.awssdk:bundle:2.24.6"]
    running = running_line().name
    assert _maven_jars() == _maven_jars("--line", running)  # this machine's PySpark ships its line's Hadoop
