"""Writers of one Delta table on S3 take turns: a lease object beside the table, taken with S3's
conditional writes, around each write's cursor check and commits.

Why: Delta's S3 log store assumes one writing driver. Two drivers committing the same version
both "succeed" on S3 (the later file replaces the earlier), so a commit, cursor and all, can
vanish. S3 refuses the second file only when asked (`If-None-Match: *`). The lease asks: it is created only if absent, renewed and released only
if it is still the one this writer put there (`If-Match`), and taken over only once it has not
been renewed for LEASE_SECONDS by the server's clock (a killed writer's lease expires; a frozen
one's too, which is why renewal runs on its own thread).

On a local disk the writers take the table's file lock instead (`table_commit_lock`, as an
Iceberg table's do): Spark's log store there checks that the version file is absent and then
renames onto it, two steps, so a Spark commit racing delta-rs's (or another process's Spark)
could both write one version. Seen in the race test without a pool: a first load doubled and a
log file whose Hadoop checksum was another writer's.

This orders the library's own writers (every run, backfill and full refresh of any process or
machine) and nobody else: another Delta writer on the same table, a notebook or a Databricks
job, needs Delta's DynamoDB log store, which the library does not configure."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark.delta.storage import local_path, on_s3, s3_settings
from dagster_incremental.spark.commit_lock import table_commit_lock

LEASE_SECONDS = 60.0  # a lease not renewed for this long (server clock) may be taken over
RENEW_EVERY = LEASE_SECONDS / 4
WAIT_SECONDS = 30 * 60.0  # how long a writer waits for another's write before it gives up
LEASE_SUFFIX = ".dagster_incremental_lease"  # beside the table, not in it: Delta never lists it
_POLL = 0.5


@contextmanager
def commit_lease(location: str, table: str) -> Iterator[None]:
    """Hold `location`'s commit lease for the block (a table on a local disk: its file lock;
    elsewhere, e.g. HDFS, none). `table` names it in errors."""
    if not on_s3(location):
        folder = _local_folder(location)
        with table_commit_lock(folder.parent, [folder.name]) if folder is not None else contextlib.nullcontext():
            yield
        return
    lease = _Lease(s3_settings().client(), location, table)
    lease.acquire()
    try:
        yield
    finally:
        lease.release()


def _local_folder(location: str) -> Path | None:
    """The table's folder when `location` is a local path or a file: URI."""
    scheme = urlsplit(location).scheme.lower()
    if scheme not in ("", "file"):
        return None
    return Path(local_path(location))


class _Lease:
    def __init__(self, client: Any, location: str, table: str) -> None:
        parts = urlsplit(location.rstrip("/"))
        self.client, self.bucket, self.key = client, parts.netloc, parts.path.lstrip("/") + LEASE_SUFFIX
        self.table = table
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.etag: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def acquire(self) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not self._try_take():
            if time.monotonic() > deadline:
                raise ConcurrentRunError(
                    f"table {self.table}: another writer has held its commit lease "
                    f"s3://{self.bucket}/{self.key} for over {WAIT_SECONDS / 60:.0f} minutes, so this run "
                    "wrote nothing. Re-run it when that write is done; if no run is writing the table, the "
                    f"lease expires {LEASE_SECONDS:.0f} s after its writer stopped.",
                    table=self.table,
                )
            time.sleep(_POLL)
        self._renewer = threading.Thread(target=self._renew, name="delta-s3-lease", daemon=True)
        self._renewer.start()

    def _try_take(self) -> bool:
        """Create the lease, or take over an expired one; False while another holds it."""
        if self._put(IfNoneMatch="*"):
            return True
        held = self._head()
        if held is None:
            return False  # released meanwhile: try again
        etag, age = held
        return age > LEASE_SECONDS and self._put(IfMatch=etag)

    def _head(self) -> tuple[str, float] | None:
        """(etag, seconds since it was last written, by the server's clock) of the lease."""
        from botocore.exceptions import ClientError

        try:
            found = self.client.head_object(Bucket=self.bucket, Key=self.key)
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise
        server_now = _server_time(found) or datetime.now(timezone.utc)
        return found["ETag"], (server_now - found["LastModified"]).total_seconds()

    def _put(self, **condition: str) -> bool:
        """Write the lease under `condition`; False when S3 refused the condition."""
        from botocore.exceptions import ClientError

        body = json.dumps({"owner": self.owner, "table": self.table}).encode()
        try:
            self.etag = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, **condition)["ETag"]
            return True
        except ClientError as exc:
            if _status(exc) in (409, 412):  # 409: a concurrent conditional write of the same key
                return False
            raise

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY):
            assert self.etag is not None
            try:
                if not self._put(IfMatch=self.etag):
                    return  # taken over: this writer was frozen longer than LEASE_SECONDS
            except Exception:  # noqa: BLE001 - a network hiccup: the next tick tries again
                continue

    def release(self) -> None:
        from botocore.exceptions import ClientError

        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
        except ClientError as exc:
            if _status(exc) not in (404, 412):  # gone, or another writer's now
                raise


def _status(error: Any) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _server_time(response: Any) -> datetime | None:
    from email.utils import parsedate_to_datetime

    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    return parsedate_to_datetime(date) if date else None
