"""Bad output targets for `plot` and `export` (issue 20): each is refused in one `error:` line, exit 1,
no traceback, and nothing on disk changes: not the run read, not a symlink's target, not a user's file.

plot writes PNGs into a directory: `--out` must be new or empty, not a symlink and not a run being
plotted; without `--out` it redraws one run in place under that run's lock. export (and compare
--markdown, through the same write_output) writes one file: never over the results read, never
through a symlink, never onto a directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from bad_input_cli import assert_one_error_line, invoke

pytest_plugins = ["results_fixtures"]


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root, links not followed: a link's target, a file's bytes, a folder, a FIFO."""
    seen = {}
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                seen[key] = ("link", os.readlink(path))
            elif path.is_dir():
                seen[key] = ("dir",)
            elif path.is_file():
                seen[key] = ("file", path.read_bytes())
            else:  # a FIFO: reading it would wait for a writer
                seen[key] = ("special", path.lstat().st_mode)
    return seen


@pytest.fixture
def place(cpu_run, tmp_path) -> Path:
    """tmp_path holding a copy of the CPU run (run/), a second run (other/) and a user's file."""
    shutil.copytree(cpu_run, tmp_path / "run", symlinks=True)
    shutil.copytree(cpu_run, tmp_path / "other", symlinks=True)
    (tmp_path / "victim.txt").write_text("a user's file")
    return tmp_path


def _link(t: Path, name: str, target: Path) -> Path:
    (t / name).symlink_to(target)
    return t / name


def _dir_with(t: Path, name: str, *entries: str) -> Path:
    (t / name).mkdir()
    for entry in entries:
        (t / name / entry).write_text("kept")
    return t / name


PLOT_CASES = {
    "out-is-the-run": (lambda t: ["plot", t / "run", "--out", t / "run"], "part of the results being read"),
    "out-is-the-run-spelled-with-dot": (lambda t: ["plot", t / "run", "--out", t / "run" / "."], "part of the results"),
    "out-is-the-run-with-dotdot": (lambda t: ["plot", t / "run", "--out", t / "other" / ".." / "run"], "part of"),
    "out-is-the-second-run": (lambda t: ["plot", t / "run", t / "other", "--out", t / "other"], "part of the results"),
    "out-is-the-runs-csv": (lambda t: ["plot", t / "run", "--out", t / "run" / "results.csv"], "part of the results"),
    "out-is-the-runs-env": (lambda t: ["plot", t / "run", "--out", t / "run" / "env.json"], "part of the results"),
    "out-links-to-the-run": (lambda t: ["plot", t / "run", "--out", _link(t, "l", t / "run")], "part of the results"),
    "out-links-to-an-empty-dir": (lambda t: ["plot", t / "run", "--out", _link(t, "l", _dir_with(t, "e"))],
                                  "is a symlink"),
    "out-is-a-dangling-link": (lambda t: ["plot", t / "run", "--out", _link(t, "l", t / "nowhere")], "is a symlink"),
    "out-links-to-a-file": (lambda t: ["plot", t / "run", "--out", _link(t, "l", t / "victim.txt")], "symlink"),
    "out-is-a-file": (lambda t: ["plot", t / "run", "--out", t / "victim.txt"], "is a file"),
    "out-under-a-file": (lambda t: ["plot", t / "run", "--out", t / "victim.txt" / "plots"], "victim.txt"),
    "out-is-a-fifo": (lambda t: (os.mkfifo(t / "fifo"), ["plot", t / "run", "--out", t / "fifo"])[1], "not a directory"),
    "out-holds-a-user-file": (lambda t: ["plot", t / "run", "--out", _dir_with(t, "d", "notes.md")], "not empty"),
    "out-holds-a-hidden-file": (lambda t: ["plot", t / "run", "--out", _dir_with(t, "d", ".keep")], "not empty"),
    "out-holds-old-pictures": (lambda t: ["plot", t / "run", "--out", _dir_with(t, "d", "latency_h4kv2_d32.png")],
                               "not empty"),
    "in-place-while-a-run-holds-the-lock": (lambda t: ((t / "run" / ".attnbench.lock").write_text("1"),
                                                       ["plot", t / "run"])[1], "another attnbench run"),
}

EXPORT_CASES = {
    "out-is-the-csv-read": (lambda t: ["export", t / "run", "--format", "csv", "--out", t / "run" / "results.csv"],
                            "part of the results"),
    "out-is-the-env-json": (lambda t: ["export", t / "run", "--format", "gab", "--out", t / "run" / "env.json"],
                            "part of the results"),
    "out-is-the-parquet": (lambda t: ["export", t / "run", "--format", "md", "--out", t / "run" / "results.parquet"],
                           "part of the results"),
    "out-is-the-run-dir": (lambda t: ["export", t / "run", "--format", "md", "--out", t / "run"], "part of the"),
    "out-links-to-the-csv-read": (lambda t: ["export", t / "run", "--format", "csv", "--out",
                                             _link(t, "l.csv", t / "run" / "results.csv")], "part of the results"),
    "out-links-to-a-user-file": (lambda t: ["export", t / "run", "--format", "md", "--out",
                                            _link(t, "l.md", t / "victim.txt")], "is a symlink"),
    "out-is-a-dangling-link": (lambda t: ["export", t / "run", "--format", "md", "--out", _link(t, "l.md", t / "x")],
                               "is a symlink"),
    "out-is-a-directory": (lambda t: ["export", t / "run", "--format", "gab", "--out", _dir_with(t, "d")],
                           "is a directory"),
    "out-under-a-file": (lambda t: ["export", t / "run", "--format", "gab", "--out", t / "victim.txt" / "b.json"],
                         "cannot write"),
    "out-is-a-fifo-nobody-reads": (lambda t: (os.mkfifo(t / "fifo"), ["export", t / "run", "--format", "md",
                                                                      "--out", t / "fifo"])[1], "cannot write"),
    "unknown-format": (lambda t: ["export", t / "run", "--format", "png", "--out", t / "x.png"], "unknown format"),
    "format-in-capitals": (lambda t: ["export", t / "run", "--format", "MD", "--out", t / "x.md"], "unknown format"),
    "blank-format": (lambda t: ["export", t / "run", "--format", "", "--out", t / "x.md"], "unknown format"),
    "compare-markdown-through-a-link": (lambda t: ["compare", t / "run", t / "other", "--markdown",
                                                   _link(t, "l.md", t / "victim.txt")], "is a symlink"),
}


CASES = {**{f"plot {k}": v for k, v in PLOT_CASES.items()}, **{f"export {k}": v for k, v in EXPORT_CASES.items()}}


@pytest.mark.parametrize("case", sorted(CASES), ids=str)
def test_a_bad_output_target_is_refused_and_nothing_changes(case, place):
    make, message = CASES[case]
    argv = make(place)
    before = snapshot(place)
    assert message in assert_one_error_line(invoke(*argv))
    assert snapshot(place) == before


def test_at_least_twenty_distinct_bad_targets_are_tried():
    assert len(CASES) >= 20
