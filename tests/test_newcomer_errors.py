"""What a newcomer sees when something outside the code is wrong: no Java, a bad config.toml.

One message that says what to do, no traceback and no wall of pyspark launcher output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_incremental.errors import JavaNotFound
from dagster_incremental.spark import java_check

ROOT = Path(__file__).resolve().parent.parent


def _example(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_INCREMENTAL")}
    base.update(PYTHONPATH=str(ROOT), DAGSTER_HOME=str(tmp_path / "home"), **env)
    return subprocess.run([sys.executable, "-m", "definitions", *args], cwd=ROOT, env=base,
                          capture_output=True, text=True, timeout=300)


def _path_without_java(tmp_path: Path) -> str:
    """A PATH holding only this Python: no `java` anywhere on it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    return str(bin_dir)


def test_python_m_definitions_without_java_says_once_how_to_install_java_17(tmp_path):
    env = {"PATH": _path_without_java(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "definitions"], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**{k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PATH")},
             "PYTHONPATH": str(ROOT), "DAGSTER_HOME": str(tmp_path / "home"), **env},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert out.count("Spark needs a Java runtime, Java 17") == 1, out
    for how in ("sudo apt-get install openjdk-17-jre-headless", "brew install openjdk@17", "sdk install java"):
        assert how in out
    assert "JAVA_GATEWAY_EXITED" not in out and "Traceback" not in out
    assert len(out.splitlines()) <= 12, out


def test_a_spark_session_without_java_fails_with_the_instructions_first_then_a_short_reminder(monkeypatch, tmp_path):
    from pyspark import SparkContext

    from dagster_incremental.spark.session import build_spark_session

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(SparkContext, "_jvm", None)
    monkeypatch.setattr(java_check, "_told", False)
    with pytest.raises(JavaNotFound, match="sudo apt-get install openjdk-17-jre-headless"):
        build_spark_session({"spark.master": "local[1]"})
    with pytest.raises(JavaNotFound) as again:
        build_spark_session({"spark.master": "local[1]"})
    assert "see the first error of this process" in str(again.value)
    assert "apt-get" not in str(again.value)


def test_a_java_home_without_java_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setattr(java_check, "_told", False)
    with pytest.raises(JavaNotFound, match=f"JAVA_HOME={tmp_path} has no bin/java"):
        java_check.require_java()


def test_python_m_definitions_shows_a_config_error_as_its_message_and_the_traceback_on_request(tmp_path):
    config = tmp_path / "config.toml"
    text = (ROOT / "config" / "config.toml").read_text()
    assert 'initial_value = "2024-01-01T00:00:00Z"' in text
    config.write_text(text.replace('initial_value = "2024-01-01T00:00:00Z"', 'initial_value = "yesterday"', 1))
    shutil.copy(ROOT / "config" / "secrets.toml.example", tmp_path / "secrets.toml.example")

    proc = _example(tmp_path, DAGSTER_INCREMENTAL_CONFIG=str(config))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f'error: {config}: [assets.orders.updated_at] initial_value = "yesterday"')
    assert "--traceback" in proc.stderr

    verbose = _example(tmp_path, "--traceback", DAGSTER_INCREMENTAL_CONFIG=str(config))
    assert "Traceback (most recent call last)" in verbose.stderr
    assert 'initial_value = "yesterday"' in verbose.stderr
