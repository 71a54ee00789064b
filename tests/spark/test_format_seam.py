"""The two table formats are siblings behind one seam (spark/table_format.py): outside
spark/iceberg/, spark/delta/ and spark/destination.py (the one place that picks a format), no
code asks which format it is dealing with; each format answers for itself."""

from __future__ import annotations

import ast
from pathlib import Path

from dagster_incremental.spark import delta, iceberg
from dagster_incremental.spark.delta.tables import DeltaTables
from dagster_incremental.spark.iceberg.tables import IcebergTables

PACKAGE = Path(__file__).resolve().parents[2] / "dagster_incremental"
FORMAT_HOMES = ("spark/iceberg/", "spark/delta/", "spark/destination.py")


def _format_branches(tree: ast.AST) -> list[str]:
    """Comparisons with "iceberg"/"delta", `location is (not) None`, isinstance with a format's class."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) and o.value in ("iceberg", "delta") for o in operands):
                found.append(ast.unparse(node))
            elif "location" in ast.unparse(node.left) and any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
                found.append(ast.unparse(node))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" and len(node.args) == 2:
            if any(name in ast.unparse(node.args[1]) for name in ("Iceberg", "Delta")):
                found.append(ast.unparse(node))
    return found


def test_no_module_outside_the_formats_branches_on_the_format():
    branches = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if not relative.startswith(FORMAT_HOMES):
            if found := _format_branches(ast.parse(path.read_text())):
                branches[relative] = found
    assert branches == {}


def test_the_walk_finds_a_branch_when_there_is_one():
    assert _format_branches(ast.parse('if fmt == "delta": pass\nif t.location is not None: pass')) == [
        "fmt == 'delta'", "t.location is not None"]


def test_each_format_says_what_its_catalog_is_to_the_ui():
    rest = {"spark.sql.catalog.lake.type": "rest"}
    jdbc = {"spark.sql.catalog.lake.type": "jdbc", "spark.sql.catalog.lake.uri": "jdbc:postgresql://db/cat"}
    assert iceberg.catalog_kinds(rest, "lake") == {"rest"}
    assert iceberg.catalog_kinds(jdbc, "lake") == {"postgres"}
    assert iceberg.catalog_kinds({}, "lake") == set()
    assert delta.catalog_kinds(rest, "lake") == set()


def test_each_format_names_its_storage_and_what_to_do_without_a_file_system():
    conf = {"spark.sql.catalog.lake.type": "hadoop", "spark.sql.catalog.lake.warehouse": "s3://bucket/wh"}
    found = IcebergTables(lambda: conf).storage("lake", conf, "/local/default")
    assert (found.catalog, found.kind, found.warehouse) == ("lake", "hadoop", "s3://bucket/wh")
    assert found.no_file_system.startswith("s3:// paths, and a hadoop catalog keeps its tables through one")
    assert '"spark.sql.catalog.lake.io-impl" = "org.apache.iceberg.aws.s3.S3FileIO"' in found.no_file_system
    delta_found = DeltaTables(lambda: {}, "/wh/delta").storage("lake", {}, "s3a://bucket/delta")
    assert (delta_found.catalog, delta_found.kind, delta_found.warehouse) == ("spark_catalog", "delta", "s3a://bucket/delta")
    assert "org.apache.hadoop:hadoop-aws" in delta_found.no_file_system
    assert found.where == "catalog 'lake' (type hadoop, warehouse s3://bucket/wh)"


def test_each_format_brings_its_own_session_conf():
    user = {"spark.jars": "/mine.jar"}
    ice = iceberg.session_conf(user, "lake", "/wh")
    assert ice["spark.sql.extensions"].endswith("IcebergSparkSessionExtensions")
    assert ice["spark.sql.catalog.lake.warehouse"] == "/wh" and "spark.jars" not in ice
    dlt = delta.session_conf(user, "lake", "/wh")
    assert dlt["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog") and "spark.jars" not in dlt
