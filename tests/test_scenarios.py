"""Scenario files: the shipped ones are valid and say what they claim; bad files are refused with
the key named and nothing run; CLI flags override the file; a context list runs one sweep each."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from attnbench.cli import flags, scenario
from attnbench.cli import run as run_cmd
from attnbench.kernels import plan as kernel_plan
from attnbench.runs import scenario as scenario_job
from attnbench.results import files as report
from attnbench.cli.main import app
from attnbench.errors import UsageError

pytest_plugins = ["results_fixtures"]

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
KERNEL_SCENARIOS = sorted(p for p in SCENARIOS.glob("*.toml") if 'command = "kernel"' in p.read_text())
TINY = ["--device", "cpu", "--mode", "eager", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "2,4",
        "--budget-ms", "10"]


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text('command = "kernel"\n' + text)
    return path


def args_of(sc: scenario.Scenario, context_index: int = 0):
    """The KernelArgs of one sweep; no context in the file means the GPU default."""
    context = sc.contexts[context_index] or kernel_plan.GPU_DEFAULTS["context"]
    return flags.kernel_args({**sc.values, "context": context})


def test_every_shipped_scenario_is_named_by_the_issue():
    assert {p.stem for p in SCENARIOS.glob("*.toml")} >= {
        "seed-kernel-table", "seed-e2e-table", "decode-gqa", "chunked-prefill-mixed", "prefix-cache", "specdec"}


@pytest.mark.parametrize("path", KERNEL_SCENARIOS, ids=lambda p: p.stem)
def test_shipped_kernel_scenarios_are_valid(path):
    sc = scenario.load_scenario(path)
    for i, context in enumerate(sc.contexts):
        assert kernel_plan.plan_sweep(args_of(sc, i), machine=False).points


def test_seed_kernel_table_is_the_seeds_nine_points():
    sc = scenario.load_scenario(SCENARIOS / "seed-kernel-table.toml")
    args = args_of(sc)
    points = kernel_plan.build_points(args)
    assert len(points) == 9 and {p.kind for p in points} == {"decode"}
    assert {(p.num_tokens, p.num_heads, p.head_dim) for p in points} == {
        (n, h, d) for n in (100, 500, 1000) for h, d in ((12, 64), (32, 128), (64, 128))}
    assert (args.strategy, args.mode, sc.contexts) == (["unified", "split"], ["graph"], ["1024"])
    assert "did not say" in (SCENARIOS / "seed-kernel-table.toml").read_text()  # the context choice is stated


def test_decode_gqa_sweeps_contexts_1k_to_32k():
    sc = scenario.load_scenario(SCENARIOS / "decode-gqa.toml")
    assert [int(c) for c in sc.contexts] == [1024, 2048, 4096, 8192, 16384, 32768]
    args = args_of(sc)
    assert (kernel_plan.sweep_shapes(args), args.kv_heads, args.kind) == ([(32, 128)], 8, ["decode"])


def test_prefix_cache_sweeps_hit_ratios():
    args = args_of(scenario.load_scenario(SCENARIOS / "prefix-cache.toml"))
    assert (args.kind, args.prefix_ratio) == (["prefix"], [0.0, 0.25, 0.5, 0.75, 0.9])


def test_seed_e2e_table_is_the_seeds_grid():
    path = SCENARIOS / "seed-e2e-table.toml"
    sc = scenario.load_scenario(path)
    assert sc.given == {"model": "llama-7b", "input_len": "32,512", "output_len": "128,32",
                        "batch_size": "1,2,4,8,16,32"}


@pytest.mark.parametrize("body, named", [
    ('heads = 4\ndim = 32\nkv-head = 2\n', "kv-head: unknown key"),
    ('heads = 4\ndim = 32\nblock_size = "16"\n', "block_size: expected an integer, got a string"),
    ('heads = 4\ndim = 32\ncausal = 1\n', "causal: expected true or false"),
    ('heads = 4\ndim = 32\nkind = true\n', "kind: expected a string"),
    ('heads = 4\ndim = 32\n[tokens]\nn = 1\n', "tokens: expected a string, a number or a list of them, got a table"),
    ('heads = 4\ndim = 32\nkind = ["decode", "nope"]\n', "--kind: unknown kind 'nope'"),
    ('heads = 4\ndim = 32\nblock_size = 10\n', "--block-size: KV block size must be a multiple of 16"),
    ('heads = 4\ndim = 32\ncontext = [64, "uniform:9:1"]\n', "--context: need 1 <= LOW <= HIGH"),
    ('heads = 4\ndim = 32\nstrategy = "unified,splat"\n', "strategy: unknown strategy 'splat'"),
    ('heads = 4\ndim = 32\ntokens = [1.5]\n', "--tokens: expected a comma-separated list of ints"),
    ('heads = 4\ndim = [32\n', "not valid TOML"),
], ids=["unknown-key", "str-for-int", "int-for-bool", "bool-for-text", "table", "bad-kind", "bad-block-size",
        "bad-context-in-list", "bad-strategy", "float-token", "bad-toml"])
def test_a_bad_file_is_refused_naming_the_key_and_nothing_runs(tmp_path, monkeypatch, body, named, cli):
    ran = []
    monkeypatch.setattr(scenario_job, "run_kernel", lambda *a, **k: ran.append(a))
    out = tmp_path / "out"
    result = cli("run", write(tmp_path, body), "--device", "cpu", "--mode", "eager", "--out", out)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], result.output
    assert not ran and not out.exists()


def test_unknown_command_and_missing_file_are_refused(tmp_path, cli):
    path = tmp_path / "s.toml"
    path.write_text('command = "bench"\n')
    assert "command: expected one of 'kernel', 'e2e'" in cli("run", path).output
    missing = cli("run", tmp_path / "nope.toml")
    assert missing.exit_code == 1 and "cannot read the scenario file" in missing.output


def test_an_unknown_key_gets_a_suggestion(tmp_path):
    with pytest.raises(UsageError, match="did you mean 'kv_heads'"):
        scenario.load_scenario(write(tmp_path, "kv-head = 2\n"))


def test_every_kernel_flag_is_a_key_and_reaches_kernel_args(tmp_path):
    """A file setting every flag of `attnbench kernel` to a non-default value; each one arrives."""
    import typer.main

    options = [p for p in typer.main.get_command(app).commands["kernel"].params if p.param_type_name == "option"]
    assert set(scenario.command_flags("kernel")) == {p.opts[0].lstrip("-").replace("-", "_") for p in options}
    body = """
        shapes = ["8x32"]
        heads = 16
        dim = 64
        kv-heads = 2
        tokens = [3, 5]
        kind = ["decode", "mixed"]
        strategy = "split"
        backend = "reference"
        mode = "eager"
        dtype = "fp16"
        block_size = 32
        context = "uniform:8:64"
        decode_share = 0.25
        decode_seqs = [4, 8]
        prefix_ratio = [0, 0.5]
        spec_k = 2
        prefill_len = 64
        causal = false
        cold_l2 = true
        budget_ms = 7
        rel_spread = 0.02
        seed = 3
        device = "auto"
        devices = "cpu,cpu"
        shard = "1/2"
        out = "somewhere"
        resume = "earlier"
        point_timeout = 30
        replicates = 4
        json = true
    """
    flags = scenario.command_flags("kernel")
    adaptive = set(ADAPTIVE_BODY)  # exclusive with `replicates`: the next test sets them
    # an on/off flag added since this test was written: flipped here, checked to arrive as a field
    newer = {k: not f.default for k, f in flags.items() if f.type == "boolean" and f"\n        {k} =" not in body}
    body += "".join(f"{k} = {str(v).lower()}\n" for k, v in newer.items())
    sc = scenario.load_scenario(write(tmp_path, body.replace("        ", "")))
    assert set(sc.given) == set(flags) - adaptive, "the file above must set every flag"
    args = args_of(sc)
    assert all(getattr(args, flags[k].param) == v for k, v in newer.items())
    assert (args.shapes, args.kv_heads, args.tokens, args.kind, args.strategy, args.backend, args.mode) == (
        [(8, 32)], 2, [3, 5], ["decode", "mixed"], ["split"], ["reference"], ["eager"])
    assert (args.dtype, args.block_size, args.context, args.decode_share, args.prefix_ratio, args.spec_k) == (
        "fp16", 32, "uniform:8:64", [0.25], [0.0, 0.5], 2, )
    assert args.decode_seqs == [4, 8]
    assert (args.prefill_len, args.causal, args.cold_l2, args.budget_ms, args.rel_spread, args.seed) == (
        64, False, True, 7.0, 0.02, 3)
    assert (args.device, args.out, args.resume, args.json) == ("auto", Path("somewhere"), Path("earlier"), True)
    assert (args.devices, args.shard) == ("cpu,cpu", "1/2")
    assert args.point_timeout == 30.0
    assert args.replicates == 4


ADAPTIVE_BODY = {"min_replicates": 3, "max_replicates": 5, "threshold": '"3%"'}


def test_the_adaptive_replicate_flags_reach_kernel_args(tmp_path):
    """The flags of replicates that stop when enough, which a file cannot set beside `replicates`."""
    sc = scenario.load_scenario(write(tmp_path, 'heads = 8\ndim = 32\n' + "".join(
        f"{k} = {v}\n" for k, v in ADAPTIVE_BODY.items())))
    assert set(ADAPTIVE_BODY) <= set(sc.given)
    args = args_of(sc)
    assert (args.min_replicates, args.max_replicates, args.threshold) == (3, 5, "3%")


def test_cli_flags_override_the_file(tmp_path):
    path = write(tmp_path, 'heads = 4\ndim = 32\ntokens = [8]\ncausal = true\ncontext = [64, 128]\n')
    sc = scenario.load_scenario(path, ["--tokens", "16,32", "--no-causal", "--kv-heads=2", "--context", "256"])
    args = args_of(sc)
    assert (args.tokens, args.causal, args.kv_heads, sc.contexts) == ([16, 32], False, 2, ["256"])
    assert scenario.load_scenario(path, ["--context", "32,64"]).contexts == ["32", "64"]
    with pytest.raises(UsageError, match="--tokenz: not a flag.*did you mean 'tokens'"):
        scenario.load_scenario(path, ["--tokenz", "3"])
    with pytest.raises(UsageError, match="--budget-ms: expected a number"):
        scenario.load_scenario(path, ["--budget-ms", "soon"])


def test_check_prints_the_sweeps_and_runs_nothing(tmp_path, monkeypatch, cli):
    monkeypatch.setattr(scenario_job, "run_kernel", lambda *a, **k: pytest.fail("--check ran a sweep"))
    # 256 x 32k tokens of KV cache is 34 GB: as if this machine had the memory (tests/test_bad_input.py
    # checks that --check refuses it when it does not)
    monkeypatch.setattr("attnbench.kernels.inputs.available_host_bytes", lambda: 1 << 50)
    result = cli("run", SCENARIOS / "decode-gqa.toml", "--check", "--device", "cpu", "--mode", "eager")
    assert result.exit_code == 0, result.output
    assert "context 1024: 4 points on cpu" in result.output and "context 32768: 4 points" in result.output


def test_a_context_list_runs_one_sweep_each_into_one_results_dir(tmp_path, monkeypatch, cli):
    out = tmp_path / "gqa"
    monkeypatch.setattr(sys, "argv", ["attnbench", "run", "scenarios/decode-gqa.toml"])
    result = cli("run", SCENARIOS / "decode-gqa.toml", *TINY, "--context", "64,128", "--out", out)
    assert result.exit_code == 0, result.output
    df = report.load_results(out)
    assert sorted(set(df["context"])) == [64, 128] and len(df) == 2 * 2 * 2
    for part in ("context-64", "context-128"):
        assert len(report.load_results(out / part)) == 4
    assert (out / "results.parquet").exists() and (out / "env.json").exists()
    summary = (out / "summary.md").read_text()
    assert "#### ctx=64" in summary and "#### ctx=128" in summary
    recorded = json.loads((out / "scenario.json").read_text())
    assert recorded["contexts"] == ["64", "128"] and 'kind = "decode"' in recorded["text"]
    assert cli("compare", out, out).exit_code == 0


def test_a_single_sweep_runs_through_run_kernel(tmp_path, monkeypatch, cli):
    calls = []
    monkeypatch.setattr(scenario_job, "run_kernel", lambda args, console, command: calls.append(args))
    assert cli("run", SCENARIOS / "seed-kernel-table.toml", *TINY, "--out", tmp_path / "o").exit_code == 0
    (args,) = calls
    assert (kernel_plan.sweep_shapes(args), args.kind, args.tokens, args.context, args.out) == (
        [(4, 32)], ["decode"], [2, 4], "1024", tmp_path / "o")


def test_e2e_scenarios_call_the_e2e_command(tmp_path, monkeypatch, cli):
    """An e2e scenario's keys are the e2e flags, and its values (overrides included) reach E2EArgs
    as the command line's would."""
    received = []
    monkeypatch.setattr(run_cmd, "start_e2e", received.append)
    # a GPU scenario (cpu = "..."): --device cpu runs it anyway where no GPU is visible
    result = cli("run", SCENARIOS / "seed-e2e-table.toml", "--eager", "--iters", "5", "--device", "cpu")
    assert result.exit_code == 0, result.output
    (args,) = received
    assert (args.model, args.input_len, args.output_len, args.batch_size, args.eager, args.iters) == (
        "llama-7b", [32, 512], [128, 32], [1, 2, 4, 8, 16, 32], True, 5)
    bad = tmp_path / "bad.toml"
    bad.write_text('command = "e2e"\nheads = 4\n')
    assert "heads: unknown key for command = 'e2e'" in cli("run", bad).output
