"""Spark Connect is not supported yet: asking for it (config.toml's [spark] remote, the
SPARK_REMOTE variable, or "spark.remote" in [spark.conf]) is refused before any session starts,
naming where it was asked and never showing the URL (a Connect URL may carry a token)."""

from __future__ import annotations

import pytest

from dagster_incremental.errors import IncrementalConfigError
from dagster_incremental.settings.config import load_config
from dagster_incremental.spark.session import build_spark_session

URL = "sc://dbc.example:443/;token=dapi-not-a-real-token"


def test_a_remote_in_config_toml_is_refused_naming_file_and_key(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'[spark]\nremote = "{URL}"\n')
    with pytest.raises(IncrementalConfigError) as caught:
        load_config(config)
    text = str(caught.value)
    assert str(config) in text and "[spark] remote" in text and "Spark Connect" in text and "(at line 2)" in text
    assert "set master" in text and "token" not in text and "dbc.example" not in text


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
