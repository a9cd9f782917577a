"""--profile on the CPU through the CLI (traces, breakdown, report), the breakdown against ops
counted by hand, NVTX ranges without CUDA, a real TensorBoard reading the traces, and on a GPU the
flash-attention kernels in the breakdown of a vllm-fa2 point and of an e2e run."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from attnbench import profiler
from attnbench.results import profiling
from attnbench.kernels.backends.registry import get_backend
from attnbench.cli.main import app
from attnbench.profiler import BREAKDOWN_COLUMNS, nvtx_range, profile_callable, profile_to_run
from attnbench.results.profiling import write_report
from attnbench.kernels.workload import KINDS

TINY = ["--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "8", "--context", "32", "--budget-ms", "5"]
KERNEL_CONTEXT = ["kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "prefix_ratio", "backend",
                  "strategy", "mode", "calls_per_sample"]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("profiled")
    invoke("kernel", *TINY, "--device", "cpu", "--profile", "--out", str(out))
    return out


def labels_of(kind: str, strategy: str) -> str:
    hit = "-hit50" if kind == "prefix" else ""
    return f"{kind}-8-4x32{hit}-reference-{strategy}-eager"


EXPECTED_LABELS = {labels_of(k, s) for k in KINDS for s in ("unified", "split")}


# --- the CPU path of `kernel --profile` --------------------------------------------------------

def test_tensorboard_and_chrome_traces_exist_for_every_label(cpu_run):
    tb = sorted((cpu_run / "profile" / "tb").glob("*.pt.trace.json"))
    assert {p.name.split(".")[0] for p in tb} == EXPECTED_LABELS
    for label in EXPECTED_LABELS:
        trace = json.loads((cpu_run / "profile" / "chrome" / f"{label}.json").read_text())
        names = {e.get("name", "") for e in trace["traceEvents"]}
        assert any(n.startswith("ProfilerStep#") for n in names)  # the schedule's active steps
        assert any(n.startswith("aten::") for n in names)  # the reference backend's ops were traced


def test_breakdown_csv_has_the_columns_and_consistent_rows(cpu_run):
    df = pd.read_csv(cpu_run / "profile_kernels.csv")
    assert list(df.columns) == ["label", *KERNEL_CONTEXT, *BREAKDOWN_COLUMNS]
    assert set(df["label"]) == EXPECTED_LABELS
    assert set(df["source"]) == {"cpu"}  # no GPU: CPU ops' self time
    for label, rows in df.groupby("label"):
        assert rows["share"].sum() == pytest.approx(1.0, abs=1e-3)
        assert list(rows["rank"]) == list(range(1, len(rows) + 1))
        assert rows["total_us"].is_monotonic_decreasing
        assert (rows["total_us"] - rows["calls"] * rows["mean_us"]).abs().max() < 0.01 * rows["calls"].max()
        assert (rows["steps"] == 3).all() and (rows["calls_per_step"] == rows["calls"] / 3).all()
        assert not rows["kernel"].str.startswith("ProfilerStep").any()
        assert rows["kernel"].isin(["aten::bmm", "aten::matmul", "aten::softmax", "aten::_softmax"]).any()
        assert rows["chrome_trace"].iloc[0] == f"profile/chrome/{label}.json"


def test_report_and_summary_name_every_label(cpu_run):
    text = (cpu_run / "profile.md").read_text()
    for label in EXPECTED_LABELS:
        assert f"## {label}" in text
    assert "| # | kernel | calls / step | total µs | mean µs | share | attention |" in text
    summary = (cpu_run / "summary.md").read_text()
    assert "## Profile (--profile)" in summary
    results = pd.read_csv(cpu_run / "results.csv")
    assert len(results) == len(EXPECTED_LABELS) and set(results["verdict"]) == {"pass"}


def test_without_profile_no_profile_files_are_written(tmp_path):
    invoke("kernel", *TINY, "--kind", "decode", "--strategy", "unified", "--device", "cpu", "--out", str(tmp_path))
    assert not (tmp_path / "profile").exists() and not (tmp_path / "profile_kernels.csv").exists()
    assert "Profile" not in (tmp_path / "summary.md").read_text()


def test_profiler_output_stays_in_the_profile_folder_not_the_console(tmp_path, capfd):
    """kineto writes `USDT: ... profiler_start/stop` (and warnings) to file descriptors 1 and 2: on
    ea3bb51 16 such lines landed in the progress bar. Now they go to profile/profiler.log."""
    result = CliRunner().invoke(app, ["kernel", *TINY, "--kind", "decode", "--device", "cpu", "--profile",
                                      "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out, err = capfd.readouterr()
    for text in (out, err, result.output):
        assert not any(word in text for word in ("USDT", "profiler_start", "profiler_stop", "gpuGetDeviceCount"))
    assert (tmp_path / "profile" / "profiler.log").is_file()
    assert "profile/profiler.log" in result.stdout


def test_native_output_goes_to_the_log_and_python_s_to_the_console(tmp_path, capfd):
    log = tmp_path / "p" / "native.log"
    with profiler.native_output_to(log):
        os.write(1, b"native out\n")
        os.write(2, b"native err\n")
        print("python out", flush=True)
        print("python err", file=sys.stderr, flush=True)
    out, err = capfd.readouterr()
    assert "native" not in out + err and "python out" in out and "python err" in err
    assert log.read_text() == "native out\nnative err\n"
    with profiler.native_output_to(log):  # the profiler's Python warnings (torch's "Profiler clears events") too
        warnings.warn("Profiler clears events at the end of each cycle.", UserWarning)
    assert "Profiler clears" not in "".join(capfd.readouterr()) and "Profiler clears" in log.read_text()
    os.write(1, b"after\n")  # the descriptors are back
    assert capfd.readouterr().out == "after\n"


def test_a_cpu_profile_says_attention_s_share_is_not_known_and_why(cpu_run):
    """Every CPU row said "attention 0.0%": the reference backend's ops name no attention kernel."""
    lines = profiling.overview(profiling.load_breakdown(cpu_run))
    assert lines and all(o["attention_share"] is None for o in lines)
    text = (cpu_run / "profile.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| ") and "-reference-" in line]
    assert len(table) == len(EXPECTED_LABELS) and all("| n/a on the CPU |" in line for line in table)
    assert "0.0%" not in " ".join(line.split("|")[5] for line in table)
    assert "Attention: n/a on the CPU: the reference backend's attention is plain torch ops" in text


def test_a_device_profile_keeps_its_attention_share():
    rows = pd.DataFrame([{"label": "x", "source": "device", "kernel": k, "total_us": us, "share": us / 4.0,
                          "attention": a, "steps": 1} for k, us, a in (("flash_fwd", 3.0, True), ("memcpy", 1.0, False))])
    assert profiling.overview(rows)[0]["attention_share"] == pytest.approx(0.75)


# --- the breakdown itself ----------------------------------------------------------------------

def test_breakdown_counts_the_ops_the_callable_ran(tmp_path):
    a = torch.randn(32, 32)

    def step():
        for _ in range(7):
            torch.mm(a, a)
        torch.softmax(a, dim=-1)

    result = profile_callable(step, tmp_path, "counted", active=2)
    rows = {r["kernel"]: r for r in result.rows}
    assert rows["aten::mm"]["calls"] == 14 and rows["aten::mm"]["calls_per_step"] == 7
    assert rows["aten::softmax"]["calls"] == 2
    assert result.source == "cpu" and result.steps == 2
    assert result.tb_trace.name.startswith("counted.") and result.tb_trace.exists()
    assert json.loads(result.chrome_trace.read_text())["traceEvents"]


def test_a_failing_callable_becomes_an_error_row_not_an_exception(tmp_path):
    def broken():
        raise RuntimeError("kernel exploded")

    assert profile_to_run(broken, tmp_path, "broken-label", {"backend": "x"}) is None
    df = pd.read_csv(tmp_path / "profile_kernels.csv")
    assert list(df["source"]) == ["error"] and "kernel exploded" in df["kernel"].iloc[0]
    assert "broken-label: RuntimeError: kernel exploded" in write_report(tmp_path).read_text()


def test_attention_kernels_are_classified_by_name():
    names = ["void flash::flash_fwd_splitkv_kernel<Traits>(flash::Flash_fwd_params)", "fmha_cutlassF_f16",
             "void at::native::vectorized_elementwise_kernel<4>(int)", "ampere_bf16_s16816gemm_bf16_128x64",
             "paged_attention_v2_kernel", "flash_attn::combine"]
    assert [bool(profiler.ATTENTION_KERNEL.search(n)) for n in names] == [True, True, False, False, True, True]
    assert profiling.short_name(names[0]) == "flash::flash_fwd_splitkv_kernel<Traits>"


# --- NVTX --------------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the path without CUDA")
def test_nvtx_range_is_a_no_op_without_cuda(monkeypatch):
    def refuse(*args):
        raise AssertionError("NVTX called without CUDA")

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", refuse)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", refuse)
    ran = []
    with nvtx_range("decode step"):
        ran.append(1)
    assert ran == [1]
    with pytest.raises(KeyError):  # an exception inside passes through untouched
        with nvtx_range("x"):
            raise KeyError("inside")


def test_nvtx_range_shows_as_a_range_inside_a_profiler_window(tmp_path):
    def step():
        with nvtx_range("decode step"):
            torch.ones(4).sum()

    result = profile_callable(step, tmp_path, "ranged", active=2)
    assert result.ranges["decode step"][0] == 2
    assert "decode step" not in {r["kernel"] for r in result.rows}  # an annotation, not work


def test_e2e_profile_records_engine_steps_as_ranges(tmp_path):
    invoke("e2e", "--model", "tiny", "--warmup", "0", "--iters", "1", "--device", "cpu", "--input-len", "8",
           "--output-len", "3", "--batch-size", "2", "--strategy", "unified", "--profile", "--out", str(tmp_path))
    df = pd.read_csv(tmp_path / "profile_kernels.csv")
    label = "e2e-in8-out3-bs2-reference-unified-eager"
    assert set(df["label"]) == {label}
    ranges = df[df["source"] == "range"].set_index("kernel")["calls"].to_dict()
    assert ranges == {"prefill step": 1, "decode step": 2}  # one request run: 1 prefill + 2 decode steps
    assert (tmp_path / "profile" / "chrome" / f"{label}.json").exists()
    assert "ranges (count, mean wall)" in (tmp_path / "profile.md").read_text()


# --- a real client: TensorBoard with the torch-tb-profiler plugin ------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="the tensorboard extra is not installed "
                    "(pip install 'attnbench[tensorboard]')")
@pytest.mark.skipif(importlib.util.find_spec("torch_tb_profiler") is None, reason="torch-tb-profiler is not installed "
                    "(pip install 'attnbench[tensorboard]')")
def test_tensorboard_profiler_plugin_lists_the_run(cpu_run, tmp_path):
    port = _free_port()
    command = [shutil.which("tensorboard") or sys.executable, *([] if shutil.which("tensorboard") else
               ["-m", "tensorboard.main"]), "--logdir", str(cpu_run), "--host", "127.0.0.1", "--port", str(port)]
    log = (tmp_path / "tensorboard.log").open("w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/data/plugin/pytorch_profiler"
    runs, workers = None, None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                runs = _get_json(f"{base}/runs")
                if "profile/tb" in runs["runs"]:
                    workers = _get_json(f"{base}/workers?run=profile/tb&view=Overview")
                    break
            except OSError:  # not listening yet
                pass
            time.sleep(1)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
    output = (tmp_path / "tensorboard.log").read_text()[-3000:]
    assert runs is not None, f"TensorBoard never answered on port {port}:\n{output}"
    assert "profile/tb" in runs["runs"], f"runs: {runs}\n{output}"
    assert set(workers) == EXPECTED_LABELS  # every trace file parsed as one worker


# --- on a GPU ----------------------------------------------------------------------------------

def _fa2_or_skip():
    reason = get_backend("vllm-fa2").unavailable_reason()
    if reason:
        pytest.skip(f"vllm-fa2 unavailable: {reason}")


@pytest.mark.gpu
@needs_cuda
def test_fa2_point_breakdown_names_flash_attention_kernels(tmp_path):
    _fa2_or_skip()
    invoke("kernel", "--heads", "8", "--kv-heads", "2", "--dim", "128", "--tokens", "64", "--kind", "decode,mixed",
           "--context", "512", "--backend", "vllm-fa2", "--mode", "both", "--budget-ms", "50", "--profile",
           "--out", str(tmp_path))
    df = pd.read_csv(tmp_path / "profile_kernels.csv")
    assert set(df["source"]) == {"device"}, df[df["source"] != "device"]
    assert df["label"].nunique() == 2 * 2 * 2  # kinds x strategies x modes
    for label, rows in df.groupby("label"):
        flash = rows[rows["kernel"].str.contains("flash", case=False)]
        assert not flash.empty, f"{label}: {list(rows['kernel'])}"
        assert flash["attention"].all()
        assert flash["share"].sum() > 0.5, f"{label}: attention kernels are {flash['share'].sum():.1%} of the time"
    graph = df[df["mode"] == "graph"]
    assert graph["kernel"].str.contains("flash").any()  # graph replays: kernels still named


@pytest.mark.gpu
@needs_cuda
def test_fa2_e2e_breakdown_has_an_attention_share(tmp_path):
    _fa2_or_skip()
    invoke("e2e", "--model", "tiny", "--backend", "vllm-fa2", "--warmup", "1", "--iters", "2", "--input-len", "32",
           "--output-len", "8", "--batch-size", "4", "--profile", "--out", str(tmp_path))
    df = pd.read_csv(tmp_path / "profile_kernels.csv")
    work = df[df["source"] == "device"]
    for label, rows in work.groupby("label"):
        share = rows.loc[rows["attention"].astype(bool), "share"].sum()
        assert 0 < share < 1, f"{label}: attention share {share}"
    ranges = df[df["source"] == "range"]
    assert {"prefill step", "decode step"} <= set(ranges["kernel"])
