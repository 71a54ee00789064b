"""The jars the test session's Spark takes from the local Maven repository, by coordinates.

Spark writes Iceberg to S3 through Iceberg's S3FileIO, which needs the AWS SDK v2 that the
runtime jar does not bundle: `iceberg-aws-bundle`, of exactly the runtime's Iceberg version.
Maven Central serves no `iceberg-aws-bundle` 1.10.2 (the PyPI runtime's version), so these tests
run Spark on the 1.10.1 pair, both from Central. `.ci/run` fetches them before pytest starts
(`python3 tests/maven_jars.py` prints the coordinates; `mvn dependency:get` fetches each through
the machine's own Maven settings); the tests only look in ~/.m2/repository, nothing downloads
while they run.
"""

from __future__ import annotations

import os
from pathlib import Path

ICEBERG_VERSION = "1.10.1"
ARTIFACTS = (
    ("org.apache.iceberg", "iceberg-spark-runtime-3.5_2.12", ICEBERG_VERSION),
    ("org.apache.iceberg", "iceberg-aws-bundle", ICEBERG_VERSION),
)
# The SQLite JDBC driver, for the JDBC catalog on a SQLite file (catalogs.sqlite_catalog)
SQLITE_JDBC = ("org.xerial", "sqlite-jdbc", "3.54.1.0")


def local_repository() -> Path:
    return Path(os.environ.get("MAVEN_LOCAL_REPOSITORY") or Path.home() / ".m2" / "repository")


def jar_path(group: str, artifact: str, version: str) -> Path:
    return local_repository().joinpath(*group.split("."), artifact, version, f"{artifact}-{version}.jar")


def s3_jars() -> list[str] | None:
    """The Iceberg runtime and AWS bundle jars (one Iceberg version), or None if not fetched."""
    paths = [jar_path(*coordinates) for coordinates in ARTIFACTS]
    return [str(p) for p in paths] if all(p.is_file() for p in paths) else None


def sqlite_jar() -> str | None:
    """The SQLite JDBC driver jar, or None if not fetched."""
    path = jar_path(*SQLITE_JDBC)
    return str(path) if path.is_file() else None


def delta_jars(on_s3: bool = False) -> list[str] | None:
    """Delta's two jars (the library's own coordinates), with S3A's two for tables on S3, or
    None if not fetched."""
    from dagster_incremental.spark.session import DELTA_ARTIFACTS, DELTA_S3_ARTIFACTS

    paths = [jar_path(*coordinates) for coordinates in DELTA_ARTIFACTS + (DELTA_S3_ARTIFACTS if on_s3 else ())]
    return [str(p) for p in paths] if all(p.is_file() for p in paths) else None


if __name__ == "__main__":
    from dagster_incremental.spark.session import DELTA_ARTIFACTS, DELTA_S3_ARTIFACTS

    print("\n".join(":".join(coordinates) for coordinates in (*ARTIFACTS, SQLITE_JDBC, *DELTA_ARTIFACTS, *DELTA_S3_ARTIFACTS)))
