"""scripts/device/checks.sh, the GPU machine's runner, on the CPU: it parses, prints its sections
without arguments (exit 2), refuses to run without $OUT, and records an unknown section in its
table instead of stopping the sections after it. Its sections themselves run only on a GPU."""

from __future__ import annotations

import os
import shutil
import sys
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
    for section in ("doctor", "gpu-tests", "floor", "readme", "readme-again", "ab", "ab-100", "replay-scale",
                    "e2e-trace", "atlas", "replays", "replays-chat", "replays-more", "replays-noise"):
        assert f"#   {section} " in listed.stdout, section


def test_every_trace_a_replay_section_names_is_in_the_repository():
    """The replay sections loop over `for t in NAME[.EXT][:RATIO] ...` (no extension: .jsonl)."""
    import re

    traces = SCRIPT.parent.parent.parent / "scenarios" / "traces"
    named = [token.split(":")[0] for loop in re.findall(r"for t in ([^;$]+);", SCRIPT.read_text()) for token in loop.split()]
    assert len(named) >= 8
    missing = [n for n in named if not (traces / (n if "." in n else f"{n}.jsonl")).is_file()]
    assert missing == []


def test_it_needs_out(tmp_path):
    result = run("doctor", out=None)
    assert result.returncode != 0 and "OUT" in result.stderr


def test_an_unknown_section_is_a_row_and_the_table_comes_last(tmp_path):
    result = run("bogus", out=tmp_path)
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "checks.md").read_text()
    assert "| bogus | unknown |" in table and result.stdout.rstrip().endswith(table.rstrip())
    assert (tmp_path / "runs.tgz").is_file() and not [p for p in tmp_path.iterdir() if p.is_dir()]


def test_many_sections_come_back_as_two_files(tmp_path):
    """The device tool returns at most 8 files from $OUT: the logs go into runs.tgz with the runs."""
    import tarfile

    sections = [f"bogus{i}" for i in range(10)]
    assert run(*sections, out=tmp_path).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checks.md", "runs.tgz"]
    with tarfile.open(tmp_path / "runs.tgz") as tar:
        assert "checks.log" in tar.getnames() and {f"{s}/" for s in sections} <= {f"{n}/" for n in tar.getnames()}


def test_a_section_the_call_s_budget_cannot_hold_is_skipped_and_recorded(tmp_path):
    env_budget = {"CALL_BUDGET_S": "20"}  # less than a section's 30 s floor: nothing runs
    env = {k: v for k, v in os.environ.items() if k != "OUT"} | {"OUT": str(tmp_path)} | env_budget
    result = subprocess.run(["bash", str(SCRIPT), "doctor", "floor"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "checks.md").read_text()
    assert "| doctor | skipped | 0 |" in table and "| floor | skipped | 0 |" in table
    assert "skipped: 10 s left of CALL_BUDGET_S=20" in result.stdout


def test_the_fa2_cache_keeps_one_dtype_s_modules(tmp_path):
    """scripts/device/fa2_cache_dtype.py on a stand-in cache: the bf16 module and the index stay,
    the fp16 module goes; a symlink or a file that is no xz tar is one error line."""
    import io
    import tarfile

    pack = tmp_path / "nvcache-fa2-h200.tar.xz"
    entries = {"nvcache/index": b"idx", "nvcache/1/a/bf": b"..N7cutlass10bfloat16_tE..", "nvcache/2/b/fp": b"..N7cutlass6half_tE.."}
    with tarfile.open(pack, "w:xz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    script = SCRIPT.parent / "fa2_cache_dtype.py"
    done = subprocess.run([sys.executable, str(script), "--pack", str(pack)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "kept 2 file(s), dropped 1 fp16 module(s)" in done.stdout, done.stderr
    with tarfile.open(pack, "r:xz") as tar:
        assert sorted(tar.getnames()) == ["nvcache/1/a/bf", "nvcache/index"]
        assert tar.extractfile("nvcache/1/a/bf").read() == entries["nvcache/1/a/bf"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [pack.name]  # nothing left beside it
    link = tmp_path / "link.tar.xz"
    link.symlink_to(pack)
    (tmp_path / "junk.tar.xz").write_text("not a tar")
    for bad in (link, tmp_path / "junk.tar.xz"):
        done = subprocess.run([sys.executable, str(script), "--pack", str(bad)], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and done.stderr.startswith("error: --pack") and "Traceback" not in done.stderr
