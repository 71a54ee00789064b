"""The driver JVM's start options: the class archive's life cycle (record, adopt atomically,
use, clean up), quiet logging, C1 for local masters, and the user's options winning."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dagster_incremental.spark import jvm_startup as js
ARCHIVE_MAGIC = b"\xa8\xab\x0b\xf0"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(js.ARCHIVE_DIR, str(tmp_path))
    monkeypatch.delenv(js.ARCHIVE_SWITCH, raising=False)
    return tmp_path


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def recording(folder, pid: int, complete: bool = True):
    path = folder / f"{js.archive_key([])}.{pid}.recording"
    path.write_bytes(ARCHIVE_MAGIC + b"\0" * ((2 << 20) if complete else 100))
    return path


def test_the_first_process_records_and_the_next_adopts_the_finished_recording(folder):
    first = js.archive_options([])
    assert first[0] == f"-XX:ArchiveClassesAtExit={folder}/{js.archive_key([])}.{os.getpid()}.recording"
    recording(folder, dead_pid())
    late = recording(folder, dead_pid())  # a second finished one: the race's loser
    cut = recording(folder, dead_pid(), complete=False)  # killed while writing
    options = js.archive_options([])
    final = folder / f"{js.archive_key([])}.jsa"
    assert options[0] == f"-XX:SharedArchiveFile={final}" and final.is_file()
    assert sorted(p.name for p in folder.iterdir()) == [final.name]
    assert not late.exists() and not cut.exists()


def test_a_recording_still_being_written_is_neither_used_nor_removed(folder):
    alive = recording(folder, os.getpid())
    options = js.archive_options([])
    assert options[0].startswith("-XX:ArchiveClassesAtExit=") and alive.exists()


def test_the_key_follows_the_jars(folder, tmp_path):
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"x")
    assert js.archive_key([str(jar)]) != js.archive_key([])


def test_options_are_quiet_c1_for_local_masters_and_the_users_come_last(folder, monkeypatch):
    local = js.driver_java_options({"spark.master": "local[2]"})
    assert f"-Dlog4j2.configurationFile={js.QUIET_LOG4J}" in local and js.QUIET_LOG4J.is_file()
    assert "-XX:TieredStopAtLevel=1" in local
    remote = js.driver_java_options({"spark.master": "spark://spark-master:7077"})
    assert "TieredStopAtLevel" not in remote
    mine = js.driver_java_options({"spark.master": "local", "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4 -Dx=1"})
    assert mine.endswith("-XX:TieredStopAtLevel=4 -Dx=1") and "TieredStopAtLevel=1" not in mine
    own_archive = js.driver_java_options({"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/a.jsa"})
    assert own_archive.count("SharedArchiveFile") == 1 and "ArchiveClassesAtExit" not in own_archive
    monkeypatch.setenv(js.ARCHIVE_SWITCH, "off")
    assert "Archive" not in js.driver_java_options({"spark.master": "local"})
