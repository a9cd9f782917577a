"""The CLI answers at once: help and usage errors import none of torch, pandas, matplotlib, numpy.

Why: they take seconds to import on a small machine, and `attnbench --help` or a mistyped flag
should not wait for them (issue 20). Each command imports what it runs when it runs.

Oracle: `sys.modules` of a fresh interpreter after the invocation (what was actually imported),
and the exit codes of the error convention (cli/common.py: help 0, a usage error 1). No wall-clock
assertion: timing in a test is flaky; the time is measured by hand and reported in the issue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer.main

from attnbench.cli.main import app

HEAVY = ("torch", "pandas", "matplotlib", "numpy")
COMMANDS = sorted(typer.main.get_command(app).commands)

# a bad choice of each kind -> the words its one error line holds
CHOICES = {
    ("kernel", "--strategy", "unified,bogus"): "--strategy: unknown strategy 'bogus'",
    ("kernel", "--kind", "decode,nope"): "--kind: unknown kind 'nope'",
    ("kernel", "--mode", "fast"): "--mode: unknown mode 'fast'",
    ("kernel", "--dtype", "fp8"): "--dtype: unknown dtype 'fp8'",
    ("kernel", "--backend", "fa9"): "--backend: unknown backend 'fa9'",
    ("kernel", "--device", "tpu"): "--device: unknown device 'tpu'",
    ("replay", "t.jsonl", "--mode", "fast"): "--mode: unknown mode 'fast'",
    ("replay", "t.jsonl", "--backend", "fa9"): "--backend: unknown backend 'fa9'",
    ("e2e", "--strategy", "splat"): "--strategy: unknown strategy 'splat'",
    ("e2e", "--dtype", "fp32"): "--dtype: unknown dtype 'fp32'",
    ("verify", "--device", "cuda:x"): "--device: unknown device 'cuda:x'",
    ("kernel", "--bogus"): "--bogus: no such option (see",  # no hint: nothing is alike (click said --out)
    ("kernel", "--tokenz", "8"): "--tokenz: no such option; did you mean --tokens?",
}

# argv -> exit code: help of the app and of every command, then usage errors Typer catches while parsing
INVOCATIONS = {
    ("--help",): 0,
    (): 0,  # bare `attnbench` prints the help
    **{(command, "--help"): 0 for command in COMMANDS},
    ("--bogus",): 1,
    ("bogus-command",): 1,
    ("e2e", "--warmup", "many"): 1,  # not an integer
    ("kernel", "--tokens", "8,x"): 1,  # a list flag's parser
    ("verify", "--heads"): 1,  # a flag without its value
    ("compare",): 1,  # a missing argument
    ("merge", "runs/a"): 1,  # a missing required option
    ("replay",): 1,  # a missing trace
    ("replay", "t.jsonl", "--exact-sample", "x"): 1,  # not an integer
    # a bad choice is refused by the flag's parser, from plain data (kernels/choices.py, workload.py)
    **{argv: 1 for argv in CHOICES},
}

# Runs every invocation in one fresh interpreter, as the console script does, and records after
# each the heavy modules imported so far (they only accumulate: the first one that lists a module
# is the one that imported it).
SCRIPT = """
import contextlib, io, json, sys
from attnbench.cli.main import main
heavy = {heavy!r}
seen = []
for argv in {argvs!r}:
    sys.argv = ["attnbench", *argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    imported = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
    seen.append([list(argv), code, imported, out.getvalue()[:200], err.getvalue()[:200]])
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def answers() -> dict[tuple[str, ...], tuple[int, list[str], str, str]]:
    argvs = [list(argv) for argv in INVOCATIONS]
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY, argvs=argvs)],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 0, done.stderr
    return {tuple(argv): (code, imported, out, err) for argv, code, imported, out, err in json.loads(done.stdout)}


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "120", "TERM": "dumb"}


def test_the_app_has_its_commands():
    assert {"kernel", "backends", "e2e", "run", "compare", "export", "plot", "merge", "verify", "doctor",
            "calibrate", "replay"} <= set(COMMANDS)


@pytest.mark.parametrize("argv", list(INVOCATIONS), ids=lambda argv: " ".join(argv) or "bare")
def test_help_and_usage_errors_import_nothing_heavy(answers, argv):
    code, imported, out, err = answers[argv]
    assert imported == [], f"attnbench {' '.join(argv)} imported {imported[:5]}"
    assert code == INVOCATIONS[argv], (out, err)
    if code == 0:
        assert "Usage" in out
    else:
        assert err.startswith("error: "), err


def test_python_m_attnbench_help_imports_nothing_heavy():
    """The module entry point itself (python -m attnbench), as `-X importtime` sees it."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "attnbench", "--help"],
                          capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert sorted(m for m in imported if m.split(".")[0] in HEAVY) == []
    assert "attnbench.cli.main" in imported


@pytest.mark.parametrize("argv", list(CHOICES), ids=" ".join)
def test_a_bad_choice_is_one_line_naming_the_flag(answers, argv):
    code, imported, out, err = answers[argv]
    assert (code, imported, out) == (1, [], "")
    assert err.startswith("error: ") and CHOICES[argv] in err and len(err.strip().splitlines()) == 1, err


def test_the_plain_backend_names_are_the_registrys():
    """The names --backend is checked against before torch are the registry's own backends."""
    from attnbench.kernels.backends import registry
    from attnbench.kernels.choices import BACKENDS
    from attnbench.kernels.timing import MODES

    assert tuple(registry.REGISTRY)[:len(BACKENDS)] == BACKENDS  # ATTNBENCH_EXTRA_BACKENDS come after them
    assert MODES == ("eager", "graph")


def test_the_bare_command_lists_each_command_by_one_sentence():
    """The command list read as whole paragraphs broken where the docstrings broke them."""
    from attnbench.cli.main import app, first_sentence

    commands = {info.name: info for info in app.registered_commands}
    assert len(commands) == 15
    for name, info in commands.items():
        assert info.short_help == first_sentence(info.callback), name
        assert "\n" not in info.short_help and info.short_help.endswith("."), name
    assert first_sentence(type("C", (), {"__doc__": "Do this.  Then\nthat. More.\n\nLater."})) == "Do this."
