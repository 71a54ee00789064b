"""Where a table's data files are, as a filesystem this process reads and writes directly.

Why: the in-process write path (spark/local/) writes Parquet with pyarrow and reads the target's
key columns and footers itself; only the commit goes through Iceberg's Java API. The files live
where the table's location says: a folder on this machine (`/wh/ns/t`, `file:/wh/ns/t`) or an
S3 bucket (`s3://bucket/ns/t`, also spelt `s3a://`, `s3n://`). One object answers for both, so
the writers name files by their *location* (as Iceberg's metadata spells them) and never ask
which kind it is.

The S3 settings are the table's own FileIO's (its `properties()`: what the catalog conf, and a
REST catalog's server-side config, gave Iceberg's S3FileIO): `s3.endpoint`,
`s3.path-style-access`, `client.region`, and `s3.access-key-id` / `s3.secret-access-key` /
`s3.session-token` when set there; otherwise pyarrow's S3 reads the same AWS default chain as
the AWS SDK does (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, profiles). A FileIO that
is not S3FileIO (or Iceberg's ResolvingFileIO, which picks S3FileIO for these schemes), or any
other scheme, is None here: the caller leaves the write to Spark.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dagster_incremental.spark.iceberg.snapshots import java_json

S3_SCHEMES = ("s3", "s3a", "s3n")
S3_FILE_IOS = ("org.apache.iceberg.aws.s3.S3FileIO", "org.apache.iceberg.io.ResolvingFileIO")


@dataclass(frozen=True)
class TableStorage:
    """The filesystem of one table's files. `filesystem` is a pyarrow.fs.FileSystem; a location
    is a local path (`/...`, `file:/...`) or `<scheme>://bucket/key` on S3."""

    filesystem: Any
    remote: bool  # S3 (no folders to create; a written file's name is its location)

    @classmethod
    def local(cls) -> TableStorage:
        from pyarrow import fs

        return cls(fs.LocalFileSystem(), remote=False)

    @classmethod
    def for_location(cls, location: str, io_class: str = "", io_properties: Mapping[str, str] | None = None) -> TableStorage | None:
        """The storage of files under `location` read and written as the table's FileIO
        (`io_class`, `io_properties`) would, or None when this process can't (ask Spark)."""
        if location.startswith("/") or location.startswith("file:"):
            return cls.local()
        scheme = urlsplit(location).scheme.lower()
        if scheme in S3_SCHEMES and io_class in S3_FILE_IOS:
            return cls(s3_filesystem(io_properties or {}), remote=True)
        return None

    @classmethod
    def of_table(cls, jvm: Any, iceberg: Any) -> TableStorage | None:
        """The storage of an org.apache.iceberg.Table's files (a few py4j calls)."""
        io = iceberg.io()
        properties = {str(k): str(v) for k, v in java_json(jvm, io.properties()).items()}
        return cls.for_location(str(iceberg.location()), str(io.getClass().getName()), properties)

    def path(self, location: str) -> str:
        """`location` as a path of `filesystem` (S3: `bucket/key`)."""
        if self.remote:
            parts = urlsplit(location)
            return parts.netloc + parts.path
        if location.startswith("file://"):
            return location[len("file://"):]
        return location.removeprefix("file:")

    def join(self, location: str, *names: str) -> str:
        """A location under `location` (written the way the table's own location is)."""
        if self.remote:
            return "/".join([location.rstrip("/"), *names])
        return os.path.join(self.path(location), *names)

    def make_folder(self, location: str) -> None:
        if not self.remote:
            os.makedirs(self.path(location), exist_ok=True)

    def open_input(self, location: str) -> Any:
        """A seekable binary file (pyarrow NativeFile, a context manager)."""
        return self.filesystem.open_input_file(self.path(location))

    def open_output(self, location: str) -> Any:
        return self.filesystem.open_output_stream(self.path(location))

    def delete(self, location: str) -> None:
        """Remove a file; one that is already gone is fine (OSError otherwise)."""
        try:
            self.filesystem.delete_file(self.path(location))
        except FileNotFoundError:
            pass


def pyiceberg_io_properties(conf: Mapping[str, str], catalog: str, location: str, default_io: str = "") -> dict[str, str] | None:
    """pyiceberg's FileIO properties for files at `location` that the Spark catalog `catalog`
    (Spark's flat `conf`) reads and writes: local files, or S3 through S3FileIO as it is set up
    there (`default_io`: the catalog's FileIO when the conf names none); None when pyiceberg could not reach them as the JVM does (another FileIO, a scheme
    that is neither). Keys left out come from the AWS default chain, as in the JVM."""
    prefix = f"spark.sql.catalog.{catalog}."
    io_class = conf.get(f"{prefix}io-impl", default_io)
    if location.startswith("/") or location.startswith("file:"):
        return {} if io_class in ("", "org.apache.iceberg.hadoop.HadoopFileIO", *S3_FILE_IOS) else None
    if urlsplit(location).scheme.lower() not in S3_SCHEMES or io_class not in S3_FILE_IOS:
        return None
    keys = ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.session-token", "client.region")
    properties = {key: conf[prefix + key] for key in keys if conf.get(prefix + key)}
    if "client.region" in properties:
        properties["s3.region"] = properties["client.region"]
    # S3FileIO addresses buckets virtual-host style unless told otherwise; pyiceberg is path
    # style unless forced (as pyarrow's S3 is: s3_filesystem below).
    path_style = conf.get(f"{prefix}s3.path-style-access", "false").lower() == "true"
    properties["s3.force-virtual-addressing"] = str(not path_style and "s3.endpoint" in properties).lower()
    return properties


def s3_filesystem(properties: Mapping[str, str]) -> Any:
    """pyarrow's S3 filesystem configured as S3FileIO's `properties` configure the AWS SDK."""
    from pyarrow import fs

    options: dict[str, Any] = {}
    endpoint = properties.get("s3.endpoint")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        options["scheme"] = parts.scheme or "https"
    # S3FileIO addresses buckets virtual-host style unless told otherwise; pyarrow's S3 is path
    # style unless forced, so force it exactly when S3FileIO would use it.
    path_style = properties.get("s3.path-style-access", "false").lower() == "true"
    options["force_virtual_addressing"] = not path_style and bool(endpoint)
    region = properties.get("client.region")
    if region:
        options["region"] = region
    key, secret = properties.get("s3.access-key-id"), properties.get("s3.secret-access-key")
    if key and secret:
        options.update(access_key=key, secret_key=secret)
        if properties.get("s3.session-token"):
            options["session_token"] = properties["s3.session-token"]
    return fs.S3FileSystem(**options)
