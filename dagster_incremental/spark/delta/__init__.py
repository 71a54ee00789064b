"""Delta Lake, the second table format: the same runs, cursor and compare-and-set as Iceberg's,
through Delta's own commit log (log.py reads it without a JVM; commit.py makes the one commit;
writer.py applies the dispositions; tables.py is the destination's service)."""
