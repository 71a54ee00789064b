"""The jars the test session's Spark takes from the local Maven repository, by coordinates.

Spark writes Iceberg to S3 through Iceberg's S3FileIO, which needs the AWS SDK v2 that the
runtime jar does not bundle: `iceberg-aws-bundle`, of exactly the runtime's Iceberg version.
Maven Central serves no `iceberg-aws-bundle` 1.10.2 (the PyPI runtime's version, Spark 3.5), so
these tests run Spark 3.5 on the 1.10.1 pair, both from Central; other Spark lines on their own
runtime's version. `.ci/run` fetches them before pytest starts (`python3 tests/maven_jars.py`
prints the coordinates for the installed PySpark, `--line 3.5` or `--line 4` those of a named
line; `.ci/fetch-jars` fetches them through the machine's own Maven settings); the tests only
look in ~/.m2/repository, nothing downloads while they run.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from dagster_incremental.spark.spark_line import (
    LINES,
    Coordinates,
    SparkLine,
    running_hadoop,
    running_line,
    s3a_artifacts,
)

# Spark 3.5's test pair: the wheel's runtime is 1.10.2, whose AWS bundle Central lacks.
ICEBERG_TEST_VERSIONS = {"3.5": "1.10.1"}
# The SQLite JDBC driver, for the JDBC catalog on a SQLite file (catalogs.sqlite_catalog)
SQLITE_JDBC = ("org.xerial", "sqlite-jdbc", "3.54.1.0")


def iceberg_artifacts(line: SparkLine) -> tuple[Coordinates, Coordinates]:
    """Iceberg's Spark runtime for `line` and the AWS bundle of the same Iceberg version."""
    group, runtime, version = line.iceberg_runtime
    version = ICEBERG_TEST_VERSIONS.get(line.name, version)
    return (group, runtime, version), (group, "iceberg-aws-bundle", version)


def __getattr__(name: str) -> Any:
    """ARTIFACTS: the Iceberg pair of the installed PySpark (resolved when first asked, so that
    `--line` works whatever PySpark is installed)."""
    if name == "ARTIFACTS":
        return iceberg_artifacts(running_line())
    raise AttributeError(name)


def local_repository() -> Path:
    return Path(os.environ.get("MAVEN_LOCAL_REPOSITORY") or Path.home() / ".m2" / "repository")


def jar_path(group: str, artifact: str, version: str) -> Path:
    return local_repository().joinpath(*group.split("."), artifact, version, f"{artifact}-{version}.jar")


def s3_jars() -> list[str] | None:
    """The Iceberg runtime and AWS bundle jars (one Iceberg version), or None if not fetched."""
    paths = [jar_path(*coordinates) for coordinates in iceberg_artifacts(running_line())]
    return [str(p) for p in paths] if all(p.is_file() for p in paths) else None


def sqlite_jar() -> str | None:
    """The SQLite JDBC driver jar, or None if not fetched."""
    path = jar_path(*SQLITE_JDBC)
    return str(path) if path.is_file() else None


def delta_jars(on_s3: bool = False) -> list[str] | None:
    """Delta's two jars (the library's own coordinates), with S3A's two for tables on S3, or
    None if not fetched."""
    from dagster_incremental.spark.delta.session_setup import delta_artifacts

    paths = [jar_path(*coordinates) for coordinates in delta_artifacts(on_s3)]
    return [str(p) for p in paths] if all(p.is_file() for p in paths) else None


def line_coordinates(line: SparkLine, hadoop: str) -> list[Coordinates]:
    """Every jar the tests take on `line`, S3A's for `hadoop`."""
    return [*iceberg_artifacts(line), SQLITE_JDBC, *line.delta, *s3a_artifacts(hadoop)]


def named_line(name: str) -> SparkLine:
    """`3.5`, `4.0`, `4.1`..., or a major version alone (`4`): its newest line known."""
    known = [line for line in LINES.values() if line.name == name or line.name.split(".")[0] == name]
    if not known:
        raise SystemExit(f"--line {name}: no such Spark line; known: {', '.join(LINES)} (or a major version alone)")
    return known[-1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Print the Maven coordinates of the jars the tests use.")
    parser.add_argument("--line", help="a Spark line (3.5, 4.0, 4: the newest 4.x) instead of the installed PySpark's")
    chosen = parser.parse_args().line
    if chosen:  # S3A's jars for the Hadoop that line's PySpark releases ship
        coordinates = line_coordinates(named_line(chosen), named_line(chosen).hadoop)
    else:  # those of the Hadoop inside the installed PySpark, which delta_jars() looks for
        coordinates = line_coordinates(running_line(), running_hadoop())
    print("\n".join(":".join(c) for c in coordinates))
