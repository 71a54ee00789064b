"""Spark Connect, refused before anything is written: this release commits through the Spark
driver JVM in the Dagster process (the per-run branch and its compare-and-set, Delta's commit,
the local append's Java commit), which a Connect session or DataFrame does not have.

Three ways in, each refused where it enters: asking for a Connect session in the conf or the
environment (`refuse_connect`, before a session is built); a Connect session this process
already made (`refuse_connect_session` at the session lookup, `refuse_connect_process` at the
batch intake: PySpark marks such a process, `marked_as_connect`); and a Connect DataFrame an
asset hands over (`refuse_connect_frame`, the batch intake). No message shows a Connect URL: it may
carry a token.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["connect_session_refused", "is_connect", "marked_as_connect", "refuse_connect", "refuse_connect_frame",
           "refuse_connect_process", "refuse_connect_session"]

_WHY = "(its commits go through the Spark driver in the Dagster process)"
_CLASSIC = 'set [spark] master, e.g. "local[*]" or "spark://host:7077"'


def is_connect(obj: Any) -> bool:
    """A Spark Connect session or DataFrame: PySpark's `pyspark.sql.connect` classes (3.5 and 4.x)."""
    return any(cls.__module__.startswith("pyspark.sql.connect") for cls in type(obj).__mro__)


def marked_as_connect() -> bool:
    """Whether PySpark marked this process as Connect (`SparkSession.builder.remote(...)` did):
    it then builds no classic session here, and its functions make Connect columns."""
    return "SPARK_CONNECT_MODE_ENABLED" in os.environ


def refuse_connect(conf: Mapping[str, str]) -> None:
    """PySpark makes a Spark Connect session when SPARK_REMOTE or `spark.remote` is set, when
    `spark.api.mode` (or SPARK_API_MODE) is "connect", and in a process marked as Connect:
    refused before a session is built."""
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
    if marked_as_connect():
        raise connect_session_refused()


def refuse_connect_session(session: Any) -> None:
    """The session the lookup found is a Connect one: the library's statements would run on it."""
    if is_connect(session):
        raise connect_session_refused()


def refuse_connect_process(asset: str) -> None:
    """A batch was taken in a process marked as Connect (its function, or the code location,
    made a Connect session): refused before anything is written, whatever the write would need."""
    if marked_as_connect():
        raise connect_session_refused(asset)


def connect_session_refused(asset: str | None = None) -> Exception:
    from dagster_incremental.errors import IncrementalConfigError

    return IncrementalConfigError(
        (f"asset {asset!r}: " if asset else "")
        + "this process already has a Spark Connect session (made by SparkSession.builder.remote(...) "
        f"or with spark.api.mode = \"connect\"), which this release cannot write through yet {_WHY}; "
        f"keep the Dagster process's session classic instead ({_CLASSIC}; leave SPARK_REMOTE unset). A Connect "
        "session for reading a source, made by pyspark.sql.connect.session.SparkSession.builder.remote(url)"
        ".create(), leaves the process classic. Nothing was written.")


def refuse_connect_frame(obj: Any, asset: str) -> None:
    """An asset handed over a Spark Connect DataFrame (made on a Spark Connect server, e.g.
    Databricks serverless): refused before the cursor filter or any Spark statement reads it."""
    from dagster_incremental.errors import IncrementalConfigError

    if not is_connect(obj):
        return
    raise IncrementalConfigError(
        f"asset {asset!r}: the function gave a Spark Connect DataFrame, which this release cannot write "
        f"yet: Spark Connect is not supported {_WHY}. Build the DataFrame on a classic session instead "
        f"({_CLASSIC}; leave SPARK_REMOTE unset), or give its rows as a pyarrow Table or pandas DataFrame "
        "(frame.toArrow(), frame.toPandas()), which are written as today. Nothing was written.")


def _is_connect_mode(value: str | None) -> bool:
    return (value or "").strip().lower() == "connect"
