"""Iceberg written and committed in the run's process: pyarrow writes the files, no Spark job."""
