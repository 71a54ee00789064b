"""The commit lease of a Delta table on S3, against the tests' S3 server: one writer at a time per
table, a killed writer's lease taken over once expired, a held one kept alive by renewal, and
never a lease released that another writer holds."""

from __future__ import annotations

import threading
import time

import pytest

from dagster_incremental.errors import ConcurrentRunError
from dagster_incremental.spark.delta import s3_lease
from dagster_incremental.spark.delta.storage import S3Settings, s3_settings, use_s3_settings


@pytest.fixture
def table(s3, monkeypatch):
    """A table location on the S3 server, this process reading it with the server's settings."""
    previous = s3_settings()
    use_s3_settings(S3Settings(endpoint=s3.s3_endpoint, path_style=True, region=s3.region,
                               access_key=s3.access_key_id, secret_key=s3.secret_access_key))
    monkeypatch.setattr(s3_lease, "_POLL", 0.05)
    yield f"s3a://warehouse/lease_tests/t{time.monotonic_ns()}"
    use_s3_settings(previous)


def _lease_object(location: str) -> str | None:
    from botocore.exceptions import ClientError

    bucket, key = location.removeprefix("s3a://").split("/", 1)
    try:
        return s3_settings().client().get_object(Bucket=bucket, Key=key + s3_lease.LEASE_SUFFIX)["Body"].read().decode()
    except ClientError:
        return None


def test_a_second_writer_waits_for_the_first_and_the_lease_is_gone_after(table):
    order: list[str] = []
    first_in = threading.Event()

    def second() -> None:
        first_in.wait()
        with s3_lease.commit_lease(table, "ns.t"):
            order.append("second")

    thread = threading.Thread(target=second)
    thread.start()
    with s3_lease.commit_lease(table, "ns.t"):
        first_in.set()
        time.sleep(1.0)
        assert _lease_object(table) is not None
        order.append("first")
    thread.join(10)
    assert order == ["first", "second"]
    assert _lease_object(table) is None


def test_another_table_does_not_wait(table):
    with s3_lease.commit_lease(table, "ns.t"):
        started = time.monotonic()
        with s3_lease.commit_lease(table + "_other", "ns.t_other"):
            pass
        assert time.monotonic() - started < 2


def test_a_killed_writers_lease_is_taken_over_once_expired_and_not_before(table, monkeypatch):
    monkeypatch.setattr(s3_lease, "LEASE_SECONDS", 3.0)
    dead = s3_lease._Lease(s3_lease.s3_settings().client(), table, "ns.t")
    assert dead._try_take()  # taken and never renewed or released: its process was killed
    started = time.monotonic()
    with s3_lease.commit_lease(table, "ns.t"):
        waited = time.monotonic() - started
    assert 2.0 <= waited < 15, waited  # S3 keeps whole seconds: expiry is at 3 s, give or take one


def test_renewal_keeps_a_long_write_s_lease(table, monkeypatch):
    monkeypatch.setattr(s3_lease, "LEASE_SECONDS", 3.0)
    monkeypatch.setattr(s3_lease, "RENEW_EVERY", 0.5)
    monkeypatch.setattr(s3_lease, "WAIT_SECONDS", 6.0)
    with s3_lease.commit_lease(table, "ns.t"):
        with pytest.raises(ConcurrentRunError) as refused:
            with s3_lease.commit_lease(table, "ns.t"):
                pytest.fail("took a lease its holder kept renewing")
    message = str(refused.value)
    assert "ns.t" in message and s3_lease.LEASE_SUFFIX in message and "wrote nothing" in message


def test_a_writer_whose_lease_was_taken_over_leaves_the_new_holder_s_lease(table, monkeypatch):
    monkeypatch.setattr(s3_lease, "LEASE_SECONDS", 2.0)
    frozen = s3_lease._Lease(s3_lease.s3_settings().client(), table, "ns.t")
    assert frozen._try_take()
    time.sleep(3.5)
    taker = s3_lease._Lease(s3_lease.s3_settings().client(), table, "ns.t")
    assert taker._try_take()
    frozen.release()  # wakes up and releases what it no longer holds
    held = _lease_object(table)
    assert held is not None and taker.owner in held
    taker.release()
    assert _lease_object(table) is None


@pytest.mark.parametrize("uri", [False, True], ids=["path", "file: URI"])
def test_a_table_on_a_local_disk_takes_its_file_lock_not_a_lease(tmp_path, uri):
    """Spark's local log store checks for a version file, then renames onto it: two writers of a
    local table take turns on the table's file lock, written beside the table, never in it."""
    location = f"file://{tmp_path / 't'}" if uri else str(tmp_path / "t")
    taken = threading.Event()

    def other_writer():
        with s3_lease.commit_lease(str(tmp_path / "t"), "ns.t"):
            taken.set()

    with s3_lease.commit_lease(location, "ns.t"):
        other = threading.Thread(target=other_writer)
        other.start()
        assert not taken.wait(0.5), "the other writer committed while this one held the lock"
        assert [p.name for p in tmp_path.iterdir()] == [".dagster_incremental.lock"]  # no lease object
    other.join(10)
    assert taken.is_set()
