"""scripts/device/checks.sh, the GPU machine's runner, on the CPU: it parses, prints its sections
without arguments (exit 2), refuses to run without $OUT, and records an unknown section in its
table instead of stopping the sections after it. Its sections themselves run only on a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "device" / "checks.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


def run(*args: str, out: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OUT"} | ({"OUT": str(out)} if out else {})
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_it_parses_and_lists_its_sections_without_arguments(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    listed = run(out=tmp_path)
    assert listed.returncode == 2
    for section in ("doctor", "gpu-tests", "floor", "readme", "ab", "replay-scale", "e2e-trace", "atlas", "replays"):
        assert f"#   {section} " in listed.stdout, section


def test_it_needs_out(tmp_path):
    result = run("doctor", out=None)
    assert result.returncode != 0 and "OUT" in result.stderr


def test_an_unknown_section_is_a_row_and_the_table_comes_last(tmp_path):
    result = run("bogus", out=tmp_path)
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "checks.md").read_text()
    assert "| bogus | unknown |" in table and result.stdout.rstrip().endswith(table.rstrip())
    assert (tmp_path / "runs.tgz").is_file() and not [p for p in tmp_path.iterdir() if p.is_dir()]


def test_a_section_the_call_s_budget_cannot_hold_is_skipped_and_recorded(tmp_path):
    env_budget = {"CALL_BUDGET_S": "20"}  # less than a section's 30 s floor: nothing runs
    env = {k: v for k, v in os.environ.items() if k != "OUT"} | {"OUT": str(tmp_path)} | env_budget
    result = subprocess.run(["bash", str(SCRIPT), "doctor", "floor"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "checks.md").read_text()
    assert "| doctor | skipped | 0 |" in table and "| floor | skipped | 0 |" in table
    assert "skipped: 10 s left of CALL_BUDGET_S=20" in result.stdout
