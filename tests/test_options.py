"""The flags of kernel and e2e are their args objects' fields, by name; shared flags are declared once.

Oracle: click's own view of each command (its options as `--help` lists them) against the
dataclass fields, and values given on the command line against the args the job receives.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.e2e.runner import E2EArgs
from attnbench.kernels.plan import KernelArgs
from attnbench.runs import e2e as e2e_job  # the commands import their job when they run: patched here
from attnbench.runs import kernel as kernel_job

# flags of a command that are not fields of its args object (none today: every flag is an arg)
NOT_ARGS = {"kernel": set(), "e2e": set()}


def flag_names(command: str) -> set[str]:
    params = typer.main.get_command(app).commands[command].params
    return {p.opts[0].removeprefix("--").replace("-", "_") for p in params if p.param_type_name == "option"}


def option_help(command: str, flag: str) -> str:
    params = typer.main.get_command(app).commands[command].params
    return next(p.help for p in params if p.opts[0] == flag)


@pytest.mark.parametrize("command, args_class", [("kernel", KernelArgs), ("e2e", E2EArgs)])
def test_every_flag_is_a_field_of_the_args_object_and_back(command, args_class):
    fields = {f.name for f in dataclasses.fields(args_class)}
    assert flag_names(command) - NOT_ARGS[command] == fields


def invoke_kernel(monkeypatch, *argv: str) -> KernelArgs:
    received = []
    monkeypatch.setattr(kernel_job, "run_kernel", lambda args, console, command: received.append(args))
    result = CliRunner().invoke(app, ["kernel", *argv])
    assert result.exit_code == 0, result.output
    return received[0]


def test_kernel_flags_arrive_parsed_under_their_own_names(monkeypatch, tmp_path):
    args = invoke_kernel(monkeypatch, "--heads", "4,8", "--dim", "32", "--kind", "decode,mixed",
                         "--strategy", "split", "--backend", "reference", "--mode", "eager",
                         "--prefix-ratio", "0,0.5", "--decode-share", "0.25", "--decode-seqs", "2,4",
                         "--tokens", "3,5", "--block-size", "32", "--seed", "7", "--no-causal", "--json",
                         "--out", str(tmp_path / "o"))
    assert (args.heads, args.dim, args.shapes, args.kind, args.strategy, args.backend, args.mode) == (
        [4, 8], [32], None, ["decode", "mixed"], ["split"], ["reference"], ["eager"])
    assert (args.prefix_ratio, args.decode_share, args.decode_seqs, args.tokens) == ([0.0, 0.5], [0.25], [2, 4], [3, 5])
    assert (args.block_size, args.seed, args.causal, args.json, args.out) == (32, 7, False, True, tmp_path / "o")


def test_kernel_defaults_are_the_args_defaults(monkeypatch):
    """A flag left out gives the args object's own default (list flags parsed from their text)."""
    args = invoke_kernel(monkeypatch, "--shapes", "32/8x128,12x64")
    assert args.shapes == [(32, 128, 8), (12, 64)]
    assert dataclasses.replace(args, shapes=None) == KernelArgs(
        kind=["all"], strategy=["unified", "split"], decode_share=[0.5], prefix_ratio=[0.5])
    assert list(KernelArgs().strategy) == args.strategy and list(KernelArgs().kind) == args.kind


def test_e2e_flags_arrive_parsed_under_their_own_names(monkeypatch, tmp_path):
    received = []
    monkeypatch.setattr(e2e_job, "run_e2e", lambda args, console, command: received.append(args))
    result = CliRunner().invoke(app, ["e2e", "--model", "tiny", "--input-len", "8,16", "--output-len", "4",
                                      "--batch-size", "1,2", "--strategy", "unified", "--backend", "reference",
                                      "--iters", "3", "--out", str(tmp_path / "e")])
    assert result.exit_code == 0, result.output
    (args,) = received
    assert (args.model, args.input_len, args.output_len, args.batch_size, args.strategy, args.backend) == (
        "tiny", [8, 16], [4], [1, 2], ["unified"], ["reference"])
    assert (args.iters, args.out, args.warmup) == (3, tmp_path / "e", E2EArgs().warmup)
    defaults = CliRunner().invoke(app, ["e2e"])
    assert defaults.exit_code == 0, defaults.output
    default = E2EArgs()  # the flags' defaults, parsed, are the args' defaults
    assert received[1] == dataclasses.replace(default, strategy=list(default.strategy))


@pytest.mark.parametrize("flag", ["--strategy", "--backend", "--dtype", "--block-size", "--device"])
def test_a_shared_flag_reads_the_same_in_every_command(flag):
    assert option_help("kernel", flag) == option_help("e2e", flag) == option_help("verify", flag)


@pytest.mark.parametrize("command", [["kernel", "--heads", "4", "--dim", "32"], ["e2e", "--model", "tiny"],
                                     ["verify", "--heads", "4", "--kv-heads", "2", "--dim", "32"]])
def test_every_command_refuses_an_unknown_strategy_alike(command):
    result = CliRunner().invoke(app, [*command, "--device", "cpu", "--strategy", "unified,bogus"])
    assert result.exit_code == 1
    assert "--strategy: unknown strategy 'bogus'; choose unified, split, fused" in result.output


def test_a_bad_list_value_names_its_flag_before_anything_runs(monkeypatch):
    monkeypatch.setattr(kernel_job, "run_kernel", lambda *a, **k: pytest.fail("ran with a bad flag"))
    result = CliRunner().invoke(app, ["kernel", "--heads", "4", "--dim", "32", "--tokens", "8,x"])
    assert result.exit_code == 1
    assert "--tokens: expected a comma-separated list of ints, got '8,x'" in result.output


def test_paths_stay_paths(monkeypatch, tmp_path):
    args = invoke_kernel(monkeypatch, "--heads", "4", "--dim", "32", "--resume", str(tmp_path))
    assert isinstance(args.resume, Path) and args.out is None
