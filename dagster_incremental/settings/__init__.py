"""config.toml, secrets.toml and the environment in; one typed settings object out.

Every error names the file, line, section and key, and nothing here starts Spark or Dagster.
"""
