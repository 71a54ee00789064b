"""Spark and Iceberg failures recognised by their error class or Java exception class, never by
message text (which changes between versions and may quote user data). Over Spark Connect the
Java exception stays on the server: its error class comes with the error, its class names in the
server's stack trace the error carries (`_connect_classes`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

TABLE_NOT_FOUND = "TABLE_OR_VIEW_NOT_FOUND"
TABLE_ALREADY_EXISTS = "TABLE_OR_VIEW_ALREADY_EXISTS"
ICEBERG_ALREADY_EXISTS = "org.apache.iceberg.exceptions.AlreadyExistsException"
JDBC_CATALOG_FAILURE = "org.apache.iceberg.jdbc.UncheckedSQLException"  # its database said no
USER_RAISED = "USER_RAISED_EXCEPTION"  # SQL raise_error(message)
# Iceberg's optimistic concurrency said no: another writer committed first (CommitFailed), or a
# commit's conflict validation found that writer's files (Validation).
COMMIT_CONFLICTS = (
    "org.apache.iceberg.exceptions.CommitFailedException",
    "org.apache.iceberg.exceptions.ValidationException",
)
# A REST catalog's 400 answer to a commit. Servers answer it (not 409) when an update no longer
# applies to the table as it now is: SeaweedFS for a snapshot whose sequence number another
# writer's commit took meanwhile. Only a conflict when the table moved (commit.py checks that).
CATALOG_BAD_REQUEST = "org.apache.iceberg.exceptions.BadRequestException"
_SPARK_THROWABLE = "org.apache.spark.SparkThrowable"
_MAX_DEPTH = 20  # causes followed at most (a cycle guard)


def error_classes(error: BaseException) -> set[str]:
    """The Spark error classes of `error` and of every Java exception behind it."""
    found = set()
    python_class = _python_error_class(error)
    if python_class:
        found.add(python_class)
    for throwable in _java_chain(error):
        if _implements(throwable, _SPARK_THROWABLE):
            java_class = throwable.getErrorClass()
            if java_class:
                found.add(str(java_class))
    return found


def java_classes(error: BaseException) -> set[str]:
    """The class names (and superclass names) of the Java exceptions behind `error` (over Spark
    Connect: the class of each exception in the server's chain, without superclasses)."""
    names: set[str] = _connect_classes(error)
    for throwable in _java_chain(error):
        cls = throwable.getClass()
        while cls is not None:
            names.add(str(cls.getName()))
            cls = cls.getSuperclass()
    return names


def is_table_not_found(error: BaseException) -> bool:
    return TABLE_NOT_FOUND in error_classes(error)


def is_table_already_exists(error: BaseException) -> bool:
    """Spark found the table when planning, or (a catalog service such as JDBC) the catalog
    refused the create's commit because another writer created it meanwhile."""
    classes = java_classes(error)
    return (TABLE_ALREADY_EXISTS in error_classes(error) or ICEBERG_ALREADY_EXISTS in classes
            or (JDBC_CATALOG_FAILURE in classes and _catalog_row_exists(error)))


def _catalog_row_exists(error: BaseException) -> bool:
    """Iceberg's JDBC catalog tells a create that lost to another creator only as its database's
    unique-key violation ("Unknown failure"; SQLSTATE class 23, PostgreSQL's 23505)."""
    for throwable in _java_chain(error):
        if _implements(throwable, "java.sql.SQLException") and str(throwable.getSQLState() or "").startswith("23"):
            return True
    return False


def is_commit_conflict(error: BaseException) -> bool:
    """Another writer committed to the table first; this commit was refused, nothing written."""
    return bool(java_classes(error).intersection(COMMIT_CONFLICTS))


def is_catalog_bad_request(error: BaseException) -> bool:
    """A REST catalog refused a request as malformed (see CATALOG_BAD_REQUEST)."""
    return CATALOG_BAD_REQUEST in java_classes(error)


def raised_by_sql(error: BaseException, message: str) -> bool:
    """Whether `error` comes from the statement's own `raise_error(message)`: on Spark 3.5 a
    plain java.lang.RuntimeException carrying exactly `message` (4.x: USER_RAISED_EXCEPTION)."""
    if is_connect_error(error):  # the class and parameters the server sent
        parameters = getattr(error, "getMessageParameters", lambda: None)() or {}
        return _python_error_class(error) == USER_RAISED and parameters.get("errorMessage") == message
    for throwable in _java_chain(error):
        if _implements(throwable, _SPARK_THROWABLE) and throwable.getErrorClass() == USER_RAISED:
            if dict(throwable.getMessageParameters() or {}).get("errorMessage") == message:
                return True
        elif throwable.getClass().getName() == "java.lang.RuntimeException" and throwable.getMessage() == message:
            return True
    return False


def is_connect_error(error: BaseException) -> bool:
    """An error a Spark Connect server sent (pyspark.errors.exceptions.connect): no JVM behind it here."""
    return any(cls.__module__ == "pyspark.errors.exceptions.connect" for cls in type(error).__mro__)


def _connect_classes(error: BaseException) -> set[str]:
    """The Java classes of a Spark Connect error and its causes, as the server's stack trace
    names them: its first line, then each "Caused by: <class>: <message>"."""
    if not is_connect_error(error):
        return set()
    trace = getattr(error, "getStackTrace", lambda: None)() or ""
    lines = trace.splitlines()
    names = {lines[0].strip()} if lines and " " not in lines[0].strip() else set()
    for line in lines[1:]:
        if line.startswith("Caused by: "):
            names.add(line[len("Caused by: "):].split(":", 1)[0].strip())
    return {n for n in names if n}


def _python_error_class(error: BaseException) -> str | None:
    # PySpark 4 names it getCondition; its getErrorClass warns (FutureWarning) in a run's log.
    getter = getattr(error, "getCondition", None) or getattr(error, "getErrorClass", None)
    if getter is None:
        return None
    try:
        return getter()
    except Exception:  # noqa: BLE001 - a PySpark error without a JVM behind it
        return None


def _java_chain(error: BaseException) -> Iterator[Any]:
    """The Java throwable behind `error` (PySpark's captured one or py4j's) and its causes."""
    throwable = _java_throwable(error)
    for _ in range(_MAX_DEPTH):
        if throwable is None:
            return
        yield throwable
        throwable = throwable.getCause()


def _java_throwable(error: BaseException) -> Any:
    from py4j.protocol import Py4JJavaError

    if isinstance(error, Py4JJavaError):
        return error.java_exception
    origin = getattr(error, "_origin", None)  # pyspark.errors' CapturedException
    return origin.java_exception if isinstance(origin, Py4JJavaError) else origin


def _implements(throwable: Any, interface: str) -> bool:
    """Whether `throwable` is an `interface`; False when that class is not on the classpath
    (the AWS SDK's, on a session without Iceberg's AWS bundle): py4j would raise instead, and
    the user would see a ClassNotFoundException in place of the run's own error."""
    from py4j.java_gateway import is_instance_of
    from py4j.protocol import Py4JError

    from pyspark import SparkContext

    gateway = SparkContext._gateway
    try:
        return gateway is not None and is_instance_of(gateway, throwable, interface)
    except Py4JError:
        return False


# Storage and catalog failures a user's configuration causes, by the Java classes behind them.
NO_FILE_SYSTEM = "org.apache.hadoop.fs.UnsupportedFileSystemException"
ACCESS_DENIED = (
    "org.apache.iceberg.exceptions.ForbiddenException",  # a catalog service's 403
    "org.apache.iceberg.exceptions.NotAuthorizedException",  # its 401
    "java.nio.file.AccessDeniedException",  # S3A's 403
)
S3_ANSWER = "software.amazon.awssdk.services.s3.model.S3Exception"  # S3FileIO's: denied when 401/403
NO_CONNECTION = (
    "software.amazon.awssdk.core.exception.SdkClientException",  # no credentials, no endpoint
    "java.net.ConnectException",
    "java.net.UnknownHostException",
)


@dataclass(frozen=True)
class Storage:
    """Where a destination's tables are kept, as a storage error names it; each format's Tables
    says (`Tables.storage`): the Spark catalog, what kind it is, the warehouse, and what to do
    when Spark has no file system for that warehouse."""

    catalog: str
    kind: str  # the catalog's type ("hadoop", "rest", "jdbc", "custom"), or the format ("delta")
    warehouse: str
    no_file_system: str  # the advice, after "Spark has no file system for ..."

    @property
    def where(self) -> str:
        return f"catalog {self.catalog!r} (type {self.kind}, warehouse {self.warehouse})"


def storage_problem(error: BaseException, storage: Storage) -> str | None:
    """What a storage or catalog failure means for the user, with the keys that fix it (None:
    not one). Only non-secret keys are named, never valued."""
    classes = java_classes(error)
    if not classes:
        return None
    prefix = f"spark.sql.catalog.{storage.catalog}"
    if NO_FILE_SYSTEM in classes:
        return f"{storage.where}: Spark has no file system for {storage.no_file_system}"
    if classes.intersection(ACCESS_DENIED) or _s3_denied(error):
        return (f"{storage.where} refused access: its credentials are missing or wrong. In config/secrets.toml "
                f'[spark.conf] set the catalog\'s "{prefix}.credential" (or "{prefix}.token") and the S3 keys '
                f'"{prefix}.s3.access-key-id" / "{prefix}.s3.secret-access-key" (or AWS_ACCESS_KEY_ID / '
                "AWS_SECRET_ACCESS_KEY in the environment), with rights to read and write the warehouse.")
    if classes.intersection(NO_CONNECTION):
        return (f"{storage.where} could not be reached, or no credentials were found: check \"{prefix}.uri\" and "
                f'"{prefix}.s3.endpoint" in config.toml [spark.conf], and set the S3 keys in config/secrets.toml '
                f'[spark.conf] ("{prefix}.s3.access-key-id" / "{prefix}.s3.secret-access-key") or as '
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.")
    return None


def _s3_denied(error: BaseException) -> bool:
    for throwable in _java_chain(error):
        if _implements(throwable, S3_ANSWER) and int(throwable.statusCode()) in (401, 403):
            return True
    return False


def root_message(error: BaseException, limit: int = 300) -> str:
    """The innermost Java exception's one-line message (what the server or library said)."""
    last = None
    for throwable in _java_chain(error):
        last = throwable
    text = str(last.toString()) if last is not None else str(error)
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."
