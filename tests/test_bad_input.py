"""Bad input, every command: one `error:` line on stderr naming the flag or file, exit 1, no traceback.

Why files of their own: the convention (attnbench/cli/common.py, main.py) is one promise across
commands, flags, scenario files and checkpoint configs, so it is tested over all of them together.
Tables list inputs a user could plausibly type; hypothesis adds values nobody thought of. Every
case is invalid, so each must fail fast, before a tensor is made or a directory written.

This file: kernel and e2e flags, and the convention itself. Scenario files and checkpoint configs
are in test_bad_input_files.py, which also counts the inputs both files list.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from bad_input_cli import E2E, KERNEL, SETTINGS, assert_one_error_line, invoke
from hypothesis import given
from hypothesis import strategies as st

from attnbench.e2e import runner as e2e_runner
from attnbench.errors import AttnbenchError
from attnbench.kernels import plan as kernel_plan
from attnbench.kernels.workload import MAX_BLOCK_SIZE, MAX_HEAD_DIM, MAX_HEADS, MAX_SEED, MAX_SPEC_K, MAX_TOKENS


# -- kernel flags: flag, value (or values), and the name the one line must carry -------------------

KERNEL_BAD = [
    # Typer's own parse errors: same line, same exit code
    ("--kv-heads", "x"), ("--kv-heads", "1.5"), ("--block-size", "1e9"), ("--block-size", ""), ("--spec-k", "2.5"),
    ("--prefill-len", "x"), ("--decode-share", "half"), ("--budget-ms", "soon"), ("--rel-spread", "1%"),
    ("--seed", "1e3"), ("--seed", "abc"), ("--bogus", "1"), ("--tokenz", "8"), ("--causal=3",), ("--json=yes",),
    ("extra",),
    # sizes out of range, zero, negative, not numbers, listed twice
    ("--heads", "0"), ("--heads", "-1"), ("--heads", "1025"), ("--heads", "1000000"), ("--heads", "x"),
    ("--heads", ","), ("--heads", "4,4"), ("--dim", "0"), ("--dim", "12"), ("--dim", "2048"), ("--dim", "32,32"),
    ("--dim", "x"), ("--shapes", "4x32,4x32"), ("--shapes", "0x32"), ("--shapes", "4x"), ("--shapes", "4x32x2"),
    ("--kv-heads", "0"), ("--kv-heads", "-2"), ("--kv-heads", "3"), ("--kv-heads", "2048"), ("--kv-heads", "8"),
    ("--tokens", "0"), ("--tokens", "-5"), ("--tokens", "1000000000"), ("--tokens", "8,8"), ("--tokens", "x"),
    ("--tokens", "8.5"), ("--tokens", "99999999999999999999999"),
    ("--kind", "bogus"), ("--kind", "decode,decode"), ("--kind", "all,decode"), ("--kind", ","),
    ("--strategy", "fission"), ("--strategy", "unified,unified"), ("--strategy", ""), ("--backend", "bogus"),
    ("--backend", "reference,reference"), ("--mode", "graph"), ("--mode", "eager,eager"), ("--mode", "both,eager"),
    ("--mode", "fast"), ("--dtype", "fp8"), ("--dtype", ""), ("--dtype", "float32"),
    ("--block-size", "0"), ("--block-size", "24"), ("--block-size", "-16"), ("--block-size", "8192"),
    ("--block-size", "1000000000"), ("--context", "0"), ("--context", "-1"), ("--context", "uniform:5"),
    ("--context", "uniform:9:1"), ("--context", "uniform:1:99999999"), ("--context", "99999999"),
    ("--context", "abc"), ("--context", "1.5"), ("--context", "64,64"),
    ("--decode-share", "1"), ("--decode-share", "-0.1"), ("--decode-share", "nan"), ("--decode-share", "inf"),
    ("--prefix-ratio", "1"), ("--prefix-ratio", "-0.5"), ("--prefix-ratio", "nan"), ("--prefix-ratio", "0.5,0.5"),
    ("--prefix-ratio", "x"), ("--spec-k", "0"), ("--spec-k", "-1"), ("--spec-k", "2000"), ("--prefill-len", "0"),
    ("--prefill-len", "2000000"), ("--budget-ms", "0"), ("--budget-ms", "-1"), ("--budget-ms", "nan"),
    ("--budget-ms", "inf"), ("--budget-ms", "-inf"), ("--budget-ms", "1e12"), ("--rel-spread", "-0.1"),
    ("--rel-spread", "nan"), ("--rel-spread", "inf"), ("--rel-spread", "2"), ("--seed", "-1"),
    ("--seed", str(2**63)), ("--seed", str(2**64)), ("--seed", str(10**30)), ("--device", "tpu"),
    ("--device", ""),
    # taken as their default or ignored before issue 20: now refused
    ("--shard", " "), ("--shard", ""), ("--context", ""), ("--context", " "), ("--point-timeout", "30"),
    # the largest point cannot fit in this machine's memory (and would never finish on a CPU)
    ("--tokens", "1000000", "--kind", "prefill", "--heads", "1024", "--dim", "1024"),
    ("--tokens", "100000", "--context", "4000000"),
]


def named_flag(case: tuple) -> str:
    """The flag the line must name: the case's first, or the one a --shapes pair feeds."""
    return "--heads" if case == ("--shapes", "0x32") else case[0].split("=")[0]


@pytest.mark.parametrize("case", KERNEL_BAD, ids=map(" ".join, KERNEL_BAD))
def test_a_bad_kernel_flag_is_one_line(case, tmp_path):
    out = tmp_path / "out"
    assert_one_error_line(invoke(*KERNEL, *case, "--out", out), named_flag(case))
    assert not out.exists()  # refused before the run directory was made


def test_the_memory_check_names_what_to_shrink(tmp_path):
    line = assert_one_error_line(invoke(*KERNEL, "--tokens", "100000", "--context", "4000000"))
    assert "--tokens/--context" in line and "GiB on the CPU" in line and "available" in line


def test_an_e2e_run_must_fit_in_the_memory_available(monkeypatch, tmp_path):
    monkeypatch.setattr(e2e_runner, "available_host_bytes", lambda: 2**20)
    line = assert_one_error_line(invoke(*E2E, "--out", tmp_path / "out"), "--model tiny")
    assert "0.0 GiB available on this machine" in line and not (tmp_path / "out").exists()


def test_check_refuses_a_scenario_that_cannot_fit_here(monkeypatch):
    monkeypatch.setattr("attnbench.kernels.inputs.available_host_bytes", lambda: 2**20)
    line = assert_one_error_line(invoke("run", "scenarios/decode-gqa.toml", "--check", "--device", "cpu",
                                        "--mode", "eager"))
    assert "decode-gqa.toml" in line and "0.0 GiB available" in line


def test_points_that_cannot_fit_beside_ones_that_do_are_skipped_rows(monkeypatch, tmp_path):
    """A sweep is refused only when none of its points fits; a point too big is a `skipped` row
    saying how much it needs, and the points that fit are measured."""
    sizes = {n: kernel_plan.host_bytes(kernel_plan.build_points(kernel_plan.KernelArgs(
        shapes=[(4, 32)], tokens=[n], kind=["decode"], context="32"))[0]) for n in (8, 4096)}
    monkeypatch.setattr("attnbench.kernels.inputs.available_host_bytes", lambda: sizes[8] * 4)
    assert sizes[4096] * 1.2 > sizes[8] * 4
    result = invoke(*[a if a != "8" else "8,4096" for a in KERNEL], "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "run" / "results.csv")
    big = rows[rows["num_tokens"] == 4096]
    assert list(big["verdict"]) == ["skipped"] and "GiB on the CPU" in big["reason"].iloc[0]
    assert set(rows[rows["num_tokens"] == 8]["verdict"]) == {"pass"}
    assert "cannot fit here" in " ".join(result.output.split())


INT_RANGES = {"--kv-heads": (1, MAX_HEADS), "--block-size": (16, MAX_BLOCK_SIZE), "--spec-k": (1, MAX_SPEC_K),
              "--prefill-len": (1, MAX_TOKENS), "--seed": (0, MAX_SEED), "--heads": (1, MAX_HEADS),
              "--dim": (8, MAX_HEAD_DIM), "--tokens": (1, MAX_TOKENS)}


@st.composite
def out_of_range(draw, ranges: dict):
    flag = draw(st.sampled_from(sorted(ranges)))
    low, high = ranges[flag]
    return flag, draw(st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1)))


@SETTINGS
@given(out_of_range(INT_RANGES))
def test_any_out_of_range_integer_is_one_line(case):
    flag, value = case
    assert_one_error_line(invoke(*KERNEL, flag, str(value)), flag)


@SETTINGS
@given(st.sampled_from(sorted(INT_RANGES)), st.text(alphabet="abcxyz!#%.:;/ e+,", min_size=1, max_size=8))
def test_any_non_integer_for_an_integer_flag_is_one_line(flag, text):
    assert_one_error_line(invoke(*KERNEL, flag, text))  # no digits in the alphabet: never a number


@SETTINGS
@given(st.sampled_from(["--budget-ms", "--rel-spread", "--decode-share", "--prefix-ratio"]),
       st.one_of(st.sampled_from([float("nan"), float("inf"), -float("inf")]),
                 st.floats(max_value=-1e-9, allow_nan=False), st.floats(min_value=3.6e6 + 1, allow_infinity=False)))
def test_any_non_finite_or_out_of_range_number_is_one_line(flag, value):
    assert_one_error_line(invoke(*KERNEL, flag, repr(value)), flag)


@SETTINGS
@given(st.sampled_from(["--tokens", "--heads", "--kind", "--strategy", "--backend", "--mode", "--prefix-ratio"]),
       st.data())
def test_a_value_listed_twice_is_refused_naming_it(flag, data):
    pool = {"--tokens": ["1", "2", "8", "16"], "--heads": ["4", "8", "16"], "--kind": ["decode", "prefill", "mixed"],
            "--strategy": ["unified", "split"], "--backend": ["reference"], "--mode": ["eager"],
            "--prefix-ratio": ["0", "0.25", "0.5"]}[flag]
    values = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
    twice = data.draw(st.sampled_from(values))
    listed = values + [twice]
    line = assert_one_error_line(invoke(*KERNEL, flag, ",".join(data.draw(st.permutations(listed)))), flag)
    assert "listed twice" in line


# -- e2e flags ------------------------------------------------------------------------------------

E2E_BAD = [
    ("--input-len", "0"), ("--input-len", "-1"), ("--input-len", "x"), ("--input-len", "2000000"),
    ("--input-len", ""), ("--input-len", "5000"), ("--input-len", "8,8", "--output-len", "4,4"),
    ("--input-len", "1,2,3", "--output-len", "4,5"), ("--output-len", "0"), ("--output-len", "-3"),
    ("--batch-size", "0"), ("--batch-size", "1,1"), ("--batch-size", "5000"), ("--batch-size", "two"),
    ("--batch-size", "1.5"), ("--chunk-size", "0"), ("--chunk-size", "-1"), ("--chunk-size", "x"),
    ("--chunk-size", "2000000"), ("--warmup", "-1"), ("--warmup", "20000"), ("--warmup", "x"), ("--iters", "0"),
    ("--iters", "20000"), ("--iters", "x"), ("--seed", "-1"), ("--seed", str(2**63)), ("--seed", str(10**30)),
    ("--block-size", "0"), ("--block-size", "24"), ("--block-size", "8192"), ("--dtype", "fp8"),
    ("--strategy", "fission"), ("--strategy", "unified,unified"), ("--backend", "bogus"),
    ("--backend", "reference,reference"), ("--device", "tpu"), ("--model", "gpt-5"), ("--model", ""),
    ("--model", "./no/such/dir"), ("--model", "llama-7b"), ("--model", "a\x00b"), ("--eager=yes",), ("--bogus",),
    ("--point-timeout", "30"),  # ignored without --isolate before issue 20: now refused
]


@pytest.mark.parametrize("case", E2E_BAD, ids=map(repr, E2E_BAD))
def test_a_bad_e2e_flag_is_one_line(case, tmp_path):
    out = tmp_path / "out"
    assert_one_error_line(invoke(*E2E, *case, "--out", out), case[0].split("=")[0])
    assert not out.exists()


# -- the convention itself ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--help"], ["kernel", "--help"], ["e2e", "--help"], ["run", "--help"], []],
                         ids=repr)
def test_help_still_exits_0(argv):
    result = invoke(*argv)
    assert result.exit_code == 0 and "Usage" in result.output and not result.stderr.strip()


@pytest.mark.parametrize("argv", [["kernal"], ["run"], ["compare", "a"], ["export", "--format"], ["plot", "--bogus"],
                                  ["backends", "extra"], ["--bogus"]], ids=repr)
def test_parse_errors_of_every_command_are_one_line(argv):
    assert_one_error_line(invoke(*argv))


def test_a_run_that_measured_nothing_is_an_error():
    kernel_plan.check_measured({"pass": 1, "skipped": 3}, Path("out"))
    kernel_plan.check_measured({"fail": 2}, Path("out"))
    for verdicts in ({"skipped": 3, "error": 1}, {"error": 2}, {}):
        with pytest.raises(AttnbenchError, match="nothing was measured"):
            kernel_plan.check_measured(verdicts, Path("out"))
