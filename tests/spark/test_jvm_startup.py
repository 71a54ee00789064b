"""The driver JVM's start options: the class archive's life cycle (record, adopt atomically,
use, clean up), quiet logging, C1 for local masters, and the user's options winning."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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
    (folder / f"{js.archive_key([])}.lock").write_text(str(dead_pid()))  # the recorder has exited
    recording(folder, dead_pid())
    late = recording(folder, dead_pid())  # a second finished one: the race's loser
    cut = recording(folder, dead_pid(), complete=False)  # killed while writing
    options = js.archive_options([])
    final = folder / f"{js.archive_key([])}.jsa"
    assert options[0] == f"-XX:SharedArchiveFile={final}" and final.is_file()
    assert sorted(p.name for p in folder.iterdir()) == [final.name]
    assert not late.exists() and not cut.exists()


def test_a_recording_still_being_written_is_neither_used_nor_removed_nor_recorded_again(folder):
    alive = recording(folder, os.getpid())
    assert js.archive_options([]) == [] and alive.exists()


def test_a_recording_whose_jvm_still_writes_after_its_python_exited_waits_for_that_jvm(folder):
    """The recorder's Python is gone, its JVM (pid in the lock) is still writing the archive."""
    finished_python = dead_pid()
    written = recording(folder, finished_python)
    (folder / f"{js.archive_key([])}.lock").write_text(f"{finished_python} {os.getpid()}")
    assert js.archive_options([]) == [] and written.exists()
    assert not (folder / f"{js.archive_key([])}.jsa").exists()


ASK = """
import sys, time
from pathlib import Path
from dagster_incremental.spark import jvm_startup as js
Path(sys.argv[1] + ".ready").touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.005)
print(repr(js.archive_options([])), flush=True)
time.sleep(2)  # a recorder's Python lives on while the others ask
"""


def test_of_processes_starting_at_once_exactly_one_records_the_archive(folder, tmp_path):
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", ASK, str(tmp_path / f"p{i}"), str(go)],
                              stdout=subprocess.PIPE, text=True) for i in range(4)]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"p{i}.ready").exists() for i in range(4)) and time.monotonic() < deadline:
            time.sleep(0.05)
        go.touch()
        answers = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    recording_options = [a for a in answers if "ArchiveClassesAtExit" in a]
    assert len(recording_options) == 1, answers
    assert [a.strip() for a in answers if a not in recording_options] == ["[]"] * 3
    assert len(list(folder.glob("*.lock"))) == 1


def test_the_key_follows_the_jars(folder, tmp_path):
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"x")
    assert js.archive_key([str(jar)]) != js.archive_key([])


def test_options_are_quiet_c1_with_its_code_cache_for_local_masters_and_the_users_come_last(folder, monkeypatch):
    local = js.driver_java_options({"spark.master": "local[2]"})
    assert f"-Dlog4j2.configurationFile={js.QUIET_LOG4J}" in local and js.QUIET_LOG4J.is_file()
    assert "-XX:TieredStopAtLevel=1" in local and "-XX:ReservedCodeCacheSize=240m" in local
    remote = js.driver_java_options({"spark.master": "spark://spark-master:7077"})
    assert "TieredStopAtLevel" not in remote and "ReservedCodeCacheSize" not in remote
    mine = js.driver_java_options({"spark.master": "local", "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4 -Dx=1"})
    assert mine.endswith("-XX:TieredStopAtLevel=4 -Dx=1") and "TieredStopAtLevel=1" not in mine
    assert "ReservedCodeCacheSize" not in mine  # the full JIT reserves its own
    cache = js.driver_java_options({"spark.master": "local", "spark.driver.extraJavaOptions": "-XX:ReservedCodeCacheSize=64m"})
    assert "-XX:TieredStopAtLevel=1" in cache and cache.count("ReservedCodeCacheSize") == 1
    own_archive = js.driver_java_options({"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/a.jsa"})
    assert own_archive.count("SharedArchiveFile") == 1 and "ArchiveClassesAtExit" not in own_archive
    monkeypatch.setenv(js.ARCHIVE_SWITCH, "off")
    assert "Archive" not in js.driver_java_options({"spark.master": "local"})


STEP = """
import multiprocessing, os, sys

def step(queue):
    from pyspark import SparkContext
    from dagster_incremental.spark.session import build_spark_session
    from dagster_incremental.spark.session_conf import spark_conf
    build_spark_session(spark_conf(master="local[1]", warehouse=sys.argv[1]))
    queue.put(SparkContext._gateway.proc.pid)

if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")  # as Dagster's multiprocess executor
    queue = context.Queue()
    child = context.Process(target=step, args=(queue,))
    child.start()
    jvm = queue.get(timeout=240)
    child.join()
    print("alive" if os.path.exists(f"/proc/{jvm}") else "ended", flush=True)
    if os.path.exists(f"/proc/{jvm}"):
        os.kill(jvm, 9)
"""


def test_the_driver_jvm_has_ended_when_a_forked_step_process_has(tmp_path):
    """A step process of Dagster's multiprocess executor ends with os._exit (no atexit): its
    driver JVM must still be gone when it is, not linger shutting down or writing an archive."""
    env = {**os.environ, js.ARCHIVE_SWITCH: "off", "SPARK_LOCAL_IP": "127.0.0.1"}
    script = tmp_path / "step.py"  # a file: forkserver children import the target from it
    script.write_text(STEP)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "wh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL)
    assert done.stdout.split()[-1:] == ["ended"], (done.stdout + done.stderr)[-3000:]


def test_a_lock_left_by_a_recorder_killed_before_writing_is_taken_over(folder):
    lock = folder / f"{js.archive_key([])}.lock"
    lock.write_text(f"{dead_pid()} {dead_pid()}")  # its Python and its JVM, both gone
    assert js.archive_options([])[0].startswith("-XX:ArchiveClassesAtExit=")
    assert lock.read_text().split() == [str(os.getpid())]
