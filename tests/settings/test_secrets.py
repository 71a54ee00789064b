"""secrets.toml: credentials reach the asset function and Spark, and never what Dagster stores.

The proof is the one a security review would do: run assets that log and fail with their token,
then search EVERY record of the run's event log (serialized as Dagster stores it), the run and the
job snapshot for the token's value. Errors about the secrets file itself name file, line, section
and key, never a value. Runs reuse the session's Spark; file checks need no Spark at all.
"""

from __future__ import annotations

import logging
import urllib.parse
import uuid
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
from dagster._serdes import serialize_value

from attack_support import QUIET, committed_states, dagster_state, io_manager_for, rows, snapshots
from dagster_incremental import (
    Incremental,
    IncrementalConfigError,
    SparkTableIOManager,
    build_incremental_sensor,
    incremental,
    incremental_asset,
    load_config,
)
from dagster_incremental.dagster.masking import MASK, RedactedError, Redactor
from dagster_incremental.settings.secrets import load_secrets, with_secret_spark_conf
from definitions.sources import events_api

ENV = "DAGSTER_INCREMENTAL_SECRETS__"


def token() -> str:
    return "tok-" + uuid.uuid4().hex


@pytest.fixture
def project(tmp_path, spark_warehouse):
    """A config.toml with its own namespace; `secrets` writes the secrets.toml beside it."""
    namespace = "sec_" + uuid.uuid4().hex[:8]
    config = tmp_path / "config.toml"
    config.write_text(
        f'[destination]\ncatalog = "lake"\nnamespace = "{namespace}"\nwarehouse = "{spark_warehouse}"\n'
    )

    def secrets(text: str) -> Path:
        project.secrets_file.write_text(text)
        return project.secrets_file

    # (a plain namespace: a resource as a class attribute would act as a descriptor)
    project = SimpleNamespace(path=str(config), secrets_file=tmp_path / "secrets.toml",
                              io=io_manager_for(spark_warehouse, namespace), secrets=secrets)
    return project


def run_asset(asset, instance, io) -> dg.ExecuteInProcessResult:
    return dg.materialize([asset], instance=instance, resources={"io_manager": io}, run_config=QUIET,
                          raise_on_error=False)


def stored_text(instance, run_id: str) -> list[str]:
    """Everything Dagster keeps about a run, serialized as stored: each event log record, the
    run itself and its job snapshot (definitions, metadata, resource config schema)."""
    out = [serialize_value(entry) for entry in instance.all_logs(run_id)]
    run = instance.get_run_by_id(run_id)
    out.append(serialize_value(run))
    out.append(serialize_value(instance.get_job_snapshot(run.job_snapshot_id)))
    return out


def assert_never_stored(instance, run_id: str, *secrets: str) -> str:
    texts = stored_text(instance, run_id)
    assert len(texts) > 10  # the whole run is there, not an empty log
    everything = "\n".join(texts)
    for secret in secrets:
        for form in {secret, urllib.parse.quote(secret, safe="")}:
            assert form not in everything
    return everything


# ------------------------------------------------------------------------------ runs (Spark)


@pytest.mark.spark
def test_token_reaches_the_function_and_never_the_event_log_env_wins_rotation_is_seen(
    spark, project, instance, monkeypatch
):
    first, rotated, from_env = token(), token(), token()
    project.secrets(f'[assets.sec_logged]\napi_token = "{first}"\n')
    seen: list[str] = []
    logger = dg.get_dagster_logger()

    @incremental_asset(primary_key="id", config_path=project.path)
    def sec_logged(context: dg.AssetExecutionContext, api_token: str,
                   id: Incremental = incremental("id", initial_value=0)):  # noqa: A002
        seen.append(api_token)
        context.log.info(f"calling the API with token {api_token}")
        context.log.warning("retrying with %s", api_token)
        logger.info(f"dagster logger sees {api_token}")
        n = len(seen)
        return [{"id": n, "value": f"row {n}"}]

    result = run_asset(sec_logged, instance, project.io)
    assert result.success
    assert seen == [first]
    stored = assert_never_stored(instance, result.run_id, first)
    assert "calling the API with token ***" in stored
    assert "retrying with ***" in stored
    assert "dagster logger sees ***" in stored
    assert rows(spark, project.io, "sec_logged", ["id", "value"]) == [(1, "row 1")]

    # read inside each run: a rotated file is picked up without redefining the asset
    project.secrets(f'[assets.sec_logged]\napi_token = "{rotated}"\n')
    result = run_asset(sec_logged, instance, project.io)
    assert result.success and seen[-1] == rotated
    assert_never_stored(instance, result.run_id, rotated, first)

    # the environment wins over the file (asset and key names in any case)
    monkeypatch.setenv(f"{ENV}ASSETS__SEC_LOGGED__API_TOKEN", from_env)
    result = run_asset(sec_logged, instance, project.io)
    assert result.success and seen[-1] == from_env
    assert "calling the API with token ***" in assert_never_stored(instance, result.run_id, from_env, rotated)
    assert rows(spark, project.io, "sec_logged", ["id"]) == [(1,), (2,), (3,)]


FAILURES = {
    # the message holds the token; the function has yielded rows already (a generator)
    "message": lambda t: ValueError(f"401 from https://api.example.com?key={t}"),
    # only the cause holds it (URL-encoded, as a client library would show it)
    "cause": lambda t: _chained(RuntimeError("fetch failed"),
                                ConnectionError(f"GET /x?token={urllib.parse.quote(t, safe='')}")),
    # a library error: a row whose cursor is the token; CursorTypeError shows value and row
    "library": None,
}


def _chained(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


@pytest.mark.spark
@pytest.mark.parametrize("kind", list(FAILURES))
def test_an_error_holding_the_token_fails_masked_and_writes_nothing(spark, project, instance, kind):
    secret = token() + "/+&"  # characters that URL-encoding changes
    project.secrets(f'[assets.sec_fails]\napi_token = "{secret}"\n')
    feed = {"fail": False}

    @incremental_asset(primary_key="id", config_path=project.path)
    def sec_fails(context: dg.AssetExecutionContext, id: Incremental = incremental("id", initial_value=0),  # noqa: A002
                  api_token: str | None = None):
        yield {"id": 1 if not feed["fail"] else 2, "value": "ok"}
        if feed["fail"]:
            if kind == "library":
                yield {"id": api_token, "value": "cursor of the wrong type"}
            else:
                raise FAILURES[kind](api_token)

    assert run_asset(sec_fails, instance, project.io).success
    before = (snapshots(spark, project.io, "sec_fails"), committed_states(spark, project.io, "sec_fails"),
              dagster_state(instance, "sec_fails"))

    feed["fail"] = True
    result = run_asset(sec_fails, instance, project.io)
    assert not result.success
    stored = assert_never_stored(instance, result.run_id, secret)
    failure = result.get_step_failure_events()[0].step_failure_data
    shown = failure.error.to_string() + (failure.user_failure_data.description or "")
    assert MASK in shown
    expected_type = {"message": "ValueError", "cause": "ConnectionError", "library": "CursorTypeError"}[kind]
    assert expected_type in shown and "sec_fails" in shown and "Traceback" in shown
    assert MASK in stored
    after = (snapshots(spark, project.io, "sec_fails"), committed_states(spark, project.io, "sec_fails"),
             dagster_state(instance, "sec_fails"))
    assert after == before
    assert rows(spark, project.io, "sec_fails", ["id"]) == [(1,)]


@pytest.mark.spark
def test_an_error_without_a_secret_keeps_its_original_chain(spark, project, instance):
    project.secrets('[assets.sec_plain]\napi_token = "unrelated-value-123"\n')

    @incremental_asset(config_path=project.path)
    def sec_plain(context: dg.AssetExecutionContext, api_token: str | None = None):
        raise KeyError("no such page")

    result = run_asset(sec_plain, instance, project.io)
    error = result.get_step_failure_events()[0].step_failure_data.error
    chain = []
    while error is not None:
        chain.append(error.cls_name)
        error = error.cause
    assert "KeyError" in chain and MASK not in str(chain)


# ------------------------------------------------------------------------------ no Spark needed


def test_required_parameter_is_satisfied_by_secrets_only(project):
    def needs(context, api_token):
        return []

    with pytest.raises(IncrementalConfigError, match="api_token.*secrets.toml"):
        incremental_asset(name="sec_required", config_path=project.path)(needs)
    project.secrets('[assets.sec_required]\napi_token = "x-value-1"\n')
    asset = incremental_asset(name="sec_required", config_path=project.path)(needs)
    # nothing Dagster stores at definition time holds the value
    assert "x-value-1" not in serialize_value(dg.Definitions(assets=[asset]).get_repository_def()
                                              .get_all_jobs()[0].get_job_snapshot())


def test_a_secret_for_a_parameter_the_function_lacks_names_file_section_key_not_value(project):
    secret = token()
    path = project.secrets(f'# credentials\n[assets.Sec_Unknown]\napi_tokn = "{secret}"\n')

    def sec_unknown(context: dg.AssetExecutionContext, api_token: str | None = None):
        return []

    with pytest.raises(IncrementalConfigError) as info:
        incremental_asset(config_path=project.path)(sec_unknown)
    message = str(info.value)
    assert str(path.parent / "secrets.toml") in message or "secrets.toml" in message
    assert "[assets.Sec_Unknown] api_tokn" in message and "(at line 3)" in message
    assert "api_token" in message  # what it could have meant
    assert secret not in message and secret not in repr(info.value.__dict__)

    # a secret may not replace a cursor or the context
    project.secrets('[assets.sec_unknown]\ncontext = "x"\n')
    with pytest.raises(IncrementalConfigError, match="the context parameter"):
        incremental_asset(config_path=project.path)(sec_unknown)


@pytest.mark.parametrize("text, line", [
    ('[assets.a]\napi_token = "{s}\n', 2),          # unterminated string
    ('[assets.a]\n\napi_token = {s}\n', 3),          # a bare value
    ('[assets.a]\napi_token = "{s}" junk\n', 2),     # trailing text
])
def test_malformed_secrets_file_names_file_and_line_not_the_line(project, text, line):
    secret = token()
    project.secrets(text.format(s=secret))
    with pytest.raises(IncrementalConfigError) as info:
        load_secrets(project.secrets_file)
    message = str(info.value)
    assert str(project.secrets_file) in message and f"line {line}" in message, message
    assert secret not in message and secret[:8] not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert info.value.line == line

    # the same at definition time, through the decorator
    with pytest.raises(IncrementalConfigError, match=f"line {line}") as info:
        incremental_asset(name="a", config_path=project.path)(lambda context: [])
    assert secret not in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ('[asset.x]\nk = "v1-secret"\n', "[asset] is not a known section"),
    ('[spark]\nmaster = "v1-secret"\n', "[spark] master is not a known key"),
    ('[spark.conf]\n"spark.x" = ["v1-secret"]\n', "[spark.conf] spark.x is an array"),
    ('[assets]\napi_token = "v1-secret"\n', "[assets] api_token is a string"),
])
def test_unknown_sections_and_keys_are_errors_without_values(project, text, expected):
    project.secrets(text)
    with pytest.raises(IncrementalConfigError) as info:
        load_secrets(project.secrets_file)
    assert expected in str(info.value) and "v1-secret" not in str(info.value)
    assert info.value.value is None


def test_environment_overrides_win_and_config_loading_ignores_them(project):
    project.secrets('[assets.Orders]\nAPI_Token = "from-file"\ndb = { user = "app", password = "file-pw" }\n'
                    '[spark.conf]\n"spark.hadoop.fs.s3a.secret.key" = "file-s3"\n')
    environ = {
        f"{ENV}ASSETS__ORDERS__API_TOKEN": "from-env",
        f"{ENV}ASSETS__ORDERS__DB__PASSWORD": "env-pw",
        f"{ENV}SPARK__CONF__SPARK_HADOOP_FS_S3A_SECRET_KEY": "env-s3",
        f"{ENV}SPARK__CONF__SPARK_HADOOP_FS_S3A_ACCESS_KEY": "env-access",
    }
    secrets = load_secrets(project.secrets_file, environ=environ)
    assert secrets.asset("orders") == {"API_Token": "from-env", "db": {"user": "app", "password": "env-pw"}}
    assert secrets.spark_conf() == {"spark.hadoop.fs.s3a.secret.key": "env-s3",
                                    "spark.hadoop.fs.s3a.access.key": "env-access"}
    assert f"{ENV}ASSETS__ORDERS__API_TOKEN" in secrets.where("orders", "API_Token")

    # DAGSTER_INCREMENTAL_SECRETS__... is not DAGSTER_INCREMENTAL__...: config.toml never sees it
    cfg = load_config(project.path, environ={**environ, f"{ENV}ASSETS__X__Y": "v"})
    assert not cfg.sources and "x" not in cfg.assets
    assert "env-s3" not in repr(cfg)

    with pytest.raises(IncrementalConfigError) as info:
        load_secrets(project.secrets_file, environ={f"{ENV}SPARK__CONF__fsKey": "env-secret-9"})
    assert f"{ENV}SPARK__CONF__fsKey" in str(info.value) and "env-secret-9" not in str(info.value)
    with pytest.raises(IncrementalConfigError, match="names no secret"):
        load_secrets(project.secrets_file, environ={f"{ENV}DESTINATION__X": "env-secret-9"})


def test_repr_masks_every_value(project):
    project.secrets('[assets.orders]\napi_token = "tok-111"\ndb = { user = "usr-222", port = 5432 }\n'
                    '[spark.conf]\n"spark.hadoop.fs.s3a.secret.key" = "s3-333"\n')
    secrets = load_secrets(project.secrets_file)
    for text in (repr(secrets), str(secrets), f"{secrets}"):
        assert not any(v in text for v in ("tok-111", "usr-222", "5432", "s3-333"))
        assert "api_token" in text and "spark.hadoop.fs.s3a.secret.key" in text and MASK in text
    assert sorted(secrets.values()) == ["s3-333", "tok-111", "usr-222"]


def test_spark_secret_reaches_the_session_conf_not_the_io_manager_config(project):
    project.secrets('[spark.conf]\n"spark.hadoop.fs.s3a.secret.key" = "s3-secret-444"\n')
    io = SparkTableIOManager.from_config(project.path)
    assert io.secrets_path == str(project.secrets_file)
    # what Dagster shows and stores of the resource: its config fields
    assert "s3-secret-444" not in repr(io) and "s3-secret-444" not in str(io.model_dump())
    base = {"spark.hadoop.fs.s3a.secret.key": "from-config", "spark.sql.shuffle.partitions": "2"}
    merged = with_secret_spark_conf(base, io.secrets_path, environ={})
    assert merged == {"spark.hadoop.fs.s3a.secret.key": "s3-secret-444", "spark.sql.shuffle.partitions": "2"}
    env = {f"{ENV}SPARK__CONF__SPARK_HADOOP_FS_S3A_SECRET_KEY": "s3-env-555"}
    assert with_secret_spark_conf(base, io.secrets_path, environ=env)["spark.hadoop.fs.s3a.secret.key"] == "s3-env-555"
    assert with_secret_spark_conf(base, None, environ=env)["spark.hadoop.fs.s3a.secret.key"] == "s3-env-555"
    assert with_secret_spark_conf(base, project.secrets_file.parent / "absent.toml", environ={}) == base


def test_redactor_masks_encodings_and_log_records():
    redactor = Redactor(["ab/c+d", "ab", ""])
    assert redactor.redact("x ab/c+d y ab%2Fc%2Bd z") == f"x {MASK} y {MASK} z"
    assert redactor.redact("plain text") == "plain text" and not Redactor([""])

    records: list[logging.LogRecord] = []
    logger = logging.getLogger("test_secrets." + uuid.uuid4().hex)
    logger.propagate = False
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    with redactor.masking_logs(logger):
        logger.warning("token %s", "ab/c+d")
        try:
            raise ValueError("with ab/c+d")
        except ValueError:
            logger.exception("failed")
    logger.warning("after: ab/c+d")  # the filter is gone again
    assert [r.getMessage().splitlines()[0] for r in records] == [f"token {MASK}", "failed", "after: ab/c+d"]
    assert records[1].exc_info is None and f"ValueError: with {MASK}" in records[1].getMessage()


def test_sensor_probe_gets_secrets_and_its_errors_are_masked(project, instance):
    secret = token()
    project.secrets(f'[assets.sec_sensed]\napi_token = "{secret}"\n')

    @incremental_asset(config_path=project.path)
    def sec_sensed(context: dg.AssetExecutionContext, api_token: str | None = None,
                   ts: Incremental = incremental("ts", initial_value=0)):
        return []

    got = []

    def probe(api_token: str | None = None):
        got.append(api_token)
        if len(got) > 1:
            raise RuntimeError(f"auth failed for {api_token}")
        return 5

    sensor = build_incremental_sensor(sec_sensed, probe)
    result = sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
    assert got == [secret] and len(result.run_requests) == 1
    with pytest.raises(Exception) as info:
        sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
    chain, error = [], info.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    assert any(isinstance(e, RedactedError) for e in chain)
    assert all(secret not in str(e) for e in chain) and MASK in "".join(map(str, chain))


def test_demo_api_requires_its_token_when_started_with_one():
    secret = token()
    server, thread, url = events_api.serve("127.0.0.1", 0, events=20, token=secret)
    try:
        with pytest.raises(events_api.EventsApiError, match="HTTP 401") as info:
            list(events_api.iter_event_pages(url, page_size=10))
        assert secret not in str(info.value)
        with pytest.raises(events_api.EventsApiError, match="HTTP 401"):
            events_api.latest_event_time(url, token="wrong")
        pages = list(events_api.iter_event_pages(url, page_size=10, token=secret))
        assert sum(len(p) for p in pages) == 20
        assert events_api.latest_event_time(url, token=secret) == pages[0][0]["created_at"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
