"""The jars that fit the running PySpark, defined once: its Spark line (major.minor) gives the
Scala suffix, Iceberg's Spark runtime and Delta's jars; the Hadoop its wheel ships gives S3A's.

Why one table here: every jar is built for one Spark line and one Scala version (Spark 3.5 is
Scala 2.12, Spark 4 is 2.13 only), and a jar of another line fails at the first query with a
`NoSuchMethodError`, far from its cause. Lines absent from `LINES` have no Iceberg runtime or
Delta release on Maven Central for them yet.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

Coordinates = tuple[str, str, str]  # Maven (group, artifact, version)


@dataclass(frozen=True)
class SparkLine:
    """What one Spark line (`"3.5"`, `"4.0"`) takes."""

    name: str
    scala: str
    iceberg_runtime: Coordinates
    # The runtime jar's file name inside the `snowpark-connect-deps-iceberg` wheel (Spark 3.5
    # only); None: the runtime comes from Maven by its coordinates.
    iceberg_wheel_jar: str | None
    delta: tuple[Coordinates, ...]
    # The Hadoop its PySpark releases ship, for fetching S3A's jars ahead (tests/maven_jars.py);
    # at run time the running PySpark's own jars decide (running_hadoop).
    hadoop: str
    # Spark conf this line needs for the library's SQL to mean what it means on 3.5 (a user's
    # own value for a key wins).
    session_conf: tuple[tuple[str, str], ...] = ()


# Spark 4.1 binds `:name` parameters while parsing, which Delta 4.1's SQL parser (the session
# extension of `format = "delta"`) does not pass on: every statement with a parameter fails with
# UNBOUND_SQL_PARAMETER. Binding them after parsing, as 3.5 and 4.0 do, works with both formats;
# the library passes values only where a literal goes, all this setting allows.
PARAMETERS_BOUND_AFTER_PARSING = (("spark.sql.legacy.parameterSubstitution.constantsOnly", "true"),)


def _iceberg(line: str, scala: str, version: str) -> Coordinates:
    return ("org.apache.iceberg", f"iceberg-spark-runtime-{line}_{scala}", version)


def _delta(spark_artifact: str, version: str) -> tuple[Coordinates, ...]:
    return (("io.delta", spark_artifact, version), ("io.delta", "delta-storage", version))


LINES = {
    line.name: line for line in (
        SparkLine("3.5", "2.12", _iceberg("3.5", "2.12", "1.10.2"), "iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
                  _delta("delta-spark_2.12", "3.3.2"), "3.3.4"),
        SparkLine("4.0", "2.13", _iceberg("4.0", "2.13", "1.10.1"), None, _delta("delta-spark_2.13", "4.0.1"), "3.4.1"),
        # From Delta 4.1 on, the artifact names its Spark line too. Delta 4.1.0 - 4.2.0 call a
        # Parquet schema reader constructor that Spark 4.1.2 replaced: reading a checkpoint or a
        # column-mapped table failed with NoSuchMethodError on PySpark 4.1.2 and later. 4.4.0
        # calls the one every 4.1 patch has.
        SparkLine("4.1", "2.13", _iceberg("4.1", "2.13", "1.12.0"), None, _delta("delta-spark_4.1_2.13", "4.4.0"),
                  "3.4.2", PARAMETERS_BOUND_AFTER_PARSING),
    )
}

# hadoop-aws is released with Hadoop and built against one AWS SDK bundle (the
# `aws-java-sdk*.version` of that release's hadoop-project POM): both must be of the Hadoop
# inside the PySpark wheel. Hadoop 3.4 moved S3A to the AWS SDK v2.
S3A_SDK_BUNDLES = {
    "3.3.4": ("com.amazonaws", "aws-java-sdk-bundle", "1.12.262"),
    "3.4.1": ("software.amazon.awssdk", "bundle", "2.24.6"),
    "3.4.2": ("software.amazon.awssdk", "bundle", "2.29.52"),
}


def line_of(pyspark_version: str) -> SparkLine:
    """The line of a PySpark version (`"3.5.9"` -> 3.5), or an error naming the lines known."""
    from dagster_incremental.errors import IncrementalConfigError

    name, newest = ".".join(pyspark_version.split(".")[:2]), list(LINES)[-1]
    if name in LINES:
        return LINES[name]
    raise IncrementalConfigError(
        f"PySpark {pyspark_version} is installed, and this library knows no Iceberg runtime or Delta "
        f"jars for Spark {name} (it knows Spark {', '.join(LINES)}). Install a PySpark of one of "
        f"those lines (pip install 'pyspark>={newest},<{_next_minor(newest)}'), or name the "
        "table format's jars for your Spark yourself in config.toml [spark.conf] spark.jars.packages "
        "(or spark.jars): yours are used then.", section="[spark.conf]", key="spark.jars.packages",
        value=pyspark_version)


def _next_minor(line: str) -> str:
    major, minor = line.split(".")
    return f"{major}.{int(minor) + 1}"


@functools.cache
def running_line() -> SparkLine:
    """The line of the PySpark this process imports."""
    import pyspark

    return line_of(pyspark.__version__)


def s3a_artifacts(hadoop: str) -> tuple[Coordinates, Coordinates]:
    """hadoop-aws of `hadoop` and the AWS SDK bundle it was built against."""
    from dagster_incremental.errors import IncrementalConfigError

    if hadoop not in S3A_SDK_BUNDLES:
        raise IncrementalConfigError(
            f"The installed PySpark ships Hadoop {hadoop}, for which this library does not know the AWS "
            f"SDK bundle of hadoop-aws (it knows Hadoop {', '.join(S3A_SDK_BUNDLES)}). Name S3A's jars "
            f"yourself in config.toml [spark.conf] spark.jars.packages, e.g. "
            f"\"org.apache.hadoop:hadoop-aws:{hadoop}\" with Delta's jars: yours are used then.",
            section="[spark.conf]", key="spark.jars.packages", value=hadoop)
    return ("org.apache.hadoop", "hadoop-aws", hadoop), S3A_SDK_BUNDLES[hadoop]


@functools.cache
def running_hadoop() -> str:
    """The Hadoop version of the jars the running PySpark ships (`hadoop-client-api-<v>.jar`)."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        from dagster_incremental.errors import IncrementalConfigError

        raise IncrementalConfigError(
            f"The installed PySpark ({pyspark.__version__}) ships no Hadoop jars (a client-only "
            "install?), so S3A's jars for Delta on S3 cannot be chosen: install the full `pyspark` "
            "package, or name S3A's jars in config.toml [spark.conf] spark.jars.packages.",
            section="[spark.conf]", key="spark.jars.packages")
    return jars[-1].name[len("hadoop-client-api-"):-len(".jar")]


def maven_jar(coordinates: Coordinates) -> Path:
    """Where the local Maven repository (`MAVEN_LOCAL_REPOSITORY`, else ~/.m2/repository) keeps
    the jar of `coordinates`, fetched or not."""
    import os

    group, name, version = coordinates
    repository = Path(os.environ.get("MAVEN_LOCAL_REPOSITORY") or Path.home() / ".m2" / "repository")
    return repository.joinpath(*group.split("."), name, version, f"{name}-{version}.jar")


def coordinates_text(artifacts: tuple[Coordinates, ...]) -> str:
    """`group:artifact:version,...`, as `spark.jars.packages` takes them."""
    return ",".join(":".join(a) for a in artifacts)
