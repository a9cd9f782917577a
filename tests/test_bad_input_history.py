"""Bad input to `history add`, `history list`, `dashboard` and `export --format bmf`: one error line,
exit 1, no traceback, and nothing written or changed (the run, the history and --out are hashed
before and after)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from bad_input_cli import assert_one_error_line, invoke
from history_fixtures import EXAMPLE, make_runs

pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
pytest.importorskip("ruptures", reason="the dashboard extra (ruptures) is not installed")


@pytest.fixture
def world(tmp_path):
    """Two runs, a history holding the first, and an empty place for a site."""
    runs = [path for path, _, _ in make_runs(tmp_path / "runs", runs=2, step_at=99)[:2]]
    assert invoke("history", "add", runs[0], "--history", tmp_path / "history").exit_code == 0
    return tmp_path, runs


def state(root: Path) -> dict:
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink()
                                       else os.readlink(p) if p.is_symlink() else "dir")
            for p in sorted(root.rglob("*"))}


def edit_run(run: Path, name: str, text: str) -> None:
    (run / name).write_text(text)


def runs_elsewhere(tmp_path: Path) -> None:
    """history/runs moved outside the history, a link left in its place (issue 37: add wrote through it)."""
    (tmp_path / "history" / "runs").rename(tmp_path / "elsewhere")
    (tmp_path / "history" / "runs").symlink_to(tmp_path / "elsewhere")


def entry_elsewhere(tmp_path: Path) -> None:
    """One entry's folder moved outside the history, a link left in its place."""
    entry = next((tmp_path / "history" / "runs").iterdir())
    entry.rename(tmp_path / "elsewhere")
    entry.symlink_to(tmp_path / "elsewhere")


CASES = {
    # name: (what to do to the world first, the command's arguments, what the error names)
    "run missing": (None, lambda t, r: ["history", "add", t / "nope", "--history", t / "history"], "RUN"),
    "run is a file": (None, lambda t, r: ["history", "add", r[1] / "env.json", "--history", t / "history"], "RUN"),
    "run lacks env.json": (lambda t, r: (r[1] / "env.json").unlink(),
                           lambda t, r: ["history", "add", r[1], "--history", t / "history"], "env.json"),
    "results.csv broken": (lambda t, r: edit_run(r[1], "results.csv", "kind,median_ms\ndecode,abc\n"),
                           lambda t, r: ["history", "add", r[1], "--history", t / "history"], "RUN"),
    "env.json not json": (lambda t, r: edit_run(r[1], "env.json", "{"),
                          lambda t, r: ["history", "add", r[1], "--history", t / "history"], "env.json"),
    "no commit anywhere": (lambda t, r: edit_run(r[1], "env.json", json.dumps({"timestamp": "2026-01-01T00:00:00"})),
                           lambda t, r: ["history", "add", r[1], "--history", t / "history"], "--commit"),
    "example with no commit": (None, lambda t, r: ["history", "add", EXAMPLE, "--history", t / "history"], "--commit"),
    "bad --date": (None, lambda t, r: ["history", "add", r[1], "--history", t / "history", "--date", "yesterday"],
                   "--date"),
    "history is a file": (None, lambda t, r: ["history", "add", r[1], "--history", r[1] / "env.json"], "--history"),
    "history is a symlink": (lambda t, r: (t / "link").symlink_to(t / "history"),
                             lambda t, r: ["history", "add", r[1], "--history", t / "link"], "symlink"),
    "history runs is a symlink": (lambda t, r: runs_elsewhere(t),
                                  lambda t, r: ["history", "add", r[1], "--history", t / "history"], "symlink"),
    "history entry is a symlink": (lambda t, r: entry_elsewhere(t),
                                   lambda t, r: ["history", "add", r[0], "--history", t / "history", "--replace"],
                                   "symlink"),
    "dashboard of a history with a link": (lambda t, r: entry_elsewhere(t),
                                           lambda t, r: ["dashboard", t / "history", "--out", t / "site"], "symlink"),
    "dashboard out is a symlink": (lambda t, r: (t / "elsewhere").mkdir() or (t / "site").symlink_to(t / "elsewhere"),
                                   lambda t, r: ["dashboard", t / "history", "--out", t / "site"], "symlink"),
    "history not a history": (lambda t, r: (t / "other").mkdir() or (t / "other" / "x.txt").write_text("mine"),
                              lambda t, r: ["history", "add", r[1], "--history", t / "other"], "index.json"),
    "index not json": (lambda t, r: (t / "history" / "index.json").write_text("[1,"),
                       lambda t, r: ["history", "add", r[1], "--history", t / "history"], "index.json"),
    "index wrong format": (lambda t, r: (t / "history" / "index.json").write_text('{"entries": 3}'),
                           lambda t, r: ["history", "list", "--history", t / "history"], "index.json"),
    "index entry id escapes": (lambda t, r: (t / "history" / "index.json").write_text(json.dumps(
                                   {"format": "attnbench-history/1", "entries": [
                                       {"id": "../x", "commit": "a", "date": "2026-01-01", "gpu": "g"}]})),
                               lambda t, r: ["history", "list", "--history", t / "history"], "id"),
    "duplicate": (None, lambda t, r: ["history", "add", r[0], "--history", t / "history"], "--replace"),
    "history inside the run": (None, lambda t, r: ["history", "add", r[1], "--history", r[1] / "h"], "inside"),
    "list missing history": (None, lambda t, r: ["history", "list", "--history", t / "nope"], "--history"),
    "dashboard missing history": (None, lambda t, r: ["dashboard", t / "nope", "--out", t / "site"], "HISTORY"),
    "dashboard empty history": (lambda t, r: (t / "empty").mkdir(),
                                lambda t, r: ["dashboard", t / "empty", "--out", t / "site"], "no runs"),
    "dashboard out not empty": (lambda t, r: (t / "site").mkdir() or (t / "site" / "mine.html").write_text("x"),
                                lambda t, r: ["dashboard", t / "history", "--out", t / "site"], "--out"),
    "dashboard out is a file": (None, lambda t, r: ["dashboard", t / "history", "--out", r[1] / "env.json"], "--out"),
    "dashboard out inside history": (None, lambda t, r: ["dashboard", t / "history", "--out", t / "history" / "s"],
                                     "--out"),
    "dashboard penalty zero": (None, lambda t, r: ["dashboard", t / "history", "--out", t / "site", "--penalty", "0"],
                               "--penalty"),
    "dashboard penalty nan": (None, lambda t, r: ["dashboard", t / "history", "--out", t / "site", "--penalty", "nan"],
                              "--penalty"),
    "dashboard min-change words": (None, lambda t, r: ["dashboard", t / "history", "--out", t / "site",
                                                       "--min-change", "lots"], "--min-change"),
    "dashboard entry corrupted": (lambda t, r: next((t / "history" / "runs").iterdir()).joinpath(
                                      "results.csv").write_text("kind,median_ms,verdict\ndecode,-1,pass\n"),
                                  lambda t, r: ["dashboard", t / "history", "--out", t / "site"], "HISTORY"),
    "bmf of a missing run": (None, lambda t, r: ["export", t / "nope", "--format", "bmf"], "RESULTS"),
    "bmf over its input": (None, lambda t, r: ["export", r[1], "--format", "bmf", "--out", r[1] / "results.csv"],
                           "--out"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_error_line_and_changes_nothing(world, name):
    tmp_path, runs = world
    prepare, arguments, named = CASES[name]
    if prepare:
        prepare(tmp_path, runs)
    before = state(tmp_path)
    result = invoke(*arguments(tmp_path, runs))
    assert_one_error_line(result, named)
    assert state(tmp_path) == before
