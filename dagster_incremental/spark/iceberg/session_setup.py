"""What a Spark session needs to write Iceberg tables: Iceberg's runtime jar for the running
PySpark's line (on Spark 3.5 the one the `snowpark-connect-deps-iceberg` wheel ships: the
embedded default downloads nothing), its session extensions and, by default, a Hadoop catalog."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dagster_incremental.spark.spark_line import coordinates_text, maven_jar, running_line

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def iceberg_runtime_jar() -> str:
    """Path of the Iceberg Spark runtime jar of the running PySpark's line: on Spark 3.5 the one
    the `snowpark-connect-deps-iceberg` wheel ships, else the local Maven repository's."""
    line = running_line()
    if line.iceberg_wheel_jar is None:
        path = maven_jar(line.iceberg_runtime)
        if not path.is_file():
            fetch = f"mvn dependency:get -Dartifact={coordinates_text((line.iceberg_runtime,))}"
            raise FileNotFoundError(f"{path.name} (Iceberg's runtime for Spark {line.name}) is not in "
                                    f"the local Maven repository; fetch it with `{fetch}`.")
        return str(path)
    import snowpark_connect_deps_iceberg as deps

    path = Path(deps.get_jar_path(line.iceberg_wheel_jar))
    if not path.is_file():  # pragma: no cover - only with a broken install
        raise FileNotFoundError(
            f"{line.iceberg_wheel_jar} is not in the installed snowpark-connect-deps-iceberg package; "
            "reinstall it with `pip install snowpark-connect-deps-iceberg==1.0.2`."
        )
    return str(path)


def iceberg_jar_conf() -> dict[str, str]:
    """Iceberg's runtime for the running PySpark: the wheel's jar on Spark 3.5; on Spark 4 (no
    wheel ships it) its coordinates, which Spark resolves from the local Maven repository first."""
    line = running_line()
    if line.iceberg_wheel_jar is None:
        return {"spark.jars.packages": coordinates_text((line.iceberg_runtime,))}
    return {"spark.jars": iceberg_runtime_jar()}


def iceberg_catalog_conf(catalog: str, warehouse: str | Path) -> dict[str, str]:
    """Spark conf for an Iceberg Hadoop catalog named `catalog` in the `warehouse` folder."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "hadoop",
        f"{prefix}.warehouse": str(warehouse),
    }


def iceberg_session_conf(user: Mapping[str, str], catalog: str | None, warehouse: str | Path | None) -> dict[str, str]:
    """Iceberg's jar (unless the user brings their own), extensions and the catalog's defaults."""
    out: dict[str, str] = {}
    if "spark.jars" not in user and "spark.jars.packages" not in user:
        out.update(iceberg_jar_conf())
    out["spark.sql.extensions"] = ICEBERG_EXTENSIONS
    if catalog and warehouse is not None:
        defaults = iceberg_catalog_conf(catalog, warehouse)
        if f"spark.sql.catalog.{catalog}.catalog-impl" in user:
            # A custom catalog class (Glue, Nessie, JDBC...): Iceberg refuses it next to a
            # `type`, so the default hadoop type steps aside.
            defaults.pop(f"spark.sql.catalog.{catalog}.type")
        out.update(defaults)
    return out
