"""Spark Connect: a destination whose format commits without the Spark driver in the Dagster
process runs over a Connect session when one is asked for (Delta: its log is read and its
compare-and-set checked by Python; Iceberg in a JDBC or REST catalog: its branch compare-and-set
made by pyiceberg, spark/iceberg/over_connect.py; every statement goes through the DataFrame and
SQL API); anything else is refused before anything is written.

Asked for by `[spark] remote` (which reaches the conf as "spark.remote") or SPARK_REMOTE
(`remote_url`); the session is `connect_session`, its token from secrets.toml's [spark.conf]
"spark.connect.authenticate.token". Refused where each way in enters: asking in the conf or
the environment (`refuse_connect`, before a session is built); a Connect session this process
already made (`refuse_connect_session` at the session lookup, `refuse_connect_process` at the
batch intake: PySpark marks such a process, `marked_as_connect`); and a Connect DataFrame an
asset hands over (`refuse_connect_frame`, the batch intake); the last two pass when the
destination itself runs over Connect. No message shows a Connect URL: it may carry a token.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["CONNECT_TOKEN", "NOT_SUPPORTED", "connect_channel", "connect_session", "connect_session_refused", "is_connect",
           "marked_as_connect", "refuse_connect", "refuse_connect_frame", "refuse_connect_process",
           "refuse_connect_session", "remote_url"]

# Why a format cannot run over Connect (its own reason comes from its Tables: `connect_refusal`).
NOT_SUPPORTED = "which this release cannot run yet (its commits go through the Spark driver in the Dagster process)"
CONNECT_TOKEN = "spark.connect.authenticate.token"  # secrets.toml [spark.conf]: the server's bearer token
_CLASSIC = 'set [spark] master, e.g. "local[*]" or "spark://host:7077"'
# Sent to the server as the Connect session's conf: runtime SQL and Delta settings only (a static
# one, such as the jars, is the server's own; catalog keys may hold credentials the server needs not).
_SESSION_PREFIXES = ("spark.sql.", "spark.databricks.delta.")
_NOT_SENT = ("spark.sql.catalog.", "spark.sql.extensions", "spark.sql.warehouse.dir")


def is_connect(obj: Any) -> bool:
    """A Spark Connect session or DataFrame: PySpark's `pyspark.sql.connect` classes (3.5 and 4.x)."""
    return any(cls.__module__.startswith("pyspark.sql.connect") for cls in type(obj).__mro__)


def marked_as_connect() -> bool:
    """Whether PySpark marked this process as Connect (`SparkSession.builder.remote(...)` did):
    it then builds no classic session here, and its functions make Connect columns."""
    return "SPARK_CONNECT_MODE_ENABLED" in os.environ


def remote_url(conf: Mapping[str, str]) -> str | None:
    """The Spark Connect URL asked for: [spark] remote ("spark.remote" in the conf), else SPARK_REMOTE."""
    return (conf.get("spark.remote") or os.environ.get("SPARK_REMOTE") or "").strip() or None


def connect_session(url: str, conf: Mapping[str, str]) -> Any:
    """A Spark Connect session on `url` for this destination: no JVM in this process. The
    bearer token (secrets.toml) rides in the channel, never in the server's conf or a message;
    the conf's runtime SQL and Delta settings are set on the server's session (static ones are
    the server's: its jars, its extensions). The process is marked as Connect, as PySpark's own
    builder marks it, so that pyspark.sql.functions make Connect columns. One Connect session a
    process: DataFrames an asset makes with SparkSession.builder.remote(url).getOrCreate() are
    this session's."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # PySpark 4's Connect builder (the 3.5 line's type stubs lack it): typed as PySpark 4 has it.
    builder = ConnectSession.builder.channelBuilder(connect_channel(url, conf))  # type: ignore[attr-defined, unused-ignore]
    for key, value in conf.items():
        if key.startswith(_SESSION_PREFIXES) and not key.startswith(_NOT_SENT):
            builder = builder.config(key, value)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    # The process's Connect session when it has one (the asset's own, whose DataFrames and temp
    # views the statements then share), as PySpark's builder.remote(url).getOrCreate() gives it.
    return builder.getOrCreate()


def connect_channel(url: str, conf: Mapping[str, str]) -> Any:
    """The gRPC channel to `url`, with the token of secrets.toml's [spark.conf] (the URL's own
    `;token=` otherwise): a token is the channel's, never a conf the server keeps."""
    from pyspark.sql.connect.client import DefaultChannelBuilder  # type: ignore[attr-defined, unused-ignore]

    channel = DefaultChannelBuilder(url)
    token = conf.get(CONNECT_TOKEN)
    if token:
        channel.set(DefaultChannelBuilder.PARAM_TOKEN, token)
    return channel


def refuse_connect(conf: Mapping[str, str], why: str = NOT_SUPPORTED) -> None:
    """PySpark makes a Spark Connect session when SPARK_REMOTE or `spark.remote` is set, when
    `spark.api.mode` (or SPARK_API_MODE) is "connect", and in a process marked as Connect:
    refused, for `why`, before a session is built or anything is written."""
    from dagster_incremental.errors import IncrementalConfigError

    api_mode = ('config.toml [spark.conf] "spark.api.mode" = "connect"', _is_connect_mode(conf.get("spark.api.mode")))
    asked = [n for n, v in (("the SPARK_REMOTE variable", os.environ.get("SPARK_REMOTE")),
                            ('config.toml [spark] remote (or [spark.conf] "spark.remote")', conf.get("spark.remote")),
                            api_mode,
                            ('the SPARK_API_MODE variable ("connect")', _is_connect_mode(os.environ.get("SPARK_API_MODE"))))
             if v]
    if asked:  # the URL is not shown: a Connect URL may carry a token
        raise IncrementalConfigError(
            f"{' and '.join(asked)} asks for a Spark Connect session, {why}; unset it for the Dagster "
            f"process and {_CLASSIC}. Nothing was written.")
    if marked_as_connect():
        raise connect_session_refused()


def refuse_connect_session(session: Any) -> None:
    """The session the lookup found is a Connect one: the library's statements would run on it."""
    if is_connect(session):
        raise connect_session_refused()


def refuse_connect_process(asset: str, allowed: bool = False) -> None:
    """A batch was taken in a process marked as Connect (its function, or the code location,
    made a Connect session): refused before anything is written, unless the destination runs
    over Connect itself (`allowed`)."""
    if marked_as_connect() and not allowed:
        raise connect_session_refused(asset)


def connect_session_refused(asset: str | None = None) -> Exception:
    from dagster_incremental.errors import IncrementalConfigError

    return IncrementalConfigError(
        (f"asset {asset!r}: " if asset else "")
        + "this process already has a Spark Connect session (made by SparkSession.builder.remote(...) "
        "or with spark.api.mode = \"connect\"), which this destination cannot write through yet: only "
        "Delta tables and Iceberg tables in a JDBC or REST catalog (with [spark] remote) are written over "
        "Spark Connect; "
        f"keep the Dagster process's session classic instead ({_CLASSIC}; leave SPARK_REMOTE unset). A Connect "
        "session for reading a source, made by pyspark.sql.connect.session.SparkSession.builder.remote(url)"
        ".create(), leaves the process classic. Nothing was written.")


def refuse_connect_frame(obj: Any, asset: str, allowed: bool = False) -> None:
    """An asset handed over a Spark Connect DataFrame (made on a Spark Connect server, e.g.
    Databricks serverless): refused before the cursor filter or any Spark statement reads it,
    unless the destination runs over Connect itself (`allowed`)."""
    from dagster_incremental.errors import IncrementalConfigError

    if allowed or not is_connect(obj):
        return
    raise IncrementalConfigError(
        f"asset {asset!r}: the function gave a Spark Connect DataFrame, which this destination cannot write "
        "yet: Spark Connect is not supported for it (its commits go through the Spark driver in the Dagster "
        "process; only Delta tables and Iceberg tables in a JDBC or REST catalog, with [spark] remote, are "
        "written over Connect). Build "
        f"the DataFrame on a classic session instead ({_CLASSIC}; leave SPARK_REMOTE unset), or give its rows "
        "as a pyarrow Table or pandas DataFrame (frame.toArrow(), frame.toPandas()), which are written as "
        "today. Nothing was written.")


def _is_connect_mode(value: str | None) -> bool:
    return (value or "").strip().lower() == "connect"
