"""The merge strategies (delete-insert, upsert, scd2): one module each, one MERGE per run."""
