"""`attnbench doctor`: on the CPU the reference passes and the run exits 0; a backend whose output is
off by a constant or NaN is a FAIL line and exit 1; --json writes the whole report; bad input is one
error line. The wrong backends live here and join through ATTNBENCH_EXTRA_BACKENDS (test_doctor:...),
so this module imports little at the top: a doctor process imports it while the registry is loading."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnbench.kernels.backends.base import Plan
from attnbench.kernels.backends.reference import ReferenceBackend

pytest_plugins = ["fake_backends"]
ROOT = Path(__file__).resolve().parent.parent
WRONG = "test_doctor:OffByConstantBackend,test_doctor:NaNBackend"


class _Spoiled(ReferenceBackend):
    """The reference, with one more launch in every plan: it spoils the output the others wrote."""

    oracle = False

    def spoil(self, q, k_cache, v_cache, out: torch.Tensor) -> None:
        raise NotImplementedError

    def plan(self, strategy, point, metadata) -> Plan:
        plan = super().plan(strategy, point, metadata)
        return dataclasses.replace(plan, launches=(*plan.launches, self.spoil))


class OffByConstantBackend(_Spoiled):
    name = "test-off"
    description = "test only: the reference's output plus 0.5"

    def spoil(self, q, k_cache, v_cache, out: torch.Tensor) -> None:
        out.add_(0.5)


class NaNBackend(_Spoiled):
    name = "test-nan"
    description = "test only: NaN everywhere"

    def spoil(self, q, k_cache, v_cache, out: torch.Tensor) -> None:
        out.fill_(float("nan"))


def invoke(*args: str):
    from typer.testing import CliRunner

    from attnbench.cli.main import app

    return CliRunner().invoke(app, ["doctor", *args], env={"COLUMNS": "200"})


@pytest.fixture
def wrong_backends():
    """test-off and test-nan in this process's registry, for one test."""
    from attnbench.kernels.backends import registry

    before = dict(registry.REGISTRY)
    registry._load_extra_backends(WRONG)
    assert not registry.EXTRA_BACKEND_ERRORS
    yield
    registry.REGISTRY.clear()
    registry.REGISTRY.update(before)


def doctor_process(*args: str, gpu: bool = False, **env: str) -> subprocess.CompletedProcess:
    """`attnbench doctor` in a process of its own (on the CPU unless `gpu`): as a user runs it, and
    torch.compile's caches (flex goes through dynamo) stay out of the other tests' process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           **({} if gpu else {"CUDA_VISIBLE_DEVICES": ""}), **env}
    return subprocess.run([sys.executable, "-m", "attnbench", "doctor", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=900 if gpu else 300)


@pytest.fixture(scope="module")
def cpu_run():
    """The whole doctor, every backend, on the CPU."""
    done = doctor_process()
    assert "Traceback" not in done.stderr, done.stderr
    return done


def line_of(output: str, backend: str) -> str:
    lines = [line for line in output.splitlines() if line.split()[:1] == [backend]]
    assert len(lines) == 1, output
    return lines[0]


def test_on_the_cpu_the_reference_is_ok_and_doctor_exits_0(cpu_run):
    assert cpu_run.returncode == 0, cpu_run.stdout + cpu_run.stderr
    reference = line_of(cpu_run.stdout, "reference")
    assert " ok: 6 rows (decode, prefill, mixed" in reference and "unified, split; eager" in reference
    assert "ran on the CPU" in cpu_run.stdout and "GPU kernel backends were not checked" in cpu_run.stdout
    assert cpu_run.stdout.strip().splitlines()[-1].startswith("doctor: ")


def test_every_backend_gets_one_line_and_the_environment_comes_first(cpu_run):
    from attnbench.kernels.backends import registry

    for name in registry.REGISTRY:
        assert line_of(cpu_run.stdout, name).split()[-1]  # ok, FAIL or skipped with what or why
    first = cpu_run.stdout.splitlines()
    for name in ("attnbench", "torch", "driver", "GPU", "SM clock", "persistence", "clocks locked"):
        assert any(line.startswith(name) for line in first[:12]), name


def test_wrong_backends_named_through_the_environment_fail_and_exit_1():
    done = doctor_process("--backend", "reference,test-off,test-nan", ATTNBENCH_EXTRA_BACKENDS=WRONG)
    assert done.returncode == 1, done.stdout + done.stderr
    assert " ok: " in line_of(done.stdout, "reference")
    off, nan = line_of(done.stdout, "test-off"), line_of(done.stdout, "test-nan")
    assert " FAIL: fail at decode N=8 8/2x64 unified eager: rel L2 error" in off
    assert " FAIL: " in nan and "output has NaN/inf" in nan
    assert "doctor: 1 ok, 2 FAIL, 0 skipped on cpu" in done.stdout and "Traceback" not in done.stderr


def test_json_holds_one_entry_per_backend_and_every_row(tmp_path, wrong_backends):
    path = tmp_path / "doctor.json"
    result = invoke("--device", "cpu", "--backend", "reference,test-nan", "--json", str(path))
    assert result.exit_code == 1, result.output
    report = json.loads(path.read_text())
    assert [b["backend"] for b in report["backends"]] == ["reference", "test-nan"]
    assert [b["status"] for b in report["backends"]] == ["ok", "FAIL"]
    assert report["exit_code"] == 1 and report["device"] == "cpu" and report["environment"]["torch"]
    nan_rows = report["backends"][1]["rows"]
    assert len(nan_rows) == 6 and {r["verdict"] for r in nan_rows} == {"fail"}
    assert all(r["rel_l2_error"] is None for r in nan_rows)  # NaN is written as null: strict JSON
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))


@pytest.mark.parametrize("make", ["file", "symlink", "no parent"])
def test_a_bad_json_path_is_one_error_line_and_nothing_runs(tmp_path, make):
    path = tmp_path / "report.json"
    if make == "file":
        path.write_text("keep me")
    elif make == "symlink":
        path.symlink_to(tmp_path / "elsewhere.json")
    else:
        path = tmp_path / "missing" / "report.json"
    result = invoke("--device", "cpu", "--json", str(path))
    assert result.exit_code == 1
    assert result.output.count("error:") == 1 and "--json" in result.output
    assert "reference" not in result.output  # refused before anything ran
    assert not (tmp_path / "elsewhere.json").exists()
    if make == "file":
        assert path.read_text() == "keep me"


@pytest.mark.parametrize("args", [["--backend", "nope"], ["--device", "tpu"], ["--backend", ","]])
def test_bad_flags_are_one_error_line(args):
    result = invoke(*args)
    assert result.exit_code == 1 and result.output.strip().startswith("error:"), result.output
    assert len(result.output.strip().splitlines()) == 1  # refused before anything is reported


def test_an_extra_backend_that_does_not_load_is_a_fail_line():
    from attnbench.kernels.backends import registry

    error = "ATTNBENCH_EXTRA_BACKENDS: cannot load nope:X (ModuleNotFoundError: No module named 'nope')"
    registry.EXTRA_BACKEND_ERRORS.append(error)  # the list the loader fills in place, as it would
    try:
        result = invoke("--device", "cpu", "--backend", "reference")
        unknown = invoke("--device", "cpu", "--backend", "X")
    finally:
        registry.EXTRA_BACKEND_ERRORS.remove(error)
    assert result.exit_code == 1
    assert f"FAIL: {error}" in line_of(result.output, "ATTNBENCH_EXTRA_BACKENDS")
    assert unknown.exit_code == 1 and len(unknown.output.strip().splitlines()) == 1
    assert unknown.output.startswith("error: --backend: unknown backend 'X'") and "cannot load nope:X" in unknown.output


def test_a_dead_cuda_context_fails_its_backend_and_leaves_the_rest_unchecked(misbehaving):
    result = invoke("--device", "cpu", "--backend", "test-dead-context,reference")
    assert result.exit_code == 1, result.output
    assert "FAIL: the CUDA context died in its checks" in line_of(result.output, "test-dead-context")
    assert "skipped: not checked: the CUDA context died in test-dead-context's checks" in \
        line_of(result.output, "reference")


def test_without_nvidia_smi_each_gpu_field_says_unknown_and_why():
    env = {"attnbench_version": "0", "git_sha": None, "python": "3", "platform": "p", "torch": "2", "torch_cuda": "12",
           "libraries": {"vllm": None}, "gpus": ["G"], "nvidia_smi": None,
           "gpu": {"name": "G", "compute_capability": "9.0", "multiprocessors": 132, "memory_gib": 80.0,
                   "driver": None, "clocks_mhz_sm_mem_max_sm": None, "clock_policy": None}}
    from attnbench.runs.doctor import environment_lines

    lines = {line[:14].strip(): line[14:].strip() for line in environment_lines(env)}
    for name in ("driver", "SM clock", "persistence", "clocks locked"):
        assert lines[name] == "unknown: nvidia-smi not found on PATH"
    assert lines["attnbench"] == "0, git unknown: not a git checkout"
    assert lines["libraries"] == "vllm not installed" and lines["torch"] == "2, built with CUDA 12"


def test_locked_clocks_are_said():
    policy = {"persistence_mode": "Enabled", "applications_clocks": "1755 MHz",
              "default_applications_clocks": "1980 MHz", "applications_clocks_reason": "Active", "clocks_locked": True}
    env = {"attnbench_version": "0", "git_sha": "abc", "python": "3", "platform": "p", "torch": "2", "torch_cuda": None,
           "libraries": {}, "gpus": ["G"], "nvidia_smi": "/usr/bin/nvidia-smi",
           "gpu": {"name": "G", "compute_capability": "9.0", "multiprocessors": 132, "memory_gib": 80.0,
                   "driver": "570.1", "clocks_mhz_sm_mem_max_sm": "345 MHz, 2619 MHz, 1980 MHz", "clock_policy": policy}}
    from attnbench.runs.doctor import environment_lines

    lines = {line[:14].strip(): line[14:].strip() for line in environment_lines(env)}
    assert lines["driver"] == "570.1" and lines["persistence"] == "Enabled"
    assert lines["SM clock"].startswith("345 MHz now") and "1980 MHz max" in lines["SM clock"]
    assert lines["clocks locked"].startswith("yes (application clocks 1755 MHz, default 1980 MHz")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_every_available_backend_passes(tmp_path):
    path = tmp_path / "doctor.json"
    done = doctor_process("--json", str(path), gpu=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(path.read_text())
    assert report["device"].startswith("cuda")
    statuses = {b["backend"]: b["status"] for b in report["backends"]}
    assert statuses["reference"] == "ok" and "FAIL" not in statuses.values()
    graph_checked = [b for b in report["backends"] if any(r["mode"] == "graph" for r in b["rows"])]
    assert all(b["verify"] for b in graph_checked)  # every graph-safe backend checked also ran verify's safe cases
