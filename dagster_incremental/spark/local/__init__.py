"""The in-process write path: local rows (dicts, pages, Arrow, pandas) staged as Arrow,
deduplicated, and written as data files committed through Iceberg's Java API, without a Spark job.

The Spark path (`spark/iceberg/writer.py`, `spark/merge/`) takes everything else: Spark DataFrames and
the writes this path does not cover.
"""
