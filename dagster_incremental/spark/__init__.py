"""The Spark + Iceberg side: session, staging, one table commit per run carrying the cursor.

Knows nothing of Dagster: it is given a write spec and a batch and returns what it committed.
"""
