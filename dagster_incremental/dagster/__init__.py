"""The Dagster side: the decorator, a run's orchestration, the IO manager, sensors and metadata."""
