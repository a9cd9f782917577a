"""Bad inputs for plot, export, compare and merge on an atlas run (issue 22): each ends in one
`error:` line, exit 1, no traceback, and changes nothing on disk (the atlas, the run beside it).
A damaged atlas is given to each of plot, export and compare (as NEW, beside a whole one)."""

from __future__ import annotations

import json

import pytest
from bad_input_cli import assert_one_error_line, invoke

pytest_plugins = ["atlas_fixtures"]


def _env(atlas, text):
    (atlas / "env.json").write_text(text)


def _env_ranges(atlas, **ranges):
    env = json.loads((atlas / "env.json").read_text())
    for axis, value in ranges.items():
        env["atlas"]["axes"][axis]["range"] = value
    _env(atlas, json.dumps(env))


def _cells(atlas, edit):
    path = atlas / "cells.csv"
    path.write_text(edit(path.read_text()))


DAMAGE = {  # name: (how the atlas copy is damaged, what the error names)
    "no cells.csv": (lambda a: (a / "cells.csv").unlink(), "cells.csv"),
    "no crossovers.csv": (lambda a: (a / "crossovers.csv").unlink(), "crossovers.csv"),
    "no results.csv": (lambda a: (a / "results.csv").unlink(), "results.csv"),
    "env.json not JSON": (lambda a: _env(a, "{not json"), "env.json"),
    "env.json not an object": (lambda a: _env(a, "[1, 2]"), "env.json"),
    "env.json without atlas": (lambda a: _env(a, "{}"), "env.json"),
    "env.json without axes": (lambda a: _env(a, '{"atlas": {}}'), "env.json"),
    "env.json range not numbers": (lambda a: _env_ranges(a, tokens="4:x"), "env.json"),
    "env.json every axis fixed": (lambda a: _env_ranges(a, tokens="4", decode_share="1"), "env.json"),
    "cells.csv header only": (lambda a: _cells(a, lambda t: t.splitlines()[0] + "\n"), "cells.csv"),
    "cells.csv without winner": (lambda a: _cells(a, lambda t: t.replace(",winner,", ",champion,", 1)), "winner"),
    "cells.csv coordinate not a number": (lambda a: _cells(a, lambda t: t.replace("\n1.0,", "\nmany,", 1)), "row"),
    "cells.csv empty coordinate": (lambda a: _cells(a, lambda t: t.replace("\n1.0,", "\n,", 1)), "row"),
    "cells.csv not UTF-8": (lambda a: (a / "cells.csv").write_bytes(b"\xff\xfe\x00"), "cells.csv"),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
@pytest.mark.parametrize("tool", ["plot", "export", "compare"])
def test_a_damaged_atlas_is_refused_and_nothing_changes(snapshot, atlas_made, atlas, damage, tool):
    spoil, named = DAMAGE[damage]
    spoil(atlas)
    before = snapshot(atlas.parent)
    args = {"plot": ["plot", atlas], "export": ["export", atlas, "--format", "csv"],
            "compare": ["compare", atlas_made, atlas]}[tool]
    assert_one_error_line(invoke(*args), named)
    assert snapshot(atlas.parent) == before


MISUSE = {  # name: (the command, what the error names)
    "plot atlas and a kernel sweep": (lambda a: ["plot", a, a.parent / "sweep"], "alone"),
    "plot a kernel sweep and an atlas": (lambda a: ["plot", a.parent / "sweep", a], "atlas run"),
    "plot two atlases": (lambda a: ["plot", a, a / "results.csv"], "alone"),
    "plot --out the atlas itself": (lambda a: ["plot", a, "--out", a], "--out"),
    "plot --out a file of the atlas": (lambda a: ["plot", a, "--out", a / "env.json"], "--out"),
    "plot --out a non-empty directory": (lambda a: ["plot", a, "--out", a.parent / "sweep"], "--out"),
    "export --format gab": (lambda a: ["export", a, "--format", "gab"], "--format csv"),
    "export --format bmf": (lambda a: ["export", a, "--format", "bmf"], "--format csv"),
    "export --out its cells.csv": (lambda a: ["export", a, "--format", "csv", "--out", a / "cells.csv"], "--out"),
    "export --out its results.csv": (lambda a: ["export", a, "--format", "md", "--out", a / "results.csv"], "--out"),
    "compare a sweep with an atlas": (lambda a: ["compare", a.parent / "sweep", a], "atlas run"),
    "compare an atlas with a sweep": (lambda a: ["compare", a, a.parent / "sweep"], "atlas run"),
    "compare atlases --ignore": (lambda a: ["compare", a, a, "--ignore", "mode"], "--ignore"),
    "compare atlases --threshold": (lambda a: ["compare", a, a, "--threshold", "lots"], "--threshold"),
    "compare --markdown its cells.csv": (lambda a: ["compare", a, a, "--markdown", a / "cells.csv"], "--markdown"),
    "compare --markdown its env.json": (lambda a: ["compare", a, a, "--markdown", a / "env.json"], "--markdown"),
    "merge an atlas": (lambda a: ["merge", a, "--out", a.parent / "merged"], "--resume"),
    "merge a sweep and an atlas": (lambda a: ["merge", a.parent / "sweep", a, "--out", a.parent / "m"], "shards"),
}


@pytest.mark.parametrize("misuse", MISUSE, ids=list(MISUSE))
def test_an_atlas_used_with_another_run_or_over_itself_is_refused(snapshot, atlas, misuse):
    command, named = MISUSE[misuse]
    before = snapshot(atlas.parent)
    assert_one_error_line(invoke(*command(atlas)), named)
    assert snapshot(atlas.parent) == before
