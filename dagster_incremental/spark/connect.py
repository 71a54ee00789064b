"""Spark Connect, refused before anything is written: this release commits through the Spark
driver JVM in the Dagster process (the per-run branch and its compare-and-set, Delta's commit,
the local append's Java commit), which a Connect session or DataFrame does not have.

Three ways in, each refused where it enters: asking for a Connect session in the conf or the
environment (`refuse_connect`, before a session is built), a Connect session this process
already made (`refuse_connect_session`, the session lookup), and a Connect DataFrame an asset
hands over (`refuse_connect_frame`, the batch intake). No message shows a Connect URL: it may
carry a token.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["is_connect", "refuse_connect", "refuse_connect_frame", "refuse_connect_session"]

_WHY = "(its commits go through the Spark driver in the Dagster process)"
_CLASSIC = 'set [spark] master (e.g. "local[*]" or "spark://host:7077")'


def is_connect(obj: Any) -> bool:
    """A Spark Connect session or DataFrame: PySpark's `pyspark.sql.connect` classes (3.5 and 4.x)."""
    return any(cls.__module__.startswith("pyspark.sql.connect") for cls in type(obj).__mro__)


def refuse_connect(conf: Mapping[str, str]) -> None:
    """PySpark makes a Spark Connect session when SPARK_REMOTE or `spark.remote` is set, when
    `spark.api.mode` (or SPARK_API_MODE) is "connect", and in a process that made one already
    (PySpark then sets SPARK_CONNECT_MODE_ENABLED): refused before a session is built."""
    from dagster_incremental.errors import IncrementalConfigError

    api_mode = ('config.toml [spark.conf] "spark.api.mode" = "connect"', _is_connect_mode(conf.get("spark.api.mode")))
    asked = [n for n, v in (("the SPARK_REMOTE variable", os.environ.get("SPARK_REMOTE")),
                            ('config.toml [spark.conf] "spark.remote"', conf.get("spark.remote")),
                            api_mode,
                            ('the SPARK_API_MODE variable ("connect")', _is_connect_mode(os.environ.get("SPARK_API_MODE"))))
             if v]
    if asked:  # the URL is not shown: a Connect URL may carry a token
        raise IncrementalConfigError(
            f"{' and '.join(asked)} asks for a Spark Connect session, which this release cannot run yet "
            f"{_WHY}; unset it for the Dagster process and {_CLASSIC}")
    if "SPARK_CONNECT_MODE_ENABLED" in os.environ:
        refuse_connect_session()


def refuse_connect_session(session: Any = None) -> None:
    """This process holds a Spark Connect session (`session`, or the one PySpark marked the
    process with): the library's Spark statements would run on it, so none is run."""
    from dagster_incremental.errors import IncrementalConfigError

    if session is not None and not is_connect(session):
        return
    raise IncrementalConfigError(
        "this process already has a Spark Connect session (made by SparkSession.builder.remote(...) "
        f"or with spark.api.mode = \"connect\"), which this release cannot write through yet {_WHY}; "
        f"build the Dagster process's session classic instead: {_CLASSIC}, without SPARK_REMOTE. "
        "Nothing was written")


def refuse_connect_frame(obj: Any, asset: str) -> None:
    """An asset handed over a Spark Connect DataFrame (made on a Spark Connect server, e.g.
    Databricks serverless): refused before the cursor filter or any Spark statement reads it."""
    from dagster_incremental.errors import IncrementalConfigError

    if not is_connect(obj):
        return
    raise IncrementalConfigError(
        f"asset {asset!r}: the function gave a Spark Connect DataFrame, which this release cannot write "
        f"yet: Spark Connect is not supported {_WHY}. Build the DataFrame on a classic session "
        f"({_CLASSIC}, without SPARK_REMOTE), or give its rows as a pyarrow Table or pandas DataFrame "
        "(frame.toArrow(), frame.toPandas()), which are written as today. Nothing was written")


def _is_connect_mode(value: str | None) -> bool:
    return (value or "").strip().lower() == "connect"
