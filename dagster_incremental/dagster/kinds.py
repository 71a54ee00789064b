"""The kinds the UI shows on an incremental asset: Spark, the table format, and where the
tables live (the catalog's service and the warehouse's storage), read from config.toml."""

from __future__ import annotations

from collections.abc import Mapping

# warehouse URI scheme -> Dagster kind (the UI has icons for these names)
STORAGE_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gcs", "abfs": "azure", "abfss": "azure",
                   "wasb": "azure", "wasbs": "azure", "hdfs": "hdfs"}


def table_kinds(table_format: str, catalog: str, warehouse: str, spark_conf: Mapping[str, str]) -> frozenset[str]:
    """{"spark", the format ("iceberg" or "delta")} plus the catalog's service ("rest", "postgres"
    or another JDBC database, "hive", "glue") and the storage of its warehouse ("s3", "gcs", ...).
    A local warehouse on the default (hadoop) catalog adds nothing: that is the embedded default."""
    from dagster_incremental.spark.destination import FORMATS

    kinds = {"spark", table_format} | FORMATS[table_format].catalog_kinds(spark_conf, catalog)
    prefix = f"spark.sql.catalog.{catalog}"
    places = [warehouse, spark_conf.get(f"{prefix}.warehouse", "")]
    if "S3FileIO" in spark_conf.get(f"{prefix}.io-impl", ""):
        kinds.add("s3")
    for place in places:
        scheme = place.split("://", 1)[0].lower() if "://" in place else ""
        if scheme in STORAGE_SCHEMES:
            kinds.add(STORAGE_SCHEMES[scheme])
    return frozenset(kinds)
