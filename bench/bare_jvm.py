"""What a fresh process pays before a local merge can commit: a Spark session against a bare JVM.

A local change run (dicts, pages, Arrow) needs no Spark job: it needs the Iceberg Table object to
read the target's metadata and commit one RowDelta. Today that object comes through a
SparkSession (JVM + SparkContext + catalog). This measures, in fresh processes alternating, the
time from the process start to holding the loaded table and its current snapshot:

- "session": the library's `build_spark_session` (class archive, C1, quiet), then the table
  through the Spark catalog (`iceberg_table`), as a change run does today;
- "bare": a plain JVM started by py4j with the same jars on its class path (no SparkContext), then
  Iceberg's own HadoopCatalog loading the same table: what a change run would pay without Spark.

    python -m bench.bare_jvm --repeats 3

The table is created once by a setup process (untimed). Prints ONE JSON line (every process's
seconds, medians, the ratio bare / session) and a markdown table on stderr.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile

from bench import common
from bench.compare import REPO

SETUP = """
import sys
from dagster_incremental.spark.session import build_spark_session
from dagster_incremental.spark.session_conf import spark_conf
spark = build_spark_session(spark_conf(master="local[1]", catalog="lake", warehouse=sys.argv[1],
                                       conf={"spark.ui.enabled": "false"}))
spark.sql("CREATE TABLE lake.b.t USING iceberg AS SELECT id, id * 2 AS v FROM range(1000)")
spark.stop()
"""

CHILD = """
import glob, json, os, sys, time
t0 = time.perf_counter()
warehouse = sys.argv[2]
if sys.argv[1] == "session":
    from dagster_incremental.spark.iceberg.commit import iceberg_table
    from dagster_incremental.spark.session import build_spark_session
    from dagster_incremental.spark.session_conf import spark_conf
    from dagster_incremental.spark.table_ref import TableRef
    spark = build_spark_session(spark_conf(master="local[*]", catalog="lake", warehouse=warehouse,
                                           conf={"spark.ui.enabled": "false"}))
    jvm_up = time.perf_counter() - t0
    table = iceberg_table(spark, TableRef.parse("lake.b.t"))
else:
    import pyspark
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
    from dagster_incremental.spark.iceberg.session_setup import iceberg_runtime_jar
    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "*.jar")) + [iceberg_runtime_jar()]
    port = launch_gateway(classpath=os.pathsep.join(jars), die_on_exit=True,
                          javaopts=["-XX:TieredStopAtLevel=1"])
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
    jvm = gateway.jvm
    jvm_up = time.perf_counter() - t0
    catalog = jvm.org.apache.iceberg.hadoop.HadoopCatalog(jvm.org.apache.hadoop.conf.Configuration(), warehouse)
    table = catalog.loadTable(jvm.org.apache.iceberg.catalog.TableIdentifier.parse("b.t"))
snapshot = table.currentSnapshot().snapshotId()
total = time.perf_counter() - t0
print(json.dumps({"jvm_up": round(jvm_up, 3), "table_loaded": round(total, 3), "snapshot": snapshot}))
"""


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    warehouse = tempfile.mkdtemp(prefix="bench_bare_jvm_")
    try:
        common.run_json([sys.executable, "-c", SETUP, warehouse], REPO)
        runs: dict[str, list[dict]] = {"session": [], "bare": []}
        walls: dict[str, list[float]] = {"session": [], "bare": []}
        for i in range(args.repeats):
            for kind in ("session", "bare") if i % 2 == 0 else ("bare", "session"):
                record, wall = common.run_json([sys.executable, "-c", CHILD, kind, warehouse], REPO)
                runs[kind].append(record)
                walls[kind].append(wall)
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)
    medians = {k: {m: round(statistics.median(r[m] for r in v), 3) for m in ("jvm_up", "table_loaded")}
               for k, v in runs.items()}
    wall = {k: round(statistics.median(v), 3) for k, v in walls.items()}
    record = {
        "bench": "bare_jvm", "repeats": args.repeats, "runs": runs, "medians": medians, "process_wall_s": wall,
        "ratio_table_loaded": common.ratio(medians["bare"]["table_loaded"], medians["session"]["table_loaded"]),
        "ratio_process_wall": common.ratio(wall["bare"], wall["session"]),
        **common.machine(),
    }
    rows = [f"| {k} | {v['jvm_up']} s | {v['table_loaded']} s | {wall[k]} s |" for k, v in medians.items()]
    common.log("| fresh process (median of %d) | JVM up | Iceberg table loaded | whole process |\n|---|---|---|---|\n%s\n\n"
               "bare / session: table loaded %s, whole process %s"
               % (args.repeats, "\n".join(rows), record["ratio_table_loaded"], record["ratio_process_wall"]))
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
