"""Spark Connect: `[spark] remote` (or SPARK_REMOTE) runs a Delta destination over a Connect
session (tests/dagster/test_connect_delta.py, against a real server); a destination whose format
cannot run over it (Iceberg), or a session built without the format's say, is refused before any
session starts, naming where it was asked and never showing the URL (a Connect URL may carry a
token)."""

from __future__ import annotations

import pytest

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.settings.config import load_config
from dagster_incremental.spark.session import build_spark_session

URL = "sc://dbc.example:443/;token=dapi-not-a-real-token"


def test_a_remote_in_config_toml_reaches_the_io_manager_as_pysparks_own_key(tmp_path):
    from dagster_incremental import SparkTableIOManager

    config = tmp_path / "config.toml"
    config.write_text('[spark]\nremote = "sc://connect.example:15002"\n\n[destination]\nformat = "delta"\n')
    assert load_config(config).spark.remote == "sc://connect.example:15002"
    io = SparkTableIOManager.from_config(config)
    assert io.spark_config["spark.remote"] == "sc://connect.example:15002"


def test_a_remote_that_is_not_a_connect_url_is_refused_naming_file_and_key_not_the_value(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[spark]\nremote = "https://dbc.example/?token=dapi-not-a-real-token"\n')
    with pytest.raises(IncrementalConfigError) as caught:
        load_config(config)
    text = str(caught.value)
    assert str(config) in text and "[spark] remote" in text and "not a Spark Connect URL" in text and "(at line 2)" in text
    assert "sc://host:15002" in text and "spark.connect.authenticate.token" in text
    assert "dapi-not-a-real-token" not in text and "dbc.example" not in text


def test_an_iceberg_table_in_a_folder_over_connect_is_refused_naming_its_catalog(monkeypatch):
    """Over Connect an Iceberg table must be in a JDBC or REST catalog this process reaches
    (its branch is published through it); a Hadoop catalog's folder is refused before any
    session is built or anything written, saying which keys to set."""
    from dagster_incremental.spark.iceberg.tables import IcebergTables
    from dagster_incremental.spark.table_ref import TableRef

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    conf = {"spark.master": "local[1]", "spark.remote": URL, "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.lake.type": "hadoop", "spark.sql.catalog.lake.warehouse": "/tmp/nowhere"}
    tables = IcebergTables(lambda: conf)
    with pytest.raises(IncrementalConfigError) as caught:
        tables.refuse_table_over_connect(TableRef.for_asset("lake", "sales", ["orders"]))
    text = str(caught.value)
    assert "[spark] remote" in text and "JDBC or REST catalog" in text and "catalog 'lake'" in text
    assert '"spark.sql.catalog.lake.type" = "jdbc" or "rest"' in text and "Nothing was written" in text
    assert "token" not in text and "dbc.example" not in text
    assert tables.session._session is None  # no session was built


@pytest.mark.parametrize("where", ["environment", "conf"])
def test_spark_remote_is_refused_before_a_session_starts(where, monkeypatch):
    conf = {"spark.master": "local[1]"}
    if where == "environment":
        monkeypatch.setenv("SPARK_REMOTE", URL)
        named = "SPARK_REMOTE"
    else:
        monkeypatch.delenv("SPARK_REMOTE", raising=False)
        conf["spark.remote"] = URL
        named = '[spark.conf] "spark.remote"'
    with pytest.raises(IncrementalConfigError) as caught:
        build_spark_session(conf)
    text = str(caught.value)
    assert named in text and "Spark Connect" in text and "[spark] master" in text
    assert "token" not in text and "dbc.example" not in text


@pytest.mark.parametrize("where", ["conf", "environment"])
def test_spark_api_mode_connect_is_refused_before_a_session_starts(where, monkeypatch):
    """PySpark 4 makes a Connect session (and starts a local Connect server) for spark.api.mode
    = "connect"; refused as spark.remote is."""
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    conf = {"spark.master": "local[1]"}
    if where == "conf":
        conf["spark.api.mode"] = "Connect"
        named = '[spark.conf] "spark.api.mode" = "connect"'
    else:
        monkeypatch.setenv("SPARK_API_MODE", "connect")
        named = "SPARK_API_MODE"
    with pytest.raises(IncrementalConfigError) as caught:
        build_spark_session(conf)
    assert named in str(caught.value) and "Spark Connect" in str(caught.value) and "[spark] master" in str(caught.value)


def test_a_process_that_made_a_connect_session_is_refused_a_session(monkeypatch):
    """SparkSession.builder.remote(...).getOrCreate() marks the process (SPARK_CONNECT_MODE_ENABLED):
    PySpark then hands every builder the Connect session, and the library builds none."""
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    with pytest.raises(IncrementalConfigError) as caught:
        build_spark_session({"spark.master": "local[1]"})
    text = str(caught.value)
    assert "already has a Spark Connect session" in text and "[spark] master" in text and "Nothing was written" in text
    # and where a batch enters, naming the asset, whatever the rows (a write pyiceberg would
    # commit without Spark too: one rule, not one that depends on the batch)
    from dagster_incremental.spark.connect import refuse_connect_process

    with pytest.raises(IncrementalConfigError, match="asset 'orders': this process already has a Spark Connect session"):
        refuse_connect_process("orders")
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED")
    refuse_connect_process("orders")  # an unmarked process passes


def _stand_in(module: str) -> object:
    """An instance of a class named as PySpark names its DataFrames, in `module` (3.5's
    Connect client needs packages this line's tests do not install; 4.1's real class is tested
    in tests/dagster/test_spark_connect.py)."""
    return type("DataFrame", (), {"__module__": module})()


def test_a_connect_dataframe_is_refused_where_a_batch_enters_and_a_classic_one_is_not():
    from dagster_incremental.spark.connect import is_connect, refuse_connect_session
    from dagster_incremental.spark.local.stage import iterate_output

    connect = _stand_in("pyspark.sql.connect.dataframe")
    for given in (connect, [{"id": 1}, connect]):
        with pytest.raises(IncrementalConfigError) as caught:
            list(iterate_output(given, "orders"))
        text = str(caught.value)
        assert text.startswith("asset 'orders': the function gave a Spark Connect DataFrame") and "not supported" in text
        assert "[spark] master" in text and "frame.toArrow()" in text and "Nothing was written" in text
    classic = _stand_in("pyspark.sql.classic.dataframe")
    assert not is_connect(classic) and list(iterate_output(classic, "orders")) == [classic]
    refuse_connect_session(classic)  # a classic session passes
    with pytest.raises(IncrementalConfigError, match="already has a Spark Connect session"):
        refuse_connect_session(_stand_in("pyspark.sql.connect.session"))


def test_a_delta_destination_runs_over_connect_in_a_folder_and_on_s3(monkeypatch, tmp_path):
    """Delta in a folder and on S3: over Connect when asked (the session is a Connect one), and
    nothing refuses it."""
    from dagster_incremental.spark.delta.tables import DeltaTables

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    conf = {"spark.master": "local[1]", "spark.remote": URL}
    for warehouse in (str(tmp_path), "s3://bucket/warehouse"):
        tables = DeltaTables(lambda: conf, warehouse)
        assert tables.over_connect
        tables.session.refuse_unsupported_connect()  # passes
        assert not DeltaTables(lambda: {"spark.master": "local[1]"}, warehouse).over_connect
