"""Local rows (dicts, pages, Arrow, pandas) staged as Arrow, spilled past a bound and
deduplicated, for any format: each format's in-process commit takes them from here (Iceberg's
`spark/iceberg/local/`, Delta's `spark/delta/in_process.py`), and everything else goes to the
format's Spark writer as a DataFrame.
"""
