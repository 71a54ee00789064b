"""Where a Delta table's files are read from without a JVM: a local folder, or an S3 bucket with
the S3 settings Spark's S3A filesystem writes it with.

A Delta table on S3 is at `s3a://bucket/...` (Hadoop's S3A: what Delta on Spark writes S3
through; `s3://` warehouses are spelt so for Spark). Spark reads the bucket through
`spark.hadoop.fs.s3a.*` keys of `[spark.conf]`; this process reads the commit log, and takes a
table's commit lease (s3_lease.py), through the same keys: `endpoint`, `path.style.access`,
`endpoint.region`, and `access.key` / `secret.key` / `session.token` when set there, else the
AWS default chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, profiles), as S3A's
default credential providers do."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

S3_SCHEMES = ("s3", "s3a", "s3n")
_S3A = "spark.hadoop.fs.s3a."


@dataclass(frozen=True)
class S3Settings:
    """The S3A settings of a session's `[spark.conf]` (None: the AWS default)."""

    endpoint: str | None = None
    path_style: bool = False
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None

    @classmethod
    def from_spark_conf(cls, conf: Mapping[str, str]) -> S3Settings:
        def get(key: str) -> str | None:
            return conf.get(_S3A + key) or None

        endpoint = get("endpoint")
        if endpoint and "://" not in endpoint:
            secure = (get("connection.ssl.enabled") or "true").lower() == "true"
            endpoint = f"{'https' if secure else 'http'}://{endpoint}"
        return cls(endpoint=endpoint, path_style=(get("path.style.access") or "false").lower() == "true",
                   region=get("endpoint.region"), access_key=get("access.key"), secret_key=get("secret.key"),
                   session_token=get("session.token"))

    def filesystem(self) -> Any:
        """pyarrow's S3 filesystem with these settings (one per settings: it keeps connections)."""
        return _s3_filesystem(self)

    def client(self) -> Any:
        """A boto3 S3 client with these settings (the commit lease's conditional writes)."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:  # pragma: no cover - only without the s3 extra
            from dagster_incremental.errors import IncrementalConfigError

            raise IncrementalConfigError(
                'Delta tables on S3 take a commit lease through boto3, which is not installed: '
                'pip install "dagster-incremental[s3]"'
            ) from exc
        config = Config(s3={"addressing_style": "path" if self.path_style else "auto"},
                        retries={"max_attempts": 5, "mode": "standard"})
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region, config=config,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                            aws_session_token=self.session_token)


@functools.lru_cache(maxsize=8)
def _s3_filesystem(settings: S3Settings) -> Any:
    from pyarrow import fs

    options: dict[str, Any] = {}
    if settings.endpoint:
        parts = urlsplit(settings.endpoint)
        options.update(endpoint_override=parts.netloc + parts.path.rstrip("/"), scheme=parts.scheme or "https",
                       force_virtual_addressing=not settings.path_style)
    if settings.region:
        options["region"] = settings.region
    if settings.access_key and settings.secret_key:
        options.update(access_key=settings.access_key, secret_key=settings.secret_key)
        if settings.session_token:
            options["session_token"] = settings.session_token
    return fs.S3FileSystem(**options)


# The S3 settings of the destination whose Delta tables this process reads (DeltaTables sets
# them when its warehouse is on S3; one destination per code location).
_settings = S3Settings()


def use_s3_settings(settings: S3Settings) -> None:
    global _settings
    _settings = settings


def s3_settings() -> S3Settings:
    return _settings


def on_s3(location: str) -> bool:
    return urlsplit(location).scheme.lower() in S3_SCHEMES


def as_s3a(location: str) -> str:
    """`location` as Spark's S3A reads it (s3:// and s3n:// name the same bucket)."""
    scheme, _, rest = location.partition("://")
    return f"s3a://{rest}" if rest and scheme.lower() in S3_SCHEMES else location


def filesystem_and_path(location: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path in it) of a location: a local path or file: URI, or S3."""
    from pyarrow import fs

    if on_s3(location):
        parts = urlsplit(location)
        return _settings.filesystem(), parts.netloc + parts.path.rstrip("/")
    return fs.LocalFileSystem(), local_path(location)


def local_path(location: str) -> str:
    """The path of a local location: a plain path, or a file: URI."""
    return location[len("file://"):] if location.startswith("file://") else location.removeprefix("file:")
