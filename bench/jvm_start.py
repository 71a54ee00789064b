"""Driver JVM start: a default JVM against the library's (class archive + C1 + quiet), fresh
processes, alternating.

Each measurement is a new Python process that builds a local session on a temporary Iceberg
warehouse and times (a) the session start, (b) a first tiny job (`spark.range(1000).count()`)
and (c) a first Iceberg CREATE TABLE AS SELECT plus MERGE of one row. "default" builds the same
conf with pyspark's builder; "library" uses `build_spark_session` (see jvm_startup). The first
library process records the archive if there is none yet; it is reported apart.

    python -m bench.jvm_start --repeats 3

Prints ONE JSON line (every process's seconds, medians, ratio library / default for start +
first tiny job, target <= 0.45) and a markdown table on stderr.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile

from bench import common
from bench.compare import REPO

TIMES = ("start", "tiny_job", "iceberg_jobs")

CHILD = """
import json, sys, tempfile, time
from dagster_incremental.spark.session import build_spark_session
from dagster_incremental.spark.session_conf import spark_conf
conf = spark_conf(master="local[*]", catalog="lake", warehouse=tempfile.mkdtemp(),
                  conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
t = time.perf_counter()
if sys.argv[1] == "default":
    from pyspark.sql import SparkSession
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
else:
    spark = build_spark_session(conf)
start = time.perf_counter() - t
t = time.perf_counter()
spark.range(1000).count()
tiny = time.perf_counter() - t
t = time.perf_counter()
spark.sql("CREATE TABLE lake.b.t USING iceberg AS SELECT 1 AS id, 'a' AS v")
spark.sql("MERGE INTO lake.b.t t USING (SELECT 1 AS id, 'b' AS v) s ON t.id = s.id "
          "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
iceberg = time.perf_counter() - t
print(json.dumps({"start": round(start, 3), "tiny_job": round(tiny, 3), "iceberg_jobs": round(iceberg, 3)}))
"""


def measure(kind: str, archive_dir: str) -> dict:
    env = {"DAGSTER_INCREMENTAL_JVM_ARCHIVE_DIR": archive_dir}
    record, _ = common.run_json([sys.executable, "-c", CHILD, kind], REPO, env)
    return record


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    archive_dir = tempfile.mkdtemp(prefix="bench_jvm_archive_")
    recording = measure("library", archive_dir)  # no archive yet: this one records it
    runs: dict[str, list[dict]] = {"default": [], "library": []}
    for i in range(args.repeats):
        for kind in ("default", "library") if i % 2 == 0 else ("library", "default"):
            runs[kind].append(measure(kind, archive_dir))
    medians = {k: {m: round(statistics.median(r[m] for r in v), 3) for m in TIMES} for k, v in runs.items()}
    first = {k: round(v["start"] + v["tiny_job"], 3) for k, v in medians.items()}
    with_iceberg = {k: round(v["start"] + v["iceberg_jobs"], 3) for k, v in medians.items()}
    record = {
        "bench": "jvm_start", "repeats": args.repeats, "runs": runs, "recording_run": recording,
        "medians": medians, "start_plus_tiny_job": first,
        "ratio": common.ratio(first["library"], first["default"]), "target": 0.45,
        "start_plus_iceberg_jobs": with_iceberg,
        "ratio_iceberg": common.ratio(with_iceberg["library"], with_iceberg["default"]),
        **common.machine(),
    }
    rows = [f"| {k} | {v['start']} s | {v['tiny_job']} s | {v['iceberg_jobs']} s |" for k, v in medians.items()]
    common.log(
        "| driver JVM (median of %d) | session start | first tiny job | first CTAS + MERGE |\n|---|---|---|---|\n%s\n\n"
        "start + first tiny job: library / default = %s (target <= 0.45); with the Iceberg jobs: %s"
        % (args.repeats, "\n".join(rows), record["ratio"], record["ratio_iceberg"])
    )
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
