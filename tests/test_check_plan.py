"""`attnbench run --check` plans as the run does, in time linear in the scenario's lists, and a
sweep plans only the strategies each backend has unless the user names them.

Oracles: the run itself (what it refuses, the check refuses, with the same line), a brute-force
sizing of every point (the bisection must leave out the same ones), and the ratio of the check's
CPU time on 60,000 token counts to 6,000 (linear: about 10; quadratic: about 100).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from bad_input_cli import assert_one_error_line, invoke
from fake_backends import UnifiedOnlyBackend

from attnbench.kernels import plan as kernel_plan
from attnbench.kernels.backends import registry
from attnbench.kernels.workload import SweepPoint

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SHIPPED = sorted(SCENARIOS.glob("*.toml"))
TINY_E2E = 'command = "e2e"\nmodel = "tiny"\ninput_len = 8\noutput_len = 4\nbatch_size = 1\n'
SMALL = ["kernel", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "8", "--context", "32",
         "--budget-ms", "5", "--device", "cpu", "--kind", "decode"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU says")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_scenario_says_whether_it_runs_on_the_cpu(path):
    from attnbench.cli.scenario import load_scenario

    cpu = load_scenario(path).cpu
    assert cpu is True or (isinstance(cpu, str) and len(cpu) > 10), f"{path.name}: cpu = {cpu!r}"


@no_gpu
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_scenarios_check_on_the_cpu_passes_or_says_it_needs_a_gpu(path):
    from attnbench.cli.scenario import load_scenario

    cpu = load_scenario(path).cpu
    result = invoke("run", path, "--check")
    if cpu is True:
        assert result.exit_code == 0, result.output
        assert "cpu: runs on the CPU" in result.stdout and "points on cpu" in result.stdout
    else:
        assert_one_error_line(result, f"needs a GPU ({cpu}); none is visible here")


@no_gpu
def test_the_check_refuses_what_the_e2e_run_refuses_with_the_same_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for extra, named in [("tp = 2\n", "--tp 2: needs one process per rank"),
                         ('backend = "vllm-fa2"\n', "--backend: vllm-fa2 is unavailable here")]:
        path = write(tmp_path, TINY_E2E + extra)
        checked, ran = invoke("run", path, "--check"), invoke("run", path, "--out", tmp_path / "o")
        assert_one_error_line(checked, named)
        assert named in ran.stderr and ran.exit_code == 1 and not (tmp_path / "o").exists()


def test_tp_needs_as_many_gpus_as_ranks(monkeypatch):
    from attnbench.e2e import parallel

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(parallel, "resolve_device", lambda flag: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(parallel.UsageError, match="--tp 2: needs 2 GPUs, one per rank; this machine has 1"):
        parallel.placement(2, "auto")


def test_the_e2e_check_prints_the_plan_and_runs_nothing(tmp_path, monkeypatch):
    from attnbench.cli import run as run_cmd

    monkeypatch.setattr(run_cmd, "start_e2e", lambda args: pytest.fail("--check ran the e2e job"))
    result = invoke("run", write(tmp_path, TINY_E2E + "cpu = true\ndevice = \"cpu\"\n"), "--check")
    assert result.exit_code == 0, result.output
    assert "tiny (" in result.stdout and "1 points x 1 backend(s) x 2 strategies" in result.stdout
    assert "cpu: runs on the CPU" in result.stdout and not list(tmp_path.glob("results*"))


def test_the_check_names_each_point_left_out_and_why(tmp_path, monkeypatch):
    sizes = {n: int(kernel_plan.host_bytes(SweepPoint(kind="decode", num_tokens=n, num_heads=4, num_kv_heads=2,
                                                       head_dim=32, context="32")) * 1.2) for n in (8, 16)}
    monkeypatch.setattr("attnbench.kernels.inputs.available_host_bytes", lambda: (sizes[8] + sizes[16]) // 2)
    body = 'command = "kernel"\nheads = 4\nkv_heads = 2\ndim = 32\ntokens = [8, 16]\ncontext = 32\nkind = "decode"\n'
    result = invoke("run", write(tmp_path, body), "--check", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "context 32: 1 points on cpu (1 left out: a `skipped` row each)" in result.stdout
    assert "left out: decode, 16 tokens, 4x32: needs ~" in result.stdout


def test_the_bisection_leaves_out_what_sizing_every_point_would():
    """With one context length a point's need grows with its tokens (drawn contexts: nearly so)."""
    points = [SweepPoint(kind=kind, num_tokens=n, num_heads=4, num_kv_heads=2, head_dim=32, context="64")
              for kind in ("decode", "mixed", "prefill", "prefix", "specdec") for n in range(1, 120)]
    device = torch.device("cpu")
    needs = {id(p): int(kernel_plan.host_bytes(p) * 1.2) for p in points}
    for free in sorted(needs.values())[::40]:
        brute = {id(p) for p in points if needs[id(p)] > free}
        if len(brute) == len(points):
            continue
        assert {id(p) for p, _ in kernel_plan.check_fits(points, device, free)} == brute


def check_cpu_seconds(points: list[SweepPoint], free: int) -> float:
    start = time.process_time()
    kernel_plan.check_fits(points, torch.device("cpu"), free)
    return time.process_time() - start


def test_the_memory_check_is_linear_in_the_number_of_token_counts():
    """60,000 token counts against 6,000: sizing every point (quadratic) took 100 times as long."""
    points = [SweepPoint(kind="decode", num_tokens=n, num_heads=4, num_kv_heads=2, head_dim=32, context="32")
              for n in range(1, 60_001)]
    free = int(kernel_plan.host_bytes(points[2999]) * 1.2)  # 57,000 of them do not fit
    small = max(check_cpu_seconds(points[:6_000], free), 1e-3)
    large = check_cpu_seconds(points, free)
    assert large < 30 * small + 1.0, (small, large)


def test_default_strategies_plan_only_those_each_backend_has(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, UnifiedOnlyBackend.name, UnifiedOnlyBackend())
    out = tmp_path / "r"
    result = invoke(*SMALL, "--backend", f"reference,{UnifiedOnlyBackend.name}", "--out", out)
    assert result.exit_code == 0, result.output
    df = pd.read_csv(out / "results.csv")
    assert set(zip(df["backend"], df["strategy"])) == {("reference", "unified"), ("reference", "split"),
                                                        (UnifiedOnlyBackend.name, "unified")}
    assert result.stdout.count(f"Not run, the backend lacking the strategy: {UnifiedOnlyBackend.name} split") == 1
    resumed = invoke(*SMALL, "--backend", f"reference,{UnifiedOnlyBackend.name}", "--resume", out)
    assert resumed.exit_code == 0 and "1 of 1 points already measured" in resumed.stdout, resumed.output


def test_a_named_strategy_a_backend_lacks_is_a_skipped_row_said_once(tmp_path, monkeypatch):
    """Strategies other than the default are asked for: a backend lacking one says so in its rows."""
    from fused_backend import FusedReference

    monkeypatch.setitem(registry.REGISTRY, UnifiedOnlyBackend.name, UnifiedOnlyBackend())
    monkeypatch.setitem(registry.REGISTRY, "fused-ref", FusedReference())
    out = tmp_path / "r"
    result = invoke(*SMALL, "--backend", f"fused-ref,{UnifiedOnlyBackend.name}", "--strategy", "unified,split,fused",
                    "--out", out)
    assert result.exit_code == 0, result.output
    df = pd.read_csv(out / "results.csv")
    lacking = df[(df["backend"] == UnifiedOnlyBackend.name) & (df["strategy"] != "unified")]
    assert list(lacking["verdict"]) == ["skipped", "skipped"] and lacking["reason"].str.contains("has no").all()
    said = " ".join(result.stdout.split())
    assert said.count(f"Asked for, but the backend lacks the strategy: {UnifiedOnlyBackend.name} split, "
                      f"{UnifiedOnlyBackend.name} fused") == 1
