"""A change run on the lake: object storage behind a REST catalog, against the local default
and against dagster-iceberg on the same catalog and bucket, in one sitting.

One S3 server with an Iceberg REST catalog (SeaweedFS's `weed mini`, as the tests start it) on
127.0.0.1 for the whole sitting; each system in a fresh process per round, in the order
local, rest, dgi (reversed every other round), each a first run of `--rows` orders and one
change run of `--changes` (half updates, half new ids) into that table:

  local   `python -m bench.orders --runs 2 --no-phases` on the default (a Hadoop catalog on the
          local disk)
  rest    the same on the REST catalog over S3 (`--lake`: Iceberg's S3FileIO with the runtime +
          AWS bundle jars of tests/maven_jars.py; the in-process writer's Parquet through pyarrow's S3)
  dgi     bench/lake_dgi.py (dagster-iceberg's PyArrow IO manager, upsert on id; /tmp/peer-dgi)
          on the same REST catalog and bucket

    python -m bench.lake --rows 1000000 --changes 10000 --rounds 2

Seconds are each run's `dg.materialize` in a warm process (the Spark session, for ours, started
before run 0). Prints ONE JSON line (every run, medians over rounds, ratios of the change run:
rest / local and rest / dgi) and a markdown table on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from bench import common

REPO = Path(__file__).resolve().parent.parent
DGI_PYTHON = "/tmp/peer-dgi/bin/python"
SYSTEMS = ("local", "rest", "dgi")


def lake_file(folder: Path, server, jars: list[str], system: str) -> Path:
    """The REST catalog over S3 as bench.orders (`spark_config`) and pyiceberg (`pyiceberg`) take it."""
    prefix = "spark.sql.catalog.lake"
    namespace = f"bench_{system}_{uuid.uuid4().hex[:6]}"
    s3 = {"s3.endpoint": server.s3_endpoint, "s3.path-style-access": "true"}
    spark = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "rest",
             f"{prefix}.uri": server.catalog_uri, f"{prefix}.warehouse": server.warehouse,
             f"{prefix}.credential": server.credential, f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
             f"{prefix}.client.region": server.region, **{f"{prefix}.{k}": v for k, v in s3.items()},
             "spark.jars": ",".join(jars)}
    pyiceberg = {"type": "rest", "uri": server.catalog_uri, "warehouse": server.warehouse,
                 "credential": server.credential, "s3.region": server.region,
                 "s3.access-key-id": server.access_key_id, "s3.secret-access-key": server.secret_access_key, **s3}
    path = folder / f"{namespace}.json"
    path.write_text(json.dumps({"catalog": "lake", "namespace": namespace, "warehouse": server.warehouse,
                                "spark_config": spark, "pyiceberg": pyiceberg}))
    return path


def run_system(system: str, args, folder: Path, server, jars: list[str]) -> dict:
    env = {**os.environ, **server.aws_env(), "SPARK_LOCAL_IP": "127.0.0.1"}
    sizes = ["--rows", str(args.rows), "--changes", str(args.changes), "--runs", "2"]
    if system == "dgi":
        env["BENCH_LAKE"] = str(lake_file(folder, server, jars, system))
        command = [args.dgi_python, str(REPO / "bench" / "lake_dgi.py"), *sizes]
    else:
        command = [sys.executable, "-m", "bench.orders", *sizes, "--no-phases"]
        if system == "rest":
            command += ["--lake", str(lake_file(folder, server, jars, system))]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{done.stderr[-4000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    expected = args.rows + args.changes - args.changes // 2
    if found["table_rows"] != expected:
        raise RuntimeError(f"{system} ended with {found['table_rows']} rows, not {expected}")
    return {"first": found["seconds"][0], "change": found["seconds"][1]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dgi-python", default=DGI_PYTHON)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests"))
    from maven_jars import s3_jars
    from s3_server import s3_server

    jars = s3_jars()
    if jars is None:
        raise SystemExit("the Iceberg runtime and AWS bundle jars are not in ~/.m2: run .ci/run's mvn steps")
    runs: dict[str, list[dict]] = {s: [] for s in SYSTEMS}
    with s3_server() as server, tempfile.TemporaryDirectory(prefix="bench_lake_") as folder:
        for round_ in range(args.rounds):
            for system in SYSTEMS if round_ % 2 == 0 else reversed(SYSTEMS):
                runs[system].append(run_system(system, args, Path(folder), server, jars))
                common.log(f"round {round_} {system}: {runs[system][-1]}")
    medians = {s: {k: round(statistics.median(r[k] for r in found), 3) for k in ("first", "change")}
               for s, found in runs.items()}
    ratios = {"change rest/local": round(medians["rest"]["change"] / medians["local"]["change"], 2),
              "change rest/dgi": round(medians["rest"]["change"] / medians["dgi"]["change"], 2),
              "first rest/local": round(medians["rest"]["first"] / medians["local"]["first"], 2),
              "first rest/dgi": round(medians["rest"]["first"] / medians["dgi"]["first"], 2)}
    common.log("| system | first run (s) | change run (s) |\n|---|---|---|")
    for system in SYSTEMS:
        common.log(f"| {system} | {medians[system]['first']} | {medians[system]['change']} |")
    record = {"bench": "lake", "rows": args.rows, "changes": args.changes, "rounds": args.rounds, "runs": runs,
              "medians": medians, "ratios": ratios, **common.machine()}
    common.emit(record)
    return record


if __name__ == "__main__":
    main()
