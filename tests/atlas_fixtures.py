"""A tiny CPU atlas for the tests of plot, export, compare and merge on an atlas run (issue 22).

A pytest plugin (each test module names it in `pytest_plugins`), so the session-scoped atlas is
made once for all of them; each test copies it before it touches anything.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from bad_input_cli import invoke

from attnbench.results.atlas_cells import ATLAS_COLUMNS

TINY = ["atlas", "--decode-share", "0:1:2", "--decode-context", "16", "--chunk", "8", "--head-dim", "32",
        "--gqa-group", "4", "--heads", "8", "--tokens", "4:16:2", "--budget-ms", "2", "--device", "cpu"]


@pytest.fixture(scope="session")
def atlas_made(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("atlas") / "run"
    assert (made := invoke(*TINY, "--out", out)).exit_code == 0, made.output
    return out


@pytest.fixture
def atlas(atlas_made, tmp_path) -> Path:
    """A copy of the tiny atlas, and beside it (sweep/) its rows without the cell columns: a kernel sweep."""
    shutil.copytree(atlas_made, tmp_path / "atlas")
    (tmp_path / "sweep").mkdir()
    rows = pd.read_csv(atlas_made / "results.csv", dtype=str, keep_default_na=False)
    rows.drop(columns=ATLAS_COLUMNS).to_csv(tmp_path / "sweep" / "results.csv", index=False)
    return tmp_path / "atlas"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def snapshot():
    """snapshot(root): every file under root with its bytes (a fixture: a plugin is not imported)."""
    return _snapshot
