"""Is there a Java runtime for Spark's driver JVM? Asked before pyspark tries to launch one.

Why: without Java, pyspark prints `JAVA_HOME is not set` and raises `[JAVA_GATEWAY_EXITED]` for
every asset of a run, hundreds of lines that never say what to install. This says it once.
"""

from __future__ import annotations

import os
import shutil

from dagster_incremental.errors import JavaNotFound

INSTALL_JAVA = """\
Spark needs a Java runtime, Java 17, and none was found ({where}). Install one, then run again:
  Debian/Ubuntu:  sudo apt-get install openjdk-17-jre-headless
  macOS:          brew install openjdk@17   (then: export JAVA_HOME="$(brew --prefix openjdk@17)")
  SDKMAN:         sdk install java 17.0.15-tem
or point JAVA_HOME at an installed Java 17."""

_told = False  # the full instructions once per process; later failures of the run refer to them


def java_binary() -> str | None:
    """The `java` pyspark would launch (JAVA_HOME's, else the first on PATH), or None."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        return java if os.access(java, os.X_OK) else None
    return shutil.which("java")


def _where() -> str:
    home = os.environ.get("JAVA_HOME")
    if home:
        return f"JAVA_HOME={home} has no bin/java"
    return "JAVA_HOME is not set and no `java` is on PATH"


def require_java() -> None:
    """Raise JavaNotFound, with how to install Java 17, when there is no Java to launch."""
    global _told
    if java_binary() is not None:
        return
    if _told:
        raise JavaNotFound(f"Java 17 is not installed ({_where()}); see the first error of this process for how to install it.")
    _told = True
    raise JavaNotFound(INSTALL_JAVA.format(where=_where()))
