"""The CLI end to end on the CPU: `attnbench kernel`, its files, `backends`, and bad input."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys

import pandas as pd
import pytest
import torch
from conftest import PNG_MAGIC
from typer.testing import CliRunner

import attnbench
from attnbench.kernels import sweep
from attnbench.kernels.backends.base import Plan
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.backends.vllm_fa2 import VllmFA2Backend
from attnbench.cli.main import app
from attnbench.kernels.sweep import SweepPlan, run_sweep
from attnbench.kernels.timing import TimingConfig
from attnbench.kernels.workload import KINDS, SweepPoint

# tiny and quick: two token counts on short contexts, a few ms of sampling per row; the CPU path
# even on a machine with a GPU (the GPU path is tests/test_gpu_kernels.py)
SMALL = ["--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "8,16", "--context", "32", "--budget-ms", "5",
         "--device", "cpu"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernel")
    argv = ["attnbench", "kernel", *SMALL, "--out", str(out)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", argv)  # env.json records the command line as the shell gave it
        result = invoke(*argv[1:])
    assert result.exit_code == 0, result.output
    return out, result.output, shlex.join(argv)


def test_every_file_of_a_run_gets_the_mode_the_umask_gives(run_dir):
    """One mode for every output (issue 20 found env.json and summary.md 0600, the rest 0644)."""
    out, _, _ = run_dir
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_file()}
    assert {"results.csv", "env.json", "summary.md"} <= set(modes)
    assert {name: mode for name, mode in modes.items() if mode != 0o666 & ~umask} == {}


def test_results_csv_has_one_passing_row_per_point_strategy_and_mode(run_dir):
    out, _, _ = run_dir
    df = pd.read_csv(out / "results.csv")
    assert len(df) == len(KINDS) * 2 * 1 * 2 * 1  # kinds x tokens x backend x strategies x modes
    assert set(df["verdict"]) == {"pass"}
    assert set(df["device"]) == {"cpu"}
    assert set(df["backend"]) == {"reference"} and set(df["library"]) == {"torch"}
    assert set(df["mode"]) == {"eager"} and set(df["l2"]) == {"warm"}
    keys = df[["kind", "num_tokens", "strategy"]].drop_duplicates()
    assert len(keys) == len(df)
    assert (df["p10_ms"] <= df["median_ms"]).all() and (df["median_ms"] <= df["p90_ms"]).all()
    assert (df["samples"] >= 3).all() and (df["host_metadata_us"] > 0).all()
    assert (df["rel_l2_error"] <= df["tolerance"]).all()
    assert df["lengths_rule"].str.startswith(tuple(KINDS)).all()


def test_parquet_holds_the_same_rows(run_dir):
    out, _, _ = run_dir
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), pd.read_csv(out / "results.csv"),
                                  check_dtype=False)


def test_env_json_records_the_run(run_dir):
    out, _, command = run_dir
    env = json.loads((out / "env.json").read_text())
    assert env["command"] == command
    assert env["torch"] == torch.__version__
    assert env["attnbench_version"] == attnbench.__version__
    assert env["backends"]["reference"] == "available"


def test_summary_and_console_show_the_seed_table(run_dir):
    out, output, _ = run_dir
    summary = (out / "summary.md").read_text()
    assert "split / unified" in summary
    assert summary.count("| reference | eager | warm |") == len(KINDS) * 2
    assert "split / unified" in output and str(out) in output


def test_plots_are_written(run_dir):
    out, _, _ = run_dir
    plots = sorted(p.name for p in out.glob("*.png"))
    assert plots == ["latency_h4kv2_d32.png", "ratio_h4kv2_d32.png"]
    assert all((out / p).read_bytes().startswith(PNG_MAGIC) for p in plots)


def test_json_prints_one_parseable_row_per_line(tmp_path):
    result = invoke("kernel", *SMALL, "--kind", "decode", "--tokens", "8", "--json", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [(r["kind"], r["strategy"], r["verdict"]) for r in rows] == [
        ("decode", "unified", "pass"), ("decode", "split", "pass")]


def test_backends_lists_availability_with_reasons():
    result = invoke("backends")
    assert result.exit_code == 0
    lines = {line.split()[1]: line for line in result.output.splitlines() if line.startswith("│ ")}
    assert "available" in lines["reference"] and "unavailable" not in lines["reference"]
    reason = VllmFA2Backend().unavailable_reason()  # without a GPU: "needs a CUDA GPU (none visible)"
    assert f"unavailable: {reason[:20]}" in lines["vllm-fa2"] if reason else "available" in lines["vllm-fa2"]


def test_python_dash_m_runs_the_cli():
    result = subprocess.run([sys.executable, "-m", "attnbench", "--help"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "kernel" in result.stdout and "backends" in result.stdout


# -- bad input: one line naming the flag, non-zero exit, no traceback ----------------------------

# every flag the tested one does not override is given, so the CLI has no defaults to announce
BASE = ["--heads", "4", "--dim", "32", "--tokens", "8", "--context", "32", "--kind", "decode", "--budget-ms", "5",
        "--backend", "reference", "--device", "cpu"]
# the error must name the flag that was wrong: the first word of each case
BAD = {
    "heads-not-divisible": "--kv-heads 3",
    "block-size-24": "--block-size 24",
    "tokens-0": "--tokens 0",
    "tokens-negative": "--tokens -5",
    "tokens-not-a-number": "--tokens 8,x",
    "unknown-kind": "--kind bogus",
    "unknown-backend": "--backend bogus",
    "unknown-dtype": "--dtype fp8",
    "unknown-strategy": "--strategy fused",
    "graph-on-cpu": "--mode graph",
    "context-malformed": "--context uniform:5",
    "context-zero": "--context 0",
    "budget-zero": "--budget-ms 0",
}
if not torch.cuda.is_available():
    BAD["cuda-without-gpu"] = "--device cuda"
    BAD["fa2-without-gpu"] = "--backend vllm-fa2"


def assert_one_line_error(result, flag: str) -> None:
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:") and flag in lines[0]


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line_naming_the_flag(bad, tmp_path):
    flag, value = bad.split()
    assert_one_line_error(invoke("kernel", *BASE, flag, value, "--out", str(tmp_path)), flag)


def test_missing_dim_is_named():
    assert_one_line_error(invoke("kernel", "--heads", "4"), "--dim")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the notices checked here are the CPU's")
@pytest.mark.parametrize("args, flag", [
    (["--heads", "4", "--kv-heads", "3", "--dim", "32"], "--kv-heads"),
    (["--heads", "4", "--dim", "32", "--tokens", "8", "--context", "32", "--budget-ms", "0"], "--budget-ms"),
], ids=["defaults-notice", "no-gpu-notice"])
def test_bad_input_is_reported_before_any_notice(args, flag, tmp_path):
    assert_one_line_error(invoke("kernel", *args, "--out", str(tmp_path)), flag)


def test_zero_kv_heads_is_refused(tmp_path):
    assert_one_line_error(invoke("kernel", *BASE, "--kv-heads", "0", "--out", str(tmp_path)), "--kv-heads")


# -- a sweep keeps going and keeps what it measured ----------------------------------------------

def test_a_failing_point_keeps_the_others(tmp_path, monkeypatch):
    real = sweep.make_inputs

    def make_inputs(point, device):
        if point.num_tokens == 16:
            raise RuntimeError("injected failure at 16 tokens")
        return real(point, device)

    monkeypatch.setattr(sweep, "make_inputs", make_inputs)
    result = invoke("kernel", *SMALL, "--kind", "decode", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    df = pd.read_csv(tmp_path / "results.csv")
    assert df.loc[df["num_tokens"] == 8, "verdict"].tolist() == ["pass", "pass"]
    errors = df[df["num_tokens"] == 16]
    assert errors["verdict"].tolist() == ["error"]
    assert "injected failure at 16 tokens" in errors["reason"].iloc[0]
    assert "injected failure" in (tmp_path / "summary.md").read_text()


def plan(points) -> SweepPlan:
    return SweepPlan(points=tuple(points), backends=("reference",), strategies=("unified", "split"),
                     modes=("eager",), timing=TimingConfig(warmup_ms=0.0, budget_ms=1.0, min_samples=3),
                     device="cpu")


POINTS = [SweepPoint(kind="mixed", num_tokens=n, num_heads=4, num_kv_heads=2, head_dim=16, context="24")
          for n in (6, 12)]


def test_rows_are_handed_over_as_each_point_finishes():
    events: list[tuple[str, int]] = []
    run_sweep(plan(POINTS), None, on_row=lambda r: events.append(("row", r["num_tokens"])),
              on_point_done=lambda p: events.append(("done", p.num_tokens)))
    assert events == [("row", 6), ("row", 6), ("done", 6), ("row", 12), ("row", 12), ("done", 12)]


def test_a_backend_that_cannot_run_a_strategy_gets_skip_rows_with_the_reason(monkeypatch):
    monkeypatch.setattr(ReferenceBackend, "supports",
                        lambda self, point, strategy, device: "no split here" if strategy == "split" else None)
    rows: list[dict] = []
    run_sweep(plan(POINTS[:1]), None, rows.append)
    assert sorted((r["strategy"], r["verdict"], r["reason"]) for r in rows) == [
        ("split", "skipped", "no split here"), ("unified", "pass", "")]


@pytest.mark.parametrize("where", ["plan", "run"])
def test_a_kernel_that_raises_becomes_an_error_row(monkeypatch, where):
    real = ReferenceBackend.plan

    def exploding(*args):
        raise RuntimeError(f"kernel exploded in {where}")

    def plan_or_explode(self, strategy, point, metadata):
        if strategy != "split":
            return real(self, strategy, point, metadata)
        if where == "plan":
            exploding()
        return Plan(self.name, strategy, (exploding,))

    monkeypatch.setattr(ReferenceBackend, "plan", plan_or_explode)
    rows: list[dict] = []
    run_sweep(plan(POINTS[:1]), None, rows.append)
    verdicts = {r["strategy"]: (r["verdict"], r["reason"]) for r in rows}
    assert verdicts["unified"] == ("pass", "")
    assert verdicts["split"][0] == "error"
    assert verdicts["split"][1].startswith(f"RuntimeError: kernel exploded in {where}")


def test_a_named_backend_that_can_run_no_point_is_refused_naming_the_flag(monkeypatch, tmp_path):
    monkeypatch.setattr(ReferenceBackend, "supports",
                        lambda self, point, strategy, device: f"--dim: no head dim {point.head_dim} here")
    assert_one_line_error(invoke("kernel", *SMALL, "--backend", "reference", "--out", str(tmp_path)), "--dim")


def test_default_backends_list_an_unsupported_point_and_go_on(monkeypatch, tmp_path):
    monkeypatch.setattr(ReferenceBackend, "supports",
                        lambda self, point, strategy, device: "--dim: not 32" if point.num_tokens == 8 else None)
    result = invoke("kernel", *SMALL, "--kind", "decode", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "results.csv")
    assert set(rows.loc[rows["num_tokens"] == 8, "verdict"]) == {"skipped"}
    assert set(rows.loc[rows["num_tokens"] == 16, "verdict"]) == {"pass"}
