"""SQL injection through the asset layer: identifiers are quoted everywhere, values are never SQL.

Rows whose column names (primary key, cursor, merge key, plain columns) and values are crafted to
break out of quoting are loaded through `@incremental_asset` + `SparkTableIOManager` with every
disposition (append, replace, delete-insert, upsert, scd2), over an incremental run, an update run
and a window backfill (the window-replace MERGE). Afterwards the table holds exactly those names
and values, byte for byte, and a victim table in the same namespace is intact.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest

from dagster_incremental import Incremental, incremental, incremental_asset
from attack_support import DISPOSITIONS, failure_text, io_manager_for, materialize, write_config
from instances import fresh_instance

pytestmark = pytest.mark.spark

# Identifiers: a backtick (the Spark quote character), SQL comments, statement separators, a dot
# (struct access if unquoted), a named-parameter marker and quotes.
KEY = "id`; DROP TABLE victim; --"
CURSOR = "upd`at) OR (1=1 -- x"
AMOUNT = "amount', 'x'); DELETE FROM victim WHERE ('1'='1"
DOTTED = "a.b"
PARAM = ":di_window_start"

EVIL_VALUES = [
    "'); DROP TABLE victim; --",
    "`; DELETE FROM victim; --",
    "\\'; SELECT 1; --",
    ":di_window_end",
    "${spark.sql.warehouse.dir}",
    "?",
    "\u0000 nul and \u2028 separator",
]


def _rows(version: int) -> list[dict]:
    out = []
    for i, evil in enumerate(EVIL_VALUES, start=1):
        out.append({
            KEY: f"k{i}-{evil}",
            CURSOR: version * 100 + i,
            AMOUNT: f"{evil} v{version}",
            DOTTED: evil,
            PARAM: i * version,
        })
    return out


@pytest.fixture(scope="module")
def env(spark, spark_warehouse, tmp_path_factory):
    # The namespace itself is hostile too (config text reaches SQL as an identifier).
    namespace = "sec` ; DROP TABLE x; -- " + uuid.uuid4().hex[:6]
    folder = tmp_path_factory.mktemp("security")
    escaped = namespace.replace("\\", "\\\\").replace('"', '\\"')
    config = folder / "config.toml"
    config.write_text(
        f'[destination]\ncatalog = "lake"\nnamespace = "{escaped}"\nwarehouse = "{spark_warehouse}"\n'
    )
    io = io_manager_for(spark_warehouse, namespace)
    victim_ref = io.table_name(dg.AssetKey("victim"))
    victim = victim_ref.sql
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {victim_ref.namespace_sql}")
    spark.sql(f"CREATE TABLE {victim} (x INT) USING iceberg")
    spark.sql(f"INSERT INTO {victim} VALUES (1), (2), (3)")
    with fresh_instance() as instance:
        yield instance, io, str(config), victim


def _asset(name: str, config: str, strategy: str, feed: dict):
    default = incremental(CURSOR, initial_value=0)

    def body(context: dg.AssetExecutionContext, cursor: Incremental = default):
        return list(feed["rows"])

    body.__name__ = name
    merge_key = AMOUNT if strategy == "delete-insert" else None
    return incremental_asset(
        name=name, primary_key=KEY, merge_key=merge_key, write_disposition=DISPOSITIONS[strategy], config_path=config
    )(body)


def _table(spark, io, name: str, scd2: bool = False) -> list[tuple]:
    frame = spark.table(io.table_name(dg.AssetKey(name)).sql)
    if scd2:
        frame = frame.where(frame["_valid_to"].isNull())
    cols = [KEY, CURSOR, AMOUNT, DOTTED, PARAM]
    got = [tuple(r[c] for c in cols) for r in frame.select(*[f"`{c.replace('`', '``')}`" for c in cols]).collect()]
    return sorted(got)


def _expected(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(r[c] for c in (KEY, CURSOR, AMOUNT, DOTTED, PARAM)) for r in rows)


@pytest.mark.parametrize("strategy", ["append", "replace", "delete-insert", "upsert", "scd2"])
def test_injection_in_names_and_values_is_stored_verbatim(strategy, spark, env):
    instance, io, config, victim = env
    name = "inj_" + strategy.replace("-", "_")
    feed = {"rows": _rows(1)}
    asset = _asset(name, config, strategy, feed)

    first = materialize(asset, instance, io)
    assert first.success, failure_text(first)
    assert _table(spark, io, name, strategy == "scd2") == _expected(feed["rows"])
    cols = spark.table(io.table_name(dg.AssetKey(name)).sql).columns
    assert {KEY, CURSOR, AMOUNT, DOTTED, PARAM} <= set(cols)

    # second run: every key changes (update / new versions / appended rows)
    feed["rows"] = _rows(2)
    second = materialize(asset, instance, io)
    assert second.success, failure_text(second)
    if strategy == "append":
        expected = _expected(_rows(1) + _rows(2))
    else:
        expected = _expected(_rows(2))
    assert _table(spark, io, name, strategy == "scd2") == expected
    if strategy == "scd2":
        assert spark.table(io.table_name(dg.AssetKey(name)).sql).count() == 2 * len(EVIL_VALUES)

    assert sorted(r.x for r in spark.table(victim).collect()) == [1, 2, 3], "the victim table was touched"
    if strategy not in ("upsert", "scd2"):
        return  # the window replace is one code path for every disposition but scd2: run it once

    # a stateless window backfill: the window MERGE with the hostile cursor column (scd2: a
    # merge of the window's rows; with no merge_key the batch is the full snapshot, as in dlt)
    feed["rows"] = [dict(r, **{AMOUNT: r[AMOUNT] + " backfilled"}) for r in _rows(2)]
    backfill = materialize(asset, instance, io, run_config={"ops": {name: {"config": {"initial_value": "200", "end_value": "203"}}}})
    assert backfill.success, failure_text(backfill)
    in_window = [r for r in feed["rows"] if 200 <= r[CURSOR] < 203]
    outside = [r for r in _rows(2) if not 200 <= r[CURSOR] < 203]
    expected = _expected(in_window if strategy == "scd2" else outside + in_window)
    assert _table(spark, io, name, strategy == "scd2") == expected

    assert sorted(r.x for r in spark.table(victim).collect()) == [1, 2, 3], "the victim table was touched"
    assert spark.catalog.tableExists(victim)


def test_a_rest_catalogs_credential_and_token_never_show_in_its_settings_repr():
    """A REST catalog's settings object may reach a log line or a traceback: its secrets stay out."""
    from dagster_incremental.spark.iceberg.rest_catalog import RestCatalogConf

    key = "spark.sql.catalog.shop"
    conf = {key: "org.apache.iceberg.spark.SparkCatalog", f"{key}.type": "rest", f"{key}.uri": "http://127.0.0.1:1",
            f"{key}.credential": "client:s3cr3t-credential", f"{key}.token": "s3cr3t-token"}
    settings = RestCatalogConf.of(conf, "shop")
    assert settings is not None and settings.credential == "client:s3cr3t-credential"
    assert "s3cr3t" not in repr(settings) and "s3cr3t" not in str(settings)


# -- secrets of a run's process ----------------------------------------------------------------------


def _tree(root: int) -> set[int]:
    """`root` and every process descending from it, from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # ended meanwhile
        parents[int(stat.parent.name)] = int(text.rsplit(")", 1)[1].split()[1])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


Process = tuple[int, str]  # (pid, start time): a pid alone may name another process later


def _started(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of `pid` from /proc, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], fields[19]


def _running(process: Process) -> bool:
    """Whether that very process still runs (not exited, not a pid taken since by another)."""
    now = _started(process[0])
    return now is not None and now[0] != "Z" and now[1] == process[1]


def _command_lines(pids: set[int]) -> dict[Process, str]:
    """Each live process's command line; an exited one not yet reaped reads as empty and is left out."""
    out = {}
    for pid in pids:
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        started = _started(pid)
        if line and started is not None:
            out[(pid, started[1])] = line
    return out


def _run_watching(command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess, dict[Process, str]]:
    """Run `command`, reading the command line of each process of its tree every few ms; every
    line a process showed is kept (a shell that execs java shows two, an exited JVM none)."""
    seen: dict[Process, str] = {}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                text=True, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                for process, line in _command_lines(_tree(proc.pid)).items():
                    if line not in seen.get(process, ""):
                        seen[process] = seen.get(process, "") + "\n" + line
                time.sleep(0.02)
        finally:
            left = _tree(proc.pid) - {proc.pid} if proc.poll() is None else set()
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read()), seen


def test_spark_secrets_reach_the_session_but_no_command_line_log_or_event_and_the_jvm_ends_with_the_run(tmp_path):
    """secrets.toml's [spark.conf] credentials (a catalog property and an S3A key) while a run
    goes: in no command line of the run's process tree (its JVM included: `ps` shows those to
    every local user), no output, no stored event, no file; the session holds them; and the
    driver JVM has exited when the run's process has."""
    catalog_secret, s3a_secret = "cat-" + uuid.uuid4().hex, "s3a-" + uuid.uuid4().hex
    (tmp_path / "config.toml").write_text(
        f'[spark]\nmaster = "local[1]"\n[spark.conf]\n"spark.ui.enabled" = "false"\n'
        f'[destination]\ncatalog = "lake"\nnamespace = "sec"\nwarehouse = "{tmp_path / "warehouse"}"\n')
    (tmp_path / "secrets.toml").write_text(
        f'[spark.conf]\n"spark.sql.catalog.lake.s3.secret-access-key" = "{catalog_secret}"\n'
        f'"spark.hadoop.fs.s3a.secret.key" = "{s3a_secret}"\n')
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_INCREMENTAL")}
    env.update(DAGSTER_HOME=str(home), SECRET_CONFIG=str(tmp_path / "config.toml"), SPARK_LOCAL_IP="127.0.0.1",
               SECRET_EVENTS=str(tmp_path / "events.txt"), DAGSTER_INCREMENTAL_JVM_ARCHIVE="off")
    done, seen = _run_watching([sys.executable, str(Path(__file__).parent / "secret_runner.py")], env, tmp_path, 400)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    # The driver JVM is the process that PySpark starts as `spark-class ...SparkSubmit --conf ...`
    # and that then execs java with the same conf: its line is seen under one name or the other
    # (reading a starting JVM's command line can wait until it has exited), and both carry its conf.
    jvms = {process for process, line in seen.items() if "SparkSubmit" in line}
    assert jvms, "the run started no driver JVM, so it proves nothing"
    assert not [process for process in jvms if _running(process)], "the driver JVM outlived its run"
    report = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    assert report == {"success": True, "rows": 3, "held": {"spark.sql.catalog.lake.s3.secret-access-key": True,
                                                           "spark.hadoop.fs.s3a.secret.key": True}}
    for secret in (catalog_secret, s3a_secret):
        assert not [process for process, line in seen.items() if secret in line], "a secret is on a command line"
        assert secret not in done.stdout + done.stderr
        assert secret not in (tmp_path / "events.txt").read_text()
        stored = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "secrets.toml"
                  and secret.encode() in p.read_bytes()]
        assert stored == []
