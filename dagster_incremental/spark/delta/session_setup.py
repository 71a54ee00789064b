"""What a Spark session needs to write Delta tables: Delta's jars for the running PySpark's line
(with S3A's for tables on S3), its session extension and its catalog."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dagster_incremental.spark.spark_line import (
    Coordinates,
    coordinates_text,
    maven_jar,
    running_hadoop,
    running_line,
    s3a_artifacts,
)

DELTA_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def delta_jars(on_s3: bool = False) -> str:
    """`spark.jars` of Delta's two jars (with S3A's two when the tables are on S3) when the local
    Maven repository has them (`mvn dependency:get -Dartifact=<each of delta_artifacts()>` puts
    them there), else "": then `spark.jars.packages` names them and Spark resolves them when the
    session starts. The jars are those of the running PySpark's line (spark_line)."""
    paths = [maven_jar(a) for a in delta_artifacts(on_s3)]
    return ",".join(str(p) for p in paths) if all(p.is_file() for p in paths) else ""


def delta_artifacts(on_s3: bool = False) -> tuple[Coordinates, ...]:
    """Delta's coordinates for the running PySpark (Maven Central only, no wheel carries them),
    with S3A's (hadoop-aws of pyspark's own Hadoop and its AWS SDK bundle) for tables on S3."""
    line = running_line()
    return line.delta + (s3a_artifacts(running_hadoop()) if on_s3 else ())


def delta_conf(user: Mapping[str, str], on_s3: bool = False) -> dict[str, str]:
    """Delta's jars (unless the user brings their own), session extension and catalog."""
    out = {
        "spark.sql.extensions": DELTA_EXTENSIONS,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        # A table's state is rebuilt from its log in this many tasks (Delta's default, 50, makes
        # every small table's first read and each time travel cost seconds; measured 5x here).
        "spark.databricks.delta.snapshotPartitions": "4",
    }
    if "spark.jars" not in user and "spark.jars.packages" not in user:
        jars = delta_jars(on_s3)
        if jars:
            out["spark.jars"] = jars
        else:
            out["spark.jars.packages"] = coordinates_text(delta_artifacts(on_s3))
    return out


def delta_session_conf(user: Mapping[str, str], catalog: str | None, warehouse: str | Path | None) -> dict[str, str]:
    """The session conf of Delta tables under `warehouse` (S3A's jars too when it is on S3)."""
    from dagster_incremental.spark.delta.storage import on_s3

    return delta_conf(user, on_s3=warehouse is not None and on_s3(str(warehouse)))
