"""The documentation keeps its promises: a short README, no references to files a user does not
have, a command reference that lists every command and flag of the live app, and every page of
docs/ reachable from the site's nav (MkDocs' strict build, run by .ci/run, checks links too)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import typer.main

from attnbench.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
OUTSIDE_REFERENCES = ("KERNELS.md", "../shared")


def load_generator():
    """docs/hooks/cli_reference.py, imported by path (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("cli_reference", DOCS / "hooks" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mentions_outside(paths: list[Path]) -> list[str]:
    """`path: reference` for each file that names a file outside the repository."""
    return [f"{path.relative_to(ROOT)}: {ref}" for path in paths for ref in OUTSIDE_REFERENCES
            if ref in path.read_text(encoding="utf-8")]


def test_readme_is_at_most_250_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_keeps_the_two_commands_that_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    test_command = '.venv/bin/pip install -e ".[test]" && .venv/bin/python -m pytest -q -n auto'
    assert test_command in readme
    assert ".venv/bin/attnbench kernel --heads 32 --dim 128" in readme
    assert ".venv/bin/python -m pytest -q -n auto" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_readme_installs_cpu_torch_before_attnbench():
    """A machine without a GPU must not get the CUDA wheel: the CPU index comes first, then `-e .`."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    cpu_torch = readme.find("--index-url https://download.pytorch.org/whl/cpu")
    assert -1 < cpu_torch < readme.find(".venv/bin/pip install -e . && .venv/bin/attnbench kernel")


def test_readme_says_what_ci_runs():
    """.ci/run installs more than the test extra and builds the site: the README may not say "exactly"."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "exactly this" not in readme
    for what_ci_does, as_the_readme_says in [('pip install -e ".[test,docs]"', '".[test,docs]"'),
                                             ("chromium", "Chromium"), ("plotly.js-basic", "Plotly's"),
                                             ("mkdocs build --strict", "mkdocs build --strict")]:
        assert what_ci_does in ci and as_the_readme_says in readme, what_ci_does


def test_readme_names_the_extra_of_each_command_that_needs_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    extras = re.search(r"\[project.optional-dependencies\](.*?)\n\[", (ROOT / "pyproject.toml").read_text(), re.S)
    for extra in ("rule", "dashboard", "vllm", "flashinfer", "tensorboard", "parquet", "notebook", "docs"):
        assert re.search(rf"^{extra} = ", extras.group(1), re.M), f"pyproject.toml has no [{extra}] extra"
        assert f"[{extra}]" in readme, f"the README does not name the [{extra}] extra"


def test_readme_claims_telemetry_only_on_a_gpu():
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "`summary.md`, `telemetry.csv`" not in readme
    assert "on a GPU `telemetry.csv`" in readme


def test_the_top_level_help_names_the_trace_commands_there_are():
    from typer.testing import CliRunner

    from attnbench.cli import trace

    listing = CliRunner().invoke(app, [], env={"COLUMNS": "250"}).output
    line = next(row for row in listing.splitlines() if " trace " in row)
    named = set(re.findall(r"[a-z][a-z-]+", line.split("Step traces:")[1]))
    assert named == {info.name for info in trace.app.registered_commands}


def test_docs_do_not_mention_files_outside_the_repository():
    paths = [ROOT / "README.md", *DOCS.rglob("*.md"), *DOCS.rglob("*.py")]
    assert mentions_outside(paths) == []


def test_source_does_not_mention_files_outside_the_repository():
    found = mentions_outside(sorted((ROOT / "attnbench").rglob("*.py")))
    assert found == [], ("attnbench/ names files a user does not have (the lanes restructuring "
                         f"attnbench/ remove these; the docs lane does not edit code): {found}")


def test_generated_reference_lists_every_command_and_flag():
    generator = load_generator()
    page = generator.cli_reference_markdown(app)
    root = typer.main.get_command(app)
    assert root.commands, "the app has no commands"
    assert "trace convert" in dict(generator.visible_commands(root)), "a group's subcommands are listed"
    for name, command in generator.visible_commands(root):
        assert f"## `attnbench {name}`" in page, f"command {name} missing from the reference"
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "argument":
                assert f"`{param.name.upper()}`" in page, f"{name}: argument {param.name} missing"
                continue
            for flag in [*param.opts, *param.secondary_opts]:
                assert f"`{flag}`" in page, f"{name}: flag {flag} missing from the reference"


def test_reference_escapes_what_markdown_would_eat():
    generator = load_generator()
    assert generator.escape_markdown("results/<time>-kernel, a*b, x|y") == \
        "results/&lt;time&gt;-kernel, a\\*b, x\\|y"
    assert generator.escape_markdown("`a_b<c>`") == "`a_b<c>`"


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    in_nav = set(re.findall(r":\s*([\w./-]+\.md)\s*$", config, flags=re.MULTILINE))
    generated = {load_generator().PAGE}
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert pages - in_nav == set(), "pages missing from mkdocs.yml's nav"
    assert in_nav - pages - generated == set(), "nav entries without a page"
    assert generated <= in_nav
