"""Bad input to `attnbench verify`: one `error:` line, exit 1, no traceback, and nothing in the
directory around it created, lost or changed (issue 20: verify's --out at a file or an unwritable
place was a traceback, a big case a MemoryError, duplicate backends doubled every row, and an --out
into a run directory or through a symlink wrote over files verify did not own).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bad_input_cli import SETTINGS, assert_one_error_line, invoke
from hypothesis import given
from hypothesis import strategies as st


VERIFY = ["verify", "--device", "cpu", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--contexts", "16,80"]

# (extra flags, what the error line names)
FLAGS = {
    "backend twice": (["--backend", "reference,reference"], "--backend: reference is listed twice"),
    "backend twice among others": (["--backend", "reference,flex,reference"], "--backend"),
    "strategy twice": (["--strategy", "unified,unified"], "--strategy: unified is listed twice"),
    "policy twice": (["--policy", "safe,safe"], "--policy: safe is listed twice"),
    "unknown policy": (["--policy", "paranoid"], "--policy"),
    "unknown strategy": (["--strategy", "diagonal"], "--strategy"),
    "unknown backend": (["--backend", "no-such-kernel"], "no-such-kernel"),
    "a backend with nothing to judge on the CPU": (["--backend", "flex"], "nothing verify can judge here"),
    "a strategy the backend lacks": (["--strategy", "fused", "--backend", "reference"], "no fused strategy"),
    "contexts reversed": (["--contexts", "80,16"], "--contexts"),
    "contexts equal": (["--contexts", "16,16"], "--contexts"),
    "one context": (["--contexts", "16"], "--contexts"),
    "three contexts": (["--contexts", "16,80,160"], "--contexts"),
    "a zero context": (["--contexts", "0,16"], "--contexts"),
    "a context past the limit": (["--contexts", f"16,{(1 << 22) + 1}"], "--contexts"),
    "empty contexts": (["--contexts", ""], "--contexts"),
    "contexts not numbers": (["--contexts", "short,long"], "--contexts"),
    "no sequences": (["--seqs", "0"], "--seqs"),
    "too many sequences": (["--seqs", "4097"], "--seqs"),
    "heads not divisible by kv heads": (["--kv-heads", "3"], "--kv-heads"),
    "no kv heads": (["--kv-heads", "0"], "--kv-heads"),
    "negative heads": (["--heads", "-4"], "--heads"),
    "head dim 0": (["--dim", "0"], "--dim"),
    "unknown dtype": (["--dtype", "fp8"], "--dtype"),
    "block size 7": (["--block-size", "7"], "--block-size"),
    "unknown device": (["--device", "tpu"], "--device"),
    "a GPU on a machine without one": (["--device", "cuda:7"], "--device"),
    "negative seed": (["--seed", "-1"], "--seed"),
}


def snapshot(root: Path) -> dict:
    """Every entry under root: a link's target, a file's bytes and mode, a folder's mode."""
    seen = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            seen[rel] = ("link", os.readlink(path))
        elif path.is_file():
            seen[rel] = ("file", path.read_bytes(), path.stat().st_mode)
        else:
            seen[rel] = ("dir", path.stat().st_mode)
    return seen


@pytest.fixture
def around(tmp_path):
    """A user's files beside the command (run from tmp_path): none may change."""
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "summary.md").write_text("my summary")
    return tmp_path


def run_in(where: Path, *args):
    old = Path.cwd()
    os.chdir(where)
    try:
        return invoke(*args)
    finally:
        os.chdir(old)


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX")
@pytest.mark.parametrize("case", FLAGS.values(), ids=FLAGS.keys())
def test_a_bad_flag_is_one_error_line_and_nothing_changes(case, around):
    extra, named = case
    before = snapshot(around)
    assert_one_error_line(run_in(around, *VERIFY, *extra, "--out", "new-run"), named)
    assert snapshot(around) == before


def kernel_run(path: Path) -> None:
    path.mkdir()
    for name in ("results.csv", "env.json", "summary.md", ".attnbench-files.json"):
        (path / name).write_text(f"a kernel run's {name}\n")


def out_at(kind: str, root: Path) -> Path:
    """An --out that verify must refuse, made under root."""
    if kind == "a file":
        (root / "afile").write_text("data")
        return root / "afile"
    if kind == "under a file":
        (root / "afile").write_text("data")
        return root / "afile" / "run"
    if kind == "a symlink to an empty directory":
        (root / "empty").mkdir()
        (root / "link").symlink_to(root / "empty")
        return root / "link"
    if kind == "a symlink to a file":
        (root / "afile").write_text("data")
        (root / "link").symlink_to(root / "afile")
        return root / "link"
    if kind == "a dangling symlink":
        (root / "link").symlink_to(root / "nowhere")
        return root / "link"
    if kind == "a kernel run's directory":
        kernel_run(root / "run")
        return root / "run"
    if kind == "a directory locked by a live run":
        (root / "run").mkdir()
        (root / "run" / ".attnbench.lock").write_text("1")  # pid 1 is alive
        return root / "run"
    raise ValueError(kind)


OUTS = ["a file", "under a file", "a symlink to an empty directory", "a symlink to a file", "a dangling symlink",
        "a kernel run's directory", "a directory locked by a live run"]


@pytest.mark.parametrize("kind", OUTS)
def test_an_out_verify_cannot_claim_is_one_error_line_and_nothing_changes(kind, around):
    out = out_at(kind, around)
    before = snapshot(around)
    assert_one_error_line(invoke(*VERIFY, "--out", str(out)), "--out")
    assert snapshot(around) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_an_unwritable_out_is_one_error_line(around):
    (around / "ro").mkdir()
    (around / "ro").chmod(0o555)
    before = snapshot(around)
    try:
        assert_one_error_line(invoke(*VERIFY, "--out", str(around / "ro" / "run")), "--out")
        assert snapshot(around) == before
    finally:
        (around / "ro").chmod(0o755)


def test_a_verify_that_fits_in_no_memory_is_one_error_line(monkeypatch, around):
    monkeypatch.setattr("attnbench.kernels.inputs.available_host_bytes", lambda: 1024)
    before = snapshot(around)
    assert_one_error_line(run_in(around, *VERIFY, "--out", "new-run"), "needs ~")
    assert snapshot(around) == before


NAMES = {"--backend": ["reference", "flex"], "--strategy": ["unified", "split", "fused"], "--policy": ["naive", "safe"]}


@SETTINGS
@given(st.sampled_from(sorted(NAMES)).flatmap(
    lambda flag: st.tuples(st.just(flag), st.lists(st.sampled_from(NAMES[flag]), min_size=1, max_size=4))))
def test_any_list_flag_naming_a_value_twice_is_refused(around, flag_values):
    flag, values = flag_values
    values.append(values[0])
    before = snapshot(around)
    assert_one_error_line(run_in(around, *VERIFY, flag, ",".join(values), "--out", "new-run"), "listed twice")
    assert snapshot(around) == before


@SETTINGS
@given(st.lists(st.integers(-5, (1 << 22) + 5), min_size=1, max_size=3).filter(
    lambda v: not (len(v) == 2 and 1 <= v[0] < v[1] <= 1 << 22)))
def test_any_contexts_that_are_not_short_then_long_are_refused(around, values):
    before = snapshot(around)
    assert_one_error_line(run_in(around, *VERIFY, "--contexts", ",".join(map(str, values)), "--out", "new-run"),
                          "--contexts")
    assert snapshot(around) == before
