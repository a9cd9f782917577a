"""Bad scenarios and bad choices: what `run --check` refuses the run refuses, each in one `error:`
line, exit 1, no traceback, nothing written or changed, on a machine without a GPU.

Scenario files that name what this machine cannot run (a backend that is not installed, tp ranks
without their GPUs, a GPU scenario), files with huge lists, and choice flags mistyped on the
command line or in a file; hypothesis adds choices and `cpu` values nobody listed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from bad_input_cli import SETTINGS, assert_one_error_line, invoke
from hypothesis import given
from hypothesis import strategies as st

from attnbench.kernels.choices import BACKENDS, MODES
from attnbench.kernels.workload import DTYPE_ALIASES, KINDS, STRATEGIES

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU refuses")

KERNEL = 'command = "kernel"\nheads = 4\nkv_heads = 2\ndim = 32\ntokens = [8]\ncontext = 32\nkind = "decode"\n'
E2E = 'command = "e2e"\nmodel = "tiny"\ninput_len = 8\noutput_len = 4\nbatch_size = 1\nwarmup = 0\niters = 1\n'
MANY = ",".join(map(str, range(1, 20_001)))  # 60,000: tests/test_check_plan.py

# (file text, overrides, words of the one error line); each run twice: with --check and without
SCENARIOS = {
    "kernel-unknown-backend": (KERNEL + 'backend = "fa9"\n', [], "--backend: unknown backend 'fa9'"),
    "e2e-unknown-backend": (E2E + 'backend = "fa9"\n', [], "--backend: unknown backend 'fa9'"),
    "kernel-backend-not-here": (KERNEL + 'backend = "vllm-fa2"\n', [], "vllm-fa2 is unavailable here"),
    "e2e-backend-not-here": (E2E + 'backend = "flashinfer"\n', [], "flashinfer is unavailable here"),
    "e2e-tp-2-one-device": (E2E + "tp = 2\n", [], "--tp 2: needs one process per rank"),
    "e2e-tp-3-heads": (E2E + "tp = 3\n", [], "--tp 3:"),
    "e2e-tp-override": (E2E, ["--tp", "2"], "--tp 2: needs one process per rank"),
    "kernel-gpu-scenario": (KERNEL + 'cpu = "needs FA2 paged kernels"\n', [], "needs a GPU (needs FA2 paged kernels)"),
    "e2e-gpu-scenario": (E2E + 'cpu = "CUDA graphs"\n', [], "needs a GPU (CUDA graphs)"),
    "cpu-false-without-why": (KERNEL + "cpu = false\n", [], "cpu: expected true"),
    "cpu-empty": (KERNEL + 'cpu = "  "\n', [], "cpu: expected true"),
    "cpu-number": (KERNEL + "cpu = 1\n", [], "cpu: expected true"),
    "cpu-list": (KERNEL + 'cpu = ["yes"]\n', [], "cpu: expected true"),
    "graph-mode-on-cpu": (KERNEL + 'mode = "graph"\n', [], "--mode: graph mode needs a CUDA GPU"),
    "cuda-device-on-cpu": (KERNEL + 'device = "cuda"\n', [], "--device: CUDA was asked for"),
    "e2e-cuda-device-on-cpu": (E2E + 'device = "cuda:0"\n', [], "--device"),
    "fused-nobody-has": (KERNEL + 'strategy = "fused"\n', [], "--strategy: none of reference has a fused strategy"),
    "kind-all-and-more": (KERNEL.replace('kind = "decode"', 'kind = ["all", "decode"]'), [], "--kind: all cannot"),
    "file-unknown-dtype": (KERNEL + 'dtype = "fp8"\n', [], "--dtype: unknown dtype 'fp8'"),
    "file-unknown-device": (KERNEL + 'device = "tpu"\n', [], "--device: unknown device 'tpu'"),
    "file-unknown-mode": (KERNEL + 'mode = "fast"\n', [], "--mode: unknown mode 'fast'"),
    "file-unknown-kind": (KERNEL.replace('"decode"', '"decoded"'), [], "--kind: unknown kind 'decoded'"),
    "e2e-file-unknown-strategy": (E2E + 'strategy = "splat"\n', [], "--strategy: unknown strategy 'splat'"),
    "override-unknown-strategy": (KERNEL, ["--strategy", "unified,bogus"], "--strategy: unknown strategy 'bogus'"),
    "override-unknown-device": (KERNEL, ["--device", "gpu"], "--device: unknown device 'gpu'"),
    "huge-token-list-twice": (KERNEL.replace("[8]", f"[{MANY},7]"), [], "--tokens: 7 is listed twice"),
    "huge-context-list-twice": (KERNEL.replace("context = 32", f"context = [{MANY},7]"), [], "context: 7 is listed twice"),
    "devices-on-cpu": (KERNEL + 'devices = "cuda:0,cuda:1"\n', [], "--devices"),
}

# command-line choices of every command that takes them
CHOICES = {
    "kernel-strategy": (["kernel", "--heads", "4", "--dim", "32", "--strategy", "splat"], "--strategy"),
    "kernel-kind": (["kernel", "--heads", "4", "--dim", "32", "--kind", "decode,nope"], "--kind"),
    "kernel-mode": (["kernel", "--heads", "4", "--dim", "32", "--mode", "both,fast"], "--mode"),
    "kernel-dtype": (["kernel", "--heads", "4", "--dim", "32", "--dtype", "fp32"], "--dtype"),
    "kernel-backend": (["kernel", "--heads", "4", "--dim", "32", "--backend", "reference,fa9"], "--backend"),
    "kernel-device": (["kernel", "--heads", "4", "--dim", "32", "--device", "cuda:"], "--device"),
    "e2e-strategy": (["e2e", "--strategy", "unified,unified2"], "--strategy"),
    "e2e-dtype": (["e2e", "--dtype", "float32"], "--dtype"),
    "e2e-device": (["e2e", "--device", "mps"], "--device"),
    "verify-device": (["verify", "--device", "cpu0"], "--device"),
    "doctor-device": (["doctor", "--device", "xla"], "--device"),
    "kernel-no-such-option": (["kernel", "--bogus"], "--bogus: no such option"),
    "run-option-before-its-file": (["run", "--bogus"], "--bogus: not an option of run"),
}


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root and a digest of its bytes: what 'nothing changed' compares."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("a user's file\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "notes.md").write_text("mine\n")
    return tmp_path


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_scenario_this_machine_cannot_run_is_refused_by_check_and_run_alike(workdir, name, check):
    text, overrides, words = SCENARIOS[name]
    path = workdir / "s.toml"
    path.write_text(text)
    before = snapshot(workdir)
    out = ["--check"] if check else ["--out", "results/run"]
    line = assert_one_error_line(invoke("run", path, *out, *overrides), words)
    assert line.startswith(f"error: {path}: ") or (not check and 'command = "e2e"' in text)  # e2e's own line
    assert snapshot(workdir) == before


@pytest.mark.parametrize("name", list(CHOICES))
def test_a_bad_choice_on_the_command_line_is_one_line(workdir, name):
    argv, flag = CHOICES[name]
    before = snapshot(workdir)
    line = assert_one_error_line(invoke(*argv, "--out", "results/run") if argv[0] != "doctor" else invoke(*argv))
    assert line.startswith(f"error: {flag}")
    assert snapshot(workdir) == before


def test_a_sweep_none_of_whose_20000_points_fits_is_refused_at_once(workdir, monkeypatch):
    monkeypatch.setattr("attnbench.kernels.inputs.available_host_bytes", lambda: 2**10)
    path = workdir / "s.toml"
    path.write_text(KERNEL.replace("[8]", f"[{MANY}]"))
    before = snapshot(workdir)
    line = assert_one_error_line(invoke("run", path, "--check"), "the largest point (decode, 20000 tokens")
    assert "GiB on the CPU" in line and snapshot(workdir) == before


FLAG_CHOICES = {"--strategy": STRATEGIES, "--kind": (*KINDS, "all"), "--mode": (*MODES, "both"),
                "--dtype": tuple(DTYPE_ALIASES), "--backend": BACKENDS}


@SETTINGS
@given(flag=st.sampled_from(sorted(FLAG_CHOICES)),
       value=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_:", min_size=1, max_size=12))
def test_any_name_outside_a_flags_choices_is_one_line(flag, value):
    if value in FLAG_CHOICES[flag]:
        return
    line = assert_one_error_line(invoke("kernel", "--heads", "4", "--dim", "32", flag, value), flag)
    assert f"unknown {flag[2:]} {value!r}" in line


@SETTINGS
@given(cpu=st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False),
                     st.just(False), st.just(""), st.lists(st.text(alphabet="abc xyz", max_size=3), max_size=2)))
def test_any_cpu_value_but_true_or_a_reason_is_one_line(tmp_path, cpu):
    import json

    path = tmp_path / "s.toml"
    path.write_text(KERNEL + f"cpu = {json.dumps(cpu)}\n")  # JSON's numbers, lists, false and "" are TOML's too
    assert_one_error_line(invoke("run", path, "--check"), "cpu: expected true")
