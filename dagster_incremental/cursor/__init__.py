"""The cursor engine: which rows a run keeps, and the state it leaves for the next run.
Pure Python over Arrow (Spark only lazily): it imports neither Dagster nor the Spark writer, so
`from dagster_incremental import incremental` stays cheap.
"""
