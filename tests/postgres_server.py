"""A throw-away PostgreSQL server for the JDBC-catalog tests, started and stopped by them.

`initdb` in a temporary folder, listening on 127.0.0.1 at a free port, trust authentication for
the local `postgres` role only. PostgreSQL refuses to run as root, so under root the server runs
as the `postgres` user (Debian's `postgresql` package creates it).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DRIVER_JARS = ("/usr/share/java/postgresql.jar",)  # Debian's libpostgresql-jdbc-java
DATABASE = "iceberg"


@dataclass(frozen=True)
class PostgresServer:
    port: int
    user: str = "postgres"
    database: str = DATABASE

    @property
    def jdbc_uri(self) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{self.database}"

    @property
    def sqlalchemy_uri(self) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (None: not installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def driver_jar() -> str | None:
    return next((j for j in DRIVER_JARS if os.path.isfile(j)), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a server in a temporary folder; stop it and delete the folder at the end."""
    bin_dir = pg_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql libpostgresql-jdbc-java")
    root = Path(tempfile.mkdtemp(prefix="di_pg_"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
    port = _free_port()
    run = lambda args: subprocess.run(_as_server_user(args), check=True, capture_output=True, text=True)  # noqa: E731
    try:
        run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "start",
             "-o", f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"])
        try:
            run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", DATABASE])
            yield PostgresServer(port=port)
        finally:
            run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
    finally:
        for _ in range(3):
            shutil.rmtree(root, ignore_errors=True)
            if not root.exists():
                break
            time.sleep(0.2)


def jdbc_catalog_conf(catalog: str, server: PostgresServer, warehouse: str) -> dict[str, str]:
    """docs/clusters-and-catalogs.md's JDBC-catalog recipe: `[spark.conf]` keys of an Iceberg JdbcCatalog."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": server.jdbc_uri,
        f"{prefix}.jdbc.user": server.user,
        f"{prefix}.jdbc.password": "",
        f"{prefix}.warehouse": warehouse,
    }
