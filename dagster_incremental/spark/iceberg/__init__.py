"""Iceberg: one of the two table formats behind the seam (spark/table_format.py)."""
