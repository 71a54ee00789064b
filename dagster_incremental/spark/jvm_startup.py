"""A faster, quieter start for the Spark driver JVM this process launches."""

# Why: Dagster launches every run in a fresh process, so every run pays a cold JVM: loading and
# verifying some ten thousand Spark and Iceberg classes, then JIT-compiling the first job. Two
# standard JVM features cut that:
#
# - a class-data-sharing archive (`-XX:SharedArchiveFile`): the classes a previous run loaded,
#   already parsed and verified, mapped from one file. Recording one costs the recording JVM some
#   30 s at exit, so ONE process records it: the one that creates the key's lock file (O_EXCL)
#   records at exit (`-XX:ArchiveClassesAtExit`) under a temporary name; processes starting
#   meanwhile start without an archive; the first process after the recorder (its Python and its
#   JVM) has exited renames the recording into place (atomic), and every later process uses it.
#   An archive is keyed by the Java runtime and the jars, so a new Java or Spark simply records a
#   new one. If the JVM cannot map an archive (it checks the runtime and class path itself), it
#   starts without it, as if there were none.
# - C1-only JIT (`-XX:TieredStopAtLevel=1`) for local masters: the driver's short jobs finish
#   before the optimising compiler would pay off (see docs/performance.md). With C1 alone the JVM
#   reserves 48 MB of code cache, not 240: a process running many statements filled it and then
#   kept discarding compiled methods to compile them again (over 45 tests: 74,000 compilations and
#   24 CPU-s in the JIT and its sweeper, against 40,000 and 9 with 240 MB). So C1 comes with
#   the tiered JIT's 240 MB (`-XX:ReservedCodeCacheSize=240m`).
#
# And quiet: a log4j2 configuration at ERROR instead of Spark's WARN default, so a run's output
# is not buried in Spark's start-up warnings. `spark.log.level` in `[spark.conf]` brings them back.
# Set `DAGSTER_INCREMENTAL_JVM_ARCHIVE=off` to start without the archive.

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ARCHIVE_SWITCH = "DAGSTER_INCREMENTAL_JVM_ARCHIVE"
ARCHIVE_DIR = "DAGSTER_INCREMENTAL_JVM_ARCHIVE_DIR"
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
_OPTIONS_KEY = "spark.driver.extraJavaOptions"
C1_CODE_CACHE = "-XX:ReservedCodeCacheSize=240m"  # the tiered JIT's own default (C1 alone: 48m)
_recording_lock: Path | None = None  # the lock this process took to record the archive


def driver_java_options(conf: Mapping[str, str]) -> str:
    """`spark.driver.extraJavaOptions` for a new driver JVM: ours first, the user's after them
    (the JVM takes the last of a repeated flag, so the user's win)."""
    user = conf.get(_OPTIONS_KEY, "")
    ours: list[str] = []
    if "log4j2.configurationFile" not in user and "log4j.configuration" not in user:
        ours.append(f"-Dlog4j2.configurationFile={QUIET_LOG4J}")
    if "SharedArchiveFile" not in user and "ArchiveClassesAtExit" not in user:
        ours += archive_options(_jars(conf))
    if conf.get("spark.master", "local").startswith("local") and "TieredStopAtLevel" not in user:
        ours.append("-XX:TieredStopAtLevel=1")
        if "ReservedCodeCacheSize" not in user:
            ours.append(C1_CODE_CACHE)
    return " ".join([*ours, user]).strip()


def archive_options(jars: Sequence[str]) -> list[str]:
    """Use this runtime's archive; else record one at exit if no other process is recording it
    (only the process that takes the lock does: see `_claim`); else nothing."""
    global _recording_lock
    if os.environ.get(ARCHIVE_SWITCH, "").lower() in ("0", "off", "false", "no"):
        return []
    folder = archive_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return []
    key = archive_key(jars)
    final, lock = folder / f"{key}.jsa", folder / f"{key}.lock"
    quiet = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    if not final.is_file() and _recorder_alive(folder, key, lock):
        return []  # another process records it: start without, never record twice
    if final.is_file() or _adopt_recording(folder, key, final, lock):
        return [f"-XX:SharedArchiveFile={final}", "-Xshare:auto", *quiet]
    if not _claim(folder, key, lock):
        return []
    _recording_lock = lock
    return [f"-XX:ArchiveClassesAtExit={folder / f'{key}.{os.getpid()}.recording'}", *quiet]


def recorder_started(jvm_pid: int) -> None:
    """Add the recording JVM's pid to the lock this process holds: the JVM writes the archive
    after this process has exited, and nobody may adopt the recording while it does."""
    lock = _recording_lock
    if lock is None:
        return
    try:
        with open(lock, "a", encoding="ascii") as fh:
            fh.write(f" {jvm_pid}")
    except OSError:
        pass


def discard_recording() -> None:
    """Remove this process's unfinished recording and its lock (its JVM was killed writing it)."""
    lock = _recording_lock
    if lock is not None:
        (lock.parent / f"{lock.stem}.{os.getpid()}.recording").unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


def _claim(folder: Path, key: str, lock: Path) -> bool:
    """Create the key's lock file (O_EXCL: one process wins) holding this process's pid. A lock
    whose processes all exited (a recorder killed early) is removed and claimed once more."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(lock):
                return False
            lock.unlink(missing_ok=True)
            continue
        except OSError:
            return False
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(str(os.getpid()))
        return True
    return False


def _recorder_alive(folder: Path, key: str, lock: Path) -> bool:
    """Whether a process (a Python that took the lock, its JVM, or a recording's own pid) may
    still be writing this key's archive."""
    pids = [r.name.split(".")[1] for r in folder.glob(f"{key}.*.recording")]
    return (lock.exists() and not _stale(lock)) or any(p.isdigit() and _alive(int(p)) for p in pids)


def _stale(lock: Path) -> bool:
    """A lock whose processes have all exited; one just created (its pid not yet written) is not."""
    try:
        pids = lock.read_text(encoding="ascii").split()
        young = time.time() - lock.stat().st_mtime < 10
    except OSError:
        return False  # gone meanwhile: nothing to remove
    return not (young and not pids) and not any(p.isdigit() and _alive(int(p)) for p in pids)


def archive_folder() -> Path:
    if os.environ.get(ARCHIVE_DIR):
        return Path(os.environ[ARCHIVE_DIR])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "dagster-incremental" / "jvm-archive"


def archive_key(jars: Sequence[str]) -> str:
    """Names what the archive depends on: the Java runtime and every jar on the driver."""
    digest = hashlib.sha256()
    java = _java_binary()
    for path in [java, *_spark_jars(), *jars]:
        try:
            stat = os.stat(path)
            digest.update(f"{os.path.realpath(path)}:{stat.st_size}:{int(stat.st_mtime)}\n".encode())
        except OSError:
            digest.update(f"{path}:missing\n".encode())
    return digest.hexdigest()[:20]


def _adopt_recording(folder: Path, key: str, final: Path, lock: Path) -> bool:
    """Rename a finished recording into place (atomic, only once; its processes have exited).
    Recordings that lost a race or were cut short are removed; the lock once the archive is in place."""
    for recording in folder.glob(f"{key}.*.recording"):
        if not final.is_file() and _complete(recording):
            try:
                os.replace(recording, final)
                continue
            except OSError:
                pass
        recording.unlink(missing_ok=True)
    if final.is_file() and _stale(lock):
        lock.unlink(missing_ok=True)  # the recorder's: nobody claims once the archive is in place
    return final.is_file()


def _complete(path: Path) -> bool:
    """A dynamic archive starts with its magic number and is far larger than a header; a
    process killed while writing leaves less."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
        return head in (b"\xa8\xab\x0b\xf0", b"\xf0\x0b\xab\xa8") and path.stat().st_size > 1 << 20
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java") or "java"
    return os.path.realpath(java)


def _spark_jars() -> list[str]:
    import pyspark

    folder = Path(pyspark.__file__).parent / "jars"
    return sorted(str(p) for p in folder.glob("*.jar"))


def _jars(conf: Mapping[str, str]) -> list[str]:
    return [j for j in conf.get("spark.jars", "").split(",") if j]
